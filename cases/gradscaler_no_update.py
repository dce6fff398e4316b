"""Mixed precision with `scaler.step()` but no `scaler.update()`.

The seed (000 §6.3) says a forgotten `scaler.update()` "makes the gradient state abnormal and
indirectly causes memory problems". Measured: no memory problem, because it cannot run that
long. The scaler records per optimizer that `step()` was called, and only `update()` clears
that record, so the second step raises
`RuntimeError: step() has already been called since the last update().`
`update()` is also what adapts the loss scale after an overflow; without it the scale would
stay at 65536 forever.

Run it: python cases/gradscaler_no_update.py
"""

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(256, 64, device=device)
    targets = 2 * torch.randn(256, 1, device=device) + 5  # raw targets (mean 5, std 2), not normalised
    scaler = torch.amp.GradScaler(device)

    def train_step():
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            loss = nn.functional.mse_loss(model(inputs), targets)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        scaler.step(optimizer)  # LEAK: no scaler.update() follows: the next step() raises, and the scale never adapts
        return {"scale": scale, "loss": loss.item()}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        try:
            metrics = train_step()
        except RuntimeError as error:
            print(f"step {step:2d}  RuntimeError: {error}")
            break
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  loss {metrics['loss']:7.3f}  scale {metrics['scale']:7.0f}{allocated}")
