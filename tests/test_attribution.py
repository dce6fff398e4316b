"""Leak-site attribution: every case whose leak is tensor memory is attributed to its leaky
script near the `# LEAK:` line. The line that *allocated* what the leak keeps alive is usually
the step's call into the model, a few lines above the line that keeps it; where the keeping
happens elsewhere (a hook), the report's *holder*, the container that keeps the blocks alive,
must be the one the `# LEAK:` line fills."""

import re

import pytest

from leaklab_lab.cases import discover

NEAR = 6  # lines between the attributed frame and a `# LEAK:` mark

TENSOR_RESOURCES = {"cpu_tensors": "cpu", "device_allocated": "cuda"}
DEVICE_RESOURCE = {device: resource for resource, device in TENSOR_RESOURCES.items()}


def _params():
    for case in discover():
        if not case.meta.get("attribute"):
            continue
        for device in case.devices:
            if case.expected(device, "leak").get(DEVICE_RESOURCE[device]) not in ("grows", "plateau"):
                continue  # a host-heap leak or a retention: its report names the autograd history instead
            marks = [getattr(pytest.mark, name) for name in case.markers(device)]
            yield pytest.param(case, device, id=f"{case.slug}-{device}", marks=marks)


@pytest.mark.parametrize(("case", "device"), list(_params()))
def test_leak_is_attributed_near_its_mark(case, device, lab):
    report = lab.case_report(case, "leak", device)
    resource = DEVICE_RESOURCE[device]
    assert report.resources[resource].verdict in ("grows", "plateau"), (
        f"{case.slug} has attribute = true but its {resource} does not grow on {device}: {report.summary()}")
    assert report.sites, f"{case.slug}: no allocation site was recorded"
    site = report.sites[0]
    marks = case.leak_lines()
    frames = [(line, fn) for filename, line, fn in site.stack if filename == str(case.leak)]
    assert frames, f"{case.slug}: the largest site is {site}, not in cases/{case.leak.name}"
    distance = min(abs(line - mark) for line, _ in frames for mark in marks)
    lines = case.leak.read_text().splitlines()
    near_marks = "\n".join(lines[i] for mark in marks for i in range(max(0, mark - 1 - NEAR), min(len(lines), mark + NEAR)))
    names = set(re.findall(r"[A-Za-z_]\w*", site.held_by.split("[")[0])) - {"cache", "keys", "__traceback__"}
    holder_near_mark = any(re.search(rf"\b{name}\b", near_marks) for name in names)
    assert distance <= NEAR or holder_near_mark, (
        f"{case.slug}: attributed to {site} (stack {frames}), {distance} lines from a # LEAK: mark {marks}, "
        f"and its holder {site.held_by!r} is not named near one")


def _tensor_memory_grows(case) -> bool:
    """The leak is expected to grow (or plateau) in tensor memory on some device: a retention,
    which holds memory without growing, has no growth to attribute."""
    return any(
        case.expected(device, "leak").get(resource) in ("grows", "plateau")
        for resource, device in TENSOR_RESOURCES.items()
    )


def test_attribution_is_on_for_every_tensor_leak_case():
    missing = [c.slug for c in discover()
               if _tensor_memory_grows(c) and not c.meta.get("attribute") and not c.meta.get("attribute_exempt")]
    assert not missing, f"cases whose tensor memory grows without attribute = true: {missing}"
