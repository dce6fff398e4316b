"""Summing the loss *tensor* into a running total after backward().

The seed says this leaks GPU memory. Measured: after backward() the activations are freed, so
device memory stays flat; what grows is the host heap, one autograd node per step, because the
running total is a tensor whose graph links every step's loss.

Run it: python cases/loss_accumulation.py
"""

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(256, 512, device=device)
    targets = torch.randint(0, 10, (256,), device=device)
    running_loss = 0.0

    def train_step():
        nonlocal running_loss
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        running_loss += loss  # LEAK: a tensor with a graph; every step chains one more node onto it
        return running_loss

    return train_step


def autograd_depth(value) -> int:
    """How many autograd nodes hang off `value` along its first input (0 for a float)."""
    node, depth = getattr(value, "grad_fn", None), 0
    while node is not None:
        depth += 1
        node = node.next_functions[0][0] if node.next_functions else None
    return depth


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        running_loss = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  running_loss holds {autograd_depth(running_loss):3d} autograd nodes{allocated}")
