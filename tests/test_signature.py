"""Naming what grows, a leak's signature, and the catalog entry it resembles."""

from pathlib import Path

import pytest
import torch

from leaklab.runner import RunOptions
from leaklab.scripts import run_script
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


def test_the_family_comes_first_then_the_closest_entry(reports):
    hooks = signature(reports["hook_partial_per_step"])
    assert hooks.families == ("registered_callbacks",) and "_forward_hooks" in hooks.why
    # An entry of another family with the very same signature loses to a less similar one of
    # the family the evidence named; with no family named, nothing is suggested at all.
    twin = _entry("twin", "container_keeps_tensors", hooks)
    sibling = _entry("sibling", "registered_callbacks", Signature(**{**hooks.__dict__, "pattern": "late", "garbage": True}))
    found = resemble(hooks, [twin, sibling])
    assert [r.slug for r in found] == ["sibling"] and found[0].why == hooks.why
    assert resemble(Signature(**{**hooks.__dict__, "families": ()}), [twin, sibling]) == []
    # A signature kept before holder chains (no families) is ranked against every entry, as before.
    assert [r.slug for r in resemble(Signature(**{**hooks.__dict__, "families": None}), [twin, sibling])][:1] == ["twin"]


def test_every_output_carries_the_holder_chain(reports):
    from leaklab.cli import answer_lines
    from leaklab.plugin import failure_line

    report = reports["hook_partial_per_step"]
    assert report.holder[0]["name"] == "hook_partial_per_step.<locals>.model"
    assert [link["name"] for link in report.holder[1:]] == ["._forward_hooks", "[*]"]
    short = "held by hook_partial_per_step.<locals>.model (torch.nn.modules.linear.Linear) -> ._forward_hooks"
    assert short in report.summary() and short in failure_line(report, "bounded")
    assert report.to_json()["holder"] == report.holder
    whole = "hook_partial_per_step.<locals>.model (torch.nn.modules.linear.Linear) -> ._forward_hooks (collections.OrderedDict) -> [*] (functools.partial)"
    assert f"held by: {whole}" in report.curve()
    assert f"  held by: {whole}" in answer_lines(report.to_json())
    opens = reports["opens_files"]  # a descriptor with no Python object: said, not silent
    assert opens.holder is None and opens.holder_missing.startswith("not found")
    assert "holder not found" in opens.summary()


def _entry(slug, family, sig, **extra):
    return {"slug": slug, "title": slug, "family": family, "fix": "", "device": "cpu", "signature": sig.to_json(), **extra}


def test_an_entry_of_several_ranks_or_another_kept_kind_or_device_is_never_named():
    from dataclasses import replace

    from leaklab.signature import Signature, resemble

    mine = Signature({"cpu_tensors": 4.0}, "cpu_tensors", "container", "tensor", families=("container_keeps_tensors",))
    ranked = _entry("gathered", "container_keeps_tensors", replace(mine, ranks=2))
    plain = _entry("features", "container_keeps_tensors", mine)
    assert [r.slug for r in resemble(mine, [ranked, plain], device="cpu")] == ["features"]
    # the same specific rule lifts the ranks' bar: handles of async work, on one rank or two
    handles = Signature({"cpu_tensors": 4.0}, "cpu_tensors", "container", "tensor", families=("container_keeps_tensors",),
                        rule="_async_handles")
    assert [r.slug for r in resemble(handles, [_entry("work", "container_keeps_tensors", replace(handles, ranks=2)), plain],
                                     device="cpu")][0] == "work"
    # a registry of loggers is not a registry of models
    loggers = Signature({"python_objects": 1.0}, "python_objects", "container", "object",
                        families=("registry_keeps_objects",), kept="Logger")
    models = Signature({"python_objects": 1.0}, "python_objects", "container", "object",
                       families=("registry_keeps_objects",), kept="module")
    assert resemble(loggers, [_entry("model_rebuild", "registry_keeps_objects", models)], device="cpu") == []
    assert resemble(models, [_entry("model_rebuild", "registry_keeps_objects", models)], device="cpu")
    # an entry whose case needs CUDA is not named for a CPU run
    assert resemble(mine, [_entry("pinned", "container_keeps_tensors", mine, devices=["cuda"])], device="cpu") == []


def test_where_nothing_is_close_the_answer_still_names_the_family_the_evidence_decided():
    import dataclasses
    import json
    from pathlib import Path

    from leaklab.report import report_from_json

    runs = json.loads((Path(__file__).parents[1] / "results" / "cpu-torch2.14.1.json").read_text())["runs"]
    leak = report_from_json(runs["cpu/feature_list:leak"])
    why = "a list (make_step.<locals>.feats) that keeps every step's Tensor"
    named = dataclasses.replace(leak, resembles=[], signature={"families": ["container_keeps_tensors"], "why": why})
    assert f"resembles no catalog entry closely (the evidence names the family container_keeps_tensors: {why})" in named.summary()
    assert "the evidence names the family" in named.curve()
    # two families the evidence cannot tell apart, or none: nothing is named
    for families in (["dataloader_workers", "processes"], []):
        unnamed = dataclasses.replace(leak, resembles=[], signature={"families": families, "why": why})
        assert unnamed.summary().endswith("resembles no catalog entry closely")


def test_the_container_nearest_what_grew_and_a_kept_view_are_part_of_the_signature():
    """A list of whole tensors resembles an entry that keeps a list of tensors more than one that
    keeps views of larger storages (a row of a batch keeps the batch), or a library's record list."""
    import torch

    from leaklab.chain import Link, describe_tensor
    from leaklab.signature import redecide, similarity

    batch = torch.randn(64, 32)
    assert describe_tensor(batch[3]) == "grown, a view of a larger storage"
    assert describe_tensor(batch[3].clone()) == "grown" and describe_tensor(batch) == "grown"

    def kept(box: str, what: str) -> Signature:
        links = [Link("closure cell", "make_step.<locals>.kept", box, "container"), Link(what, "[*]", "torch.Tensor", "tensor")]
        base = Signature(grows={"cpu_tensors": 5.0}, headline="cpu_tensors")
        return redecide(base, [link.__dict__ for link in links], None)

    whole, views, records = kept("list", "grown"), kept("list", "grown, a view of a larger storage"), kept("unittest.mock._CallList", "grown")
    assert (whole.box, whole.held, views.held, records.box) == ("list", "tensor", "view", "_CallList")
    assert similarity(whole, kept("list", "grown")) > similarity(whole, views)
    assert similarity(whole, kept("list", "grown")) > similarity(whole, records)


def _logger_of_tensors(device):
    """A metrics logger that keeps every step's loss (with its graph) and accuracy (without one)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Linear(64, 4)
    inputs, targets = torch.randn(32, 64), torch.randint(0, 4, (32,))
    history = {"loss": [], "accuracy": []}

    def step():
        logits = model(inputs)
        loss = nn.functional.cross_entropy(logits, targets)
        loss.backward()
        history["loss"].append(loss)
        history["accuracy"].append((logits.argmax(1) == targets).float().mean())

    return step


def test_kept_losses_are_named_by_their_graph_and_called_autograd_history():
    """Of what grew, the tensors that carry an autograd graph are followed to their holder (a
    logger's losses, not its accuracies), and kept tensors whose graphs outweigh them (the heap
    grows faster than the 4-byte losses) are autograd history, not a container of tensors."""
    from leaklab.families import Evidence, decide
    from leaklab.runner import run_factory
    from leaklab.signature import evidence

    report = run_factory(_logger_of_tensors, "cpu", RunOptions())
    assert report.verdict == "grows"
    assert "['loss']" in [link["name"] for link in report.holder], report.holder
    assert "autograd graph" in report.holder[-1]["what"]
    found = evidence(report)
    assert decide(found).families == ("autograd_history",), (found.rates, decide(found).why)
    # the same chain where the tensors are the bulk (a batch of features kept with its graph)
    features = Evidence(found.chain, "cpu_tensors", found.growing, rates={"cpu_tensors": 5.1, "host_heap": 5.1})
    assert decide(features).families == ("container_keeps_tensors",)


def test_an_entry_of_a_specific_holder_is_named_only_for_that_holder_and_a_cache_only_among_caches():
    """Round 6: a memo dict was linked to IPython's output history, and a shelve's writeback cache
    to a shape-keyed native cache; an lru_cache's fix does not apply to a dict named cache."""
    from dataclasses import replace

    lru = Signature({"cpu_tensors": 5.0}, "cpu_tensors", "cache", "tensor", families=("cache_by_argument",), rule="_lru", box="dict")
    memo = replace(lru, rule=None)
    matcher = Signature({"cpu_tensors": 5.0}, "cpu_tensors", None, "tensor", families=())  # its run named no holder
    entries = [_entry("lru_cache_unbounded", "cache_by_argument", lru), _entry("lru_cache_matcher", "cache_by_argument", matcher)]
    assert [r.slug for r in resemble(lru, entries, device="cpu")][0] == "lru_cache_unbounded"
    assert resemble(memo, entries, device="cpu") == []
    # a leak that no rule named a cache is still compared with every entry of its family
    kept = replace(matcher, families=("cache_by_argument",))
    assert [r.slug for r in resemble(kept, entries, device="cpu")] == ["lru_cache_matcher"]


def test_the_box_is_the_container_that_gains_the_entries():
    """trainer_metrics_keep_graph: a history list of per-step dicts is a list that grows, as a
    logger's list of losses is, whatever each record is."""
    from leaklab.chain import Link
    from leaklab.signature import redecide

    links = [Link("closure cell", "make_step.<locals>.history", "dict", "container"), Link("item", "['train']", "list", "container"),
             Link("item", "[*]", "dict", "container"), Link("grown, with an autograd graph", "['loss']", "torch.Tensor", "tensor")]
    found = redecide(Signature(grows={"cpu_tensors": 2.0}, headline="cpu_tensors"), [link.__dict__ for link in links], None)
    assert found.box == "list"
    nearest = [Link("closure cell", "make_step.<locals>.kept", "collections.deque", "container"), Link("attribute", ".rows", "dict", "container"),
               Link("grown", "['x']", "torch.Tensor", "tensor")]
    assert redecide(Signature(grows={"cpu_tensors": 2.0}, headline="cpu_tensors"), [link.__dict__ for link in nearest], None).box == "dict"


def test_what_a_growing_graph_is_counts_only_where_both_read_it():
    from dataclasses import replace

    from leaklab.chain import GRAPH_SHAPES, graph_shape_of

    total = Signature({"host_heap": 4.0, "python_objects": 0.0}, "host_heap", "autograd_history", "tensor",
                      families=("autograd_history",), graph="sum")
    ema = _entry("undetached_ema", "autograd_history", replace(total, box="dict", graph="parameters"))
    accumulation = _entry("loss_accumulation", "autograd_history", replace(total, grows={"host_heap": 4.0}, graph="sum"))
    # the resources alone make the EMA of the weights closer; what the graph is names the running total
    assert [r.slug for r in resemble(replace(total, graph=None), [ema, accumulation], device="cpu")][0] == "undetached_ema"
    assert [r.slug for r in resemble(total, [ema, accumulation], device="cpu")][0] == "loss_accumulation"
    assert similarity(total, replace(total, graph=None)) == similarity(replace(total, graph=None), replace(total, graph=None))
    assert Signature.from_json(total.to_json()) == total and "graph" not in replace(total, graph=None).to_json()
    for shape, words in GRAPH_SHAPES.items():
        assert graph_shape_of(f"graph growing by 24 nodes/step, {words}") == shape
    assert graph_shape_of("graph growing by 24 nodes/step") is None


def test_an_entrys_run_on_the_checks_own_device_is_the_one_compared():
    from dataclasses import replace

    total = Signature({"host_heap": 4.0}, "host_heap", "autograd_history", "tensor", families=("autograd_history",), graph="sum")
    on_cpu = _entry("undetached_ema", "autograd_history", replace(total, graph="parameters"))
    on_cuda = {**on_cpu, "device": "cuda", "signature": replace(total, graph=None).to_json()}  # its run read no shape
    accumulation = _entry("loss_accumulation", "autograd_history", total)
    ranked = resemble(total, [on_cpu, on_cuda, {**accumulation, "signature": replace(total, box="dict").to_json()}], device="cpu")
    # the CPU run (an EMA of the weights) is the one compared, and its shape rules it out: the CUDA
    # run, which read no shape and would score higher, never stands in for it
    assert [r.slug for r in ranked] == ["loss_accumulation"]
    assert similarity(total, replace(total, graph=None)) > similarity(total, replace(total, box="dict"))
    # with no run on the check's kind, the other kind's is compared
    assert [r.slug for r in resemble(total, [on_cuda], device="cpu")] == ["undetached_ema"]


def test_an_entry_whose_graph_grows_in_another_shape_is_ruled_out():
    """flow_batchnorm_running_stats_keep_graph (round 15): batch norm's running mean kept with its
    graph is a moving average of a statistic; an EMA of the weights scored higher on its resources
    and its box, and was named first. Where both runs read the shape, another shape rules the entry
    out; an entry whose run read none is still ranked."""
    from dataclasses import replace

    average = Signature({"host_heap": 4.8, "python_objects": 1.1}, "host_heap", "autograd_history", "tensor",
                        families=("autograd_history",), box="dict", graph="average")
    weights = _entry("undetached_ema", "autograd_history", replace(average, graph="parameters"))
    statistic = _entry("ema_confidence_threshold", "autograd_history",
                       replace(average, grows={"cpu_tensors": 5.0, "host_heap": 5.0}, headline="cpu_tensors", box=None))
    unread = _entry("retain_graph", "autograd_history", replace(average, graph=None, box=None))
    assert similarity(average, Signature.from_json(weights["signature"])) > similarity(average, Signature.from_json(statistic["signature"]))
    assert [r.slug for r in resemble(average, [weights, statistic, unread], device="cpu")] == ["retain_graph", "ema_confidence_threshold"]
    assert [r.slug for r in resemble(replace(average, graph=None), [weights, statistic], device="cpu")][0] == "undetached_ema"


def _running_total(device):
    weight = torch.randn(32, 4, requires_grad=True)
    kept = {"total": torch.tensor(0.0)}

    def step():
        loss = torch.relu(torch.randn(16, 32) @ weight).mean()
        loss.backward()
        kept["total"] = kept["total"] + loss  # never .item(): every step's graph is chained to the total
        return {"loss": loss.item()}

    return step


def _weights_ema(device):
    weight = torch.randn(32, 4, requires_grad=True)
    kept = {"ema": weight.detach().clone()}

    def step():
        torch.relu(torch.randn(16, 32) @ weight).mean().backward()
        kept["ema"] = 0.99 * kept["ema"] + 0.01 * weight  # outside no_grad: a graph of the weights alone
        return {}

    return step


def test_a_checked_runs_growing_graph_is_named_by_its_shape_in_its_chain_and_signature():
    from leaklab.runner import run_factory

    for factory, shape, words in ((_running_total, "sum", "a running sum"),
                                  (_weights_ema, "parameters", "a moving average of parameters alone")):
        report = run_factory(factory, "cpu", RunOptions())
        assert report.verdict == "grows", report.summary()
        assert report.holder[-1]["kind"] == "graph" and report.holder[-1]["type"].endswith(f", {words}"), report.holder
        assert signature(report).graph == shape


def test_an_entry_that_answers_the_rule_that_decided_is_named_first_however_unlike_its_run():
    """A program that turned its collector off and keeps no holder (rounds 11 to 18: six steps, each
    read as cyclic_garbage by its writer) is answered by cyclic_garbage, whose own run keeps records
    in a list and so is unlike it: the entry's metadata says so (``answers``), its run cannot show it."""
    from leaklab.signature import Signature, resemble

    off = Signature({"python_objects": 2.0}, "python_objects", "garbage", None, families=("cyclic_garbage",),
                    rule="_collector_off", collector_off=True)
    records = Signature({"host_heap": 5.0, "python_objects": 0.7}, "host_heap", "container", "object",
                        families=("registry_keeps_objects",), kept="StepRecord", box="list")
    assert resemble(off, [_entry("cyclic_garbage", "cyclic_garbage", records)], device="cpu") == []
    named = resemble(off, [_entry("cyclic_garbage", "cyclic_garbage", records, answers=["_collector_off"])], device="cpu")
    assert [r.slug for r in named] == ["cyclic_garbage"] and named[0].score < 0.45
    # another specific rule of the family (gc.garbage kept) is not answered by it
    saved = Signature({"python_objects": 2.0}, "python_objects", "garbage", None, families=("cyclic_garbage",),
                      rule="_collector_keeps")
    assert resemble(saved, [_entry("cyclic_garbage", "cyclic_garbage", records, answers=["_collector_off"])], device="cpu") == []


def test_the_catalogs_cyclic_garbage_entry_answers_a_program_with_its_collector_off():
    entry = next((e for e in load_entries() if e["slug"] == "cyclic_garbage"), None)
    assert entry is not None and "_collector_off" in entry.get("answers", [])


def test_the_catalogs_worker_entries_are_told_apart_by_what_their_workers_resident_memory_did():
    """cow_dataset_workers' workers copy what they share (unique memory grows, resident memory does
    not); persistent_workers_cache's make a cache of their own (both grow): on the CPU's run of each.
    (The cow case's loader runs out during its long pass, before a holder chain is named, so its
    family comes from the resource alone, not from _copy_on_write, which needs the DataLoader.)"""
    cpu = {entry["slug"]: entry["signature"] for entry in load_entries() if entry["device"] == "cpu"}
    assert "worker_resident" in cpu["cow_dataset_workers"].get("flat", [])
    assert "worker_resident" not in cpu["persistent_workers_cache"].get("flat", [])
    assert cpu["persistent_workers_cache"].get("rule") == "_persistent_workers"


def test_a_hook_left_registered_is_named_from_the_census_where_the_walk_names_its_list():
    """The walk from the outputs that grew ends at each explainer's list; the census saw the
    module's hook dict gain a function every step, and that decides the family, in the report's
    JSON as data and in its signature."""
    report = run_script(EDGES, "explainer_hook_per_step", "cpu", RunOptions())
    assert report.verdict == "grows"
    assert any(gain["path"].endswith("._forward_hooks") and gain["kind"] == "callable" for gain in report.gaining)
    assert report.to_json()["gaining"] == report.gaining
    found = signature(report)
    assert found.families == ("registered_callbacks",) and "_forward_hooks" in found.why, found
    assert Signature.from_json(found.to_json()) == found
