"""The command line: ``leaklab check``, ``run``, ``compare`` and ``catalog``.

Exit codes: 0 bounded / all as expected / no regression; 1 grows / a case did not behave as
its catalog entry says / a regression; 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from leaklab.measure import RESOURCES
from leaklab.runner import (
    BadInput,
    RunOptions,
    factory_from_script,
    forget_script,
    load_script,
    parse_target,
    run_factory,
)
from leaklab.verdict import BOUNDED, format_bytes

EXIT_OK, EXIT_GROWS, EXIT_BAD_INPUT = 0, 1, 2


def _resources(value: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in RESOURCES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown resource {', '.join(unknown)}; known: {', '.join(RESOURCES)}")
    return names


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
    parser = _Parser(prog="leaklab", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    check = commands.add_parser("check", help="check your own step for leaks")
    check.add_argument("target", help="PATH.py:FACTORY, where FACTORY(device) returns a callable running one step")
    check.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    check.add_argument("--steps", type=int, default=20, help="measured steps (default 20)")
    check.add_argument("--warmup", type=int, default=5, help="steps before the baseline (default 5)")
    check.add_argument("--resource", type=_resources, default=(), help="comma-separated resources (default: all)")
    check.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    check.add_argument("--attribute", action="store_true", help="name the line that allocated what stayed alive")
    check.add_argument("--snapshot", metavar="FILE", help="(cuda) write an allocator snapshot for pytorch.org/memory_viz")
    check.add_argument("--quiet", action="store_true", help="no per-step progress on stderr")
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
    try:
        return args.handler(args)
    except BadInput as exc:
        print(f"leaklab: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


# --------------------------------------------------------------------------- check
def _progress(quiet: bool):  # noqa: ANN202
    if quiet:
        return None

    def show(done: int, total: int, sample: dict[str, int]) -> None:
        figures = "  ".join(f"{name} {format_bytes(value)}" for name, value in sample.items())
        print(f"\r[{done}/{total}] {figures}", end="\n" if done == total else "", file=sys.stderr, flush=True)

    return show


def cmd_check(args: argparse.Namespace) -> int:
    path, factory_name = parse_target(args.target)
    options = RunOptions(steps=args.steps, warmup=args.warmup, resources=args.resource,
                         attribute=args.attribute or bool(args.snapshot), snapshot=args.snapshot,
                         progress=_progress(args.quiet or args.json))
    options.validate(args.device)
    if args.snapshot and args.device != "cuda":
        raise BadInput("--snapshot records the CUDA allocator's history: it needs --device cuda")
    module = load_script(path)
    try:
        factory = factory_from_script(module, factory_name)

        def checked_factory(device: str) -> Any:
            try:
                return factory(device)
            except Exception as exc:
                raise BadInput(f"{factory_name}({device!r}) raised {type(exc).__name__}: {exc}") from exc

        report = run_factory(checked_factory, args.device, options)
    finally:
        forget_script(module)
    report.name = args.target
    if report.error is not None:
        # The user's step raising is bad input for a leak check: say so, with its traceback.
        print(report.traceback, file=sys.stderr, end="")
        print(f"leaklab: {report.summary()}", file=sys.stderr)
        if args.json:
            print(json.dumps(report.to_json()))
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(report.curve())
        print(report.summary())
    return EXIT_OK if report.verdict == BOUNDED else EXIT_GROWS


if __name__ == "__main__":
    sys.exit(main())
