"""`leaklab check` on every rank, end to end: under torchrun and with --nproc, 2 gloo ranks on the
CPU, a few short steps each, every step an all_reduce (tests/data/rank_steps.py). One merged
answer from rank 0, the merged exit code, and a rank that raises, exits or hangs ends the check on
every rank with one line and no process left behind."""

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from xml.etree import ElementTree

import psutil
import pytest

from leaklab.report import EXIT_BAD_INPUT, EXIT_BOUNDED, EXIT_LEAK, EXIT_STEP_FAILED
from leaklab.verdict import format_bytes

pytestmark = [pytest.mark.distributed, pytest.mark.end_to_end]

ROOT = Path(__file__).resolve().parent.parent
STEPS = "tests/data/rank_steps.py"
FEW_STEPS = ["--steps", "6", "--warmup", "2", "--quiet"]
SHORT = [*FEW_STEPS, "--resource", "cpu_tensors,python_objects"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "leaklab", "check"]
LEAKLAB = [sys.executable, "-m", "leaklab", "check", "--nproc", "2"]


def _ours(process, token):
    try:
        return process.environ().get("LEAKLAB_TEST_TOKEN") == token
    except (psutil.Error, OSError):
        return False


def _left_in(scratch, command):
    """What ``command`` left in its temp directory: torch's per-user compile cache, which importing
    torch makes, is torch's; so is torchrun's own log directory when torchrun launched it."""
    theirs = ("torchinductor_", "torchelastic_") if command[:3] == TORCHRUN[:3] else ("torchinductor_",)
    return sorted(name for name in os.listdir(scratch) if not name.startswith(theirs))


def run(command, **env):
    """``command`` from the checkout's root, with a temp directory of its own; afterwards, no
    process it started may be running and nothing may be left in that directory."""
    token = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="leaklab-test-") as scratch:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240,
                              env={**os.environ, "LEAKLAB_TEST_TOKEN": token, "TMPDIR": scratch, **env})
        deadline = time.monotonic() + 2.0  # a rank the launcher just stopped may take a moment to be reaped
        while (left := [p for p in psutil.process_iter() if _ours(p, token)]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"left behind: {[' '.join(p.cmdline()) for p in left]}"
        left_files = _left_in(scratch, command)
        assert not left_files, f"left in the temp directory: {left_files}"
    return done


def answers(stderr):
    return [line for line in stderr.splitlines() if line.startswith("leaklab:")]


def _series(stdout, name):
    """Each rank's verdict, passes and readings of ``name``, for a failure's message."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return stdout[-1000:]
    return [(r.get("verdict"), r.get("long_pass_steps"), r.get("phase_seconds"),
             r.get("resources", {}).get(name, {}).get("samples")) for r in data.get("ranks", [])]


def test_torchrun_uses_the_scripts_group_and_says_rank_0s_level_is_a_skew():
    target = "tests/data/rank_own_group.py:level_on_rank0"
    done = run([*TORCHRUN, target, *SHORT])
    assert done.returncode == EXIT_BOUNDED, done.stderr[-3000:]
    line = done.stdout.splitlines()[0]
    assert line.startswith(f"{target}: bounded on every rank (2)")
    assert "level skew, not growth: rank 0 holds" in line and "of cpu_tensors" in line


def test_nproc_names_the_rank_that_grows_and_carries_every_ranks_report():
    target = f"{STEPS}:leak_on_rank1"
    done = run([*LEAKLAB, target, *SHORT, "--json"])
    assert done.returncode == EXIT_LEAK, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert data["exit_code"] == EXIT_LEAK and data["world_size"] == 2
    assert [r["rank"] for r in data["ranks"]] == [0, 1]
    zero, one = data["ranks"]
    assert zero["verdict"] == "bounded" and one["verdict"] == "grows" and one["resource"] == "cpu_tensors"
    # torch.zeros(6400), float32, kept per step. A rate, not a count: once in CI (not in 18 runs
    # since, idle or loaded) a reading moved it to 25583.4 B, so the samples ride on a failure.
    assert one["per_step_bytes"] == pytest.approx(6400 * 4, rel=0.01), one["resources"]["cpu_tensors"]
    assert data["summary"].startswith(f"{target}: grows on rank 1 of 2 (rank 0 bounded): cpu_tensors by "
                                      f"{format_bytes(6400 * 4)}/step")
    assert answers(done.stderr) == [f"leaklab: {data['summary']}"]


def test_a_long_pass_for_one_ranks_series_runs_on_every_rank():
    """Python objects growing alone on rank 1 go through a long pass; rank 0 reads nothing in it but
    runs its steps, and may end it early only where rank 1 may (the step's all_reduce waits else)."""
    target = f"{STEPS}:objects_on_rank1"
    # Python objects alone: the tensor counter, paused for a long pass, is not in play.
    done = run([*LEAKLAB, target, *FEW_STEPS, "--resource", "python_objects", "--json", "--timeout", "5"])
    assert done.returncode == EXIT_LEAK, (done.stderr[-2000:], _series(done.stdout, "python_objects"))
    data = json.loads(done.stdout)
    zero, one = data["ranks"]
    assert data["summary"].startswith(f"{target}: grows on rank 1 of 2 (rank 0 bounded): python_objects by ")
    assert one["crept"] == ["python_objects"] and "crept" not in zero
    assert zero["long_pass_steps"] == one["long_pass_steps"] > 0


def test_a_budget_one_rank_passes_stops_every_rank_at_that_step():
    done = run([*TORCHRUN[:-3], "tests/data/rank_budget_main.py"], PYTHONPATH=str(ROOT))  # this checkout's leaklab
    assert done.returncode == 0, done.stderr[-3000:]
    zero, one = json.loads(done.stdout)
    assert one["stopped_by_budget"] == "cpu_tensors" and one["verdict"] == "grows"
    assert zero["stopped_by_budget"] == "cpu_tensors@rank1" and zero["verdict"] == "bounded"
    assert zero["samples"] and len(zero["samples"]) == len(one["samples"])  # the same steps, on every rank
    assert len(one["samples"]) < 1 + 6  # stopped before the measured steps were done


def test_leak_check_under_torchrun_fails_on_every_rank_naming_the_one_that_grows(tmp_path):
    """The pytest plugin's fixture under ``torchrun ... -m pytest``: each rank's own pytest session
    writes its results (``$RANK`` in the file's name, through ``sh``)."""
    pytest_per_rank = (f"exec {sys.executable} -m pytest -q -p no:cacheprovider -o addopts= "
                       f"tests/data/rank_plugin_check.py --junitxml={tmp_path}/rank$RANK.xml")
    done = run([*TORCHRUN[:-3], "--no-python", "sh", "-c", pytest_per_rank])
    assert done.returncode != 0, done.stdout[-3000:]
    for rank in (0, 1):
        cases = {case.get("name"): case.find("failure") for case in ElementTree.parse(tmp_path / f"rank{rank}.xml").iter("testcase")}
        assert cases["test_no_leak"] is None
        for test in ("test_a_leak_on_rank_1", "test_a_marked_test_leaking_on_rank_1"):  # the fixture, the marker
            failure = cases[test]
            assert failure is not None, f"{test} did not fail on rank {rank}"
            assert failure.get("message").startswith(
                f"Failed: grows, expected bounded: {test}: grows on rank 1 of 2 (rank 0 bounded): "
                f"cpu_tensors by {format_bytes(6400 * 4)}/step")


def test_watch_under_torchrun_gives_every_rank_the_one_answer():
    done = run([*TORCHRUN[:-3], "tests/data/rank_watch_main.py"], PYTHONPATH=str(ROOT))  # this checkout's leaklab
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert seen["verdicts"] == ["bounded", "grows"] and seen["own"] == "bounded"  # rank 0's own, and every rank's
    assert seen["answer"].startswith(f"loop: grows on rank 1 of 2 (rank 0 bounded): cpu_tensors by "
                                     f"{format_bytes(6400 * 4)}/step")


@pytest.mark.parametrize(("how", "said"), [
    ("raise", "RuntimeError: bad batch on rank 1"),
    ("exit", "exited: the step called sys.exit(5)"),
    ("hang", "timed out: the step ran past its time limit of 2 s"),
])
def test_a_rank_whose_step_fails_ends_the_check_on_every_rank(how, said):
    done = run([*LEAKLAB, f"{STEPS}:fails_on_rank1", *SHORT, "--timeout", "2"], LEAKLAB_TEST_FAIL=how)
    assert done.returncode == EXIT_STEP_FAILED, done.stderr[-3000:]
    assert answers(done.stderr) == [f"leaklab: {STEPS}:fails_on_rank1: the step failed on rank 1 of 2 at measured "
                                    f"step 2: {said}; the check ended on every rank"]
    assert done.stdout == ""


def test_a_factory_that_fails_on_one_rank_is_bad_input_on_every_rank():
    done = run([*LEAKLAB, f"{STEPS}:factory_fails_on_rank1", *SHORT])
    assert done.returncode == EXIT_BAD_INPUT, done.stderr[-3000:]
    assert answers(done.stderr) == ["leaklab: rank 1 of 2: factory_fails_on_rank1('cpu') failed: RuntimeError: "
                                    "no data shard for rank 1"]
