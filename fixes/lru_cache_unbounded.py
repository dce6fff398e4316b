"""A DETR-style matcher whose cost matrix is cached with `functools.lru_cache(maxsize=None)`.

The seed (000 §5.3) tells of a Mask2Former run whose memory kept growing because the
matcher's cost matrix sat behind `@lru_cache` with tensors as arguments. Tensors hash by
`id()`, so every call misses and adds an entry, and each entry keeps its argument tensors
(here views that pin the whole batch's predictions) and the cost matrix it returned. With
`maxsize=None` (or `functools.cache`) nothing is ever evicted: memory grows by one batch's
entries every step for the whole run. (The default `maxsize=128` stops at 128 entries: see
`lru_cache_matcher`.)

Run it: python cases/lru_cache_unbounded.py
"""

import torch
from torch import nn
from torchvision.ops import box_convert, generalized_box_iou

NUM_CLASSES, NUM_QUERIES, HIDDEN, BATCH, OBJECTS = 20, 100, 64, 16, 8


# FIX: no cache: tensors hash by id, so it could never hit; the cost is recomputed per call
def cost_matrix(logits, boxes, tgt_labels, tgt_boxes):
    """Matching cost between one image's queries and its targets: class, L1 and GIoU terms."""
    cost_class = -logits.softmax(-1)[:, tgt_labels]
    cost_l1 = torch.cdist(boxes, tgt_boxes, p=1)
    cost_giou = -generalized_box_iou(box_convert(boxes, "cxcywh", "xyxy"), box_convert(tgt_boxes, "cxcywh", "xyxy"))
    return 5.0 * cost_l1 + cost_class + 2.0 * cost_giou


@torch.no_grad()
def match(outputs, targets):
    """Greedy one-to-one matching of queries to targets, per image: query index for each target."""
    costs = torch.stack([
        cost_matrix(outputs["logits"][i], outputs["boxes"][i], target["labels"], target["boxes"])
        for i, target in enumerate(targets)
    ])  # (images, queries, targets)
    images = torch.arange(costs.shape[0], device=costs.device)
    queries = torch.empty(costs.shape[0], costs.shape[2], dtype=torch.long, device=costs.device)
    for _ in range(costs.shape[2]):
        best = costs.flatten(1).argmin(1)  # the cheapest remaining (query, target) pair of each image
        query, column = best // costs.shape[2], best % costs.shape[2]
        queries[images, column] = query
        costs[images, query, :] = float("inf")
        costs[images, :, column] = float("inf")
    return queries


def make_step(device: str):
    torch.manual_seed(0)
    # The prediction heads of a DETR decoder: class logits and (cx, cy, w, h) boxes per query.
    model = nn.ModuleDict({
        "logits": nn.Linear(HIDDEN, NUM_CLASSES + 1),
        "boxes": nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 4), nn.Sigmoid()),
    }).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    decoder_states = torch.randn(BATCH, NUM_QUERIES, HIDDEN, device=device)
    targets = [
        {"labels": torch.randint(0, NUM_CLASSES, (OBJECTS,), device=device),
         "boxes": torch.cat([torch.rand(OBJECTS, 2), 0.05 + 0.3 * torch.rand(OBJECTS, 2)], 1).to(device)}
        for _ in range(BATCH)
    ]

    def train_step():
        optimizer.zero_grad()
        outputs = {name: head(decoder_states) for name, head in model.items()}
        queries = match(outputs, targets)
        images = torch.arange(BATCH, device=device)[:, None]
        target_classes = torch.full((BATCH, NUM_QUERIES), NUM_CLASSES, device=device)
        target_classes[images, queries] = torch.stack([target["labels"] for target in targets])
        l1 = nn.functional.l1_loss(outputs["boxes"][images, queries], torch.stack([target["boxes"] for target in targets]))
        loss = nn.functional.cross_entropy(outputs["logits"].flatten(0, 1), target_classes.flatten()) + 5.0 * l1
        loss.backward()
        optimizer.step()
        return {"cache_entries": cache_entries()}

    return train_step


def cache_entries() -> int:
    """Entries in the cost-matrix cache (0 when there is no cache)."""
    return cost_matrix.cache_info().currsize if hasattr(cost_matrix, "cache_info") else 0


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        entries = train_step()["cache_entries"]
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.2f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  cost-matrix cache holds {entries:3d} entries{allocated}")
