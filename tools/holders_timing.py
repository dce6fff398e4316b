"""What naming the holder costs per growing run (issue 29: at most 1 s, median, CPU): every
catalog case's leak and every held-out step (tests/data/fresh_steps.py) run under the default
check, with :func:`leaklab.holders.name_holder` timed around each call (its walk only, not the
naming steps). Prints one line per run, then the median and the largest.

Usage: python3 tools/holders_timing.py [--device cpu|cuda] [--cases-only|--fresh-only]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import leaklab.holders as holders  # noqa: E402
from leaklab.runner import RunOptions  # noqa: E402
from leaklab.scripts import load_script, run_script  # noqa: E402

SPENT: list[float] = []
_name_holder = holders.name_holder


def _timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return _name_holder(*args, **kwargs)
    finally:
        SPENT.append(time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cases-only", action="store_true")
    parser.add_argument("--fresh-only", action="store_true")
    args = parser.parse_args()
    holders.name_holder = _timed
    import leaklab.runner as runner

    runner.holders.name_holder = _timed
    runs: list[tuple[str, Path, str, RunOptions]] = []
    if not args.fresh_only:
        from leaklab_lab.cases import discover, run_name

        for case in discover():
            if args.device.split(":")[0] in case.devices and not case.meta.get("isolate") and not case.meta.get("env"):
                options = case.options(args.device, False)
                options.name = run_name(case, "leak")
                runs.append((options.name, case.leak, case.factory, options))
    if not args.cases_only:
        fresh = Path(__file__).resolve().parent.parent / "tests" / "data" / "fresh_steps.py"
        runs += [(f"fresh/{name}", fresh, name, RunOptions()) for name in load_script(fresh).FAMILY]
    costs = []
    for name, script, factory, options in runs:
        SPENT.clear()
        try:
            report = run_script(script, factory, args.device, options)
        except Exception as exc:  # a case this in-process run cannot build (one that needs torchrun): skipped, said
            print(f"{name}: skipped ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})", flush=True)
            continue
        if report.verdict != "grows" or not SPENT:
            continue
        costs.append(sum(SPENT))
        chain = report.holder_chain()
        print(f"{name}: {sum(SPENT):.3f} s  {chain if chain is not None else '-'}", flush=True)
    if costs:
        print(f"growing runs named: {len(costs)}; holder naming median {statistics.median(costs):.3f} s, "
              f"largest {max(costs):.3f} s, over 1 s: {sum(c > 1 for c in costs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
