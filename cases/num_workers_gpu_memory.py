"""More DataLoader workers: host memory grows with them, GPU memory does not.

The seed says every worker copies the data into GPU memory, so `num_workers=8` means eight
times the GPU memory, and advises 2 workers with `prefetch_factor=2` when memory is tight.
Measured: workers are CPU processes that never touch the GPU; the training step's device
memory does not depend on how many there are. What scales with the workers is
host memory: each worker is a process with its own private memory, and the loader keeps
`num_workers * prefetch_factor` batches in flight.

Run it: python cases/num_workers_gpu_memory.py
"""

import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    """Decoded 3x64x64 images, made up deterministically from the index."""

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        return torch.rand(3, 64, 64, generator=generator), index % 10


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    loader = DataLoader(
        SyntheticImages(), batch_size=32, shuffle=True, pin_memory=device == "cuda",
        num_workers=4, prefetch_factor=2,  # LEAK: not a leak: the setting the seed blames; it costs host memory (workers, batches in flight), not GPU memory
    )
    batches = iter(loader)  # the workers exit when this iterator is dropped

    def train_step():
        images, labels = next(batches)
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        # Private attributes of the loader's iterator, read for the printout: stable since torch 1.x.
        return {"batches_in_flight": batches._tasks_outstanding, "workers": batches._num_workers}

    return train_step


def workers_uss_mib() -> float:
    """Private (unique) memory of this process's children, read from /proc (Linux)."""
    total_kib = 0
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as children:
            for pid in children.read().split():
                try:
                    with open(f"/proc/{pid}/smaps_rollup") as rollup:
                        total_kib += sum(int(line.split()[1]) for line in rollup if line.startswith("Private_"))
                except OSError:
                    continue
    return total_kib / 1024


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        metrics = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  {metrics['workers']} workers, {metrics['batches_in_flight']} batches in flight, "
              f"workers' private memory {workers_uss_mib():.0f} MiB{allocated}")
