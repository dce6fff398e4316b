"""Every case pair: the leak shows its measured behaviour, every fix shows its own, and each
assertion fails on the other twin (a mutation check that needs no extra run)."""

import json

import pytest

from leaklab_lab.cases import discover, mismatches
from leaklab_lab.plugin import case_marks

CASES = discover()


def _params():
    for case in CASES:
        for device in case.devices:
            marks = case_marks(case, device)
            for role in ("leak", "fix"):
                for script in case.scripts(role):
                    label = script.stem if script.stem != case.slug else role
                    yield pytest.param(case, device, role, script, id=f"{case.slug}-{device}-{label}", marks=marks)


@pytest.mark.parametrize(("case", "device", "role", "script"), list(_params()))
def test_case(case, device, role, script, lab, benchmark):
    benchmark.group = f"{case.slug}-{device}"
    report = benchmark.pedantic(lab.case_report, args=(case, role, device, script), rounds=1, iterations=1)
    benchmark.extra_info.update(
        verdict=report.verdict,
        resource=report.resource,
        per_step_bytes=report.per_step_bytes,
        peak_bytes=report.resources[report.resource].peak_bytes if report.resources else None,
        median_step_seconds=report.median_step_seconds,
    )
    needs_fix = role == "leak" and "level_over_fix" in case.expected(device, role)
    fix_report = lab.case_report(case, "fix", device) if needs_fix else None
    lab.expect(report, case.expected(device, role), fix_report)
    if role == "fix":
        # Mutation check, both ways: the leak's assertions must fail on this fix, and this fix's
        # assertions must fail on the leak; otherwise one of them tests nothing.
        leak_report = lab.case_report(case, "leak", device)
        assert mismatches(report, case.expected(device, "leak"), report), (
            f"{case.slug}: the leak's expectations also hold for the fix {script.name}"
        )
        assert mismatches(leak_report, case.expected(device, "fix")), (
            f"{case.slug}: the fix's expectations also hold for the leak"
        )


def test_a_catalogued_raise_counts_where_a_pass_the_check_added_ended_on_it():
    """gradscaler_new_optimizer's leak raises once CPython reuses a freed optimizer's address: in
    one H200 run that came at step 35, in the long pass, which ended there (``pass_stopped``); the
    step raised what its entry says, and a run in which it never raised still fails."""
    from leaklab.report import Report

    expected = {"raises": "RuntimeError: step() has already been called since the last update()."}
    late = Report(device="cuda", steps=20, warmup=5, pass_stopped="the long pass stopped at step 35: "
                  "RuntimeError: step() has already been called since the last update().")
    assert mismatches(late, expected) == []
    ran = Report(device="cuda", steps=20, warmup=5)
    assert mismatches(ran, expected)
    other = Report(device="cuda", steps=20, warmup=5, pass_stopped="the long pass stopped at step 35: StopIteration")
    assert mismatches(other, expected) == ["expected 'RuntimeError: step() has already been called since the last "
                                           "update().', got StopIteration"]


def _merged(leak_on):
    """What `leaklab check --nproc 2 --json` prints: every rank's report, rank ``leak_on``'s CPU
    tensors growing by 25 KiB a step, the other's flat."""
    from leaklab import ranks
    from tests.test_ranks import FLAT, GROWING, report

    reports = [report(rank, GROWING if rank == leak_on else FLAT) for rank in (0, 1)]
    return {"name": "cases/x.py:make_step", "world_size": 2, "exit_code": ranks.merged_code(reports),
            "summary": f"cases/x.py:make_step: {ranks.answer(reports, None)}", "ranks": reports}


def test_a_case_of_several_ranks_is_judged_rank_by_rank():
    """``expect.<device>.<role>`` holds on every rank, a ``rankN`` table on rank N alone: a leak on
    rank 1 passes where rank 1 is expected to grow and the others bounded, and fails on each
    rank whose verdict differs, naming it."""
    from leaklab_lab.cases import ranks_report

    on_rank1 = ranks_report(_merged(leak_on=1))
    assert on_rank1.labels["rank"] == 1 and on_rank1.verdict == "grows"  # the rank the answer leads with
    assert on_rank1.labels["answer"].startswith("grows on rank 1 of 2 (rank 0 bounded): cpu_tensors by ")
    expected = {"cpu_tensors": "bounded", "rank1": {"cpu_tensors": "grows"}}
    assert mismatches(on_rank1, expected) == []
    on_rank0 = ranks_report(_merged(leak_on=0))
    assert mismatches(on_rank0, expected) == [
        "rank 0: cpu_tensors: expected bounded, got grows (25,600 B/step)",
        "rank 1: cpu_tensors: expected grows, got bounded (0 B/step)"]
    assert mismatches(on_rank1, {"cpu_tensors": "bounded"}) == [
        "rank 1: cpu_tensors: expected bounded, got grows (25,600 B/step)"]
    from leaklab.report import Report

    assert mismatches(Report(device="cpu", steps=6, warmup=1), expected) == [
        "expected a check of several ranks, got one process", "cpu_tensors was not measured"]


def test_a_case_of_several_ranks_runs_as_slow_and_distributed_and_its_rank_tables_are_checked(tmp_path):
    from leaklab_lab.cases import CaseError, load_case

    source = CASES[0]
    (tmp_path / "cases").mkdir()
    (tmp_path / "fixes").mkdir()
    for path in (tmp_path / "cases" / "x.py", tmp_path / "fixes" / "x.py"):
        path.write_text("def make_step(device):\n    return lambda: None\n")
    head = "\n".join(f"{key} = {json.dumps(value)}" for key, value in source.meta.items()
                     if key in ("title", "seed", "claim", "claim_status", "resource", "family", "what", "why", "symptoms"))
    toml = tmp_path / "cases" / "x.toml"
    toml.write_text(head + '\ndevices = ["cpu"]\nnproc = 2\n[expect.cpu.leak.rank1]\ncpu_tensors = "grows"\n[expect.cpu.fix]\n'
                    'cpu_tensors = "bounded"\n')
    case = load_case(toml)
    assert case.nproc == 2 and {"slow", "distributed"} <= set(case.markers("cpu"))
    assert case.expected("cpu", "leak") == {"rank1": {"cpu_tensors": "grows"}}
    toml.write_text(toml.read_text().replace("rank1]", "rank2]"))
    with pytest.raises(CaseError, match="rank2 must be a table, for a rank below nproc = 2"):
        load_case(toml)


def test_an_expectation_may_name_the_verdicts_a_noisy_counter_allows_and_no_other(tmp_path):
    """``shared_memory = ["bounded", "plateau"]``: either passes, growth fails naming both; a list
    holding anything but verdicts is refused when the case loads."""
    from leaklab_lab.cases import CaseError, load_case, ranks_report

    run = ranks_report(_merged(leak_on=1))
    assert mismatches(run, {"rank0": {"cpu_tensors": ["bounded", "plateau"]}, "rank1": {"cpu_tensors": ["plateau", "grows"]}}) == []
    assert mismatches(run, {"cpu_tensors": ["bounded", "plateau"]}) == [
        "rank 1: cpu_tensors: expected bounded or plateau, got grows (25,600 B/step)"]
    (tmp_path / "cases").mkdir()
    (tmp_path / "fixes").mkdir()
    for path in (tmp_path / "cases" / "x.py", tmp_path / "fixes" / "x.py"):
        path.write_text("def make_step(device):\n    return lambda: None\n")
    head = "\n".join(f"{key} = {json.dumps(value)}" for key, value in CASES[0].meta.items()
                     if key in ("title", "seed", "claim", "claim_status", "resource", "family", "what", "why", "symptoms"))
    toml = tmp_path / "cases" / "x.toml"
    toml.write_text(head + '\ndevices = ["cpu"]\n[expect.cpu.leak]\ncpu_tensors = ["grows", "plateau"]\n')
    assert load_case(toml).expected("cpu", "leak") == {"cpu_tensors": ["grows", "plateau"]}
    for wrong in ('["grows", "leaks"]', "[]", "[1]"):
        toml.write_text(head + f'\ndevices = ["cpu"]\n[expect.cpu.leak]\ncpu_tensors = {wrong}\n')
        with pytest.raises(CaseError, match="is not a verdict or a list of verdicts"):
            load_case(toml)


def test_a_figure_of_one_rank_and_the_merged_answer_read_the_ranks_the_lab_kept():
    from leaklab.verdict import format_bytes
    from leaklab_lab.cases import ranks_report
    from leaklab_lab.figures import _quantity

    run = ranks_report(_merged(leak_on=1))
    assert _quantity(run, "rank1.cpu_tensors.per_step") == format_bytes(25 * 1024)
    assert _quantity(run, "rank0.cpu_tensors.verdict") == "bounded"
    assert _quantity(run, "rank0.cpu_tensors.per_step") == format_bytes(0)
    assert _quantity(run, "answer") == run.labels["answer"]
    assert _quantity(run, "rank1.threads.per_step") is None  # not watched in that run: not measured


def test_watch_not_leaves_a_resource_out_of_each_devices_defaults_and_refuses_a_name_that_is_none(tmp_path):
    """``watch_not = ["python_objects"]``: every default of each device but that one is watched
    (one list for both devices, so CUDA keeps device_allocated); a misspelled name is refused."""
    from leaklab.resources import defaults
    from leaklab_lab.cases import CaseError, load_case

    (tmp_path / "cases").mkdir()
    (tmp_path / "fixes").mkdir()
    for path in (tmp_path / "cases" / "x.py", tmp_path / "fixes" / "x.py"):
        path.write_text("def make_step(device):\n    return lambda: None\n")
    head = "\n".join(f"{key} = {json.dumps(value)}" for key, value in CASES[0].meta.items()
                     if key in ("title", "seed", "claim", "claim_status", "resource", "family", "what", "why", "symptoms"))
    toml = tmp_path / "cases" / "x.toml"
    toml.write_text(head + '\nwatch_not = ["python_objects"]\n[expect.cpu.leak]\ncpu_tensors = "grows"\n')
    case = load_case(toml)
    for device in ("cpu", "cuda"):
        expected = tuple(r.name for r in defaults(device) if r.name != "python_objects")
        assert "python_objects" in {r.name for r in defaults(device)}
        assert case.options(device).resources == expected
    assert "device_allocated" in case.options("cuda").resources
    toml.write_text(head + '\nwatch_not = ["python_object"]\n[expect.cpu.leak]\ncpu_tensors = "grows"\n')
    with pytest.raises(CaseError, match="watch_not names 'python_object', not a resource"):
        load_case(toml)
