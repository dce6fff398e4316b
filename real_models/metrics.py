"""torchmetrics' AUROC updated every training step and computed and reset at the end of each epoch,
as torchmetrics' quick start does. AUROC with ``thresholds=None`` keeps every prediction of the
epoch (list states), so the reset is what bounds it. An epoch here is EPOCH_STEPS steps (a tiny
data set), so that the check's measured steps span several epochs. Mistake: the reset forgotten."""

import torch

LIBRARIES = ("torchmetrics",)
EPOCH_STEPS = 5


def _build(device):
    from torchmetrics.classification import MulticlassAUROC

    big = str(device).startswith("cuda")
    width, classes = (1024, 10) if big else (32, 10)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, classes))
    model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    metric = MulticlassAUROC(num_classes=classes, thresholds=None).to(device)
    x = torch.randn(250 if big else 10, width, device=device)
    y = torch.arange(x.shape[0], device=device) % classes  # every class in every batch: each one's AUROC is defined
    return model, optimizer, metric, x, y


def make_step(device):
    model, optimizer, metric, x, y = _build(device)
    state = {"step": 0, "auroc": []}

    def step():
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        metric.update(logits.detach(), y)
        state["step"] += 1
        if state["step"] % EPOCH_STEPS == 0:  # the epoch's end
            state["auroc"] = [metric.compute().item()]
            metric.reset()

    return step


def make_mistake(device):
    model, optimizer, metric, x, y = _build(device)
    state = {"step": 0, "auroc": []}

    def step():
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        metric.update(logits.detach(), y)
        state["step"] += 1
        if state["step"] % EPOCH_STEPS == 0:
            state["auroc"] = [metric.compute().item()]  # MISTAKE: no metric.reset(): every epoch's predictions stay

    return step
