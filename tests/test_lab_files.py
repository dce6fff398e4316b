"""The lab loses nothing: output paths checked before a run, files replaced atomically (a write
that fails half-way leaves the previous file byte for byte), skipped runs recorded with why."""

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from leaklab.cli import main
from leaklab_lab.cases import ROOT

COMMITTED = ROOT / "results" / "cpu-torch2.14.1.json"


def _main(capsys, *args):
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _bad_paths(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    # /proc: os.access says yes to root there, but nothing can be created in it.
    return {"under a file": blocker / "out.json", "a folder": folder, "in /proc": Path("/proc") / "leaklab-out.json"}


@pytest.mark.parametrize("which", ["under a file", "a folder", "in /proc"])
@pytest.mark.parametrize("option", ["--results", "--plot", "--plot-dir"])
def test_run_checks_its_output_paths_before_running_anything(tmp_path, capsys, option, which):
    path = _bad_paths(tmp_path)[which]
    if option == "--plot-dir" and which == "a folder":
        path = tmp_path / "a-file"  # a folder is what --plot-dir wants; a file is not
    code, out, err = _main(capsys, "run", "loss_accumulation", "--device", "cpu", option, str(path))
    assert code == 2, (out, err)
    assert "running" not in err and out == ""  # refused at once, nothing ran
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"leaklab: {option}: ") and any(name in err for name in ("a-file", "a-folder", "/proc")), err


def test_bench_and_catalog_check_their_output_paths_first(tmp_path, capsys):
    paths = _bad_paths(tmp_path)
    code, out, err = _main(capsys, "bench", "--device", "cpu", "--results", str(paths["under a file"]))
    assert code == 2 and "measuring" not in err and len(err.strip().splitlines()) == 1
    code, out, err = _main(capsys, "catalog", "--output", str(paths["a folder"]))
    assert code == 2 and "is a folder" in err and len(err.strip().splitlines()) == 1


def test_catalog_output_is_written_whole(tmp_path, capsys):
    out_path = tmp_path / "deep" / "CATALOG.md"
    code, out, err = _main(capsys, "catalog", "--output", str(out_path))
    assert code == 0, err
    assert out_path.read_text() == (ROOT / "CATALOG.md").read_text()
    assert [p.name for p in out_path.parent.iterdir()] == ["CATALOG.md"]  # no temporary file left


def _limited(limit_bytes):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return set_limit


@pytest.mark.end_to_end  # fresh interpreters: run by .ci/run with -m end_to_end
def test_a_results_write_cut_by_a_file_size_limit_leaves_the_previous_file_whole(tmp_path):
    previous = tmp_path / "prev.json"
    shutil.copy(COMMITTED, previous)
    before = previous.read_bytes()
    assert len(before) > 100_000  # last week's whole baseline
    done = subprocess.run(
        [sys.executable, "-m", "leaklab", "run", "loss_accumulation", "--device", "cpu", "--results", str(previous)],
        cwd=ROOT, capture_output=True, text=True, preexec_fn=_limited(4000), timeout=300,
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"leaklab: could not write results to {previous}: File too large"), done.stderr
    assert "unchanged" in last and "Traceback" not in done.stderr
    assert "loss_accumulation" in done.stdout  # the run itself happened; only its file could not be written
    assert previous.read_bytes() == before  # byte for byte
    assert os.listdir(tmp_path) == ["prev.json"]  # no temporary file left


def test_run_records_skipped_cases_with_their_reason(tmp_path, capsys):
    path = tmp_path / "r.json"
    code, out, err = _main(capsys, "run", "fragmentation", "--device", "cpu", "--results", str(path))
    assert code == 0, err
    document = json.loads(path.read_text())
    assert document["runs"] == {}
    why = "no cpu form (devices = ['cuda'])"
    assert document["skipped"] == {"cpu/fragmentation:leak": why, "cpu/fragmentation:fix": why,
                                   "cpu/fragmentation:fix:fragmentation_expandable_segments": why}


def test_run_leaves_slow_cases_out_unless_asked_and_says_why(tmp_path, capsys, monkeypatch):
    import leaklab_lab.cases as cases

    slow = [case for case in cases.discover() if case.slug == "spawn_without_main_guard"]
    assert "slow" in slow[0].markers("cpu")
    monkeypatch.setattr(cases, "discover", lambda root=cases.ROOT: slow)
    path = tmp_path / "r.json"
    code, out, err = _main(capsys, "run", "--device", "cpu", "--results", str(path))
    assert code == 0, err
    document = json.loads(path.read_text())
    assert document["runs"] == {}
    assert document["skipped"]["cpu/spawn_without_main_guard:leak"] == "slow: run with --slow, or name the case"


def test_a_fix_that_fails_bounded_says_why_first():
    """Every fix passes ``leak_check.bounded`` with default settings (its committed run neither
    grows nor plateaus), or its entry says first why it cannot (``fix_not_bounded``); an entry
    that says so has such a run (the text is not left behind once the fix is bounded)."""
    from leaklab_lab.cases import discover
    from leaklab_lab.catalog import load_all_results
    from leaklab_lab.figures import FIGURE_SOURCES
    from leaklab_lab.results import case_runs, role_of

    documents = dict(load_all_results())
    for case in discover():
        not_bounded = [run.name for name in FIGURE_SOURCES.values() if name in documents
                       for run in case_runs(documents[name], case.slug)
                       if role_of(run) == "fix" and run.error is None and run.verdict in ("grows", "plateau")]
        assert bool(not_bounded) == bool(case.meta.get("fix_not_bounded")), (case.slug, not_bounded)


def test_importing_the_held_out_steps_leaves_nothing_on_disk(tmp_path):
    """A process that imports tests/data/fresh_steps.py and ends without Python's exit (a spawned
    child that imported it to unpickle a function, a killed check) must leave no directory behind:
    every step's scratch directory is made when the step first asks for it, not at import. (Made at
    import, hundreds of them were left in /tmp by the suite's own child processes.)"""
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); from leaklab.scripts import load_script; "
            "[load_script(os.path.join(sys.argv[1], 'tests', 'data', name)) for name in ('fresh_steps.py', 'edge_steps.py')]; "
            "os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(ROOT)], check=True, timeout=120,
                   env={**os.environ, "TMPDIR": str(tmp_path)})
    # torch's own compile cache (one per user, reused by every process) is made by torch's import
    assert [path.name for path in tmp_path.iterdir() if not path.name.startswith("torchinductor_")] == []
