"""Where `optimizer.zero_grad()` goes: between `backward()` and `step()`, nothing trains.

The seed (001 §3.3) says the place of `zero_grad()` matters: not after `backward()`, because
the gradients have not been used yet; after `step()` works but is easy to forget; at the start
of the batch is clearest. Measured: right. Called after `backward()` and before `step()`, it
sets every `.grad` to None, `step()` skips parameters without a gradient, and the weights never
change: the loss stays where it started. Memory does not leak in any placement; the placements
differ only in whether the gradients stay allocated between steps.

Run it: python cases/zero_grad_placement.py
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

    def train_step():
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.zero_grad()  # LEAK: clears the gradients before step() has used them
        with_grad = sum(p.grad is not None for p in model.parameters())  # what step() is about to apply
        optimizer.step()
        return {"params_with_grad_at_step": with_grad, "loss": loss.item()}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        m = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  parameters with a gradient at step(): {m['params_with_grad_at_step']}  "
              f"loss {m['loss']:.4f}{allocated}")
