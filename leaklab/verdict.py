"""Deciding a verdict from a series of samples taken after warm-up.

``grows``   a steady upward trend: the robust slope over the whole series and over its second
            half both exceed the resource's noise floor, and the rise it predicts over the run
            is well outside the series' own scatter around it.
``plateau`` the series rose by more than the floor would explain, then stopped: the second
            half is flat, and the rise is larger than the second half's own swing (a bounded
            cache filling up; a sawtooth is not a plateau).
``bounded`` no trend after warm-up.

Slopes are Theil-Sen estimates (the median of all pairwise slopes), so a single
garbage-collection drop or a one-off allocation does not move them. Nothing is random, so the
same series always gets the same verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from leaklab.measure import (
    CPU_TENSORS,
    DEVICE_ALLOCATED,
    DEVICE_RESERVED,
    HOST_HEAP,
    PINNED_HOST,
    SHARED_MEMORY,
    WORKER_MEMORY,
)

GROWS = "grows"
BOUNDED = "bounded"
PLATEAU = "plateau"
RAISES = "raises"
VERDICTS = (GROWS, PLATEAU, BOUNDED, RAISES)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# The smallest growth per step that we call a trend, per resource. Tensor counts are exact, so
# their floor is one CUDA block (512 B); heap and process figures move with allocator noise.
NOISE_FLOOR = {
    DEVICE_ALLOCATED: 512,
    CPU_TENSORS: 512,
    DEVICE_RESERVED: 256 * KiB,
    HOST_HEAP: 1 * KiB,
    PINNED_HOST: 4 * KiB,
    # Workers warm up slowly (allocator arenas, first touches of pages): ~100 KiB per step in
    # the first dozens of steps with nothing leaking, measured on the CI machine.
    WORKER_MEMORY: 256 * KiB,
    SHARED_MEMORY: 64 * KiB,
}

# A plateau smaller than this is warm-up state settling (lazy initialisation, allocator caches),
# not a cache worth reporting.
PLATEAU_MIN = {
    DEVICE_ALLOCATED: 64 * KiB,
    CPU_TENSORS: 64 * KiB,
    DEVICE_RESERVED: 2 * MiB,
    HOST_HEAP: 1 * MiB,
    PINNED_HOST: 1 * MiB,
    WORKER_MEMORY: 1 * MiB,
    SHARED_MEMORY: 1 * MiB,
}


def theil_sen_slope(values: list[float]) -> float:
    """Median of the slopes between every pair of samples (x = step index)."""
    slopes = [
        (values[j] - values[i]) / (j - i)
        for i in range(len(values))
        for j in range(i + 1, len(values))
    ]
    return median(slopes) if slopes else 0.0


@dataclass(frozen=True)
class Trend:
    """The verdict on one series, with the figures that support it."""

    verdict: str
    per_step_bytes: float   # robust slope over the whole series
    tail_per_step_bytes: float  # robust slope over the second half
    rise_bytes: float       # median of the second half minus the first sample
    floor_bytes: float

    def steps_to_exhaust(self, current: float, capacity: float) -> int | None:
        """Steps until ``capacity`` bytes would be used at this rate, for a growing series."""
        if self.verdict != GROWS or self.per_step_bytes <= 0:
            return None
        return max(0, int((capacity - current) / self.per_step_bytes))


def scatter(samples: list[float], slope: float) -> float:
    """How far the samples stray from the fitted line: the median absolute deviation of the
    residuals. A trend counts only if it moves the series by more than three of these over the
    run, so a series that swings by megabytes (fragmenting shapes) does not "grow" by the few
    KiB per step a slope through its noise happens to have."""
    residuals = [value - slope * i for i, value in enumerate(samples)]
    center = median(residuals)
    return median(abs(r - center) for r in residuals)


def decide(samples: list[float], floor: float, plateau_min: float = 0.0) -> Trend:
    """Verdict on a series whose first sample is the baseline taken after warm-up."""
    if len(samples) < 3:
        raise ValueError(f"a verdict needs at least 3 samples (a baseline and 2 steps), got {len(samples)}")
    half = samples[len(samples) // 2:]
    slope = theil_sen_slope(samples)
    tail_slope = theil_sen_slope(half)
    rise = median(half) - samples[0]
    if slope > floor and tail_slope > floor and slope * (len(samples) - 1) > 3 * scatter(samples, slope):
        verdict = GROWS
    elif (rise > max(floor * (len(samples) - 1) / 2, plateau_min) and rise > max(half) - min(half)
          and tail_slope <= floor):
        verdict = PLATEAU
    else:
        verdict = BOUNDED
    return Trend(verdict, slope, tail_slope, rise, floor)


def decide_truncated(samples: list[float], floor: float) -> Trend:
    """A series the budget stopped: it grew past the budget, so it grows; give its slope."""
    slope = theil_sen_slope(samples)
    return Trend(GROWS, slope, slope, samples[-1] - samples[0], floor)


def format_bytes(value: float) -> str:
    """Human-readable bytes with a sign where it matters: 2.0 MiB, -512 B."""
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= size:
            return f"{sign}{value / size:.1f} {unit}"
    return f"{sign}{value:.0f} B"
