"""Leak-site attribution: every case whose leak is tensor memory is attributed to its leaky
script, at or near the `# LEAK:` line (the line that allocated what the leak keeps alive is the
step's call into the model, a few lines above the line that keeps it)."""

import pytest

from leaklab.cases import discover

NEAR = 6  # lines between the attributed frame and a `# LEAK:` mark

TENSOR_RESOURCES = {"cpu_tensors": "cpu", "device_allocated": "cuda"}


def _params():
    for case in discover():
        if not case.meta.get("attribute"):
            continue
        for device in case.devices:
            marks = [getattr(pytest.mark, name) for name in case.markers(device)]
            yield pytest.param(case, device, id=f"{case.slug}-{device}", marks=marks)


@pytest.mark.parametrize(("case", "device"), list(_params()))
def test_leak_is_attributed_near_its_mark(case, device, leak_check):
    report = leak_check.case_report(case, "leak", device)
    resource = {"cpu": "cpu_tensors", "cuda": "device_allocated"}[device]
    assert report.resources[resource].verdict in ("grows", "plateau"), (
        f"{case.slug} has attribute = true but its {resource} does not grow on {device}: {report.summary()}")
    assert report.sites, f"{case.slug}: no allocation site was recorded"
    site = report.sites[0]
    marks = case.leak_lines()
    frames = [(line, fn) for filename, line, fn in site.stack if filename == str(case.leak)]
    assert frames, f"{case.slug}: the largest site is {site}, not in cases/{case.leak.name}"
    distance = min(abs(line - mark) for line, _ in frames for mark in marks)
    assert distance <= NEAR, f"{case.slug}: attributed to {site} (stack {frames}), {distance} lines from a # LEAK: mark {marks}"


def test_attribution_is_on_for_every_tensor_leak_case():
    missing = [c.slug for c in discover() if c.meta["resource"] in TENSOR_RESOURCES and not c.meta.get("attribute")]
    assert not missing, f"cases leaking tensor memory without attribute = true: {missing}"
