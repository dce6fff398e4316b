"""A new GradScaler every step: the loss scale never adapts, and steps are silently skipped.

The seed (000 §6.3) warns that re-creating the scaler "makes the gradient state abnormal and
indirectly causes memory problems". Measured: memory does not grow. What goes wrong is
training. Dynamic loss scaling starts at 65536 and halves the scale each time the scaled fp16
gradients overflow, skipping that optimizer step; here (unnormalised regression targets, a
common setup) the first 4 steps overflow on the CPU, then the scale settles at 4096 and every
step counts. A scaler created inside the step forgets what it learned: every step starts again
at 65536, overflows, and is skipped. The model never trains, and nothing crashes.

Run it: python cases/gradscaler_misuse.py
"""

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    inputs = torch.randn(256, 64, device=device)
    targets = 2 * torch.randn(256, 1, device=device) + 5  # raw targets (mean 5, std 2), not normalised

    def train_step():
        scaler = torch.amp.GradScaler(device)  # LEAK: a fresh scaler starts at 65536 every step and forgets its backoff
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            loss = nn.functional.mse_loss(model(inputs), targets)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        scaler.step(optimizer)  # skips optimizer.step() if the gradients hold inf/NaN
        scaler.update()  # lowers the scale after a skipped step
        skipped = scaler.get_scale() < scale
        return {"skipped": float(skipped), "scale": scale, "loss": loss.item()}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    skipped_total = 0
    for step in range(1, 31):
        metrics = train_step()
        skipped_total += int(metrics["skipped"])
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  loss {metrics['loss']:7.3f}  scale {metrics['scale']:7.0f}  "
              f"skipped so far {skipped_total:2d}{allocated}")
