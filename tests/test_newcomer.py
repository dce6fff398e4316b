"""Issue 31, a newcomer's first ten minutes: what `leaklab run` and `leaklab check` print."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from leaklab import resources as known
from leaklab.cli import _progress, main, shadowing_note
from leaklab_lab.cases import amount, format_table, get_case, legend, table_columns

ROOT = Path(__file__).parent.parent
STEPS = str(Path(__file__).parent / "data" / "user_steps.py")


def test_counts_are_whole_and_singular_where_one():
    assert amount(known.get("threads"), 1.0) == "1 thread"
    assert amount(known.get("python_objects"), 192.0) == "192 blocks"
    assert amount(known.get("children"), 1) == "1 process"
    assert amount(known.get("python_objects"), 7.14) == "7.1 blocks"


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
        show(done, 5, {"threads": 1})
    err = capsys.readouterr().err
    assert "\r" not in err and err.count("\n") == 1 and err.startswith("[5/5]")


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
