"""A background metrics writer created every epoch and never closed: one thread left per epoch.

Like TensorBoard's `SummaryWriter` (its event file writer), the writer hands every record to a
thread that writes it to disk, so the training loop never waits on the file. The thread waits on
its queue until `close()` sends it a sentinel. The loop makes a new writer every epoch and only
flushes it: the records reach the file, but the thread goes on waiting on a queue nobody feeds,
and the process has one more thread after every epoch (each with its stack) until it cannot
start a new one (`RuntimeError: can't start new thread`). The threads block, they use no CPU.

Run it: python cases/threads_never_joined.py
"""

import os
import queue
import tempfile
import threading

import torch
from torch import nn


class MetricsWriter:
    """Writes `tag value step` lines to a file from a background thread."""

    def __init__(self, path: str):
        self.path = path
        self.records = queue.Queue()
        self.thread = threading.Thread(target=self._write_records, name="metrics-writer", daemon=True)
        self.thread.start()

    def add_scalar(self, tag: str, value: float, step: int):
        self.records.put(f"{tag}\t{value:.6f}\t{step}\n")

    def flush(self):
        self.records.join()  # every record so far is on disk

    def close(self):
        self.records.put(None)  # the sentinel: the thread returns
        self.thread.join()

    def _write_records(self):
        while (line := self.records.get()) is not None:  # blocks while the queue is empty
            with open(self.path, "a") as f:
                f.write(line)
            self.records.task_done()
        self.records.task_done()


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    batches = [(torch.randn(32, 64, device=device), torch.randint(0, 10, (32,), device=device)) for _ in range(4)]
    log_dir = tempfile.TemporaryDirectory(prefix="threads_never_joined_")
    epoch = 0

    def train_epoch():
        nonlocal epoch
        epoch += 1
        writer = MetricsWriter(os.path.join(log_dir.name, f"epoch_{epoch}.tsv"))
        for i, (inputs, targets) in enumerate(batches):
            optimizer.zero_grad()
            loss = criterion(model(inputs), targets)
            loss.backward()
            optimizer.step()
            writer.add_scalar("train/loss", loss.item(), epoch * len(batches) + i)
        writer.close()  # FIX: the sentinel ends the thread once every record is written, and join() waits for it
        return {"threads_alive": threading.active_count()}

    return train_epoch


def os_threads() -> int:
    """The process's threads as the kernel counts them (Python's and torch's own)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_epoch = make_step(device)
    for epoch in range(1, 31):
        alive = train_epoch()["threads_alive"]
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"epoch {epoch:2d}  threading.active_count() {alive:3.0f}  Threads: {os_threads():3d}{allocated}")
