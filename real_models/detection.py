"""torchvision detection (Faster R-CNN, weights=None, weights_backbone=None) trained on images of varying sizes, as in torchvision's
references/detection/engine.py: losses = sum(loss_dict.values()). Mistake: loss_dict kept every step."""

import itertools

import torch

LIBRARIES = ("torchvision",)


def _model(big):
    """On CUDA a torchvision detector as it ships; on the CPU the same Faster R-CNN built the way
    torchvision's detection tutorial swaps in a small backbone (mobilenet_v3_small's features, one
    feature map, a narrow box head), so that a step stays in tens of milliseconds here."""
    from torchvision.models import mobilenet_v3_small
    from torchvision.models.detection import FasterRCNN, fasterrcnn_mobilenet_v3_large_320_fpn
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.ops import MultiScaleRoIAlign

    if big:
        return fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=3,
                                                     min_size=320, max_size=640, rpn_pre_nms_top_n_train=2000,
                                                     rpn_post_nms_top_n_train=2000, box_batch_size_per_image=512)
    backbone = mobilenet_v3_small(weights=None, width_mult=0.5).features
    backbone.out_channels = backbone[-1].out_channels
    return FasterRCNN(backbone, min_size=64, max_size=96,
                      rpn_anchor_generator=AnchorGenerator(sizes=((16, 32, 64),), aspect_ratios=((0.5, 1.0, 2.0),)),
                      box_roi_pool=MultiScaleRoIAlign(featmap_names=["0"], output_size=7, sampling_ratio=2),
                      box_head=TwoMLPHead(backbone.out_channels * 7 * 7, 128), box_predictor=FastRCNNPredictor(128, 3),
                      rpn_pre_nms_top_n_train=50, rpn_post_nms_top_n_train=20, box_batch_size_per_image=16)


def _build(device):
    big = str(device).startswith("cuda")
    model = _model(big)
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
