"""Cut-through switches, per-link capacity omega from bandwidth, and the alpha cap.

Expected optima come from hand derivations (in the docstrings) and are proven by the MILP in
both directions: a feasible, verified schedule at D and an infeasible model at horizon D - 1,
with CP-SAT and, independently, HiGHS.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from ccplan.bounds import compute_bounds, lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.instances import Instance, make_collective, make_instance, make_topology
from ccplan.instances.builtin import star_switch
from ccplan.model.exact import greedy_schedule, solve_model_with
from ccplan.model.milp import CUT_THROUGH_COMPONENTS, build_model, hint_from_schedule, schedule_from_model
from ccplan.pipeline import get_engine
from ccplan.pipeline.solve import solve
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.simulate import simulate
from ccplan.schedule.verify import verify
from tests.helpers import random_instances

CT = "cut-through"
SAF = "store-and-forward"


def _star(n: int, switch_model: str, alpha_us: float = 0.0) -> Instance:
    """n GPUs around switch n, 50 GB/s ports, AllGather of n * 250 MB, C = 1 (chunk 250 MB,
    tau = 5 ms, every link l = 1)."""
    topo = star_switch(n, 50.0, alpha_us)
    return make_instance(topo, make_collective("allgather", topo, chunks=1), f"{250 * n}MB",
                         switch_model=switch_model)


def _paw(**kw) -> Instance:  # type: ignore[no-untyped-def]
    """GPU 0 - GPU 1 at 50 GB/s; triangle 1 - 2 - 3 at 25 GB/s (duplex); alpha 0; AllGather
    1 GB, C = 1 (chunk 250 MB); slot from the slowest link: tau = 250 MB / 25 GB/s = 10 ms."""
    links = [(0, 1, 50.0, 0.0), (1, 2, 25.0, 0.0), (2, 3, 25.0, 0.0), (1, 3, 25.0, 0.0)]
    topo = make_topology("paw", range(4), duplex_links=links)
    return make_instance(topo, make_collective("allgather", topo, chunks=1), "1GB", tau_rule="slowest", **kw)


def _proves(inst: Instance, optimum: int, backend: str) -> None:
    """The MILP has a verified schedule of makespan ``optimum`` and none at ``optimum - 1``."""
    model = build_model(inst, optimum)
    res = solve_model_with(backend, model, time_limit=60)
    assert res.status == "optimal", (backend, res.status)
    report = verify(inst, schedule_from_model(model, inst))
    assert report.ok, report.violations[:1]
    assert report.makespan_slots == optimum
    if optimum > 1:
        below = solve_model_with(backend, build_model(inst, optimum - 1), time_limit=60)
        assert below.status == "infeasible", (backend, below.status)


# --------------------------------------------------------------------------- the cases
@pytest.mark.parametrize("backend", ["cpsat", "highs"])
def test_star3_cut_through_two_slots_store_and_forward_three(backend: str) -> None:
    """3 GPUs through one switch, C = 1. Each GPU needs 2 chunks, all over its one in-link
    switch -> GPU (omega 1 per slot), and no chunk is at the switch before slot 1 (the hop in
    takes L = 1).

    Cut-through: the switch forwards in slots >= 1 and the hop into a GPU costs delta = 0, so
    the two deliveries land at >= 1 and >= 2: D >= 2. Every GPU sends its own chunk in slots 0
    and 1; in slot 1 the switch copies chunk g to GPU g+1, in slot 2 to GPU g+2 (mod 3): D = 2.

    Store-and-forward: the switch holds a chunk from slot 1 and each hop out costs L = 1, so
    the deliveries land at >= 2 and >= 3: D = 3 (the switch sends one chunk per slot per GPU).
    """
    _proves(_star(3, CT), 2, backend)
    _proves(_star(3, SAF), 3, backend)


@pytest.mark.parametrize("backend", ["cpsat", "highs"])
def test_star4_cut_through_three_slots_store_and_forward_four(backend: str) -> None:
    """4 GPUs, the same argument with 3 chunks per GPU: cut-through deliveries at >= 1, 2, 3,
    met by each GPU resending its chunk in slots 0, 1, 2 and the switch copying chunk g to GPU
    g+k in slot k: D = 3. Store-and-forward: >= 2, 3, 4 and D = 4."""
    _proves(_star(4, CT), 3, backend)
    _proves(_star(4, SAF), 4, backend)


@pytest.mark.parametrize("backend", ["cpsat", "highs"])
def test_paw_slowest_tau_two_slots(backend: str) -> None:
    """Paw (see :func:`_paw`): link 0 <-> 1 pushes a chunk in 5 ms, so with tau = 10 ms it
    carries omega = floor(50 * 10 / 250) = 2 chunks per slot; the 25 GB/s links carry 1.

    Lower bound 2: chunk 0 needs two hops to reach GPU 2. Schedule with 2: slot 0: 0->1 c0,
    1->0 c1, 1->2 c1, 1->3 c1, 2->3 c2, 3->2 c3, 2->1 c2, 3->1 c3; slot 1: 1->0 c2 and c3
    (omega 2), 1->2 c0, 1->3 c0. D = 2 = 20 ms. With one chunk per slot GPU 0 would need 3
    slots for its 3 chunks over its only in-link (what the model gave before omega)."""
    inst = _paw()
    assert inst.tau_us == pytest.approx(10_000.0)
    assert inst.link_capacity.tolist() == [2, 2, 1, 1, 1, 1, 1, 1]
    _proves(inst, 2, backend)
    assert inst.slots_to_us(2) == pytest.approx(20_000.0)


def test_paw_hand_schedule_and_one_chunk_per_slot_needs_three() -> None:
    """The docstring schedule of the paw verifies at 2 slots; with a third chunk on 1->0 in
    slot 1 the verifier names the capacity violation; and with ``capacity`` forced to one
    chunk per slot (an explicit tau equal to the 50 GB/s transfer time gives l = 2 on the slow
    links) GPU 0 cannot finish in 2."""
    inst = _paw()
    sends = [
        ((0, 0), 0, 1, 0), ((1, 0), 1, 0, 0), ((1, 0), 1, 2, 0), ((1, 0), 1, 3, 0),
        ((2, 0), 2, 3, 0), ((3, 0), 3, 2, 0), ((2, 0), 2, 1, 0), ((3, 0), 3, 1, 0),
        ((2, 0), 1, 0, 1), ((3, 0), 1, 0, 1), ((0, 0), 1, 2, 1), ((0, 0), 1, 3, 1),
    ]
    report = verify(inst, Schedule.of(sends))
    assert report.ok and report.makespan_slots == 2
    bad = verify(inst, Schedule.of([*sends[:8], ((2, 0), 1, 0, 1), ((3, 0), 1, 0, 1), ((0, 0), 1, 0, 1)]))
    assert any(v.kind == "capacity" and v.link == (1, 0) and v.slot == 1 for v in bad.violations)


# --------------------------------------------------------------------------- semantics
def test_cut_through_latency_and_bufferless_rules() -> None:
    """Star of 3 with alpha 0.7 us on every link (tau = 5 ms, so delta = 0): the hop switch ->
    GPU has L = 0 under cut-through, 1 otherwise; a switch send outside an arrival slot is a
    causality violation naming the switch; two arrivals of one chunk at a switch in one slot
    are a duplicate; arrivals in two different slots are fine."""
    ct = _star(3, CT, alpha_us=0.7)
    topo = ct.topology
    lat = {lk.key: int(ct.latency[i]) for i, lk in enumerate(topo.links)}
    assert lat[(0, 3)] == 1 and lat[(3, 0)] == 0
    assert _star(3, SAF, alpha_us=0.7).latency.tolist() == [1] * 6
    ok = Schedule.of([((0, 0), 0, 3, 0), ((0, 0), 3, 1, 1), ((0, 0), 0, 3, 1), ((0, 0), 3, 2, 2)])
    report = verify(ct, ok)
    assert not [v for v in report.violations if v.kind != "postcondition"]
    assert report.arrivals[((0, 0), 1)] == 1  # switch -> GPU costs delta only
    late = verify(ct, Schedule.of([((0, 0), 0, 3, 0), ((0, 0), 3, 1, 2)]))
    bad = [v for v in late.violations if v.kind == "causality"]
    assert bad and "cut-through switch 3" in bad[0].message and bad[0].slot == 2
    # the same schedule is fine store-and-forward (the switch holds the chunk from slot 1)
    saf = verify(_star(3, SAF, alpha_us=0.7), Schedule.of([((0, 0), 0, 3, 0), ((0, 0), 3, 1, 2)]))
    assert not [v for v in saf.violations if v.kind == "causality"]
    # a GPU sends a chunk in the slot it lands from the switch (L = 0); 1 -> 3 -> 2 needs 1 more
    relay = [((0, 0), 0, 3, 0), ((0, 0), 3, 1, 1), ((0, 0), 1, 3, 1), ((0, 0), 3, 2, 2)]
    chain = verify(ct, Schedule.of(relay))
    assert not [v for v in chain.violations if v.kind != "postcondition"]
    topo4 = star_switch(4, 50.0, 0.0)
    inst4 = make_instance(topo4, make_collective("allgather", topo4, chunks=1), "1GB", switch_model=CT)
    # GPUs 1 and 2 get chunk 0 through the switch in slot 1 and both send it back in slot 1
    twice = [((0, 0), 0, 4, 0), ((0, 0), 4, 1, 1), ((0, 0), 4, 2, 1), ((0, 0), 1, 4, 1), ((0, 0), 2, 4, 1)]
    dup = verify(inst4, Schedule.of(twice))
    assert [v.kind for v in dup.violations if v.kind != "postcondition"] == ["duplicate-receive"]
    assert "switch 4 already receives the chunk in slot 2" in dup.violations[0].message
    again = verify(inst4, Schedule.of([*twice[:4], ((0, 0), 2, 4, 2)]))
    assert not [v for v in again.violations if v.kind != "postcondition"]


def test_switch_model_validation_and_json() -> None:
    """Unknown switch models are refused with one line (cut-through combining collectives are
    accepted: a switch relays partial sums); the option round-trips through JSON, and an old
    file (no key) loads as store-and-forward and is written back without the key."""
    topo = star_switch(3, 50.0, 0.0)
    coll = make_collective("allgather", topo, chunks=1)
    with pytest.raises(ValidationError, match="switch_model must be one of"):
        make_instance(topo, coll, "1GB", switch_model="wormhole")
    reduce = make_instance(topo, make_collective("allreduce", topo, chunks=1), "1GB", switch_model=CT)
    assert Instance.from_dict(json.loads(json.dumps(reduce.to_dict()))) == reduce
    with pytest.raises(ValidationError, match="alpha_cap must be a positive number"):
        make_instance(topo, coll, "1GB", alpha_cap=-1)
    with pytest.raises(ValidationError, match="alpha_cap applies to"):
        make_instance(topo, coll, "1GB", tau_rule="explicit", tau_us=1.0, alpha_cap=200)
    inst = make_instance(topo, coll, "1GB", switch_model=CT, alpha_cap=200)
    data = json.loads(json.dumps(inst.to_dict()))
    assert data["switch_model"] == CT and data["alpha_cap"] == 200
    assert Instance.from_dict(data) == inst
    old = make_instance(topo, coll, "1GB").to_dict()
    assert "switch_model" not in old and "alpha_cap" not in old
    assert Instance.from_dict(old).switch_model == SAF


def test_alpha_cap_raises_tau_and_simulator_reports_rounding() -> None:
    """NDv2 x2 AllGather 1 KB (TE-CCL's smallest cell): chunk = 1000/16 = 62.5 B, tau from the
    50 GB/s links = 62.5 / 50e3 us = 0.00125 us. The smallest alpha is 0.7 us, 560 slots of
    that tau; TE-CCL's cap (200) raises tau to 0.7 / 200 = 0.0035 us, as in its published
    table. The simulator replays the schedule in continuous time and reports
    ``rounding_us = D tau - completion``; every send of a valid schedule is usable by
    ``(slot + L) tau`` when alphas are rounded up (threshold 0), so the rounding is >= 0."""
    from ccplan.instances.builtin import ndv2

    topo = ndv2(2)
    coll = make_collective("allgather", topo, chunks=1)
    plain = make_instance(topo, coll, "1KB")
    capped = make_instance(topo, coll, "1KB", alpha_cap=200, alpha_threshold=0.0)
    assert plain.tau_us == pytest.approx(0.00125)
    assert capped.uncapped_tau_us == pytest.approx(0.00125)
    assert capped.tau_us == pytest.approx(0.0035)
    assert int(capped.delay.max()) == 372  # the NIC's 1.3 us: ceil(1.3 / 0.0035) = ceil(371.4)
    sched = greedy_schedule(capped)
    report = verify(capped, sched)
    assert report.ok
    sim = simulate(capped, sched)
    assert sim.slotted_us == pytest.approx(report.makespan_slots * capped.tau_us)  # type: ignore[operator]
    assert sim.rounding_us is not None and sim.rounding_us >= -1e-9
    assert sim.to_dict()["rounding_us"] == pytest.approx(sim.rounding_us)


def test_simulator_streams_through_a_cut_through_switch() -> None:
    """Star of 3, 50 GB/s, alpha 1 us, chunk 250 MB (transfer 5000 us). GPU 0 -> switch at slot
    0 starts at 0, its first byte reaches the switch at 1, its last at 5001. The switch's copy
    to GPU 1 starts at 1 (first byte in, link free), cannot end before the last byte came in
    (5001) nor before 1 + 5000, and adds its alpha: usable at GPU 1 at 5002 = one transfer plus
    both alphas (store-and-forward would be 2 * 5001 = 10002)."""
    inst = _star(3, CT, alpha_us=1.0)
    with pytest.raises(ValidationError, match="never reaches"):
        simulate(inst, Schedule.of([((0, 0), 0, 3, 0), ((0, 0), 3, 1, 1)]))
    res = simulate(inst, greedy_schedule(inst))
    assert res.completion_us >= compute_bounds(inst).best_us * (1 - 1e-9)
    two = Schedule.of([((0, 0), 0, 3, 0), ((0, 0), 3, 1, 1), ((0, 0), 3, 2, 1),
                       ((1, 0), 1, 3, 0), ((1, 0), 3, 0, 1), ((1, 0), 1, 3, 1), ((1, 0), 3, 2, 2),
                       ((2, 0), 2, 3, 0), ((2, 0), 3, 0, 2), ((2, 0), 2, 3, 1), ((2, 0), 3, 1, 2)])
    assert verify(inst, two).ok
    res = simulate(inst, two)
    i = next(k for k, s in enumerate(two.sends) if s.src == 3 and s.dst == 1 and s.chunk == (0, 0))
    assert res.start_us[i] == pytest.approx(1.0)
    assert res.finish_us[i] == pytest.approx(5002.0)


# --------------------------------------------------------------------------- heuristics
@pytest.mark.parametrize("method", ["mteg", "layered", "heuristic", "ring", "multitree", "hierarchical"])
def test_every_heuristic_verifies_under_cut_through(method: str) -> None:
    """Each heuristic, on a 4-GPU star (cut-through optimum 3, proven above) and on a 2-switch
    DGX2-like machine (dgx2, 1 chassis, 16 GPUs, 250 MB), gives a verified schedule whose
    makespan is >= the lower bound and no worse than its own store-and-forward makespan."""
    from ccplan.instances.builtin import dgx2

    for topo, size in ((star_switch(4, 50.0, 0.0), "1GB"), (dgx2(1), "256MB")):
        coll = make_collective("allgather", topo, chunks=1)
        ct = make_instance(topo, coll, size, switch_model=CT)
        saf = make_instance(topo, coll, size)
        res = solve(ct, method, SolveOptions(time_limit=5))
        base = solve(saf, method, SolveOptions(time_limit=5))
        assert res.verified and res.makespan_slots is not None
        assert res.makespan_slots >= lower_bound_slots(ct)
        assert base.makespan_slots is not None and res.makespan_slots <= base.makespan_slots
        twin = res.details["cut_through"]["twin_makespan_slots"]
        assert twin == base.makespan_slots or method == "heuristic"  # the portfolio is timed


def test_milp_engine_under_cut_through_uses_the_variant_rows() -> None:
    """The exact engine on the cut-through 3-star: the bufferless rows are in the model, the
    retimed warm start is a valid hint, and the answer is the proven 2 slots."""
    inst = _star(3, CT)
    model = build_model(inst, 3)
    assert all(hasattr(model, name) for name in CUT_THROUGH_COMPONENTS)
    assert not hasattr(build_model(_star(3, SAF), 3), CUT_THROUGH_COMPONENTS[0])
    warm = greedy_schedule(inst)
    assert verify(inst, warm).ok
    hint_from_schedule(model, inst, warm)  # raises if the schedule has no encoding
    out = get_engine("milp")(inst, SolveOptions(time_limit=30, extra={"always_solve": True}))
    assert out.schedule is not None and verify(inst, out.schedule).makespan_slots == 2


# --------------------------------------------------------------------------- bounds
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(random_instances(max_gpus=4, allow_outages=False, allow_single_port=False,
                        collectives=("allgather", "broadcast", "gather", "scatter"),
                        switch_models=(SAF, CT)))
def test_bounds_below_exact_optimum_with_switches(inst: Instance) -> None:
    """On small random instances (half with a switch, both switch models, both tau rules so
    omega > 1 occurs) every slot bound is <= the optimum CP-SAT proves on the MILP, with the
    greedy (re-timed) schedule as the horizon; the optimum is <= the greedy makespan."""
    greedy = greedy_schedule(inst)
    report = verify(inst, greedy)
    assert report.ok, report.violations[:1]
    upper = max(1, int(report.makespan_slots or 0))
    model = build_model(inst, upper)
    res = solve_model_with("cpsat", model, time_limit=60, workers=1)
    assert res.status == "optimal" and res.objective is not None
    optimum = round(res.objective)
    assert verify(inst, schedule_from_model(model, inst)).makespan_slots == optimum
    assert lower_bound_slots(inst) <= optimum <= upper
    b = compute_bounds(inst)
    assert max(b.latency_slots, b.ingress_slots, b.cut_slots) <= optimum


def test_cut_through_never_slower_than_store_and_forward_twin() -> None:
    """A store-and-forward schedule re-timed for cut-through switches (the post-pass every
    heuristic goes through) is valid and no later, on the 3-star from the hand schedule of
    the 3-slot optimum."""
    from ccplan.schedule.cut_through import retime

    saf = _star(3, SAF)
    ct = _star(3, CT)
    sends = [((g, 0), g, 3, 0) for g in range(3)]
    sends += [((g, 0), 3, (g + 1) % 3, 1) for g in range(3)]
    sends += [((g, 0), 3, (g + 2) % 3, 2) for g in range(3)]
    sched = Schedule.of(sends)
    assert verify(saf, sched).makespan_slots == 3
    out = retime(ct, sched)
    assert verify(ct, out).ok and verify(ct, out).makespan_slots == 2
    with pytest.raises(ValidationError, match="needs a valid schedule"):
        retime(ct, Schedule.of([Send(slot=0, chunk=(0, 0), src=0, dst=3)]))


def test_msccl_export_of_cut_through_schedules() -> None:
    """A cut-through schedule exports to MSCCL XML that the independent XML validator replays
    to the AllGather postcondition: the 3-star's proven optimum (each relay through the switch
    becomes one GPU-to-GPU transfer, the copy that passes the switch in the send's slot) and a
    re-timed heuristic schedule on one DGX2 chassis."""
    from ccplan.export.msccl import to_msccl_xml
    from ccplan.export.xml_validate import validate_xml
    from ccplan.instances.builtin import dgx2

    star = _star(3, CT)
    two = Schedule.of([((0, 0), 0, 3, 0), ((0, 0), 3, 1, 1), ((0, 0), 3, 2, 1),
                       ((1, 0), 1, 3, 0), ((1, 0), 3, 0, 1), ((1, 0), 1, 3, 1), ((1, 0), 3, 2, 2),
                       ((2, 0), 2, 3, 0), ((2, 0), 3, 0, 2), ((2, 0), 2, 3, 1), ((2, 0), 3, 1, 2)])
    topo = dgx2(1)
    chassis = make_instance(topo, make_collective("allgather", topo, chunks=2), "64MB", switch_model=CT)
    heuristic = solve(chassis, "mteg").schedule
    assert heuristic is not None
    for inst, sched in ((star, two), (chassis, heuristic)):
        assert verify(inst, sched).ok
        report = validate_xml(to_msccl_xml(inst, sched), expect=inst)
        assert report.ok, [str(e) for e in report.errors[:3]]
        assert report.stats["transfers"] == len(inst.collective.demands)


def test_cli_switch_model_and_alpha_cap(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`solve --switch-model cut-through` on the 3-star prints the proven 2 slots and writes a
    schedule whose instance carries the option; `--alpha-cap` reaches the instance; a bad value
    is one line and exit 2."""
    import subprocess
    import sys

    out = tmp_path / "s.json"
    run = subprocess.run(
        [sys.executable, "-m", "ccplan.cli", "solve", "--topology", "star_switch", "--topo-arg", "n=3",
         "--size", "750MB", "--method", "mteg", "--switch-model", "cut-through", "--alpha-cap", "200",
         "--out", str(out)],
        capture_output=True, text=True, check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "makespan     2 slots" in run.stdout
    data = json.loads(out.read_text())
    assert data["instance"]["switch_model"] == CT and data["instance"]["alpha_cap"] == 200
    bad = subprocess.run(
        [sys.executable, "-m", "ccplan.cli", "solve", "--topology", "star_switch",
         "--switch-model", "wormhole"],
        capture_output=True, text=True, check=False,
    )
    assert bad.returncode == 2 and "--switch-model" in bad.stderr


@pytest.mark.parametrize("method", ["mteg", "layered", "ring"])
def test_single_port_cut_through_star(method: str) -> None:
    """Single-port star of 4 under cut-through: all 12 deliveries leave the switch, which sends
    one chunk per slot (its port), in slots >= 1 (nothing reaches it before), so the last one
    lands at >= 12 (delta = 0): D >= 12. Each heuristic, re-timed, verifies and reaches 12 (a
    GPU resends its own chunk while the switch serves the others). The bounds ignore
    single-port (still valid, weaker)."""
    topo = star_switch(4, 50.0, 0.0)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1GB",
                         switch_model=CT, single_port=True)
    res = solve(inst, method, SolveOptions(time_limit=5))
    assert res.verified and res.makespan_slots == 12
    assert lower_bound_slots(inst) <= 12
