"""Releasing a step: the workers of a DataLoader iterator that torch is already shutting down are
stopped at once instead of after torch's join timeout; no other worker is touched."""

import gc
import multiprocessing.util
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader, Dataset

from leaklab.release import stuck_workers_stopped


class Broken(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        if index == 8:
            raise ValueError("record 8: truncated")
        return torch.zeros(4)


def failed_epoch(kept):
    batches = iter(DataLoader(Broken(), batch_size=4, num_workers=2, multiprocessing_context="fork"))
    try:
        for _ in batches:
            pass
    except ValueError as error:
        kept.append(error)  # its traceback holds the iterator in a cycle: freed only by the collector
    return batches._workers


def test_workers_of_an_iterator_stuck_in_its_shutdown_are_stopped_and_nothing_is_said(monkeypatch, tmp_path):
    # each stopped worker leaves its multiprocessing temp directory: in the test's own, removed by pytest
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    unraisable = []  # an error raised in __del__ (torch's SIGCHLD handler: "worker killed by signal")
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    kept = []
    workers = failed_epoch(kept)
    gc.collect()
    gc.freeze()  # as a run's baseline does: the cycle is collectable once unfrozen
    try:
        kept.clear()
        with stuck_workers_stopped() as stopped:
            gc.unfreeze()
            gc.collect()
    finally:
        gc.unfreeze()
    assert not any(worker.is_alive() for worker in workers)
    assert stopped, "torch shut them down by itself: the collector's order did not leave them stuck"
    assert unraisable == []


def test_workers_of_a_live_loader_are_not_touched():
    loader = DataLoader(Broken(), batch_size=4, num_workers=1, persistent_workers=True)
    batches = iter(loader)
    next(batches)
    with stuck_workers_stopped() as stopped:
        garbage = [[]]
        garbage[0].append(garbage)
        del garbage
        gc.collect()
    assert stopped == [] and all(worker.is_alive() for worker in batches._workers)
    del batches, loader


class CachingImages(Dataset):
    def __init__(self):
        self.cache = {}  # filled in each worker: the workers' memory grows

    def __len__(self):
        return 100_000

    def __getitem__(self, index):
        self.cache[index] = bytearray(64 * 1024)
        return torch.full((3, 16, 16), float(index))  # sent through shared memory: each worker opens its temp directory


def test_a_checked_steps_loader_is_shut_down_as_a_plain_program_shuts_it_down(tmp_path, monkeypatch):
    """A leaking step that keeps its DataLoader's iterator, checked with default settings: on
    release the workers exit by themselves, as when a program drops the iterator, and leave
    nothing in the temp directory. The holder walk's roots kept a local bound to their own frame,
    a cycle that held every caller's frame up to the check's, the step in their locals: the step
    and its iterator were freed by the collector after the iterator's index queues' finalizers
    had stopped them, the stop signal never left, the workers were terminated, and each left its
    multiprocessing temp directory (pymp-*) behind."""
    import leaklab
    from leaklab import release

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # inherited by the workers, forked after
    stopped = []
    watch = release._watch
    monkeypatch.setattr(release, "_watch", lambda thread, done, pids: (watch(thread, done, pids), stopped.extend(pids)))

    def factory(device):
        batches = iter(DataLoader(CachingImages(), batch_size=8, num_workers=2, multiprocessing_context="fork"))
        records = []

        def step():
            records.append({"mean": next(batches).mean().item()})
            return records[-1]
        return step

    report = leaklab.run_factory(factory, "cpu")
    assert report.verdict == "grows", report.summary()
    assert stopped == [], "the workers had to be stopped"
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("pymp-")) == []


def _slow_exit(worker_id):
    # the worker's own exit handlers take a while (a large heap, files to flush): it has the stop signal
    multiprocessing.util.Finalize(None, time.sleep, args=(0.6,), exitpriority=10)


def test_workers_that_got_the_stop_signal_are_left_to_exit_however_long_it_takes(tmp_path, monkeypatch):
    """Workers that received the stop signal and take longer than the watcher's patience to exit
    are not stopped: they exit by themselves, and leave nothing in the temp directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    batches = iter(DataLoader(CachingImages(), batch_size=8, num_workers=2, multiprocessing_context="fork",
                              worker_init_fn=_slow_exit))
    next(batches)
    workers = list(batches._workers)
    with stuck_workers_stopped() as stopped:
        del batches  # its last reference: torch sends the stop signal, then joins the workers
    assert not any(worker.is_alive() for worker in workers)
    assert stopped == [], "workers that had the stop signal were stopped"
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("pymp-")) == []


def _listen_in_a_folder_of_its_own(ready):
    """A worker that passes descriptors: multiprocessing's resource sharer listens on a socket in a
    pymp-* folder of the worker's own, removed when the worker exits by itself."""
    import os
    import socket

    folder = tempfile.mkdtemp(prefix="pymp-")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(os.path.join(folder, "listener-w"))
    listener.listen()
    ready.set()
    time.sleep(600)


def test_the_folders_of_children_the_check_stopped_go_and_others_stay(tmp_path, monkeypatch):
    """yolo_train_runs_keep_infinite_loader_workers (round 26) left 35 pymp-* folders, one per stopped
    worker. A folder whose socket this process still listens on, and an empty one, stay."""
    import os
    import socket

    from leaklab.runner import RunOptions, run_factory

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    context = multiprocessing.get_context("fork")
    mine = socket.socket(socket.AF_UNIX)

    def factory(device):
        workers = []

        def step():
            if not workers:  # one worker, its folder made in it; one folder of this process's, listening; one empty
                ready = context.Event()
                workers.append(context.Process(target=_listen_in_a_folder_of_its_own, args=(ready,), daemon=True))
                workers[0].start()
                assert ready.wait(30)
                mine.bind(os.path.join(tempfile.mkdtemp(prefix="pymp-"), "listener-mine"))
                mine.listen()
                tempfile.mkdtemp(prefix="pymp-")
        return step

    try:
        run_factory(factory, "cpu", RunOptions(steps=3, warmup=1, resources=("children",), child_wait=0.5))
        left = sorted(os.listdir(folder) for folder in map(str, tmp_path.glob("pymp-*")))
    finally:
        mine.close()
    assert left == [[], ["listener-mine"]], left


def test_where_the_kernels_sockets_cannot_be_read_no_folder_goes(tmp_path, monkeypatch):
    """Off Linux (no /proc/net/unix) whose a socket is cannot be told: nothing is removed."""
    import os
    import socket

    from leaklab import children

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tempfile.mkdtemp(prefix="pymp-")
    left = socket.socket(socket.AF_UNIX)
    left.bind(os.path.join(folder, "listener-gone"))
    left.close()  # the file stays, no socket is bound to it: a stopped worker's
    monkeypatch.setattr(children, "_bound_sockets", lambda: None)
    assert children.remove_left_folders(set()) == [] and os.path.isdir(folder)
    monkeypatch.undo()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert children.remove_left_folders(set()) == [folder] and not os.path.exists(folder)

