"""Moving samples to the GPU inside `Dataset.__getitem__`, with DataLoader workers.

The seed says GPU work in `__getitem__` makes workers create GPU tensors that the main
process may receive as copies and that may not be freed when workers exit. What happens on
Linux (fork, the default): the parent has already initialised CUDA, so the first worker that
calls `.cuda()` raises "Cannot re-initialize CUDA in forked subprocess", and the DataLoader
re-raises it in the training loop. With the spawn start method it runs, but every worker
creates its own CUDA context (hundreds of MB of device memory each, outside PyTorch's
allocator counters) and sends its tensors over CUDA IPC. The fix keeps the dataset on the CPU
and moves each batch in the loop: pinned memory and a non-blocking copy.

Run it: python cases/dataloader_cuda_in_getitem.py   (needs a CUDA device)
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    """Decoded 3x64x64 images, made up deterministically from the index."""

    def __init__(self, device: str) -> None:
        self.device = device

    def __len__(self) -> int:
        return 100_000

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(3, 64, 64, generator=generator)
        return image, index % 10  # FIX: stay on the CPU; the training loop moves the batch (pinned, non-blocking)


def make_step(device: str):
    if device != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("dataloader_cuda_in_getitem is about CUDA in DataLoader workers: it needs a CUDA device")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    loader = DataLoader(SyntheticImages(device), batch_size=32, shuffle=True, num_workers=2, pin_memory=True)
    batches = iter(loader)  # the workers exit when this iterator is dropped

    def train_step():
        images, labels = next(batches)
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        return {"loss": loss.item()}

    return train_step


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("dataloader_cuda_in_getitem needs a CUDA device; torch sees none here")
    train_step = make_step("cuda")
    for step in range(1, 31):
        train_step()
        print(f"step {step:2d}  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB")
