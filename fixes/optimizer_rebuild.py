"""Rebuilding the optimizer every epoch while a history list still holds the old ones.

The seed (000 §4.3) says that rebuilding the optimizer mid-training without releasing the old
one makes memory grow. Here each epoch starts a fresh Adam (a warm restart at the epoch's
learning rate), and the epoch's record for the training report keeps the optimizer object
itself. Every old optimizer stays alive, and with it its state: `exp_avg` and `exp_avg_sq`,
twice the parameters' memory per epoch. Rebinding `optimizer` alone releases the old one at
once (an optimizer holds no reference cycle); it is the extra reference that keeps it.

Run it: python cases/optimizer_rebuild.py
"""

import weakref

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    criterion = nn.CrossEntropyLoss()
    batches = [(torch.randn(128, 256, device=device), torch.randint(0, 10, (128,), device=device)) for _ in range(4)]
    history = []
    built = weakref.WeakSet()  # only to count the optimizers still alive
    epoch = 0

    def train_epoch():
        nonlocal epoch
        epoch += 1
        lr = 1e-3 * 0.9 ** epoch
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)  # warm restart: fresh moments each epoch
        built.add(optimizer)
        for inputs, targets in batches:
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            loss.backward()
            optimizer.step()
        history.append({"epoch": epoch, "lr": lr, "loss": loss.item()})  # FIX: numbers only: the old optimizer goes when `optimizer` is rebound
        return {"optimizers_alive": len(built), "loss": loss.item()}

    return train_epoch


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_epoch = make_step(device)
    for epoch in range(1, 31):
        m = train_epoch()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"epoch {epoch:2d}  optimizers alive {m['optimizers_alive']:2d}  loss {m['loss']:.4f}{allocated}")
