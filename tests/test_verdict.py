"""The verdict rule on synthetic series: each shape gets its verdict, every time."""

import random

import pytest

from leaklab import resources
from leaklab.verdict import (
    BOUNDED,
    GROWS,
    PLATEAU,
    confirm,
    confirm_creep,
    creeps,
    decide,
    one_jump,
    theil_sen_slope,
    thin,
)

EXACT = resources.CPU_TENSORS        # an exact counter: quantum 1 B, no floor
HEAP = resources.HOST_HEAP           # a noisy counter: its floor is its own scatter
DEVICE = resources.DEVICE_ALLOCATED  # exact, in 512 B blocks


def test_theil_sen_ignores_one_outlier():
    values = [100.0 * i for i in range(20)]
    values[7] = 1e9
    assert theil_sen_slope(values) == pytest.approx(100.0)


def test_steady_growth_grows_with_its_slope():
    trend = decide([1000 + 2048 * i for i in range(21)], EXACT)
    assert trend.verdict == GROWS
    assert trend.per_step_bytes == pytest.approx(2048)


@pytest.mark.parametrize(("resource", "per_step"), [(EXACT, 4), (DEVICE, 512), (HEAP, 1025), (HEAP, 4096)])
def test_an_exact_leak_at_the_counters_quantum_grows(resource, per_step):
    assert decide([10_000 + per_step * i for i in range(21)], resource).verdict == GROWS
    assert decide([10_000] * 21, resource).verdict == BOUNDED  # the mutation: the same series without the leak


def test_one_kib_every_third_step_grows():
    series = [1024 * (i // 3) for i in range(21)]
    trend = decide(series, EXACT)
    assert trend.verdict == GROWS
    assert trend.per_step_bytes == pytest.approx(1024 / 3, rel=0.1)


def test_a_leak_that_starts_mid_series_is_given_its_own_rate():
    series = [0] * 10 + [1024 * i for i in range(1, 12)]
    trend = decide(series, EXACT)
    assert trend.verdict == GROWS
    assert 512 <= trend.per_step_bytes <= 2048  # within 2x of the true 1 KiB/step
    assert trend.onset > 0


def test_heap_drift_under_its_floor_is_bounded():
    assert decide([10_000 + 500 * i for i in range(21)], HEAP).verdict == BOUNDED


def test_noise_around_a_flat_level_is_bounded():
    noise = [0, 300, -200, 150, -50, 250, -300, 100, 0, -150, 200, -100, 50, -250, 300, 0, -200, 150, -50, 250, -300]
    assert decide([10_000 + n for n in noise], HEAP).verdict == BOUNDED


def test_a_sawtooth_is_bounded():
    assert decide([(i % 4) * 1_000_000 for i in range(21)], HEAP).verdict == BOUNDED


def test_megabyte_swings_do_not_grow_by_the_slope_through_them():
    swings_mib = [0, 30, 5, 28, 2, 31, 7, 26, 1, 29, 4, 33, 6, 27, 3, 30, 8, 25, 2, 32, 5]
    assert decide([100 * 2**20 + m * 2**20 for m in swings_mib], HEAP).verdict == BOUNDED


def test_a_cache_that_fills_then_stops_is_a_plateau_not_growth():
    series = [min(i, 6) * 2**20 for i in range(21)]
    assert decide(series, EXACT).verdict == PLATEAU


def test_a_cache_that_fills_with_noise_on_top_is_still_a_plateau():
    series = [(min(i, 6) + (i % 3 == 0) * 0.3) * 2**20 for i in range(21)]
    assert decide(series, resources.SHARED_MEMORY).verdict == PLATEAU


def test_batches_in_flight_that_go_back_to_none_are_not_a_plateau():
    # An H200 run's shared memory with DataLoader workers (torch 2.11): 0, 1 or 2 batches of
    # 1.5 MiB in flight at each reading. A cache never empties back to where it started.
    series = [81920, 81920, 1654784, 1654784, 1654784, 81920, 1654784, 1654784, 1654784, 1654784, 1654784,
              1654784, 1654784, 1654784, 3227648, 1654784, 3227648, 1654784, 3227648]
    assert decide(series, resources.SHARED_MEMORY).verdict == BOUNDED


def test_a_spike_at_the_end_is_not_growth():
    series = [5000] * 19 + [5000 + 2**20, 5000]
    assert decide(series, EXACT).verdict == BOUNDED


def test_memory_that_decreases_is_bounded():
    assert decide([100_000 - 1024 * i for i in range(21)], EXACT).verdict == BOUNDED


def test_slow_steps_of_a_big_block_count_as_growth():
    assert decide([(i // 4) * 2**20 for i in range(21)], HEAP).verdict == GROWS


def test_one_jump_then_flat_is_recognised_and_steady_growth_is_not():
    assert one_jump([0] * 5 + [25 * 2**20] * 16, HEAP) == 5
    assert one_jump([1024 * i for i in range(21)], EXACT) is None
    assert one_jump([0] * 21, EXACT) is None


# The host heap of tests/data/edge_steps.py:variable_batch in a pytest-xdist worker beside a busy
# one (CPU, torch 2.14.1): a one-off 4.1 MiB buffer at the 9th measured step over ~20 KiB of scatter
# a step. The sum of every other step's size (466 KB) passed a tenth of the jump, so it was judged as
# a series ("grows", then "plateau"), not measured again past the jump.
LAZY_BUFFER_IN_A_NOISY_HEAP = [155986400, 156017456, 156031776, 156010160, 155994320, 156031776, 155999408, 156013120, 156015760, 160280832, 160286224, 160327808, 160276496, 160285712, 160330256, 160290976, 160325248, 160286256, 160302896, 160304656, 160290720]


def test_one_jump_in_a_noisy_counter_is_recognised_however_long_the_series():
    assert one_jump(LAZY_BUFFER_IN_A_NOISY_HEAP, HEAP) == 9
    growing_beside_it = [value + 100_000 * i for i, value in enumerate(LAZY_BUFFER_IN_A_NOISY_HEAP)]
    assert one_jump(growing_beside_it, HEAP) is None
    back_down = LAZY_BUFFER_IN_A_NOISY_HEAP[:15] + [LAZY_BUFFER_IN_A_NOISY_HEAP[0]] * 6
    assert one_jump(back_down, HEAP) is None


def test_a_noisy_counter_that_slows_down_while_confirmed_is_not_growing():
    first = decide([4000 * i for i in range(21)], HEAP)
    settling = [80_000 + 500 * i for i in range(11)]
    assert confirm(first, decide([4000 * i for i in range(21)] + settling[1:], HEAP), settling, HEAP).verdict == BOUNDED
    steady = [80_000 + 4000 * i for i in range(11)]
    assert confirm(first, decide([4000 * i for i in range(21)] + steady[1:], HEAP), steady, HEAP).verdict == GROWS


def test_long_series_are_thinned_exactly_and_decided_fast():
    series = [7 * i for i in range(15_001)]
    points, stride = thin(series)
    assert len(points) == 512 and points[0] == 0 and points[-1] == series[-1]
    trend = decide(series, EXACT)
    assert trend.verdict == GROWS and trend.per_step_bytes == pytest.approx(7, rel=0.01)


def test_too_short_a_series_is_refused():
    with pytest.raises(ValueError, match="at least 3"):
        decide([0, 1], EXACT)


def test_the_same_series_gets_the_same_verdict():
    series = [1000 + 97 * i + (i * 7919) % 300 for i in range(21)]
    assert len({decide(series, HEAP) for _ in range(5)}) == 1


# Workers' memory of num_workers_gpu_memory's leak run (no leak: 4 workers warming up), read in
# the flake gate beside other work: the first pass's 12 steps and the 6 confirmation steps (KiB).
WORKERS_SETTLING = [0, 84, 120, 212, 228, 1872, 416, 668, 688, 1368, 2020, 3092, 3172, 4988, 3564, 3672, 3688, 5240, 3760]


def _confirmed(series: list[int], first_steps: int):
    from leaklab.resources import WORKER_MEMORY
    from leaklab.verdict import confirm

    first = decide(series[:first_steps + 1], WORKER_MEMORY)
    extended = decide(series, WORKER_MEMORY)
    return first, extended, confirm(first, extended, series[first_steps:], WORKER_MEMORY)


def test_a_noisy_counter_that_stopped_growing_in_the_confirmation_is_bounded():
    series = [v * 1024 for v in WORKERS_SETTLING]
    first, extended, verdict = _confirmed(series, 12)
    assert (first.verdict, extended.verdict) == ("bounded", "grows")  # what the gate's run reported
    assert verdict.verdict == "bounded"


def test_a_noisy_counter_whose_growth_starts_late_still_grows():
    # flat for the first steps, then 600 KiB per step to the end of the confirmation (a late leak)
    series = [v * 1024 for v in [0, 8, 4, 12, 6, 10, 2, 608, 1208, 1808, 2408, 3008, 3608, 4208, 4808, 5408, 6008,
                                 6608, 7208]]
    first, extended, verdict = _confirmed(series, 12)
    assert verdict.verdict == "grows", (first, extended, verdict)


# A bytes(512) kept per step in a no-op step raises the heap by exactly 560 B at every step
# (measured on the CI machine); a DataLoader's heap rises as steadily for dozens of steps, then
# falls back: here 224 B a step, back to the baseline every 36 steps.
STEADY_560 = [10_000 + 560 * i for i in range(221)]
SAWTOOTH_224 = [10_000 + 224 * (i % 36) for i in range(221)]
# ... and a heap that settles: 560 B a step through the first pass, 40 B a step after.
SETTLING = STEADY_560[:21] + [STEADY_560[20] + 40 * i for i in range(1, 201)]


def _shapes_cache() -> list[int]:
    """A host-side cache per batch shape, 485 B each, with sizes drawn from 248 (seeded): the
    variable_batch control's heap on the H200 after warm-up, as new shapes grow rare."""
    draw, seen, heap = random.Random(0), set(), []
    for i in range(5 + 220):
        seen.add(draw.randrange(8, 256))
        if i >= 5:
            heap.append(10_000 + 485 * len(seen))
    return heap


SHAPES_CACHE = _shapes_cache()

# The heap of notebook_output_cache's cache_size fix, one run in ten of a flake gate (CPU, torch
# 2.14.1), as step-to-step moves: 12 steps, 6 of confirmation, then its long pass. It moves only in
# lumps (a dict or list that doubles) with long flat runs between: "grows" in that run, "bounded" in
# the nine others, depending on where the lumps fell.
NOTEBOOK_LUMPS = [
    448, 576, 0, 0, 0, 0, 1472, 0, 0, 0, 576, 0, 1984, 0, 0, 0, 0, 0, 3200, 0, 0, 0, 0, 0, 0, 0, 0, 1536, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 2624, 0, 0, 0, 688, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1744, 0, 0, 0, 0, 1248, 624, 0, 0,
    0, 0, 0, 0, 0, 0, 1744, 0, 880, 816, 0, 0, 0, 0, 0, 0, 0, 0, 4176, 0, 0, 0, 0, 0, 944, 816, 688, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 320, 160, 6480, 0, 688, 0, 0, 0, 0, 0, 0, 688, 0, 0, 0, 0, 0, 0, 0, 0, 320, 848, 0, 0,
    0, 688, 0, 0, 0, 0, 0, 0, 0, 0]
# 256 B of C heap per step where glibc had freed chunks of that size: a lump of 8 every 8 steps.
EVERY_EIGHTH = [10_000 + 2176 * (i // 8) for i in range(221)]


def test_a_steady_heap_rise_under_its_floor_creeps_and_noise_or_a_fall_does_not():
    assert decide(STEADY_560[:21], HEAP).verdict == BOUNDED  # under the 1 KiB floor
    assert creeps(STEADY_560[:21], HEAP) and creeps(SAWTOOTH_224[:21], HEAP)
    # 256 B of C heap kept per step, as measured where glibc had freed chunks of that size: its
    # thread cache hands out 7 (no change: mallinfo2 counts them as in use), then restocks 8 at once.
    lumps = [0, 0, 2176, 0, 0, 0, 0, 0, 0, 0, 2176, 0, 0, 0, 0, 0, 0, 0, 544, 0]
    assert creeps([10_000 + sum(lumps[:i]) for i in range(21)], HEAP)
    noisy = [10_000 + 560 * i + (300 if i % 2 else -300) for i in range(21)]
    assert not creeps(noisy, HEAP)
    fell = STEADY_560[:10] + [v - 3000 for v in STEADY_560[10:21]]
    assert not creeps(fell, HEAP)
    assert not creeps([10_000 + 4096 * i for i in range(21)], HEAP), "over the floor: the rule grows it already"
    assert not creeps([1024 * v for v in STEADY_560[:21]], resources.WORKER_MEMORY), "workers have no long pass"


def test_a_creep_that_keeps_its_rate_through_the_long_pass_grows_and_a_sawtooth_or_a_filling_cache_does_not():
    assert decide(SETTLING, HEAP, floor=0).verdict == GROWS  # the whole series still rises: the rate tells
    assert creeps(SHAPES_CACHE[:21], HEAP) and decide(SHAPES_CACHE, HEAP, floor=0).verdict == GROWS
    notebook = [10_000 + sum(NOTEBOOK_LUMPS[:i]) for i in range(len(NOTEBOOK_LUMPS) + 1)]
    for series, expected, steps in ((STEADY_560, GROWS, 20), (SAWTOOTH_224, BOUNDED, 20), (SETTLING, BOUNDED, 20),
                                    (SHAPES_CACHE, BOUNDED, 20), (EVERY_EIGHTH, GROWS, 20), (notebook, BOUNDED, 12)):
        first = decide(series[:steps + 1], HEAP)
        trend = confirm_creep(first, decide(series, HEAP, floor=0), series[steps:])
        assert trend.verdict == expected, (series[:40], trend)
    assert confirm_creep(decide(STEADY_560[:21], HEAP), decide(STEADY_560, HEAP, floor=0),
                         STEADY_560[20:]).per_step_bytes == pytest.approx(560)


def test_a_level_that_rose_once_and_stayed_is_not_growth_at_zero_bytes_a_step():
    # shared_memory of num_workers_gpu_memory's fix on the H200 (torch 2.11): DataLoader batches
    # of 1.5 MiB in flight went 0, 1, back to 0, then 2 and stayed. It was called "grows by 0 B/step
    # since step 12": a growth verdict whose own rate since it started is nothing.
    batches = [0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 2]
    series = [81_920 + 1_572_864 * n for n in batches]
    trend = decide(series, resources.SHARED_MEMORY)
    assert trend.verdict != GROWS, trend
    assert decide(series[:13], resources.SHARED_MEMORY).verdict == BOUNDED  # the first pass, as the run had it


def test_a_saw_tooth_that_falls_back_while_confirmed_is_not_growth():
    """python_objects of cow_dataset_workers' fix (CPU, torch 2.14.1): a DataLoader iterator's
    bookkeeping dict gains ~10 blocks a batch, then its table is rebuilt (-252). A leak at the
    same rate that never gives back stays growth."""
    from itertools import accumulate

    from leaklab.resources import PYTHON_OBJECTS
    from leaklab.verdict import confirm

    moves = [8, 10, 11, 10, 10, 10, 10, 10, 10, 12, 10, 10, 8, 12, 10, 8, 10, 10, 10, 12,
             12, 10, 8, 12, 10, 8, 12, -252, 7, 7]
    for steps, expected in ((moves, BOUNDED), ([abs(m) if m > 0 else 10 for m in moves], GROWS)):
        series = list(accumulate([522_000, *steps]))
        first = decide(series[:21], PYTHON_OBJECTS)
        assert first.verdict == GROWS
        verdict = confirm(first, decide(series, PYTHON_OBJECTS), series[20:], PYTHON_OBJECTS).verdict
        assert verdict == expected, (steps[-4:], verdict)
