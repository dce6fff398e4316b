"""The mnist step of pytorch/examples (its Net, Adadelta, nll_loss) keeping a history of the loss as
floats, ``history.append(loss.item())``, which nearly every training loop does to plot or print it.
Mistake: ``history.append(loss)``, the tensor, which keeps every step's graph and activations."""

import torch
import torch.nn.functional as F
from torch import nn

LIBRARIES = ()


class Net(nn.Module):
    """pytorch/examples' mnist/main.py Net, unchanged."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def _build(device):
    big = str(device).startswith("cuda")
    model = Net().to(device).train()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    data = torch.randn(64 if big else 4, 1, 28, 28, device=device)  # the example's batch is 64
    target = torch.randint(0, 10, (data.shape[0],), device=device)
    return model, optimizer, data, target


def make_step(device):
    model, optimizer, data, target = _build(device)
    history = []

    def step():
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        history.append(loss.item())

    return step


def make_mistake(device):
    model, optimizer, data, target = _build(device)
    history = []

    def step():
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        history.append(loss)  # MISTAKE: the tensor, not loss.item()

    return step
