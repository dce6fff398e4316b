"""What grows in the host heap of one NCCL rank doing nothing but all_reduce (issue 30: the check
called such a bounded step `grows in host_heap by 1.7 KiB/step` on the H200). Runs one rank per
setting in a fresh process and prints the heap (leaklab.measure.host_heap_bytes) every 250
collectives, so that a plateau (a ring buffer filling) shows apart from growth without end.
Usage: python3 tools/h200_nccl_heap.py [collectives]   (in the device tool's run)."""

import os
import socket
import subprocess
import sys
import time

SETTINGS = {
    "default": {},
    "fr_off": {"TORCH_FR_BUFFER_SIZE": "0"},
    "nccl_trace_off": {"TORCH_NCCL_TRACE_BUFFER_SIZE": "0"},
    "both_off": {"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "0"},
    "both_off_sync_wait": {"TORCH_FR_BUFFER_SIZE": "0", "TORCH_NCCL_TRACE_BUFFER_SIZE": "0", "WAIT": "1"},
    # read after a pause past the watchdog's poll (ProcessGroupNCCL frees completed work every 100 ms)
    "default_pause": {"PAUSE": "0.3"},
}
ONLY = os.environ.get("ONLY", "").split(",") if os.environ.get("ONLY") else list(SETTINGS)


def rank(count: int) -> None:
    import torch
    import torch.distributed as dist

    from leaklab.measure import host_heap_bytes

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    total = torch.ones(4, device="cuda")
    readings = []
    for i in range(count + 1):
        total.fill_(1)
        work = dist.all_reduce(total, async_op=bool(os.environ.get("WAIT")))
        if work is not None:
            work.wait()
        torch.cuda.synchronize()
        if i % 250 == 0:
            if os.environ.get("PAUSE"):
                time.sleep(float(os.environ["PAUSE"]))
            readings.append(host_heap_bytes())
    steps = [b - a for a, b in zip(readings, readings[1:], strict=False)]
    print(f"per 250: {[round(s / 250) for s in steps]} B/collective; total {readings[-1] - readings[0]:,} B")
    dist.destroy_process_group()


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    if os.environ.get("LEAKLAB_NCCL_RANK"):
        rank(count)
        sys.exit(0)
    for name, env in ((name, SETTINGS[name]) for name in ONLY):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        child = {**os.environ, **env, "LEAKLAB_NCCL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                 "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # this checkout's leaklab
        for key in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
            if key not in env:
                child.pop(key, None)
        done = subprocess.run([sys.executable, __file__, str(count)], env=child, capture_output=True, text=True,
                              timeout=240)
        print(f"{name}: exit {done.returncode}: {done.stdout.strip()} {done.stderr.strip()[-300:] if done.returncode else ''}",
              flush=True)
