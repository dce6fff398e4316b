"""Turning `pin_memory` off "to save GPU memory": pinned memory is host memory.

The seed (001 §3.4) lists `pin_memory` under the DataLoader settings that affect GPU memory and
advises `pin_memory=False` when GPU memory is tight. Pinned (page-locked) memory is host RAM:
the loader's pin thread copies each batch into it so that `.to("cuda", non_blocking=True)` can
be an asynchronous DMA. It is held by PyTorch's host caching allocator, one block per batch in
flight, rounded up to a power of two, and it takes no GPU memory. Turning it off frees that host
memory and makes the copies synchronous; the GPU holds the same batch either way.

Run it (needs CUDA): python cases/pin_memory_gpu_memory.py
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    """1024 3x64x64 float images, made up deterministically from the index."""

    def __len__(self) -> int:
        return 1024

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        return torch.rand(3, 64, 64, generator=generator), index % 10


def make_step(device: str):
    if device != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("pin_memory only pins with a CUDA device: this case needs one")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    loader = DataLoader(Images(), batch_size=64, shuffle=True, num_workers=2, prefetch_factor=2,
                        persistent_workers=True, multiprocessing_context="fork",
                        pin_memory=False)  # FIX: the seed's advice: frees pinned host memory, not GPU memory

    def forever():
        while True:
            yield from loader

    batches = forever()

    def train_step():
        images, labels = next(batches)
        pinned = images.is_pinned()
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        return {"batch_pinned": float(pinned), "loss": loss.item()}

    return train_step


def pinned_mib() -> float:
    """Pinned host memory held by PyTorch's host caching allocator, in use or cached, in MiB."""
    stats = torch.cuda.host_memory_stats()  # older torch: reserved_bytes; newer: allocated_bytes (cached included)
    return stats.get("reserved_bytes.current", stats.get("allocated_bytes.current", 0)) / 2**20


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("pin_memory_gpu_memory needs a CUDA device; torch sees none here")
    train_step = make_step("cuda")
    for step in range(1, 31):
        metrics = train_step()
        print(f"step {step:2d}  batch pinned: {bool(metrics['batch_pinned'])}  device allocated "
              f"{torch.cuda.memory_allocated() / 2**20:6.1f} MiB  pinned host {pinned_mib():6.1f} MiB")
