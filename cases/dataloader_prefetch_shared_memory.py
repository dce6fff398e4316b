"""Many workers and a high `prefetch_factor`: the batches in flight sit in shared memory.

The seed says large batches with many workers and `pin_memory` run the host out of memory
first. On the host side, what scales is the prefetch queue: the loader keeps up to
`num_workers * prefetch_factor` batches in flight, each in a shared-memory file made by a worker
and handed to the training process through a file descriptor. That memory is in neither the
training process's heap nor the workers' private memory, so heap, RSS and per-process USS all
miss it; it is shared memory (`Shmem` in /proc/meminfo, /dev/shm in a container), and it is
there whether or not `pin_memory` is set.

Run it: python cases/dataloader_prefetch_shared_memory.py
"""

import contextlib
import glob
import multiprocessing
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    """Decoded 3x32x32 float images, made up deterministically from the index."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        return torch.rand(3, 32, 32, generator=generator), index % 10


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    loader = DataLoader(
        SyntheticImages(), batch_size=64, multiprocessing_context="fork",
        num_workers=4, prefetch_factor=8,  # LEAK: not a leak but a level: workers x prefetch_factor batches wait in shared memory
    )
    batches = iter(loader)  # the workers exit when this iterator is dropped

    def train_step():
        images, labels = next(batches)
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        return {"shared_mib": shared_memory_mib()}

    return train_step


def shared_memory_mib() -> float:
    """Shared-memory tensor files that this process and its workers hold open, in MiB (Linux).

    A batch a worker has finished is held by that worker's file descriptor until the training
    process takes it; the batch being trained on is held by the training process.
    """
    sizes = {}
    for pid in [os.getpid(), *(child.pid for child in multiprocessing.active_children())]:
        for fd in glob.glob(f"/proc/{pid}/fd/*"):
            with contextlib.suppress(OSError):  # a descriptor can close while we look
                if "torch_" in os.readlink(fd):
                    info = os.stat(fd)
                    sizes[info.st_ino] = info.st_size
    return sum(sizes.values()) / 2**20


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 21):
        metrics = train_step()
        print(f"step {step:2d}  batches in flight hold {metrics['shared_mib']:5.1f} MiB of shared memory")
