"""Every case pair: the leak shows its measured behaviour, every fix shows its own, and each
assertion fails on the other twin (a mutation check that needs no extra run)."""

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
