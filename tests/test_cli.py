"""The CLI's contract: exit 0 bounded, 1 grows, 2 bad input with one clear line."""

import json
from pathlib import Path

import pytest

from leaklab.cli import main

STEPS = str(Path(__file__).parent / "data" / "user_steps.py")


def run(capsys, *args):
    try:
        code = main(["check", *args, "--quiet"])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_bounded_step_exits_0(capsys):
    code, out, _ = run(capsys, f"{STEPS}:bounded", "--steps", "10", "--warmup", "2")
    assert code == 0
    assert "bounded" in out.splitlines()[-1]


def test_growing_step_exits_1_and_names_the_resource(capsys):
    code, out, _ = run(capsys, f"{STEPS}:grows", "--steps", "10", "--warmup", "2")
    assert code == 1
    assert out.splitlines()[0].startswith(f"{STEPS}:grows: grows in cpu_tensors by 8.0 KiB/step")  # the answer comes first


def test_json_has_the_documented_fields(capsys):
    code, out, _ = run(capsys, f"{STEPS}:grows", "--steps", "6", "--warmup", "1", "--json")
    data = json.loads(out)
    assert code == 1
    assert {"verdict", "resource", "per_step_bytes", "samples", "device", "torch"} <= set(data)
    assert data["verdict"] == "grows" and data["resource"] == "cpu_tensors" and data["device"] == "cpu"
    assert data["per_step_bytes"] == 8192 and len(data["samples"]) == 7 + data["confirmed_steps"]


def test_attribute_names_the_line(capsys):
    code, out, _ = run(capsys, f"{STEPS}:grows", "--steps", "6", "--warmup", "1", "--attribute")
    assert code == 1
    line = next(i for i, text in enumerate(Path(STEPS).read_text().splitlines(), 1) if "outputs.append" in text)
    assert f"allocated at user_steps.py:{line}" in out.splitlines()[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py:make_step"], "no such file: missing.py"),
        ([f"{STEPS}:nope"], "has no 'nope'"),
        ([f"{STEPS}:NOT_CALLABLE"], "is a int, not a callable"),
        ([f"{STEPS}:not_a_step"], "returned int, not a callable"),
        ([f"{STEPS}:bounded", "--steps", "1"], "steps must be from 2 to 100,000, got 1"),
        ([f"{STEPS}:bounded", "--steps", "1000000"], "steps must be from 2 to 100,000"),
        ([f"{STEPS}:bounded", "--warmup", "-1"], "warmup must be from 0 to 100,000"),
        ([f"{STEPS}:bounded", "--device", "tpu"], "device must be 'cpu', 'cuda' or 'cuda:N'"),
        ([f"{STEPS}:bounded", "--device", "cuda:x"], "device must be 'cpu', 'cuda' or 'cuda:N'"),
        ([f"{STEPS}:bounded", "--resource", "device_allocated"], "device_allocated is a CUDA counter"),
        ([f"{STEPS}:bounded", "--resource", "pinned_host"], "pinned_host is a CUDA counter"),
        ([f"{STEPS}:bounded", "--timeout", "0"], "must be above 0"),
        ([f"{STEPS}:bounded", "--resource", "vram"], "unknown resource vram"),
        ([f"{STEPS}:bad name"], "is not a Python name"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2, (out, err)
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_cuda_without_gpu_exits_2(capsys, monkeypatch):
    monkeypatch.setattr("leaklab.runner.cuda_usable", lambda: False)
    code, _, err = run(capsys, f"{STEPS}:bounded", "--device", "cuda")
    assert code == 2
    assert "no CUDA device" in err


def test_a_step_that_raises_exits_3_with_its_traceback(capsys):
    code, _, err = run(capsys, f"{STEPS}:raises", "--steps", "5", "--warmup", "1")
    assert code == 3
    assert "Traceback" in err and 'raise ValueError("bad batch")' in err
    assert err.strip().splitlines()[-1] == (f"leaklab: {STEPS}:raises: the step failed at measured step 2: "
                                            "ValueError: bad batch")


def test_run_rejects_an_unknown_case(capsys):
    assert main(["run", "no_such_case"]) == 2
    assert "no case 'no_such_case'" in capsys.readouterr().err


@pytest.mark.cuda
def test_cuda_attribution_and_snapshot(capsys, tmp_path):
    import pickle

    snapshot = tmp_path / "snap.pickle"
    code, out, _ = run(capsys, f"{STEPS}:grows", "--device", "cuda", "--steps", "6", "--warmup", "2",
                       "--snapshot", str(snapshot))
    assert code == 1
    line = next(i for i, text in enumerate(Path(STEPS).read_text().splitlines(), 1) if "outputs.append" in text)
    assert "grows in device_allocated by 8.0 KiB/step" in out and f"allocated at user_steps.py:{line}" in out
    data = pickle.loads(snapshot.read_bytes())
    assert "segments" in data and "device_traces" in data  # what pytorch.org/memory_viz reads


def test_cuda_n_without_that_gpu_exits_2(capsys, monkeypatch):
    monkeypatch.setattr("leaklab.runner.cuda_usable", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    code, _, err = run(capsys, f"{STEPS}:bounded", "--device", "cuda:3")
    assert code == 2
    assert "'cuda:3' was asked for, but torch sees 1 CUDA device(s)" in err


def test_check_api_refuses_a_fractional_step_count():
    import leaklab
    from leaklab.runner import BadInput

    with pytest.raises(BadInput, match="steps must be a whole number, got 2.5"):
        leaklab.check(lambda: None, steps=2.5)


def test_resources_given_twice_or_comma_separated_are_all_watched(capsys):
    for args in (["--resource", "cpu_tensors", "--resource", "cpu_tensors_peak,host_heap"],
                 ["--resource", "cpu_tensors,cpu_tensors_peak,host_heap,cpu_tensors"]):
        code, out, _ = run(capsys, f"{STEPS}:grows", "--steps", "6", "--warmup", "1", "--json", *args)
        assert code == 1
        assert list(json.loads(out)["resources"]) == ["cpu_tensors", "cpu_tensors_peak", "host_heap"]


def _sleep_beside_a_blocked_thread(started) -> None:
    import os
    import signal
    import threading
    import time

    read_end, _ = os.pipe()
    threading.Thread(target=os.read, args=(read_end, 1), daemon=True).start()  # as the worker_objects sampler waits
    # The signal lands on the reading thread, as it did in the suite (the kernel picks any thread
    # that does not block it): blocked here, the main thread's sleep is what a handler waits on.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    started.set()
    time.sleep(30)


def test_a_child_forked_under_the_command_ends_at_once_on_sigterm():
    """The command's SIGTERM handler is Python's: in a forked child whose signal lands beside a
    thread blocked in a read, it waited until the child's sleep ended (60 s in the suite). A child
    gets SIGTERM's default back when it is forked."""
    import multiprocessing
    import signal
    import time

    from leaklab.cli import terminate_on_sigterm

    before = signal.getsignal(signal.SIGTERM)
    terminate_on_sigterm()
    try:
        context = multiprocessing.get_context("fork")
        started = context.Event()
        child = context.Process(target=_sleep_beside_a_blocked_thread, args=(started,), daemon=True)
        child.start()
        assert started.wait(30)
        begun = time.monotonic()
        child.terminate()
        child.join(20)
        took = time.monotonic() - begun
    finally:
        signal.signal(signal.SIGTERM, before)
        if child.is_alive():
            child.kill()
    assert child.exitcode == -signal.SIGTERM and took < 10, (child.exitcode, took)
