"""The lab's subcommands of ``leaklab``: ``run``, ``compare``, ``bench`` and ``catalog``.

Exit codes: 0 all as expected / no regression; 1 a case did not behave as its catalog entry
says / a regression; 2 bad input (one line on stderr): an unknown case, an output path that
cannot be written (checked before anything runs), a results file that is malformed or from
another format, a file that could not be written (the one there before is left unchanged).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leaklab.cli import EXIT_GROWS, EXIT_OK
from leaklab.files import UnwritablePath, atomic_write, check_writable, check_writable_dir
from leaklab.measure import cuda_usable
from leaklab.runner import BadInput


def _tolerance(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {value!r}") from None
    if not number >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return number


def _jobs(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of 1 or more, not {value!r}")
    return int(value)


def _check_outputs(files: dict[str, str | None] | None = None, folders: dict[str, str | None] | None = None) -> None:
    """Every output path (by its option), checked before any work is done: exit 2 at once."""
    checks = [(option, path, check_writable) for option, path in (files or {}).items()]
    checks += [(option, path, check_writable_dir) for option, path in (folders or {}).items()]
    for option, path, check in checks:
        if path:
            try:
                check(path)
            except UnwritablePath as exc:
                raise BadInput(f"{option}: {exc}") from exc


def _write(what: str, path: Any, writer: Any) -> None:
    """Write a file, turning a failure half-way (disk full, a size limit) into one line."""
    try:
        writer()
    except OSError as exc:
        raise BadInput(f"could not write {what} to {path}: {exc.strerror or exc}; "
                       "the file that was there is unchanged") from exc


# What the lab's commands import beyond the package's own dependencies, and the extra that brings it.
EXTRAS = {"matplotlib": "lab", "pytest": "lab", "pytest_benchmark": "lab", "IPython": "test"}


def _needs_extras(command: str, handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``handler``, answering one line (exit 2 through BadInput) where a module it needs is missing."""
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            extra = EXTRAS.get(top, "lab")
            raise BadInput(f"`leaklab {command}` needs {top or exc}, which is not installed here: "
                           f"pip install -e '.[{extra}]'") from None

    return run


def register(commands: Any) -> None:
    """Add the lab's subcommands to ``leaklab``'s parser (entry point ``leaklab.commands``)."""
    run = commands.add_parser("run", help="run the catalog's cases and print the verdict table")
    run.add_argument("cases", nargs="*", help="case slugs (default: all)")
    run.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    run.add_argument("--results", metavar="PATH", help="write every run's verdicts and figures to this JSON file")
    run.add_argument("--plot", metavar="FILE", help="draw the leak's and the fix's curves (one case) to a PNG")
    run.add_argument("--plot-dir", metavar="DIR", help="draw every case's curves to DIR/<case>-<device>.png")
    run.add_argument("--attribute", action="store_true", help="attribute each leak to a source line")
    run.add_argument("--note", default="", help="where and why this run was made, stored in the results file")
    run.add_argument("--jobs", type=_jobs, default=None, metavar="N",
                     help="cases run side by side in N worker processes, each with its own counters "
                          "(default: one per core, at most 4; 1 runs them here, one after another)")
    run.add_argument("--slow", action="store_true",
                     help="also run the cases marked slow (fresh interpreters, multi-process jobs; a minute or more "
                          "each here), as `pytest -m slow` does; a case named on the command line always runs")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="also say when each case starts, and show what the runs wrote to stderr (the traceback of "
                          "a case catalogued to raise); without it that is shown only for a case that is not as catalogued")

    compare = commands.add_parser("compare", help="compare two results files (e.g. before and after a torch upgrade)")
    compare.add_argument("old")
    compare.add_argument("new")
    compare.add_argument("--tolerance", type=_tolerance, default=0.25,
                         help="relative change in a resource's rate per step to report (0 or more; default 0.25)")

    bench = commands.add_parser("bench", help="measure the harness's own overheads (and empty_cache on a GPU)")
    bench.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    bench.add_argument("--results", metavar="PATH", help="write the figures to this JSON file")
    bench.add_argument("--note", default="", help="where and why this run was made, stored in the results file")
    bench.add_argument("--sensitivity", action="store_true",
                       help="instead: the smallest leaks and the tricky bounded controls (tests/data/edge_steps.py)")
    bench.add_argument("--matching", action="store_true",
                       help="instead: held-out leaky steps from public reports (tests/data/fresh_steps.py), each "
                            "checked and matched to the catalog; how often its family comes first")
    bench.add_argument("--rounds", type=_rounds, default=None, metavar="N[,N...]",
                       help="with --matching: only the held-out steps of these rounds; their rows replace those "
                            "of the same steps in --results where it exists, the other rows are kept")
    bench.add_argument("--steps", type=_steps, default=None, metavar="NAME[,NAME...]",
                       help="with --matching: only these held-out steps (rows measured again after a change made "
                            "on them); their rows replace those of the same steps in --results, as with --rounds")
    bench.add_argument("--models", action="store_true",
                       help="instead: the check's cost on the real-model corpus (real_models/), each step checked "
                            "against the same steps run bare, as a ratio within one run (the models extra)")

    catalog = commands.add_parser("catalog", help="write CATALOG.md from the cases and the committed results")
    catalog.add_argument("--check", action="store_true", help="exit 1 if CATALOG.md is stale, write nothing")
    catalog.add_argument("--output", default=None, help="where to write (default: CATALOG.md at the repo root)")
    catalog.add_argument("--curves", action="store_true", help="also redraw docs/curves/*.png from the committed results")
    catalog.add_argument("--strict", action="store_true",
                         help="fail when a figure in a case's text is not in the committed results (after a re-measure)")
    run.set_defaults(handler=_needs_extras("run", cmd_run))
    compare.set_defaults(handler=_needs_extras("compare", cmd_compare))
    bench.set_defaults(handler=_needs_extras("bench", cmd_bench))
    catalog.set_defaults(handler=_needs_extras("catalog", cmd_catalog))


def _device(choice: str) -> str:
    if choice == "auto":
        return "cuda" if cuda_usable() else "cpu"
    if choice == "cuda" and not cuda_usable():
        raise BadInput("--device cuda was asked for, but torch sees no CUDA device here")
    return choice


def cmd_run(args: argparse.Namespace) -> int:
    import time

    from leaklab.cli import terminate_on_sigterm
    from leaklab.report import report_from_json
    from leaklab.resources import NAMES
    from leaklab_lab.cases import (
        CLAIM_WORDS,
        CaseError,
        case_row,
        catalogued,
        discover,
        get_case,
        legend,
        mismatches,
        run_name,
    )
    from leaklab_lab.marks import unmet
    from leaklab_lab.pool import default_jobs, run_pairs
    from leaklab_lab.results import entry, write_results

    started = time.monotonic()
    device = _device(args.device)
    try:
        cases = [get_case(slug) for slug in args.cases] if args.cases else discover()
    except CaseError as exc:
        raise BadInput(str(exc)) from exc
    if args.plot and len(cases) != 1:
        raise BadInput("--plot draws one case: name exactly one")
    _check_outputs(files={"--results": args.results, "--plot": args.plot}, folders={"--plot-dir": args.plot_dir})
    if args.plot or args.plot_dir:
        from leaklab_lab.plot import pyplot

        pyplot()  # matplotlib missing: one line now, not after every case has run
    by_slug = {case.slug: case for case in cases}
    entries: list[Any] = []
    counts = {"as catalogued": 0, "not": 0, "skipped": 0}
    skipped_runs: dict[str, str] = {}  # run key -> why it did not run here, for compare

    # Rows are printed as their cases finish, so the columns are sized for every case up front;
    # the `line` column exists only where --attribute can fill it.
    columns = ["case", "device", "leak", "fix", "resource", "per step", *(["line"] if args.attribute else []),
               "popular claim", "as catalogued"]
    widths = {"case": max(len(c.slug) for c in cases), "device": len(device), "leak": len("bounded"),
              "fix": max(len(",".join(["bounded"] * max(1, len(c.fixes)))) for c in cases),
              "resource": max(len(name) for name in (*NAMES, *(c.meta["resource"] for c in cases))),
              "per step": len("1,023.9 KiB"), "line": 40, "popular claim": max(map(len, CLAIM_WORDS.values())),
              "as catalogued": 0}
    widths = {name: max(width, len(name)) for name, width in widths.items()}

    def show(row: dict[str, str]) -> None:
        print("  ".join(f"{row[name]:<{widths[name]}}" for name in columns).rstrip(), flush=True)

    show({name: name for name in columns})  # the header

    def skipped(case: Any, why: str, count: str = "skipped") -> dict[str, str]:
        for role in ("leak", "fix"):
            for script in case.scripts(role):
                skipped_runs[f"{device}/{run_name(case, role, script)}"] = why
        counts[count] += 1
        row = dict.fromkeys(columns, "-")
        return {**row, "case": case.slug, "device": device, "popular claim": CLAIM_WORDS[case.meta["claim_status"]],
                "as catalogued": f"skipped: {why}" if count == "skipped" else why}

    runnable = []
    for case in cases:
        if device not in case.devices:
            show(skipped(case, f"no {device} form (devices = {case.devices})"))
            continue
        reason = unmet(case.markers(device))
        if reason is None and "slow" in case.markers(device) and not (args.slow or args.cases):
            reason = "slow: run with --slow, or name the case"
        if reason:
            show(skipped(case, reason))
            continue
        runnable.append(case)
    finished = 0

    def done(slug: str, outcome: Any) -> None:
        nonlocal finished
        finished += 1
        case = by_slug[slug]
        print(f"[{finished}/{len(runnable)}] {slug} on {device} ({time.monotonic() - started:.0f} s)",
              file=sys.stderr, flush=True)
        if isinstance(outcome, str):  # one broken case must not hide the rest of the catalog
            show(skipped(case, f"NO: the run failed: {outcome}"[:120], count="not"))
            return
        stderr = outcome.pop("stderr", "")
        reports = {role: [report_from_json(data) for data in datas] for role, datas in outcome.items()}
        leak = reports["leak"][0]
        problems = mismatches(leak, case.expected(device, "leak"), reports["fix"][0])
        for fix_report in reports["fix"]:
            problems += mismatches(fix_report, case.expected(device, "fix"))
        cell = catalogued(case, device, leak, reports["fix"], problems)
        counts["not" if cell.startswith("NO") else "as catalogued"] += 1
        row = {**case_row(case, leak, reports["fix"]), "as catalogued": cell}
        if args.verbose or cell.startswith("NO"):
            for report in (leak, *reports["fix"]):
                if report.error is not None and report.traceback and report.traceback not in stderr:
                    stderr += report.traceback
            if stderr.strip():
                print(f"--- {slug}: what its runs wrote to stderr\n{stderr.rstrip()}\n--- end of {slug}",
                      file=sys.stderr, flush=True)
        show(row)
        for role, role_reports in reports.items():
            for script, report in zip(case.scripts(role), role_reports, strict=False):
                entries.append(entry(report, case=case.slug, role=role, script=script.stem))
        plot_path = args.plot or (args.plot_dir and Path(args.plot_dir) / f"{case.slug}-{device}.png")
        if plot_path:
            from leaklab_lab.plot import plot_case

            _write("curves", plot_path, lambda: plot_case(case, leak, reports["fix"], plot_path))
            print(f"curves written to {plot_path}", file=sys.stderr)

    terminate_on_sigterm()  # SIGTERM ends the run as Ctrl-C does, so that the workers are stopped too
    jobs = default_jobs() if args.jobs is None else args.jobs
    run_pairs([case.slug for case in runnable], device, args.attribute, jobs, verbose=args.verbose, done=done)
    print()
    print(legend(columns))
    print()
    print(f"{len(cases)} case{'s' * (len(cases) != 1)}: {counts['as catalogued']} as catalogued, "
          f"{counts['not']} not, {counts['skipped']} skipped; {time.monotonic() - started:.0f} s "
          f"on {device}, {jobs} worker{'s' * (jobs != 1)}")
    if args.results:
        _write("results", args.results, lambda: write_results(args.results, entries, device, note=args.note,
                                                               skipped=skipped_runs))
        print(f"results written to {args.results}", file=sys.stderr)
    return EXIT_GROWS if counts["not"] else EXIT_OK


# --------------------------------------------------------------------------- compare / catalog
def cmd_compare(args: argparse.Namespace) -> int:
    from leaklab_lab.results import ResultsError, compare_text, load_results

    try:
        old, new = load_results(args.old, need_runs=True), load_results(args.new, need_runs=True)
    except ResultsError as exc:
        raise BadInput(str(exc)) from exc
    text, fails = compare_text(old, new, tolerance=args.tolerance)
    print(text)
    return EXIT_GROWS if fails else EXIT_OK


def _bench_written(args: argparse.Namespace, device: str, benchmarks: dict[str, Any]) -> int:
    """Keep a benchmark's figures in ``--results``, where asked for."""
    from leaklab_lab.results import write_results

    if args.results:
        _write("results", args.results,
               lambda: write_results(args.results, [], device, note=args.note, benchmarks=benchmarks))
        print(f"results written to {args.results}", file=sys.stderr)
    return EXIT_OK


def _rounds(text: str) -> set[int]:
    try:
        rounds = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"rounds are numbers separated by commas, not {text!r}") from None
    if not rounds or min(rounds) < 1:
        raise argparse.ArgumentTypeError(f"rounds are numbers from 1, not {text!r}")
    return rounds


def _steps(text: str) -> set[str]:
    steps = {part.strip() for part in text.split(",") if part.strip()}
    if not steps:
        raise argparse.ArgumentTypeError(f"steps are names separated by commas, not {text!r}")
    return steps


def cmd_bench(args: argparse.Namespace) -> int:
    from leaklab_lab import timing

    device = _device(args.device)
    _check_outputs(files={"--results": args.results})
    if args.matching:
        from leaklab_lab.matching import fresh_steps, merged_rows
        from leaklab_lab.results import ResultsError, load_results

        before = None
        if (args.rounds or args.steps) and args.results and os.path.exists(args.results):
            try:  # read before anything runs: a broken file is bad input, not minutes of checks lost
                before = load_results(args.results)
            except ResultsError as exc:
                raise BadInput(f"--results: {exc}") from exc
        summary = fresh_steps(device, rounds=args.rounds, steps=args.steps, progress=lambda name, row: print(
            f"{name:32} {row['family']:24} first: {(row['suggested'] or [['nothing close']])[0][0]}", flush=True))
        if before is not None:
            summary, args.note = merged_rows(before, summary, args.note)
        for label, counts in [("", summary), *((f"round {r}: ", c) for r, c in summary.get("rounds", {}).items())]:
            print(f"{label}family named right: {counts['first']} of {counts['counted']}; "
                  f"one of the first three: {counts['top3']} of {counts['counted']}; "
                  f"the right entry first: {counts['entry_first']} of {counts['entry_counted']}; "
                  f"nothing close where the catalog has no entry: {counts['no_entry_none']} of {counts['no_entry_counted']}")
        return _bench_written(args, device, {"matching": summary})
    if args.models:
        from leaklab_lab.models import check_cost

        cost = check_cost(device, progress=lambda name, row: print(
            f"{name:44} check {row['check_s']:.2f} s, bare {row['bare_s']:.2f} s for {row['calls']} calls: "
            f"{row['ratio']:.2f}x", flush=True))
        print(f"median over the steps: {cost['median_ratio']:.2f}x the same steps run bare")
        return _bench_written(args, device, {"models_cost": cost})
    if args.sensitivity:
        from leaklab_lab.sensitivity import run_grid

        grid = run_grid(device, lambda name, report: print(f"{name:24} {report.summary()}", flush=True))
        print(f"leaks detected: {grid['leaks_detected']} of {grid['leaks']}; "
              f"false alarms: {grid['false_alarms']} of {grid['controls']} controls")
        return _bench_written(args, device, {"sensitivity": grid})
    measurements = {f"probe_overhead_{device}": lambda: timing.probe_overhead(device)}
    measurements[f"check_cost_{device}"] = lambda: timing.check_cost(device)
    if device == "cuda":
        measurements["history_overhead_cuda"] = timing.history_overhead
        measurements["empty_cache_resnet18"] = timing.empty_cache_ratios
    else:
        measurements["tracker_overhead_cpu"] = timing.tracker_overhead
    figures = {}
    for name, measure in measurements.items():
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        figures[name] = measure()
        if name.startswith("check_cost"):
            print(f"{name}:\n" + "\n".join(f"  {variant:28} {row['median_s']:.2f} s (+{row['over_import_torch_s']:.2f} s over "
                                           f"import torch)" + (f", verdict in {row['seconds_to_verdict']:.2f} s after "
                                           f"{row['measured_steps']} measured steps" if row.get('seconds_to_verdict') else "")
                                           for variant, row in figures[name].items()) + "\n")
            continue
        print(f"{name}:\n{timing.format_ratios(figures[name])}\n")
    costs = timing.probe_costs(device)
    print("one reading of each resource:", ", ".join(f"{k} {v['median_us']:.0f} µs" for k, v in costs.items()))
    return _bench_written(args, device, {**figures, "probe_costs": costs})


def cmd_catalog(args: argparse.Namespace) -> int:
    """CATALOG.md and docs/harness.md (or, with --output, the catalog alone to that path)."""
    from leaklab_lab.catalog import CATALOG_PATH, CURVES_DIR, pages
    from leaklab_lab.figures import FigureError
    from leaklab_lab.results import ResultsError
    from leaklab_lab.seeds import SeedClaimError

    def render() -> dict[Path, str]:
        try:
            rendered = pages(strict=args.strict)
        except (FigureError, SeedClaimError, ResultsError) as exc:
            raise BadInput(str(exc)) from exc
        return {Path(args.output): rendered[CATALOG_PATH]} if args.output else rendered

    outputs = [Path(args.output)] if args.output else [CATALOG_PATH]
    if not args.check:
        _check_outputs(files={"--output": str(outputs[0])}, folders={"--curves": str(CURVES_DIR) if args.curves else None})
    texts = render()
    if args.check:
        stale = [path for path, text in texts.items() if not path.is_file() or path.read_text() != text]
        for path in stale:
            print(f"leaklab: {path} is stale; run `leaklab catalog` to regenerate it", file=sys.stderr)
        if not stale:
            print(", ".join(str(path) for path in texts) + " up to date")
        return EXIT_GROWS if stale else EXIT_OK
    if args.curves:
        from leaklab_lab.cases import discover
        from leaklab_lab.catalog import load_all_results
        from leaklab_lab.plot import plot_results

        for _, document in load_all_results():
            drawn: list[Path] = []
            _write("curves", CURVES_DIR, lambda: drawn.extend(plot_results(discover(), document, CURVES_DIR)))  # noqa: B023
            for path in drawn:
                print(f"drew {path}")
        texts = render()  # the entries link the curves that now exist
    for path, text in texts.items():
        path.parent.mkdir(parents=True, exist_ok=True)  # docs/entries/ the first time
        _write("the catalog", path, lambda: atomic_write(path, text))  # noqa: B023
        print(f"wrote {path}")
    return EXIT_OK
