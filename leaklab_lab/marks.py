"""The markers leaklab adds to pytest, and when they skip."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from leaklab.measure import cuda_usable

if TYPE_CHECKING:  # `leaklab run` uses unmet() without pytest installed
    import pytest

MARKERS = {
    "cuda": "cuda: needs a CUDA device; skipped with a reason where torch sees none",
    "multi_gpu": "multi_gpu: needs two or more CUDA devices; skipped with a reason otherwise",
    "needs_ipython": "needs_ipython: needs IPython installed; skipped with a reason otherwise",
    "slow": "slow: a case that takes long (fresh interpreters, multi-process jobs); deselected by default, run with -m slow",
    "end_to_end": "end_to_end: runs the CLI or pytest in fresh interpreters, end to end (each pays Python's and torch's "
                  "start-up); deselected by default, run with -m end_to_end (.ci/run does)",
    "distributed": "distributed: runs `leaklab check` under torchrun (or --nproc) on gloo with 2 ranks on the CPU; "
                   "end to end too (fresh interpreters), so run with -m end_to_end (.ci/run does) or -m distributed",
    "models": "models: a real-model step of real_models/ under the check (its libraries are the models extra; a "
              "missing one skips with its name); deselected by default, run with -m models (.ci/run does)",
}


def unmet(markers: list[str]) -> str | None:
    """Why something needing ``markers`` cannot run on this machine, or None."""
    if "multi_gpu" in markers and (not cuda_usable() or torch.cuda.device_count() < 2):
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return f"needs 2 CUDA devices, this machine has {found}"
    if "cuda" in markers and not cuda_usable():
        return "needs a CUDA device: torch.cuda.is_available() is False on this machine"
    if "needs_ipython" in markers:
        try:
            import IPython  # noqa: F401
        except ImportError:
            return "needs IPython, which is not installed here"
    return None


def skip_reason(item: pytest.Item) -> str | None:
    """Why ``item`` cannot run on this machine, or None."""
    return unmet([name for name in ("multi_gpu", "cuda", "needs_ipython") if item.get_closest_marker(name)])
