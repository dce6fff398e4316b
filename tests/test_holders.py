"""The holder chain: from a root a user can name to what grew, found from the objects themselves."""

import atexit
import codecs
import functools
import gc
import multiprocessing
import time
import weakref

import torch

from leaklab.chain import OUTSIDE, Chain, Link
from leaklab.families import Evidence, decide
from leaklab.holders import holder_chain


class Thing:
    pass


KEPT: list = []


def _frozen(build):
    """What the check sees: everything alive frozen at the baseline, what grew made after it."""
    gc.collect()
    gc.freeze()
    try:
        return build()
    finally:
        gc.unfreeze()


# These tests are about which path the walk takes, not about its time budget (the check's 0.5 s,
# tested on its own below): each level of a walk up scans every object the collector tracks, and
# beside two CPU-bound processes a walk of five levels ran out of that budget after 10 objects.
WALK_SECONDS = 30.0


def _chain(grown: list) -> Chain:
    return holder_chain(grown, seconds=WALK_SECONDS)


def _types(chain: Chain) -> list[str]:
    return [link.type.rsplit(".", 1)[-1] for link in chain.links]


def test_a_module_global_list():
    def build():
        KEPT.append(Thing())
        return _chain([KEPT[-1]])

    try:
        chain = _frozen(build)
    finally:
        KEPT.clear()
    assert chain.found, chain.missing
    assert chain.links[0].what == "module global" and chain.links[0].name.endswith("test_holders.KEPT")
    assert _types(chain) == ["list", "Thing"]
    # A list that keeps whole objects (not tensors, not values) is a registry.
    assert decide(Evidence(chain, "python_objects", frozenset())).families == ("registry_keeps_objects",)


REGISTRY = weakref.WeakValueDictionary()  # as multiprocessing's after-fork registry keeps its entries


def test_a_weak_dictionary_is_passed_over_for_what_really_holds():
    """A tuple key in a WeakValueDictionary lives only while its value does: the list that keeps
    the value is the holder (the walk had stopped at multiprocessing.util._afterfork_registry)."""
    def build():
        value, key = Thing(), (len(KEPT), "after fork")
        REGISTRY[key] = value
        KEPT.append({"entry": [(key, value)]})  # a longer path than the registry's, which the walk meets first
        return _chain([key])

    try:
        chain = _frozen(build)
    finally:
        KEPT.clear()
        REGISTRY.clear()
    assert chain.found, chain.missing
    assert chain.links[0].name.endswith("test_holders.KEPT"), chain


def make_step():
    history = []

    def step():
        history.append({"loss": torch.zeros(1)})
    return step


def test_a_closure_list_names_the_factorys_variable():
    step = make_step()

    def build():
        step()
        return _chain([step.__closure__[0].cell_contents[-1]["loss"]])

    chain = _frozen(build)
    assert chain.found, chain.missing
    assert (chain.links[0].what, chain.links[0].name) == ("closure cell", "make_step.<locals>.history")
    assert _types(chain) == ["list", "dict", "Tensor"]
    assert chain.links[-1].kind == "tensor" and chain.links[-1].name == "['loss']"
    decision = decide(Evidence(chain, "cpu_tensors", frozenset()))
    assert decision.families == ("container_keeps_tensors",) and "make_step.<locals>.history" in decision.why


class Scorer:
    def __init__(self, bank):
        self.bank = bank

    def close(self):
        self.bank = None


def test_a_callback_that_only_the_interpreter_holds_is_the_root():
    """atexit keeps a bound method (and a closure) where Python shows no referrer: the chain
    starts at the callback, held outside Python, not at a closure cell or nowhere."""
    scorer = Scorer(torch.zeros(8))
    atexit.register(scorer.close)
    bank, kept = scorer.bank, weakref.ref(scorer)  # a weak reference is no referrer to the walk
    del scorer
    try:
        chain = _frozen(functools.partial(_chain, [bank]))  # no closure of this test in the way
    finally:
        atexit.unregister(kept().close)  # equal to the one registered: same object, same function
    assert chain.found, chain.missing
    assert chain.links[0].what == OUTSIDE and chain.links[0].name.startswith("test_holders.Scorer.close"), chain
    assert _types(chain) == ["method", "Scorer", "Tensor"]
    decision = decide(Evidence(chain, "cpu_tensors", frozenset()))
    assert decision.families == ("registered_callbacks",) and "outside Python" in decision.why


def make_cleanup():
    table = torch.zeros(4)

    def cleanup():
        table.zero_()
    return cleanup


def _chain_while_registered(callback, register, unregister) -> Chain:
    """The chain to what ``callback``'s closure holds, while only ``register``'s registry (outside
    Python) keeps the callback; unregistered after."""
    grown = [callback.__closure__[0].cell_contents]
    register(callback)
    kept = weakref.ref(callback)
    del callback
    try:
        return _frozen(functools.partial(_chain, grown))  # no closure of this test in the way
    finally:
        unregister(kept())


def test_a_closure_registered_outside_python_is_named_by_its_function_then_its_variable():
    chain = _chain_while_registered(make_cleanup(), atexit.register, atexit.unregister)
    assert chain.found, chain.missing
    assert chain.links[0].what == OUTSIDE and "make_cleanup.<locals>.cleanup" in chain.links[0].name, chain
    assert [link.name for link in chain.links[1:]] == ["make_cleanup.<locals>.table"]  # one link: the variable


def make_search():
    table = torch.zeros(4)

    def search(name):  # a codec search function: None is "not mine"
        return None if table.sum() else None
    return search


def test_a_callable_in_a_list_only_the_interpreter_holds_is_named_by_that_list():
    """codecs.register (and os.register_at_fork) keep their functions in a plain list that only
    C refers to: the walk ends at that list, which is a list of callbacks held outside Python,
    not "every path ends where Python cannot see"."""
    chain = _chain_while_registered(make_search(), codecs.register, codecs.unregister)
    assert chain.found, chain.missing
    assert chain.links[0].what == OUTSIDE and "callables held outside Python" in chain.links[0].name, chain
    assert _types(chain)[:2] == ["list", "function"]
    decision = decide(Evidence(chain, "cpu_tensors", frozenset()))
    assert decision.families == ("registered_callbacks",), decision


def test_a_list_of_classes_and_their_parts_nothing_refers_to_is_no_registry_of_callbacks():
    """multistep_lr_step_defines_class_each_call (round 28, after it was measured): with the collector
    off, a class made per call is garbage no root holds, and the walk reached a list left in that
    garbage (classes, their dicts and tuples beside their functions) that nothing refers to. It was
    named an interpreter's list of callbacks; only a list of callables is one."""
    from leaklab.holders import _held_outside

    def search(name):
        return None

    class Made:
        def method(self):
            return None

    registry, garbage = [search, print], [Made, dict(Made.__dict__), Made.__mro__, Made.method]
    assert "callables held outside Python" in _held_outside(registry, {id(registry): search})
    assert _held_outside(garbage, {id(garbage): Made.method}) is None


LIVE_LISTENERS = weakref.WeakSet()   # as logging keeps a weak set of its handlers beside each logger's list
LIVE_BY_NAME = weakref.WeakSet()
LISTENERS: list = []


class Listener:
    def __init__(self):
        LIVE_LISTENERS.add(self)
        LIVE_BY_NAME.add(self)
        LISTENERS.append(self)  # added per run, never removed


def test_an_object_added_every_step_is_named_from_its_holder_not_from_its_weak_references():
    """logging keeps a WeakSet of its handlers beside the logger's list: two weak references grow
    with every handler, more than the handlers, but they keep nothing alive. The check names the
    list that keeps the objects (it named the weak set's table of a console handler per run)."""
    import leaklab

    def step():
        Listener()
        return 0.0

    try:
        report = leaklab.check(step, steps=12, warmup=3)
    finally:
        LISTENERS.clear()
    assert report.verdict == "grows"
    names = [link["name"] for link in report.holder or []]
    assert names and names[0].endswith("LISTENERS") and not any("LIVE" in name for name in names), (names, report.holder_missing)


class AtExitScorer(Scorer):
    pass


def test_a_check_names_a_callback_registered_with_atexit_every_step():
    """atexit_cleanup_per_call (round 1): the check's census lists the other types that grew
    (bound methods too) in lists of its own, which the walk must not take for referrers: the
    method atexit keeps then looked held by a list, and the holder went unnamed."""
    import leaklab

    def make_step():
        bank = torch.randn(16, 16)

        def step():
            scorer = AtExitScorer(bank.clone())
            atexit.register(scorer.close)
            return float(scorer.bank.sum())
        return step

    try:
        report = leaklab.check(make_step(), steps=12, warmup=3)
    finally:  # found again without a list of our own, which would grow beside them
        for scorer in [obj for obj in gc.get_objects() if type(obj) is AtExitScorer]:
            atexit.unregister(scorer.close)
    assert report.verdict == "grows"
    assert report.holder and report.holder[0]["what"] == OUTSIDE, report.holder_missing
    assert "registered_callbacks" in (report.signature or {}).get("families", []), report.signature


QUEUED: list = []


def queue_call(value):
    def apply():
        value.add_(1)
    QUEUED.append((apply, "the stack where it was queued"))


def test_a_list_of_queued_calls_is_a_list_of_callbacks():
    """torch.cuda keeps (callback, stack) pairs until CUDA initialises: the closure's cell is not
    the root, the list that keeps the callbacks is."""
    def build():
        queue_call(torch.zeros(2))
        return _chain([QUEUED[-1][0].__closure__[0].cell_contents])
    chain = _frozen(build)
    QUEUED.clear()
    assert chain.found, chain.missing
    assert chain.links[0].name.endswith("test_holders.QUEUED") and _types(chain) == ["list", "tuple", "function", "Tensor"]
    decision = decide(Evidence(chain, "cpu_tensors", frozenset()))
    assert decision.families == ("registered_callbacks",) and "QUEUED" in decision.why


@functools.cache
def cached_thing(key):
    return Thing()


@functools.lru_cache(maxsize=16)
def bounded_thing(key):
    return Thing()


def test_a_dict_inside_an_lru_cache():
    chain = _frozen(lambda: _chain([cached_thing(("shape", 3))]))
    cached_thing.cache_clear()
    assert chain.found, chain.missing
    assert chain.links[0].what == "lru_cache (maxsize=None)" and chain.links[0].name.endswith("cached_thing")
    assert _types(chain)[0] == "_lru_cache_wrapper (maxsize=None)" and _types(chain)[-1] == "Thing"
    decision = decide(Evidence(chain, "python_objects", frozenset()))
    assert decision.families == ("cache_by_argument",) and decision.bounded is None
    bounded = _frozen(lambda: _chain([bounded_thing(("shape", 4))]))
    bounded_thing.cache_clear()
    assert "maxsize=16" in decide(Evidence(bounded, "python_objects", frozenset())).bounded


NET = None


def test_a_hook_dict():
    global NET
    NET = torch.nn.Linear(2, 2)

    def build():
        NET.register_forward_hook(functools.partial(print))
        return _chain([list(NET._forward_hooks.values())[-1]])

    try:
        chain = _frozen(build)
    finally:
        NET = None
    assert chain.found, chain.missing
    assert chain.links[0].name.endswith("test_holders.NET") and chain.links[0].kind == "module"
    assert [link.name for link in chain.links[1:]] == ["._forward_hooks", "[*]"]
    assert _types(chain) == ["Linear", "OrderedDict", "partial"]
    assert decide(Evidence(chain, "python_objects", frozenset())).families == ("registered_callbacks",)


def test_a_huge_graph_stops_in_time_and_says_so():
    # What grew sits at the bottom of 200,000 nested lists held only by this frame (never a root):
    # an unbounded walk would scan every object once per level, for minutes.
    thing = Thing()
    node = [thing]
    for _ in range(200_000):
        node = [node]
    scan = time.perf_counter()
    gc.get_referrers(thing)  # one scan of every object, as each level of the walk makes
    scan = time.perf_counter() - scan
    gc.collect()
    gc.freeze()
    try:
        start = time.perf_counter()
        chain = holder_chain([thing], seconds=0.05, max_depth=10**9, max_objects=10**9)
        elapsed = time.perf_counter() - start
    finally:
        gc.unfreeze()
    assert not chain.found and chain.missing.startswith("not found in time"), chain
    assert elapsed < 0.05 + 10 * scan, f"the walk took {elapsed:.3f} s, one scan {scan:.4f} s"
    assert decide(Evidence(chain, "python_objects", frozenset())).families == ()
    del node


def test_nothing_that_python_can_see():
    chain = _frozen(lambda: _chain([Thing()]))  # held by nothing but the walk's own list
    assert not chain.found and "cannot see" in chain.missing


def test_a_watched_loop_names_its_own_list():
    import leaklab

    history = []
    with leaklab.watch(warmup=3, steps=30) as w:
        for _ in range(33):
            history.append(torch.zeros(256))
            w.step()
    report = w.report
    assert report.verdict == "grows", report.summary()
    assert report.holder and report.holder[0]["name"] == "test_a_watched_loop_names_its_own_list(): history"
    assert [link["kind"] for link in report.holder] == ["container", "tensor"]
    assert "held by test_a_watched_loop_names_its_own_list(): history (list)" in report.summary()
    assert report.to_json()["holder"] == report.holder


USER_LOOP = """
import torch
import leaklab


def loop():
    history = []
    with leaklab.watch(warmup=3, steps=30) as w:
        for _ in range(33):
            history.append(torch.zeros(256))
            w.step()
    return w.report
"""


def test_a_users_code_in_a_folder_named_like_the_tool_is_still_the_users(tmp_path, monkeypatch):
    """A project (or a clone of this repository) in a folder named ``leaklab``: its frames are the
    user's roots, not the tool's own (the tool's are its package's files, not any path with a
    folder of that name); before, a newcomer's clone named the holder of nothing."""
    from leaklab import holders
    from leaklab.scripts import load_script

    name_holder = holders.name_holder  # the path the walk takes, not its time budget (as above)
    monkeypatch.setattr(holders, "name_holder", lambda *args, **kwargs: name_holder(*args, **{**kwargs, "seconds": WALK_SECONDS}))
    script = tmp_path / "leaklab" / "user_loop.py"
    script.parent.mkdir()
    script.write_text(USER_LOOP)
    report = load_script(script).loop()
    assert report.verdict == "grows"
    assert report.holder and report.holder[0]["name"] == "loop(): history", report.holder_missing


def _sleep() -> None:
    time.sleep(30)


def test_child_processes_are_named_by_what_owns_them_a_loaders_iterator_or_the_steps_own():
    """Round 7: growth in child processes was 'a DataLoader's workers or the step's own processes'
    with nothing to tell them apart; the objects that own the children do (a Manager's server, a
    process of the step's own, a DataLoader iterator's workers)."""
    import multiprocessing

    from leaklab.holders import children_holder

    context = multiprocessing.get_context("fork")
    helpers = []
    loader = torch.utils.data.DataLoader(list(range(64)), batch_size=4, num_workers=1)
    batches = iter(loader)

    def step():
        return helpers, batches

    helpers.append(context.Process(target=_sleep, daemon=True))
    helpers[0].start()
    next(batches)
    try:
        own = children_holder([helpers[0].pid], step)
        workers = children_holder([worker.pid for worker in batches._workers], step)
    finally:
        helpers[0].terminate()
        helpers[0].join()
        batches._shutdown_workers()
    assert own.found and "helpers" in own.links[0].name
    assert decide(Evidence(own, "worker_memory", frozenset({"worker_memory"}))).families == ("processes",)
    assert workers.found and any("torch.utils.data" in link.type for link in workers.links)
    assert decide(Evidence(workers, "worker_memory", frozenset({"worker_memory"}))).families == ("dataloader_workers",)
    assert not children_holder([2**22 + 7], step).found  # no Python object owns that pid


def test_a_graph_growing_in_a_buffer_of_a_callable_service_is_named():
    """kv_cache_keeps_request_graphs (round 8): a service object with ``__call__`` whose model
    writes graph-connected values into a persistent buffer; the walk went through objects' own
    attributes but not through a callable object's, so the graph was never seen."""
    import leaklab

    class Service:
        def __init__(self):
            self.proj = torch.nn.Linear(8, 8)
            self.proj.register_buffer("cache", torch.zeros(4, 8), persistent=False)

        def __call__(self, x):  # no torch.no_grad(): each call chains its graph onto the buffer's
            self.proj.cache[0] = self.proj(x)[0]
            return float(self.proj.cache.detach().sum())

    def make_step():
        service = Service()
        return lambda: service(torch.ones(1, 8))

    report = leaklab.check(make_step(), steps=12, warmup=3)
    assert report.verdict == "grows"
    assert report.holder and report.holder[-1]["kind"] == "graph", report.holder_missing
    assert any(link["name"].endswith(".service") for link in report.holder)


def test_a_persistent_loaders_workers_are_named_from_the_loader_not_from_multiprocessings_own_set():
    """A step that calls multiprocessing.active_children() reaches multiprocessing's own set of
    the children it started in two links; the walk named that set, not the DataLoader that keeps
    its iterator and its workers (persistent_workers_cache's own leak was called 'processes')."""
    from leaklab.holders import children_holder

    loader = torch.utils.data.DataLoader(list(range(64)), batch_size=4, num_workers=1, persistent_workers=True,
                                         multiprocessing_context="fork")

    def step():
        for _ in loader:
            pass
        return len(multiprocessing.active_children())

    step()
    try:
        chain = children_holder([worker.pid for worker in loader._iterator._workers], step)
    finally:
        loader._iterator._shutdown_workers()
    assert chain.found and chain.links[0].name.endswith(".loader"), chain
    assert [link.name for link in chain.links[1:]] == ["._iterator", "._workers", "[*]"]
    assert chain.links[1].type.endswith("(persistent_workers=True)")
    assert decide(Evidence(chain, "worker_memory", frozenset({"worker_memory"}))).rule == "_persistent_workers"


def test_the_chain_reaches_what_piles_up_not_what_each_step_replaces():
    """global_pruning_rounds_keep_masks (round 9): each pruning round recomputes every layer's
    weight (a tensor with a graph, nearest the step's roots, replaced every step) and adds a mask
    deeper down, in the layer's hook container. The walk started from the tensors with a graph,
    the recomputed weights, so the chain ended at ``.weight`` and named a list of layers a registry."""
    import leaklab

    class Masks:
        def __init__(self):
            self.kept = []

    def make_step():
        layers = [torch.nn.Linear(16, 16) for _ in range(2)]
        for layer in layers:
            layer.store = {"masks": Masks()}

        def step():
            for layer in layers:
                layer.store["masks"].kept.append(torch.ones(16, 16))  # piles up, three links deeper
                layer.current = layer.weight * 2                     # replaced every step, with a graph
        return step

    report = leaklab.check(make_step(), steps=12, warmup=3)
    assert report.verdict == "grows"
    assert report.holder, report.holder_missing
    assert [link["name"] for link in report.holder][-2:] == [".kept", "[*]"], report.holder


def test_the_walks_budget_is_its_own_work_not_the_time_a_busy_machine_takes(monkeypatch):
    """Each level of a walk up scans every object the collector tracks; beside busy processes
    that scan takes longer by the clock, and a gate run once left a thread's holder unnamed. The
    budget counts the walking thread's CPU time: a scan stretched to 0.3 s of waiting each leaves
    the walk (0.5 s budget) its holder."""
    import leaklab.holders as holders

    real = gc.get_referrers

    def slow_referrers(*objects):
        time.sleep(0.3)  # a machine too busy to run this thread, by the clock
        return real(*objects)

    def build():
        KEPT.append([Thing()])
        monkeypatch.setattr(holders.gc, "get_referrers", slow_referrers)
        try:
            return holder_chain([KEPT[-1][0]], seconds=0.5)
        finally:
            monkeypatch.setattr(holders.gc, "get_referrers", real)

    try:
        chain = _frozen(build)
    finally:
        KEPT.clear()
    assert chain.found, chain.missing
    assert _types(chain) == ["list", "list", "Thing"]


def _create_graph_step(keep_records: list | None = None):
    """A gradient penalty taken with backward(create_graph=True): every step's .grad carries a graph
    that refers back to its parameter, a cycle through C++ that nothing in Python holds (torch warns
    of it). ``keep_records``: a module global list that also gains an object every step."""
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    batch = torch.randn(16, 32)

    def step():
        loss = model(batch).pow(2).mean()
        loss.backward(create_graph=True)  # LEAK: each parameter's .grad keeps a graph back to it
        if keep_records is not None:
            keep_records.append(Thing())
    return step


def test_tensors_that_only_their_autograd_graphs_hold_are_a_cycle_through_a_graph():
    """hyperopt_runs_keep_create_graph_grads and four other held-out steps: every path up from the
    tensors that grew ends in C++ ("every path ends where Python cannot see"), and they carry graphs:
    the graphs keep them, a cycle through a graph (cyclic_garbage), not a registry nobody can name."""
    import warnings

    import leaklab

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own warning of this very cycle
        report = leaklab.check(_create_graph_step(), steps=12, warmup=3)
    assert report.verdict == "grows", report.summary()
    assert report.holder and report.holder[0]["what"] == "held only through autograd graphs", report.holder_missing
    assert report.holder[-1]["type"] == "torch.Tensor"
    decision = decide(Evidence(Chain([Link(**link) for link in report.holder]), "cpu_tensors", frozenset({"cpu_tensors"})))
    assert decision.families == ("cyclic_garbage",) and "cycle through a graph" in decision.why


def test_a_root_found_for_another_type_that_grew_comes_before_the_autograd_graphs():
    """The tensors held only by graphs are a last resort: where a module global also gains objects,
    the walk from those names the list (the step's closure variable that the global is passed as)."""
    import warnings

    import leaklab

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = leaklab.check(_create_graph_step(KEPT), steps=12, warmup=3)
    finally:
        KEPT.clear()
    assert report.verdict == "grows", report.summary()
    assert report.holder and report.holder[0]["name"].endswith("keep_records"), report.holder


def test_a_tensor_without_a_graph_that_nothing_in_python_holds_stays_unexplained():
    chain = _frozen(lambda: _chain([torch.zeros(4)]))  # held by nothing but the walk's own list
    assert not chain.found and "cannot see" in chain.missing


def test_where_models_pile_up_with_their_optimizers_the_walk_starts_from_their_parameters():
    """har_architecture_search_keeps_every_model and four other held-out steps: every trial's model
    and optimizer kept together. The optimizers' state tensors outnumber the parameters, and a walk
    from them named the optimizers as what the registry keeps (optimizer_rebuild); parameters are
    walked first, so the registry is one of models."""
    import leaklab
    from leaklab.signature import signature

    def make_step():
        trials = []

        def step():
            model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
            opt = torch.optim.Adam(model.parameters())
            loss = model(torch.randn(8, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            trials.append((model, opt))  # LEAK: every trial's model and optimizer kept
        return step

    report = leaklab.check(make_step(), steps=12, warmup=3)
    assert report.verdict == "grows", report.summary()
    assert report.holder[-1]["type"] == "torch.nn.parameter.Parameter", report.holder
    assert signature(report).kept == "module", report.holder


def test_parameters_a_model_holds_now_are_not_what_piles_up_when_they_are_replaced_every_step():
    """adam_state_keyed_by_replaced_params (round 10): every step replaces a layer's weight with a new
    Parameter and the optimizer keeps state keyed by each old one. Parameters grow, but the newest is
    the layer's current one (held by its own table): the walk goes on to the state that piles up."""
    import leaklab

    def make_step():
        layer = torch.nn.Linear(16, 16)
        opt = torch.optim.Adam(layer.parameters())

        def step():
            layer.weight = torch.nn.Parameter(layer.weight.detach().clone())  # replaced: a new Parameter
            opt.param_groups[0]["params"] = list(layer.parameters())
            loss = layer(torch.randn(4, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()  # LEAK: the state of every replaced weight stays keyed by it
        return step

    report = leaklab.check(make_step(), steps=12, warmup=3)
    assert report.verdict == "grows", report.summary()
    assert any(link["name"] == ".state" for link in report.holder), report.holder


def test_a_tensor_that_each_steps_values_are_joined_onto_is_named_as_a_container_of_tensors():
    """predictions_concat_on_device (round 2), chat_turns_extend_stored_activation_kv_cache (round 21):
    no object piles up, one kept tensor gets larger (``torch.cat`` onto it, under the same name);
    the check said "nothing grew that Python can see". A key/value cache extended in place is this
    too, not a cache by argument, though its holder is called a cache."""
    import leaklab
    from leaklab.signature import signature

    def make_step():
        class Memory:
            def __init__(self):
                self.kv_cache = {"doc": [torch.zeros(1, 64)]}

        memory = Memory()

        def step():
            layer = memory.kv_cache["doc"]
            layer[0] = torch.cat([layer[0], torch.randn(1, 64)])  # LEAK: the stored cache extended every turn
        return step

    report = leaklab.check(make_step(), steps=12, warmup=3)
    assert report.verdict == "grows", report.summary()
    assert report.holder, report.holder_missing
    assert [link["name"] for link in report.holder][-3:] == [".kv_cache", "['doc']", "[0]"], report.holder
    assert report.holder[-1]["what"].startswith("grown in size by 256 B/step"), report.holder
    assert signature(report).families == ("container_keeps_tensors",), report.summary()


def test_a_cache_that_gains_an_entry_in_most_steps_is_named():
    """qwen_image_rope_freqs_cached_per_output_size (round 21): a cache keyed by the output size
    gains an entry for every new size and none on a repeat; it gained in 8 of 10 steps, and the
    census, which asked for an item every step, named nothing."""
    import leaklab
    from leaklab.signature import signature

    def make_step():
        sizes = iter([1, 2, 2, 3, 4, 4, 5, 6, 7, 7, 8, 9, 10, 10, 11, 12, 13, 13, 14, 15, 16, 16, 17, 18] * 4)
        rope_cache = {}

        def step():
            size = next(sizes)
            if size not in rope_cache:
                rope_cache[size] = torch.randn(size, 64)  # LEAK: one entry per size, never evicted
            return rope_cache[size].sum()
        return step

    report = leaklab.check(make_step(), steps=12, warmup=3)
    assert report.verdict == "grows", report.summary()
    assert report.holder, report.holder_missing
    assert report.holder[-2]["name"].endswith("rope_cache"), report.holder
    assert signature(report).families == ("cache_by_argument",), report.summary()


def test_a_mutable_default_argument_is_named_by_its_parameter():
    """model_candidates_fit_with_shared_default_callbacks (round 21): ``def fit(self, callbacks=[])``
    appends a logger to the shared default on every call. The chain said ``fit (function) -> (list)``,
    and the family was a registry of objects; named by its parameter, it is a list of callbacks."""
    class Logger:
        pass

    def fit(model, epochs=1, callbacks=[]):  # noqa: B006 - the mistake under test
        callbacks.append(Logger())

    def build():
        fit(None)
        return holder_chain([fit.__defaults__[1][-1]], seconds=WALK_SECONDS,
                            seeds=[("local variable", "fit", fit)])

    chain = _frozen(build)
    assert chain.found, chain.missing
    assert [(link.what, link.name) for link in chain.links[1:]] == [("default argument", "callbacks"), ("grown", "[*]")], chain.links
    assert decide(Evidence(chain, "python_objects", frozenset({"python_objects"}))).families == ("registered_callbacks",)


def test_censuses_of_mappings_alone_leave_the_walk_standing():
    """aoti_runner_mapping_survives_unload (round 22): only mappings grew, so the censuses read no
    tensors, and the fallback to a tensor that got larger failed the walk ("the walk failed:
    AttributeError"), where nothing Python can see holds the growth."""
    from leaklab import growth
    from leaklab.holders import name_holder

    chain = name_holder(growth.Census(mappings={"a.so": 1}), growth.Census(mappings={"a.so": 9}), 8, step=lambda: None)
    assert chain is None or "walk failed" not in (chain.missing or ""), chain.missing


def test_a_function_wrapped_again_every_step_is_named_where_it_is_installed():
    """tenant_log_factory_wrapped_per_request (round 21), flops_profiler_functional_wrappers_stack
    (round 22): every step wraps the installed function again, each wrapper a closure over the one
    it replaced. Only cells and functions pile up; the walk from a cell named a closure variable and
    a global that happened to be None, and no family."""
    import types

    import leaklab
    from leaklab.signature import signature

    def make_step():
        api = types.SimpleNamespace(attention=lambda x: x * 2)

        def profile():
            old_fn = api.attention

            def counted(x):
                return old_fn(x)
            api.attention = counted  # LEAK: wraps the last wrapper; the original is never restored

        def step():
            profile()
            return float(api.attention(torch.ones(2)).sum())
        return step

    report = leaklab.check(make_step(), steps=12, warmup=3)
    assert report.verdict == "grows", report.summary()
    assert report.holder, report.holder_missing
    assert report.holder[-1]["what"] == "wrapped again every step" and report.holder[-1]["name"] == ".attention", report.holder
    assert signature(report).families == ("registered_callbacks",), report.summary()


def test_the_steps_current_tensor_is_not_what_piles_up_a_container_the_census_saw_gain_it_is():
    """rotary_cache_per_length (round 2): each step's tensor is kept in a cache by its length, and
    the newest is also the step's current one, one hop from a closure cell. The walk from the
    newest tensors named that cell (one tensor, no container: nothing that piles up); the census
    saw the cache gain a tensor every step, and that is the holder."""
    import leaklab

    def make_step():
        cache = {}
        current = None

        def step():
            nonlocal current
            current = torch.randn(len(cache) + 64)
            cache[len(cache)] = current
        return step

    report = leaklab.check(make_step(), steps=12, warmup=3)
    assert report.verdict == "grows"
    names = [link["name"] for link in report.holder or []]
    assert any(name.endswith("cache") for name in names), report.holder
    assert (report.signature or {}).get("families") == ["cache_by_argument"], report.signature
