"""CUDA tensors sent to another process through a queue, and kept there.

A training process sends each step's features to a helper process (a logger, a monitor, an
evaluator) through a `torch.multiprocessing` queue. A CUDA tensor is not copied: the helper
receives a CUDA IPC handle to the sender's own memory, and the sender cannot free that memory
while the receiver holds the tensor. PyTorch keeps the block alive in the sender (its "limbo")
after the sender's last reference is gone, and frees it only once the receiver has dropped its
copy. So a helper that keeps what it receives makes the *training* process's GPU memory grow,
although nothing in the training loop keeps anything: the PyTorch docs' rule is to release
received CUDA tensors in the consumer as soon as possible.

The helper here is `collections.deque` run over the queue (an importable function, so that a
`spawn` child can run it, even from a script loaded under another name): with `maxlen=None` it
keeps every tensor, as a logger that writes everything out at the end would; with `maxlen=0`
it lets each one go as soon as it has it, which is what a consumer should do.

On the CPU the queue moves each tensor into a shared-memory file and the helper holds that file
open: there the memory the helper keeps is shared memory instead of the sender's GPU memory.

Run it: python cases/cuda_tensor_queue_consumer.py
"""

import collections
import contextlib
import glob
import os
import time
import weakref

import torch
import torch.multiprocessing as mp
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(512, 1024), nn.ReLU()).to(device)
    head = nn.Linear(1024, 10).to(device)
    optimizer = torch.optim.SGD([*encoder.parameters(), *head.parameters()], lr=0.01)
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(256, 512, device=device)
    targets = torch.randint(0, 10, (256,), device=device)
    context = mp.get_context("spawn")  # CUDA tensors can only be shared with spawn or forkserver children
    inbox = context.Queue()
    logger = context.Process(
        target=collections.deque, args=(iter(inbox.get, None),), daemon=True,  # receives until it gets None
        kwargs={"maxlen": None},  # LEAK: keeps every CUDA tensor it receives, so the sender can never free them
    )
    logger.start()

    def train_step():
        optimizer.zero_grad()
        features = encoder(inputs)
        loss = criterion(head(features), targets)
        loss.backward()
        optimizer.step()
        sent = features.detach()
        inbox.put(sent)  # 1 MiB; on CUDA sent as an IPC handle to this process's own memory
        sent, deadline = weakref.ref(sent), time.monotonic() + 120
        while sent() is not None or not inbox.empty():  # do not run ahead of the logger: wait until it has it
            if not logger.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the logger process stopped taking tensors (exit code {logger.exitcode})")
            time.sleep(0.001)
        return {"loss": loss.item()}

    def stop_logger():
        inbox.put(None)
        logger.join(timeout=60)
        if logger.is_alive():
            logger.terminate()
        if device == "cuda":
            torch.cuda.ipc_collect()  # free the blocks the logger has let go of

    weakref.finalize(train_step, stop_logger)  # the logger exits when the step is dropped
    return train_step


def shared_memory_mib(pid: int) -> float:
    """Shared-memory tensor files that process ``pid`` holds open, in MiB (Linux)."""
    total = 0
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        with contextlib.suppress(OSError):  # a descriptor can close while we look
            if "torch_" in os.readlink(fd):
                total += os.stat(fd).st_size
    return total / 2**20


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 21):
        train_step()
        if device == "cuda":
            print(f"step {step:2d}  training process allocated {torch.cuda.memory_allocated() / 2**20:6.1f} MiB")
        else:
            logger_pid = mp.active_children()[0].pid
            print(f"step {step:2d}  logger holds {shared_memory_mib(logger_pid):6.1f} MiB of shared memory")
