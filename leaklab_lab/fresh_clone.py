"""The README's two commands timed from a fresh clone (``tools/fresh_clone_timing.sh``), for
docs/harness.md: one line per results file under results/fresh-clone/, every figure read from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FOLDER = Path("results") / "fresh-clone"
# Issue 31: on an idle 2-core CPU machine, the first command (install included) within 5 minutes,
# and the README's test command itself within the suite's target (issue 27).
FIRST_COMMAND_TARGET_SECONDS = 300
SUITE_TARGET_SECONDS = 45


def _command(command: dict[str, Any]) -> str:
    parts = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in command["parts"].items())
    code = command["exit"]
    outcome = "exit 0" if code == 0 else "not run (its install failed)" if code is None else f"exit {code}"
    last = f", {command['last_line']!r}" if command.get("last_line") else ""
    return f"`{command['command']}` {command['seconds']:.0f} s ({parts}; {outcome}{last})"


def _line(name: str, run: dict[str, Any]) -> str:
    machine, cores = run["machine"], run["machine"]["cores"]
    load = (f"idle (load {run['load_before'][0]:.2f} on {cores} cores at the start)" if run["idle"] else
            f"busy: load {run['load_before'][0]:.2f} at the start and {run['load_after'][0]:.2f} at the end on "
            f"{cores} cores, so these times are not a newcomer's")
    first, second = run["commands"]
    target = ""
    if run["idle"] and first["exit"] == 0:
        within = first["seconds"] <= FIRST_COMMAND_TARGET_SECONDS
        target = f"; the first command {'within' if within else 'past'} its {FIRST_COMMAND_TARGET_SECONDS} s target"
    suite = next((seconds for part, seconds in second["parts"].items() if "pytest" in part), None)
    if run["idle"] and second["exit"] == 0 and suite is not None:
        target += f"; the test command {'within' if suite <= SUITE_TARGET_SECONDS else 'past'} its {SUITE_TARGET_SECONDS} s target"
    note = f" ({run['note']})" if run.get("note") else ""
    return (f"  - [{name}]({FOLDER.as_posix()}/{name}): commit {run['commit']} ({run['branch']}), {run['date']}, "
            f"CPU: {machine['cpu']}, Python {machine['python']}, torch {run['torch']} ({run['torch_from']}); {load}: "
            f"{_command(first)}; {_command(second)}{target}{note}")


def render(root: Path) -> list[str]:
    """The lines for docs/harness.md: none where no fresh clone was timed."""
    lines = [_line(path.name, json.loads(path.read_text())) for path in sorted((root / FOLDER).glob("*.json"))]
    if not lines:
        return []
    return ["- **The README's two commands from a fresh clone** (`tools/fresh_clone_timing.sh`: main cloned, a fresh "
            "venv, the CPU build of torch as the README says, each command as written; the first within "
            f"{FIRST_COMMAND_TARGET_SECONDS // 60} minutes on an idle 2-core machine is issue 31's target):", *lines]
