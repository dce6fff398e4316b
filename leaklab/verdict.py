"""Deciding a verdict from one resource's series of readings, taken after warm-up.

The whole rule, in one place (``samples[0]`` is the baseline, one reading after each step):

``grows``    the robust slope over the whole series and over its second half are both positive;
             the rise the slope predicts over the run is at least one quantum of the counter and
             more than three times the series' own scatter around the line (so the floor comes
             from the series' own noise: an exact counter with no scatter shows a 4 B/step leak,
             a heap that swings by megabytes does not "grow" by the KiB a slope through its noise
             happens to have); the growth is held (the last third sits above the first third by
             a good part of that rise, so a spike at the end is not growth); and, for noisy
             counters, the slope passes the resource's floor.
``plateau``  not growing, but the last third sits above the baseline by more than the
             resource's smallest cache and more than its own scatter, the second half is flat,
             and once risen the series never fell back to its baseline: a cache that filled,
             then stopped (batches in flight from DataLoader workers go 0, 1, 2 and back to 0:
             a level that returns to where it started was never filled).
``bounded``  neither.

Slopes are Theil-Sen estimates (the median of all pairwise slopes), so a single
garbage-collection drop or a one-off allocation does not move them; long series are thinned to
:data:`MAX_POINTS` evenly spaced readings first (exact subsampling, so a 10,000-step run costs
what a 512-step one does). Nothing is random: the same series always gets the same verdict.
Where growth starts late, the rate given is the rate since it started.

The passes (:func:`next_pass`, which the runner asks after every pass and obeys: it runs steps
and reads, it decides nothing):

1. warm-up, read for the budget only; a series that passes its budget (there or later) is stopped,
   and what passed it grows where it rose step after step, else it is ``stopped``, with no verdict
   (:func:`decide_truncated`);
2. the measured series, from a baseline taken with everything alive frozen; a series that made
   one jump and stayed flat (:func:`one_jump`: a lazy initialisation, a first torch call after
   warm-up) is measured again from a new baseline, at most :data:`RESTARTS` times;
3. where a verdict is not a clear ``bounded`` (or is close to its bar, :data:`CONFIRM_BAR`), a
   confirmation pass continues the series and it is decided again on all of it; a noisy counter
   that grows must still grow through that pass at half its rate or more, and must not fall back
   at once by half of what it rose in the first pass (a saw-tooth: a dict's table rebuilt, batches
   freed) (:func:`confirm`); a verdict the confirmation changed is reported as uncertain;
4. a long pass for two kinds of series, read alone (:data:`CREEP_PASS` times the steps, at most
   :data:`CREEP_STEPS_MAX`, ended once every one of them :func:`stalled`):

``creeps``   a noisy counter's series that never fell and rose, but slower than the resource's
             floor, where nothing else grows (:func:`creeps`). The floor is there for
             noise, and such a series has none: a ``bytes(512)`` kept per step in a no-op step
             raises the heap by exactly 560 B at every step. But a DataLoader's heap also rises
             steadily for dozens of steps, then falls back (a saw-tooth). So the series is
             decided without the floor after its long pass, and the creep must keep half its rate
             through it (:func:`confirm_creep`).
``long growth``  growth only in counters that a cache filled lazily over a first epoch makes rise
             like a leak (:attr:`Resource.long_growth`: ``python_objects``, a dataset's per-item
             objects), or in the heap at under :data:`NEAR_FLOOR` times its floor (a library's
             heap settling over hundreds of steps), held to the same test.
``near its floor``  beside growth elsewhere, the heap rising by more than its noise at under
             :data:`NEAR_FLOOR` times its floor (:func:`near_floor`): its verdict there would be the
             floor's coin toss from run to run, so it is decided after its long pass as a creep is;
             where a step ends that pass (an epoch ran out), it is not growth: undecided.

5. a fill pass, where what grows is held only in containers bounded by construction (a ``deque``
   with ``maxlen``, an ``lru_cache`` with ``maxsize``) that a census around the confirmation saw
   getting longer (:func:`fills`): the series are continued until the slowest of them is full,
   then for the steps asked for; a series flat over those last steps is a ``plateau`` (it rose
   while the container filled, then stopped), one still rising grows.

6. a settling pass, where a series of a resource that the process's own threads free after the
   step returns (:attr:`Resource.settles`: the heap, where NCCL's watchdog frees each finished
   collective's record at its next poll, every 100 ms) is called growing, and nothing else in its
   process grows (beside a leak elsewhere, the answer is that leak's): after a pause of
   :data:`SETTLE_SECONDS` it is read, :data:`SETTLE_STEPS` times the steps asked for are run, and
   after another pause it is read again (:func:`settled`). What those steps kept across the two
   pauses is what they keep; where that is under :data:`HELD_FRACTION` of the series' rate (or
   under the floor its rate passed), the rest was only held for a while: bounded (one NCCL rank's
   heap, bare all_reduces on the H200: 1.66 KiB per collective read after each, 176 B read after
   a pause). A leak keeps its rate.

A step that fails in a pass the check added (2 after its first series, 3, 4) ends that pass; the
verdicts are those of the series before it (of a re-measured series that stopped, only the series
that made the jump are judged on its readings, where it has enough).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median

from leaklab.resources import GiB, KiB, MiB, Resource, format_bytes  # noqa: F401 - re-exported

GROWS = "grows"
BOUNDED = "bounded"
PLATEAU = "plateau"
RAISES = "raises"
STOPPED = "stopped"      # passed its budget without growing step after step: a safety stop, no verdict
VERDICTS = (GROWS, PLATEAU, BOUNDED, RAISES, STOPPED)

MAX_POINTS = 512
STEP_AFTER_STEP = 2      # a series the budget stopped grows where this many steps in a row each rose
SCATTER_FACTOR = 3.0     # a trend must move the series by more than this many scatters
HELD_FRACTION = 0.4      # ... and keep this share of the rise it predicts
FELL_BACK = 0.1          # a plateau's series that came back within this share of its rise to the baseline
CREEP_PASS = 10          # a creeping series is continued for this many times the run's steps
CREEP_RISING = 0.1       # ... a creep rises by a quantum on at least this share of its steps: it may rise in
                         # lumps (glibc hands out a size's freed chunks from its thread cache, which
                         # mallinfo2 counts as in use, then restocks 8 at once: 0 B x 7, then 8 x 272 B)
CREEP_HELD = 0.8         # ... and its long pass's second half keeps this share of its first half's rate
CREEP_WINDOW = 10        # ... and every run of this many steps in its long pass rises (glibc's lumps come every 8;
                         # a heap that grows only when a dict or list doubles has long flat runs between)


def thin(values: list[float], limit: int = MAX_POINTS) -> tuple[list[float], float]:
    """At most ``limit`` evenly spaced readings, first and last kept, and the step between them."""
    if len(values) <= limit:
        return list(values), 1.0
    stride = (len(values) - 1) / (limit - 1)
    return [values[round(i * stride)] for i in range(limit)], stride


def theil_sen_slope(values: list[float]) -> float:
    """Median of the slopes between every pair of readings, per step (x = step index)."""
    points, stride = thin(values)
    slopes = [
        (points[j] - points[i]) / (j - i)
        for i in range(len(points))
        for j in range(i + 1, len(points))
    ]
    return median(slopes) / stride if slopes else 0.0


def scatter(samples: list[float], slope: float) -> float:
    """How far the readings stray from the fitted line: the median absolute deviation of the
    residuals. Zero for an exact counter that moves only with the trend."""
    residuals = [value - slope * i for i, value in enumerate(samples)]
    center = median(residuals)
    return median(abs(r - center) for r in residuals)


def _thirds(samples: list[float]) -> tuple[list[float], list[float]]:
    third = max(1, len(samples) // 3)
    return samples[:third], samples[-third:]


def _onset(samples: list[float], quantum: float) -> int:
    """The last reading before the series left its start for good (0 when it rose at once)."""
    start = samples[0]
    for i in range(len(samples) - 1, -1, -1):
        if samples[i] - start < quantum:
            return i
    return 0


def _fell_back(samples: list[float], rise: float, resource: Resource) -> bool:
    """Whether the series, after first reaching half of ``rise``, came back to its baseline."""
    base = samples[0]
    risen = next((i for i, value in enumerate(samples) if value - base >= rise / 2), len(samples))
    return any(value - base < max(resource.quantum, FELL_BACK * rise) for value in samples[risen:])


@dataclass(frozen=True)
class Trend:
    """The verdict on one series, with the figures that support it."""

    verdict: str
    per_step_bytes: float       # the rate: over the whole series, or since growth started
    tail_per_step_bytes: float  # robust slope over the second half
    rise_bytes: float           # median of the last third over the baseline
    floor_bytes: float          # the rise a trend had to beat: max(quantum, 3 x scatter)
    scatter_bytes: float = 0.0
    onset: int = 0              # measured step at which growth started (0: from the start)
    margin: float = 0.0         # predicted rise over the bar it had to clear (>1: a trend)

    def steps_to_exhaust(self, current: float, capacity: float) -> int | None:
        """Steps until ``capacity`` would be used at this rate, for a growing series."""
        if self.verdict != GROWS or self.per_step_bytes <= 0:
            return None
        return max(0, int((capacity - current) / self.per_step_bytes))


def decide(samples: list[float], resource: Resource, floor: float | None = None) -> Trend:
    """Verdict on a series whose first reading is the baseline taken after warm-up; ``floor``
    replaces the resource's floor (0 for a creep watched through its long pass)."""
    if len(samples) < 3:
        raise ValueError(f"a verdict needs at least 3 readings (a baseline and 2 steps), got {len(samples)}")
    steps = len(samples) - 1
    half = samples[len(samples) // 2:]
    slope = theil_sen_slope(samples)
    tail_slope = theil_sen_slope(half)
    points, stride = thin(samples)
    noise = scatter(points, slope * stride)
    bar = max(float(resource.quantum), SCATTER_FACTOR * noise)
    first, last = _thirds(samples)
    held = median(last) - median(first)
    rise = median(last) - samples[0]
    predicted = slope * steps
    margin = predicted / bar if bar else 0.0
    grows = (
        slope > 0 and tail_slope > 0
        and predicted > bar
        and held > max(HELD_FRACTION * predicted, resource.quantum if resource.exact else bar)
        and (resource.exact or slope > (resource.floor if floor is None else floor))
    )
    onset = 0
    rate = slope
    if grows and tail_slope > 1.5 * slope:
        # Growth that started late: the whole-series slope understates it; give the rate since.
        start = _onset(samples, max(resource.quantum, bar))
        if steps - start >= 2:
            onset, rate = start, theil_sen_slope(samples[start:])
        if rate <= 0:
            # Flat since it left its start: a level that rose once and stayed (batches in flight
            # went from 0-1 to 2 and stayed there, on the H200), not growth.
            grows, onset, rate = False, 0, slope
    if grows:
        verdict = GROWS
    else:
        tail_noise = scatter(half, tail_slope)
        flat_tail = abs(tail_slope) * (len(half) - 1) <= max(resource.quantum, SCATTER_FACTOR * tail_noise)
        verdict = PLATEAU if (flat_tail and rise > max(resource.plateau_min, SCATTER_FACTOR * noise, resource.quantum)
                              and rise > max(last) - min(last) and not _fell_back(samples, rise, resource)) else BOUNDED
    return Trend(verdict, rate, tail_slope, rise, bar, noise, onset, margin)


SLOWING = 0.5  # a noisy counter whose growth fell below this share of its rate while confirmed is settling
FELL_AT_ONCE = 0.5  # ... or that fell at once, while confirmed, by this share of what it rose in the first pass


def _settled(extended: Trend, rate: float) -> Trend:
    """``extended``'s figures with the verdict bounded: growth that did not hold through a pass."""
    return Trend(BOUNDED, extended.per_step_bytes, rate, extended.rise_bytes, extended.floor_bytes,
                 extended.scatter_bytes, extended.onset, extended.margin)


def confirm(first: Trend, extended: Trend, continued: list[float], resource: Resource) -> Trend:
    """The verdict after a confirmation pass: ``extended`` is decided on the whole series,
    ``continued`` is the confirmation's own readings (with the last one before them). A noisy
    counter (the heap, workers' memory) that grows must still be growing through the pass, at
    half its rate or more (the first pass's rate where that pass grew, else the whole series'):
    a heap or a worker that settles over its first dozens of steps (allocator and library caches
    warming, pages touched for the first time, slower on a busy machine) slows down, a leak does
    not, and one that started late grows fastest in the pass."""
    if resource.exact or extended.verdict != GROWS or len(continued) < 3:
        return extended
    rate = theil_sen_slope(continued)
    reference = first.per_step_bytes if first.verdict == GROWS else extended.per_step_bytes
    # A saw-tooth falls back at once by much of what it rose (a dict's table rebuilt when it has
    # filled with deleted entries, batches in flight freed); a leak never gives back that much.
    fell = -min((b - a for a, b in zip(continued, continued[1:], strict=False)), default=0)
    sawtooth = first.rise_bytes > 0 and fell >= FELL_AT_ONCE * first.rise_bytes
    return extended if rate >= SLOWING * reference and not sawtooth else _settled(extended, rate)


def creeps(samples: list[float], resource: Resource) -> bool:
    """Whether a noisy counter's series never fell, rose (by a quantum, on a few steps at least)
    and does not grow by the rule: it needs a long pass (see the module's rule)."""
    if not resource.long_pass or resource.exact or resource.floor <= 0 or len(samples) < 3:
        return False
    moves = [b - a for a, b in zip(samples, samples[1:], strict=False)]
    steady = min(moves) >= 0 and sum(move >= resource.quantum for move in moves) >= CREEP_RISING * len(moves)
    # Not the whole rule without the floor: a creep in lumps is flat between them, and its second
    # half may hold one lump; the long pass, decided without the floor, is the test.
    return steady and theil_sen_slope(samples) > 0 and decide(samples, resource).verdict != GROWS


def confirm_creep(first: Trend, extended: Trend, continued: list[float], beside: bool = False) -> Trend:
    """The verdict on a creep after its long pass: ``extended`` is decided on the whole series
    without the floor, ``continued`` is the long pass's readings (with the last one before them).
    A leak keeps its rate, through the pass and from its first half to its second, and rises in
    every run of :data:`CREEP_WINDOW` steps; a saw-tooth that falls back does not, nor does a cache
    that fills ever more slowly (a host-side cache per batch shape, as new shapes grow rare), nor a
    heap that moves only in rare lumps (its verdict would hang on where they land).

    ``beside``: a series near its floor beside growth elsewhere (:func:`near_floor`) is held only
    to keeping half its rate from the pass's first half to its second: a heap that carries a
    saw-tooth over the kept tensors' growth (a metric's state reset every epoch) rose 0.76-1.05
    KiB a step in those halves and at 1.4-2.1 KiB in its first pass, so the creep's finer tests
    would call it growing in one run and not in the next."""
    if extended.verdict != GROWS or len(continued) < 3:
        return extended
    rate = theil_sen_slope(continued)
    half = len(continued) // 2
    early, late = theil_sen_slope(continued[:half + 1]), theil_sen_slope(continued[half:])
    if beside:
        return extended if late >= SLOWING * early else _settled(extended, rate)
    held = rate >= SLOWING * first.per_step_bytes and late >= CREEP_HELD * early and not stalled(continued)
    return extended if held else _settled(extended, rate)


def stalled(continued: list[float]) -> bool:
    """Whether some run of :data:`CREEP_WINDOW` steps of a long pass did not rise. Once true it
    stays true, and :func:`confirm_creep` can no longer call the series growing: the runner ends
    the long pass there (a saw-tooth's pass stops at its first fall, not after hundreds of steps)."""
    return any(b - a <= 0 for a, b in zip(continued, continued[CREEP_WINDOW:], strict=False))


def decide_truncated(samples: list[float], resource: Resource, earlier: Sequence[float] = ()) -> Trend:
    """A series the budget stopped. The stop is for safety, not a verdict: it grows where its
    readings show growth step after step (each of its last :data:`STEP_AFTER_STEP` steps rose by a
    quantum or more), with its slope; otherwise it is ``stopped``, with how far it rose (one or
    two jumps, such as buffers made on a first large input, are not a trend). ``earlier``: the
    warm-up's readings before a measured series the budget stopped, its last one the series' baseline."""
    slope = theil_sen_slope(samples) if len(samples) >= 2 else 0.0
    if len(samples) >= 2 and slope <= 0:
        slope = (samples[-1] - samples[0]) / (len(samples) - 1)
    read = [*earlier[:-1], *samples]
    rises = [b - a for a, b in zip(read, read[1:], strict=False)][-STEP_AFTER_STEP:]
    verdict = GROWS if len(rises) == STEP_AFTER_STEP and min(rises) >= resource.quantum else STOPPED
    return Trend(verdict, slope, slope, samples[-1] - samples[0], float(resource.quantum))


def one_jump(samples: list[float], resource: Resource) -> int | None:
    """The step at which a series made one jump and stayed flat around it (a lazy
    initialisation, such as the first torch call of a step that made none during warm-up), or
    None. Such a series is measured again from a new baseline after it."""
    steps = [b - a for a, b in zip(samples, samples[1:], strict=False)]
    if not steps:
        return None
    biggest = max(range(len(steps)), key=lambda i: steps[i])
    jump = steps[biggest]
    if jump <= max(resource.plateau_min / 4, 64 * resource.quantum):
        return None
    # Flat around it: each side stays within a tenth of the jump. (Not the sum of every other
    # step: a noisy counter's scatter adds up once per step, and a heap that moves by ~20 KiB a
    # step never qualified after a 4 MiB lazy buffer once its series was 20 steps long.)
    before, after = samples[:biggest + 1], samples[biggest + 1:]
    if max(before) - min(before) < 0.1 * jump and max(after) - min(after) < 0.1 * jump:
        return biggest + 1
    return None



# ----------------------------------------------------------------------------- the passes
# Everything above judges one series. What follows is the policy: after each pass of steps, which
# pass comes next (measuring again after a lazy initialisation, the confirmation, the long pass)
# or the final verdicts. Series in, decision out: no probe, clock or report.

WARMUP, MEASURED, REMEASURED = "warm-up", "measured", "re-measured series"
CONFIRMATION, LONG_PASS, FILL = "confirmation", "long pass", "fill pass"
SETTLE = "settling pass"
SETTLE_SECONDS = 0.3    # its pauses: three of NCCL's watchdog polls (it frees finished collectives every 100 ms)
SETTLE_STEPS = 2        # ... and between them this many times the steps asked for (the heap's lumps average out)
MIN_READINGS = 3        # a series is judged from this many readings on (the baseline and two steps)
RESTARTS = 2            # lazy initialisations measured past at most this many times
CONFIRM_BAR = 0.5       # a bounded series whose predicted rise passed this share of its bar is confirmed too
CREEP_STEPS_MAX = 400   # a long pass is at most this long
NEAR_FLOOR = 4.0        # a noisy counter growing at under this many times its floor goes through the long pass
FILL_STEPS_MAX = 400    # a bounded container is filled by a pass of at most this many steps (more: it grows until then)
HORIZON = 1_000_000     # steps: a record of plain data is judged by what it holds after this many
EXPLAINED = 2.0         # a record explains growth of at most this many times its own objects or bytes
HORIZON_BUDGET = 1 * GiB  # ... and is a leak only past this (a few numbers a step for a million steps: ~100 MB)

Readings = Mapping[str, list[float]]


@dataclass(frozen=True)
class Plan:
    """The settings the policy reads: the steps asked for, and whether the check may add passes."""

    steps: int
    confirm: bool = True
    strict: bool = False      # any growth is a leak, a record of plain data too
    horizon: int = HORIZON

    @property
    def confirm_steps(self) -> int:
        return max(5, self.steps // 2)

    @property
    def creep_steps(self) -> int:
        return min(CREEP_PASS * self.steps, CREEP_STEPS_MAX)


@dataclass(frozen=True)
class Pass:
    """A pass of steps to run. ``resources``: the only ones read (empty: every watched one);
    ``growing``: what grew when it was planned (named by censuses around it); ``since``: a long
    pass may end once every series, from this reading on, stalled (:meth:`may_stop`)."""

    kind: str
    steps: int
    resources: tuple[str, ...] = ()
    why: str = ""
    growing: tuple[str, ...] = ()
    since: int = 0

    def may_stop(self, series: Readings) -> bool:
        """Whether the pass can end before its steps are run: a long pass whose every series has
        stalled (:func:`stalled`) can no longer be called growing."""
        return self.kind == LONG_PASS and all(stalled(list(series[name][self.since:])) for name in self.resources)


@dataclass(frozen=True)
class Done:
    """A pass that ran: its readings (a pass that starts a series, warm-up or measured: the
    baseline first; a pass that continues one: its own readings only), whether a step failed in
    it (``stopped``: a pass the check added ends there), and which resource passed its budget."""

    kind: str
    readings: Readings
    stopped: bool = False
    over_budget: str | None = None
    plain: PlainData | None = None   # what grew in Python objects, where it is all plain data (a census)
    filling: Filling | None = None   # what grew in Python objects, where it is all in bounded containers (a census)

    @property
    def count(self) -> int:
        return max((len(values) for values in self.readings.values()), default=0)


@dataclass(frozen=True)
class PlainData:
    """Growth that holds only plain data (numbers, short strings, small tuples or dicts of them:
    :func:`leaklab.growth.is_plain`), as a census found it: what it is, and its bytes per step."""

    what: str
    bytes_per_step: float
    objects_per_step: float = 0.0
    covers: frozenset[str] | None = None  # the series it can explain (one rank's, of several); None: every one


@dataclass(frozen=True)
class Filling:
    """Growth held only in containers bounded by construction, as a census found it: the slowest
    to fill (``what``: its path, kind and bound) and the steps until it is full at the rate seen."""

    what: str
    steps_to_full: int


@dataclass(frozen=True)
class Records:
    """Growth settled as a record of plain data: what it is, its rate, and its size after ``horizon`` steps."""

    what: str
    bytes_per_step: float
    horizon: int
    resources: tuple[str, ...]

    @property
    def after_horizon(self) -> float:
        return self.bytes_per_step * self.horizon


@dataclass(frozen=True)
class Verdicts:
    """The final verdicts: each resource's trend and the series it was decided on; ``base``: the
    index in the history of the measured pass they stand on, ``readings``: how many readings of
    that series with the confirmation's (which the runner keeps for the step times and metrics)."""

    trends: dict[str, Trend]
    series: dict[str, list[float]]
    base: int
    readings: int
    uncertain: tuple[str, ...] = ()
    long_passed: tuple[str, ...] = ()
    confirmed_steps: int = 0
    long_pass_steps: int = 0
    records: Records | None = None
    changed: tuple[tuple[str, str, str], ...] = ()   # (resource, before, after) for each uncertain one
    filled: Filling | None = None    # growth held in bounded containers, watched until they were full
    fill_steps: int = 0
    fill_settled: tuple[str, ...] = ()  # ... and the resources that were flat once they were
    paused: tuple[tuple[str, float, float], ...] = ()  # (resource, its rate, what steps kept across two pauses, a step)


def judge(readings: Readings, watched: Sequence[Resource], over_budget: str | None = None,
          earlier: Readings | None = None) -> dict[str, Trend]:
    """Each watched resource's verdict on a series (one the budget cut: :func:`decide_truncated`,
    on ``earlier`` readings too where the warm-up's come before it; one too short to judge gets none)."""
    trends = {}
    for resource in watched:
        values = list(readings.get(resource.name, ()))
        if resource.resets:  # the baseline reading covers no step: the trend starts at step 1
            values = values[1:]
        if over_budget == resource.name:
            trends[resource.name] = decide_truncated(values, resource, list((earlier or {}).get(resource.name, ())))
        elif len(values) >= MIN_READINGS:
            trends[resource.name] = decide(values, resource)
    return trends


def growing(trends: Mapping[str, Trend], watched: Sequence[Resource]) -> list[str]:
    """The judged resources that grow, in the order watched."""
    return [r.name for r in watched if r.judged and r.name in trends and trends[r.name].verdict == GROWS]


def lazy_jumps(readings: Readings, watched: Sequence[Resource]) -> list[str]:
    """The judged series that made one jump and stayed flat (not a cache's: a cache fills in jumps)."""
    return [r.name for r in watched if r.judged and not r.cache and r.name in readings
            and one_jump(list(readings[r.name]), r) is not None]


def creeping(readings: Readings, watched: Sequence[Resource], trends: Mapping[str, Trend]) -> list[str]:
    """Noisy series that crept up under their floor (:func:`creeps`), where nothing grows (a run
    that already fails needs no long pass)."""
    if growing(trends, watched):
        return []
    return [r.name for r in watched if r.judged and r.name in trends and creeps(list(readings[r.name]), r)]


def needs_confirmation(trends: Mapping[str, Trend], watched: Sequence[Resource]) -> bool:
    """Any verdict but a clear bounded is confirmed: one not bounded, or bounded but close to its bar."""
    return any(r.judged and r.name in trends and (trends[r.name].verdict != BOUNDED or trends[r.name].margin > CONFIRM_BAR)
               for r in watched)


def growing_alone(trends: Mapping[str, Trend], watched: Sequence[Resource]) -> list[str]:
    """The growing resources, where every one of them is confirmed through a long pass: a counter
    that a lazily filled cache makes rise like a leak (:attr:`Resource.long_growth`), or a noisy
    one watched for creeps (:attr:`Resource.long_pass`, the heap) growing at under
    :data:`NEAR_FLOOR` times its floor (a real model's heap settling over hundreds of steps rose
    1.0-1.1 KiB a step over a run's 30); none otherwise."""
    names = growing(trends, watched)
    by_name = {r.name: r for r in watched}

    def slow(name: str) -> bool:
        resource = by_name[name]
        return resource.long_growth or resource.long_pass and trends[name].per_step_bytes < NEAR_FLOOR * resource.floor

    return names if names and all(slow(name) for name in names) else []


def near_floor(trends: Mapping[str, Trend], watched: Sequence[Resource]) -> list[str]:
    """Beside growth elsewhere, the noisy series watched for creeps (:attr:`Resource.long_pass`, the
    heap) whose verdict hangs on their floor: rising by more than their own noise (a margin over
    :data:`CONFIRM_BAR`), at under :data:`NEAR_FLOOR` times the floor. Judged on a run's readings,
    such a series is called growing in one run and bounded in the next (the tensors a Fabric step
    kept raised its heap by 0.9-1.3 KiB at every step against a 1 KiB floor: grows in 3 of 5 runs);
    it goes through the long pass and is decided there as a creep is (:func:`confirm_creep`)."""
    near = [r for r in watched if r.judged and r.long_pass and r.name in trends
            and trends[r.name].margin > CONFIRM_BAR and 0 < trends[r.name].per_step_bytes < NEAR_FLOOR * r.floor]
    names = {r.name for r in near}
    return [r.name for r in near if _grows_beside(r, trends, watched, names)]


def _grows_beside(resource: Resource, trends: Mapping[str, Trend], watched: Sequence[Resource],
                  apart: set[str]) -> bool:
    """Whether something other than ``apart`` grows in the process ``resource`` reads: under
    torchrun a leak on rank 1 is not beside rank 0's heap (which a long pass then called growing
    at 223 B a step on a rank that keeps nothing)."""
    same = [r for r in watched if r.process == resource.process]
    return any(name not in apart for name in growing(trends, same))


@dataclass(frozen=True)
class _Stage:
    """What the history says so far, worked out again from it at every call."""

    base: int                       # the index of the measured pass the verdicts stand on
    series: dict[str, list[float]]  # its readings, with the confirmation's where it ran through
    first: dict[str, Trend]         # the verdicts on the measured series alone
    crept: list[str]                # creeping on the measured series
    trends: dict[str, Trend]        # the verdicts so far
    count: int                      # readings of the measured series alone
    uncertain: tuple[str, ...] = ()
    confirmed_steps: int = 0
    records: Records | None = None


def _measured_stage(history: Sequence[Done], watched: Sequence[Resource]) -> _Stage:
    """The measured series the verdicts stand on: the last one, except where a re-measured series
    stopped (a step failed in it): then each series that made the jump it was measured again for
    is judged on the new readings where there are enough of them, and every other series on the
    longer one before it, where no lazy initialisation was seen (a DataLoader that runs out of
    data a few steps into the new series must not leave its workers' growth judged on those)."""
    base = max(i for i, done in enumerate(history) if done.kind in (WARMUP, MEASURED, REMEASURED))
    readings = {name: list(values) for name, values in history[base].readings.items()}
    if history[base].kind == REMEASURED and history[base].stopped:
        new = readings
        base = max(i for i, done in enumerate(history[:base]) if done.kind in (MEASURED, REMEASURED))
        readings = {name: list(values) for name, values in history[base].readings.items()}
        if len(next(iter(new.values()), ())) >= MIN_READINGS:
            readings.update((name, new[name]) for name in lazy_jumps(readings, watched))
    first = judge(readings, watched, history[base].over_budget, history[0].readings if base else None)
    return _Stage(base, readings, first, creeping(readings, watched, first), first, history[base].count)


def _confirmed(stage: _Stage, confirmation: Done, watched: Sequence[Resource], plan: Plan) -> _Stage:
    """The verdicts after a confirmation pass, decided again on the whole series. A noisy counter
    must still grow through the pass (:func:`confirm`); a resource whose verdict changed is
    uncertain. A pass a step failed in leaves the measured series' verdicts as they were."""
    if confirmation.stopped:
        return stage
    series = {name: values + list(confirmation.readings.get(name, ())) for name, values in stage.series.items()}
    trends = judge(series, watched, confirmation.over_budget)
    uncertain: tuple[str, ...] = ()
    if not confirmation.over_budget:
        start = stage.count - 1
        by_name = {r.name: r for r in watched}
        trends = {name: confirm(stage.first[name], trend, series[name][start:], by_name[name])
                  if name in stage.first else trend for name, trend in trends.items()}
        uncertain = tuple(name for name, trend in stage.first.items() if by_name[name].judged and name not in stage.crept
                          and name in trends and trends[name].verdict != trend.verdict)
    return _Stage(stage.base, series, stage.first, stage.crept, trends, stage.count, uncertain, plan.confirm_steps)


def records(trends: Mapping[str, Trend], watched: Sequence[Resource], plain: PlainData | None,
            plan: Plan) -> Records | None:
    """Growth that keeps only plain data, small over a long run, is a record, not a leak: a loss
    history of floats (``history.append(loss.item())``), which every training loop keeps. It
    settles where everything that grows is Python objects or the heap (never tensors, threads,
    descriptors or mappings), a census found every new object a plain record in a container the
    step reaches (never a callable, a hook, a tensor, bytes: :func:`leaklab.growth.is_plain`), the
    records explain the growth (each resource grows by at most :data:`EXPLAINED` times their
    objects or bytes a step: a C library's cache growing beside a set of shapes is not explained
    by the set), and they hold at most :data:`HORIZON_BUDGET` after ``plan.horizon`` steps.
    ``plan.strict`` keeps any growth a leak."""
    names = growing(trends, watched)
    by_name = {r.name: r for r in watched}

    def explained(name: str) -> bool:
        resource, rate = by_name[name], trends[name].per_step_bytes
        if resource.census != "objects" or resource.holds_tensors:
            return False  # tensors, threads, descriptors, mappings, workers: never a record
        if plain.covers is not None and name not in plain.covers:
            return False  # a series of a rank whose census found no record
        return rate <= EXPLAINED * (plain.objects_per_step if resource.unit != "B" else plain.bytes_per_step)

    if (plan.strict or plain is None or not names or not all(explained(name) for name in names)
            or plain.bytes_per_step * plan.horizon > HORIZON_BUDGET):
        return None
    return Records(plain.what, plain.bytes_per_step, plan.horizon, tuple(names))


def _as_records(stage: _Stage, confirmation: Done, watched: Sequence[Resource], plan: Plan) -> _Stage:
    """The stage with growth that is only a record of plain data settled (:func:`records`)."""
    found = None if confirmation.stopped or confirmation.over_budget else records(stage.trends, watched,
                                                                                 confirmation.plain, plan)
    if found is None:
        return stage
    trends = {name: _settled(trend, trend.tail_per_step_bytes) if name in found.resources else trend
              for name, trend in stage.trends.items()}
    return dataclasses.replace(stage, trends=trends, records=found)


def fills(trends: Mapping[str, Trend], watched: Sequence[Resource], filling: Filling | None) -> bool:
    """Whether what grows can be a bounded container filling: every growing resource is one a
    container's contents count in (tensors, Python objects, the heap: never threads, descriptors,
    mappings or workers), and a census found all the new objects in containers bounded by
    construction, full within :data:`FILL_STEPS_MAX` steps."""
    names = growing(trends, watched)
    by_name = {r.name: r for r in watched}
    return (filling is not None and bool(names) and filling.steps_to_full <= FILL_STEPS_MAX
            and all(by_name[name].census == "objects" for name in names))


def _filled(stage: _Stage, fill: Done, since: int, watched: Sequence[Resource]) -> dict[str, Trend]:
    """The verdicts after a fill pass: a series that is flat over the pass's last steps, once the
    container was full, rose while it filled and then stopped (a plateau, its rise over the whole
    series); one still rising keeps its verdict. A pass a step failed in changes nothing."""
    trends = dict(stage.trends)
    if fill.stopped:
        return trends
    for name, values in fill.readings.items():
        resource = next(r for r in watched if r.name == name)
        whole = stage.series[name] + list(values)
        tail = whole[len(stage.series[name]) - 1 + since:]
        if len(tail) >= MIN_READINGS and decide(tail, resource).verdict != GROWS:
            trends[name] = dataclasses.replace(decide(whole, resource), verdict=PLATEAU)
    return trends


def _long_passed(stage: _Stage, long_pass: Done, watched: Sequence[Resource], start: int) -> tuple[dict, dict]:
    """The verdicts after a long pass: each series it watched, decided on the whole of it (without
    the floor for a creep, and for a series near its floor beside growth elsewhere) and held to its
    rate through the pass (:func:`confirm_creep`); where a step ended the pass, the verdicts before
    it, less the growth of a series near its floor beside growth elsewhere."""
    trends, series = dict(stage.trends), dict(stage.series)
    for name, values in long_pass.readings.items():
        series[name] = stage.series[name] + list(values)
        resource = next(r for r in watched if r.name == name)
        beside = _grows_beside(resource, stage.trends, watched, set(long_pass.readings))
        if long_pass.stopped:
            # A step ended the pass (a DataLoader's epoch ran out), however far it got: a series near
            # its floor beside growth elsewhere was in it because its verdict there is the floor's coin
            # toss, and undecided it is not growth (the answer is the leak beside it); the others keep theirs.
            if beside and name not in stage.crept and trends[name].verdict == GROWS:
                trends[name] = _settled(trends[name], trends[name].tail_per_step_bytes)
            continue
        extended = decide(series[name], resource, floor=0 if name in stage.crept or beside else None)
        trends[name] = confirm_creep(stage.first[name], extended, series[name][start:],
                                     beside=beside and name not in stage.crept)
    return trends, series


def next_pass(history: Sequence[Done], watched: Sequence[Resource], plan: Plan) -> Pass | Verdicts:
    """The policy: the passes below (:func:`_next_step_pass`), then, where a series of a resource
    the process frees after the step returns is called growing, a settling pass (6)."""
    settle_steps = SETTLE_STEPS * plan.steps
    if history[-1].kind == SETTLE:
        return settled(_next_step_pass(history[:-1], watched, plan), history[-1], watched, settle_steps)
    decision = _next_step_pass(history, watched, plan)
    if isinstance(decision, Pass) or any(done.stopped or done.over_budget for done in history):
        return decision
    # Only where it grows alone in its process: beside a leak elsewhere the answer is that leak's.
    settling = [r.name for r in watched if r.settles and r.name in growing(decision.trends, watched)
                and not _grows_beside(r, decision.trends, watched, {r.name})]
    return Pass(SETTLE, settle_steps, resources=tuple(settling)) if settling else decision


def settled(verdicts: Verdicts, pause: Done, watched: Sequence[Resource], steps: int) -> Verdicts:
    """The verdicts after a settling pass: ``pause`` read each series after a pause, then again
    after ``steps`` steps and another pause. A series whose steps kept, across the pauses, less
    than :data:`HELD_FRACTION` of its rate, or less than its floor where its rate passed the floor
    (the floor was part of its verdict; a creep under it keeps the first test only), is bounded:
    its growth was held for a while by the process's own threads, not kept (the check's own steps
    on an NCCL rank of the H200 kept 0.7-0.8 KiB a step of the 1.6 KiB they rose by). One that
    fell by more than its steps would have raised it freed something else as well (another
    thread's memory, in a pause): its verdict stands, as it does where a step failed in the pass."""
    trends, paused = dict(verdicts.trends), []
    floors = {r.name: r.floor for r in watched}
    for name, (first, last) in ({} if pause.stopped else pause.readings).items():
        rate, kept = trends[name].per_step_bytes, (last - first) / steps
        floor = floors[name] if rate >= floors[name] else 0.0
        paused.append((name, rate, kept))
        if rate > 0 and -rate <= kept < max(HELD_FRACTION * rate, floor):
            trends[name] = _settled(trends[name], max(kept, 0.0))
    return dataclasses.replace(verdicts, trends=trends, paused=tuple(paused))


def _next_step_pass(history: Sequence[Done], watched: Sequence[Resource], plan: Plan) -> Pass | Verdicts:
    """The passes of steps, read top to bottom: after the passes in ``history`` (warm-up first),
    the next pass to run, or the verdicts.

    1. Warm-up stopped by the budget: judged as it is (what passed its budget grows). Otherwise the
       measured series.
    2. A measured series that passed a budget, or that a step failed in, is final. One where a
       judged series made one jump and stayed flat (a lazy initialisation: a first torch call
       after warm-up) is measured again from a new baseline, at most :data:`RESTARTS` times.
    3. Where any verdict is not a clear bounded, or a noisy series crept up under its floor, a
       confirmation pass continues the series and the verdicts are decided again on all of it.
    4. Where what grows is held only in bounded containers that fill within :data:`FILL_STEPS_MAX`
       steps (:func:`fills`), the growing series are continued until they are full and then for the
       steps asked for (a fill pass), and decided on those last steps (:func:`_filled`).
    5. Where nothing grows but a series crept, or what grows is only counters a lazily filled cache
       makes rise (:attr:`Resource.long_growth`), or growth elsewhere leaves a noisy series near its
       floor (:func:`near_floor`), those series alone are continued through a long pass, which may
       end once they all stalled. What still grows after it only as the record of plain data the
       confirmation's census found is that record (:func:`records`), as after the confirmation.
    """
    last = history[-1]
    if last.kind == WARMUP:
        if last.over_budget:
            return _final(_beside_a_budget_stop(_measured_stage(history, watched), watched, last.over_budget))
        return Pass(MEASURED, plan.steps)
    if last.kind in (MEASURED, REMEASURED):
        stage = _measured_stage(history, watched)
        if last.over_budget or last.stopped:
            return _final(_beside_a_budget_stop(stage, watched, last.over_budget))
        restarts = sum(done.kind == REMEASURED for done in history)
        jumps = lazy_jumps(last.readings, watched) if restarts < RESTARTS else []
        if jumps:
            return Pass(REMEASURED, plan.steps, why=f"{', '.join(jumps)} made one jump and stayed flat "
                        "(a lazy initialisation)")
        if plan.confirm and (needs_confirmation(stage.first, watched) or stage.crept):
            return Pass(CONFIRMATION, plan.confirm_steps, growing=tuple(growing(stage.first, watched)))
        return _final(stage)
    stage = _measured_stage(history, watched)
    start = stage.count - 1
    if last.kind == CONFIRMATION:
        stage = _as_records(_confirmed(stage, last, watched, plan), last, watched, plan)
        if last.stopped or last.over_budget or not plan.confirm:
            return _final(stage)
        if fills(stage.trends, watched, last.filling):
            return Pass(FILL, last.filling.steps_to_full + plan.steps, resources=tuple(growing(stage.trends, watched)),
                        why=last.filling.what, since=last.filling.steps_to_full)
        longer = (stage.crept if not growing(stage.trends, watched)
                  else growing_alone(stage.trends, watched) or near_floor(stage.trends, watched))
        if longer:
            return Pass(LONG_PASS, plan.creep_steps, resources=tuple(longer), since=start)
        return _final(stage)
    # A fill pass or a long pass follows the confirmation: the verdicts stand on the stage after it.
    stage = _as_records(_confirmed(stage, history[-2], watched, plan), history[-2], watched, plan)
    if last.kind == FILL:
        trends = _filled(stage, last, history[-2].filling.steps_to_full, watched)
        settled = tuple(name for name in last.readings if trends[name].verdict != stage.trends[name].verdict)
        return dataclasses.replace(_final(dataclasses.replace(stage, trends=trends)),
                                   filled=history[-2].filling, fill_steps=last.count, fill_settled=settled)
    if last.kind == LONG_PASS:
        trends, series = _long_passed(stage, last, watched, start)
        readings = len(next(iter(stage.series.values()), ()))  # the long pass's own are not the series'
        # What still grows after it may be only the record the confirmation's census found (a
        # list of floats, beside a heap that rose through the confirmation and then settled).
        stage = dataclasses.replace(stage, trends=trends, series=series)
        stage = stage if stage.records is not None or last.stopped else _as_records(stage, history[-2], watched, plan)
        return dataclasses.replace(_final(stage),
                                   readings=readings, long_passed=tuple(last.readings), long_pass_steps=last.count)
    raise ValueError(f"no pass of kind {last.kind!r}")


def _beside_a_budget_stop(stage: _Stage, watched: Sequence[Resource], over_budget: str | None) -> _Stage:
    """The stage of a run the budget stopped, which is not measured again: a series other than the
    one that passed its budget, that made one jump and stayed flat, is a lazy initialisation, not a
    plateau read from three readings (a library mapping its kernels at the first measured step put
    9.2 MiB into mapped_file_bytes on the H200, plateau in 1 run of 5, beside a leak the budget stopped)."""
    if over_budget is None:
        return stage
    jumps = {name for name in lazy_jumps(stage.series, watched)
             if name != over_budget and name in stage.trends and stage.trends[name].verdict == PLATEAU}
    if not jumps:
        return stage
    trends = {name: _settled(trend, trend.tail_per_step_bytes) if name in jumps else trend
              for name, trend in stage.trends.items()}
    return dataclasses.replace(stage, trends=trends)


def _final(stage: _Stage) -> Verdicts:
    # Uncertain: a verdict the confirmation changed and that stayed changed (a long pass may bring
    # it back to the first series' verdict: "changed host_heap from bounded to bounded" said nothing).
    uncertain = tuple(name for name in stage.uncertain if stage.first[name].verdict != stage.trends[name].verdict)
    changed = tuple((name, stage.first[name].verdict, stage.trends[name].verdict) for name in uncertain)
    return Verdicts(stage.trends, stage.series, stage.base, len(next(iter(stage.series.values()), ())),
                    uncertain, (), stage.confirmed_steps, records=stage.records, changed=changed)


__all__ = ["BOUNDED", "CONFIRMATION", "FILL", "GROWS", "LONG_PASS", "MEASURED", "PLATEAU", "RAISES", "REMEASURED", "SETTLE",
           "SETTLE_SECONDS", "STOPPED", "settled",
           "VERDICTS",
           "FILL_STEPS_MAX", "WARMUP", "Done", "Filling", "Pass", "Plan", "Trend", "Verdicts", "confirm", "confirm_creep", "creeps", "decide",
           "decide_truncated", "fills", "format_bytes", "judge", "near_floor", "next_pass", "one_jump", "scatter", "theil_sen_slope", "thin"]
