"""A forward hook that appends every module output to a list.

The seed (000 §4.1) warns that a hook keeping `output` accumulates activations during training.
Its own dict form is overwritten each step (see `hook_dict_overwrite`); this is the form that
does grow: appending to a list keeps every step's output tensor alive, 2 MiB per step here.
`output.detach()` alone would not fix it: detach drops the graph, not the tensor's storage.
The structure has to stay bounded (keep the latest output per layer, or clear it each step).

Run it: python cases/hook_caching.py
"""

import torch
from torch import nn


def get_activation(activations: dict, name: str):
    def hook(module, inputs, output):
        activations[name] = output.detach()  # FIX: only the latest output, without its graph
    return hook


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device)
    activations = {}
    model[1].register_forward_hook(get_activation(activations, "hidden"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(256, 512, device=device)
    targets = torch.randint(0, 10, (256,), device=device)

    def train_step():
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        kept = held(activations)
        return {"held_tensors": len(kept), "held_mib": sum(t.untyped_storage().nbytes() for t in kept) / 2**20}

    return train_step


def held(obj) -> list:
    """The tensors inside a (nested) dict or list."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    values = obj.values() if isinstance(obj, dict) else obj
    return [tensor for value in values for tensor in held(value)]


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        kept = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  activations hold {kept['held_tensors']:2.0f} tensor(s), {kept['held_mib']:5.1f} MiB{allocated}")
