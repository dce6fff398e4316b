"""Naming what grows, a leak's signature, and the catalog entry it resembles."""

from pathlib import Path

import pytest

from leaklab.runner import RunOptions, run_script
from leaklab.signature import SIGNATURES_PATH, Signature, load_entries, resemble, signature, similarity

EDGES = str(Path(__file__).parent / "data" / "edge_steps.py")


@pytest.fixture(scope="module")
def reports():
    return {name: run_script(EDGES, name, "cpu", RunOptions()) for name in
            ("bytes_256", "hook_partial_per_step", "thread_per_step", "mapped_page_per_step", "opens_files", "noop")}


def test_what_grows_is_named_with_its_holder(reports):
    assert reports["bytes_256"].growth["objects"][0].startswith("+1 bytes/step in kept (a list")
    assert reports["hook_partial_per_step"].growth["objects"][0].startswith(
        "+1 functools.partial/step in model._forward_hooks")
    assert reports["thread_per_step"].growth["threads"] == ["+1 thread(s)/step: 'waits-forever' running Event.wait"]
    assert reports["mapped_page_per_step"].growth["mappings"][0].startswith("+1 mapping(s)/step of /tmp/leaklab_edge_")
    assert reports["opens_files"].growth["descriptors"] == ["+1 fd(s)/step: /dev/*"]
    assert not reports["noop"].growth, "a bounded run names nothing"
    assert "+1 functools.partial/step in model._forward_hooks" in reports["hook_partial_per_step"].summary()


def test_a_signature_says_where_and_what_holds_it(reports):
    hooks = signature(reports["hook_partial_per_step"])
    assert (hooks.headline, hooks.holder, hooks.held) == ("python_objects", "hook_dict", "callable")
    threads = signature(reports["thread_per_step"])
    assert (threads.headline, threads.holder) == ("threads", "threads")
    assert signature(reports["noop"]) is None


def test_similarity_is_one_for_the_same_leak_and_lower_elsewhere(reports):
    hooks, threads = signature(reports["hook_partial_per_step"]), signature(reports["thread_per_step"])
    assert similarity(hooks, hooks) == pytest.approx(1.0)
    assert similarity(hooks, threads) < 0.6
    assert similarity(hooks, threads) == pytest.approx(similarity(threads, hooks))


def _entry(slug, family, sig):
    return {"slug": slug, "title": slug, "family": family, "fix": "", "device": "cpu", "signature": sig.to_json()}


def test_resemble_names_the_closest_entry_leaves_one_out_and_forces_no_match(reports):
    hooks, threads = signature(reports["hook_partial_per_step"]), signature(reports["thread_per_step"])
    entries = [_entry("hooks", "registered_callbacks", hooks), _entry("threads", "threads_not_joined", threads)]
    assert [r.slug for r in resemble(hooks, entries)][:1] == ["hooks"]
    assert [r.slug for r in resemble(threads, entries)][:1] == ["threads"]
    assert "hooks" not in [r.slug for r in resemble(hooks, entries, exclude="hooks")]
    unlike = Signature(grows={"pinned_host": 6.0}, headline="pinned_host", holder="cache", held="tensor", pattern="late")
    assert resemble(unlike, entries) == [], "nothing close: a forced match is worse than none"


def test_every_output_names_the_entry_it_resembles(reports):
    report = reports["thread_per_step"]
    if not load_entries():
        pytest.skip(f"no catalog signatures at {SIGNATURES_PATH}")
    assert report.resembles and report.resembles[0]["slug"] == "threads_never_joined"
    assert "resembles threads_never_joined" in report.summary()
    data = report.to_json()
    assert data["resembles"][0]["link"] == "docs/entries/threads_never_joined.md" and data["signature"]["holder"] == "threads"
    assert "resembles, in the catalog:" in report.curve()
