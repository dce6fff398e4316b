"""An EMA of the weights updated outside `torch.no_grad()`.

The seed (000 §4.3) says an EMA that forgets `no_grad`/`detach` makes GPU memory grow, because
the shadow weights carry the computation graph. Its own code averages `model.state_dict()`,
whose values are already detached: that form does not leak even without `no_grad` (see
`fixes/undetached_ema_state_dict.py`). Averaging `model.parameters()` (which require grad) does
build a graph: each update makes every shadow tensor a new autograd node linked to the previous
one. Nothing big is saved (the decay is a Python number), so device memory stays flat, but the
chain of nodes grows on the host heap, one link per tensor per step, for the whole run.

Run it: python cases/undetached_ema.py
"""

import torch
from torch import nn


class EMA:
    def __init__(self, model: nn.Module, decay: float = 0.999):
        self.decay = decay
        self.shadow = {name: p.detach().clone() for name, p in model.named_parameters()}

    def update(self, model: nn.Module):
        for name, p in model.named_parameters():
            self.shadow[name] = self.decay * self.shadow[name] + (1 - self.decay) * p  # LEAK: p requires grad: chains new graph nodes


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    ema = EMA(model)
    inputs = torch.randn(64, 128, device=device)
    targets = torch.randint(0, 10, (64,), device=device)

    def train_step():
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        ema.update(model)
        return ema

    return train_step


def autograd_nodes(tensor: torch.Tensor) -> int:
    """Autograd nodes reachable from a tensor's grad_fn (0 for a tensor without a graph)."""
    seen, stack = set(), [tensor.grad_fn] if tensor.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack += [n for n, _ in node.next_functions if n is not None]
    return len(seen)


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        ema = train_step()
        nodes = sum(autograd_nodes(t) for t in ema.shadow.values())
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  shadow weights hold {nodes:4d} autograd nodes{allocated}")
