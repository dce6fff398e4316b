"""leaklab: PyTorch memory-leak reproductions and their fixes, measured, plus a leak check for your own step.

The names below are imported on first use (PEP 562), not with the package: pytest imports
``leaklab.plugin`` in every project where leaklab is installed, and that must not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leaklab.report import Report
    from leaklab.runner import BadInput, RunOptions, check, run_factory
    from leaklab.scripts import run_script
    from leaklab.watch import watch

__version__ = "0.1.0"
__all__ = ["BadInput", "Report", "RunOptions", "__version__", "check", "run_factory", "run_script", "watch"]

_HOMES = {
    "Report": "leaklab.report",
    "BadInput": "leaklab.runner",
    "RunOptions": "leaklab.runner",
    "check": "leaklab.runner",
    "run_factory": "leaklab.runner",
    "run_script": "leaklab.scripts",
    "watch": "leaklab.watch",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'leaklab' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
