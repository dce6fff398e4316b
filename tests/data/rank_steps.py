"""Factories for the checks under torchrun (tests/test_distributed.py): each rank builds its own
step; every step here makes a collective (an all_reduce), so a rank that stops alone would hang
the others."""

import os
import sys
import time

import torch
import torch.distributed as dist


def _summed(device):
    total = torch.ones(4, device=device)

    def all_reduce():
        total.fill_(1)
        dist.all_reduce(total)  # every rank must run every step, or this waits
        return total

    return all_reduce


def bounded_all_reduce(device):
    """Every rank's step is an all_reduce and keeps nothing: bounded everywhere (the control)."""
    return _summed(device)


def leak_on_rank1(device):
    """Rank 1 keeps 25 KiB of CPU tensors a step (a debugging list left on one rank)."""
    all_reduce, kept, rank = _summed(device), [], dist.get_rank()

    def step():
        all_reduce()
        if rank == 1:
            kept.append(torch.zeros(6400))  # LEAK: 25 KiB a step, on rank 1 only

    return step


def fails_on_rank1(device):
    """Rank 1's fourth step fails as LEAKLAB_TEST_FAIL says: raise, exit or hang (the second
    measured step, after 2 warm-up steps, in the tests). Where it raises or hangs, rank 0 waits on
    it in the all_reduce until the process group's timeout; the step that exits has no collective,
    so rank 0 hears of it only from leaklab's own agreement after the step."""
    all_reduce, calls, rank = _summed(device), [], dist.get_rank()
    how = os.environ["LEAKLAB_TEST_FAIL"]

    def step():
        calls.append(1)
        if rank == 1 and len(calls) == 4:
            if how == "raise":
                raise RuntimeError("bad batch on rank 1")
            if how == "exit":
                sys.exit(5)
            time.sleep(3600)  # hang: ended by --timeout
        if how != "exit":
            all_reduce()

    return step


def factory_fails_on_rank1(device):
    if dist.get_rank() == 1:
        raise RuntimeError("no data shard for rank 1")
    return _summed(device)


class Handle:
    """What a step keeps on rank 1 below: not plain data, no tensor."""


def objects_on_rank1(device):
    """Rank 1 keeps a few small objects a step: Python objects alone grow, which the policy watches
    through a long pass before it calls it growth, so that pass runs on every rank. Sixteen a step,
    not one: a one-off fall of a few dozen blocks in the rank's process (once in CI, cause not
    found) is enough to call one object a step bounded; this case tests the pass, not the floor."""
    all_reduce, kept, rank = _summed(device), [], dist.get_rank()

    def step():
        all_reduce()
        if rank == 1:
            kept.extend(Handle() for _ in range(16))  # LEAK: sixteen objects a step, on rank 1 only

    return step


def device_leak_on_last_rank(device):
    """The last rank keeps 1 MiB of device memory a step (on one rank, rank 0): for the H200 run
    (tools/h200_ranks.sh), on CUDA with NCCL."""
    all_reduce, kept = _summed(device), []
    last = dist.get_rank() == dist.get_world_size() - 1

    def step():
        all_reduce()
        if last:
            kept.append(torch.zeros(1 << 18, device=device))  # LEAK: 1 MiB a step, on the last rank

    return step
