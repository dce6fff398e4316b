"""Per-step records with a parent link, kept in a list: freed only if something lets them go.

A record that points back to itself (a parent link, a callback that closes over its owner, an
exception kept with its frame) is garbage only for the garbage collector: reference counting
never frees it. Training code makes such cycles every step (profilers, loggers, exception
handling). Kept in an unbounded list, every record and its 100 kB scratch buffer stay. Kept in a
bounded deque, the old ones become cyclic garbage, which the collector frees: this is where the
seed's `gc.collect()` advice matters, and only there.

Run it: python cases/cyclic_garbage.py
"""

import collections
import gc

import torch
from torch import nn


class StepRecord:
    """What a logger keeps per step: the loss, a scratch buffer, and a link back to itself."""

    def __init__(self, loss: float):
        self.loss = loss
        self.scratch = bytearray(100_000)
        self.parent = self  # a parent link: reference counting alone never frees this record


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(32, 64, device=device)
    history = collections.deque(maxlen=4)  # FIX: bounded: old records become cyclic garbage, which the collector frees

    def train_step():
        optimizer.zero_grad()
        loss = model(inputs).pow(2).mean()
        loss.backward()
        optimizer.step()
        history.append(StepRecord(loss.item()))
        return {"records_held": len(history)}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        held = train_step()["records_held"]
        collected = gc.collect()
        print(f"step {step:2d}  records held {held:3.0f}  objects the collector freed {collected}")
