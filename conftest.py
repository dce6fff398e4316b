"""Lets a bare checkout run the suite: `python3 -m pytest -m cuda` on a machine where leaklab is
not installed (the GPU box has torch and pytest but no package registry). Where leaklab is
installed, its pytest11 entry point has already loaded the plugin."""

from importlib.metadata import entry_points

LEAKLAB_INSTALLED = any(ep.name == "leaklab" for ep in entry_points(group="pytest11"))

pytest_plugins = ["pytester"] + ([] if LEAKLAB_INSTALLED else ["leaklab.plugin"])
