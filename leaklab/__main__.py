from leaklab.cli import run

run()
