"""A script that makes its own process group when it is imported, as many training scripts do:
the check uses it as it is (the factory fails where the group is not this one)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
GROUP = dist.group.WORLD


def make_step(device):
    if dist.group.WORLD is not GROUP:
        raise RuntimeError("the check replaced the script's own process group")
    total = torch.ones(4)

    def step():
        dist.all_reduce(total)

    return step
