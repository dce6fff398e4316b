"""The seed's own hook: `activations[name] = output`, overwritten on every forward pass.

The seed (000 §4.1) says this makes `activations` accumulate during training. It does not: the
entry is replaced each step, so nothing grows. What it does is keep the latest output *with
its graph* until the next forward pass replaces it. In a training step `backward()` has
already freed what that graph saved, so detaching changes nothing there; in a forward pass
with grad enabled and no backward (this evaluation loop, which is otherwise harmless), the
graph still holds every activation autograd saved on the way to that output (the stem's and
layer1's own intermediate outputs here): one step's worth, held between steps.
`output.detach()` keeps only the output.

Run it: python cases/hook_dict_overwrite.py
"""

from collections import OrderedDict

import torch
from torch import nn


def get_activation(activations: dict, name: str):
    def hook(module, inputs, output):
        activations[name] = output.detach()  # FIX: the output alone; the step's graph is freed with the step
    return hook


def block(channels_in: int, channels_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False),
                         nn.BatchNorm2d(channels_out), nn.ReLU())


def make_step(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict(
        stem=block(3, 16),
        layer1=block(16, 16),
        head=nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)),
    )).to(device).eval()
    activations = {}
    model.layer1.register_forward_hook(get_activation(activations, "layer1"))
    images = torch.randn(8, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (8,), device=device)

    def eval_step():
        logits = model(images)
        accuracy = (logits.argmax(1) == labels).float().mean().item()
        return {"accuracy": accuracy, "stored_graph_nodes": graph_nodes(activations["layer1"])}

    return eval_step


def graph_nodes(tensor: torch.Tensor) -> int:
    """Autograd nodes reachable from `tensor` (0 for a detached tensor)."""
    seen, stack = set(), [tensor.grad_fn] if tensor.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    eval_step = make_step(device)
    for step in range(1, 31):
        metrics = eval_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.2f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  activations['layer1'] holds a graph of {metrics['stored_graph_nodes']} nodes{allocated}")
