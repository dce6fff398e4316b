"""Held-out leaky steps for measuring how often the check names the right catalog family.

Each factory here rebuilds, in a few lines of torch and the standard library, a leak that someone
reported in public (the comment above it gives the report, what the reporter saw and the fix given
there, with how firmly it was confirmed). None of them is a catalog case: they exist only to score the catalog-matching
hit rate of ``leaklab check`` on leaks the catalog was not written from. ``FAMILY`` and ``RESOURCE``
at the end say what a reader would answer from the mechanism (the FAMILIES list in
notes/HELPERS.md), not what the harness reports.

Every ``factory(device)`` returns a ``step()`` that runs one small training or evaluation step on
'cpu' or 'cuda', takes a few milliseconds on a CPU, leaks at most about 1 MiB per step, and leaves
nothing behind: no file stays on disk, the threads it starts are daemons blocked on a queue or an
event, and the processes it leaves running are stopped by the check (as it stops any step's).
"""

import collections
import functools
import itertools
import logging
import os
import queue
import tempfile
import threading
import warnings
import zlib

import torch
from torch import nn


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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
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
}

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
}
