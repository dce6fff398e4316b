"""An evaluation loop without `torch.no_grad()` that sums the loss tensor.

The seeds (000 §6.2, 001 §3.1) say that forgetting `no_grad` in validation makes the graphs of
the forward passes pile up. A forward pass alone does not: its graph is freed as soon as the
loss is reassigned. They pile up when the loop keeps a tensor that carries them, as this
running total does: with grad enabled every loss holds its graph, and with no `backward()` to
free them, each batch's saved activations (2 MiB here) stay alive until the total is dropped.
This is the evaluation-loop form of `loss_accumulation`.

Run it: python cases/validation_without_no_grad.py
"""

import itertools

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device).eval()
    criterion = nn.CrossEntropyLoss()
    val_loader = itertools.cycle([
        (torch.randn(256, 512, device=device), torch.randint(0, 10, (256,), device=device)) for _ in range(4)
    ])
    total_loss, seen = 0.0, 0

    @torch.inference_mode()  # FIX: no graph, and tensors skip autograd bookkeeping altogether
    def validate_step():
        nonlocal total_loss, seen
        inputs, targets = next(val_loader)
        loss = criterion(model(inputs), targets)
        total_loss = total_loss + loss * len(targets)
        seen += len(targets)
        return total_loss

    return validate_step


def graph_nodes(value) -> int:
    """Autograd nodes reachable from `value` (0 for a float or a tensor without a graph)."""
    seen, stack = set(), [getattr(value, "grad_fn", None)]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    validate_step = make_step(device)
    for step in range(1, 31):
        total_loss = validate_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"batch {step:2d}  total_loss holds {graph_nodes(total_loss):3d} autograd nodes{allocated}")
