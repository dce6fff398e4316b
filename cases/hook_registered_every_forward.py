"""A wrapper that registers a forward pre-hook on every adapter layer in every forward pass.

Shaped after PEFT's X-LoRA (huggingface/peft#2761): on each forward the wrapper computes the
adapters' scale and injects it with `register_forward_pre_hook(partial(inject_scale, scale=...))`
on every adapter layer. It keeps the handles of the latest forward only, so the hooks of every
earlier forward stay registered: each layer carries one more hook per step, and every one of them
runs in every later forward. The output does not change (the newest hook runs last and wins), and
no tensor is kept: the leak is a few hundred small Python objects per step (hook partials, their
keyword dicts, the hook dicts' entries), while the step itself allocates megabytes of tensors.

Run it: python cases/hook_registered_every_forward.py
"""

import sys
from functools import partial

import torch
from torch import nn


class LoRALinear(nn.Module):
    """A linear layer plus a low-rank adapter whose contribution is scaled by `scale`."""

    def __init__(self, features: int, rank: int = 8):
        super().__init__()
        self.base = nn.Linear(features, features)
        self.down = nn.Linear(features, rank, bias=False)
        self.up = nn.Linear(rank, features, bias=False)

    def forward(self, x, scale: float = 1.0):
        return self.base(x) + scale * self.up(self.down(x))


def inject_scale(module, args, kwargs, scale):
    kwargs["scale"] = scale
    return args, kwargs


class ScaledAdapters(nn.Module):
    """Warms the adapters' scale up over the first steps and injects it into every adapter layer."""

    def __init__(self, model: nn.Module, warmup_calls: int = 100):
        super().__init__()
        self.model = model
        self.adapters = [module for module in model.modules() if isinstance(module, LoRALinear)]
        self.warmup_calls = warmup_calls
        self.calls = 0

    def forward(self, inputs):
        self.calls += 1
        scale = min(1.0, self.calls / self.warmup_calls)
        handles = [layer.register_forward_pre_hook(partial(inject_scale, scale=scale), with_kwargs=True)
                   for layer in self.adapters]
        self.last_handles = handles  # LEAK: only this forward's handles are kept; no forward's hooks are ever removed
        return self.model(inputs)


def make_step(device: str):
    torch.manual_seed(0)
    layers = [module for _ in range(8) for module in (LoRALinear(128), nn.ReLU())]
    model = ScaledAdapters(nn.Sequential(*layers, nn.Linear(128, 10))).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(64, 128, device=device)
    targets = torch.randint(0, 10, (64,), device=device)

    def train_step():
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return {"hooks_per_layer": len(model.adapters[0]._forward_pre_hooks)}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    before = sys.getallocatedblocks()
    for step in range(1, 31):
        hooks = train_step()["hooks_per_layer"]
        blocks = sys.getallocatedblocks()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  forward pre-hooks on each adapter layer {hooks:3d}"
              f"  Python object blocks {blocks - before:+6d}{allocated}")
        before = blocks
