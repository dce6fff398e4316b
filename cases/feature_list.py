"""Keeping every batch's features in a list for a monitor.

The seed says `feats.append(feat)` keeps the computation graph and that `feat.detach()` fixes
it (and, in a note, that the list still grows if it is never emptied). Measured in a training
step: `backward()` has already freed the graph's saved activations, so what the list keeps is
the feature tensors themselves, 128 KiB a step; `.detach()` alone drops only a few autograd
nodes (~4 KiB a step of host heap) and the list grows just as fast. The fix keeps a bounded
window of detached features.

Run it: python cases/feature_list.py
"""

import torch
import torch.nn.functional as F
from torch import nn

BANK_BATCHES = 4  # the drift monitor compares each batch with the last few batches


def make_step(device: str):
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 128)).to(device)
    head = nn.Linear(128, 10).to(device)
    optimizer = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.01)
    criterion = nn.CrossEntropyLoss()
    feats = []  # features of past batches, for the drift monitor

    def train_step():
        inputs = torch.randn(256, 512, device=device)
        targets = torch.randint(0, 10, (256,), device=device)
        optimizer.zero_grad()
        feat = encoder(inputs)
        loss = criterion(head(feat), targets)
        loss.backward()
        optimizer.step()
        feats.append(feat)  # LEAK: every batch's 256x128 features stay in a list that is never emptied
        with torch.no_grad():
            bank = torch.cat(list(feats)[-BANK_BATCHES:])  # only the last few are read
            drift = 1 - F.cosine_similarity(feat.mean(0), bank.mean(0), dim=0)
        return {"feature_drift": drift.item(), "kept_batches": float(len(feats))}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        metrics = train_step()
        held = int(metrics["kept_batches"]) * 256 * 128 * 4
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  feats holds {int(metrics['kept_batches']):2d} batches, {held / 2**10:5.0f} KiB{allocated}")
