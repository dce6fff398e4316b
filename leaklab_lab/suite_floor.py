"""What sets the pace of the README's two commands on the CPU machine (``tools/suite_floor.py``),
for docs/harness.md: one entry per results file under results/suite-floor/, every figure read
from it, and the least time the README's test command can take while it runs the catalog's cases
as it does now (its workers' start-up and their time in tests that run case scripts), set
against the suite's target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from leaklab_lab.fresh_clone import SUITE_TARGET_SECONDS

FOLDER = Path("results") / "suite-floor"
SLOWEST_SHOWN = 4


def _entry(name: str, run: dict[str, Any]) -> list[str]:
    machine = run["machine"]
    load = (f"idle (load {run['load_before'][0]:.2f} on {machine['cores']} cores at the start)" if run["idle"] else
            f"busy (load {run['load_before'][0]:.2f} at the start on {machine['cores']} cores)")
    imports = run["import_seconds"]
    scripts = run["case_scripts"]
    wall = sum(script["seconds"] for script in scripts)
    steps = sum(script["step_seconds"] for script in scripts)
    cpu = sum(script["cpu_seconds"] for script in scripts)
    slowest = sorted(scripts, key=lambda script: -script["seconds"])[:SLOWEST_SHOWN]
    shown = ", ".join(f"`{script['case']}` {script['script'].split('/')[0]} {script['seconds']:.1f} s "
                      f"(steps {script['step_seconds']:.1f} s{', a fresh interpreter' if script['isolated'] else ''})"
                      for script in slowest)
    lines = [
        f"  - [{name}]({FOLDER.as_posix()}/{name}): commit {run['commit']}, {run['date']}, CPU: {machine['cpu']}, "
        f"Python {machine['python']}, torch {run['torch']}; {load}{' (' + run['note'] + ')' if run.get('note') else ''}.",
        f"    - Every worker process pays `import torch` ({imports['torch']:.1f} s, the median of three fresh "
        f"interpreters) and torch._dynamo, which torch.optim imports at a step's first optimizer "
        f"({imports['torch and torch._dynamo']:.1f} s for both).",
        f"    - The {len(scripts)} case scripts `leaklab run` runs by default, one after another in one process with one "
        f"torch thread: {wall:.1f} s wall, {cpu:.1f} s of CPU (the process and its children), of which their measured "
        f"steps (the series and its confirmation; not warm-up or longer passes) took {steps:.1f} s; the rest is the "
        f"check's own work (warm-up, readings, added passes, naming, release) and the fresh interpreters of the cases "
        f"that need one. The longest: {shown}.",
    ]
    least = []
    for number, suite in enumerate(run["suite_runs"], 1):
        workers = suite["workers"]
        busy = "; ".join(f"{worker} busy {figures['busy']:.1f} s, {figures['busy_running_cases']:.1f} s of it in tests "
                         "that run case scripts" for worker, figures in workers.items())
        start = max(figures["first_test_at"] for figures in workers.values())
        cases = max(figures["busy_running_cases"] for figures in workers.values())
        lines.append(f"    - `{suite['command']}`, run {number}: {suite['seconds']:.1f} s wall (exit {suite['exit']}, "
                     f"{suite['last_line']!r}); the first test started at {start:.1f} s; {busy}.")
        if suite["exit"] == 0:
            other = max(figures["busy"] - figures["busy_running_cases"] for figures in workers.values())
            least.append((start + cases, start, cases, number, other))
    if least:
        floor, start, cases, number, other = min(least)
        verdict = "over" if floor > SUITE_TARGET_SECONDS else "within"
        lines.append(
            f"    - The least the test command can take here while it runs the catalog's cases as it does now, with "
            f"every other test left out (run {number}, the least of {len(least)} that passed): the workers' start-up "
            f"{start:.1f} s + the busier worker's tests that run case scripts {cases:.1f} s = {floor:.1f} s, {verdict} "
            f"the suite's {SUITE_TARGET_SECONDS} s target; the other tests took up to {other:.1f} s more of one "
            "worker's time in that run.")
    return lines


def render(root: Path) -> list[str]:
    """The lines for docs/harness.md: none where nothing was measured."""
    entries = [line for path in sorted((root / FOLDER).glob("*.json"))
               for line in _entry(path.name, json.loads(path.read_text()))]
    if not entries:
        return []
    return ["- **What sets the pace of the README's two commands on the CPU machine** (`tools/suite_floor.py`):", *entries]
