"""A script that starts worker processes at import time, outside `if __name__ == "__main__":`.

With the `spawn` start method (the default on macOS and Windows; Python 3.14 makes
`forkserver`, which behaves the same here, the default on Linux) a worker is a fresh
interpreter that imports the main script again, as `__mp_main__`, before it runs anything.
Whatever the script does at module level runs again in every worker. Here the module level
computes the dataset's mean with a DataLoader worker, a constant computed once at import: in
the worker the re-import reaches the same line and tries to start a worker of its own, which
`multiprocessing` refuses ("An attempt has been made to start a new process before the current
process has finished its bootstrapping phase"). The worker dies, and the program with it.
The seed says the processes are created recursively, without end; they are not.

`make_step` runs this file as a program in a fresh interpreter, as `python` does, because a
script that another program imports (as this suite does) is not the one a worker re-imports.

Run it: python cases/spawn_without_main_guard.py
"""

import subprocess
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
DATASET = TensorDataset(torch.randn(4096, 32) * 3 + 1, torch.randint(0, 10, (4096,)))


def channel_mean(dataset: TensorDataset) -> torch.Tensor:
    loader = DataLoader(dataset, batch_size=1024, num_workers=1, multiprocessing_context="spawn")
    return torch.cat([features for features, _ in loader]).mean(0)


def train(mean: torch.Tensor, epochs: int) -> None:
    model = nn.Linear(32, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(DATASET, batch_size=256, shuffle=True, num_workers=1, multiprocessing_context="spawn",
                        persistent_workers=True)
    for epoch in range(1, epochs + 1):
        total = 0.0
        for features, labels in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(features - mean), labels)
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch}  loss {total / len(loader):.4f}", flush=True)


def make_step(device: str):
    """One run of this file as a program; raises with the program's error if it fails."""

    def run_program():
        done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            errors = " ".join(done.stderr.split())
            bootstrapping = "An attempt has been made to start a new process before the current process has finished its bootstrapping phase"
            worker = f"a worker failed with: {bootstrapping}; " if bootstrapping in errors else ""
            raise RuntimeError(f"{worker}the program exited with {done.returncode}: {done.stderr.strip().splitlines()[-1]}")
        return {"exit_code": done.returncode, "epochs": done.stdout.count("epoch ")}

    return run_program


if __name__ == "__main__":
    train(channel_mean(DATASET), epochs=3)  # FIX: under the guard: a spawned worker imports this file without running it
