"""Rebuilding a model by rebinding its name: for a moment, two models are alive.

The seeds say memory doubles when a model is rebuilt mid-run, because the old model was not
released, and prescribe `del model` (with `gc.collect()` and `torch.cuda.empty_cache()`). In
the seeds' own form, `model = build_model()` with the old model still bound to `model`, the old
model is released, by reference counting, the moment the name is rebound: memory does not grow
from one switch to the next. What doubles is the peak: the new model is built while the old
one is still referenced, so for the length of the build both are in memory. `del model` before
building lowers that peak to one model. On a GPU that is close to full, the peak is what runs
out of memory.

Run it: python cases/model_rebuild_rebind.py
"""

import weakref

import torch
from torch import nn

_built: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()  # every model built and still alive
peak = {"parameter_mib": 0.0}  # parameter memory alive when the last build finished: the switch's peak


def build_model(device: str) -> nn.Module:
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    _built.add(model)
    peak["parameter_mib"] = parameter_mib_alive()
    return model


def parameter_mib_alive() -> float:
    """Parameter memory of every model still alive, in MiB."""
    return sum(p.nbytes for m in list(_built) for p in m.parameters()) / 2**20


def make_step(device: str):
    torch.manual_seed(0)
    # Two released checkpoints the service switches between (an A/B rollout).
    checkpoints = [build_model("cpu").state_dict() for _ in range(2)]
    requests = torch.randn(64, 512, device=device)
    model = build_model(device)
    version = 0

    def switch_and_serve():
        nonlocal model, version
        version += 1
        model = build_model(device)  # LEAK: the old model is still bound to `model` while the new one is built
        model.load_state_dict(checkpoints[version % 2])
        model.eval()
        with torch.inference_mode():
            predictions = model(requests).argmax(dim=1)
        return {"parameter_mib_at_build": peak["parameter_mib"], "served": predictions.numel()}

    return switch_and_serve


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    switch_and_serve = make_step(device)
    for step in range(1, 31):
        at_build = switch_and_serve()["parameter_mib_at_build"]
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  parameters alive while the new model is built: {at_build:.2f} MiB  "
              f"after the switch: {parameter_mib_alive():.2f} MiB{allocated}")
