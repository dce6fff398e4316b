"""Gradient clipping called before `backward()`: it clips nothing, and memory stays flat.

The seed (000 §3.3) lists clipping before `backward()` among the fixes for computation-graph
leaks, with "after backward, before step" as the right place. Measured: the placement matters,
but not for memory. Before `backward()` the gradients are None (`zero_grad()` sets them to
None), so `clip_grad_norm_` finds nothing to clip and reports a norm of 0; `backward()` then
writes the full gradient and `step()` applies it unclipped. No graph or tensor is kept: memory
is the same as with clipping in its place. What breaks is the clipping itself.

Run it: python cases/clip_grad_before_backward.py
"""

import torch
from torch import nn

MAX_NORM = 0.5


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(256, 512, device=device)
    targets = torch.randint(0, 10, (256,), device=device)

    def train_step():
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        clipped_from = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)  # LEAK: no gradients yet: clips nothing
        loss.backward()
        applied = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
        optimizer.step()
        return {"reported_grad_norm": clipped_from.item(), "applied_grad_norm": applied.item(), "loss": loss.item()}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        m = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  clip_grad_norm_ saw {m['reported_grad_norm']:.3f}  step() applied a gradient of norm "
              f"{m['applied_grad_norm']:.3f} (max {MAX_NORM})  loss {m['loss']:.4f}{allocated}")
