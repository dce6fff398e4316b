"""Issue 31, a newcomer's first ten minutes: what `leaklab run` and `leaklab check` print."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leaklab import resources as known
from leaklab.cli import _progress, main, reading, shadowing_note
from leaklab.report import Report, ResourceResult
from leaklab.verdict import CREEP_WINDOW, Trend
from leaklab_lab.cases import format_table, get_case, legend, table_columns

ROOT = Path(__file__).parent.parent
STEPS = str(Path(__file__).parent / "data" / "user_steps.py")
EDGES = str(Path(__file__).parent / "data" / "edge_steps.py")


def test_counts_are_whole_and_singular_where_one_in_every_output():
    threads, blocks = known.get("threads"), known.get("python_objects")
    assert threads.format(1.0) == "1 thread" and threads.format(-1) == "-1 thread"
    assert known.get("children").format(1) == "1 process" and known.get("open_fds").format(1.02) == "1 fd"
    assert blocks.format(192.3) == "192 blocks" and blocks.format(1_234.0) == "1,234 blocks"
    assert threads.format(0.5) == "0.5 threads" and blocks.format(7.14) == "7.1 blocks"  # a rate below 10: a tenth tells
    assert known.get("cpu_tensors").format(2 * 2**20) == "2.0 MiB"
    # The same words in the summary's rate, the table's level, and progress (which names a resource
    # once where its name is its unit).
    result = ResourceResult("threads", [10, 11, 11, 11], Trend("grows", 1.0, 1.0, 1.0, 0.0), before=10)
    assert result.rate() == "1 thread/step"
    assert reading("threads", 4) == "4 threads" and reading("children", 1) == "children 1 process"


def test_an_empty_column_goes_and_the_legend_explains_every_shown_column():
    rows = [{"case": "a", "leak": "grows", "line": "-", "as catalogued": "yes"}]
    assert table_columns(rows) == ["case", "leak", "as catalogued"]
    assert "line" not in format_table(rows).splitlines()[0]
    text = legend(["case", "leak", "fix", "popular claim", "as catalogued"])
    assert all(word in text for word in ("case ", "leak, fix", "popular claim", "as catalogued"))
    assert "\nline" not in text


def test_progress_off_a_terminal_is_one_line_per_series_without_carriage_returns(capsys):
    show = _progress(False, terminal=False)
    for done in range(1, 6):
        show(done, 5, {"threads": 1}, done == 5)
    err = capsys.readouterr().err
    assert "\r" not in err and err.count("\n") == 1 and err.startswith("[5/5]")


def test_a_long_pass_is_one_progress_line_counted_over_the_whole_pass(capsys):
    """The long pass runs in windows of CREEP_WINDOW steps; progress counts the pass, not each
    window (it once printed `[10/10]` twenty times for one 200-step pass)."""
    assert main(["check", f"{EDGES}:closure_per_step", "--resource", "python_objects"]) == 1
    lines = capsys.readouterr().err.splitlines()
    passes = [line.split("]")[0] + "]" for line in lines if line.startswith("[")]
    assert len(passes) == len(set(passes)) == 3, lines  # measured, confirmation, long pass
    done, planned = map(int, passes[-1].strip("[]").split("/"))
    assert done == planned > CREEP_WINDOW, passes
    # A long pass that stops early (the series stalled) still ends with its line, counted so far.
    assert main(["check", f"{EDGES}:closures_until_step_50", "--resource", "python_objects"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    done, planned = map(int, lines[-1].split("]")[0].strip("[").split("/"))
    assert len(lines) == 3 and CREEP_WINDOW < done < planned, lines


def test_check_prints_the_answer_and_the_table_only_when_asked(capsys):
    assert main(["check", f"{STEPS}:grows", "--steps", "6", "--warmup", "1", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{STEPS}:grows: grows in cpu_tensors")
    assert not any(line.startswith("step ") for line in out.splitlines()) and "  resembles feature_list" in out
    assert main(["check", f"{STEPS}:grows", "--steps", "6", "--warmup", "1", "--quiet", "--table"]) == 1
    assert capsys.readouterr().out.startswith("step ")


def test_a_misspelled_factory_gets_did_you_mean(capsys):
    assert main(["check", f"{STEPS}:bounde", "--quiet"]) == 2
    assert "did you mean 'bounded'?" in capsys.readouterr().err


def test_a_clone_folder_shadowing_the_package_is_named(tmp_path):
    (tmp_path / "leaklab" / "leaklab").mkdir(parents=True)
    note = shadowing_note([tmp_path])
    assert note and str(tmp_path / "leaklab") in note and "namespace package" in note
    assert shadowing_note([ROOT]) is None  # the package itself is no shadow


def test_a_growing_fix_is_never_a_plain_yes():
    from leaklab_lab.cases import catalogued

    case = get_case("retain_graph")  # its fix expects python_objects to grow

    class Result:
        verdict, kind = "grows", known.get("python_objects")

    class Fix:
        error, resources = None, {"python_objects": Result()}

    class Leak:
        error = None

    assert catalogued(case, "cpu", Leak(), [Fix()], []) == "yes (expected, see entry)"
    assert catalogued(get_case("feature_list"), "cpu", Leak(), [Fix()], []) == (
        "yes, but the fix also grows in python_objects (not asserted by its entry)")
    assert catalogued(get_case("feature_list"), "cpu", Leak(), [Fix()], ["cpu_tensors grows"]).startswith("NO")


@pytest.mark.end_to_end
def test_json_stdout_holds_only_the_json_however_the_step_prints(tmp_path):
    script = tmp_path / "noisy.py"
    script.write_text("import os, subprocess\n\ndef make_step(device):\n    def step():\n"
                      "        for i in range(50):\n            print('noise', i)\n"
                      "        os.write(1, b'from fd 1\\n')\n"
                      "        subprocess.run(['echo', 'from a child'], check=True)\n    return step\n")
    done = subprocess.run([sys.executable, "-m", "leaklab", "check", f"{script}:make_step", "--steps", "5",
                           "--warmup", "1", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert json.loads(done.stdout)["verdict"] in ("bounded", "grows", "plateau"), done.stderr[-2000:]
    assert "noise 49" in done.stderr and "from a child" in done.stderr


_SERVERS = """import multiprocessing, weakref

def _serve(conn):
    while conn.recv() is not None:
        pass

class Server:  # as retrochimera's: a finalizer that is a bound method keeps each server, and its worker
    def __init__(self):
        self.conn, theirs = multiprocessing.get_context("fork").Pipe()
        self.worker = multiprocessing.get_context("fork").Process(target=_serve, args=(theirs,))
        self.worker.start()
        weakref.finalize(self, self.close)

    def close(self):
        self.conn.send(None)
        self.worker.join()

def make_step(device):
    servers = []
    def step():
        servers.append(Server())
    return step
"""


@pytest.mark.end_to_end
def test_callbacks_left_for_exit_that_raise_once_the_children_are_stopped_are_one_line(tmp_path):
    """Each server's finalizer writes to its worker at exit; the check stopped the workers, so each
    raised BrokenPipeError there, a traceback apiece under the answer: now one line says it."""
    script = tmp_path / "servers.py"
    script.write_text(_SERVERS)
    done = subprocess.run([sys.executable, "-m", "leaklab", "check", f"{script}:make_step", "--steps", "6",
                           "--warmup", "1", "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.count("at exit, a callback the step left raised BrokenPipeError") == 1, done.stderr[-3000:]


@pytest.mark.end_to_end
def test_run_shows_progress_rows_a_summary_and_hides_an_expected_traceback():
    done = subprocess.run([sys.executable, "-m", "leaklab", "run", "collate_fn_graph", "--jobs", "1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[1/1] collate_fn_graph on cpu (" in done.stderr and "Traceback" not in done.stderr
    assert "raises RuntimeError, as catalogued" in done.stdout and "popular claim" in done.stdout
    assert "\nline" not in done.stdout and "000 §" not in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("1 case: 1 as catalogued, 0 not, 0 skipped;")
    verbose = subprocess.run([sys.executable, "-m", "leaklab", "run", "collate_fn_graph", "--jobs", "1", "-v"],
                             capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert "Traceback" in verbose.stderr


# --------------------------------------------------------------------------- the README's promises
@pytest.mark.parametrize(("raised", "says"), [
    ("KeyboardInterrupt", "interrupted: KeyboardInterrupt (Ctrl-C or SIGINT) while building the step"),
    ("KeyboardInterrupt('signal 15')", "interrupted: SIGTERM while building the step"),  # the CLI's SIGTERM handler
])
def test_ctrl_c_while_the_factory_runs_exits_3_and_says_where(capsys, tmp_path, raised, says):
    script = tmp_path / "slow_build.py"
    script.write_text(f"def make_step(device):\n    raise {raised}\n")
    assert main(["check", str(script), "--quiet"]) == 3
    assert capsys.readouterr().err.strip().splitlines() == [f"leaklab: {says}"]


def test_ctrl_c_while_the_script_is_imported_exits_3_and_says_where(capsys, tmp_path):
    script = tmp_path / "slow_import.py"
    script.write_text("raise KeyboardInterrupt\n")
    assert main(["check", str(script), "--quiet"]) == 3
    assert capsys.readouterr().err.strip().splitlines() == [
        "leaklab: interrupted: KeyboardInterrupt (Ctrl-C or SIGINT) while importing the script"]


def _as_from_a_shell() -> None:
    """The child starts with SIGINT as a shell's command does: handled by default, not blocked. In
    full-suite runs (every case, slow and distributed, -n 2) the child ignored SIGINT with no
    output at all in 4 of 4 runs, never alone, in CI's step or under load; the workers' own SIGINT
    handler and signal mask never changed in such a run (logged after every test). Left to find."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.end_to_end
def test_a_real_ctrl_c_while_the_factory_runs_exits_3(tmp_path):
    script, started = tmp_path / "slow_build.py", tmp_path / "building"
    script.write_text(f"import pathlib, time\n\ndef make_step(device):\n    pathlib.Path({str(started)!r}).touch()\n"
                      "    time.sleep(120)\n    return lambda: None\n")
    process = subprocess.Popen([sys.executable, "-m", "leaklab", "check", str(script), "--quiet"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_shell)
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # say what it was doing, and leave nothing behind
        status = Path(f"/proc/{process.pid}/status")
        signals = [line for line in status.read_text().splitlines() if line.startswith("Sig")] if status.exists() else []
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"no exit 60 s after SIGINT; its signals: {signals}; started: {started.exists()}; stdout: {out[-2000:]!r}; "
                             f"stderr: {err[-3000:]!r}") from None
    assert process.returncode == 3, err
    assert err.strip().splitlines()[-1] == "leaklab: interrupted: KeyboardInterrupt (Ctrl-C or SIGINT) while building the step"


def test_a_factory_that_raises_shows_its_traceback_above_the_line(capsys):
    assert main(["check", f"{EDGES}:factory_fails", "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):" and '    raise RuntimeError("no data here")' in lines
    assert lines[-1] == "leaklab: factory_fails('cpu') failed: RuntimeError: no data here"


def test_a_factory_that_exits_says_so_in_one_line(capsys, tmp_path):
    script = tmp_path / "exits.py"
    script.write_text("import sys\n\ndef make_step(device):\n    sys.exit(4)\n")
    assert main(["check", str(script), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "leaklab: make_step('cpu') failed: exited: the factory called sys.exit(4)"]


@pytest.mark.parametrize(("failed_step", "stage", "says"), [
    (2, "warm-up", "the step failed at warm-up step 3 of 5: ValueError: bad"),
    (5, "measured", "the step failed at measured step 1: ValueError: bad"),
    (6, None, "the step failed at measured step 2: ValueError: bad"),  # leaklab.watch keeps no stage
    (26, "confirmation", "the step failed at step 22 after warm-up (the confirmation): ValueError: bad"),
])
def test_a_failed_step_is_counted_as_the_table_counts_and_says_how(failed_step, stage, says):
    report = Report(device="cpu", steps=20, warmup=5, error="ValueError: bad", failed_step=failed_step, stage=stage)
    assert report.summary() == says


def test_the_time_to_run_out_reads_as_a_sentence():
    result = ResourceResult("cpu_tensors", [0, 1, 2], Trend("grows", 1.0, 1.0, 1.0, 0.0), before=0,
                            steps_to_exhaust=10**9, hours_to_exhaust=10**6)
    assert result.severity() == "runs out in ~1,000,000,000 steps, over ten years at the measured step time"
    result.hours_to_exhaust = 3.54
    assert result.severity().endswith(", ~3.5 h at the measured step time")
    result.hours_to_exhaust = 0.001
    assert result.severity().endswith(", under a minute at the measured step time")


def _timed_clone(idle: bool, first_seconds: float, load: float) -> dict:
    return {"commit": "abc1234", "branch": "main", "date": "2026-12-03T07:35Z",
            "machine": {"cpu": "Some CPU", "cores": 2, "python": "3.11.7"}, "torch": "2.14.1",
            "torch_from": "the CPU index could not be reached", "load_before": [load, 1.0, 1.0],
            "load_after": [load + 1, 1.0, 1.0], "idle": idle,
            "commands": [{"command": "pip install -e . && leaklab run", "seconds": first_seconds,
                          "parts": {"pip install -e .": 41.4, "leaklab run": first_seconds - 41.4}, "exit": 0,
                          "last_line": "48 cases: 48 as catalogued"},
                         {"command": "pip install -e '.[test]' && python3 -m pytest -n 2", "seconds": 733.2,
                          "parts": {"python3 -m pytest -n 2": 700.0}, "exit": None, "last_line": ""}]}


def test_the_fresh_clone_timing_is_rendered_from_its_file_saying_whether_the_machine_was_busy(tmp_path):
    from leaklab_lab import fresh_clone

    assert fresh_clone.render(tmp_path) == []
    folder = tmp_path / fresh_clone.FOLDER
    folder.mkdir(parents=True)
    (folder / "cpu-torch2.14.1.json").write_text(json.dumps(_timed_clone(idle=False, first_seconds=612.6, load=6.86)))
    head, line = fresh_clone.render(tmp_path)
    assert head.startswith("- **The README's two commands from a fresh clone**")
    assert "[cpu-torch2.14.1.json](results/fresh-clone/cpu-torch2.14.1.json): commit abc1234 (main)" in line
    assert "busy: load 6.86 at the start and 7.86 at the end on 2 cores" in line and "target" not in line
    assert ("`pip install -e . && leaklab run` 613 s (pip install -e . 41 s, leaklab run 571 s; exit 0, "
            "'48 cases: 48 as catalogued')") in line
    assert "`pip install -e '.[test]' && python3 -m pytest -n 2` 733 s (python3 -m pytest -n 2 700 s; not run" in line
    (folder / "cpu-torch2.14.1.json").write_text(json.dumps(_timed_clone(idle=True, first_seconds=250.0, load=0.1)))
    assert fresh_clone.render(tmp_path)[1].endswith("; the first command within its 300 s target")
    (folder / "cpu-torch2.14.1.json").write_text(json.dumps(_timed_clone(idle=True, first_seconds=301.0, load=0.1)))
    assert fresh_clone.render(tmp_path)[1].endswith("; the first command past its 300 s target")


def test_the_fresh_clone_says_whether_the_test_command_met_its_target_and_carries_a_note(tmp_path):
    from leaklab_lab import fresh_clone

    folder = tmp_path / fresh_clone.FOLDER
    folder.mkdir(parents=True)
    run = _timed_clone(idle=True, first_seconds=250.0, load=0.1)
    run["commands"][1].update(exit=0, parts={"pip install -e '.[test]'": 12.0, "python3 -m pytest -n 2": 44.0})
    (folder / "cpu-torch2.14.1.json").write_text(json.dumps(run))
    assert fresh_clone.render(tmp_path)[1].endswith("; the test command within its 45 s target")
    run["commands"][1]["parts"]["python3 -m pytest -n 2"] = 46.0
    run["note"] = "a slower machine than usual"
    (folder / "cpu-torch2.14.1.json").write_text(json.dumps(run))
    assert fresh_clone.render(tmp_path)[1].endswith("; the test command past its 45 s target (a slower machine than usual)")


def _floor_run(idle: bool, case_seconds: float) -> dict:
    script = {"case": "feature_list", "script": "leak/feature_list", "seconds": 2.0, "cpu_seconds": 2.5,
              "step_seconds": 0.5, "isolated": False}
    return {"commit": "abc1234", "date": "2026-12-06T20:28Z", "machine": {"cpu": "AMD EPYC", "cores": 2, "python": "3.11.7"},
            "torch": "2.14.1+cu130", "load_before": [0.1 if idle else 3.2, 0.1, 0.1], "load_after": [1.0, 1.0, 1.0],
            "idle": idle, "import_seconds": {"torch": 2.1, "torch and torch._dynamo": 3.7},
            "case_scripts": [script, {**script, "script": "fix/feature_list", "seconds": 1.0, "isolated": True}],
            "suite_runs": [_suite_run(0, case_seconds), _suite_run(0, case_seconds + 3.0), _suite_run(1, 10.0)]}


def _suite_run(exit_code: int, case_seconds: float) -> dict:
    return {"command": "python3 -m pytest -n 2", "exit": exit_code, "seconds": 90.0, "last_line": "9 passed in 88s",
            "workers": {"gw0": {"tests": 5, "first_test_at": 6.0, "busy": 80.0, "busy_running_cases": case_seconds},
                        "gw1": {"tests": 4, "first_test_at": 5.0, "busy": 79.0, "busy_running_cases": 30.0}}}


def test_what_sets_the_suites_pace_is_rendered_from_its_file_with_the_least_the_test_command_can_take(tmp_path):
    from leaklab_lab import suite_floor

    assert suite_floor.render(tmp_path) == []
    folder = tmp_path / suite_floor.FOLDER
    folder.mkdir(parents=True)
    (folder / "cpu-torch2.14.1.json").write_text(json.dumps(_floor_run(idle=False, case_seconds=43.6)))
    head, where, imports, scripts, suite, second, failed, least = suite_floor.render(tmp_path)
    assert "busy (load 3.20 at the start on 2 cores)" in where and "commit abc1234" in where
    assert "(2.1 s, the median of three fresh interpreters)" in imports and "(3.7 s for both)" in imports
    assert ("The 2 case scripts `leaklab run` runs by default, one after another in one process with one torch thread: "
            "3.0 s wall, 5.0 s of CPU") in scripts and "took 1.0 s; the rest is the check" in scripts
    assert "`feature_list` leak 2.0 s (steps 0.5 s), `feature_list` fix 1.0 s (steps 0.5 s, a fresh interpreter)" in scripts
    assert suite.startswith("    - `python3 -m pytest -n 2`, run 1: 90.0 s wall (exit 0, '9 passed in 88s')")
    assert "the first test started at 6.0 s; gw0 busy 80.0 s, 43.6 s of it in tests that run case scripts" in suite
    assert "run 2:" in second and "46.6 s of it" in second and "run 3:" in failed and "(exit 1," in failed
    # The least of the runs that passed: a failed run, however short its case tests, sets no floor.
    assert least.endswith("(run 1, the least of 2 that passed): the workers' start-up 6.0 s + the busier worker's tests "
                          "that run case scripts 43.6 s = 49.6 s, over the suite's 45 s target; the other tests took up to 49.0 s more of "
                          "one worker's time in that run.")
    (folder / "cpu-torch2.14.1.json").write_text(json.dumps(_floor_run(idle=True, case_seconds=38.0)))
    assert "= 44.0 s, within the suite's 45 s target; the other tests took up to 49.0 s more" in suite_floor.render(tmp_path)[-1]
    assert "idle (load 0.10 on 2 cores at the start)" in suite_floor.render(tmp_path)[1]
