"""Every rank's series as one (leaklab.ranks), on plain lists and reports, with no process group:
the records merged and named per rank, the policy's decision split back, the one answer."""

import dataclasses

import pytest

from leaklab import ranks
from leaklab import resources as known
from leaklab.report import EXIT_BOUNDED, EXIT_LEAK, EXIT_STEP_FAILED, Report, ResourceResult
from leaklab.verdict import (
    BOUNDED,
    CONFIRMATION,
    GROWS,
    LONG_PASS,
    MEASURED,
    WARMUP,
    Done,
    Filling,
    Pass,
    PlainData,
    Plan,
    Records,
    Trend,
    Verdicts,
    decide,
    format_bytes,
    near_floor,
    next_pass,
    records,
)

NAMES = ("cpu_tensors", "python_objects")
PLAN = Plan(steps=6)
LEAK = 25 * 1024  # bytes a step rank 1 keeps in the simulated runs


def rank_series(rank, start, count, leak_on):
    """What one rank reads over ``count`` readings from reading ``start`` on: flat, but the CPU
    tensors of ``leak_on`` grow by LEAK a step."""
    grows = LEAK if rank in leak_on else 0
    return {"cpu_tensors": [1000 + grows * (start + i) for i in range(count)],
            "python_objects": [5000] * count}


def run_policy(world, leak_on):
    """The merged policy driven to its verdicts, as rank 0 would on every rank's records; returns
    the decisions each rank ran (split) and the final merged verdicts."""
    readings = 0
    dones = [Done(WARMUP, rank_series(r, 0, 3, leak_on)) for r in range(world)]
    merged = [ranks.merge_done(dones)]
    watched = ranks.rank_resources([NAMES] * world)
    ran = []
    while not isinstance(decision := next_pass(merged, watched, PLAN), Verdicts):
        ran.append([ranks.split(decision, r) for r in range(world)])
        start, count = (0, decision.steps + 1) if decision.kind == MEASURED else (readings, decision.steps)
        dones = [Done(decision.kind, {name: values for name, values in rank_series(r, start, count, leak_on).items()
                                      if decision.kind != LONG_PASS or name in ran[-1][r].resources})
                 for r in range(world)]
        readings = start + count
        merged.append(ranks.merge_done(dones, decision.growing))
    return ran, decision


def test_names_carry_their_rank_and_read_back():
    assert ranks.rank_name("cpu_tensors", 1) == "cpu_tensors@rank1"
    assert ranks.parse("cpu_tensors@rank1") == ("cpu_tensors", 1)
    assert ranks.parse("cpu_tensors") == ("cpu_tensors", None)


def test_a_file_named_for_every_rank_gets_one_per_rank():
    assert ranks.rank_path("out/mem.pickle", 1) == "out/mem.rank1.pickle"
    assert ranks.rank_path("mem", 0) == "mem.rank0"
    assert ranks.rank_path(".hidden", 2) == ".hidden.rank2"


def test_every_ranks_resources_are_watched_under_their_own_names():
    watched = ranks.rank_resources([NAMES, NAMES])
    assert [r.name for r in watched] == ["cpu_tensors@rank0", "python_objects@rank0", "cpu_tensors@rank1",
                                         "python_objects@rank1"]
    assert watched[2].process == "rank1"  # growth on rank 0 is not beside it
    assert dataclasses.replace(watched[2], name="cpu_tensors", process="") == known.get("cpu_tensors")  # the same rule applies


def test_a_leak_on_one_rank_is_confirmed_there_and_every_rank_runs_the_same_passes():
    ran, verdicts = run_policy(2, leak_on={1})
    assert [[p.kind for p in passes] for passes in ran] == [[MEASURED, MEASURED], [CONFIRMATION, CONFIRMATION]]
    assert all(passes[0].steps == passes[1].steps for passes in ran)
    assert ran[1][1].growing == ("cpu_tensors",) and ran[1][0].growing == ()  # rank 1's census only
    mine = [ranks.split(verdicts, r) for r in range(2)]
    assert mine[1].trends["cpu_tensors"].verdict == "grows"
    assert mine[1].trends["cpu_tensors"].per_step_bytes == LEAK
    assert mine[0].trends["cpu_tensors"].verdict == "bounded"
    assert set(mine[0].trends) == set(NAMES) and mine[0].readings == mine[1].readings


def test_no_leak_anywhere_is_bounded_on_every_rank_without_a_confirmation():
    ran, verdicts = run_policy(2, leak_on=set())
    assert [[p.kind for p in passes] for passes in ran] == [[MEASURED, MEASURED]]
    assert {trend.verdict for trend in verdicts.trends.values()} == {"bounded"}


def test_a_stop_on_one_rank_stops_the_merged_pass_and_names_the_rank_that_passed_its_budget():
    flat = {"cpu_tensors": [0, 0, 0]}
    merged = ranks.merge_done([Done(MEASURED, flat, stopped=False, over_budget="cpu_tensors@rank1"),
                               Done(MEASURED, flat, stopped=True, over_budget="cpu_tensors")])
    assert merged.stopped and merged.over_budget == "cpu_tensors@rank1"
    assert set(merged.readings) == {"cpu_tensors@rank0", "cpu_tensors@rank1"}
    with pytest.raises(ValueError, match="different passes"):
        ranks.merge_done([Done(MEASURED, flat), Done(CONFIRMATION, flat)])


def test_a_long_pass_is_split_to_the_ranks_whose_series_it_watches():
    decision = Pass(LONG_PASS, 60, resources=("host_heap@rank1",), since=6)
    assert ranks.split(decision, 1) == Pass(LONG_PASS, 60, resources=("host_heap",), since=6)
    assert ranks.split(decision, 0) == Pass(LONG_PASS, 60, resources=(), since=6)  # runs the steps, reads nothing


def test_final_verdicts_are_split_with_what_is_uncertain_and_the_records_of_each_rank():
    trend = decide([0, 0, 0, 0], known.get("python_objects"))
    verdicts = Verdicts({"python_objects@rank0": trend, "python_objects@rank1": trend},
                        {"python_objects@rank0": [0] * 4, "python_objects@rank1": [0] * 4}, base=1, readings=4,
                        uncertain=("python_objects@rank1",), changed=(("python_objects@rank1", "grows", "bounded"),),
                        records=Records("+1 float/step in history", 32.0, 1000, ("python_objects@rank1",)))
    zero, one = ranks.split(verdicts, 0), ranks.split(verdicts, 1)
    assert set(zero.trends) == set(one.trends) == {"python_objects"}
    assert zero.uncertain == () and zero.changed == () and zero.records is None
    assert one.uncertain == ("python_objects",) and one.changed == (("python_objects", "grows", "bounded"),)
    assert one.records.resources == ("python_objects",)


def test_a_record_of_plain_data_covers_only_the_ranks_whose_census_found_it():
    history = PlainData("+1 float/step in history", 32.0, 1.0)
    smaller = PlainData("+1 float/step in history", 24.0, 1.0)
    done = lambda plain: Done(CONFIRMATION, {"python_objects": [0], "host_heap": [0]}, plain=plain)  # noqa: E731
    merged = ranks.merge_plain([done(history), done(smaller)])
    assert merged.bytes_per_step == smaller.bytes_per_step and "on ranks 0 and 1" in merged.what
    assert merged.covers == {"python_objects@rank0", "host_heap@rank0", "python_objects@rank1", "host_heap@rank1"}
    assert ranks.merge_plain([done(history), done(PlainData("+1 str/step in names", 32.0, 1.0))]) is None
    # debug_list_on_one_rank's fix: rank 1 keeps a float a step; rank 0, named for a heap that
    # then settled, found no record. Rank 1's record settles rank 1's objects, never rank 0's.
    one = ranks.merge_plain([done(None), done(history)])
    assert one.what.endswith("on rank 1") and one.covers == {"python_objects@rank1", "host_heap@rank1"}
    watched = ranks.rank_resources([("python_objects",), ("python_objects",)])
    rising, flat = Trend(GROWS, 1.0, 1.0, 20.0, 1.0), Trend(BOUNDED, 0.0, 0.0, 0.0, 1.0)
    assert records({"python_objects@rank0": flat, "python_objects@rank1": rising}, watched, one, PLAN).resources == (
        "python_objects@rank1",)
    assert records({"python_objects@rank0": rising, "python_objects@rank1": rising}, watched, one, PLAN) is None


def test_bounded_containers_are_filled_only_where_every_growing_rank_fills_one_until_the_slowest_is_full():
    done = lambda filling: Done(CONFIRMATION, {}, filling=filling)  # noqa: E731
    both = ("python_objects@rank0", "python_objects@rank1")
    fast, slow = Filling("history (a deque, maxlen 50)", 40), Filling("history (a deque, maxlen 200)", 190)
    merged = ranks.merge_filling([done(fast), done(slow)], both)
    assert merged.steps_to_full == slow.steps_to_full and "rank 0: " in merged.what and "rank 1: " in merged.what
    assert ranks.merge_filling([done(fast), done(None)], both) is None  # rank 1's growth is in no bounded container
    trend = decide([0, 1, 1, 1], known.get("python_objects"))
    verdicts = Verdicts({"python_objects@rank0": trend, "python_objects@rank1": trend},
                        {"python_objects@rank0": [0] * 4, "python_objects@rank1": [0] * 4}, base=1, readings=4,
                        filled=merged, fill_steps=200, fill_settled=("python_objects@rank1",))
    assert ranks.split(verdicts, 1).fill_settled == ("python_objects",) and ranks.split(verdicts, 1).filled == merged
    assert ranks.split(verdicts, 0).fill_settled == () and ranks.split(verdicts, 0).filled is None


# ----------------------------------------------------------------------------- the answer
def report(rank, samples, name="train.py:make_step", error=None, before=0):
    """A real report of one rank whose CPU tensors read ``samples`` (its verdict decided by the rule)."""
    resource = known.get("cpu_tensors")
    found = Report(device="cpu", steps=len(samples) - 1, warmup=1, name=name, error=error,
                   resources={} if error else {"cpu_tensors": ResourceResult("cpu_tensors", samples,
                                                                             decide(samples, resource), before)},
                   failed_step=3 if error else None, stage="measured" if error else None,
                   labels={"rank": rank, "world_size": 2})
    return found.to_json()


FLAT = [1000] * 7
GROWING = [1000 + LEAK * i for i in range(7)]


def test_the_answer_names_the_rank_that_grows_and_what_the_others_did():
    reports = [report(0, FLAT), report(1, GROWING)]
    line = ranks.answer(reports)
    assert line.startswith(f"grows on rank 1 of 2 (rank 0 bounded): cpu_tensors by {format_bytes(LEAK)}/step")
    assert ranks.merged_code(reports) == EXIT_LEAK
    both = ranks.answer([report(0, GROWING), report(1, GROWING)])
    assert both.startswith("grows on ranks 0 and 1 of 2: rank 0: cpu_tensors by")


def test_a_leak_on_one_rank_outranks_a_safety_stop_on_another():
    stopped = {**report(0, FLAT), "verdict": "stopped", "exit_code": EXIT_STEP_FAILED}
    reports = [stopped, report(1, GROWING)]
    assert ranks.merged_verdict(reports) == "grows" and ranks.merged_code(reports) == EXIT_LEAK
    assert ranks.answer(reports).startswith("grows on rank 1 of 2 (rank 0 stopped)")
    assert ranks.merged_code([stopped, report(1, FLAT)]) == EXIT_STEP_FAILED


def test_a_level_held_by_one_rank_is_a_skew_not_growth():
    level = 4 * known.get("cpu_tensors").plateau_min  # well past the smallest cache
    reports = [report(0, [1000 + level] * 7), report(1, FLAT)]
    line = ranks.answer(reports)
    assert line.startswith("bounded on every rank (2)")
    assert f"level skew, not growth: rank 0 holds {format_bytes(level + 1000)} of cpu_tensors" in line
    assert ranks.merged_code(reports) == EXIT_BOUNDED
    assert ranks.skew([report(0, [1000 + level // 8] * 7), report(1, FLAT)]) == []  # under a cache's worth
    assert ranks.skew([report(0, FLAT), report(1, FLAT)]) == []


def test_a_failed_step_is_named_on_the_rank_it_failed_on_first():
    reports = [report(0, FLAT, error="PeerFailed: rank 1 of 2 failed there"),
               report(1, FLAT, error="RuntimeError: bad batch")]
    line = ranks.answer(reports, origin=1)
    assert line == ("the step failed on rank 1 of 2 at measured step 3: RuntimeError: bad batch; "
                    "the check ended on every rank")
    assert ranks.merged_code(reports) == EXIT_STEP_FAILED


def test_the_launcher_takes_the_code_the_ranks_answered_and_names_a_rank_killed_before_it():
    assert ranks.launcher_code({}, 2) == (EXIT_BOUNDED, None)
    assert ranks.launcher_code({1: 1, 0: -15}, 2) == (EXIT_LEAK, None)  # rank 0 stopped after answering
    code, line = ranks.launcher_code({1: -9}, 2)
    assert code == EXIT_STEP_FAILED and line.startswith("rank 1 of 2 was ended by signal 9")


def test_a_heap_near_its_floor_on_one_rank_is_not_beside_a_leak_on_another():
    """``near_floor`` sends a noisy heap through the long pass, decided there without its floor,
    only beside growth in the same process: rank 1's kept tensors are not beside rank 0's heap (a
    2-rank gloo check read rank 0's heap growing at 223 B a step that way, with rank 0 keeping
    nothing). In one process the same series are beside each other."""
    from tests.test_passes import FABRIC_HEAP_STEPS

    heap = [80_000_000]
    for move in FABRIC_HEAP_STEPS[:20]:
        heap.append(heap[-1] + move)
    tensors = [1000 + LEAK * i for i in range(21)]
    watched = ranks.rank_resources([("cpu_tensors", "host_heap")] * 2)
    trends = {f"host_heap{ranks.SEPARATOR}0": decide(heap, known.get("host_heap")),
              f"cpu_tensors{ranks.SEPARATOR}0": decide([1000] * 21, known.get("cpu_tensors")),
              f"host_heap{ranks.SEPARATOR}1": decide([heap[0]] * 21, known.get("host_heap")),
              f"cpu_tensors{ranks.SEPARATOR}1": decide(tensors, known.get("cpu_tensors"))}
    assert near_floor(trends, watched) == []
    same_rank = {**trends, f"cpu_tensors{ranks.SEPARATOR}0": trends[f"cpu_tensors{ranks.SEPARATOR}1"]}
    assert near_floor(same_rank, watched) == [f"host_heap{ranks.SEPARATOR}0"]
