"""Forgetting `optimizer.zero_grad()`: gradients pile up, memory does not.

The seed says gradients that are never zeroed keep occupying GPU memory. Measured: `.grad`
is one buffer per parameter, and backward() adds into it in place, so memory stays flat
(0 B/step on the H200). What goes wrong is training: every step applies the sum of all past
gradients, so the gradient norm climbs step after step and the loss stops going down.

Run it: python cases/forgot_zero_grad.py
"""

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(256, 512, device=device)
    targets = torch.randint(0, 10, (256,), device=device)

    def train_step():
        optimizer.zero_grad()  # FIX: start every step from zero gradients
        loss = criterion(model(inputs), targets)
        held = sum(p.grad.nbytes for p in model.parameters() if p.grad is not None)  # gradients alive during the forward
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))  # only measures
        optimizer.step()
        return {"grad_norm": grad_norm.item(), "loss": loss.item(), "grad_mib_during_forward": held / 2**20}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        metrics = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  grad norm {metrics['grad_norm']:7.3f}  loss {metrics['loss']:.4f}  "
              f"gradients held during the forward {metrics['grad_mib_during_forward']:.2f} MiB{allocated}")
