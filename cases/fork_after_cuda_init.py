"""A helper process started with `fork` after the parent has initialised CUDA.

The seed says a forked child inherits the parent's CUDA context and doubles GPU memory, and
recommends `spawn`. Measured: nothing doubles. The forked child cannot use CUDA at all: its
first CUDA call raises `RuntimeError: Cannot re-initialize CUDA in forked subprocess`. A
`spawn`ed child is a fresh interpreter that creates its own CUDA context and works.

Here the training loop asks a helper process, once per step, how much GPU memory is free (a
monitor, as a logger or an evaluator would run). The child runs `torch.cuda.mem_get_info`, a
function it can import by name; a function of your own needs to be importable in the child
(top level of a module, or of a script guarded by `if __name__ == "__main__":`).

Run it: python cases/fork_after_cuda_init.py
"""

import multiprocessing
import sys
import weakref

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device)  # CUDA is initialised here
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(256, 512, device=device)
    targets = torch.randint(0, 10, (256,), device=device)
    context = multiprocessing.get_context("fork")  # LEAK: the child inherits a CUDA state it can never use
    monitor = context.Pool(processes=1)

    def train_step():
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        free, total = monitor.apply_async(torch.cuda.mem_get_info).get(timeout=120)  # the child's error is raised here
        return {"loss": loss.item(), "child_free_gib": free / 2**30, "child_total_gib": total / 2**30}

    weakref.finalize(train_step, monitor.terminate)  # the child exits when the step is dropped
    return train_step


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("this case needs a CUDA device: the forked child's failure is CUDA's")
    train_step = make_step("cuda")
    for step in range(1, 11):
        metrics = train_step()
        print(f"step {step:2d}  child sees {metrics['child_free_gib']:.1f} of {metrics['child_total_gib']:.1f} GiB free"
              f"  parent allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB")
