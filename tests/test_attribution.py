"""Leak-site attribution: the first site the report names, for every case whose leak is tensor
memory, is the leak itself: either it was allocated on a `# LEAK:` line of the leaky script, or
its holder (the container that keeps the blocks alive) is the one a marked statement names
(`feats` for `feats.append(feat)  # LEAK: ...`). No tolerance in lines: a site a few lines from
the mark (the step's `loss.backward()`, which allocates the last step's gradients) is not the
leak. The catalog's hit rate (CATALOG.md, What the suite measured) uses the same rule,
`Case.names_its_leak`."""

import pytest

from leaklab_lab.cases import discover
from leaklab_lab.plugin import case_marks

TENSOR_RESOURCES = {"cpu_tensors": "cpu", "device_allocated": "cuda"}
DEVICE_RESOURCE = {device: resource for resource, device in TENSOR_RESOURCES.items()}


# Where attribution does not yet name the leak first, measured (CPU, torch 2.14.1; H200, torch
# 2.11.0). Strict: a case that starts passing must leave this list. (tensor_logging and
# feature_list left it when sites came to be ranked by how many steps their live blocks come
# from: the last step's gradients, alive but not leaked, come from one; ema_confidence_threshold
# and validation_without_no_grad left it when holders came to be found among the tensors an
# autograd graph saves for backward: `threshold.grad_fn`, `total_loss.grad_fn`; model_rebuild
# left it when its mark moved from the line making the registry's key to the line that registers
# the model, the holder attribution names; ema_confidence_threshold on the H200 left it when the
# graph walk stopped keying nodes by id(), which torch 2.11 reuses for fresh node wrappers.)
KNOWN_MISSES = {
    ("cuda_tensor_queue_consumer", "cuda"): "the tensors are held by the consumer process, which attribution cannot walk: "
                                            "the allocation line (encoder's output) is named, not the consumer's queue",
}


def _expected(case, device, resource):
    """The leak's expected verdict of ``resource``: growth on any rank, in a case of several."""
    expected = case.expected(device, "leak")
    verdicts = [expected.get(resource), *(table.get(resource) for key, table in expected.items()
                                          if key.startswith("rank") and isinstance(table, dict))]
    return next((verdict for verdict in verdicts if verdict in ("grows", "plateau")), verdicts[0])


def _params():
    for case in discover():
        if not case.meta.get("attribute"):
            continue
        for device in case.devices:
            if _expected(case, device, DEVICE_RESOURCE[device]) not in ("grows", "plateau"):
                continue  # a host-heap leak or a retention: its report names the autograd history instead
            marks = case_marks(case, device)
            if (case.slug, device) in KNOWN_MISSES:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[case.slug, device]))
            yield pytest.param(case, device, id=f"{case.slug}-{device}", marks=marks)


@pytest.mark.parametrize(("case", "device"), list(_params()))
def test_first_named_site_is_the_leak(case, device, lab):
    report = lab.case_report(case, "leak", device)
    resource = DEVICE_RESOURCE[device]
    assert report.resources[resource].verdict in ("grows", "plateau"), (
        f"{case.slug} has attribute = true but its {resource} does not grow on {device}: {report.summary()}")
    assert report.sites, f"{case.slug}: no allocation site was recorded"
    site = report.sites[0]
    assert case.names_its_leak(site.filename, site.code, site.held_by), (
        f"{case.slug}: the first-named site is {site} (`{site.code.strip()}`), not a `# LEAK:` line "
        f"{case.leak_lines()} of cases/{case.leak.name}, and its holder {site.held_by!r} is not what a marked "
        f"statement names; the sites after it: {[str(s) for s in report.sites[1:3]]}")


def _tensor_memory_grows(case) -> bool:
    """The leak is expected to grow (or plateau) in tensor memory on some device (on some rank): a
    retention, which holds memory without growing, has no growth to attribute."""
    return any(_expected(case, device, resource) in ("grows", "plateau") for resource, device in TENSOR_RESOURCES.items())


def test_attribution_is_on_for_every_tensor_leak_case():
    missing = [c.slug for c in discover()
               if _tensor_memory_grows(c) and not c.meta.get("attribute") and not c.meta.get("attribute_exempt")]
    assert not missing, f"cases whose tensor memory grows without attribute = true: {missing}"
