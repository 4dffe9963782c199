"""The column verifier against the replay verifier: the same verdict on every schedule.

``verify`` decides with :func:`~ccplan.schedule.verify.verify_columns` first and replays only
when that finds something; so the property that matters is that the column verifier accepts
exactly the schedules the replay accepts. Checked here on schedules of every light engine on
built-in topologies and collectives, and on random mutations of them (a send dropped, moved
a slot, copied to a second receipt, put on another link, an outage on a used link-slot, a
second chunk on a link-slot, single-port), including the options the column verifier has to
respect (capacity 2, outages, single-port, occupancy > 1).
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from ccplan.contract import SolveOptions
from ccplan.errors import CCPlanError
from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance
from ccplan.instances.instance import Instance
from ccplan.pipeline import get_engine
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import ArrivalMap, verify, verify_columns

ENGINES = ("mteg", "layered", "cut-aware", "ring", "tree", "recursive-doubling", "pairwise", "hierarchical")
TOPOLOGIES = {
    "dgx1": bt.dgx1,
    "ndv2-2": lambda: bt.ndv2(2),
    "ring5": lambda: bt.ring(5),
    "torus3x4": lambda: bt.torus2d(3, 4),
    "mesh3": lambda: bt.mesh2d(3, 3),
    "star4": lambda: bt.star_switch(4),
    "leaf-spine": lambda: bt.leaf_spine(2, 2, 2),
    "hypercube3": lambda: bt.hypercube(3),
}
COLLECTIVES = ("allgather", "broadcast", "gather", "scatter", "alltoall")


def _schedules() -> list[tuple[str, Instance, Schedule]]:
    """Every engine that handles the case, on every topology and collective (C = 1, 1 GB),
    and the mixed-bandwidth NDv2 at 64 KB (occupancy > 1 on its slow links)."""
    out = []
    cases = [(t, c, "1GB") for t, c in itertools.product(TOPOLOGIES, COLLECTIVES)]
    cases += [("ndv2-2", "allgather", "64KB"), ("ndv2-2", "broadcast", "64KB")]
    for (tname, kind, size), method in itertools.product(cases, ENGINES):
        topo = TOPOLOGIES[tname]()
        inst = make_instance(topo, make_collective(kind, topo), size)
        try:
            outcome = get_engine(method)(inst, SolveOptions(time_limit=20))
        except CCPlanError:
            continue  # the engine does not implement this collective
        if outcome.schedule is not None and len(outcome.schedule):
            out.append((f"{tname}/{kind}/{size}/{method}", inst, outcome.schedule))
    return out


def _with(inst: Instance, **changes: object) -> Instance:
    topo = inst.topology
    kw: dict[str, object] = {
        "single_port": inst.single_port,
        "capacity": inst.capacity,
    }
    kw.update(changes)
    return make_instance(topo, inst.collective, inst.size_bytes, **kw)  # type: ignore[arg-type]


def _mutants(inst: Instance, sched: Schedule, rng: random.Random) -> list[tuple[str, Instance, Schedule]]:
    """Random corruptions of a (valid) schedule, and stricter instances for it."""
    sends = list(sched.sends)
    topo = inst.topology
    out: list[tuple[str, Instance, Schedule]] = []

    def pick() -> int:
        return rng.randrange(len(sends))

    def edit(name: str, new: list[Send], instance: Instance = inst) -> None:
        out.append((name, instance, Schedule(tuple(new), method=sched.method)))

    i = pick()
    edit("drop", sends[:i] + sends[i + 1 :])
    for delta in (-1, 1, -2):
        i = pick()
        s = sends[i]
        if s.slot + delta >= 0:
            moved = Send(s.slot + delta, s.chunk, s.src, s.dst)
            edit(f"slot{delta:+d}", [*sends[:i], moved, *sends[i + 1 :]])
    s = sends[pick()]
    edit("duplicate receipt", [*sends, Send(s.slot + 1 + rng.randrange(3), s.chunk, s.src, s.dst)])
    s = sends[pick()]
    others = [lk for lk in topo.links if lk.src == s.src and lk.dst != s.dst]
    if others:
        lk = rng.choice(others)
        edit("other link", [x if x is not s else Send(s.slot, s.chunk, lk.src, lk.dst) for x in sends])
    non_links = [(s.src, v) for v in topo.node_ids if v != s.src and (s.src, v) not in topo.link_index]
    if non_links:
        u, v = rng.choice(non_links)
        edit("no link", [x if x is not s else Send(s.slot, s.chunk, u, v) for x in sends])
    # a second chunk on a used link-slot (a capacity violation with omega = 1, not with 2)
    s = sends[pick()]
    extra = [c for c in inst.collective.chunk_ids if c != s.chunk and s.src in inst.collective.holders[c]]
    if extra:
        bumped = [*sends, Send(s.slot, rng.choice(extra), s.src, s.dst)]
        edit("second chunk on a link-slot", bumped)
        edit("second chunk, capacity 2", bumped, _with(inst, capacity=2))
    # an outage on a used link-slot, and one on an unused slot of that link
    s = sends[pick()]
    used = {x.slot for x in sends if (x.src, x.dst) == (s.src, s.dst)}
    edit("outage hit", sends, _with(inst, outages=[(s.src, s.dst, s.slot)]))
    free = next(t for t in itertools.count() if t not in used)
    edit("outage missed", sends, _with(inst, outages=[(s.src, s.dst, free)]))
    edit("single-port", sends, _with(inst, single_port=True))
    edit("unknown chunk", [*sends[:1], Send(s.slot, (10_000, 0), s.src, s.dst), *sends[1:]])
    edit("reduce", [Send(s.slot, s.chunk, s.src, s.dst, reduce=True) if x is s else x for x in sends])
    edit("unchanged", sends)
    return out


def test_column_verifier_agrees_with_the_replay() -> None:
    """Same verdict, makespan and (through the fallback) violations on every case; the
    column verifier answers exactly for the schedules the replay accepts."""
    rng = random.Random(14)
    cases = []
    for name, inst, sched in _schedules():
        cases.append((name, inst, sched))
        cases.extend((f"{name}/{what}", i, s) for what, i, s in _mutants(inst, sched, rng))
    verdicts = {True: 0, False: 0}
    for name, inst, sched in cases:
        replay = verify(inst, sched, fast=False)
        fast = verify_columns(inst, sched)
        assert (fast is not None) == replay.ok, name
        both = verify(inst, sched)
        assert both.ok == replay.ok and both.makespan_slots == replay.makespan_slots, name
        assert both.violations == replay.violations, name
        if fast is not None:
            assert fast.makespan_slots == replay.makespan_slots and fast.num_sends == replay.num_sends, name
            assert isinstance(fast.arrivals, ArrivalMap) and dict(fast.arrivals) == replay.arrivals, name
        verdicts[replay.ok] += 1
    # enough of both verdicts for the comparison to mean something
    assert len(cases) >= 500 and verdicts[True] >= 100 and verdicts[False] >= 200, verdicts


def test_column_verifier_on_a_built_schedule_from_columns() -> None:
    """A schedule kept as columns is verified without making its Send objects."""
    topo = bt.torus2d(4, 4)
    inst = make_instance(topo, make_collective("allgather", topo), "1GB")
    sched = get_engine("layered")(inst, SolveOptions()).schedule
    assert sched is not None
    cols = sched.columns()
    ints = {k: np.asarray(cols[k]) for k in cols if k != "reduce"}
    lazy = Schedule.from_columns(**ints, method=sched.method)
    report = verify(inst, lazy)
    assert report.ok and report.makespan_slots == verify(inst, sched, fast=False).makespan_slots
    assert "sends" not in lazy.__dict__
    # arrivals answer lookups like the replay's dict
    replay = verify(inst, sched, fast=False).arrivals
    for key in list(replay)[:50]:
        assert report.arrivals[key] == replay[key] and key in report.arrivals
    assert ((0, 0), 10_000) not in report.arrivals and len(report.arrivals) == len(replay)
    with pytest.raises(KeyError):
        report.arrivals[((99, 0), 0)]


@pytest.mark.parametrize("switch_model", ["cut-through"])
def test_column_verifier_leaves_cut_through_and_combining_to_the_replay(switch_model: str) -> None:
    topo = bt.star_switch(4)
    inst = make_instance(topo, make_collective("allgather", topo), "1GB", switch_model=switch_model)
    sched = get_engine("mteg")(inst, SolveOptions()).schedule
    assert sched is not None and verify_columns(inst, sched) is None and verify(inst, sched).ok
    comb = make_instance(bt.ring(4), make_collective("reducescatter", bt.ring(4)), "1GB")
    rs = get_engine("ring")(comb, SolveOptions()).schedule
    assert rs is not None and verify_columns(comb, rs) is None and verify(comb, rs).ok


def test_node_ids_far_beyond_the_topology_are_unknown_links() -> None:
    """A send naming a huge node id is a missing link, not a table as long as that id."""
    topo = bt.torus2d(3, 3)
    inst = make_instance(topo, make_collective("allgather", topo), "1GB")
    sched = Schedule((Send(0, (0, 0), 0, 10**12), Send(0, (0, 0), 10**13, 1)))
    assert verify_columns(inst, sched) is None
    report = verify(inst, sched)
    assert [v.kind for v in report.violations[:2]] == ["no-link", "no-link"]
