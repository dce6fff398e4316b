"""A script that makes its own process group when it is imported, as many training scripts do:
the check uses it as it is (the factory fails where the group is not this one). Rank 0 holds
4 MiB more than the others from the start (results gathered to it once) and nothing grows: a
level skew, not growth."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
GROUP = dist.group.WORLD


def level_on_rank0(device):
    if dist.group.WORLD is not GROUP:
        raise RuntimeError("the check replaced the script's own process group")
    total = torch.ones(4)
    held = torch.zeros(1024 * 1024) if dist.get_rank() == 0 else None  # LEVEL: 4 MiB on rank 0

    def step():
        dist.all_reduce(total)
        return {"held": 0 if held is None else held.numel()}

    return step
