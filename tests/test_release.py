"""Releasing a step: the workers of a DataLoader iterator that torch is already shutting down are
stopped at once instead of after torch's join timeout; no other worker is touched."""

import gc
import sys

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


def test_workers_of_an_iterator_stuck_in_its_shutdown_are_stopped_and_nothing_is_said(monkeypatch):
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
