"""The markers leaklab adds to pytest, and when they skip."""

from __future__ import annotations

import pytest
import torch

from leaklab.measure import cuda_usable

MARKERS = {
    "cuda": "cuda: needs a CUDA device; skipped with a reason where torch sees none",
    "multi_gpu": "multi_gpu: needs two or more CUDA devices; skipped with a reason otherwise",
    "needs_ipython": "needs_ipython: needs IPython installed; skipped with a reason otherwise",
}


def skip_reason(item: pytest.Item) -> str | None:
    """Why ``item`` cannot run on this machine, or None."""
    if item.get_closest_marker("multi_gpu") and (not cuda_usable() or torch.cuda.device_count() < 2):
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return f"needs 2 CUDA devices, this machine has {found}"
    if item.get_closest_marker("cuda") and not cuda_usable():
        return "needs a CUDA device: torch.cuda.is_available() is False on this machine"
    if item.get_closest_marker("needs_ipython"):
        try:
            import IPython  # noqa: F401
        except ImportError:
            return "needs IPython, which is not installed here"
    return None
