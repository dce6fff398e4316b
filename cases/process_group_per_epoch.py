"""A process group made again every step for a metric's all_reduce, and never destroyed.

A data-parallel training step averages its loss over the replicas on a sub-group of its own
(the pattern of an evaluation or metric group), and builds that group with `dist.new_group`
inside the step. Dropping the Python name does not free it: c10d keeps every group it made in
its own registry (`_world.pg_map`) until `dist.destroy_process_group(group)`, so every step
leaves one more group behind, with its backend's sockets, pipes, threads and buffers, on every
rank. The reports: pytorch/pytorch#40400, a group made and deleted in a loop grows the process's
memory (gloo and NCCL); pytorch/pytorch#129868, a gloo group made every epoch (by the DataLoader)
leaks file descriptors until "too many open files"; NVIDIA/Megatron-LM#6897, groups set to None
without `destroy_process_group` stay alive in `_world.pg_map`.
https://github.com/pytorch/pytorch/issues/40400
https://github.com/pytorch/pytorch/issues/129868
https://github.com/NVIDIA/Megatron-LM/issues/6897

Run it: torchrun --nproc-per-node 2 cases/process_group_per_epoch.py
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.distributed_c10d import _world

STEPS = 30


def make_step(device):
    """One data-parallel step; assumes the default process group exists (every rank calls it)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    shard = torch.Generator().manual_seed(1000 + dist.get_rank())  # each rank reads its own samples
    replicas = list(range(dist.get_world_size()))

    def step():
        inputs = torch.randn(64, 32, generator=shard).to(device)
        targets = torch.randint(0, 10, (64,), generator=shard).to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
            parameter.grad /= len(replicas)
        optimizer.step()
        metric_group = dist.new_group(ranks=replicas)  # LEAK: a new group every step; c10d keeps each one until destroy_process_group
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss, group=metric_group)
        return {"loss": mean_loss.item() / len(replicas), "groups": float(len(_world.pg_map))}

    return step


def count(folder: str) -> int:
    """Entries of a /proc folder of this process: its open descriptors, or its threads."""
    return len(os.listdir(f"/proc/self/{folder}"))


if __name__ == "__main__":
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from torchrun
    rank = dist.get_rank()
    step = make_step("cpu")
    for number in range(1, STEPS + 1):
        metrics = step()
        print(f"rank {rank} step {number:2d}  loss {metrics['loss']:.4f}  process groups {metrics['groups']:.0f}"
              f"  open fds {count('fd')}  threads {count('task')}", flush=True)
    dist.destroy_process_group()
