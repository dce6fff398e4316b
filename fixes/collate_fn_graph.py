"""A `collate_fn` that returns tensors still attached to a graph, with DataLoader workers.

The seed (000 §4.2) says a worker whose `collate_fn` returns tensors that carry a computation
graph leaks. Here the collate_fn embeds the token ids with a pretrained embedding table, outside
`torch.no_grad()`, so every batch it builds carries `grad_fn`. Measured: nothing leaks, because
such a batch cannot leave the worker at all. Sending it to the main process pickles it, and
PyTorch refuses to pickle a non-leaf tensor that requires grad; the error is printed from the
worker's queue thread, the batch is dropped, and the training loop waits for it forever. The
`timeout=` on the DataLoader turns that hang into an error after a few seconds.

Run it: python cases/collate_fn_graph.py
"""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

VOCAB, DIM, CLASSES = 1000, 64, 4


class Reviews(Dataset):
    """512 token-id sequences of 8 to 32 tokens, made up deterministically from the index."""

    def __len__(self) -> int:
        return 512

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        length = int(torch.randint(8, 33, (1,), generator=generator))
        return torch.randint(0, VOCAB, (length,), generator=generator), index % CLASSES


def make_collate(embedding: nn.Embedding):
    @torch.no_grad()  # FIX: the batch is plain data: no graph, and it can be sent from the worker
    def collate(items):
        ids = nn.utils.rnn.pad_sequence([ids for ids, _ in items], batch_first=True)
        features = embedding(ids).mean(dim=1)
        return features, torch.tensor([label for _, label in items])
    return collate


def make_step(device: str):
    torch.manual_seed(0)
    pretrained = nn.Embedding(VOCAB, DIM)  # stands for a pretrained, frozen embedding table
    head = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, CLASSES)).to(device)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    loader = DataLoader(Reviews(), batch_size=32, shuffle=True, num_workers=2, collate_fn=make_collate(pretrained),
                        timeout=3, multiprocessing_context="fork")

    def forever():
        while True:
            yield from loader

    batches = forever()

    def train_step():
        features, labels = next(batches)
        features, labels = features.to(device), labels.to(device)
        optimizer.zero_grad()
        loss = criterion(head(features), labels)
        loss.backward()
        optimizer.step()
        return {"loss": loss.item(), "batch_has_graph": float(features.grad_fn is not None)}

    return train_step


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train_step = make_step(device)
    for step in range(1, 31):
        metrics = train_step()
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        print(f"step {step:2d}  loss {metrics['loss']:.4f}  batch carries a graph: {bool(metrics['batch_has_graph'])}"
              f"{allocated}")
