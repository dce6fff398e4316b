"""Verdicts on synthetic series: each shape gets its verdict, every time."""

import pytest

from leaklab.verdict import BOUNDED, GROWS, PLATEAU, decide, theil_sen_slope

FLOOR = 512


def test_theil_sen_ignores_one_outlier():
    values = [100.0 * i for i in range(20)]
    values[7] = 1e9
    assert theil_sen_slope(values) == pytest.approx(100.0)


def test_steady_growth_grows_with_its_slope():
    trend = decide([1000 + 2048 * i for i in range(21)], FLOOR)
    assert trend.verdict == GROWS
    assert trend.per_step_bytes == pytest.approx(2048)


def test_flat_noisy_series_is_bounded():
    noise = [0, 300, -200, 100, 0, -300, 200, 0, 100, -100, 300, 0, -200, 100, 0, 200, -100, 0, 100, 0, -300]
    assert decide([10_000 + n for n in noise], FLOOR).verdict == BOUNDED


def test_sawtooth_is_bounded():
    # forward grows, backward frees: the seed's "normal" curve
    assert decide([(i % 4) * 1_000_000 for i in range(21)], FLOOR).verdict == BOUNDED


def test_filling_cache_then_flat_is_a_plateau():
    series = [min(i, 8) * 2_000_000 for i in range(21)]
    trend = decide(series, FLOOR)
    assert trend.verdict == PLATEAU
    assert trend.rise_bytes == pytest.approx(16_000_000)


def test_growth_below_the_floor_is_bounded():
    assert decide([100 * i for i in range(21)], FLOOR).verdict == BOUNDED


def test_growth_that_starts_late_still_grows():
    series = [0] * 8 + [4096 * i for i in range(13)]
    assert decide(series, FLOOR).verdict == GROWS


def test_steps_to_exhaust():
    trend = decide([1024 * i for i in range(21)], FLOOR)
    assert trend.steps_to_exhaust(current=20 * 1024, capacity=1024 * 1024) == (1024 * 1024 - 20 * 1024) // 1024
    assert decide([0] * 21, FLOOR).steps_to_exhaust(0, 1) is None


def test_too_few_samples_is_an_error():
    with pytest.raises(ValueError, match="at least 3 samples"):
        decide([0, 1], FLOOR)


def test_same_series_same_verdict():
    series = [(i * 7919) % 1000 + 3000 * i for i in range(21)]
    assert len({decide(series, FLOOR) for _ in range(5)}) == 1


def test_large_swings_with_a_small_slope_are_bounded():
    # H200, variable-shape allocations: device_allocated swings by megabytes from step to step
    swings_mib = [0, -5.0, -7.4, -8.0, -2.6, -4.7, -4.6, -9.8, -3.6, -5.8, -5.6, -2.3, 0.8, -9.0, -10.3, -4.8, -1.8,
                  -6.1, -3.3, -7.7, -0.9]
    assert decide([100 * 2**20 + m * 2**20 for m in swings_mib], FLOOR).verdict == BOUNDED


def test_a_staircase_leak_grows():
    # one bad batch in four keeps 1 MiB alive: steps, not a line
    assert decide([(i // 4) * 2**20 for i in range(21)], FLOOR).verdict == GROWS
