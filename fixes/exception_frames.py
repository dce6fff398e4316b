"""Keeping the exceptions raised by bad batches, to report them at the end.

An exception carries its traceback, and the traceback keeps every frame it passed through,
with all their local variables. Here a check raises on a batch whose loss is not finite, after
the forward pass: the frame of `forward_loss` still holds that loss and, through its graph, the
activations saved for a backward that never comes. The step catches the error and skips the
batch, which is right; keeping the exception object in a list keeps those frames, and their
tensors, for the rest of the run (the PyTorch FAQ's "out of memory exception handler" entry).

Run it: python cases/exception_frames.py
"""

import itertools

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    data = torch.randn(8, 256, 512, device=device)  # a small in-memory dataset: 8 batches of 256
    labels = torch.randint(0, 10, (8, 256), device=device)
    data[3, 17] = float("nan")  # two corrupted samples: every fourth batch is bad
    data[7, 100] = float("nan")
    batches = itertools.cycle(zip(data, labels))
    errors = []  # reported at the end of the epoch

    def forward_loss(inputs, targets):
        loss = criterion(model(inputs), targets)
        if not torch.isfinite(loss):
            raise RuntimeError(f"non-finite loss ({loss.item()}): skipping the batch")
        return loss

    def train_step():
        inputs, targets = next(batches)
        optimizer.zero_grad()
        try:
            loss = forward_loss(inputs, targets)
        except RuntimeError as error:
            errors.append(f"batch skipped: {error}")  # FIX: keep the message; the exception and its frames are freed
            return {"skipped": 1.0}
        loss.backward()
        optimizer.step()
        return {"skipped": 0.0}

    train_step.errors = errors
    return train_step


def graphs_held(errors) -> int:
    """How many tensors with an autograd graph the kept exceptions' frames hold in their locals."""
    count = 0
    for error in errors:
        tb = getattr(error, "__traceback__", None)
        while tb is not None:
            count += sum(getattr(value, "grad_fn", None) is not None for value in tb.tb_frame.f_locals.values())
            tb = tb.tb_next
    return count


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        metrics = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        errors = train_step.errors
        held = graphs_held(errors)
        print(f"step {step:2d}  skipped {int(metrics['skipped'])}  {len(errors)} errors kept, their frames hold {held} tensors with a graph{allocated}")
