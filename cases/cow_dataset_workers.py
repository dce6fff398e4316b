"""A Dataset that keeps its rows as a Python list: forked DataLoader workers' memory climbs.

The seed recommends `spawn` over `fork` for isolation. What fork really costs on the host: a
forked worker shares the parent's pages copy-on-write, but every row it reads is a Python
object whose reference count it writes, so each page of the list the worker touches is
copied into the worker. The workers' unique memory grows with every batch until they have
copied the whole dataset (pytorch issue 13246). Keeping the rows in one tensor fixes it:
indexing a tensor writes nothing into the shared pages.

Run it: python cases/cow_dataset_workers.py
"""

import multiprocessing

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

ROWS, FEATURES, BATCH = 9216, 64, 256  # 36 batches; as Python floats about 20 MiB


class Rows(Dataset):
    """Feature rows and labels, as a CSV reader would produce them."""

    def __init__(self) -> None:
        rows = torch.randn(ROWS, FEATURES).tolist()  # Python lists of Python floats
        self.rows = rows  # LEAK: one Python object per value; reading one writes its refcount, so fork copies its page
        self.labels = torch.arange(ROWS) % 10

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, index: int):
        return torch.as_tensor(self.rows[index]), self.labels[index]


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Linear(FEATURES, 10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    loader = DataLoader(Rows(), batch_size=BATCH, num_workers=2, multiprocessing_context="fork")
    batches = iter(loader)  # the workers exit when this iterator is dropped

    def train_step():
        features, labels = next(batches)
        features, labels = features.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = criterion(model(features), labels)
        loss.backward()
        optimizer.step()

    return train_step


def workers_unique_mib() -> float:
    """Unique memory (private pages) of this process's worker processes, in MiB (Linux)."""
    kib = 0
    for child in multiprocessing.active_children():
        with open(f"/proc/{child.pid}/smaps_rollup") as handle:
            kib += sum(int(line.split()[1]) for line in handle if line.startswith(("Private_Clean", "Private_Dirty")))
    return kib / 1024


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 26):
        train_step()
        print(f"step {step:2d}  workers' unique memory {workers_unique_mib():6.1f} MiB")
