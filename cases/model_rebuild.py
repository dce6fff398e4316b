"""Switching models in an inference service while a registry still holds the old ones.

The seed's service grew a little on every model switch until it added `del model` and
`torch.cuda.empty_cache()`. Measured: what keeps an old model alive is a reference to it (here
a registry keyed by version, "for rollback"); `del model` of a local name frees nothing while
the registry holds it, and `empty_cache()` only returns cached blocks that no tensor uses.
Dropping the registry's reference is the whole fix: the old model's tensors are freed at once
by reference counting (no cycle here, so `gc.collect()` adds nothing), and the caching
allocator reuses its blocks for the next model.

Run it: python cases/model_rebuild.py
"""

import torch
from torch import nn


def build_model(device: str) -> nn.Module:
    return nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)


def make_step(device: str):
    torch.manual_seed(0)
    # Two released checkpoints the service switches between (an A/B rollout).
    checkpoints = [build_model("cpu").state_dict() for _ in range(2)]
    requests = torch.randn(64, 512, device=device)
    models: dict[str, nn.Module] = {}
    version = 0

    def switch_and_serve():
        nonlocal version
        version += 1
        model = build_model(device)
        model.load_state_dict(checkpoints[version % 2])
        model.eval()
        models[f"classifier:v{version}"] = model  # LEAK: a new key per version: every old model stays registered
        with torch.inference_mode():
            predictions = model(requests).argmax(dim=1)
        del model  # the seed's remedy: removes a local name, frees nothing while the registry holds the model
        return {"registered_models": len(models), "served": predictions.numel()}

    return switch_and_serve


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    switch_and_serve = make_step(device)
    for step in range(1, 31):
        registered = switch_and_serve()["registered_models"]
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  models registered {registered:2d}{allocated}")
