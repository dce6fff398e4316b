"""`persistent_workers=True` and a Dataset that caches what it decodes: each worker's cache
lives from epoch to epoch and grows without bound.

A cache of decoded samples in the Dataset looks like it speeds up later epochs. With
`num_workers > 0` every worker has its own copy of the Dataset, so every worker fills its own
cache, which the training process never sees. With `persistent_workers=True` the workers, and
their caches, survive the end of the epoch, so the workers' memory climbs epoch after epoch
(here an epoch draws a fixed number of random samples from a large set, so nearly every
sample is new) until each worker holds its own copy of the whole decoded dataset.

Run it: python cases/persistent_workers_cache.py
"""

import multiprocessing

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler

IMAGES, SAMPLES_PER_EPOCH = 100_000, 256  # an epoch is 256 random draws out of 100k images


def decode(index: int) -> torch.Tensor:
    """Stands in for reading and decoding an image file: a 3x32x32 float image (12 KiB)."""
    generator = torch.Generator().manual_seed(index)
    return torch.rand(3, 32, 32, generator=generator)


class CachedImages(Dataset):
    def __init__(self) -> None:
        self.cache = {}  # index -> decoded image, so that later epochs skip decoding

    def __len__(self) -> int:
        return IMAGES

    def __getitem__(self, index: int):
        if index not in self.cache:
            self.cache[index] = decode(index)
        return self.cache[index], index % 10


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    dataset = CachedImages()
    sampler = RandomSampler(dataset, replacement=True, num_samples=SAMPLES_PER_EPOCH)
    loader = DataLoader(
        dataset, batch_size=64, sampler=sampler, num_workers=2, multiprocessing_context="fork",
        persistent_workers=True,  # LEAK: the workers, and the cache each one fills, outlive the epoch
    )

    def train_epoch():
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            criterion(model(images), labels).backward()
            optimizer.step()
        return {"workers_alive": len(multiprocessing.active_children())}

    return train_epoch


def workers_unique_mib() -> float:
    """Unique memory (private pages) of this process's worker processes, in MiB (Linux)."""
    kib = 0
    for child in multiprocessing.active_children():
        with open(f"/proc/{child.pid}/smaps_rollup") as handle:
            kib += sum(int(line.split()[1]) for line in handle if line.startswith(("Private_Clean", "Private_Dirty")))
    return kib / 1024


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_epoch = make_step(device)
    for epoch in range(1, 21):
        metrics = train_epoch()
        print(f"epoch {epoch:2d}  {metrics['workers_alive']:.0f} workers alive, "
              f"their unique memory {workers_unique_mib():6.1f} MiB")
