"""A project's own tests, run under torchrun by tests/test_distributed.py (torchrun ... -m pytest
this file): the ``leak_check`` fixture checks every rank together and fails on every rank, with
the rank that grows named."""

import pytest
import torch
import torch.distributed as dist

dist.init_process_group("gloo")


def make_step(leak):
    total, kept, rank = torch.ones(4), [], dist.get_rank()

    def step():
        dist.all_reduce(total)
        if leak and rank == 1:
            kept.append(torch.zeros(6400))  # LEAK: 25 KiB a step, on rank 1 only

    return step


def test_a_leak_on_rank_1(leak_check):
    leak_check.bounded(make_step(leak=True), steps=6, warmup=2, resource="cpu_tensors", timeout=30)


def test_no_leak(leak_check):
    leak_check.bounded(make_step(leak=False), steps=6, warmup=2, resource="cpu_tensors", timeout=30)


LEAKY = make_step(leak=True)


@pytest.mark.leaklab(steps=6, warmup=2, resource="cpu_tensors")
def test_a_marked_test_leaking_on_rank_1():
    LEAKY()
