"""Tests of the heuristic engines: MTEGCCA (``mteg``), the layered constructor (``layered``)
and the portfolio (``heuristic``).

Every schedule is checked by the independent verifier and against
``ccplan.bounds.lower_bound_slots``; exact makespans are derived by hand in the docstrings.
Topologies with ``alpha_us = 0`` and one bandwidth make every link ``l = L = 1`` slot.
"""

from __future__ import annotations

import networkx as nx
import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import CCPlanError, ValidationError
from ccplan.heuristics.layered import LayeredOptions, layered_schedule
from ccplan.heuristics.mteg import (
    MtegOptions,
    Reservations,
    build_mteg,
    decompose,
    mteg_schedule,
    order_tasks,
)
from ccplan.heuristics.search import heuristic_search
from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance, make_topology
from ccplan.instances.catalog import COLLECTIVES
from ccplan.instances.instance import Instance
from ccplan.pipeline import get_engine
from ccplan.pipeline.solve import solve
from ccplan.schedule.core import Schedule
from ccplan.schedule.verify import verify

MTEG_VARIANTS = (
    MtegOptions(),
    MtegOptions(select="earliest"),
    MtegOptions(tree="chunk", interleave=True),
    MtegOptions(tree="all"),
    MtegOptions(order="random", seed=3, select="earliest"),
)


def _inst(topo, kind="allgather", size="1MB", chunks=1, **kw) -> Instance:  # type: ignore[no-untyped-def]
    coll_kw = {k: kw.pop(k) for k in ("root", "dests") if k in kw}
    return make_instance(topo, make_collective(kind, topo, chunks=chunks, **coll_kw), size, **kw)


def _all_schedules(inst: Instance) -> dict[str, Schedule]:
    """One schedule per engine/variant (heuristic with the fixed variants only: fast)."""
    out = {f"mteg[{o.label()}]": mteg_schedule(inst, o).schedule for o in MTEG_VARIANTS}
    out["layered"] = layered_schedule(inst)
    out["layered[seed=1]"] = layered_schedule(inst, LayeredOptions(seed=1, slack=1))
    best, _, _ = heuristic_search(inst, effort="quick")
    out["heuristic"] = best.schedule
    return out


def _check(inst: Instance) -> dict[str, int]:
    """Every method's schedule verifies and is not better than the lower bound."""
    bound = lower_bound_slots(inst)
    spans = {}
    for name, schedule in _all_schedules(inst).items():
        report = verify(inst, schedule)
        assert report.ok, f"{name}: {report.violations[:3]}"
        assert report.makespan_slots is not None
        assert report.makespan_slots >= bound, f"{name} beats the lower bound"
        spans[name] = report.makespan_slots
    return spans


def _flat(n: int, kind: str = "line"):  # type: ignore[no-untyped-def]
    factory = {"line": bt.line, "star": bt.star_switch}[kind]
    return factory(n, bandwidth_GBps=50.0, alpha_us=0.0)


# ----------------------------------------------------------------------------- coverage
SMALL = [
    ("ring6", lambda: bt.ring(6)),
    ("ring4-uni", lambda: bt.ring(4, bidirectional=False)),
    ("line4", lambda: bt.line(4)),
    ("star5", lambda: bt.star_switch(5)),
    ("dgx1", bt.dgx1),
    ("ndv2-2", lambda: bt.ndv2(2)),
]


@pytest.mark.parametrize("name,factory", SMALL, ids=[n for n, _ in SMALL])
@pytest.mark.parametrize("size", ["64KB", "1GB"])
def test_allgather_every_method_verifies(name, factory, size):  # type: ignore[no-untyped-def]
    _check(_inst(factory(), size=size))


_ROOTED = {"broadcast", "multicast", "gather", "scatter", "reduce"}
DATA_MOVEMENT = sorted(
    k for k in COLLECTIVES
    if not make_collective(k, bt.ring(4), root=1 if k in _ROOTED else None,
                           dests=(0, 2) if k == "multicast" else None).combining
)


@pytest.mark.parametrize("kind", DATA_MOVEMENT)
@pytest.mark.parametrize("topo_name", ["star4", "dgx1"])
def test_every_data_movement_collective(kind, topo_name):  # type: ignore[no-untyped-def]
    """Combining collectives (ReduceScatter, AllReduce, Reduce) are built from these by
    ``ccplan.pipeline.combining``; the engines here schedule the data-movement ones."""
    topo = bt.star_switch(4) if topo_name == "star4" else bt.dgx1()
    dests = (0, 2) if kind == "multicast" else None
    coll = make_collective(kind, topo, chunks=2, root=1 if kind in _ROOTED else None, dests=dests)
    _check(make_instance(topo, coll, "1MB"))


def test_multi_chunk_allgather_dgx1():  # type: ignore[no-untyped-def]
    _check(_inst(bt.dgx1(), chunks=2, size="1GB"))


def test_ndv2_four_chassis_switch_relays():  # type: ignore[no-untyped-def]
    """NDv2 x4 has one global switch that must relay every inter-chassis chunk."""
    inst = _inst(bt.ndv2(4), size="1GB")
    spans = _check(inst)
    assert len(spans) >= 3


def test_single_port_and_capacity_two():  # type: ignore[no-untyped-def]
    _check(_inst(bt.dgx1(), size="1MB", single_port=True))
    _check(_inst(bt.ring(5), size="1MB", capacity=2))


def test_outages_are_avoided():  # type: ignore[no-untyped-def]
    inst = _inst(bt.ring(4), size="1MB", outages=[(0, 1, 0), (0, 1, 1), (1, 2, 2), (3, 0, 0)])
    _check(inst)


# ----------------------------------------------------------------------------- exact values
def test_broadcast_line_single_chunk():  # type: ignore[no-untyped-def]
    """Broadcast from 0 on the line 0-1-2-3, L = 1 per hop: node 3 is three hops away, so
    D >= 3, and forwarding hop by hop achieves 3. Every method must find exactly 3."""
    spans = _check(_inst(_flat(4), "broadcast", root=0))
    assert set(spans.values()) == {3}


def test_broadcast_line_pipelines():  # type: ignore[no-untyped-def]
    """Broadcast of C = 3 chunks on the line 0-1-2-3 (L = 1): link 0->1 carries one chunk per
    slot, so the last chunk leaves node 0 at slot 2 at the earliest and needs 3 hops: D >= 5.
    Pipelining (chunk i leaves 0 at slot i and moves one hop per slot) achieves 5."""
    spans = _check(_inst(_flat(4), "broadcast", root=0, chunks=3))
    assert set(spans.values()) == {5}


def test_allgather_star_through_switch():  # type: ignore[no-untyped-def]
    """AllGather on 4 GPUs around a switch (L = 1): a GPU needs 3 chunks over its single
    in-link switch->GPU; the first can only arrive at slot 2 (two hops), then one per slot: D >= 4.
    Schedule: every GPU sends its chunk to the switch at slot 0; the switch sends the three
    other chunks to each GPU at slots 1, 2, 3 (arrivals 2, 3, 4): D = 4. The switch relays
    chunks it does not want."""
    spans = _check(_inst(_flat(4, "star"), size="1MB"))
    assert set(spans.values()) == {4}


def test_multicast_relays_through_non_destinations():  # type: ignore[no-untyped-def]
    """Multicast from 0 to {3} on the line 0-1-2-3: GPUs 1 and 2 want nothing but must relay;
    three hops of L = 1 give D = 3 exactly."""
    spans = _check(_inst(_flat(4), "multicast", root=0, dests=(3,)))
    assert set(spans.values()) == {3}


def test_outage_delays_broadcast():  # type: ignore[no-untyped-def]
    """Broadcast on the line 0-1-2 (L = 1) with link 0->1 out in slots 0 and 1: node 1 can get
    the chunk only by a send at slot 2 (arrival 3) and node 2 one slot later: D = 4."""
    inst = _inst(_flat(3), "broadcast", root=0, outages=[(0, 1, 0), (0, 1, 1)])
    spans = _check(inst)
    assert set(spans.values()) == {4}


def test_single_port_star():  # type: ignore[no-untyped-def]
    """AllGather on 3 GPUs around a switch with single-port nodes (L = 1): the switch must
    make 6 sends (2 chunks to each GPU), at most one per slot, and has nothing before slot 1,
    so its last send is at slot >= 6 and D >= 7; sending one chunk per slot from slot 1 on
    (GPUs feed the switch at slots 0, 1, 2) achieves 7. The portfolio must find 7."""
    inst = _inst(_flat(3, "star"), size="1MB", single_port=True)
    spans = _check(inst)
    assert min(spans.values()) == 7
    assert spans["heuristic"] == 7


def test_ring_allgather_optimum_found():  # type: ignore[no-untyped-def]
    """AllGather on a bidirectional ring of 4 (L = 1): the opposite node is two hops away, so
    D >= 2; slot 0 every node sends its chunk both ways, slot 1 node i sends chunk i-1 to node
    i+1 (only the opposite chunk is missing): D = 2. The portfolio stops at the bound."""
    inst = _inst(bt.ring(4, bandwidth_GBps=50.0, alpha_us=0.0), size="1MB")
    spans = _check(inst)
    assert spans["heuristic"] == 2


# ----------------------------------------------------------------------------- MTEG structure
def test_algorithm1_graph_counts():  # type: ignore[no-untyped-def]
    """Algorithm 1 on the line 0-1-2 (4 links, L = 1), AllGather C = 1, H = 2: vertices
    u_t for t = 0..H: 3*3 = 9; virtual U: every node and every chunk it lacks: 3*2 = 6.
    Storage edges for t <= H-1: 3*2 = 6; transmission edges with t + 1 <= 2: 4*2 = 8;
    virtual edges (u_t, U) for t = 0..H: 6*3 = 18."""
    g = build_mteg(_inst(_flat(3)), 2)
    kinds = [d["kind"] for _, _, d in g.edges(data=True)]
    assert g.number_of_nodes() == 15
    assert (kinds.count("storage"), kinds.count("transmission"), kinds.count("virtual")) == (6, 8, 18)


def test_mteg_path_cost_is_the_slot():  # type: ignore[no-untyped-def]
    """Every edge goes forward in time and costs the slot difference, so any reachable u_t
    is at distance exactly t from s_0 (the structure the implicit search relies on)."""
    inst = _inst(bt.dgx1(), size="1GB")
    h = 6
    g = build_mteg(inst, h)
    dist = nx.single_source_dijkstra_path_length(g, ("slot", 0, 0), weight="cost")
    for node, d in dist.items():
        if node[0] == "slot":
            assert d == node[2]


def test_first_tree_matches_mteg_shortest_paths():  # type: ignore[no-untyped-def]
    """The first task sees an empty MTEG, so with earliest-arrival selection every delivery of
    a Broadcast arrives at the networkx shortest-path distance from s_0 to the node's virtual
    terminal in the materialised Algorithm-1 graph."""
    inst = _inst(bt.dgx1(), "broadcast", size="1GB", root=0)
    result = mteg_schedule(inst, MtegOptions(select="earliest"))
    report = verify(inst, result.schedule)
    assert report.ok
    g = build_mteg(inst, 10)
    dist = nx.single_source_dijkstra_path_length(g, ("slot", 0, 0), weight="cost")
    for (chunk, node), slot in report.arrivals.items():
        if node != 0:
            assert slot == dist[("virtual", node, chunk)]


def test_decompose_and_order():  # type: ignore[no-untyped-def]
    """Step 1: AllGather gives one Broadcast task per source; Scatter one task whose chunks
    each have one target. Step 2: equal sizes keep source order; 'reverse' reverses it."""
    topo = bt.ring(4)
    tasks = decompose(_inst(topo, chunks=2))
    assert [t.roots for t in tasks] == [(0,), (1,), (2,), (3,)]
    assert all(len(t.chunks) == 2 and t.deliveries == 6 for t in tasks)
    assert [t.roots for t in order_tasks(tasks, MtegOptions(order="reverse"))] == [(3,), (2,), (1,), (0,)]
    scatter = decompose(_inst(topo, "scatter", root=0))
    assert len(scatter) == 1 and all(len(t) == 1 for t in scatter[0].targets)


def test_reservations_windows_and_release():  # type: ignore[no-untyped-def]
    """An l = 4 link (12.5 GB/s next to 50 GB/s) busy in slots 2..5 only admits starts whose
    window [t, t+3] avoids them: 0..1 are too close, so the first start >= 0 is 6; releasing
    the send frees slot 0 again."""
    topo = make_topology("two", gpus=[0, 1, 2], duplex_links=[(0, 1, 12.5, 0.0), (1, 2, 50.0, 0.0)])
    inst = make_instance(topo, make_collective("allgather", topo), "1MB")
    res = Reservations(inst)
    link = topo.link_index[(0, 1)]
    assert int(inst.occupancy[link]) == 4
    res.reserve(link, 2)
    assert res.free_start(link, 0) == 6
    assert res.free_start(link, 3) == 6
    res.release(link, 2)
    assert res.free_start(link, 0) == 0


# ----------------------------------------------------------------------------- behaviour
def test_determinism():  # type: ignore[no-untyped-def]
    inst = _inst(bt.ndv2(2), size="1GB", chunks=2)
    for opts in MTEG_VARIANTS:
        assert mteg_schedule(inst, opts).schedule.sends == mteg_schedule(inst, opts).schedule.sends
    assert layered_schedule(inst).sends == layered_schedule(inst).sends
    a, _, _ = heuristic_search(inst, effort="quick")
    b, _, _ = heuristic_search(inst, effort="quick")
    assert a.schedule.sends == b.schedule.sends and a.label == b.label


def test_horizon_extension_from_tiny():  # type: ignore[no-untyped-def]
    """Started at H = 1 the MTEG must be extended (the optimum needs far more slots)."""
    inst = _inst(bt.ndv2(2), size="1GB")
    for select in ("tree-cost", "earliest"):
        result = mteg_schedule(inst, MtegOptions(horizon=1, select=select))
        report = verify(inst, result.schedule)
        assert report.ok
        assert result.extensions >= 1
        assert report.makespan_slots is not None
        assert result.horizon == report.makespan_slots >= lower_bound_slots(inst)


def test_unreachable_and_bad_options():  # type: ignore[no-untyped-def]
    topo = make_topology("split", gpus=[0, 1, 2], duplex_links=[(0, 1, 50.0, 0.0)])
    # The instance refuses a topology that cannot host the collective before any engine runs.
    with pytest.raises(CCPlanError, match="cannot reach"):
        make_instance(topo, make_collective("allgather", topo), "1MB")
    with pytest.raises(ValidationError, match="select"):
        MtegOptions(select="closest")
    with pytest.raises(ValidationError, match="task_order"):
        mteg_schedule(_inst(bt.ring(4)), MtegOptions(order="given", task_order=(0, 1)))
    with pytest.raises(ValidationError, match="effort"):
        heuristic_search(_inst(bt.ring(4)), effort="max")


def test_engines_through_solve():  # type: ignore[no-untyped-def]
    """The registered engines run through the verified pipeline; the portfolio reports the
    winning variant and every variant's makespan, and is never worse than mteg or layered."""
    inst = _inst(bt.dgx1(), size="1GB")
    for name in ("mteg", "layered", "heuristic"):
        get_engine(name)
    results = {m: solve(inst, m, SolveOptions(time_limit=1.0)) for m in ("mteg", "layered", "heuristic")}
    for m, r in results.items():
        # the pipeline may upgrade "feasible" to "optimal" when the makespan meets the bound
        assert r.verified and r.status in ("feasible", "optimal"), m
        assert r.status == "feasible" or r.makespan_slots == r.lower_bound_slots
    best = results["heuristic"]
    spans = [r.makespan_slots for r in results.values()]
    assert best.makespan_slots is not None and None not in spans
    assert best.makespan_slots == min(s for s in spans if s is not None)
    assert best.details["variant"] in best.details["variants"]
    assert best.details["makespan_slots"] == best.makespan_slots


def test_a_crashing_variant_does_not_end_the_portfolio(monkeypatch):
    """The ``heuristic`` portfolio on DGX-1 AllGather with ``layered`` made to crash (an
    IndexError, the class of defect the random fabrics once found in it): the other variants
    still give a verified schedule, the crash is reported in the facts, and the makespan is at
    least the lower bound."""
    import ccplan.heuristics.search as search
    from ccplan.bounds import lower_bound_slots
    from ccplan.instances.builtin import resolve_topology
    from ccplan.instances.catalog import make_collective
    from ccplan.instances.instance import make_instance

    def crash(*args, **kwargs):
        raise IndexError("index 9 is out of bounds")

    monkeypatch.setattr(search, "layered_schedule", crash)
    topo = resolve_topology("dgx1")
    inst = make_instance(topo, make_collective("allgather", topo, chunks=2), "1MB")
    best, _cands, facts = search.heuristic_search(inst, time_limit=20)
    assert best is not None and verify(inst, best.schedule).ok
    assert best.makespan >= lower_bound_slots(inst)
    assert any(label.startswith("layered") for label in facts["failed_variants"])


def test_portfolio_runs_the_nccl_rings_when_it_has_not_reached_the_bound():  # type: ignore[no-untyped-def]
    """DGX-1 AllGather, C = 2 per GPU at 64 KB: no stage reaches the lower bound (latency
    dominates), so the portfolio also runs NCCL's rings (the ``ring`` baseline, 6 channels on
    a DGX-1) as a candidate: its makespan in the portfolio is the one the ``ring`` engine
    gives on its own, and the portfolio's answer is never worse than it."""
    from ccplan.contract import SolveOptions
    from ccplan.instances import make_collective, make_instance
    from ccplan.instances.builtin import dgx1
    from ccplan.pipeline.solve import solve

    topo = dgx1()
    inst = make_instance(topo, make_collective("allgather", topo, chunks=2), "64KB")
    result = solve(inst, "heuristic", SolveOptions(time_limit=3))
    ring = solve(inst, "ring", SolveOptions(time_limit=3))
    assert result.verified and ring.verified
    assert result.makespan_slots > result.lower_bound_slots  # the stage was reached
    assert result.details["variants"]["ring"] == ring.makespan_slots
    assert result.makespan_slots <= ring.makespan_slots
