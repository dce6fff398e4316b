"""Evaluation results gathered to rank 0 every step and kept there for the metric at the end.

A distributed evaluation loop: every rank scores its own shard, and every step the predictions
and targets of all ranks are gathered to rank 0 (`dist.gather(..., dst=0)`), which appends them
to a list so that the metric can be computed over the whole evaluation set "at the end". Only
rank 0 keeps anything: its memory grows by every rank's batch at every step while the other
ranks stay flat, so the job runs out of memory on rank 0 alone once the evaluation set is large.

The public report is huggingface/transformers#10722 (the Trainer gathered the whole evaluation
set's predictions before computing the metrics, an array too large for the host; the request:
compute the metrics batch by batch), https://github.com/huggingface/transformers/issues/10722.
Its fix, merged as the Trainer's `batch_eval_metrics` (huggingface/transformers#28769: "update
average metrics at a batch level to prevent OOM errors with large eval sets"), is the one
torchmetrics documents for tensor states of constant size: reduce every step into a running
state of fixed size instead of keeping the results. Here that state is a confusion matrix whose
counts are summed over the ranks with `all_reduce`.

Run it: torchrun --nproc-per-node 2 cases/gathered_results_kept_on_rank0.py
"""

import torch
import torch.distributed as dist
from torch import nn

CLASSES, FEATURES, BATCH = 10, 64, 512  # every rank scores BATCH samples of its own shard a step


def make_step(device: str):
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same weights on every rank, as DDP's broadcast leaves them
    model = nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, CLASSES)).to(device).eval()
    shard = torch.Generator().manual_seed(1000 + rank)  # each rank reads different samples
    results = []  # rank 0: every rank's (predictions, targets) of every batch, for the metric at the end

    def record(preds: torch.Tensor, targets: torch.Tensor) -> None:
        pair = torch.stack([preds, targets])
        parts = [torch.empty_like(pair) for _ in range(dist.get_world_size())] if rank == 0 else None
        dist.gather(pair, parts, dst=0)
        if rank == 0:
            results.extend(parts)  # LEAK: rank 0 keeps every rank's batch of every step; the others keep nothing

    def accuracy() -> float:
        kept = torch.cat(results, dim=1)
        return (kept[0] == kept[1]).float().mean().item()

    def held_bytes() -> int:
        return sum(t.nbytes for t in results)

    def eval_step():
        inputs = torch.randn(BATCH, FEATURES, generator=shard).to(device)
        targets = torch.randint(0, CLASSES, (BATCH,), generator=shard).to(device)
        with torch.no_grad():
            preds = model(inputs).argmax(dim=1)
        record(preds, targets)
        metrics = {"held_bytes": float(held_bytes())}
        if rank == 0:  # the metric is reported by rank 0
            metrics["accuracy"] = accuracy()
        return metrics

    return eval_step


if __name__ == "__main__":
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from torchrun
    rank = dist.get_rank()
    eval_step = make_step("cpu")
    for step in range(1, 31):
        metrics = eval_step()
        shown = f"  accuracy so far {metrics['accuracy']:.4f}" if "accuracy" in metrics else ""
        print(f"rank {rank} step {step:2d}  held for the metric: {metrics['held_bytes'] / 2**10:6.0f} KiB{shown}",
              flush=True)
    dist.destroy_process_group()
