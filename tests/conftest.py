"""Fixtures shared by the tests that run pytest in-process (pytester)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def check_once_outside_pytester():
    """The first tensor made under a check imports ~900 modules (torch's dynamo and inductor,
    sympy). pytester's in-process runs drop the modules first imported inside them, and torch
    cannot import those a second time in the outer session (a TORCH_LIBRARY registered twice,
    breaking every later check in that process, whichever test file comes next): run a training
    step under a check out here first, once per session, before any in-process run."""
    from leaklab.runner import RunOptions
    from leaklab.scripts import run_script

    run_script(ROOT / "fixes/hook_caching.py", options=RunOptions(steps=2, warmup=0))
