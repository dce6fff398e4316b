"""The command line: ``leaklab check`` (the tool), and the lab's ``run``, ``compare``, ``bench`` and
``catalog`` where the lab is there.

Exit codes of ``leaklab check``:
  0  bounded: no watched resource grows, nothing was left behind
  1  a leak: a resource grows, or the steps left child processes running (they are stopped; those
     the factory started and that outlive the step, such as MPI's daemon, are named and stopped at exit)
  2  bad input: usage, a missing or broken file, a factory that fails; nothing was measured
  3  no verdict: the step itself failed (it raised, called sys.exit, was interrupted or timed out),
     or a resource passed its budget without rising step after step (stopped)
  4  plateau: memory rose, then stopped (a bounded cache); not a leak, worth knowing
The lab's commands: 0 as expected / no regression, 1 a case differs from its entry / a
regression, 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import functools
import importlib
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from leaklab import resources as known
from leaklab.redirect import fd_pointed_at
from leaklab.report import EXIT_BAD_INPUT, EXIT_BOUNDED, EXIT_LEAK, EXIT_STEP_FAILED
from leaklab.verdict import HORIZON, HORIZON_BUDGET

# The lab's commands answer 0 (as expected), 1 (a difference or regression) or 2 (bad input).
EXIT_OK, EXIT_GROWS = EXIT_BOUNDED, EXIT_LEAK
DEFAULT_TIMEOUT = 600.0  # seconds one step may take under `leaklab check` unless --timeout says otherwise


def _resources(value: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in known.BY_NAME]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown resource {', '.join(unknown)}; known: {', '.join(known.NAMES)}")
    return names


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {value!r}") from None
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return seconds


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep it to one line
        self.exit(EXIT_BAD_INPUT, f"leaklab: {message}\n")


LAB_COMMANDS = ("run", "compare", "bench", "catalog")


def lab_commands() -> list[Callable[[Any], None]]:
    """The lab's subcommands (run, compare, bench, catalog), where the lab is installed or this is
    a checkout: an entry point of group ``leaklab.commands`` registers them. The tool itself
    knows nothing of the lab."""
    found = [ep.load() for ep in entry_points(group="leaklab.commands")]
    if not found and importlib.util.find_spec("leaklab_lab") is not None:  # a bare checkout
        found = [importlib.import_module("leaklab_lab.cli").register]
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="leaklab", description=__doc__.split("\n\n")[0],
                     epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    check = commands.add_parser("check", help="check your own step for leaks",
                                description="Check your own step for leaks. " + __doc__.split("\n\n", 1)[1].split("The lab")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("target", help="PATH.py:FACTORY, where FACTORY(device) returns a callable running one step")
    check.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    check.add_argument("--steps", type=int, default=20, help="measured steps (default 20)")
    check.add_argument("--warmup", type=int, default=5, help="steps before the baseline (default 5)")
    check.add_argument("--resource", type=_resources, action="extend", default=[],
                       help=f"comma-separated resources, or the option again (default: all that can be read, "
                            f"less the opt-in ones): {', '.join(known.NAMES)}")
    check.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT,
                       help=f"seconds one step may take before the check ends with exit 3 (default {DEFAULT_TIMEOUT:g})")
    check.add_argument("--strict", action="store_true",
                       help="any growth is a leak, a record of plain data (a loss history of floats) too")
    check.add_argument("--horizon", type=int, default=HORIZON, metavar="STEPS",
                       help=f"a record of plain data is a leak when it would hold over {HORIZON_BUDGET // 2**30} GiB "
                            f"after this many steps (default {HORIZON:,})")
    check.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    check.add_argument("--attribute", action="store_true", help="name the line that allocated what stayed alive")
    check.add_argument("--snapshot", metavar="FILE", help="(cuda) write an allocator snapshot for pytorch.org/memory_viz")
    check.add_argument("--snapshot-html", action="store_true", help="(with --snapshot) also write FILE's viewer page, .html")
    check.add_argument("--overwrite", action="store_true", help="replace an existing --snapshot file")
    check.add_argument("--quiet", action="store_true", help="no per-step progress on stderr")
    check.add_argument("-v", "--verbose", "--table", dest="table", action="store_true",
                       help="also print the per-step table of every resource (by default: the answer only)")
    check.add_argument("--nproc", type=int, metavar="N",
                       help="check N ranks of this machine, launched by torch's elastic launcher (as torchrun "
                            "--standalone --nproc-per-node N -m leaklab check ... would); one merged answer")
    check.add_argument("--backend", help="under torchrun or --nproc: the process group's backend where the script "
                                         "made none (default nccl on CUDA, gloo on the CPU)")
    check.set_defaults(handler=cmd_check)

    for register in lab_commands():
        register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if argv and argv[0] in LAB_COMMANDS and argv[0] not in parser._subparsers._group_actions[0].choices:
        print(f"leaklab: `{argv[0]}` belongs to the lab (the catalog's cases), which is not installed here; "
              "run it from a leaklab checkout after `pip install -e '.[lab]'`", file=sys.stderr)
        return EXIT_BAD_INPUT
    args = parser.parse_args(argv)
    args.argv = argv
    shadow = shadowing_note([Path.cwd(), *([Path(args.target).parent] if getattr(args, "target", None) else [])])
    if shadow:
        print(shadow, file=sys.stderr)
    from leaklab.files import UnwritablePath
    from leaklab.runner import BadInput, FactoryFailed, Interrupted

    try:
        return args.handler(args)
    except (BadInput, UnwritablePath) as exc:
        if isinstance(exc, FactoryFailed):  # its traceback above the line
            print(exc.traceback, file=sys.stderr, end="")
        print(f"leaklab: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM, wherever it came: the line says where, if known
        print(f"leaklab: {exc}" if isinstance(exc, Interrupted) else "leaklab: interrupted", file=sys.stderr)
        return EXIT_STEP_FAILED


# --------------------------------------------------------------------------- check
def shadowing_note(folders: list[Path]) -> str | None:
    """One line where a folder a script would be run from holds a ``leaklab/`` folder that is not
    this package and has no ``__init__.py`` (a clone of leaklab, seen from the folder holding
    it): Python imports that folder as an empty namespace package ``leaklab``, ahead of the
    installed tool, and ``leaklab.check`` is then missing. Nothing inside the tool can say so
    when that happens (the namespace package runs no code of ours), so the command line says it
    whenever it runs from such a folder."""
    real = Path(__file__).resolve().parent
    for folder in dict.fromkeys(Path(f).resolve() for f in folders):
        candidate = folder / "leaklab"
        if candidate.is_dir() and candidate.resolve() != real and not (candidate / "__init__.py").exists():
            return (f"leaklab: note: {candidate} (a folder without __init__.py, e.g. a leaklab clone) shadows the "
                    f"installed leaklab ({real}) for scripts run from {folder}: there `import leaklab` gives an empty "
                    "namespace package (\"module 'leaklab' has no attribute 'check'\"); run them from another folder, "
                    "or inside the clone")
    return None


def _progress(quiet: bool, terminal: bool | None = None):  # noqa: ANN202
    """Per-step progress on stderr: on a terminal, one line rewritten in place (``\\r``); off a
    terminal (a CI log), one line at the end of each series (a pass of the check), never ``\\r``."""
    if quiet:
        return None
    if terminal is None:
        terminal = sys.stderr.isatty()

    def show(done: int, total: int, sample: dict[str, int], last: bool) -> None:
        if not terminal and not last:
            return
        figures = "  ".join(reading(name, value) for name, value in sample.items())
        if terminal:
            print(f"\r[{done}/{total}] {figures}", end="\n" if last else "", file=sys.stderr, flush=True)
        else:
            print(f"[{done}/{total}] {figures}", file=sys.stderr, flush=True)

    return show


def reading(name: str, value: float) -> str:
    """One resource's reading as progress shows it: ``cpu_tensors 2.0 MiB``, ``4 threads`` (a name
    that is its unit is not said twice)."""
    figure = known.get(name).format(value)
    return figure if known.get(name).unit == name else f"{name} {figure}"


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Everything written to stdout inside the block goes to stderr: Python's ``print`` and writes
    to file descriptor 1 from C code or child processes alike (fd 1 is pointed at fd 2), so that
    ``--json`` leaves stdout to the JSON alone. Restored on the way out, whatever happens."""
    with fd_pointed_at(1, 2), contextlib.redirect_stdout(sys.stderr):
        yield


def _factory(module: Any, name: str) -> Callable[[str], Any]:
    """The script's factory; a name that is not there gets the closest callable it defines."""
    from leaklab.runner import BadInput
    from leaklab.scripts import factory_from_script

    try:
        return factory_from_script(module, name)
    except BadInput as exc:
        if getattr(module, name, None) is not None:
            raise
        own = [key for key, value in vars(module).items() if callable(value) and not key.startswith("_")
               and getattr(value, "__module__", None) == module.__name__]
        close = difflib.get_close_matches(name, own, n=1, cutoff=0.6)
        if not close:
            raise
        raise BadInput(f"{exc}; did you mean {close[0]!r}?") from None


def answer_lines(data: dict[str, Any]) -> list[str]:
    """Below the summary: what grows (the census) and the catalog entries it resembles, from the
    report's JSON, where there are any."""
    lines = []
    for where, found in (data.get("growth") or {}).items():
        lines.append(f"  grows ({where}): " + "; ".join(found))
    if data.get("holder") or data.get("holder_missing"):
        from leaklab.chain import chain_from_json

        chain = chain_from_json(data.get("holder"), data.get("holder_missing"))
        lines.append(f"  held by: {chain}" if chain.found else f"  held by: {chain.missing}")
    for i, match in enumerate(data.get("resembles") or []):
        why = f"; why: {match['why']}" if match.get("why") and i == 0 else ""  # the same evidence for all
        lines.append(f"  resembles {match['slug']} ({match['title']}; family {match['family']}{why}): {match['link']}; "
                     f"its fix: {' '.join(str(match.get('fix', '')).split())}")
    return lines


def terminate_on_sigterm() -> None:
    """SIGTERM ends a command as Ctrl-C does: the run stops, children are stopped, one line is said."""
    owner = os.getpid()

    def interrupt(signum: int, frame: Any) -> None:
        if os.getpid() != owner:  # a forked child of the step (a queue's writer): ends as SIGTERM ends it
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)
        _children_end_on_sigterm()


@functools.cache  # registered once: os.register_at_fork cannot unregister
def _children_end_on_sigterm() -> None:
    """A child forked from here (a DataLoader worker, a pool's process) gets SIGTERM's default back
    at once: a handler written in Python runs only when the child's main thread next runs Python,
    and a signal that lands on another of its threads (the worker_objects sampler) left a worker
    asleep in a C call alive until that call returned (60 s, measured in the test suite)."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_default_sigterm)


def _default_sigterm() -> None:
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # forked from a thread other than the main one: the handler's own test still ends it
        pass


def without_nproc(argv: list[str]) -> list[str]:
    """The command line a rank runs: this one without ``--nproc N`` (or ``--nproc=N``)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            kept.append(arg)
    return kept


def cmd_check(args: argparse.Namespace) -> int:
    from leaklab import distributed
    from leaklab.runner import BadInput, RunOptions, run_factory
    from leaklab.scripts import forget_script, load_script, parse_target

    path, factory_name = parse_target(args.target)
    if args.nproc is not None and not distributed.launched():
        if args.nproc < 1:
            raise BadInput(f"--nproc must be 1 or more, got {args.nproc}")
        if not Path(path).is_file():
            raise BadInput(f"no such file: {path}")
        return distributed.launch(args.nproc, without_nproc(args.argv))
    options = RunOptions(steps=args.steps, warmup=args.warmup, resources=tuple(dict.fromkeys(args.resource)),
                         attribute=args.attribute or bool(args.snapshot), snapshot=args.snapshot,
                         snapshot_overwrite=args.overwrite, snapshot_html=args.snapshot_html,
                         timeout=args.timeout, hard_timeout=True, strict=args.strict, horizon=args.horizon,
                         progress=_progress(args.quiet or args.json))
    device = options.validate(args.device)
    if args.snapshot and not device.startswith("cuda"):
        raise BadInput("--snapshot records the CUDA allocator's history: it needs --device cuda")
    if args.snapshot:
        from leaklab.attribution import check_snapshot_paths

        check_snapshot_paths(args.snapshot, overwrite=args.overwrite, html=args.snapshot_html)
    terminate_on_sigterm()
    if distributed.launched():
        return cmd_check_ranks(args, options, device, path, factory_name)
    with stdout_to_stderr() if args.json else contextlib.nullcontext():
        module = load_script(path)
        try:
            report = run_factory(_factory(module, factory_name), device, options)
        finally:
            forget_script(module)
    report.name = args.target
    data = report.to_json()
    if args.json:
        print(json.dumps(data), flush=True)
        print(f"leaklab: {report.summary()}", file=sys.stderr)
        return report.exit_code
    if report.error is not None:
        print(report.traceback, file=sys.stderr, end="")
        print(f"leaklab: {report.summary()}", file=sys.stderr)
        return report.exit_code
    try:
        if args.table:  # the table, what grows and what it resembles, then the answer
            print(f"{report.curve()}\n{report.summary()}", flush=True)
        else:
            print("\n".join([report.summary(), *answer_lines(data)]), flush=True)
    except BrokenPipeError:  # `leaklab check ... | head -1`: the reader has what it wanted; the code stands
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return report.exit_code


def cmd_check_ranks(args: argparse.Namespace, options: Any, device: str, path: str, factory_name: str) -> int:
    """``leaklab check`` as one rank of a job ``torchrun`` started: every rank runs the check with
    the others (:mod:`leaklab.distributed`), rank 0 prints one answer for all of them
    (:func:`leaklab.ranks.answer`), and every rank exits with the merged code."""
    from leaklab import distributed, ranks
    from leaklab.runner import BadInput, FactoryFailed, run_factory
    from leaklab.scripts import forget_script, load_script

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    coordinator = None
    with stdout_to_stderr() if args.json else contextlib.nullcontext():
        try:
            distributed.quiet_flight_recorder()
            module = load_script(path)  # first: a script may make its own process group, used as it is
            if options.snapshot:  # one file per rank
                from leaklab.attribution import check_snapshot_paths

                options.snapshot = ranks.rank_path(options.snapshot, rank)
                check_snapshot_paths(options.snapshot, overwrite=args.overwrite, html=args.snapshot_html)
            try:
                device = distributed.rank_device(device)
                coordinator = distributed.Coordinator.start(device, args.backend, args.timeout)
                options.ranks = coordinator
                options.progress = options.progress if rank == 0 else None
                report = run_factory(coordinator.factory(_factory(module, factory_name)), device, options)
            finally:
                forget_script(module)
        except BadInput as exc:  # alike on every rank, or agreed (a factory that failed on one)
            if rank == 0:
                origin = coordinator.origin if coordinator is not None else None
                if isinstance(exc, FactoryFailed):
                    print(exc.traceback, file=sys.stderr, end="")
                print(f"leaklab: {'' if origin is None else f'rank {origin} of {world}: '}{exc}", file=sys.stderr)
            if coordinator is not None:
                coordinator.close()
            return EXIT_BAD_INPUT
    report.name = args.target
    report.labels = {"rank": rank, "world_size": world}
    reports = coordinator.gather(report.to_json())
    code = ranks.merged_code(reports)
    if rank == 0:
        line = f"{args.target}: {ranks.answer(reports, coordinator.origin)}"
        failed = next((reports[i] for i in (coordinator.origin, *range(world)) if i is not None
                       and reports[i]["error"] is not None), None)
        if args.json:
            print(json.dumps({"name": args.target, "world_size": world, "exit_code": code, "summary": line,
                              "ranks": reports}), flush=True)
            print(f"leaklab: {line}", file=sys.stderr, flush=True)
        elif failed is not None:
            print(failed["traceback"] or "", file=sys.stderr, end="")
            print(f"leaklab: {line}", file=sys.stderr, flush=True)
        else:
            from leaklab.report import report_from_json

            lines = [f"rank {i}:\n{report_from_json(data).curve()}" for i, data in enumerate(reports)] if args.table else []
            lines.append(line)
            for i, data in enumerate(reports):
                if data["verdict"] != "bounded":
                    lines += [f"  rank {i}: {data['summary']}", *answer_lines(data)]
            print("\n".join(lines), flush=True)
    coordinator.close()
    # A rank exiting non-zero makes torchrun stop the others: after the answer, that ends them quietly.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return code


def run(exit_wait: float = 10.0) -> None:
    """The console command: :func:`main`, then an exit that cannot hang. Python's exit joins what
    the step left behind (a ``multiprocessing.Queue`` whose feeder thread still holds a backlog for
    a writer process that is gone waits forever); the answer is already out, so past ``exit_wait``
    seconds the process ends with the answer's exit code and says why, in one line."""
    code = main()

    def end_anyway() -> None:
        time.sleep(exit_wait)
        print(f"leaklab: Python's exit still waited after {exit_wait:.0f} s on something the step left "
              "(a thread or a queue's backlog); ended it, the answer above stands", file=sys.stderr, flush=True)
        os._exit(code)

    sys.stdout.flush()
    threading.Thread(target=end_anyway, name="leaklab-exit", daemon=True).start()
    _exit_errors_in_one_line()
    sys.exit(code)


def _exit_errors_in_one_line() -> None:
    """From the answer on: what the step left for Python's exit (a ``weakref.finalize`` or an
    ``atexit`` callback) and that raises there is said once, in one line, not as a traceback per
    callback: a finalizer of each server a step made writes to its worker, which the check had
    stopped, and 56 of them printed 900 lines of BrokenPipeError under the answer."""
    said = False

    def once(kind: type[BaseException], value: BaseException | None, _traceback: Any) -> None:
        nonlocal said
        if not said:
            said = True
            print(f"leaklab: at exit, a callback the step left raised {kind.__name__}: {value} (further ones not shown; "
                  "the child processes the check stopped may be why); the answer above stands", file=sys.stderr, flush=True)

    sys.excepthook = once
    sys.unraisablehook = lambda unraisable: once(unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback)


if __name__ == "__main__":
    run()
