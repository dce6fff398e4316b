"""A running (EMA) confidence threshold for pseudo-labels, updated from outputs with a graph.

The seed (000 §4.3) warns that an EMA which forgets `no_grad`/`detach` keeps the computation
graph, and memory grows. For its own example, an EMA of the weights, that does not hold (see
`undetached_ema`). It does hold for an EMA of the model's *outputs*: here a self-training step
keeps a FreeMatch-style adaptive threshold, the running mean of the model's confidence on
unlabelled data. Written without `detach()`, the threshold's graph links every step's softmax,
and the softmax output is saved by autograd for a backward that never comes (the threshold only
feeds a comparison). Each step keeps its 256x100 softmax output alive: ~100 KiB per step, in
device memory on a GPU.

Run it: python cases/ema_confidence_threshold.py
"""

import torch
from torch import nn


def make_step(device: str):
    torch.manual_seed(0)
    num_classes = 100
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, num_classes)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    per_sample_loss = nn.CrossEntropyLoss(reduction="none")
    labelled = torch.randn(64, 128, device=device)
    labels = torch.randint(0, num_classes, (64,), device=device)
    unlabelled = torch.randn(256, 128, device=device)
    threshold = torch.tensor(1.0 / num_classes, device=device)
    momentum = 0.999

    def train_step():
        nonlocal threshold
        optimizer.zero_grad()
        supervised = criterion(model(labelled), labels)
        logits = model(unlabelled)
        confidence, pseudo_labels = logits.softmax(dim=1).max(dim=1)
        threshold = momentum * threshold + (1 - momentum) * confidence.mean()  # LEAK: keeps this step's softmax graph
        mask = (confidence >= threshold).float()
        unsupervised = (per_sample_loss(logits, pseudo_labels) * mask).mean()
        (supervised + unsupervised).backward()
        optimizer.step()
        return {"threshold": threshold.item()}

    return train_step


def saved_softmax_bytes(tensor: torch.Tensor) -> tuple[int, int]:
    """Softmax outputs that autograd keeps saved in `tensor`'s graph: (how many, bytes)."""
    count, nbytes, seen = 0, 0, set()
    stack = [tensor.grad_fn] if tensor.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "SoftmaxBackward0":
            count, nbytes = count + 1, nbytes + node._saved_result.nbytes
        stack += [n for n, _ in node.next_functions if n is not None]
    return count, nbytes


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    cells = dict(zip(train_step.__code__.co_freevars, train_step.__closure__, strict=True))
    for step in range(1, 31):
        metrics = train_step()
        count, nbytes = saved_softmax_bytes(cells["threshold"].cell_contents)
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  threshold {metrics['threshold']:.5f}  "
              f"softmax outputs kept {count:2d} ({nbytes / 2**10:6.0f} KiB){allocated}")
