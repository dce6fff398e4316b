"""tools/flake_gate.py: flips and failures are found, the load it starts is stopped."""

import importlib.util
import os
import time

import pytest

from leaklab_lab.cases import ROOT

spec = importlib.util.spec_from_file_location("flake_gate", ROOT / "tools" / "flake_gate.py")
gate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gate)


def _doc(**runs):
    return {"runs": {key.replace("__", "/"): {"verdict": verdict, "resources": {
        "cpu_tensors": {"verdict": verdict}, "host_heap": {"verdict": heap}}}
        for key, (verdict, heap) in runs.items()}}


def test_stable_verdicts_are_no_flip():
    samples = [("suite #1", "suite", _doc(cpu__a=("grows", "bounded"))),
               ("run #1", "run", _doc(cpu__a=("grows", "bounded"))),
               ("suite #2", "suite", _doc(cpu__a=("grows", "bounded")))]
    assert gate.find_flips(samples) == []


def test_a_verdict_flip_and_a_resource_flip_are_each_reported():
    samples = [("suite #1", "suite", _doc(cpu__a=("grows", "bounded"), cpu__b=("bounded", "bounded"))),
               ("run #1", "run", _doc(cpu__a=("bounded", "bounded"), cpu__b=("bounded", "grows")))]
    flips = {flip["what"]: flip["verdicts"] for flip in gate.find_flips(samples)}
    assert flips["cpu/a"] == {"grows": ["suite #1"], "bounded": ["run #1"]}
    assert flips["cpu/a cpu_tensors"] == {"grows": ["suite #1"], "bounded": ["run #1"]}
    assert flips["cpu/b host_heap"] == {"bounded": ["suite #1"], "grows": ["run #1"]}
    assert "cpu/b" not in flips  # its headline verdict stayed bounded


def test_a_run_missing_from_one_run_of_its_source_is_a_flip_but_not_across_sources():
    samples = [("suite #1", "suite", _doc(cpu__a=("grows", "bounded"), cpu__only_in_suite=("bounded", "bounded"))),
               ("suite #2", "suite", _doc(cpu__only_in_suite=("bounded", "bounded"))),
               ("run #1", "run", _doc(cpu__a=("grows", "bounded")))]
    flips = {flip["what"]: flip["verdicts"] for flip in gate.find_flips(samples)}
    assert flips["cpu/a"] == {"grows": ["suite #1", "run #1"], "missing": ["suite #2"]}
    assert not any(key.startswith("cpu/only_in_suite") for key in flips)


def test_failures_are_read_from_junit_and_the_run_table(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite><testcase classname="tests.test_x" name="test_ok"/>'
                     '<testcase classname="tests.test_x" name="test_bad"><failure message="assert 1 == 2">tb'
                     '</failure></testcase><testcase classname="tests.test_y" name="test_err"><error message="boom"/>'
                     '</testcase></testsuite></testsuites>')
    assert gate.failures_from_junit(junit) == ["tests.test_x::test_bad (failure): assert 1 == 2",
                                               "tests.test_y::test_err (error): boom"]
    table = ("case  device  leak   fix      as catalogued\n"
             "a     cpu     grows  bounded  yes\n"
             "b     cpu     bounded  bounded  NO: cpu_tensors: expected grows, got bounded\n")
    assert gate.failures_from_run_table(table) == ["b cpu bounded bounded NO: cpu_tensors: expected grows, got bounded"]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:  # a zombie is not running either
        return handle.read().split(") ")[-1][0] != "Z"


def test_the_load_is_stopped_however_the_gate_ends():
    with pytest.raises(KeyboardInterrupt):
        with gate.cpu_load(2) as processes:
            pids = [process.pid for process in processes]
            time.sleep(0.2)
            assert all(_alive(pid) for pid in pids) and len(pids) == 2
            raise KeyboardInterrupt
    assert not any(_alive(pid) for pid in pids)
