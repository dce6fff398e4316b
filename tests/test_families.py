"""The family from the evidence: each rule of leaklab.families on a chain as the walk gives it."""

import pytest

from leaklab.chain import Chain, Link
from leaklab.families import RULES, Evidence, decide


def _chain(*links):
    return Chain([Link(*link) for link in links])


ROOT = ("closure cell", "make_step.<locals>.kept", "list", "container")
TENSOR = ("grown", "[*]", "torch.Tensor", "tensor")

CASES = [
    ("autograd_history", "cpu_tensors", _chain(("closure cell", "make_step.<locals>.total", "torch.Tensor", "tensor"),
                                               ("autograd graph", ".grad_fn", "graph growing by 8 nodes/step", "graph"))),
    ("registered_callbacks", "python_objects", _chain(("closure cell", "make_step.<locals>.model", "Net", "module"),
                                                      ("attribute", "._forward_hooks", "collections.OrderedDict", "container"),
                                                      ("grown", "[*]", "functools.partial", "callable"))),
    ("cache_by_argument", "cpu_tensors", _chain(("lru_cache (maxsize=None)", "m.cost", "functools._lru_cache_wrapper", "callable"),
                                                ("referent", "", "dict", "container"), TENSOR)),
    ("cache_by_argument", "cpu_tensors", _chain(ROOT[:2] + ("dict", "container"),
                                                ("item", "[torch.Size key]", "torch.Tensor", "tensor"))),
    ("registry_keeps_objects", "cpu_tensors", _chain(ROOT, ("item", "[*]", "torch.optim.adam.Adam", "optimizer"),
                                                     ("attribute", ".state", "collections.defaultdict", "container"),
                                                     ("item", "[torch.nn.parameter.Parameter key]", "dict", "container"),
                                                     TENSOR)),
    ("container_keeps_tensors", "cpu_tensors", _chain(ROOT, ("item", "[*]", "RuntimeError", "exception"),
                                                      ("attribute", ".__traceback__", "traceback", "exception"), TENSOR)),
    ("autograd_history", "cpu_tensors", _chain(ROOT, ("grown, with a graph that keeps saved tensors", "[*]",
                                                      "torch.Tensor", "tensor"))),
    ("threads_not_joined", "threads", _chain(("module global", "threading._active", "dict", "container"),
                                             ("grown", "[*]", "threading.Thread", "thread"))),
    ("descriptors_not_closed", "open_fds", _chain(ROOT, ("grown", "[*]", "_io.BufferedReader", "file"))),
    ("mapped_files_kept", "mapped_file_bytes", _chain(ROOT, ("grown", "[*]", "torch.Tensor", "mapping"))),
    ("container_keeps_tensors", "cpu_tensors", _chain(ROOT, TENSOR)),
    ("dataloader_workers", "worker_memory", _chain(ROOT, TENSOR)),
    ("allocator_caching", "device_reserved", None),
]


@pytest.mark.parametrize(("family", "headline", "chain"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_rule_names_its_family_and_says_why(family, headline, chain):
    decision = decide(Evidence(chain, headline, frozenset({headline})))
    assert family in decision.families and decision.why


def test_every_rule_is_reached_by_some_evidence():
    reached = set()
    for _family, headline, chain in CASES:
        evidence = Evidence(chain, headline, frozenset({headline}))
        reached.add(next(i for i, rule in enumerate(RULES) if rule.test(evidence)))
    assert len(reached) >= 12, "the cases above exercise most of the table"


def test_no_evidence_names_no_family_and_a_bound_is_said():
    assert decide(Evidence(Chain([], "not found in time (9 objects walked)"), "python_objects", frozenset())).families == ()
    assert decide(Evidence(None, "cpu_tensors", frozenset({"cpu_tensors"}))).families == ()
    bounded = _chain(("closure cell", "make_step.<locals>.recent", "collections.deque (maxlen=8)", "container"), TENSOR)
    decision = decide(Evidence(bounded, "cpu_tensors", frozenset()))
    assert decision.families == ("container_keeps_tensors",)
    assert "bounded by construction (maxlen=8)" in decision.bounded
