"""The child processes a step started: stopped when it is done with them."""

from __future__ import annotations

import time

import psutil

from leaklab.measure import live_children


def stop_children(existing: set[int], wait: float = 10.0, grace: float = 2.0, quiet: float = 2.0) -> list[str]:
    """Give child processes the step started up to ``wait`` seconds to exit by themselves (the
    wait ends early once ``quiet`` seconds pass with none exiting: a shut-down worker exits in
    milliseconds, a ``sleep 600`` never); terminate those still running (then kill them after
    ``grace`` seconds). Returns one line for each child that had to be stopped."""
    deadline = time.monotonic() + wait
    quiet_until = time.monotonic() + quiet
    running = None
    while True:
        left = [p for p in live_children() if p.pid not in existing]
        if running is not None and len(left) < running:
            quiet_until = time.monotonic() + quiet
        running = len(left)
        now = time.monotonic()
        if not left or now > deadline or now > quiet_until:
            break
        time.sleep(0.05)
    described = []
    for child in left:
        try:
            described.append(f"pid {child.pid}: {' '.join(child.cmdline())[:80] or child.name()}")
            child.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(left, timeout=grace)
    for child in alive:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return described
