"""Run under torchrun: the check through the Python API, with a budget only rank 1 passes (it keeps
1 MiB of CPU tensors a step), so that every rank must stop where rank 1 does; prints every rank's
report as one JSON list on rank 0."""

import json

import torch
import torch.distributed as dist

from leaklab.distributed import Coordinator, quiet_flight_recorder
from leaklab.runner import RunOptions, run_factory

MiB = 1 << 20


def leaks_past_the_budget(device):
    total, kept, rank = torch.ones(4), [], dist.get_rank()

    def step():
        dist.all_reduce(total)  # rank 0 would wait here forever, were it to run a step rank 1 does not
        if rank == 1:
            kept.append(torch.zeros(MiB // 4))  # LEAK: 1 MiB a step, on rank 1 only

    return step


def main() -> None:
    quiet_flight_recorder()
    coordinator = Coordinator.start("cpu", step_timeout=30)
    options = RunOptions(steps=6, warmup=2, resources=("cpu_tensors",), budget={"cpu_tensors": 4 * MiB}, timeout=30,
                         ranks=coordinator)
    report = run_factory(coordinator.factory(leaks_past_the_budget), "cpu", options)
    reports = coordinator.gather(report.to_json())
    if coordinator.rank == 0:
        print(json.dumps(reports), flush=True)
    coordinator.close()


# In a function, so that the step's tensors, which gloo's collectives touched, are freed before the
# interpreter finalizes: as module globals, freed during finalization, rank 1 aborted ("terminate
# called without an active exception", no Python frame) in ~1 run of 30 (pytorch/pytorch#179291).
main()
