"""A DDP communication hook whose state refers to the DDP model keeps every trial's model alive.

A hyper-parameter search run under torchrun: every step is one trial that wraps a fresh model
in `DistributedDataParallel`, registers an fp16-compression communication hook
(`ddp.register_comm_hook(state, hook)`) and trains a few batches. The hook's state keeps the
DDP model, to read its process group. DDP's C++ reducer holds that state (and the hook), and the
DDP model holds the reducer: a cycle through C++ that Python's garbage collector cannot see, so
when the trial ends and drops the model, neither reference counting nor `gc.collect()` frees it.
Every trial's parameters, gradients and DDP buckets stay, on every rank.

The report: pytorch/pytorch#63211 (https://github.com/pytorch/pytorch/issues/63211), a leak in
torch's own ZeRO hooks (`ddp_zero_hook.py`), whose closures referred to the DDP model; models run
back to back kept their memory. Its fix, pytorch/pytorch#63162
(https://github.com/pytorch/pytorch/pull/63162), keeps a weak reference to the DDP model instead.
The hook API still keeps what it is given, so the same mistake in a user's hook leaks today.

Run it: torchrun --nproc-per-node 2 cases/comm_hook_keeps_model.py
"""

import gc

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

LEARNING_RATES = (0.3, 0.1, 0.03, 0.01)  # the search: one trial per step, cycling
BATCHES_PER_TRIAL = 2


def ddp_models_alive() -> int:
    """DDP models the interpreter still has (counted without keeping a reference to any)."""
    return sum(isinstance(obj, DDP) for obj in gc.get_objects())


class CompressionState:
    """What the hook reads at every bucket."""

    def __init__(self, ddp: DDP) -> None:
        self.ddp = ddp  # LEAK: the reducer holds this state and the DDP model holds the reducer: a cycle gc cannot see


def fp16_compress_hook(state: CompressionState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """All-reduce the bucket in half precision and average it over the ranks."""
    group = state.ddp.process_group
    compressed = bucket.buffer().to(torch.float16).div_(group.size())
    future = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(done: torch.futures.Future) -> torch.Tensor:
        buffer = bucket.buffer()
        buffer.copy_(done.value()[0])
        return buffer

    return future.then(decompress)


def build_model(device: str) -> nn.Module:
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)


def make_step(device: str):
    rank = dist.get_rank()
    generator = torch.Generator().manual_seed(rank)  # each rank reads its own shard
    trials = 0

    def trial():
        nonlocal trials
        lr = LEARNING_RATES[trials % len(LEARNING_RATES)]
        trials += 1
        torch.manual_seed(trials)  # the same initial weights on every rank
        ddp = DDP(build_model(device))
        ddp.register_comm_hook(CompressionState(ddp), fp16_compress_hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
        for _ in range(BATCHES_PER_TRIAL):
            inputs = torch.randn(32, 256, generator=generator).to(device)
            targets = torch.randint(0, 10, (32,), generator=generator).to(device)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(ddp(inputs), targets)
            loss.backward()
            optimizer.step()
        # The trial ends here: `ddp` and `optimizer` go out of scope, and the model should go with them.
        return {"loss": loss.item(), "ddp_models_alive": float(ddp_models_alive())}

    return trial


if __name__ == "__main__":
    dist.init_process_group("gloo")
    trial = make_step("cpu")
    for step in range(1, 31):
        metrics = trial()
        gc.collect()  # not pending garbage: a full collection frees nothing of the kept models
        print(f"rank {dist.get_rank()}  trial {step:2d}  loss {metrics['loss']:.3f}"
              f"  DDP models alive after gc.collect(): {ddp_models_alive()}")
    dist.destroy_process_group()
