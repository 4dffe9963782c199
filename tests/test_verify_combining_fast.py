"""The compiled combining check against the replay: the same verdict on every schedule.

``verify`` decides a big combining schedule with
:func:`~ccplan.schedule.verify_combining_fast.verify_combining_columns` first and replays
(:func:`~ccplan.schedule.combining.verify_combining`) only when that finds something; so the
property that matters is that the compiled pass accepts exactly the schedules the replay
accepts, with the same makespan and the same arrivals. Checked here on the schedules of
several engines (trees-allreduce, the reversal of data-movement engines, the reduction trees
of ``trees``, hier-allreduce, exact-combining, ring) on built-in and random fabrics, with
in-switch reduction on and off, and on mutations of every one of them (a send a slot earlier
or later, dropped, duplicated, its reduce flag flipped, moved onto a switch's partial sum, a
second chunk on a used link-slot, single-port, an outage, an unknown chunk, a missing link).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from ccplan.contract import SolveOptions
from ccplan.errors import CCPlanError
from ccplan.instances import builtin as bt
from ccplan.instances import make_instance
from ccplan.instances.combining import make_combining
from ccplan.instances.instance import Instance
from ccplan.pipeline import get_engine
from ccplan.schedule import verify_combining_fast as fast
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.report import occupancy_overloads
from ccplan.schedule.verify import ArrivalMap, verify
from tests.test_combining_exact import random_combining
from tests.test_combining_reversal import random_instance
from tests.test_hier_allreduce import two_stars
from tests.test_trees_allreduce import mini_amd

QUICK = SolveOptions(time_limit=20, workers=1, extra={"effort": "quick", "flow_bound": False})


def _inst(topo, kind: str, chunks: int = 1, size: str = "1MB", **kw: object) -> Instance:  # type: ignore[no-untyped-def]
    inst = make_instance(topo, make_combining(kind, topo, chunks=chunks), size)
    return replace(inst, **kw) if kw else inst


def _schedules() -> list[tuple[str, Instance, Schedule]]:
    """Valid (or at least engine-made) combining schedules of several engines."""
    cases: list[tuple[str, Instance]] = []
    for kind in ("allreduce", "reducescatter", "reduce"):
        cases += [
            (f"ring4/{kind}", _inst(bt.ring(4), kind, 2)),
            (f"dgx1/{kind}", _inst(bt.dgx1(), kind, 2)),
            (f"mini-amd/{kind}", _inst(mini_amd(), kind, 2, "1GB")),
            (f"star4/{kind}", _inst(bt.star_switch(4), kind, 1)),
            (f"star4-reducing/{kind}", _inst(bt.star_switch(4), kind, 1, switch_reduce=True)),
            (f"leaf-spine/{kind}", _inst(bt.leaf_spine(2, 2, 2), kind, 1)),
        ]
    cases.append(("dgx2x2/allreduce", _inst(bt.dgx2(2), "allreduce", 1, "1GB")))
    # cut-through switches: hops from a switch into a GPU of L = delta (0 at alpha 0)
    for kind in ("allreduce", "reducescatter", "reduce"):
        cases += [
            (f"cut/{name}", inst.with_switch_model("cut-through"))
            for name, inst in cases
            if name.endswith(f"/{kind}")
            and name.split("/")[0] in ("star4", "star4-reducing", "leaf-spine", "mini-amd")
        ]
    cut_stars = _inst(two_stars(), "allreduce", 2, "1GB", switch_model="cut-through")
    cases.append(("cut/two-stars/allreduce", cut_stars))
    kinds = ("reducescatter", "allreduce", "reduce")
    for seed in (0, 1, 2, 4, 5):
        cases.append((f"rev{seed}", random_instance(seed, kinds[seed % 3])))
    engines = ("trees-allreduce", "trees", "hier-allreduce", "mteg", "ring")
    out = []
    for name, inst in cases:
        for method in engines:
            try:
                outcome = get_engine(method)(inst, QUICK)
            except CCPlanError:
                continue  # the engine does not take this collective or fabric
            if outcome.schedule is not None and len(outcome.schedule):
                out.append((f"{name}/{method}", inst, outcome.schedule))
    for seed in (2, 4, 5, 6, 8):  # small instances the exact model certifies in about a second
        inst = random_combining(seed)
        outcome = get_engine("exact-combining")(inst, QUICK)
        if outcome.schedule is not None and len(outcome.schedule):
            out.append((f"exact{seed}", inst, outcome.schedule))
    return out


@pytest.fixture(scope="module")
def schedules() -> list[tuple[str, Instance, Schedule]]:
    return _schedules()


def _mutants(inst: Instance, sched: Schedule, rng: random.Random) -> list[tuple[str, Instance, Schedule]]:
    """Corruptions of a schedule, and stricter (or looser) instances for it."""
    sends = list(sched.sends)
    topo = inst.topology
    switches = set(topo.switches)
    out: list[tuple[str, Instance, Schedule]] = []

    def edit(name: str, new: list[Send], instance: Instance = inst) -> None:
        out.append((name, instance, Schedule(tuple(new), method=sched.method)))

    def at(i: int, send: Send) -> list[Send]:
        return [*sends[:i], send, *sends[i + 1 :]]

    for _ in range(3):
        i = rng.randrange(len(sends))
        edit("drop", sends[:i] + sends[i + 1 :])
    for delta in (-1, 1, -2, 2, -1, 1):
        i = rng.randrange(len(sends))
        s = sends[i]
        if s.slot + delta >= 0:
            edit(f"slot{delta:+d}", at(i, replace(s, slot=s.slot + delta)))
    for _ in range(2):
        s = sends[rng.randrange(len(sends))]
        edit("duplicate", [*sends, s])
        edit("duplicate later", [*sends, replace(s, slot=s.slot + 1 + rng.randrange(3))])
    for _ in range(3):
        i = rng.randrange(len(sends))
        edit("flip reduce", at(i, replace(sends[i], reduce=not sends[i].reduce)))
    # onto a switch's partial sum: a send redirected into a switch next to its sender, as a reduce
    for i in rng.sample(range(len(sends)), min(4, len(sends))):
        s = sends[i]
        into = [lk.dst for lk in topo.links if lk.src == s.src and lk.dst in switches and lk.dst != s.dst]
        if into:
            edit("onto a switch", at(i, replace(s, dst=rng.choice(into), reduce=True)))
            edit("onto a reducing switch", at(i, replace(s, dst=rng.choice(into), reduce=True)),
                 replace(inst, switch_reduce=True))
    # a second chunk on a used link-slot: capacity broken with omega = 1, not with 2
    s = sends[rng.randrange(len(sends))]
    other = [c for c in inst.collective.chunk_ids if c != s.chunk]
    if other:
        bumped = [*sends, replace(s, chunk=rng.choice(other))]
        edit("second chunk on a link-slot", bumped)
        edit("second chunk, capacity 2", bumped, replace(inst, capacity=2))
        edit("other chunk", at(sends.index(s), replace(s, chunk=rng.choice(other))))
    # in-switch reduction switched on or off for the same sends
    edit("switch-reduce toggled", sends, replace(inst, switch_reduce=not inst.switch_reduce))
    edit("single-port", sends, replace(inst, single_port=True))
    edit("outage hit", sends, make_instance(
        topo, inst.collective, inst.size_bytes, single_port=inst.single_port,
        outages=[*inst.outages, (s.src, s.dst, s.slot)], switch_reduce=inst.switch_reduce))
    edit("unknown chunk", [*sends, replace(s, chunk=(10_000, 0))])
    missing = [v for v in topo.node_ids if v != s.src and (s.src, v) not in topo.link_index]
    if missing:
        edit("no link", at(sends.index(s), replace(s, dst=missing[0])))
    edit("unsorted node id", at(sends.index(s), replace(s, dst=10**6)))
    edit("unchanged", sends)
    return out


def _agree(name: str, inst: Instance, sched: Schedule) -> bool:
    """Assert the compiled pass's verdict is the replay's; return the replay's ``ok``."""
    ref = verify(inst, sched, fast=False)
    got = fast.verify_combining_columns(inst, sched)
    if not fast.combining_check_applies(inst):
        assert got is None, name
        return ref.ok
    if got is None:
        assert not ref.ok, f"{name}: the replay accepts what the compiled pass rejects"
    else:
        assert ref.ok, f"{name}: the compiled pass accepts what the replay rejects: {ref.violations[:1]}"
        assert got.ok and not got.violations
        assert got.makespan_slots == ref.makespan_slots, name
        assert got.makespan_us == ref.makespan_us, name
        assert got.num_sends == ref.num_sends
        assert dict(got.arrivals) == dict(ref.arrivals), name
    return ref.ok


def test_the_sample_holds_what_the_rules_distinguish(schedules) -> None:  # type: ignore[no-untyped-def]
    """The engines' schedules cover every combining collective, every engine above, sums added
    at switches that may reduce, single-port, outages and ``l > 1``."""
    names = [name for name, _, _ in schedules]
    assert len(schedules) >= 40
    for part in ("trees-allreduce", "/trees", "hier-allreduce", "mteg", "exact", "reduce/", "reducescatter/"):
        assert any(part in n for n in names), part
    assert any(i.single_port for _, i, _ in schedules)
    cut = [(i, sch) for _, i, sch in schedules if i.bufferless]
    assert len(cut) >= 10
    # sends out of a cut-through switch over a hop of L = 0 (read and applied in one slot)
    assert any(
        int(i.latency[i.topology.link_index[(s.src, s.dst)]]) == 0 for i, sch in cut for s in sch.sends
    )
    assert any(i.outages for _, i, _ in schedules)
    assert any(int(i.occupancy.max()) > 1 for _, i, _ in schedules)
    # some schedules add two partial sums at a switch: valid only with in-switch reduction
    sums = [name for name, i, sch in schedules
            if i.switch_reduce and not verify(replace(i, switch_reduce=False), sch, fast=False).ok]
    assert len(sums) >= 3


def test_agrees_with_the_replay_on_engine_schedules(schedules) -> None:  # type: ignore[no-untyped-def]
    accepted = sum(_agree(name, inst, sched) for name, inst, sched in schedules)
    assert accepted >= len(schedules) - 2  # the engines' schedules are valid (a check on the sample)


def test_agrees_with_the_replay_on_mutations(schedules) -> None:  # type: ignore[no-untyped-def]
    """Both ways: never accepts what the replay rejects, accepts all it accepts. Both verdicts
    occur often (a mutation such as a drop in an AllReduce is rejected; a slot shifted later
    in a slack part, or capacity 2, is accepted)."""
    rng = random.Random(25)
    verdicts = {True: 0, False: 0}
    kinds: dict[str, set[bool]] = {}
    for name, inst, sched in schedules:
        for what, minst, msched in _mutants(inst, sched, rng):
            ok = _agree(f"{name}: {what}", minst, msched)
            verdicts[ok] += 1
            kinds.setdefault(what, set()).add(ok)
    assert verdicts[True] >= 100 and verdicts[False] >= 300, verdicts
    for what in ("drop", "duplicate", "flip reduce", "onto a switch", "second chunk on a link-slot",
                 "switch-reduce toggled", "single-port", "outage hit"):
        assert False in kinds[what], what  # each mutation kind broke a rule somewhere


def test_rejections_name_each_rule() -> None:
    """Hand-built schedules, each breaking one replay rule (the kind the replay reports); the
    compiled pass returns None on each and accepts the valid original with its makespan.

    ReduceScatter on the line 0 - 1 - 2, C = 1, 1 MB: every link has ``L = 2``, ``l = 1``;
    chunk (g, 0) must end at GPU g with all three contributions. Valid: 0 -> 1 and 2 -> 1
    reduce chunk 1 at slot 0 (complete at 1 from slot 2); 2 -> 1 reduces chunk 0 at slot 1
    (link 2 -> 1 is busy at 0), 1 -> 0 reduces {1, 2} into 0 at slot 3 (complete from 5);
    chunk 2 symmetrically (0 -> 1 at 1, 1 -> 2 at 3). Makespan 5.
    """
    topo = bt.line(3)
    inst = _inst(topo, "reducescatter", 1)
    assert set(inst.latency.tolist()) == {2} and set(inst.occupancy.tolist()) == {1}
    valid = [
        Send(0, (1, 0), 0, 1, True), Send(0, (1, 0), 2, 1, True),
        Send(1, (0, 0), 2, 1, True), Send(3, (0, 0), 1, 0, True),
        Send(1, (2, 0), 0, 1, True), Send(3, (2, 0), 1, 2, True),
    ]
    assert verify(inst, Schedule(tuple(valid)), fast=False).makespan_slots == 5
    got = fast.verify_combining_columns(inst, Schedule(tuple(valid)))
    assert got is not None and got.makespan_slots == 5
    broken = {
        # 1 sends chunk 0 on at slot 2, before 2's part arrives (slot 3): 0 ends without it
        "postcondition": [*valid[:3], Send(2, (0, 0), 1, 0, True), *valid[4:]],
        # 0's own part of chunk 1 again into 1's complete sum
        "double-count": [*valid, Send(2, (1, 0), 0, 1, True)],
        # an incomplete copy over 1's complete, never sent on, chunk 1
        "copy-overwrite": [*valid, Send(2, (1, 0), 0, 1, False)],
        # 1 copies its complete chunk 1 to 0 (fine), 0 copies it back onto 1's complete one
        "duplicate-receive": [*valid, Send(2, (1, 0), 1, 0, False), Send(4, (1, 0), 0, 1, False)],
        # a second chunk on link 0 -> 1 in slot 0
        "capacity": [*valid, Send(0, (2, 0), 0, 1, True)],
    }
    # star of GPUs 0, 1 around switch 2, Reduce to GPU 0
    star = bt.star_switch(2)
    sinst = _inst(star, "reduce", 1)
    sw = star.switches[0]
    cases = [(inst, kind, sends) for kind, sends in broken.items()] + [
        # both GPUs reduce into the switch in the same slot: it would add two partial sums
        (sinst, "switch-reduce", [Send(0, (0, 0), 0, sw, True), Send(0, (0, 0), 1, sw, True)]),
        # the switch sends before anything reached it
        (sinst, "causality", [Send(0, (0, 0), sw, 0, True), Send(0, (0, 0), 1, sw, True)]),
    ]
    for instance, kind, sends in cases:
        sched = Schedule(tuple(sends))
        kinds = {v.kind for v in verify(instance, sched, fast=False).violations}
        assert kind in kinds, (kind, kinds)
        assert fast.verify_combining_columns(instance, sched) is None, kind


def test_more_than_64_contributors_use_several_words() -> None:
    """Ring of 70 GPUs: a contribution set needs two 64-bit words. The ring AllReduce (and
    mutations of it) get the replay's verdict and makespan."""
    inst = _inst(bt.ring(70), "allreduce", 1)
    outcome = get_engine("ring")(inst, QUICK)
    assert outcome.schedule is not None
    sched = outcome.schedule
    assert _agree("ring70", inst, sched)
    rng = random.Random(70)
    results = [_agree(f"ring70: {what}", i, s) for what, i, s in _mutants(inst, sched, rng)]
    assert not all(results) and any(results)


def test_verify_uses_the_compiled_pass_for_big_combining_schedules() -> None:
    """AllReduce on a ring of 70 GPUs at C = 1 through ``trees-allreduce``/``ring``: more sends
    than ``COMBINING_FAST_MIN_SENDS``, and a schedule kept as columns always, take the compiled
    pass (its Report's arrivals are an ArrivalMap; the replay's a dict)."""
    inst = _inst(bt.ring(70), "allreduce", 2)
    sched = get_engine("ring")(inst, QUICK).schedule
    assert sched is not None and len(sched) >= fast.COMBINING_FAST_MIN_SENDS
    report = verify(inst, sched)
    assert report.ok and isinstance(report.arrivals, ArrivalMap)
    assert not isinstance(verify(inst, sched, fast=False).arrivals, ArrivalMap)
    cols = sched.columns()
    names = ("slot", "chunk_source", "chunk_index", "src", "dst")
    kept = Schedule.from_columns(**{k: cols[k] for k in names}, reduce=cols["reduce"])
    assert isinstance(verify(inst, kept).arrivals, ArrivalMap)
    small = Schedule(sched.sends[:10])  # broken and small: the replay words it
    assert not verify(inst, small).ok


def test_without_numba_the_replay_decides(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    inst = _inst(mini_amd(), "allreduce", 2, "1GB")
    sched = get_engine("trees-allreduce")(inst, QUICK).schedule
    assert sched is not None
    assert fast.verify_combining_columns(inst, sched) is not None

    def no_numba() -> None:
        raise ImportError("numba")

    monkeypatch.setattr(fast, "_kernel", no_numba)
    assert fast.verify_combining_columns(inst, sched) is None
    assert verify(inst, sched).ok  # the replay decides


@pytest.mark.parametrize("spread", [1, 10_000])
def test_overload_counting_dense_and_sparse(spread: int) -> None:
    """``occupancy_overloads`` counts (link, slot) pairs by ``bincount`` when the pairs are
    dense and by ``np.unique`` when sparse (slots spread ``spread`` apart); both give what a
    plain count of the pairs gives: every pair used more than ``omega = 1`` times, in link
    then slot order."""
    inst = _inst(bt.ring(4), "allreduce", 1)
    rng = np.random.default_rng(spread)
    links = rng.integers(0, inst.topology.num_links, 400)
    slots = rng.integers(0, 60, 400) * spread
    srcs = np.array([inst.topology.links[j].src for j in links])
    dsts = np.array([inst.topology.links[j].dst for j in links])
    found = occupancy_overloads(inst, links, slots, srcs, dsts, with_sends=False)
    got = [(kind, j, t) for kind, j, t, _ in found]
    count = Counter(zip(links.tolist(), slots.tolist(), strict=True))
    want = sorted((j, t) for (j, t), k in count.items() if k > 1)
    assert got == [("capacity", j, t) for j, t in want] and want
