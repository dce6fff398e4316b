"""A CPU chat service with a thread pool: the process's memory climbs, nothing leaks.

glibc's malloc serves a large block (128 KiB or more, at first) with its own mmap, and gives it
back to the OS when it is freed. But the first time such a block is freed, glibc raises that
threshold to the block's size (up to 32 MiB), so from then on blocks of that size come from the
malloc arenas instead: one per thread that allocates, up to eight per core. Freed memory in an
arena stays there, reused only by that arena and handed back to the OS only from the top of
each heap. Requests that grow (each carries the conversation so far) never fit the holes their
predecessors left, so every thread's arena keeps growing, and the resident memory climbs turn
after turn while the bytes in use (what `host_heap` reads) stay flat: no tensor and no Python
object is leaked.
Fixing the threshold (`MALLOC_MMAP_THRESHOLD_=131072` in the environment, or `mallopt` before the
first large block) keeps large blocks on mmap, returned to the OS when freed.

Run it: python cases/malloc_arena_fragmentation.py
"""

import ctypes
import random
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

THREADS, REQUESTS = 8, 16  # worker threads; requests answered per turn
M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
libc = ctypes.CDLL("libc.so.6")


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


libc.mallinfo2.restype = MallInfo2


def resident_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon:")) / 1024


def make_step(device: str):
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the pool's threads are the parallelism
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 16)).to(device).eval()
    jitter = random.Random(0)
    turn = 0
    answers = deque(maxlen=64)  # recent answers, for a status page: bounded
    pool = ThreadPoolExecutor(max_workers=THREADS)  # LEAK: with glibc's default, freed large blocks stay in eight threads' arenas

    @torch.no_grad()
    def answer(rows: int) -> torch.Tensor:
        return model(torch.randn(rows, 128, device=device)).mean(0).cpu()

    def serve_requests():
        nonlocal turn
        turn += 1
        batch = [128 * turn + jitter.randint(256, 512) for _ in range(REQUESTS)]  # each carries the conversation so far
        answers.extend(pool.map(answer, batch))
        info = libc.mallinfo2()
        return {"heap_in_use_mib": (info.uordblks + info.hblkhd) / 2**20, "heap_free_held_mib": info.fordblks / 2**20,
                "resident_mib": resident_mib()}

    return serve_requests


if __name__ == "__main__":
    serve_requests = make_step("cpu")
    for step in range(1, 31):  # turns of the conversations
        numbers = serve_requests()
        print(f"step {step:2d}  in use {numbers['heap_in_use_mib']:6.1f} MiB  free but held {numbers['heap_free_held_mib']:6.1f} MiB"
              f"  resident {numbers['resident_mib']:6.1f} MiB")
