"""The sensitivity benchmark: the smallest leaks each counter should see, and bounded steps that
are tricky, each run once under the default check on one device (a row in :data:`ASKED` watches what it names). It says, per resource and
device, the smallest leak detected and how many bounded controls were called growing.

The steps live in tests/data/edge_steps.py (the CPU tests assert the key rows there too).
"""

from __future__ import annotations

import time
from typing import Any

from leaklab.runner import RunOptions
from leaklab.scripts import run_script
from leaklab_lab.cases import ROOT

EDGES = ROOT / "tests" / "data" / "edge_steps.py"

# step -> (what leaks, bytes per step it leaks on average, the resource where it lives)
LEAKS: dict[str, tuple[str, float, str]] = {
    "block_512": ("one 512 B allocator block per step, no-op step", 512, "tensors"),
    "tensor_4b": ("one torch.zeros(1) kept per step (4 B of storage)", 4, "tensors"),
    "every_third_1k": ("1 KiB of tensors every third step", 1024 / 3, "tensors"),
    "starts_late": ("1 KiB of tensors per step from the 15th call on", 1024, "tensors"),
    "mlp_leak_512": ("512 B of tensors per step inside an MLP training step", 512, "tensors"),
    "resnet18_leak_512": ("512 B of tensors per step inside a resnet18 training step", 512, "tensors"),
    "bytes_512": ("a bytes(512) kept per step (545 B, malloc): one Python object a step", 545, "python_objects"),
    "c_heap_256": ("256 B of C heap (malloc, as a C extension would) kept per step", 256, "host_heap"),
    "bytes_256": ("a bytes(256) kept per step (289 B, pymalloc): seen by python_objects", 289, "python_objects"),
    "closure_per_step": ("one closure kept per step (a handler appended every epoch)", 1, "python_objects"),
    "hook_partial_per_step": ("one functools.partial per step in a module's hook dict", 1, "python_objects"),
    "thread_per_step": ("one thread started per step that never ends", 1, "threads"),
    "mapped_page_per_step": ("one 4 KiB page of a mapped file touched and kept per step", 4096, "mapped_files"),
    "bytes_4k": ("a bytes(4096) kept per step (malloc)", 4129, "host_heap"),
    "opens_files": ("one file descriptor left open per step", 1, "open_fds"),
    "small_strings": ("100,000 small strings kept per step", 100_000, "host_heap"),
    "cyclic_garbage_kept": ("a self-referencing record with 100 kB kept per step", 100_000, "host_heap"),
}
# Rows that watch a resource the default check leaves out (none now: every row runs the default check).
ASKED: dict[str, tuple[str, ...]] = {}
CONTROLS: dict[str, str] = {
    "noop": "a step that does nothing",
    "mlp": "an MLP training step",
    "resnet18": "a resnet18 training step",
    "first_torch_call_late": "first torch call after warm-up",
    "lazy_init_late": "25 MiB of state set up once at the 9th call",
    "cache_fills": "a 12-entry cache that fills, then stops (plateau is the truth)",
    "periodic_spike": "every 4th step allocates and frees a large buffer",
    "variable_batch": "batch sizes from a seeded generator, last output kept",
    "decreasing": "memory that decreases",
    "random_temporaries": "random-size temporaries freed each step",
    "cyclic_garbage": "cyclic garbage per step, only the last 4 records kept",
    "thread_pool_reused": "a thread pool made once and given work every step",
    "file_opened_and_closed": "a file opened, read and closed every step",
    "mapping_read_every_step": "one mapping opened once and read every step",
}


def run_grid(device: str, progress: Any = None) -> dict[str, Any]:
    """Every leak and control on ``device``: verdicts, rates and what they imply."""
    rows: dict[str, Any] = {}
    for name in [*LEAKS, *CONTROLS]:
        started = time.perf_counter()
        report = run_script(EDGES, name, device, RunOptions(resources=ASKED.get(name, ())))
        leak = LEAKS.get(name)
        rows[name] = {
            "what": leak[0] if leak else CONTROLS[name],
            "kind": "leak" if leak else "control",
            "true_per_step": leak[1] if leak else 0,
            "verdict": report.verdict,
            "resource": report.resource,
            "per_step": report.per_step_bytes,
            "summary": report.summary(),
            "restarts": len(report.restarts),
            "confirmed_steps": report.confirmed_steps + report.long_pass_steps,
            "uncertain": report.uncertain,
            "seconds": time.perf_counter() - started,
        }
        if progress:
            progress(name, report)
    leaks = [r for r in rows.values() if r["kind"] == "leak"]
    controls = [r for r in rows.values() if r["kind"] == "control"]
    return {
        "rows": rows,
        "leaks_detected": sum(r["verdict"] == "grows" for r in leaks),
        "leaks": len(leaks),
        "false_alarms": sum(r["verdict"] == "grows" for r in controls),
        "controls": len(controls),
    }
