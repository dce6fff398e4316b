"""Hand-rolled data parallelism that never all-reduces the gradients.

The seed (001 §3.3): "in distributed training I forgot to synchronise the gradients before the
step; every process had different gradients and the model did not converge; adding
`torch.distributed.all_reduce` fixed it". Without `DistributedDataParallel`, averaging the
gradients is the training loop's job. Forget it and every rank steps with the gradients of its
own shard only: the ranks start from the same weights and drift apart, so there are as many
models as ranks, none of them trained on all the data, and the one rank 0 saves is not what the
others trained. Memory stays flat; nothing raises.

The step launches the two ranks as separate processes, as torchrun does (RANK, WORLD_SIZE and
MASTER_PORT in the environment), and reports how far apart their weights end up. On two CUDA
devices the ranks use NCCL; anywhere else they run on the CPU with gloo.

Run it: python cases/ddp_forgotten_all_reduce.py
"""

import json
import os
import socket
import subprocess
import sys

import torch
import torch.distributed as dist
from torch import nn

WORLD_SIZE, STEPS = 2, 50


def average_gradients(model: nn.Module) -> None:
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)
        parameter.grad /= dist.get_world_size()


def run_rank(rank: int, use_cuda: bool) -> list[float]:
    """One rank's training on its own shard of the data; returns its final weights."""
    device = torch.device("cuda", rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)  # one GPU per rank
    dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=WORLD_SIZE)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    shard = torch.Generator().manual_seed(1000 + rank)  # each rank reads different samples
    for _ in range(STEPS):
        inputs = torch.randn(64, 32, generator=shard).to(device)
        targets = torch.randint(0, 10, (64,), generator=shard).to(device)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()  # LEAK: no all_reduce: each rank steps with its own shard's gradients only
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    dist.destroy_process_group()
    return weights.tolist()


def launch(use_cuda: bool, timeout: float = 300.0) -> list[list[float]]:
    """Start one process per rank (like torchrun) and collect each rank's final weights."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ranks = []
    for rank in range(WORLD_SIZE):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(WORLD_SIZE), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "USE_CUDA": str(int(use_cuda))}
        ranks.append(subprocess.Popen([sys.executable, __file__], env=env, stdout=subprocess.PIPE, text=True))
    weights = []
    try:
        for process in ranks:
            out, _ = process.communicate(timeout=timeout)
            if process.returncode != 0:
                raise RuntimeError(f"rank exited with {process.returncode}")
            weights.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
    return weights


def make_step(device: str):
    use_cuda = device == "cuda"
    if use_cuda and (not torch.cuda.is_available() or torch.cuda.device_count() < WORLD_SIZE):
        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise RuntimeError(f"ddp_forgotten_all_reduce needs {WORLD_SIZE} CUDA devices; torch sees {found}")

    def train_job():
        rank0, rank1 = (torch.tensor(w) for w in launch(use_cuda))
        return {"rank_weight_gap": (rank0 - rank1).abs().max().item(), "weight_norm": rank0.norm().item()}

    return train_job


if __name__ == "__main__":
    if "RANK" in os.environ:  # started by launch(): one rank
        print(json.dumps(run_rank(int(os.environ["RANK"]), os.environ["USE_CUDA"] == "1")), flush=True)
        # Skip the interpreter's finalization: gloo state freed there aborts a rank now and then
        # ("terminate called without an active exception", pytorch/pytorch#179291).
        os._exit(0)
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= WORLD_SIZE
    train_job = make_step("cuda" if use_cuda else "cpu")
    for job in range(1, 3):
        metrics = train_job()
        print(f"job {job}  after {STEPS} steps the two ranks' weights differ by up to {metrics['rank_weight_gap']:.4f}"
              f"  ({'2 GPUs, NCCL' if use_cuda else 'CPU, gloo'})")
