"""A check under ``torchrun``: the process group, and what every rank tells the others.

What the ranks must agree on, so that every rank runs the same steps (a collective inside the
step would otherwise wait forever on a rank that stopped):

- which pass comes next: after every pass, each rank's record goes to rank 0, which merges them
  and asks the policy (:mod:`leaklab.ranks`), then sends the decision to every rank
  (:meth:`Coordinator.next_pass`);
- after every step, whether any rank's step failed or passed its budget
  (:meth:`Coordinator.agree`, one small gather on a gloo group of leaklab's own, apart from the
  step's): a failed step ends the pass on every rank at that step, as the first failure's;
- whether a long pass may end (:class:`AgreedPass`): only where it may on every rank;
- whether the factory built a step on every rank (:meth:`Coordinator.factory`).

A rank that hangs in its step is ended by its time limit (``--timeout``) and the others learn it
at their next agreement. The groups' own timeouts are set past the step's time limit, so that a
rank stuck waiting on a hung one in a collective of the step's gets its error (the group's
timeout) after the hung one's timeout (and before the hard stop of :class:`leaklab.timelimit.TimeLimit`)
and the hung rank is the one named; leaklab's group waits past both. A rank that dies
outright ends the check through the launcher (``torchrun`` stops the other ranks).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from leaklab import ranks
from leaklab import resources as known
from leaklab.report import EXIT_STEP_FAILED
from leaklab.series import Series, Step, call_step
from leaklab.timelimit import StepTimeout, TimeLimit
from leaklab.verdict import Done, Pass, Plan, Resource, Verdicts, next_pass

CONTROL_MARGIN = 120.0  # seconds leaklab's own group waits past a step's time limit (censuses, the release)
STEP_FAILURES = (Exception, SystemExit, StepTimeout)


class PeerFailed(Exception):
    """Another rank's step failed: this rank stops where it did."""


def launched() -> bool:
    """Whether this process is one rank of a job ``torchrun`` (or another launcher) started."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def quiet_flight_recorder() -> None:
    """No flight recorder, unless the user asked for one: torch's record of the last collectives
    (``TORCH_FR_BUFFER_SIZE``, 2,000 entries by default) keeps about a KiB of host heap for every
    collective until it is full, which the check would read as growth (a no-op step read 0.8 KiB
    a step from leaklab's own agreement alone). Read when the first process group is made: this
    comes before the script is imported. Torch before 2.7 reads only the NCCL-only name
    (``TORCH_NCCL_TRACE_BUFFER_SIZE``), which later torch warns of as deprecated on every rank's
    stderr: each torch gets its own name, where the user set neither."""
    if "TORCH_NCCL_TRACE_BUFFER_SIZE" not in os.environ and "TORCH_FR_BUFFER_SIZE" not in os.environ:
        os.environ["TORCH_FR_BUFFER_SIZE"] = "0"
        if tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 7):
            os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "0"


def rank_device(device: str) -> str:
    """The device a rank's factory gets: ``cuda`` is ``cuda:LOCAL_RANK``; any other as given."""
    if device == "cuda":
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


@dataclass(frozen=True)
class AgreedPass(Pass):
    """A pass whose early end (:meth:`Pass.may_stop`) is agreed by every rank."""

    agree: Callable[[bool], bool] | None = field(default=None, compare=False, repr=False)

    def may_stop(self, series: Any) -> bool:
        mine = super().may_stop(series)
        return self.agree(mine) if self.agree is not None else mine


class Coordinator:
    """This rank's part in a check of every rank: made by :meth:`start` before the factory runs,
    given to the runner as :attr:`leaklab.runner.RunOptions.ranks`, closed by :meth:`close`."""

    def __init__(self, control: Any, made: bool) -> None:
        self.control = control
        self.made = made                       # we made the default group: we destroy it
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.origin: int | None = None         # the rank whose step (or factory) failed first
        self.failure: BaseException | None = None
        self._failed_at = 0
        # Allocated once, before the baseline: an agreement after every step allocates no tensor.
        self._mine = torch.zeros(3, dtype=torch.int64)
        self._told = [torch.zeros(3, dtype=torch.int64) for _ in range(self.world)]
        self._stop = torch.zeros(1, dtype=torch.int64)
        self._history: list[Done] = []         # rank 0: the merged records
        self._watched: tuple[Resource, ...] = ()
        self._growing: tuple[str, ...] = ()

    @classmethod
    def start(cls, device: str, backend: str | None = None, step_timeout: float | None = None) -> Coordinator:
        """The default process group (``backend``, else ``nccl`` on CUDA and ``gloo`` on the CPU),
        or the one the user's module already made, as it is; and leaklab's own gloo group."""
        limit = step_timeout or 1800.0
        if device.startswith("cuda"):
            torch.cuda.set_device(device)  # NCCL's collectives go to the rank's own GPU
        made = not dist.is_initialized()
        if made:
            backend = backend or ("nccl" if device.startswith("cuda") else "gloo")
            dist.init_process_group(backend, timeout=timedelta(seconds=limit + TimeLimit.GRACE / 2))
        control = dist.new_group(backend="gloo", timeout=timedelta(seconds=limit + TimeLimit.GRACE + CONTROL_MARGIN))
        return cls(control, made)

    # ------------------------------------------------------------------ the factory
    def factory(self, factory: Callable[[str], Step]) -> Callable[[str], Step]:
        """``factory``, built on every rank before any step runs; where it failed on any rank, every
        rank stops with bad input (exit 2), the failing one with its own error."""
        from leaklab.measure import format_exception
        from leaklab.runner import BadInput, FactoryFailed, describe_failure

        @functools.wraps(factory)
        def build(device: str) -> Step:
            failure: BaseException | None = None
            step = None
            try:
                step = factory(device)
                if not callable(step):
                    failure = BadInput(f"the factory returned {type(step).__name__}, not a callable that runs one step")
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - every rank must hear of it before any raises
                failure = exc
            name = getattr(factory, "__name__", "the factory")
            line = (None if failure is None else str(failure) if isinstance(failure, BadInput)
                    else f"{name}({device!r}) failed: {describe_failure(failure, 'the factory')}")
            told: list[Any] = [None] * self.world
            trace = format_exception(failure) if isinstance(failure, Exception) and not isinstance(failure, BadInput) else ""
            dist.all_gather_object(told, None if failure is None else (line, trace), group=self.control)
            bad = [rank for rank, what in enumerate(told) if what is not None]
            if bad:
                self.origin = bad[0]
                if failure is not None:
                    raise failure
                line, trace = told[bad[0]]
                raise FactoryFailed(line, trace) if trace else BadInput(line)
            return step

        return build

    # ------------------------------------------------------------------ every step
    def call_step(self, step: Step, series: Series) -> None:
        """One step; its failure is kept for :meth:`agree`, where every rank hears of it."""
        try:
            call_step(step, series)
        except STEP_FAILURES as exc:
            self.failure, self._failed_at = exc, time.time_ns() // 1000

    def agree(self, series: Series, over: str | None) -> str | None:
        """After a step and its reading, on every rank: raises the step's failure where this rank's
        failed, :class:`PeerFailed` where another's did (the first to fail is :attr:`origin`), the
        reading after it taken back; else the resource that passed its budget on any rank (named
        with its rank where it is another's), or None."""
        mine = self._mine
        mine[0], mine[1] = (1, self._failed_at) if self.failure is not None else (0, 0)
        mine[2] = known.NAMES.index(over) if over else -1
        dist.all_gather(self._told, mine, group=self.control)
        told = [row.tolist() for row in self._told]
        failed = [rank for rank, row in enumerate(told) if row[0]]
        if failed:
            self.origin = min(failed, key=lambda rank: (told[rank][1], rank))
            series.count -= 1  # the reading after a failed step is none of the series'
            failure, self.failure = self.failure, None
            if failure is not None:
                raise failure
            raise PeerFailed(f"rank {self.origin} of {self.world} failed there")
        passed = [(rank, row[2]) for rank, row in enumerate(told) if row[2] >= 0]
        if over or not passed:
            return over
        rank, index = passed[0]
        return ranks.rank_name(known.NAMES[index], rank)

    def all_may_stop(self, mine: bool) -> bool:
        self._stop[0] = int(mine)
        dist.all_reduce(self._stop, op=dist.ReduceOp.MIN, group=self.control)
        return bool(self._stop[0].item())

    # ------------------------------------------------------------------ every pass
    def next_pass(self, history: Sequence[Done], watched: Sequence[Resource], plan: Plan) -> Pass | Verdicts:
        """The policy's decision on every rank's series, taken on rank 0, as this rank runs it."""
        gathered: list[Any] | None = [None] * self.world if self.rank == 0 else None
        dist.gather_object((tuple(r.name for r in watched), history[-1]), gathered, dst=0, group=self.control)
        decision: Pass | Verdicts | None = None
        if gathered is not None:
            if not self._watched:
                self._watched = ranks.rank_resources([names for names, _ in gathered])
            self._history.append(ranks.merge_done([done for _, done in gathered], self._growing))
            decision = next_pass(self._history, self._watched, plan)
            self._growing = decision.growing if isinstance(decision, Pass) else ()
        box = [decision]
        dist.broadcast_object_list(box, src=0, group=self.control)
        mine = ranks.split(box[0], self.rank)
        # gloo keeps its last collective's tensors until the next one: without this, the pickled
        # decision's would be freed in the pass's first step (-166 B of CPU tensors, -6 objects).
        self.all_may_stop(True)
        if isinstance(mine, Pass):
            return AgreedPass(**{f.name: getattr(mine, f.name) for f in dataclasses.fields(Pass)},
                              agree=self.all_may_stop)
        return mine

    # ------------------------------------------------------------------ the end
    def gather(self, data: Any) -> list[Any]:
        """Every rank's ``data``, in rank order, on every rank."""
        told: list[Any] = [None] * self.world
        dist.all_gather_object(told, data, group=self.control)
        return told

    def close(self) -> None:
        """Every rank is done (rank 0 has answered); the groups we made are destroyed."""
        dist.barrier(group=self.control)
        dist.destroy_process_group(self.control)
        # Freed now, not at the interpreter's exit: a gloo group keeps its last collective's tensors
        # until it is freed, and gloo state freed during finalization can abort the process
        # (pytorch/pytorch#179291; see tests/data/rank_budget_main.py).
        self.control = None
        if self.made:
            dist.destroy_process_group()


def check_every_rank(factory: Callable[[str], Step], device: str, options: Any) -> tuple[Any, list[dict], str]:
    """One check on every rank (the pytest plugin's ``leak_check`` under torchrun): the process
    groups made (or the default one reused), ``factory`` run under the check with the rank's
    device, every rank's report gathered. Returns this rank's report, every rank's report as JSON
    (in rank order) and the one answer (:func:`leaklab.ranks.answer`), the same on every rank."""
    from leaklab.runner import run_factory

    device = rank_device(device)
    coordinator = Coordinator.start(device, None, options.timeout)
    try:
        report = run_factory(coordinator.factory(factory), device, dataclasses.replace(options, ranks=coordinator))
        report.labels = {**report.labels, "rank": coordinator.rank, "world_size": coordinator.world}
        every = coordinator.gather(report.to_json())
    finally:
        coordinator.close()
    return report, every, ranks.answer(every, coordinator.origin)


def launch(nproc: int, argv: list[str]) -> int:
    """``leaklab check --nproc N ...``: ``python -m leaklab ...`` on ``nproc`` ranks of this
    machine through torch's own elastic launcher (as ``torchrun --standalone`` does); the merged
    exit code every rank answered with (:func:`leaklab.ranks.launcher_code`)."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    # The launcher's own log (a rank's exit code, its summary table) says again what rank 0 said.
    for name in list(logging.root.manager.loggerDict):  # each of torch's sets its own level
        if name.startswith(("torch.distributed.elastic", "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    if nproc > 1:  # as torchrun does: the ranks share the machine's cores
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    # The launcher's log directory (each rank's error file) in one the check removes: left to
    # itself, the launcher makes a torchelastic_* directory in the temp directory on every launch
    # and never removes it.
    with tempfile.TemporaryDirectory(prefix="leaklab-ranks-") as logs:
        config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=str(uuid.uuid4()),
                              rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1,
                              logs_specs=DefaultLogsSpecs(log_dir=logs))
        try:
            elastic_launch(config, sys.executable)("-m", "leaklab", *argv)
        except ChildFailedError as exc:
            code, line = ranks.launcher_code({rank: failure.exitcode for rank, failure in exc.failures.items()}, nproc)
            if line:
                print(f"leaklab: {line}", file=sys.stderr, flush=True)
            return code
        except SignalException as exc:  # Ctrl-C or SIGTERM: the launcher has stopped every rank
            print(f"leaklab: interrupted: {exc.sigval.name} (every rank was stopped)", file=sys.stderr, flush=True)
            return EXIT_STEP_FAILED
    return 0
