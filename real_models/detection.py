"""torchvision detection (fasterrcnn_mobilenet_v3_large_320_fpn, weights=None,
weights_backbone=None) trained on images of varying sizes, as in torchvision's
references/detection/engine.py: losses = sum(loss_dict.values()). Mistake: loss_dict kept every step."""

import itertools

import torch

LIBRARIES = ("torchvision",)


def _build(device):
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    big = str(device).startswith("cuda")
    model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=3,
                                                  min_size=320 if big else 64, max_size=640 if big else 96,
                                                  rpn_pre_nms_top_n_train=2000 if big else 50,
                                                  rpn_post_nms_top_n_train=2000 if big else 20,
                                                  box_batch_size_per_image=512 if big else 16)
    model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9)
    sizes = itertools.cycle([(64, 80), (80, 64), (72, 72)] if not big else [(320, 400), (400, 320), (360, 360)])
    n = 4 if big else 1

    def batch():
        h, w = next(sizes)
        images = [torch.rand(3, h, w, device=device) for _ in range(n)]
        targets = [{"boxes": torch.tensor([[4.0, 4.0, w / 2, h / 2]], device=device),
                    "labels": torch.tensor([1], device=device)} for _ in range(n)]
        return images, targets

    return model, optimizer, batch


def make_step(device):
    model, optimizer, batch = _build(device)

    def step():
        images, targets = batch()
        loss_dict = model(images, targets)
        losses = sum(loss_dict.values())
        optimizer.zero_grad(set_to_none=True)
        losses.backward()
        optimizer.step()

    return step


def make_mistake(device):
    model, optimizer, batch = _build(device)
    history = []

    def step():
        images, targets = batch()
        loss_dict = model(images, targets)
        losses = sum(loss_dict.values())
        optimizer.zero_grad(set_to_none=True)
        losses.backward()
        optimizer.step()
        history.append(loss_dict)  # MISTAKE: not {k: v.item() for k, v in loss_dict.items()}

    return step
