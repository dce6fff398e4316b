"""A timm ViT trained under torch.autocast with a GradScaler (timm's train.py with --amp):
scaler.scale(loss).backward(), scaler.step(optimizer), scaler.update(), the recent losses kept as
floats in a ``deque(maxlen=100)`` for a smoothed log line. On the CPU autocast runs in bfloat16,
the scaler is torch.amp.GradScaler("cpu") and the ViT is timm's own tiny test_vit. Mistake: the
scaled loss kept for logging, the tensor with its graph, every step."""

from collections import deque

import torch

LIBRARIES = ("timm",)


def _build(device):
    import timm

    big = str(device).startswith("cuda")
    size = 224 if big else 64
    model = timm.create_model("vit_small_patch16_224" if big else "test_vit", pretrained=False, num_classes=10,
                              img_size=size).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    kind = "cuda" if big else "cpu"
    scaler = torch.amp.GradScaler(kind)
    x = torch.randn(64 if big else 2, 3, size, size, device=device)
    y = torch.randint(0, 10, (x.shape[0],), device=device)
    dtype = torch.float16 if big else torch.bfloat16
    return model, optimizer, scaler, x, y, kind, dtype


def make_step(device):
    model, optimizer, scaler, x, y, kind, dtype = _build(device)
    recent = deque(maxlen=100)

    def step():
        with torch.autocast(kind, dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        recent.append(loss.item())

    return step


def make_mistake(device):
    model, optimizer, scaler, x, y, kind, dtype = _build(device)
    scaled_losses = []

    def step():
        with torch.autocast(kind, dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        scaled_losses.append(scaled)  # MISTAKE: the scaled loss tensor and its graph, every step

    return step
