"""A new optimizer every step, one GradScaler, and no `scaler.update()`.

Not in the seed as such: it is the seed's forgotten `scaler.update()` (000 §6.3) in a loop that
re-creates its optimizer every step to set the learning rate. The scaler keeps its per-optimizer
record ("step() was called") keyed by `id(optimizer)`, and only `update()` clears it. A fresh
optimizer has a fresh id, so the missing `update()` is caught only when Python reuses the
address of a freed optimizer for a new one; until then the loop runs, with the loss scale stuck
at 65536 and every step skipped on overflow. Then `scaler.step()` raises
`RuntimeError: step() has already been called since the last update().` at a step that depends
on memory reuse: step 2 under leaklab, steps 3 to 6 when this script ran by itself.

Run it: python cases/gradscaler_new_optimizer.py
"""

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
    inputs = torch.randn(256, 64, device=device)
    targets = 2 * torch.randn(256, 1, device=device) + 5  # raw targets (mean 5, std 2), not normalised
    scaler = torch.amp.GradScaler(device)
    step_number = 0

    def train_step():
        nonlocal step_number
        step_number += 1
        lr = 1e-3 * min(1.0, step_number / 10)  # linear warm-up, set by building a new optimizer
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            loss = nn.functional.mse_loss(model(inputs), targets)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()  # FIX: clears the per-optimizer record (whatever the id) and adapts the scale
        return {"scale": scale, "loss": loss.item(), "optimizer_id": id(optimizer)}

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
        print(f"step {step:2d}  loss {metrics['loss']:7.3f}  scale {metrics['scale']:7.0f}  "
              f"optimizer id {metrics['optimizer_id']:#x}{allocated}")
