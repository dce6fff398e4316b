"""Variable-length inputs: the caching allocator reserves far more than the tensors use.

The seed says that when shapes change often, freed blocks of the wrong size cannot be reused,
so `memory_reserved()` climbs while `memory_allocated()` is stable, and fixed input shapes
help. Measured on the H200 (300 random-size allocations, 5 kept): 926 MB allocated, 5794 MB
reserved. This loop serves requests of random length and keeps the last five outputs; the
kept blocks sit inside cached segments and split the free space into pieces too small for
the next, differently sized request, so the allocator asks the driver for more. The printout
compares what is reserved with the most the loop ever had allocated at once.

Run it: python cases/fragmentation.py   (needs a CUDA device)
"""

import os
from collections import deque

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # FIX: set before CUDA is initialised: segments grow by mapping pages, so holes at segment ends are not lost

import torch  # noqa: E402
from torch import nn  # noqa: E402

MAX_LENGTH = 4096


def make_step(device: str):
    if device != "cuda" or not torch.cuda.is_available():
        raise RuntimeError("fragmentation is about the CUDA caching allocator: it needs a CUDA device")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).to(device).eval()
    recent_outputs = deque(maxlen=5)  # the last five results, for a dashboard
    torch.cuda.empty_cache()  # so that the figures below describe this loop only
    torch.cuda.reset_peak_memory_stats()

    def serve():
        length = int(torch.randint(256, MAX_LENGTH + 1, ()).item())
        padded = length  # LEAK: every request has its own length, so every step asks for new block sizes
        with torch.inference_mode():
            tokens = torch.randn(padded, 1024, device=device)
            recent_outputs.append(model(tokens)[:length])
        reserved = torch.cuda.memory_reserved()
        return {"reserved_over_peak": reserved / torch.cuda.max_memory_allocated(), "reserved_mib": reserved / 2**20}

    return serve


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("fragmentation needs a CUDA device; torch sees none here")
    serve = make_step("cuda")
    for step in range(1, 31):
        metrics = serve()
        print(f"step {step:2d}  allocated {torch.cuda.memory_allocated() / 2**20:7.1f} MiB  "
              f"reserved {metrics['reserved_mib']:7.1f} MiB  reserved / peak allocated {metrics['reserved_over_peak']:.2f}")
