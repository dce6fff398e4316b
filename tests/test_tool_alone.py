"""The tool (package ``leaklab``) apart from the lab: no module of it imports the lab or its extras."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAB_AND_EXTRAS = ("leaklab_lab", "torchvision", "matplotlib", "pytest_benchmark")

IMPORT_EVERY_MODULE = """
import importlib, json, pkgutil, sys
import leaklab
names = sorted(m.name for m in pkgutil.walk_packages(leaklab.__path__, "leaklab."))
for name in names:
    if name == "leaklab.__main__":  # runs the CLI when imported; it imports leaklab.cli, imported here
        continue
    importlib.import_module(name)
print(json.dumps({"modules": names, "loaded": sorted(sys.modules)}))
"""


@pytest.mark.end_to_end  # fresh interpreters: run by .ci/run with -m end_to_end
def test_no_module_of_the_tool_imports_the_lab_or_its_extras():
    done = subprocess.run([sys.executable, "-c", IMPORT_EVERY_MODULE], capture_output=True, text=True, cwd=ROOT,
                          check=True)
    found = json.loads(done.stdout)
    assert {"leaklab.plugin", "leaklab.watch", "leaklab.runner", "leaklab.cli"} <= set(found["modules"])
    loaded = {name.split(".")[0] for name in found["loaded"]}
    assert loaded.isdisjoint(LAB_AND_EXTRAS), sorted(loaded & set(LAB_AND_EXTRAS))
