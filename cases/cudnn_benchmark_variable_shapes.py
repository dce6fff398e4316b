"""`cudnn.benchmark = True` with a new input size every step: cuDNN plans pile up per shape.

With `torch.backends.cudnn.benchmark = True`, the first convolution of each new input shape
times every applicable cuDNN algorithm (each trial allocates its workspace on the device) and
caches the winner, keyed by the exact shape, for forward and both backward passes. That pays
off when the shape repeats; with a new size every step (detection or segmentation on images
kept at their own size) every step benchmarks again, and the cache, held in host memory (cuDNN
v8/v9 execution plans), grows by one set of entries per shape (pytorch issues 2759, 98688,
104701). Bucketing the sizes (padding up to a multiple of 64) keeps the shapes few.

Run it: python cases/cudnn_benchmark_variable_shapes.py   (needs a CUDA device)
"""

import os
import time

import torch
from torch import nn

BUCKET = 64


def make_step(device: str):
    if device != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("cudnn_benchmark_variable_shapes is about cuDNN: it needs a CUDA device")
    torch.backends.cudnn.benchmark = True  # fast when shapes repeat: benchmark once per shape, then reuse
    torch.manual_seed(0)
    # A small fully convolutional segmentation network: it accepts images of any size.
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 2, 1),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.CrossEntropyLoss()
    sizes = torch.Generator().manual_seed(0)
    shapes = set()

    def train_step():
        height, width = (int(v) for v in torch.randint(65, 193, (2,), generator=sizes))  # each batch's image size
        images = torch.randn(2, 3, height, width, device=device)
        masks = torch.randint(0, 2, (2, height, width), device=device)
        pad_h, pad_w = 0, 0  # LEAK: every new (height, width) is benchmarked and cached anew
        batch = nn.functional.pad(images, (0, pad_w, 0, pad_h))
        optimizer.zero_grad()
        loss = criterion(model(batch)[..., :height, :width], masks)
        loss.backward()
        optimizer.step()
        shapes.add(tuple(batch.shape))
        return {"distinct_shapes": float(len(shapes)), "reserved_mib": torch.cuda.memory_reserved() / 2**20}

    return train_step


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("cudnn_benchmark_variable_shapes needs a CUDA device; torch sees none here")
    train_step = make_step("cuda")
    for step in range(1, 31):
        start = time.perf_counter()
        metrics = train_step()
        torch.cuda.synchronize()
        rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        print(f"step {step:2d}  distinct shapes {metrics['distinct_shapes']:3.0f}  "
              f"step {1000 * (time.perf_counter() - start):7.1f} ms  host RSS {rss:7.1f} MiB  "
              f"device reserved {metrics['reserved_mib']:7.1f} MiB")
