"""A Dataset whose `__getitem__` opens each sample's file and keeps the handle open.

Reported for Hugging Face `datasets` (issue 3985): decoding an image column called
`PIL.Image.open(path)`, which reads the header and keeps the file open until the pixels are
loaded; keeping the decoded items (`[item for item in dataset]`) ran into "Too many open files".
The merged fix (PR 3995) loads the pixels at once, which closes the file. gaussian-splatting's
loader did the same with every training image (PR 309: copy the image, close the handle).

Here the dataset keeps one open handle per sample, in a dict keyed by index, so that a later
epoch reads it again without reopening it (the same habit as a kept h5py/zip/lmdb handle, but one
per sample). Every step draws samples not seen before, so the process holds a descriptor more
per sample, batch after batch, until `open()` fails with OSError: [Errno 24] Too many open files
(at `ulimit -n`, often 1024). CPython closes a file when its object is collected, so a handle
dropped after the read would not leak: the dict is what keeps them all open.

num_workers=0 keeps the reading in this process, so the descriptors are the ones
/proc/self/fd counts here. With workers, each worker fills its own dict in its own process: the
same growth, split between the workers and gone when they exit at the end of an epoch (or kept,
with persistent_workers=True).

Run it: python cases/files_opened_in_getitem.py
"""

import os
import shutil
import tempfile
import weakref
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class RawDigits(Dataset):
    """One 1x28x28 float32 image per file, as raw bytes; the label is the index modulo 10."""

    def __init__(self, root: Path) -> None:
        self.paths = sorted(root.glob("*.raw"))
        self.files = {}  # index -> open file handle, for samples read again in a later epoch

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int):
        if index not in self.files:
            self.files[index] = open(self.paths[index], "rb")  # LEAK: the dict keeps every sample's file open
        file = self.files[index]
        file.seek(0)
        image = torch.frombuffer(bytearray(file.read()), dtype=torch.float32).view(1, 28, 28)
        return image, index % 10


def write_images(count: int) -> Path:
    """Small image files in a fresh temporary folder (removed with the dataset, or at exit)."""
    root = Path(tempfile.mkdtemp(prefix="files_opened_in_getitem_"))
    generator = torch.Generator().manual_seed(0)
    for index in range(count):
        (root / f"{index:05d}.raw").write_bytes(torch.rand(1, 28, 28, generator=generator).numpy().tobytes())
    return root


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def make_step(device: str):
    torch.manual_seed(0)
    root = write_images(512)
    dataset = RawDigits(root)
    weakref.finalize(dataset, shutil.rmtree, root, ignore_errors=True)
    loader = DataLoader(dataset, batch_size=8, shuffle=True, num_workers=0, generator=torch.Generator().manual_seed(0))
    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    batches = iter(loader)

    def train_step():
        nonlocal batches
        try:
            images, labels = next(batches)
        except StopIteration:  # a new epoch
            batches = iter(loader)
            images, labels = next(batches)
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        return {"descriptors": open_descriptors()}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        metrics = train_step()
        print(f"step {step:2d}  open descriptors {metrics['descriptors']:4d}")
