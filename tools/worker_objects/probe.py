"""Probe: evidence from inside forked worker processes (experiment, not product code).

Installs a reporter in every child that multiprocessing starts with a fork (DataLoader workers,
multiprocessing.Pool, ProcessPoolExecutor(mp_context=fork), Manager servers), without touching the
step's code: multiprocessing.util.register_after_fork runs its callback in BaseProcess._bootstrap
of every forked multiprocessing child. In the child a daemon thread samples, every `interval` s,

    t (time.monotonic, shared clock), sys.getallocatedblocks(), len(gc.get_objects())

and every `collect_every`-th sample it first runs gc.collect() (flag `c` in the row), so the
object count of those rows is "after a full collection". Rows go to <outdir>/<pid>.tsv (one file
per child, no locks shared with the parent: a child killed mid-write cannot deadlock anything).

The parent records the monotonic time of every step end and (optionally) the USS of each child per
step (psutil), so a sample at time t is placed at x = steps completed by t.

Usage:
    python probe.py run SPEC OUT.json [--steps 150] [--warmup 20] [--no-probe] [--no-uss]
    SPEC: fresh:<name> | edge:<name> | fix:<slug> | path/to/script.py
"""
from __future__ import annotations

import gc
import json
import multiprocessing
import multiprocessing.util
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, "/work/main")


class _Anchor:  # register_after_fork keeps only a weak reference to its object
    pass


_ANCHOR = _Anchor()
_CONF: dict = {}
USS_EVERY = int(os.environ.get("PROBE_USS_EVERY", "5"))


def _reporter(outdir: str, interval: float, collect_every: int, freeze: bool) -> None:
    if freeze:
        # Move everything inherited from the parent into the permanent generation: gc.collect() and
        # gc.get_objects() then walk only what this child created since the fork (cheap), and the
        # collector stops writing to the inherited objects' headers (less copy-on-write).
        gc.freeze()
    path = os.path.join(outdir, f"{os.getpid()}.tsv")
    f = open(path, "a", buffering=1)
    f.write(f"#pid={os.getpid()} ppid={os.getppid()} name={multiprocessing.current_process().name} "
            f"t0={time.monotonic():.6f} frozen={gc.get_freeze_count()}\n")
    i = 0
    while True:
        c = collect_every > 0 and i % collect_every == 0
        t_start = time.monotonic()
        if c:
            gc.collect()
        t = time.monotonic()
        blocks = sys.getallocatedblocks()
        objs = len(gc.get_objects())
        cost = time.monotonic() - t_start
        f.write(f"{t:.6f}\t{int(c)}\t{blocks}\t{objs}\t{cost:.6f}\n")
        i += 1
        time.sleep(interval)


def _after_fork(_obj) -> None:
    conf = _CONF
    th = threading.Thread(target=_reporter, args=(conf["outdir"], conf["interval"], conf["collect_every"], conf["freeze"]),
                          name="workerobj-probe", daemon=True)
    th.start()


def install(outdir: str, interval: float = 0.05, collect_every: int = 1, freeze: bool = True) -> None:
    _CONF.update(outdir=outdir, interval=interval, collect_every=collect_every, freeze=freeze)
    multiprocessing.util.register_after_fork(_ANCHOR, _after_fork)


def read_samples(outdir: str) -> dict:
    out = {}
    for name in sorted(os.listdir(outdir)):
        if not name.endswith(".tsv"):
            continue
        rows, head = [], ""
        with open(os.path.join(outdir, name)) as f:
            for line in f:
                if line.startswith("#"):
                    head = line[1:].strip()
                    continue
                p = line.rstrip("\n").split("\t")
                if len(p) == 5:
                    rows.append((float(p[0]), int(p[1]), int(p[2]), int(p[3]), float(p[4])))
        out[name[:-4]] = {"head": head, "rows": rows}
    return out


def load_factory(spec: str):
    kind, _, name = spec.partition(":")
    if kind == "fresh":
        from tests.data import fresh_steps
        return getattr(fresh_steps, name)
    if kind == "edge":
        from tests.data import edge_steps
        return getattr(edge_steps, name)
    if kind == "fix":
        from leaklab.scripts import load_script
        return load_script(f"/work/main/fixes/{name}.py").make_step
    if kind == "case":
        from leaklab.scripts import load_script
        return load_script(f"/work/main/cases/{name}.py").make_step
    raise SystemExit(f"bad spec {spec}")


def _uss_of_children():
    import psutil
    me = psutil.Process()
    out = {}
    for c in me.children(recursive=True):
        try:
            out[str(c.pid)] = c.memory_full_info().uss
        except Exception:
            pass
    return out


def run(spec: str, steps: int, warmup: int, probe: bool, uss: bool, interval: float, collect_every: int,
        freeze: bool = True) -> dict:
    tmp = tempfile.TemporaryDirectory(prefix="workerobj-", dir="/tmp/workerobj")
    if probe:
        install(tmp.name, interval, collect_every, freeze)
    factory = load_factory(spec)
    t_build = time.monotonic()
    step = factory("cpu")
    t_build = time.monotonic() - t_build
    ends, durs, uss_rows = [], [], []
    t_begin = time.monotonic()
    error = None
    for i in range(warmup + steps):
        t0 = time.monotonic()
        try:
            step()
        except Exception as exc:  # a step that ends (StopIteration of an epoch) etc.
            error = f"step {i}: {type(exc).__name__}: {exc}"[:300]
            break
        t1 = time.monotonic()
        ends.append(t1)
        durs.append(t1 - t0)
        if uss and (i + 1) % USS_EVERY == 0:
            uss_rows.append(_uss_of_children())
        elif uss:
            uss_rows.append({})
    time.sleep(0.3 if probe else 0)  # let the last samples land
    samples = read_samples(tmp.name) if probe else {}
    res = {"spec": spec, "steps": steps, "warmup": warmup, "probe": probe, "interval": interval,
           "collect_every": collect_every, "freeze": freeze, "build_s": t_build, "t_begin": t_begin, "ends": ends, "durs": durs,
           "uss": uss_rows, "samples": samples, "error": error, "parent_pid": os.getpid()}
    tmp.cleanup()
    return res


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd")
    ap.add_argument("spec")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--no-probe", action="store_true")
    ap.add_argument("--no-uss", action="store_true")
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--collect-every", type=int, default=1)
    ap.add_argument("--no-freeze", action="store_true")
    a = ap.parse_args()
    torch_threads = os.environ.get("PROBE_TORCH_THREADS")
    if torch_threads:
        import torch
        torch.set_num_threads(int(torch_threads))
    res = run(a.spec, a.steps, a.warmup, not a.no_probe, not a.no_uss, a.interval, a.collect_every, not a.no_freeze)
    with open(a.out, "w") as f:
        json.dump(res, f)
    print(a.spec, "steps", len(res["ends"]), "children", len(res["samples"]), "err", res["error"],
          "step_ms median %.2f" % (1000 * sorted(res["durs"])[len(res["durs"]) // 2] if res["durs"] else -1))
    from leaklab.children import stop_children  # end the children this run started, then leave without joining pools
    stop_children(set(), wait=0, grace=3)
    sys.stdout.flush()
    os._exit(0)
