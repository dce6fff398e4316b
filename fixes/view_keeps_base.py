"""Keeping one row of a large output: the small view keeps the whole tensor alive.

Indexing a tensor (`logits[i]`, `x[:, :8]`, `t.view(...)`) returns a view: a new tensor object
that shares the original's storage. A view keeps that whole storage alive, however few elements
it shows. Here an evaluation loop keeps, for error analysis, the logits of the worst-classified
example of each batch: one 4,000-byte row, which pins the batch's whole 1024x1000 logits
(4 MB) for the rest of the run.

Run it: python cases/view_keeps_base.py
"""

import collections

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1000)).to(device).eval()
    criterion = nn.CrossEntropyLoss(reduction="none")
    worst_examples = collections.deque(maxlen=4)  # FIX: a report of bounded size: the latest 4 batches' worst rows

    @torch.no_grad()
    def eval_step():
        inputs = torch.randn(1024, 256, device=device)
        targets = torch.randint(0, 1000, (1024,), device=device)
        logits = model(inputs)
        worst = criterion(logits, targets).argmax()
        worst_examples.append(logits[worst].clone())  # FIX: a copy owns only its row's bytes, so `logits` is freed
        kept = {row.untyped_storage().data_ptr(): row.untyped_storage().nbytes() for row in worst_examples}
        return {"kept_rows": float(len(worst_examples)), "kept_bytes": float(sum(kept.values()))}

    return eval_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    eval_step = make_step(device)
    for step in range(1, 31):
        metrics = eval_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        rows, kept = int(metrics["kept_rows"]), metrics["kept_bytes"]
        print(f"step {step:2d}  {rows:2d} rows of 4,000 B kept, holding {kept / 2**20:6.1f} MiB of storage{allocated}")
