"""`backward(retain_graph=True)` while the loss is kept after the step.

`retain_graph=True` tells autograd not to free the activations saved for backward, so that a
second backward can run through the same graph. They then live as long as anything references
the graph. On its own that is only until the end of the step; here every step's loss is also
kept in a list (for a second backward, for gradient diagnostics, that the script never gets
to), so every step's saved activations stay: tensor memory grows by a whole forward pass per
step.

Run it: python cases/retain_graph.py
"""

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(256, 512, device=device)
    targets = torch.randint(0, 10, (256,), device=device)
    kept_losses = []

    def train_step():
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward(retain_graph=True)  # LEAK: backward keeps the saved activations, for as long as anything references the graph
        optimizer.step()
        kept_losses.append(loss)  # LEAK: kept for a second backward that never comes: every step's graph stays referenced
        return kept_losses

    return train_step


def saved_activation_bytes(values) -> int:
    """Bytes of the tensors that autograd still holds for backward in the graphs behind `values`."""
    storages, seen = {}, set()
    nodes = [getattr(value, "grad_fn", None) for value in values]
    while nodes:
        node = nodes.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for name in dir(node):
            if name.startswith("_saved_"):
                try:
                    saved = getattr(node, name)
                except RuntimeError:  # freed by backward
                    continue
                if isinstance(saved, torch.Tensor):
                    storages[saved.untyped_storage().data_ptr()] = saved.untyped_storage().nbytes()
        nodes.extend(next_node for next_node, _ in node.next_functions)
    return sum(storages.values())


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        kept = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        held = saved_activation_bytes(kept)
        print(f"step {step:2d}  {len(kept):2d} losses kept; their graphs hold {held / 2**20:5.1f} MiB saved for backward{allocated}")
