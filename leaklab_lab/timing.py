"""Timing: compare variants of a step as ratios within one run, interleaved, with their spread.

Absolute times move with the machine; ratios measured in one process, with the variants
interleaved round by round, do not move much. Every figure is a median with its quartiles.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import median, quantiles
from typing import Any

import torch

from leaklab.measure import device_counters


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def resnet18_step(device: str, batch: int | None = None, image: int | None = None) -> Callable[[], None]:
    """One SGD training step of torchvision's resnet18 (random weights) on a random batch."""
    import torchvision

    batch = batch or (64 if device == "cuda" else 4)
    image = image or (224 if device == "cuda" else 64)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = torch.nn.CrossEntropyLoss()
    inputs = torch.randn(batch, 3, image, image, device=device)
    targets = torch.randint(0, 1000, (batch,), device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        criterion(model(inputs), targets).backward()
        optimizer.step()

    return step


@dataclass
class Timed:
    """Per-step seconds of one variant, and what its steps did to the allocator."""

    name: str
    seconds: list[float]
    counters: dict[str, int]

    @property
    def median(self) -> float:
        return median(self.seconds)

    def quartiles(self) -> tuple[float, float]:
        q1, _, q3 = quantiles(self.seconds, n=4)
        return q1, q3


def _timed_call(run: Callable[[], None], device: str, timed: Timed) -> None:
    before = device_counters() if device == "cuda" else {}
    synchronize(device)
    started = time.perf_counter()
    run()
    synchronize(device)
    timed.seconds.append(time.perf_counter() - started)
    for key, value in (device_counters() if device == "cuda" else {}).items():
        timed.counters[key] = timed.counters.get(key, 0) + value - before[key]


def time_interleaved(variants: dict[str, Callable[[], None]], device: str, rounds: int = 40,
                     warmup: int = 5) -> dict[str, Timed]:
    """Time each variant ``rounds`` times, one step of each per round (so drift hits all
    alike), synchronising around each step so that device work is inside the measured region.
    Only for variants that leave no global state behind (not for ``empty_cache``)."""
    for _ in range(warmup):
        for run in variants.values():
            run()
    results = {name: Timed(name, [], {}) for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            _timed_call(run, device, results[name])
    return results


def time_blocks(variants: dict[str, Callable[[], None]], device: str, blocks: int = 3,
                steps_per_block: int = 15, block_warmup: int = 3) -> dict[str, Timed]:
    """Time variants that change global state (the caching allocator's pool) in blocks:
    A×n B×n C×n, repeated, the first ``block_warmup`` steps of each block untimed so that each
    variant is measured in its own steady state."""
    results = {name: Timed(name, [], {}) for name in variants}
    for _ in range(blocks):
        for name, run in variants.items():
            for _ in range(block_warmup):
                run()
            for _ in range(steps_per_block):
                _timed_call(run, device, results[name])
    return results


def ratios(results: dict[str, Timed], baseline: str) -> dict[str, dict[str, Any]]:
    """Each variant's median step time over the baseline's, with the quartiles of the per-round
    ratios as its spread."""
    base = results[baseline]
    summary = {}
    for name, timed in results.items():
        per_round = [a / b for a, b in zip(timed.seconds, base.seconds, strict=True)]  # pairs of the same round or block slot
        q1, _, q3 = quantiles(per_round, n=4)
        summary[name] = {
            "median_ms": timed.median * 1e3,
            "quartiles_ms": [t * 1e3 for t in timed.quartiles()],
            "ratio": timed.median / base.median,
            "mean_ratio": (sum(timed.seconds) / len(timed.seconds)) / (sum(base.seconds) / len(base.seconds)),
            "ratio_quartiles": [q1, q3],
            "rounds": len(timed.seconds),
            "counters": timed.counters,
        }
    return summary


def format_ratios(summary: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'variant':<18} {'median ms':>10} {'ratio':>7}  ratio IQR      counters"]
    for name, row in summary.items():
        counters = ", ".join(f"{k} {v}" for k, v in row["counters"].items()
                             if k in ("num_device_alloc", "num_device_free", "num_sync_all_streams"))
        q1, q3 = row["ratio_quartiles"]
        lines.append(f"{name:<18} {row['median_ms']:>10.2f} {row['ratio']:>7.3f}  [{q1:.3f}, {q3:.3f}]  {counters}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the suite's benchmarks
STEPS_PER_EPOCH = 10  # the "once per epoch" policy empties the cache every this many steps


def empty_cache_policies(step: Callable[[], None]) -> dict[str, Callable[[], None]]:
    """The same step three ways: never emptying the CUDA cache, once per epoch, every step."""
    count = [0]

    def per_epoch() -> None:
        step()
        count[0] += 1
        if count[0] % STEPS_PER_EPOCH == 0:
            torch.cuda.empty_cache()

    def per_step() -> None:
        step()
        torch.cuda.empty_cache()

    return {"never": step, "per_epoch": per_epoch, "per_step": per_step}


def empty_cache_ratios(blocks: int = 3, steps_per_block: int = 20) -> dict[str, dict[str, Any]]:
    """Per-step time of a resnet18 training step under each empty_cache policy, over "never"."""
    results = time_blocks(empty_cache_policies(resnet18_step("cuda")), "cuda", blocks, steps_per_block)
    return ratios(results, "never")


def probe_overhead(device: str, rounds: int = 40) -> dict[str, dict[str, Any]]:
    """A resnet18 step alone, and followed by one reading of every default resource."""
    from leaklab.measure import Probe
    from leaklab.resources import resolve

    step = resnet18_step(device)
    with Probe(device, resolve(device, ("host_heap", "worker_memory") if device == "cpu" else ())) as probe:
        def probed() -> None:
            step()
            probe.sample()

        results = time_interleaved({"probe off": step, "probe on": probed}, device, rounds)
    return ratios(results, "probe off")


def probe_costs(device: str, calls: int = 200) -> dict[str, dict[str, Any]]:
    """Microseconds one reading of each resource costs, after a resnet18 step (median of calls)."""
    from leaklab.resources import defaults, resolve

    step = resnet18_step(device)
    step()
    synchronize(device)
    costs = {resource.name: _sample_cost(device, (resource.name,), calls) for resource in defaults(device)}
    # One sample of every default resource together, as a check takes it after each step (the
    # counters that share a source, such as CUDA's stats, are read once per sample).
    costs[ALL_DEFAULTS] = _sample_cost(device, (), calls)
    # The one exact count of Python objects CPython offers, timed alone: it walks every pool of
    # pymalloc's arenas, so what it costs grows with the interpreter's heap (torch's included).
    # Each call follows the probe's own collection (of what came after the freeze), as in a sample.
    from leaklab.measure import Probe

    with Probe(device, resolve(device, ("host_heap",))) as probe:
        costs[ALLOCATED_BLOCKS] = _call_cost(sys.getallocatedblocks, calls, before=probe.collect)
    return costs


def _call_cost(call: Callable[[], Any], calls: int, before: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Median and quartiles, in microseconds, of ``calls`` calls of ``call`` (each after ``before``, untimed)."""
    times = []
    for _ in range(calls):
        if before is not None:
            before()
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return {"median_us": median(times) * 1e6, "quartiles_us": [q * 1e6 for q in quantiles(times, n=4)[::2]]}


def _sample_cost(device: str, resources: tuple[str, ...], calls: int) -> dict[str, Any]:
    """Median and quartiles, in microseconds, of ``calls`` samples of ``resources`` (all defaults: ())."""
    from leaklab.measure import Probe
    from leaklab.resources import resolve

    with Probe(device, resolve(device, resources)) as probe:
        return _call_cost(probe.sample, calls)


ALL_DEFAULTS = "one sample of all"  # probe_costs' row for a whole sample
ALLOCATED_BLOCKS = "sys.getallocatedblocks() alone"  # probe_costs' row for CPython's count, without a sample around it


def tracker_overhead(rounds: int = 20) -> dict[str, dict[str, Any]]:
    """CPU only: a resnet18 step outside and inside the live-tensor tracker, with and without
    recording allocation sites (what ``cpu_tensors`` and ``--attribute`` cost)."""
    from leaklab.measure import LiveTensorBytes

    step = resnet18_step("cpu")
    plain, sites = LiveTensorBytes(), LiveTensorBytes(record_sites=True)

    def tracked() -> None:
        with plain:
            step()

    def tracked_with_sites() -> None:
        with sites:
            step()

    results = time_interleaved({"tracker off": step, "tracker on": tracked, "tracker + sites": tracked_with_sites},
                               "cpu", rounds)
    return ratios(results, "tracker off")


def history_overhead(blocks: int = 3, steps_per_block: int = 10) -> dict[str, dict[str, Any]]:
    """CUDA only: a resnet18 step with and without the allocator recording its history (what
    ``--attribute`` costs on the GPU), in alternating blocks since recording is global state."""
    step = resnet18_step("cuda")
    results = {"history off": Timed("history off", [], {}), "history on": Timed("history on", [], {})}
    for _ in range(blocks):
        for name, timed in results.items():
            if name == "history on":
                torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
            try:
                for _ in range(3):
                    step()
                for _ in range(steps_per_block):
                    _timed_call(step, "cuda", timed)
            finally:
                torch.cuda.memory._record_memory_history(enabled=None)
    return ratios(results, "history off")


def check_cost(device: str, rounds: int = 5) -> dict[str, Any]:
    """What a check costs beyond start-up: ``leaklab check`` of a bounded 1 ms step and of a step
    leaking one quantum (4 B of tensor storage) a step, each in a fresh interpreter, against
    ``python -c "import torch"``, interleaved round by round. The check's own cost is the
    difference of the medians (its spread from the quartiles); the time to each verdict and the
    steps it needed come from the checks' own reports."""
    import json
    import subprocess
    import sys

    from leaklab_lab.cases import ROOT

    edges = ROOT / "tests" / "data" / "edge_steps.py"
    commands = {
        "import torch": [sys.executable, "-c", "import torch"],
        "check, bounded 1 ms step": [sys.executable, "-m", "leaklab", "check", f"{edges}:sleeps_1ms", "--device", device,
                                     "--json"],
        "check, 4 B/step leak": [sys.executable, "-m", "leaklab", "check", f"{edges}:tensor_4b", "--device", device, "--json"],
    }
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    reports: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for name, command in commands.items():
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            seconds[name].append(time.perf_counter() - started)
            if done.stdout.strip().startswith("{"):
                reports[name] = json.loads(done.stdout)
    base = median(seconds["import torch"])
    out: dict[str, Any] = {}
    for name, values in seconds.items():
        q1, _, q3 = quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
        row = {"median_s": median(values), "quartiles_s": [q1, q3], "over_import_torch_s": median(values) - base}
        report = reports.get(name)
        if report:
            row.update(verdict=report["verdict"], seconds_to_verdict=report.get("seconds_to_verdict"),
                       measured_steps=report["steps"] + report["confirmed_steps"] + report.get("long_pass_steps", 0))
        out[name] = row
    return out
