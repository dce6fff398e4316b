"""A metrics logger that stores the loss tensor instead of its value.

The seed says `writer.add_scalar('loss', loss)` keeps the graph. TensorBoard's SummaryWriter
does not: it converts the value to a number at once. The same mistake in a home-made logger
(a dict of lists, as many training scripts keep for plotting) does keep something every step:
the loss tensor with its autograd nodes. After `backward()` the saved activations are already
freed, so the tensors themselves are tiny (4 bytes each on the CPU; on CUDA each one occupies
its own 512-byte block) and what grows is mostly the host heap, by the graph's nodes.

Run it: python cases/tensor_logging.py
"""

from collections import defaultdict

import torch
from torch import nn


class MetricLogger:
    """Keeps every logged value, for plotting the curves after training."""

    def __init__(self):
        self.history = defaultdict(list)

    def log(self, **values):
        for name, value in values.items():
            self.history[name].append(value.item() if torch.is_tensor(value) else value)  # FIX: a plain number, no tensor, no graph


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    inputs = torch.randn(256, 512, device=device)
    targets = torch.randint(0, 10, (256,), device=device)
    logger = MetricLogger()

    def train_step():
        optimizer.zero_grad()
        logits = model(inputs)
        loss = criterion(logits, targets)
        loss.backward()
        optimizer.step()
        accuracy = (logits.argmax(dim=1) == targets).float().mean()
        logger.log(loss=loss, accuracy=accuracy)
        return logger

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        logger = train_step()
        kept = logger.history["loss"]
        with_graph = sum(getattr(v, "grad_fn", None) is not None for v in kept)
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.3f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  logger keeps {len(kept):2d} losses, {with_graph:2d} of them with an autograd graph{allocated}")
