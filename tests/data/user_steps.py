"""Factories for the CLI and plugin tests: each returns a step, or fails the way a user's might."""

import torch

kept = []


def bounded(device):
    model = torch.nn.Linear(64, 64).to(device)
    x = torch.randn(32, 64, device=device)

    def step():
        model(x).sum().backward()
        model.zero_grad(set_to_none=True)

    return step


def grows(device):
    model = torch.nn.Linear(64, 64).to(device)
    x = torch.randn(32, 64, device=device)
    outputs = []

    def step():
        outputs.append(model(x))  # 8 KiB of output and its graph per step

    return step


def raises(device):
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 3:
            raise ValueError("bad batch")

    return step


def not_a_step(device):
    return 42


def broken_factory(device):
    raise RuntimeError("cannot build the model")


def metrics(device):
    count = [0]

    def step():
        count[0] += 1
        return {"scale": 2.0 ** count[0], "skipped": float(count[0] % 2)}

    return step


NOT_CALLABLE = 3
