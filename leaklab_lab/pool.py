"""Cases run side by side: `leaklab run --jobs N` runs each case (its leak and its fixes) in one of
N worker processes, each of which imports torch once and runs case after case.

Every counter leaklab reads belongs to the process that reads it (its allocator, its heap, its
Python objects, its threads, descriptors and mappings, its own child processes), so runs in two
processes do not read each other; they share the cores, which only slows the steps. The workers
are started fresh (``spawn``: a fork of a process that has run torch's thread pools is not safe),
and whatever happens to the run (Ctrl-C, SIGTERM, a worker that dies), no process of the tree is
left running: the workers and their children are stopped before the command answers.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from leaklab.children import stop_children
from leaklab.redirect import fd_pointed_at
from leaklab_lab.figures import costliest_first

MAX_DEFAULT_JOBS = 4  # more workers than this buy little on a catalog of ~40 cases, and cost memory


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_jobs() -> int:
    """One worker per core this process may use, at most :data:`MAX_DEFAULT_JOBS`."""
    return max(1, min(cores(), MAX_DEFAULT_JOBS))


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """What is written to stderr inside the block, by Python, C code or a child process started
    in it (a DataLoader worker's traceback): file descriptor 2 points at a file meanwhile. The
    list holds the text once the block ends; the run's table decides whether to show it."""
    text: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as sink:
        try:
            with fd_pointed_at(2, sink.fileno()):
                yield text
        finally:
            sink.seek(0)
            text.append(sink.read().decode(errors="replace"))


def run_pair(slug: str, device: str, attribute: bool, verbose: bool = False) -> dict[str, Any]:
    """Run a case's leak and every fix (in a worker, or here); their reports as JSON, and under
    ``"stderr"`` what the runs wrote to stderr (shown by ``leaklab run`` only where it matters)."""
    from leaklab_lab.cases import get_case, run_case

    case = get_case(slug)
    if verbose:
        print(f"running {slug} on {device} ...", file=sys.stderr, flush=True)
    with warnings.catch_warnings(), captured_stderr() as stderr:
        # The cases about DataLoader workers start more of them than a small machine has cores, on
        # purpose: torch's advice to start fewer is not their lesson, and said for every such case
        # it buries what the run says.
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        leak = run_case(case, "leak", device, attribute=attribute)
        fixes = [run_case(case, "fix", device, script) for script in case.fixes]
    return {"leak": [leak.to_json()], "fix": [fix.to_json() for fix in fixes], "stderr": stderr[0]}


def _start_like(method: str, threads: int) -> None:
    """A worker starts its own processes (DataLoader workers) as this process would (a spawned
    process inherits ``spawn`` as its default, which cannot load a case's script module), and
    shares the cores with the other workers: torch's thread pool in every worker as wide as the
    machine made each step ten times slower (its threads wait for work by spinning)."""
    multiprocessing.set_start_method(method, force=True)
    import torch

    torch.set_num_threads(threads)


def _run_pair_caught(slug: str, device: str, attribute: bool, verbose: bool = False) -> tuple[str, Any]:
    try:
        return slug, run_pair(slug, device, attribute, verbose)
    except Exception as exc:  # noqa: BLE001 - one broken case must not hide the rest of the catalog
        return slug, f"{type(exc).__name__}: {exc}"


def run_pairs(slugs: list[str], device: str, attribute: bool, jobs: int, verbose: bool = False,
              done: Callable[[str, Any], None] | None = None) -> list[tuple[str, Any]]:
    """(slug, its reports as JSON, or the error that stopped the case) for every case, in order;
    ``done(slug, outcome)`` is called as each case finishes (in the order they finish)."""
    done = done or (lambda slug, outcome: None)
    if jobs <= 1 or len(slugs) <= 1:
        results = []
        for slug in slugs:
            results.append(_run_pair_caught(slug, device, attribute, verbose))
            done(*results[-1])
        return results
    finished = False
    workers = min(jobs, len(slugs))
    threads = max(1, cores() // workers)
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_like, initargs=(multiprocessing.get_start_method(), threads))
    try:
        futures = {pool.submit(_run_pair_caught, slug, device, attribute, verbose): slug
                   for slug in costliest_first(slugs, lambda slug: (device, slug))}
        outcomes: dict[str, Any] = {}
        for future in as_completed(futures):
            slug = futures[future]
            try:
                outcomes[slug] = future.result()[1]
            except BrokenProcessPool as exc:  # a worker died (killed, out of memory): say which cases it took
                outcomes[slug] = f"the worker process running it died: {exc}"
            done(slug, outcomes[slug])
        finished = True
        return [(slug, outcomes[slug]) for slug in slugs]
    finally:
        if not finished:  # Ctrl-C, SIGTERM: nothing of ours is left running, workers and their children alike
            stop_children(set(), wait=0.0)
        pool.shutdown(wait=finished, cancel_futures=True)
