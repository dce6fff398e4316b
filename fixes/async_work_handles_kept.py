"""Overlapping the gradient all-reduce with backward by hand, and keeping every step's Work handle.

Data parallelism by hand, overlapped: a hook on every parameter starts
`dist.all_reduce(param.grad, async_op=True)` as soon as backward has accumulated that gradient,
and the step waits on the handles before the optimizer step. The handles go into a list that is
waited on but never emptied. A `Work` handle keeps the tensors of its collective (on gloo even
after `wait()`: `work.result()` still returns them), and `zero_grad()` (set_to_none) makes
backward allocate new gradients every step, so every step's gradients stay alive on every rank.

The public report: pytorch/pytorch#124260 (memory not released after FSDP wrap, and with tensor
parallel all-reduces); there the maintainers explain that a collective's input and output
tensors are held until `.wait()` is called on its returned work object, so a late or missing
wait keeps them. The fix they confirm is to wait on the handles; here the handles must also be
dropped once waited on: https://github.com/pytorch/pytorch/issues/124260

Run it: torchrun --nproc-per-node 2 cases/async_work_handles_kept.py
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def make_step(device: str):
    """One rank's step; the default process group must exist (torchrun, or leaklab check --nproc)."""
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    world_size = dist.get_world_size()
    shard = torch.Generator().manual_seed(1000 + dist.get_rank())  # each rank reads its own samples
    params = list(model.parameters())
    gradient_bytes = sum(p.numel() * p.element_size() for p in params)  # one step's gradients
    pending = []  # the async all-reduces started during backward, waited on before the step

    def reduce_when_ready(param: torch.Tensor) -> None:
        pending.append(dist.all_reduce(param.grad, async_op=True))

    for param in params:
        param.register_post_accumulate_grad_hook(reduce_when_ready)

    def train_step():
        inputs = torch.randn(64, 256, generator=shard).to(device)
        targets = torch.randint(0, 10, (64,), generator=shard).to(device)
        optimizer.zero_grad()  # set_to_none: the next backward allocates new gradients
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()  # the hooks start one all-reduce per parameter while backward runs
        for work in pending:
            work.wait()
        pending.clear()  # FIX: drop the handles once waited on, and the gradients they hold with them
        for param in params:
            param.grad /= world_size  # the sum over the ranks becomes their mean
        optimizer.step()
        kept_steps = len(pending) / len(params)  # one handle per parameter per step
        return {"loss": loss.item(), "kept_handles": float(len(pending)), "kept_gradient_bytes": kept_steps * gradient_bytes}

    return train_step


if __name__ == "__main__":
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE and MASTER_* from torchrun
    rank = dist.get_rank()
    train_step = make_step("cpu")
    for step in range(1, 31):
        metrics = train_step()
        if step % 5 == 0:
            print(f"rank {rank}  step {step:2d}  loss {metrics['loss']:.3f}"
                  f"  {int(metrics['kept_handles']):3d} Work handles kept,"
                  f" holding {metrics['kept_gradient_bytes'] / 2**10:6.0f} KiB of gradients")
    dist.destroy_process_group()
