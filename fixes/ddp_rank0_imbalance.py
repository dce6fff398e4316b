"""Every rank of a two-GPU job loads the checkpoint onto GPU 0.

The seed lists uneven memory across GPUs in multi-GPU training under "gradient sync problems,
check the DDP configuration". A common cause is simpler: `torch.load` restores each tensor on
the device it was saved from, so a checkpoint saved from cuda:0 lands on GPU 0 in every rank
unless `map_location` says otherwise. Each rank then holds a copy of the weights on GPU 0 (and
a CUDA context there, since it touched that device), and GPU 0 runs out first.

The step launches the two ranks as separate processes, as torchrun does (LOCAL_RANK in the
environment), waits for them with a timeout, and reports each GPU's allocated memory summed
over the ranks.

Run it: python cases/ddp_rank0_imbalance.py   (needs two CUDA devices)
"""

import json
import os
import subprocess
import sys
import tempfile
import weakref

import torch
from torch import nn

WORLD_SIZE = 2


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))  # 64 MiB of weights


def run_rank(local_rank: int, checkpoint: str) -> dict[str, int]:
    """One rank's work: resume from the checkpoint, train one step, report memory per GPU."""
    device = torch.device("cuda", local_rank)
    model = build_model().to(device)
    state = torch.load(checkpoint, map_location=device)  # FIX: restore the tensors on this rank's own GPU
    model.load_state_dict(state)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs = torch.randn(64, 4096, device=device)
    targets = torch.randint(0, 10, (64,), device=device)
    loss = nn.functional.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize(device)
    return {f"gpu{i}": torch.cuda.memory_allocated(i) for i in range(torch.cuda.device_count())}


def launch(checkpoint: str, timeout: float = 120.0) -> list[dict[str, int]]:
    """Start one process per rank (like torchrun) and collect what each reports."""
    ranks = []
    for rank in range(WORLD_SIZE):
        env = {**os.environ, "LOCAL_RANK": str(rank), "RANK": str(rank), "WORLD_SIZE": str(WORLD_SIZE),
               "CHECKPOINT": checkpoint}
        ranks.append(subprocess.Popen([sys.executable, __file__], env=env, stdout=subprocess.PIPE, text=True))
    reports = []
    try:
        for process in ranks:
            out, _ = process.communicate(timeout=timeout)
            if process.returncode != 0:
                raise RuntimeError(f"rank exited with {process.returncode}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
    return reports


def make_step(device: str):
    if device != "cuda" or not torch.cuda.is_available() or torch.cuda.device_count() < WORLD_SIZE:
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise RuntimeError(f"ddp_rank0_imbalance needs {WORLD_SIZE} CUDA devices; torch sees {found}")
    torch.manual_seed(0)
    folder = tempfile.TemporaryDirectory(prefix="ddp_rank0_")
    checkpoint = os.path.join(folder.name, "checkpoint.pt")
    torch.save(build_model().to("cuda:0").state_dict(), checkpoint)  # saved by rank 0 during training

    def train_job():
        per_gpu = [sum(report[f"gpu{i}"] for report in launch(checkpoint)) for i in range(WORLD_SIZE)]
        return {"gpu0_mib": per_gpu[0] / 2**20, "gpu1_mib": per_gpu[1] / 2**20, "gpu0_over_gpu1": per_gpu[0] / per_gpu[1]}

    weakref.finalize(train_job, folder.cleanup)
    return train_job


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:  # started by launch(): one rank
        torch.manual_seed(int(os.environ["RANK"]))
        print(json.dumps(run_rank(int(os.environ["LOCAL_RANK"]), os.environ["CHECKPOINT"])))
        sys.exit(0)
    if not torch.cuda.is_available() or torch.cuda.device_count() < WORLD_SIZE:
        raise SystemExit(f"ddp_rank0_imbalance needs {WORLD_SIZE} CUDA devices")
    train_job = make_step("cuda")
    for step in range(1, 4):
        metrics = train_job()
        print(f"job {step}  GPU 0 {metrics['gpu0_mib']:.0f} MiB  GPU 1 {metrics['gpu1_mib']:.0f} MiB  "
              f"(allocated, summed over the ranks)")
