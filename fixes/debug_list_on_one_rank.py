"""A debugging list left on one rank: rank 1 keeps a tensor a step, and with it that step's graph.

Rank 1's loss spiked, so someone added a debugging line to the DDP training step: on rank 1
only, keep the batch's mean confidence (the softmax's top probability) every step, to see where
it went wrong. The line was never taken out. The kept value is a tensor that requires grad and
is not on the path `loss.backward()` traverses, so backward frees nothing of its graph: each
entry keeps the batch's whole softmax output alive. Only rank 1 grows; rank 0 stays flat, and
rank 0 is where most memory prints come from: Megatron's report_memory prints on data-parallel
rank 0 only, Lightning's DeviceStatsMonitor writes through loggers that log on rank 0, and
TorchTitan's run_train.sh shows rank 0's output (LOG_RANK=0).

The public reports are the same mechanism in frameworks: verl's Megatron engine kept each
micro-batch's grad-attached `model_output`, and only the last pipeline stage appended them, so
"the growth is asymmetric across ranks and easy to miss" (the last-stage rank climbed while the
others stayed flat), fixed by detaching before keeping them
(https://github.com/verl-project/verl/pull/7874); Megatron-LM's port of the same fix names one
context-parallel rank growing per micro-batch while its neighbour stays flat
(https://github.com/ISEEKYAN/Megatron-LM/pull/177). Here the list is never emptied, so the fix
keeps a number (`.item()`), not a detached tensor.

Run it: torchrun --nproc-per-node 2 cases/debug_list_on_one_rank.py
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

DEBUG_RANK = 1  # the rank whose loss spiked
BATCH, FEATURES, CLASSES = 64, 256, 1000


def make_step(device: str):
    """One DDP training step per call; assumes the default process group exists."""
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(FEATURES, 512), nn.ReLU(), nn.Linear(512, CLASSES)).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device] if device.startswith("cuda") else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    shard = torch.Generator().manual_seed(1000 + rank)  # each rank reads its own samples
    confidences = []  # debugging: rank 1's mean confidence, one entry a step

    def train_step():
        inputs = torch.randn(BATCH, FEATURES, generator=shard).to(device)
        targets = torch.randint(0, CLASSES, (BATCH,), generator=shard).to(device)
        optimizer.zero_grad()
        logits = ddp(inputs)
        loss = F.cross_entropy(logits, targets)
        loss.backward()  # all-reduces the gradients: every rank runs every step
        optimizer.step()
        if rank == DEBUG_RANK:
            confidences.append(logits.softmax(-1).amax(-1).mean().item())  # FIX: a number: no tensor, no graph, so the softmax is freed with the step
        return {"loss": loss.item(), "debug_entries": float(len(confidences))}

    train_step.debug_list = confidences  # for the printout below
    return train_step


def kept_by_graph(entry: torch.Tensor | float) -> int:
    """Bytes one debugging entry keeps alive through its graph: the softmax output that its amax
    node saved for a backward that never comes (a number keeps nothing)."""
    if not isinstance(entry, torch.Tensor) or entry.grad_fn is None:
        return 0
    amax_node = entry.grad_fn.next_functions[0][0]  # MeanBackward0 -> AmaxBackward0
    return amax_node._saved_self.untyped_storage().nbytes()


if __name__ == "__main__":
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from torchrun
    rank = dist.get_rank()
    train_step = make_step("cpu")
    for step in range(1, 31):
        metrics = train_step()
        if step in (1, 10, 20, 30):
            kept = sum(kept_by_graph(entry) for entry in train_step.debug_list)
            print(f"rank {rank} step {step:2d}  loss {metrics['loss']:.3f}  debugging list: "
                  f"{int(metrics['debug_entries']):2d} entries, their graphs keep {kept / 2**10:5.0f} KiB", flush=True)
    dist.destroy_process_group()
