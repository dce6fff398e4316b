"""Memory-mapped checkpoints kept for averaging: every load's mapping stays alive.

The training loop saves a checkpoint every epoch and, to evaluate the average of the most recent
checkpoints (checkpoint averaging), loads each one back with `torch.load(path, mmap=True)`: the
tensors stay on disk, so keeping them all looks free. It is not: each kept checkpoint is one more
file mapping in /proc/self/maps, and every page the averaging reads stays resident (RssFile) for
as long as a tensor of that checkpoint is alive. The list keeps every checkpoint ever loaded while
only the last few are averaged, so the mappings and the resident file pages grow every epoch.
The fix keeps a bounded window (`deque(maxlen=...)`): a dropped checkpoint's mapping goes away.

Run it: python cases/mmap_checkpoints_kept.py
"""

import os
import shutil
import tempfile
import weakref
from collections import deque

import torch
from torch import nn

AVERAGE_LAST = 4


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)  # ~140 KiB per checkpoint
    averaged = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(256, 128, device=device)
    targets = torch.randint(0, 10, (256,), device=device)
    checkpoint_dir = tempfile.mkdtemp(prefix="mmap_checkpoints_")
    recent_checkpoints = deque(maxlen=AVERAGE_LAST)  # FIX: only the averaged window; older mappings are unmapped
    epoch = 0

    def train_epoch():
        nonlocal epoch
        epoch += 1
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()

        path = os.path.join(checkpoint_dir, f"epoch_{epoch:04d}.pt")
        torch.save(model.state_dict(), path)
        # mmap=True: the tensors stay in the file and are paged in only when read; kept on the CPU
        checkpoint = torch.load(path, mmap=True, map_location="cpu", weights_only=True)
        recent_checkpoints.append(checkpoint)

        window = list(recent_checkpoints)[-AVERAGE_LAST:]
        with torch.no_grad():
            for name, param in averaged.state_dict().items():
                param.copy_(torch.stack([ckpt[name] for ckpt in window]).mean(0))  # reads every page of the window
            eval_loss = criterion(averaged(inputs), targets)
        return {"checkpoints_kept": len(recent_checkpoints), "eval_loss": eval_loss.item()}

    weakref.finalize(train_epoch, shutil.rmtree, checkpoint_dir, True)  # the files go when the step does (or at exit)
    train_epoch.checkpoint_dir = checkpoint_dir
    return train_epoch


def mapped_files(folder: str) -> int:
    """File-backed mappings of this process whose file lies in `folder`."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if line.split(maxsplit=5)[-1].startswith(folder))


def rss_file_kib() -> int:
    """Resident pages of file-backed mappings (RssFile in /proc/self/status), in KiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssFile:"))


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_epoch = make_step(device)
    for epoch in range(1, 31):
        kept = train_epoch()
        print(f"epoch {epoch:2d}  checkpoints kept {kept['checkpoints_kept']:2d}  "
              f"mappings of the checkpoint folder {mapped_files(train_epoch.checkpoint_dir):2d}  "
              f"RssFile {rss_file_kib():6d} KiB  averaged eval loss {kept['eval_loss']:.4f}")
