"""A timm model trained under torch.autocast with a GradScaler (timm's train.py with --amp):
scaler.scale(loss).backward(), scaler.step(optimizer), scaler.update(). On the CPU autocast runs in
bfloat16 and the scaler is torch.amp.GradScaler("cpu"). Mistake: the scaled loss kept for logging."""

import torch

LIBRARIES = ("timm",)


def _build(device):
    import timm

    big = str(device).startswith("cuda")
    model = timm.create_model("resnet18" if big else "resnet10t", pretrained=False, num_classes=10).to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    kind = "cuda" if big else "cpu"
    scaler = torch.amp.GradScaler(kind)
    x = torch.randn(64 if big else 2, 3, 224 if big else 32, 224 if big else 32, device=device)
    y = torch.randint(0, 10, (x.shape[0],), device=device)
    dtype = torch.float16 if big else torch.bfloat16
    return model, optimizer, scaler, x, y, kind, dtype


def make_step(device):
    model, optimizer, scaler, x, y, kind, dtype = _build(device)

    def step():
        with torch.autocast(kind, dtype=dtype):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

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
