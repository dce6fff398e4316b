"""Run under torchrun: ``leaklab.watch`` around a loop on every rank, rank 1 keeping 25 KiB of
CPU tensors a step; prints rank 0's view as JSON (the one answer and every rank's verdict)."""

import json

import torch
import torch.distributed as dist

import leaklab

dist.init_process_group("gloo")  # the training script's own group, used by the watch as it is
kept = []
with leaklab.watch(warmup=2, steps=8, resource="cpu_tensors", name="loop") as w:
    total = torch.ones(4)
    for _ in range(10):
        dist.all_reduce(total)
        if dist.get_rank() == 1:
            kept.append(torch.zeros(6400))  # LEAK: 25 KiB a step, on rank 1 only
        w.step()
if dist.get_rank() == 0:
    print(json.dumps({"answer": w.answer, "verdicts": [report["verdict"] for report in w.reports],
                      "own": w.report.verdict}), flush=True)
dist.destroy_process_group()
