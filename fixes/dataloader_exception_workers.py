"""A sample that fails to load ends the epoch; the exception is kept, and so are the workers.

A corrupt record makes `__getitem__` raise in a DataLoader worker. The loader re-raises the
error in the training process, the loop catches it, gives up on the rest of the epoch and starts
the next one, which makes a new iterator and starts new workers. Keeping the exception (to list
the failures at the end) keeps its traceback, whose frames include the iterator's own methods:
the failed epoch's iterator stays alive, and with it its worker processes, their memory and the
batches they had already prefetched into shared memory. One more set of workers every epoch.

Run it: python cases/dataloader_exception_workers.py
"""

import multiprocessing

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

RECORDS, FEATURES, CORRUPT = 512, 512, 200  # record 200 cannot be decoded


class Records(Dataset):
    """Feature vectors decoded from records; one record is corrupt."""

    def __len__(self) -> int:
        return RECORDS

    def __getitem__(self, index: int):
        if index == CORRUPT:
            raise ValueError(f"record {index}: truncated")
        generator = torch.Generator().manual_seed(index)
        return torch.randn(FEATURES, generator=generator), index % 10


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Linear(FEATURES, 10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    loader = DataLoader(Records(), batch_size=64, num_workers=1, multiprocessing_context="fork")
    failures = []  # reported at the end of training

    def train_epoch():
        try:
            for features, labels in loader:  # a new iterator, and new workers, every epoch
                features, labels = features.to(device), labels.to(device)
                optimizer.zero_grad()
                criterion(model(features), labels).backward()
                optimizer.step()
        except ValueError as error:  # a bad record: give up on this epoch, go on with the next
            failures.append(str(error.with_traceback(None)).splitlines()[-1])  # FIX: keep the message, not the traceback that holds the iterator and its workers
        return {"workers_alive": len(multiprocessing.active_children()), "failures": len(failures)}

    return train_epoch


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_epoch = make_step(device)
    for epoch in range(1, 13):
        metrics = train_epoch()
        print(f"epoch {epoch:2d}  {metrics['failures']:.0f} failed epochs  "
              f"{metrics['workers_alive']:.0f} worker processes alive")
