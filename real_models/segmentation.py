"""torchvision segmentation (lraspp_mobilenet_v3_large, weights=None, weights_backbone=None)
evaluated on images of varying sizes under torch.no_grad(), keeping the predicted masks on the CPU,
as in torchvision's references/segmentation evaluate(). Mistake: eval without no_grad, outputs kept."""

import itertools

import torch

LIBRARIES = ("torchvision",)


def _build(device):
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    big = str(device).startswith("cuda")
    model = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=4).to(device).eval()
    sizes = itertools.cycle([(480, 640), (512, 512), (640, 480)] if big else [(48, 64), (64, 48), (56, 56)])
    n = 8 if big else 1

    def batch():
        h, w = next(sizes)
        return torch.rand(n, 3, h, w, device=device)

    return model, batch


def make_step(device):
    model, batch = _build(device)
    pixel_counts = []

    def step():
        with torch.no_grad():
            out = model(batch())["out"]
        pixel_counts.append(out.argmax(1).flatten().bincount(minlength=4).tolist())
        del pixel_counts[:-100]

    return step


def make_mistake(device):
    model, batch = _build(device)
    outputs = []

    def step():
        out = model(batch())["out"]  # MISTAKE: no torch.no_grad(), and the output (with its graph) is kept
        outputs.append(out)

    return step
