"""The flow-over-time bound (:mod:`ccplan.bounds.flow_lp`) against true optima.

Optima come from the exact engine (CP-SAT on the paper's model, status ``optimal``); the
bound is computed from scratch (``lower=0``, not from :mod:`ccplan.bounds`), so the test
checks the relaxation itself. A bound above an optimum fails the test.
"""

from __future__ import annotations

import dataclasses
import random
from functools import cache

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.bounds.flow_lp import applies, destination_order, flow_bound, max_flow_into, symmetry_classes
from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.instances import Instance, make_collective, make_instance, make_topology
from ccplan.instances.topology import Node, Topology
from ccplan.pipeline.solve import solve

BANDWIDTHS = (12.5, 25.0, 50.0)
ALPHAS = (0.0, 0.3, 1.5, 4.0)


def mini_chassis(
    chassis: int = 2, gpus: int = 4, nic: float = 12.5, fast: float = 50.0, nic_alpha: float = 0.0
) -> Topology:
    """A small DGX2: ``chassis`` groups of ``gpus`` GPUs around one switch (``fast``, alpha
    0), the odd local GPU ``s`` of chassis ``i`` sending to local ``s - 1`` of chassis
    ``i + 1`` over a ``nic`` link (``nic_alpha`` us)."""
    n = chassis * gpus
    duplex = [(gpus * c + s, n + c, fast, 0.0) for c in range(chassis) for s in range(gpus)]
    directed = [(gpus * i + s, gpus * ((i + 1) % chassis) + s - 1, nic, nic_alpha)
                for i in range(chassis) for s in range(1, gpus, 2)]
    return make_topology(f"mini-{chassis}x{gpus}", gpus=range(n), switches=range(n, n + chassis),
                         duplex_links=duplex, directed_links=directed)


def _random_instance(seed: int) -> Instance:
    """Small instances over the options of the slot model (mixed bandwidths, alpha > 0,
    a switch, capacity 2, outages, single-port, pipelined Broadcast with 2-3 chunks)."""
    rng = random.Random(seed)
    n_gpu = rng.randint(3, 5)
    n_switch = rng.randint(0, 1)
    n = n_gpu + n_switch
    order = list(range(n))
    rng.shuffle(order)
    pairs = {(order[i], order[(i + 1) % n]) for i in range(n)}
    for _ in range(rng.randint(0, n)):
        a, b = rng.randrange(n), rng.randrange(n)
        if a != b:
            pairs.add((a, b))
    links = [(a, b, rng.choice(BANDWIDTHS), rng.choice(ALPHAS)) for a, b in sorted(pairs)]
    topo = make_topology(f"r{seed}", range(n_gpu), directed_links=links, switches=range(n_gpu, n))
    kind = rng.choice(("allgather", "broadcast", "broadcast", "alltoall", "gather", "scatter"))
    chunks = rng.randint(2, 3) if kind == "broadcast" else rng.randint(1, 2)
    coll = make_collective(kind, topo, chunks=chunks, root=rng.choice(topo.gpus))
    outages = []
    if rng.random() < 0.3:
        link = rng.choice(topo.links)
        outages.append((link.src, link.dst, rng.randint(0, 4)))
    return make_instance(
        topo, coll, rng.choice(("64KB", "1MB", "3MB")),
        tau_rule=rng.choice(("fastest", "fastest", "slowest")),
        alpha_threshold=rng.choice((0.0, 0.1)),
        single_port=rng.random() < 0.25,
        capacity=rng.choice((1, 1, 2)),
        outages=outages,
    )


def _cases() -> dict[str, Instance]:
    cases = {f"random-{seed}": _random_instance(seed) for seed in range(24)}
    for c, g in ((2, 4), (3, 4), (2, 6), (4, 2)):
        topo = mini_chassis(c, g)
        cases[f"mini-{c}x{g}-allgather"] = make_instance(topo, make_collective("allgather", topo), "1MB")
    topo = mini_chassis(2, 4)
    ag = make_collective("allgather", topo)
    pair = mini_chassis(2, 2)
    cases["mini-2x2-single-port"] = make_instance(pair, make_collective("allgather", pair), "1MB",
                                                  single_port=True)
    cases["mini-2x4-tau-slowest"] = make_instance(topo, ag, "1MB", tau_rule="slowest")
    cases["mini-2x4-nic-outage"] = make_instance(topo, ag, "1MB", outages=[(5, 0, 4), (7, 2, 0)])
    cases["mini-2x4-alltoall"] = make_instance(topo, make_collective("alltoall", topo), "1MB")
    cases["mini-3x4-broadcast-C4"] = make_instance(
        mini_chassis(3, 4), make_collective("broadcast", mini_chassis(3, 4), chunks=4, root=1), "1MB")
    slow = mini_chassis(2, 4, nic_alpha=4.0)  # tau = 2.62 us: the NIC hop gets delta = 2
    cases["mini-2x4-nic-alpha"] = make_instance(slow, make_collective("allgather", slow), "1MB")
    for nic, alpha in ((25.0, 0.0), (25.0, 4.0), (12.5, 8.0)):
        t = mini_chassis(2, 4, nic=nic, nic_alpha=alpha)
        name = f"mini-2x4-nic{nic:g}-alpha{alpha:g}"
        cases[name] = make_instance(t, make_collective("allgather", t), "1MB")
    three = mini_chassis(3, 2)
    cases["mini-3x2-allgather"] = make_instance(three, make_collective("allgather", three), "1MB")
    four = mini_chassis(4, 2)
    cases["mini-4x2-broadcast-C2"] = make_instance(
        four, make_collective("broadcast", four, chunks=2, root=0), "1MB")
    return cases


CASES = _cases()


@cache
def _optimum(name: str) -> int:
    res = solve(CASES[name], "milp", SolveOptions(time_limit=120, workers=1))
    assert res.status == "optimal" and res.verified and res.makespan_slots is not None, (name, res.status)
    return res.makespan_slots


@pytest.mark.parametrize("name", sorted(CASES))
def test_flow_bound_is_at_most_the_optimum(name: str) -> None:
    """Validity: the bound from scratch never exceeds the exact engine's proven optimum."""
    inst = CASES[name]
    assert applies(inst)
    fb = flow_bound(inst, 0)
    assert fb is not None and fb.complete
    assert fb.slots <= _optimum(name)


def test_flow_bound_beats_the_analytic_bound_somewhere() -> None:
    """The relaxation is not the analytic bound again: on six chassis instances it is
    strictly higher (and still at most the optimum, checked above; there it equals it)."""
    higher = [name for name in CASES if name.startswith("mini")
              if flow_bound(CASES[name], 0).slots > lower_bound_slots(CASES[name])]  # type: ignore[union-attr]
    assert sorted(higher) == ["mini-2x4-allgather", "mini-2x4-nic-alpha", "mini-2x4-nic-outage",
                              "mini-2x4-nic12.5-alpha8", "mini-2x4-nic25-alpha4", "mini-3x4-allgather"]
    for name in higher:
        assert flow_bound(CASES[name], 0).slots == _optimum(name)  # type: ignore[union-attr]


def test_symmetry_classes_and_order() -> None:
    """The mini machine of two chassis has three classes (even GPUs receive a NIC, odd
    GPUs send one, switches); the order puts a GPU the schedule serves last first."""
    topo = mini_chassis(2, 4)
    inst = make_instance(topo, make_collective("allgather", topo), "1MB")
    cls = symmetry_classes(inst)
    assert cls[0] == cls[2] == cls[4] == cls[6] and cls[1] == cls[3] == cls[5] == cls[7]
    assert cls[8] == cls[9] and len(set(cls.values())) == 3
    assert destination_order(inst, {0: [3, 9], 1: [4, 11], 2: [5]}) == [1, 0]


def test_mini_chassis_by_hand() -> None:
    """Two chassis of 4 GPUs (ids 0-3, 4-7; switches 8, 9; GPU-switch 50 GB/s, so
    ``l = L = 1``; NICs 1->4, 3->6, 5->0, 7->2 at 12.5 GB/s, ``l = L = 4``), AllGather 1 MB.

    GPU 1 has one in-link (from switch 8) and needs 7 chunks. The 4 chunks of chassis 1
    enter chassis 0 over the two NICs into GPUs 0 and 2: a NIC send starting at ``t`` is
    usable at the even GPU at ``t + 4``, at the switch at ``t + 5``, and can be on
    switch 8 -> 1 from slot ``t + 5``. A NIC starts at most one send in slots ``0 .. 3``,
    so at most 2 remote chunks are on 8 -> 1 by slot 8; the other 2 take two distinct
    slots from 9 on, the later is usable at 1 from slot 11: ``D >= 11``. The analytic
    bound is lower: ingress 8 (7 chunks, one per slot, the switch holds nothing before
    slot 1); the set cut of chassis 0: 4 chunks over 2 NICs whose sends start in
    ``[0, D - 4 - 2]`` (2 more slots from GPU 0 or 2 to GPU 1), 4 apart, so
    ``2 (floor((D - 6) / 4) + 1) >= 4``: ``D >= 10``. A schedule of 11 (hence the optimum):
    each NIC sends its own GPU's chunk at 0 and a chunk of the other GPUs at 4 (from slot
    2 on its GPU); local chunks go GPU -> switch at 0 and to the other GPUs of the chassis
    at slots 1..4; the remote pair reaching a switch at 5 is forwarded at 5 and 6, the pair
    reaching it at 9 at 9 and 10.
    """
    topo = mini_chassis(2, 4)
    inst = make_instance(topo, make_collective("allgather", topo), "1MB")
    assert list(inst.occupancy) == [1] * 16 + [4] * 4 and list(inst.latency) == [1] * 16 + [4] * 4
    assert lower_bound_slots(inst) == 10
    assert max_flow_into(inst, 1, 10) < 7  # D = 10 refuted at GPU 1
    assert max_flow_into(inst, 1, 11) == pytest.approx(7)
    fb = flow_bound(inst, 0)
    assert fb is not None and fb.slots == 11 and fb.complete
    assert _optimum("mini-2x4-allgather") == 11


def test_not_applied_to_cut_through_or_combining() -> None:
    topo = mini_chassis(2, 4)
    inst = make_instance(topo, make_collective("allgather", topo), "1MB", switch_model="cut-through")
    assert flow_bound(inst, 0) is None
    rs = make_instance(topo, make_collective("reducescatter", topo), "1MB")
    assert flow_bound(rs, 0) is None


def test_partial_bound_is_still_a_bound() -> None:
    """A time limit or a subset of destinations stops early; the value reached is never
    above the complete one."""
    inst = CASES["mini-3x4-allgather"]
    full = flow_bound(inst, 0)
    one = flow_bound(inst, 0, destinations=[1])
    assert full is not None and one is not None
    assert one.slots <= full.slots and one.complete  # complete for the destinations asked
    stopped = flow_bound(inst, 0, time_limit=0.0)
    assert stopped is not None and stopped.slots == 0 and not stopped.complete
    capped = flow_bound(inst, 0, upper=full.slots - 1)
    assert capped is not None and capped.slots == full.slots - 1


def test_engine_proves_optimal_with_the_flow_bound() -> None:
    """The ``milp`` engine with the flow bound forced on (the mini instance is below
    ``auto``'s size threshold): a warm start of 11 slots on the instance of
    :func:`test_mini_chassis_by_hand` meets the flow bound 11 (analytic 10), so no solver
    runs and the proof is the flow bound; without it CP-SAT has to refute 10."""
    topo = mini_chassis(2, 4)
    inst = make_instance(topo, make_collective("allgather", topo), "1MB")
    best = solve(inst, "milp", SolveOptions(time_limit=120, workers=1, extra={"flow_bound": False}))
    assert best.status == "optimal" and best.makespan_slots == 11
    assert best.details["proof"] != "flow bound" and best.details["bounds"]["flow"] is None
    res = solve(inst, "milp", SolveOptions(time_limit=60, workers=1, extra={
        "flow_bound": True, "warm_start_schedule": best.schedule}))
    assert res.status == "optimal" and res.verified and res.makespan_slots == 11
    assert res.details["proof"] == "flow bound"
    assert res.details["bounds"] == {"analytic": 10, "flow": 11, "with_solver": 11}
    assert not any("question" in st for st in res.details["steps"])
    with pytest.raises(ValidationError):
        solve(inst, "milp", SolveOptions(time_limit=10, extra={"flow_bound": "yes"}))


def test_certificate_from_duals() -> None:
    """The refutation rests on weak duality, not on the solver's primal value.

    On the hand-derived case above (GPU 1 of two 4-GPU chassis, D = 10): the value
    :func:`max_flow_into` returns is the dual certificate; it is at least HiGHS's primal
    maximum (an upper bound on the flow) and equal to it up to the solver's tolerance, here
    below the 7 chunks GPU 1 needs. With the duals thrown away (all zero) the certificate
    must still be an upper bound, hence no refutation: ``supply * sum(max(0, -c))`` is
    ``7 * (number of arcs into GPU 1)``, far above 7.
    """
    from ccplan.bounds import flow_lp as relax

    topo = mini_chassis(2, 4)
    inst = make_instance(topo, make_collective("allgather", topo), "1MB")
    seen: dict[str, object] = {}
    real = relax.linprog

    def spy(c, **kw):  # type: ignore[no-untyped-def]
        res = real(c, **kw)
        seen.update(c=c, kw=kw, res=res)
        return res

    relax.linprog = spy  # type: ignore[assignment]
    try:
        certified = max_flow_into(inst, 1, 10)
    finally:
        relax.linprog = real  # type: ignore[assignment]
    assert certified is not None
    res = seen["res"]
    primal = -float(res.fun)  # type: ignore[attr-defined]
    assert primal - 1e-9 <= certified <= primal + 1e-6
    assert certified < 7 - relax.FEASIBLE_TOLERANCE

    class NoDuals:
        def __init__(self, rows: int, cols: int) -> None:
            self.ineqlin = type("m", (), {"marginals": [0.0] * rows})()
            self.upper = type("m", (), {"marginals": [0.0] * cols})()

    kw = seen["kw"]
    a_ub = kw["A_ub"]  # type: ignore[index]
    c = seen["c"]
    upper = kw["bounds"][:, 1]  # type: ignore[index]
    loose = relax._certified_maximum(NoDuals(*a_ub.shape), a_ub, kw["b_ub"], upper, c, 7)  # type: ignore[index]
    assert loose >= 7


def test_node_ids_need_not_be_positions() -> None:
    """Node ids are names, not row numbers: the mini chassis of the hand-derived test above
    with every id shifted by 100 (and reversed declaration order) gives the same bound, 11."""
    topo = mini_chassis(2, 4)
    shift = 100
    nodes = [Node(id=n.id + shift, kind=n.kind) for n in reversed(topo.nodes)]
    links = [dataclasses.replace(lk, src=lk.src + shift, dst=lk.dst + shift) for lk in topo.links]
    moved = Topology(name="mini-shifted", nodes=tuple(nodes), links=tuple(links))
    base = make_instance(topo, make_collective("allgather", topo), "1MB")
    inst = make_instance(moved, make_collective("allgather", moved), "1MB")
    fb = flow_bound(inst, 0)
    assert fb is not None and fb.slots == 11 == flow_bound(base, 0).slots  # type: ignore[union-attr]
    assert max_flow_into(inst, 1 + shift, 10) < 7


# ------------------------------------------------------------------ the bound for every method
def test_bisection_gives_the_stepwise_bound() -> None:
    """:func:`flow_bound_between` (bisection between a lower bound and a makespan) gives the
    value of :func:`flow_bound`'s step-by-step search over every destination, from scratch
    and up to three slots above the optimum, on all the instances above."""
    from ccplan.bounds.flow_lp import flow_bound_between

    fewer = 0
    for name, inst in CASES.items():
        upper = _optimum(name) + 3
        step = flow_bound(inst, 0, upper=upper)
        inst.__dict__.pop("_ccplan_flow_refutes", None)
        bisect = flow_bound_between(inst, 0, upper)
        assert step is not None and bisect is not None and bisect.complete
        assert bisect.slots == step.slots, name
        fewer += bisect.lps < step.lps
        again = flow_bound_between(inst, 0, upper)  # the LP answers are kept on the instance
        assert again is not None and again.slots == bisect.slots and again.lps == 0
    assert fewer >= 20


@pytest.mark.parametrize("method", ["cut-aware", "layered", "mteg", "ring"])
def test_every_method_reports_a_bound_at_most_the_optimum(method: str) -> None:
    """``solve``'s reported bound, now with the flow-over-time bound for every method, is
    never above the exact engine's proven optimum; on the chassis instances it is raised
    above the analytic bound (where the method's schedule leaves a gap)."""
    from ccplan.errors import CCPlanError

    raised = 0
    for name, inst in CASES.items():
        try:
            res = solve(inst, method, SolveOptions(time_limit=30))
        except CCPlanError:
            continue  # the method does not serve this instance
        assert res.verified and res.makespan_slots is not None
        assert res.lower_bound_slots <= _optimum(name) <= res.makespan_slots, name
        flow = res.details.get("flow_bound")
        if flow is not None and flow["slots"] > lower_bound_slots(inst):
            raised += 1
    assert raised >= 4


def test_cut_aware_reports_the_tighter_flow_bound() -> None:
    """The instance of :func:`test_mini_chassis_by_hand` (analytic bound 10, optimum 11 by
    hand): ``cut-aware`` finds 11; ``solve`` reports the flow bound 11, so the gap is 0 and
    the status optimal. With the flow bound turned off the bound is the analytic 10."""
    topo = mini_chassis(2, 4)
    inst = make_instance(topo, make_collective("allgather", topo), "1MB")
    res = solve(inst, "cut-aware")
    assert res.verified and res.makespan_slots == 11
    assert res.lower_bound_slots == 11 and res.gap == 0 and res.status == "optimal"
    assert res.details["flow_bound"]["slots"] == 11
    assert res.details["flow_bound"]["refuted"][0] == [1, 10]  # GPU 1 refutes 10, as by hand
    off = solve(
        make_instance(topo, make_collective("allgather", topo), "1MB"),
        "cut-aware",
        SolveOptions(extra={"flow_bound": False}),
    )
    assert off.lower_bound_slots == 10 and off.status == "feasible" and "flow_bound" not in off.details


def test_gates_of_the_flow_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """It runs only with an open gap, where the relaxation applies, under the size limit
    (lifted by ``mode=True``) and within its time (a time limit of 0 leaves the lower bound,
    still valid)."""
    from ccplan.bounds import flow_lp as relax

    topo = mini_chassis(2, 4)
    inst = make_instance(topo, make_collective("allgather", topo), "1MB")
    assert relax.gated_flow_bound(inst, 10, 10) is None  # no gap
    assert relax.gated_flow_bound(inst, 10, None) is None  # no verified makespan
    assert relax.gated_flow_bound(inst, 10, 12, mode=False) is None
    cut = make_instance(topo, make_collective("allgather", topo), "1MB", switch_model="cut-through")
    assert relax.gated_flow_bound(cut, 10, 12) is None
    rs = make_instance(topo, make_collective("reducescatter", topo), "1MB")
    assert relax.gated_flow_bound(rs, 10, 12) is None
    monkeypatch.setattr(relax, "FLOW_MAX_ARCS", topo.num_links * 12 - 1)
    assert relax.gated_flow_bound(inst, 10, 12) is None
    forced = relax.gated_flow_bound(inst, 10, 12, mode=True)
    assert forced is not None and forced.slots == 11
    monkeypatch.setattr(relax, "FLOW_MAX_ARCS", 10**9)
    monkeypatch.setattr(relax, "FLOW_FLOOR", 0.0)
    fresh = make_instance(topo, make_collective("allgather", topo), "1MB")
    stopped = relax.gated_flow_bound(fresh, 10, 12, engine_seconds=0.0)
    assert stopped is not None and stopped.slots == 10 and not stopped.complete and stopped.lps == 0


def test_compute_bounds_and_the_cli_show_the_flow_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """DGX2 with 2 chassis, 1 MB (``docs/exact.md`` 7.1: analytic 37, flow bound and optimum
    44). ``compute_bounds`` with the makespan 44 reports ``flow_slots`` 44 as the best bound;
    ``ccplan bounds`` prints it on its own line and, with ``--no-flow``, leaves it out."""
    import json

    from ccplan.bounds import compute_bounds
    from ccplan.cli import main
    from ccplan.instances import builtin as bt

    topo = bt.dgx2(2)
    inst = make_instance(topo, make_collective("allgather", topo), "1MB")
    b = compute_bounds(inst, upper=44)
    assert (b.cut_slots, b.flow_slots, b.best_slots, b.best_name) == (37, 44, 44, "flow")
    assert compute_bounds(inst).flow_slots is None  # no makespan, no LP
    argv = ["bounds", "--topology", "dgx2", "--chassis", "2", "--size", "1MB", "--upper-method", "cut-aware"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert any(line.split() == ["flow_slots", "44"] for line in text.splitlines()), text
    assert "makespan >= 44 slots" in text
    assert main([*argv, "--no-flow", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["flow_slots"] is None and data["best_slots"] == 37 and data["upper_bound_slots"] == 44
