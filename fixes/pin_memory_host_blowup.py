"""A bigger batch every epoch with `pin_memory=True`: PyTorch's pinned host cache only grows.

The seed says `pin_memory` with big batches and many workers exhausts host memory before the
GPU's. What holds the memory: the loader copies every batch into page-locked host memory taken
from PyTorch's host caching allocator. Each block is rounded up to a power of two and, once
freed, is kept for a later request of the same rounded size; nothing hands it back to the
system. When the batch size grows (a batch-size ramp, progressive resizing, variable-length
batches), every new size class adds one block per batch in flight and the old blocks stay
(pytorch issues 97432, 95823).

Run it: python cases/pin_memory_host_blowup.py
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    """1024 decoded 3x32x32 uint8 images, made up deterministically from the index."""

    def __len__(self) -> int:
        return 1024

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        return torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=generator), index % 10


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    epoch = 0

    def train_epoch():
        nonlocal epoch
        batch_size = 32 + 16 * epoch  # batch-size ramp: a larger batch every epoch
        epoch += 1
        loader = DataLoader(Images(), batch_size=batch_size, shuffle=True, num_workers=4, prefetch_factor=4,
                            pin_memory=device == "cuda", multiprocessing_context="fork")
        for images, labels in loader:
            images = images.to(device, non_blocking=True).float() / 255
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
        last_loss = loss.item()  # waits for the last copies, so every pinned batch is free now
        del loader
        getattr(torch.accelerator, "empty_host_cache", torch._C._host_emptyCache)()  # FIX: hand the cached pinned blocks back
        return {"batch_size": batch_size, "loss": last_loss}

    return train_epoch


def pinned_cache_mib() -> float:
    """Pinned host memory held by PyTorch's host caching allocator, in use or cached, in MiB."""
    if not torch.cuda.is_available():
        return 0.0
    stats = torch.cuda.host_memory_stats()  # older torch: reserved_bytes; newer: allocated_bytes (cached included)
    return stats.get("reserved_bytes.current", stats.get("allocated_bytes.current", 0)) / 2**20


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("pin_memory_host_blowup needs a CUDA device: pinned memory is only used with one; torch sees none here")
    train_epoch = make_step("cuda")
    for epoch in range(1, 21):
        metrics = train_epoch()
        print(f"epoch {epoch:2d}  batch size {metrics['batch_size']:4d}  pinned host cache {pinned_cache_mib():7.1f} MiB")
