"""Lightning Fabric: ``fabric.setup(model, optimizer)`` and ``fabric.backward(loss)``, each step's
logits kept for the epoch's end and cleared there, as Lightning's docs show for
``on_train_epoch_end`` (``self.training_step_outputs.clear()  # free memory``). An epoch here is
EPOCH_STEPS steps. Mistake: the clear forgotten."""

import logging

import torch

LIBRARIES = ("lightning",)
EPOCH_STEPS = 5


def _build(device):
    from lightning.fabric import Fabric

    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)  # its start-up notices are not the check's output
    big = str(device).startswith("cuda")
    fabric = Fabric(accelerator="cuda" if big else "cpu", devices=1, precision="bf16-mixed" if big else "32-true")
    width = 1024 if big else 32
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = fabric.setup(model, optimizer)
    x = torch.randn(256 if big else 8, width, device=fabric.device)
    y = torch.randint(0, 10, (x.shape[0],), device=fabric.device)
    return fabric, model, optimizer, x, y


def make_step(device):
    fabric, model, optimizer, x, y = _build(device)
    outputs = []
    state = {"step": 0, "epoch_preds": None}

    def step():
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        outputs.append(logits.detach())
        state["step"] += 1
        if state["step"] % EPOCH_STEPS == 0:  # on_train_epoch_end
            state["epoch_preds"] = torch.cat(outputs).argmax(1).bincount(minlength=10).tolist()
            outputs.clear()

    return step


def make_mistake(device):
    fabric, model, optimizer, x, y = _build(device)
    outputs = []
    state = {"step": 0, "epoch_preds": None}

    def step():
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        outputs.append(logits.detach())
        state["step"] += 1
        if state["step"] % EPOCH_STEPS == 0:
            state["epoch_preds"] = torch.cat(outputs).argmax(1).bincount(minlength=10).tolist()  # MISTAKE: no outputs.clear()

    return step
