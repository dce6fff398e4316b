"""This repository's suite: the lab's plugin (markers, the catalog's cases, the results file),
and, on a bare checkout where leaklab is not installed (the GPU box has torch and pytest but no
package registry), the tool's plugin too. Where leaklab is installed, its pytest11 entry point
has already loaded the tool's plugin."""

from importlib.metadata import entry_points

LEAKLAB_INSTALLED = any(ep.name == "leaklab" for ep in entry_points(group="pytest11"))

pytest_plugins = ["pytester", "leaklab_lab.plugin"] + ([] if LEAKLAB_INSTALLED else ["leaklab.plugin"])
