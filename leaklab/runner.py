"""Running steps: build the step, warm it up, take a baseline, then sample after every step.

A *factory* is a callable ``factory(device) -> step`` where ``step()`` runs one training or
evaluation step. It is how the catalog's scripts and users' own code are both put under the
check. A step may return a mapping of numbers (a loss scale, a gradient norm): those are kept
per step as *metrics*, for symptoms that are not memory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import torch

from leaklab import attribution
from leaklab.measure import (
    CPU_TENSORS,
    DEVICE_ALLOCATED,
    DEVICE_RESERVED,
    HOST_HEAP,
    PINNED_HOST,
    SHARED_MEMORY,
    WORKER_MEMORY,
    Probe,
    cuda_usable,
    device_counters,
    format_exception,
    live_children,
)
from leaklab.report import Report, ResourceResult
from leaklab.verdict import NOISE_FLOOR, PLATEAU_MIN, GiB, MiB, decide, decide_truncated

Step = Callable[[], Any]
Factory = Callable[[str], Step]

# A series that passes its budget is stopped and reported as growing, so that no leak case can
# take the machine down.
DEFAULT_BUDGET = {
    DEVICE_ALLOCATED: 512 * MiB,
    CPU_TENSORS: 512 * MiB,
    HOST_HEAP: 1 * GiB,
    DEVICE_RESERVED: 2 * GiB,
    PINNED_HOST: 1 * GiB,
    WORKER_MEMORY: 1 * GiB,
    SHARED_MEMORY: 2 * GiB,
}

# After the step is dropped, these must be back where they were (caches such as reserved or
# pinned memory are allowed to stay, and the heap keeps lazily initialised state).
RELEASE_TOLERANCE = {DEVICE_ALLOCATED: 64 * 1024, CPU_TENSORS: 64 * 1024, WORKER_MEMORY: 0, SHARED_MEMORY: 0}


# Steps run after the measured series with allocation stacks recorded (see run_factory).
ATTRIBUTION_STEPS = 5


class BadInput(ValueError):
    """The thing to check cannot be run: a missing file, a factory that is not one, bad numbers."""


@dataclass
class RunOptions:
    steps: int = 20
    warmup: int = 5
    resources: tuple[str, ...] = ()
    budget: dict[str, int] = field(default_factory=dict)
    attribute: bool = False
    snapshot: str | None = None            # cuda: write the allocator snapshot here (memory_viz)
    child_wait: float = 10.0               # seconds children get to exit after the step is dropped
    exhaust_at: int | None = None          # bytes; default: the device's (or host's) total memory
    progress: Callable[[int, int, dict[str, int]], None] | None = None
    name: str = ""

    def validate(self, device: str) -> None:
        if self.steps < 2:
            raise BadInput(f"steps must be at least 2 to see a trend, got {self.steps}")
        if self.warmup < 0:
            raise BadInput(f"warmup must be 0 or more, got {self.warmup}")
        if device not in ("cpu", "cuda"):
            raise BadInput(f"device must be 'cpu' or 'cuda', got {device!r}")
        if device == "cuda" and not cuda_usable():
            raise BadInput("--device cuda was asked for, but torch sees no CUDA device here")


def capacity_bytes(device: str) -> int:
    if device == "cuda":
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return psutil.virtual_memory().total


def _call_step(step: Step, metrics: dict[str, list[float]]) -> None:
    result = step()
    if isinstance(result, Mapping):
        for key, value in result.items():
            if isinstance(value, (int, float, bool)) or (isinstance(value, torch.Tensor) and value.numel() == 1):
                metrics.setdefault(str(key), []).append(float(value))


def run_factory(factory: Factory, device: str = "cpu", options: RunOptions | None = None) -> Report:
    """Build a step with ``factory(device)``, run it under the probe, and decide the verdicts."""
    options = options or RunOptions()
    options.validate(device)
    budget = {**DEFAULT_BUDGET, **options.budget}
    report = Report(device=device, steps=options.steps, warmup=options.warmup, name=options.name)
    children_before = {p.pid for p in live_children()}
    probe = Probe(device, tuple(options.resources), track_tensors=options.attribute)
    with probe:
        probe.settle(clear_workspaces=True)
        before = probe.sample()
        step = factory(device)
        if not callable(step):
            raise BadInput(f"the factory returned {type(step).__name__}, not a callable that runs one step")
        samples: list[dict[str, int]] = []
        counters_start: dict[str, int] = {}
        watcher = None
        try:
            for i in range(options.warmup):
                report.failed_step = i
                _call_step(step, {})
            probe.settle()
            samples.append(probe.sample())
            if device == "cuda":
                counters_start = device_counters()
            for i in range(options.steps):
                report.failed_step = options.warmup + i
                started = time.perf_counter()
                _call_step(step, report.metrics)
                if device == "cuda":
                    torch.cuda.synchronize()
                report.step_seconds.append(time.perf_counter() - started)
                sample = probe.sample()
                samples.append(sample)
                if options.progress:
                    options.progress(i + 1, options.steps, sample)
                over = [r for r, v in sample.items() if v - samples[0][r] > budget.get(r, float("inf"))]
                if over:
                    report.stopped_by_budget = over[0]
                    break
            if counters_start:
                end = device_counters()
                report.counters = {k: end[k] - counters_start.get(k, 0) for k in end}
            if options.attribute and not report.stopped_by_budget:
                # Attribution watches a few extra steps after the measured series: recording
                # allocation stacks costs host memory (the allocator's history lives on the
                # host), which must not show in the verdicts it explains.
                watcher = attribution.start(probe, step, options.snapshot)
                for i in range(ATTRIBUTION_STEPS):
                    report.failed_step = options.warmup + options.steps + i
                    _call_step(step, {})
            report.failed_step = None
        except Exception as exc:  # the step's own failure is a verdict, not a crash of ours
            report.error = f"{type(exc).__name__}: {exc}"
            report.traceback = format_exception(exc)
            del exc
        if watcher is not None:
            report.sites, report.history = attribution.finish(watcher, probe, step)
        del step
        probe.settle(clear_workspaces=True)
        after = probe.sample()

    if report.error is None:
        _decide_all(report, samples, before, after, budget, options, device)
    report.children_left = _wait_for_children(children_before, options.child_wait)
    return report


def _decide_all(report, samples, before, after, budget, options, device) -> None:  # noqa: ANN001
    capacity = options.exhaust_at or capacity_bytes(device)
    for resource in samples[0]:
        series = [s[resource] for s in samples]
        if report.stopped_by_budget == resource:
            trend = decide_truncated(series, NOISE_FLOOR[resource])
        elif len(series) >= 3:
            trend = decide(series, NOISE_FLOOR[resource], PLATEAU_MIN[resource])
        else:
            continue  # the budget cut the run before this resource had a series to judge
        result = ResourceResult(resource, series, trend, before[resource], after[resource])
        result.steps_to_exhaust = trend.steps_to_exhaust(series[-1], capacity)
        report.resources[resource] = result
        tolerance = RELEASE_TOLERANCE.get(resource)
        if tolerance is not None and after[resource] - before[resource] > tolerance:
            report.leftover[resource] = after[resource] - before[resource]


def _wait_for_children(existing: set[int], timeout: float = 10.0) -> int:
    """Give child processes the step started time to exit; count those still running."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in live_children() if p.pid not in existing]
        if not left or time.monotonic() > deadline:
            return len(left)
        time.sleep(0.05)


def check(
    step: Step,
    *,
    device: str = "cpu",
    steps: int = 20,
    warmup: int = 5,
    resource: str | tuple[str, ...] | None = None,
    budget: dict[str, int] | None = None,
    attribute: bool = False,
) -> Report:
    """Run ``step`` ``warmup`` times, then ``steps`` times with a sample after each; decide.

    Every measurable resource is watched unless ``resource`` names one or more. Tensors that
    the step created before this call are not counted as CPU tensor memory; only what it
    allocates from now on is. To count everything, pass a factory to :func:`run_factory`.
    """
    resources = (resource,) if isinstance(resource, str) else tuple(resource or ())
    options = RunOptions(steps=steps, warmup=warmup, resources=resources, budget=budget or {}, attribute=attribute)
    return run_factory(lambda _device: step, device, options)


# --------------------------------------------------------------------------- scripts
def load_script(path: str | os.PathLike[str]) -> types.ModuleType:
    """Import a script by path as a fresh module (a new copy each call: no state is shared)."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"no such file: {path}")
    name = f"leaklab_script_{path.stem}_{time.monotonic_ns()}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BadInput(f"cannot import {path} as a Python script")
    module = importlib.util.module_from_spec(spec)
    # Registered while it runs so that pickling (spawned workers) and dataclasses can find it.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise BadInput(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def forget_script(module: types.ModuleType) -> None:
    """Drop a loaded script. Clearing its namespace breaks the cycle between its functions and
    their globals, so reference counting frees its models and caches at once, without a full
    garbage collection (~0.14 s in a pytest session, once per run)."""
    sys.modules.pop(module.__name__, None)
    module.__dict__.clear()


def parse_target(target: str) -> tuple[str, str]:
    """``path.py:factory`` -> (path, factory); the factory defaults to ``make_step``."""
    path, sep, factory = target.rpartition(":")
    if not sep or not path:
        return target, "make_step"
    if not factory.isidentifier():
        raise BadInput(f"{factory!r} is not a Python name; expected PATH.py:FACTORY")
    return path, factory


def factory_from_script(module: types.ModuleType, factory_name: str) -> Factory:
    factory = getattr(module, factory_name, None)
    if factory is None:
        raise BadInput(f"{module.__file__} has no {factory_name!r}")
    if not callable(factory):
        raise BadInput(f"{factory_name!r} in {module.__file__} is a {type(factory).__name__}, not a callable")
    return factory


def run_script(path: str | os.PathLike[str], factory_name: str = "make_step", device: str = "cpu",
               options: RunOptions | None = None) -> Report:
    """Load a script fresh, run its factory under the check, and drop the module again."""
    module = load_script(path)
    try:
        return run_factory(factory_from_script(module, factory_name), device, options)
    finally:
        forget_script(module)


def run_isolated(path: str | os.PathLike[str], factory_name: str, device: str, options: RunOptions,
                 env: Mapping[str, str] | None = None, timeout: float = 300.0) -> dict[str, Any]:
    """Run a script's check in a fresh Python process (for settings that must precede torch's
    import, such as ``PYTORCH_CUDA_ALLOC_CONF``); returns the report as JSON."""
    command = [
        sys.executable, "-m", "leaklab", "check", f"{path}:{factory_name}", "--device", device,
        "--steps", str(options.steps), "--warmup", str(options.warmup), "--json",
    ]
    if options.resources:
        command += ["--resource", ",".join(options.resources)]
    if options.attribute:
        command.append("--attribute")
    root = str(Path(__file__).resolve().parent.parent)
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, child_env.get("PYTHONPATH")]))
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=child_env)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"isolated run of {path} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)
