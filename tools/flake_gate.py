#!/usr/bin/env python3
"""The flake gate: run the CPU suite and `leaklab run` N times and report every flip.

    python3 tools/flake_gate.py --runs 10                    # serial
    python3 tools/flake_gate.py --runs 10 --workers 2        # the suite under pytest-xdist -n 2
    python3 tools/flake_gate.py --runs 10 --load --json gate.json   # beside two CPU-bound processes

Each run is ``python3 -m pytest -q -p no:cacheprovider`` (writing ``--leaklab-results`` and a
JUnit XML) then ``python3 -m leaklab run --device cpu --results ...``. A flip is a run (a case's
leak or fix) whose verdict, or one of whose per-resource verdicts, differs between any two of
the results files (suite and `leaklab run`, every run), or that is missing from some of them. A
failure is a failing or erroring test, or a case that `leaklab run` says is not as catalogued.
``--load`` starts two busy-looping processes for the whole gate and stops them at the end, also
on Ctrl-C or SIGTERM (and they stop by themselves should this script be killed outright).

The last line gives the counts: runs, flips, failures. Exit 0 when there is no flip and no
failure, 1 otherwise, 2 for bad options.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from leaklab.files import UnwritablePath, atomic_write, check_writable  # noqa: E402

# A CPU-bound process that also ends by itself once its parent (this gate) is gone.
BUSY = ("import os\nparent = os.getppid()\ni = 0\nwhile True:\n    i += 1\n"
        "    if i % 2_000_000 == 0 and os.getppid() != parent:\n        break\n")


# --------------------------------------------------------------------------- load
@contextmanager
def cpu_load(processes: int = 2) -> Iterator[list[subprocess.Popen]]:
    """``processes`` busy loops for the duration of the block; terminated (then killed) at its
    end, however the block ends."""
    started: list[subprocess.Popen] = []
    try:
        for _ in range(processes):
            started.append(subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.DEVNULL))
        yield started
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# --------------------------------------------------------------------------- reading what a run left
def failures_from_junit(path: Path) -> list[str]:
    """``test id: first line of the message`` for every failing or erroring test in a JUnit XML."""
    failures = []
    for case in ET.parse(path).getroot().iter("testcase"):
        for kind in ("failure", "error"):
            problem = case.find(kind)
            if problem is not None:
                test = f"{case.get('classname', '')}::{case.get('name', '')}"
                message = (problem.get("message") or problem.text or "").strip().splitlines()
                failures.append(f"{test} ({kind}): {message[0][:200] if message else ''}")
    return failures


def failures_from_run_table(stdout: str) -> list[str]:
    """Rows of `leaklab run`'s table whose case did not behave as catalogued."""
    return [" ".join(line.split()) for line in stdout.splitlines() if "  NO: " in line]


def verdicts(document: dict[str, Any]) -> dict[str, str]:
    """Every verdict in a results file: ``<run>`` and ``<run> <resource>``."""
    found = {}
    for key, run in document.get("runs", {}).items():
        found[key] = run["verdict"]
        for resource, result in run.get("resources", {}).items():
            found[f"{key} {resource}"] = result["verdict"]
    return found


def find_flips(samples: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """``samples`` are (label, source, results document), e.g. ("suite #2", "suite", doc). A key
    flips when its verdicts differ across the documents, or when it is missing from one document
    of a source that has it in another."""
    by_source: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for label, source, document in samples:
        by_source.setdefault(source, []).append((label, verdicts(document)))
    seen: dict[str, dict[str, list[str]]] = {}  # key -> verdict -> labels
    for entries in by_source.values():
        keys = set().union(*(found for _, found in entries))
        for key in keys:
            for label, found in entries:
                seen.setdefault(key, {}).setdefault(found.get(key, "missing"), []).append(label)
    return [{"what": key, "verdicts": where} for key, where in sorted(seen.items()) if len(where) > 1]


# --------------------------------------------------------------------------- one run
class Gate:
    def __init__(self, args: argparse.Namespace, folder: Path) -> None:
        self.args = args
        self.folder = folder
        self.samples: list[tuple[str, str, dict[str, Any]]] = []
        self.failures: list[dict[str, Any]] = []
        self.runs: list[dict[str, Any]] = []
        self.current: subprocess.Popen | None = None

    def _call(self, command: list[str]) -> tuple[int, str]:
        self.current = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            output, _ = self.current.communicate()
        finally:
            if self.current.poll() is None:  # interrupted: stop it before going on
                self.current.terminate()
                try:
                    self.current.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.current.kill()
            code = self.current.wait()
            self.current = None
        return code, output

    def _results(self, label: str, source: str, path: Path, run: int) -> None:
        try:
            self.samples.append((label, source, json.loads(path.read_text())))
        except (OSError, ValueError) as exc:
            self.failures.append({"run": run, "where": source, "what": f"no readable results file {path}: {exc}"})

    def run(self, number: int) -> None:
        args, folder = self.args, self.folder
        suite_results, junit = folder / f"suite-{number}.json", folder / f"junit-{number}.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--leaklab-results={suite_results}",
                   f"--junitxml={junit}"]
        command += ["-n", str(args.workers)] if args.workers else []
        command += shlex.split(args.pytest_args)
        started = time.monotonic()
        code, output = self._call(command)
        record = {"run": number, "pytest_exit": code, "pytest_seconds": round(time.monotonic() - started, 1),
                  "pytest_tail": output.strip().splitlines()[-1:]}
        print(f"run {number}: pytest exit {code} in {record['pytest_seconds']} s: {' '.join(record['pytest_tail'])}",
              flush=True)
        found = failures_from_junit(junit) if junit.is_file() else []
        self.failures += [{"run": number, "where": "pytest", "what": what} for what in found]
        if code not in (0, 1) or (code == 1 and not found):
            self.failures.append({"run": number, "where": "pytest", "what": f"pytest exited {code}: "
                                  + " | ".join(output.strip().splitlines()[-3:])})
        self._results(f"suite #{number}", "suite", suite_results, number)

        run_results = folder / f"run-{number}.json"
        command = [sys.executable, "-m", "leaklab", "run", "--device", "cpu", "--results", str(run_results), *args.cases]
        started = time.monotonic()
        code, output = self._call(command)
        record.update(run_exit=code, run_seconds=round(time.monotonic() - started, 1))
        print(f"run {number}: leaklab run exit {code} in {record['run_seconds']} s", flush=True)
        rows = failures_from_run_table(output)
        self.failures += [{"run": number, "where": "leaklab run", "what": row} for row in rows]
        if code not in (0, 1) or (code == 1 and not rows):
            self.failures.append({"run": number, "where": "leaklab run", "what": f"exited {code}: "
                                  + " | ".join(output.strip().splitlines()[-3:])})
        self._results(f"run #{number}", "run", run_results, number)
        self.runs.append(record)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="how many times to run both (default 10)")
    parser.add_argument("--workers", "-n", type=int, default=0, help="run the suite under pytest-xdist -n WORKERS")
    parser.add_argument("--load", action="store_true", help="beside two CPU-bound processes, started and stopped here")
    parser.add_argument("--json", metavar="PATH", help="write a JSON summary here")
    parser.add_argument("--keep", metavar="DIR", help="keep every results file and JUnit XML in DIR")
    parser.add_argument("--pytest-args", default="", help="more pytest arguments, e.g. \"-k loss_accumulation\"")
    parser.add_argument("cases", nargs="*", help="cases for `leaklab run` (default: all)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    if args.workers < 0:
        parser.error("--workers must be 0 (serial) or more")
    return args


def _commit() -> str:
    """The checkout the gate ran (``git describe``), so that its figures name their harness."""
    done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _stop(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.json:
            check_writable(args.json)
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=True)
    except (UnwritablePath, OSError) as exc:
        print(f"flake gate: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="leaklab-flake-gate-"))
    gate = Gate(args, folder)
    started = time.monotonic()
    interrupted = False
    try:
        with cpu_load(2 if args.load else 0):
            for number in range(1, args.runs + 1):
                gate.run(number)
    except KeyboardInterrupt:
        interrupted = True
        print("flake gate: interrupted; the load is stopped", file=sys.stderr)
    flips = find_flips(gate.samples)
    for flip in flips:
        where = "; ".join(f"{verdict} in {', '.join(labels)}" for verdict, labels in flip["verdicts"].items())
        print(f"FLIP {flip['what']}: {where}")
    for failure in gate.failures:
        print(f"FAIL run {failure['run']} ({failure['where']}): {failure['what']}")
    mode = ", ".join(filter(None, [f"pytest -n {args.workers}" if args.workers else "pytest serial",
                                   "under load (2 busy processes)" if args.load else "no load",
                                   "interrupted" if interrupted else ""]))
    summary = {"runs": len(gate.runs), "runs_asked": args.runs, "flips": len(flips), "failures": len(gate.failures),
               "workers": args.workers, "load": args.load, "interrupted": interrupted,
               "seconds": round(time.monotonic() - started, 1), "files": str(folder),
               "commit": _commit(), "finished": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
               "compared": len({key for _, _, doc in gate.samples for key in verdicts(doc)}),
               "flip_list": flips, "failure_list": gate.failures, "run_list": gate.runs}
    if args.json:
        atomic_write(args.json, json.dumps(summary, indent=1) + "\n")
    print(f"flake gate: runs {len(gate.runs)}, flips {len(flips)}, failures {len(gate.failures)} ({mode}; "
          f"{summary['compared']} verdicts compared across {len(gate.samples)} results files)")
    if interrupted:
        return 130
    return 1 if flips or gate.failures else 0


if __name__ == "__main__":
    sys.exit(main())
