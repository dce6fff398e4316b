"""A known blind spot, measured: a slow leak of Python objects beside one fall in the same counter.

A step keeps ``rate`` small objects a step and, once, at step ``at``, drops ``size`` objects it
made before warm-up (a one-off clean-up: a first-epoch cache released, an iterator replaced). Each
combination is checked with the default settings on python_objects alone, and its verdict written
to results/one-off-fall/cpu-torch<version>.json, which the closing notes render. A fall in the
measured series makes its trend fail the "held" test (the last third no higher than the first by
much), a clear bounded that is not confirmed; a fall in the long pass makes a run of ten steps
that did not rise (``stalled``), which is how a saw-tooth is told from a leak. Both are the rule
working as written; the leak is missed all the same.

usage: python3 tools/one_off_fall.py
"""

import json
import platform
import subprocess
from pathlib import Path

import torch

from leaklab.runner import RunOptions, run_factory

ROOT = Path(__file__).resolve().parents[1]
RATES = (1, 4, 16)           # objects kept a step
SIZES = (5, 20, 50)          # objects dropped once
AT = (8, 15, 24, 40, 100)    # the step (warm-up's 5 included) where they are dropped


class Handle:
    """One small object: one block of pymalloc's."""


def factory(rate: int, size: int, at: int):
    def build(device: str):
        kept, made_before, done = [], [Handle() for _ in range(size)], [0]

        def step() -> None:
            done[0] += 1
            kept.extend(Handle() for _ in range(rate))  # the leak
            if done[0] == at:
                made_before.clear()  # the one-off clean-up

        return step

    return build


def main() -> None:
    rows = []
    for rate in RATES:
        for size in SIZES:
            for at in AT:
                report = run_factory(factory(rate, size, at), "cpu", RunOptions(resources=("python_objects",)))
                rows.append({"kept_per_step": rate, "dropped_once": size, "at_step": at, "verdict": report.verdict,
                             "long_pass_steps": report.long_pass_steps})
                print(rows[-1], flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    out = ROOT / "results" / "one-off-fall" / f"cpu-torch{torch.__version__.split('+')[0]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": commit, "torch": torch.__version__, "python": platform.python_version(),
                               "settings": "defaults (20 steps, 5 warm-up), python_objects only", "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
