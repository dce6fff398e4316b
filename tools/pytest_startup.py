"""Benchmark: what installing leaklab costs pytest's start-up in a project that never uses it.

Makes a small project (20 test files, no torch, no leaklab) in a temporary folder and times
``python -m pytest --co -q`` there, with leaklab's plugin (its pytest11 entry point, loaded from
ROOT through PYTHONPATH) and with ``-p no:leaklab``, both in every round in a random order, ROUNDS
times each. On a busy machine that difference is noise of +-250 ms, so the plugin's own share is
also read directly: ``python -X importtime`` of ``leaklab.plugin`` after pytest (median of
ROUNDS), and whether that import loads torch. Prints the figures and writes them to
results/startup/pytest-startup-<host>.json (or --output). The bar (issue 14): within 50 ms.

    python3 tools/pytest_startup.py [--root CHECKOUT] [--rounds 15] [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BAR_SECONDS = 0.050


def make_project(folder: Path, files: int = 20) -> None:
    for i in range(files):
        (folder / f"test_module_{i}.py").write_text(
            "import json\n\n\n" + "".join(f"def test_{i}_{j}():\n    assert json.loads('[1]') == [1]\n\n\n"
                                          for j in range(5)))


def time_collect(folder: Path, root: Path, disable: bool) -> float:
    command = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"]
    if disable:
        command += ["-p", "no:leaklab"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"pytest --co failed in {folder}:\n{done.stdout}\n{done.stderr}")
    return elapsed


def plugin_import(root: Path) -> tuple[float, bool]:
    """Seconds ``import leaklab.plugin`` takes (cumulative, after pytest) and whether torch came with it."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    code = "import pytest, sys; import leaklab.plugin; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True,
                          cwd=tempfile.gettempdir(), check=True)
    line = next(line for line in done.stderr.splitlines() if line.rstrip().endswith("| leaklab.plugin"))
    return int(line.split("|")[1]) / 1e6, done.stdout.strip() == "True"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the leaklab checkout to measure (default: this one)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="leaklab-startup-") as tmp:
        folder = Path(tmp)
        make_project(folder)
        # the plugin is really loaded where it is not disabled (else the figures compare nothing)
        env = {**os.environ, "PYTHONPATH": str(args.root)}
        trace = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "--trace-config", "-p", "no:cacheprovider"],
                               cwd=folder, env=env, capture_output=True, text=True).stdout
        if "leaklab" not in trace:
            raise SystemExit("leaklab's plugin is not loaded by pytest here (is leaklab installed?)")
        load_before = os.getloadavg()[0]
        time_collect(folder, args.root, False)  # warm the file system caches
        with_plugin, without = [], []
        order = random.Random(0)
        for _ in range(args.rounds):  # both in every round, in a random order (no position bias)
            for disable in order.sample([False, True], 2):
                (without if disable else with_plugin).append(time_collect(folder, args.root, disable))
    result = {
        "what": "median wall time of `python -m pytest --co -q -p no:cacheprovider` in a 100-test project "
                "that never uses leaklab, with leaklab's plugin and with -p no:leaklab; plugin_import_s: "
                "python -X importtime's cumulative time of `import leaklab.plugin` after pytest (median)",
        "root": str(args.root),
        "host": platform.node(),
        "python": platform.python_version(),
        "rounds": args.rounds,
        "with_leaklab_s": round(statistics.median(with_plugin), 4),
        "no_leaklab_s": round(statistics.median(without), 4),
        # the fastest rounds, less disturbed by other work on a shared machine
        "with_leaklab_min_s": round(min(with_plugin), 4),
        "no_leaklab_min_s": round(min(without), 4),
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }
    result["difference_s"] = round(result["with_leaklab_s"] - result["no_leaklab_s"], 4)
    imports = [plugin_import(args.root) for _ in range(args.rounds)]
    result["plugin_import_s"] = round(statistics.median(seconds for seconds, _ in imports), 4)
    result["plugin_import_loads_torch"] = any(torch for _, torch in imports)
    result["within_bar"] = result["plugin_import_s"] <= BAR_SECONDS and not result["plugin_import_loads_torch"]
    print(json.dumps(result, indent=2))
    output = args.output or ROOT / "results" / "startup" / f"pytest-startup-{platform.node() or 'host'}.json"
    output.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["within_bar"] else 1


if __name__ == "__main__":
    sys.exit(main())
