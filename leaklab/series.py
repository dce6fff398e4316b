"""A series of readings, kept in arrays allocated before the first step, and running one step."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping
from typing import Any

import torch

from leaklab import resources as known
from leaklab.measure import Probe

Step = Callable[[], Any]


class Series:
    """Readings of every watched resource, in arrays allocated before the first step: the
    harness must allocate nothing per step, or it would be the leak it measures."""

    def __init__(self, names: tuple[str, ...], capacity: int) -> None:
        self.names = names
        self.capacity = capacity
        self.values = {name: array("q", bytes(8 * capacity)) for name in names}
        self.garbage_objects = array("q", bytes(8 * capacity))
        self.garbage_bytes = array("q", bytes(8 * capacity))
        self.seconds = array("d", bytes(8 * capacity))
        self.metrics: dict[str, array] = {}
        self.shift = dict.fromkeys(names, 0)
        self.count = 0

    def last(self) -> dict[str, int]:
        return {name: self.values[name][self.count - 1] + self.shift[name] for name in self.names}

    def shift_from(self, sample: dict[str, int]) -> None:
        """Later readings continue from the last one: what changed between it and ``sample`` (the
        harness's own doing, between two steps) is taken out."""
        for name in self.names:
            if not known.get(name).resets:  # a peak is a figure of its step alone
                self.shift[name] = sample[name] - self.values[name][self.count - 1]

    def add(self, sample: dict[str, int], probe: Probe, seconds: float) -> None:
        i = self.count
        if i >= self.capacity:
            raise RuntimeError("leaklab: more readings than the series was allocated for")
        for name in self.names:
            self.values[name][i] = sample[name] - self.shift[name]
        self.garbage_objects[i] = probe.garbage.objects
        self.garbage_bytes[i] = probe.garbage.bytes
        self.seconds[i] = seconds
        self.count += 1

    def kept(self) -> dict[str, Any]:
        """Everything this series holds, to go back to (:meth:`restore`) when a pass is abandoned."""
        return {"values": {name: array("q", values) for name, values in self.values.items()},
                "metrics": {key: array("d", values) for key, values in self.metrics.items()},
                "garbage_objects": array("q", self.garbage_objects), "garbage_bytes": array("q", self.garbage_bytes),
                "seconds": array("d", self.seconds), "shift": dict(self.shift), "count": self.count}

    def restore(self, kept: dict[str, Any]) -> None:
        for key, value in kept.items():
            setattr(self, key, value)

    def metric_slot(self, key: str) -> array:
        slot = self.metrics.get(key)
        if slot is None:
            slot = self.metrics[key] = array("d", bytes(8 * self.capacity))
        return slot

    def series(self, name: str) -> list[int]:
        return self.values[name][:self.count].tolist()

    def per_step(self) -> dict[str, Any]:
        """The report's per-step fields (the baseline reading covers no step)."""
        count = self.count
        return {"step_seconds": self.seconds[1:count].tolist(),
                "metrics": {key: values[1:count].tolist() for key, values in self.metrics.items()},
                "garbage": {"objects": self.garbage_objects[1:count].tolist(),
                            "bytes": self.garbage_bytes[1:count].tolist()}}


def call_step(step: Step, series: Series | None = None) -> None:
    """Run one step; keep the numbers it returns in ``series`` (reading index ``series.count``)."""
    result = step()
    if series is not None and isinstance(result, Mapping):
        for key, value in result.items():
            if isinstance(value, (int, float, bool)) or (isinstance(value, torch.Tensor) and value.numel() == 1):
                series.metric_slot(str(key))[series.count] = float(value)
