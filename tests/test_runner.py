"""The runner's own guarantees: a leak is stopped at its budget, and what a step leaves behind
(memory, child processes) is reported, not hidden."""

import subprocess
import sys

import torch

from leaklab.runner import RunOptions, run_factory
from leaklab.verdict import GROWS, MiB

kept_forever = []


def test_a_leak_is_stopped_at_its_budget_and_reported_as_growing():
    def factory(device):
        hoard = []

        def step():
            hoard.append(torch.empty(16 * MiB, dtype=torch.uint8))  # 16 MiB per step

        return step

    options = RunOptions(steps=30, warmup=1, resources=("cpu_tensors",), budget={"cpu_tensors": 64 * MiB})
    report = run_factory(factory, "cpu", options)
    assert report.stopped_by_budget == "cpu_tensors"
    assert report.verdict == GROWS
    assert len(report.samples) < 31, "the series was cut short"
    assert report.samples[-1] - report.samples[0] <= 64 * MiB + 16 * MiB
    assert report.released, "the hoard dies with the step"


def test_memory_a_step_leaves_behind_is_reported():
    def factory(device):
        def step():
            kept_forever.append(torch.ones(64 * 1024))  # 256 KiB per step, outlives the step

        return step

    report = run_factory(factory, "cpu", RunOptions(steps=4, warmup=1, resources=("cpu_tensors",)))
    kept_forever.clear()
    assert not report.released
    # 1 warm-up step, 4 measured and the confirmation pass (the growth is confirmed before it is reported)
    assert report.leftover["cpu_tensors"] == (1 + 4 + report.confirmed_steps) * 256 * 1024
    assert report.confirmed_steps == 5


def test_a_child_process_left_running_is_counted():
    children = []

    def factory(device):
        def step():
            if not children:
                children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))

        return step

    try:
        report = run_factory(factory, "cpu", RunOptions(steps=3, warmup=0, resources=("host_heap",), child_wait=1.0))
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=30)
    assert report.children_left == 1
    assert not report.released


def test_multiprocessing_helpers_are_not_left_behind_by_a_step():
    # spawn starts multiprocessing's resource tracker, which lives as long as this process: its
    # memory is not the step's and it is not a child the step left running
    import multiprocessing
    import os
    import weakref

    def factory(device):
        pool = multiprocessing.get_context("spawn").Pool(processes=1)

        def step():
            pool.apply_async(os.getpid).get(timeout=60)

        weakref.finalize(step, pool.terminate)
        return step

    report = run_factory(factory, "cpu", RunOptions(steps=3, warmup=1, resources=("worker_memory",), child_wait=20.0))
    assert report.error is None
    assert report.released, (report.leftover, report.children_left)
