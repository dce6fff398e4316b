"""Results files: every run's verdicts and figures, the torch version and the device, in one JSON.

``leaklab compare OLD NEW`` reads two of them (say, before and after a torch upgrade) and says
what changed; it fails when a fix started leaking or a leak stopped reproducing.
"""

from __future__ import annotations

import json
import platform
import socket
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from leaklab.report import Report, device_name
from leaklab.verdict import BOUNDED, GROWS, PLATEAU, format_bytes

FORMAT = 1
# The fields a results file keeps of a report (the full per-step series included).
_KEPT = ("name", "verdict", "resource", "per_step_bytes", "device", "device_name", "torch", "steps", "warmup",
         "error", "failed_step", "stopped_by_budget", "released", "median_step_seconds", "step_seconds",
         "metrics", "counters", "sites", "history", "resources")


def environment(device: str) -> dict[str, Any]:
    info = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "device_name": device_name(device),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cuda": torch.version.cuda,
    }
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info["total_memory"] = props.total_memory
        info["driver"] = cuda_driver_version()
    return info


def cuda_driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py, where installed

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - no NVML here: the driver stays unknown
        return None


def entry(report: Report, **extra: Any) -> dict[str, Any]:
    data = report.to_json()
    kept = {key: data[key] for key in _KEPT}
    kept.update(extra)
    return kept


def write_results(path: str | Path, entries: list[dict[str, Any]], device: str, note: str = "",
                  benchmarks: dict[str, Any] | None = None) -> None:
    """Write one results file. ``entries`` come from :func:`entry`; each has a unique ``name``."""
    document = {
        "format": FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "note": note,
        "environment": environment(device),
        "runs": {f"{e['device']}/{e['name']}": e for e in sorted(entries, key=lambda e: (e["device"], e["name"]))},
        "benchmarks": benchmarks or {},
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")


def load_results(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no results file at {path}")
    document = json.loads(path.read_text())
    if document.get("format") != FORMAT or "runs" not in document:
        raise ValueError(f"{path} is not a leaklab results file (format {FORMAT})")
    return document


def case_runs(document: dict[str, Any], slug: str) -> list[dict[str, Any]]:
    """A case's runs in a results document: the leak first, then its fixes, by name."""
    runs = [run for run in document["runs"].values() if run.get("case") == slug]
    return sorted(runs, key=lambda run: (run["role"] != "leak", run["name"]))


# --------------------------------------------------------------------------- compare
@dataclass
class Change:
    run: str
    what: str
    old: str
    new: str
    regression: bool


def _role(run_name: str) -> str:
    parts = run_name.split("/", 1)[-1].split(":")
    return parts[1] if len(parts) > 1 else ""


def compare(old: dict[str, Any], new: dict[str, Any], tolerance: float = 0.25,
            time_tolerance: float = 1.5) -> list[Change]:
    """What changed between two results documents.

    A regression is a fix that now grows (or plateaus) where it was bounded, a leak that no
    longer reproduces (it was growing, now it is bounded), or a run that now raises where it did
    not. Bytes per step moving by more than ``tolerance`` (relative) and a step time ratio
    beyond ``time_tolerance`` are reported but are not regressions.
    """
    changes: list[Change] = []
    old_runs, new_runs = old["runs"], new["runs"]
    for name in sorted(set(old_runs) | set(new_runs)):
        if name not in new_runs:
            changes.append(Change(name, "run missing", "present", "missing", False))
            continue
        if name not in old_runs:
            changes.append(Change(name, "new run", "missing", new_runs[name]["verdict"], False))
            continue
        before, after = old_runs[name], new_runs[name]
        role = _role(name)
        if before["verdict"] != after["verdict"]:
            regression = (
                (role == "fix" and before["verdict"] == BOUNDED and after["verdict"] in (GROWS, PLATEAU))
                or (role == "leak" and before["verdict"] in (GROWS, PLATEAU) and after["verdict"] == BOUNDED)
                or after["verdict"] == "raises" and before["verdict"] != "raises"
                or before["verdict"] == "raises" and after["verdict"] != "raises"
            )
            changes.append(Change(name, "verdict", before["verdict"], after["verdict"], regression))
        for resource, result in after.get("resources", {}).items():
            previous = before.get("resources", {}).get(resource)
            if previous is None:
                continue
            if previous["verdict"] != result["verdict"] and resource != after.get("resource"):
                changes.append(Change(name, f"{resource} verdict", previous["verdict"], result["verdict"], False))
            a, b = previous["per_step_bytes"], result["per_step_bytes"]
            scale = max(abs(a), abs(b), result.get("floor_bytes", 0))
            if scale and abs(b - a) > tolerance * scale and max(abs(a), abs(b)) > result.get("floor_bytes", 0):
                changes.append(Change(name, f"{resource} bytes/step", format_bytes(a), format_bytes(b), False))
        t_old, t_new = before.get("median_step_seconds"), after.get("median_step_seconds")
        if t_old and t_new and not (1 / time_tolerance <= t_new / t_old <= time_tolerance):
            changes.append(Change(name, "step time", f"{t_old * 1e3:.2f} ms", f"{t_new * 1e3:.2f} ms ({t_new / t_old:.2f}x)", False))
    return changes


def format_changes(changes: list[Change]) -> str:
    if not changes:
        return "no changes"
    width = max(len(c.run) for c in changes)
    lines = [f"{'run':<{width}}  {'what':<26} {'old':>14} -> {'new':<22} regression"]
    for c in changes:
        lines.append(f"{c.run:<{width}}  {c.what:<26} {c.old:>14} -> {c.new:<22} {'YES' if c.regression else ''}")
    return "\n".join(lines)
