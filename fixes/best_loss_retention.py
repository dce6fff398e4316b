"""Keeping the best validation loss as a tensor, for early stopping.

The seed says `if loss < best: best = loss` keeps the computation graph. It does: `best` holds
the graph of the step that set it, until a better loss replaces it. That is a retention, not a
growth: one graph at a time. What that graph pins depends on whether a backward ran through it.
For a training loss after `backward()` it is only a few autograd nodes; here the loss comes
from a validation pass run in eval mode but outside `torch.no_grad()` (eval mode does not stop
autograd), so `best` pins that pass's activations, about 2 MiB, for as long as it is the best.

Run it: python cases/best_loss_retention.py
"""

import itertools

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    teacher = torch.randn(256, 10, device=device)  # the labels follow a fixed rule, so there is something to learn
    val_inputs = torch.randn(512, 256, device=device)
    val_targets = (val_inputs @ teacher).argmax(dim=1)
    train_inputs = torch.randn(16, 64, 256, device=device)  # a small in-memory training set: 16 batches of 64
    batches = itertools.cycle(zip(train_inputs, (train_inputs @ teacher).argmax(dim=2)))
    best = float("inf")

    def train_step():
        nonlocal best
        model.train()
        inputs, targets = next(batches)
        optimizer.zero_grad()
        criterion(model(inputs), targets).backward()
        optimizer.step()

        model.eval()
        val_loss = criterion(model(val_inputs), val_targets)
        improved = bool(val_loss < best)
        if improved:
            best = val_loss.item()  # FIX: a float; the validation graph is freed at the end of the step
        return {"improved": float(improved), "best_holds_graph": float(getattr(best, "grad_fn", None) is not None)}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        metrics = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  improved {int(metrics['improved'])}  best holds a graph: {bool(metrics['best_holds_graph'])}{allocated}")
