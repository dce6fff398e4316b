"""The cost of torch.cuda.empty_cache() in a training loop, on a real torchvision model.

The seed (000 §6.3) says calling it every step halves training speed. We time a resnet18 step
three ways and report the ratio against never calling it; what we assert is the mechanism the
allocator's counters show (emptying the cache every step makes every step cudaMalloc and
cudaFree again), not the seed's number.
"""

import pytest
import torch

from leaklab_lab.timing import empty_cache_policies, empty_cache_ratios, format_ratios, resnet18_step

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def resnet_step():
    return resnet18_step("cuda")


@pytest.mark.parametrize("policy", ["never", "per_epoch", "per_step"])
def test_empty_cache_step_time(policy, resnet_step, benchmark):
    benchmark.group = "empty_cache: resnet18 training step"
    run = empty_cache_policies(resnet_step)[policy]

    def step_synchronized():
        run()
        torch.cuda.synchronize()

    benchmark.pedantic(step_synchronized, rounds=30, warmup_rounds=5, iterations=1)


def test_empty_cache_ratios_and_their_counters(benchmark, leaklab_record):
    benchmark.group = "empty_cache: ratios in one run"
    summary = benchmark.pedantic(empty_cache_ratios, rounds=1, iterations=1)
    benchmark.extra_info["empty_cache"] = summary
    leaklab_record("empty_cache_resnet18", summary)
    print(format_ratios(summary))
    never, per_step = summary["never"], summary["per_step"]
    timed_steps = per_step["rounds"]
    # Every step after empty_cache() has to get its memory from the driver again.
    assert per_step["counters"]["num_device_alloc"] >= timed_steps
    assert per_step["counters"]["num_device_free"] >= timed_steps
    assert never["counters"]["num_device_alloc"] < per_step["counters"]["num_device_alloc"] / 10
    # No gate on the time ratio: it is a benchmark's figure (leaklab bench), and under -n 8 on one
    # GPU it fell to 1.0 or below in one run of two (H100, 2026-12-07) while the counters held.
