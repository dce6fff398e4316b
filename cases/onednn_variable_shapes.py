"""CPU inference on images of any size: oneDNN caches compiled kernels for every new shape.

On the CPU, PyTorch runs convolutions through oneDNN (formerly MKL-DNN). oneDNN JIT-compiles a
kernel ("primitive") for the exact shape it is given and keeps it in an LRU cache, and
PyTorch's ideep layer keeps its own cache of prepared operations next to it; each holds up to
1024 entries by default. A service that feeds every request at its own size makes a new entry
per request, so host memory climbs with every shape it has not seen before, until the caches
are full (pytorch issues 27971, 32037, 98688). Bucketing the sizes (padding up to a multiple of
64) keeps the number of shapes, and of cached kernels, small.

Run it: python cases/onednn_variable_shapes.py
"""

import ctypes
import os

import torch
from torch import nn

BUCKET = 64


def make_step(device: str):
    torch.manual_seed(0)
    # A small fully convolutional segmentation head: it accepts images of any size.
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 2, 1),
    ).to(device).eval()
    sizes = torch.Generator().manual_seed(0)
    shapes = set()

    def serve():
        height, width = (int(v) for v in torch.randint(65, 193, (2,), generator=sizes))  # each request's image size
        image = torch.randn(1, 3, height, width, device=device)
        pad_h, pad_w = 0, 0  # LEAK: every new (height, width) compiles and caches new oneDNN kernels
        with torch.inference_mode():
            batch = nn.functional.pad(image, (0, pad_w, 0, pad_h))
            mask = model(batch)[..., :height, :width].argmax(1)
        shapes.add(tuple(batch.shape))
        return {"distinct_shapes": float(len(shapes)), "foreground": mask.float().mean().item()}

    return serve


def heap_in_use_mib() -> float:
    """Bytes the C heap has handed out and not taken back (glibc mallinfo2), in MiB."""
    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return (info.uordblks + info.hblkhd) / 2**20


if __name__ == "__main__":
    serve = make_step("cpu")
    for step in range(1, 31):
        metrics = serve()
        rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        print(f"step {step:2d}  distinct input shapes {metrics['distinct_shapes']:3.0f}  "
              f"C heap in use {heap_in_use_mib():7.2f} MiB  RSS {rss:6.1f} MiB")
