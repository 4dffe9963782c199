"""The alpha-beta simulator: hand-derived times and properties against the slot model."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import greedy_schedule, line_topology, random_instances, ring_topology
from hypothesis import HealthCheck, given, settings

from ccplan.bounds import compute_bounds
from ccplan.errors import ValidationError
from ccplan.instances import Instance, make_collective, make_instance
from ccplan.schedule import Schedule, Send, verify
from ccplan.schedule.simulate import SimResult, simulate


def _line_broadcast() -> tuple[Instance, Schedule]:
    """Line 0 - 1 - 2 at 50 GB/s, alpha 1 us, broadcast of 2 MB from 0 in C=2 chunks."""
    topo = line_topology(3, bw=50.0, alpha=1.0)
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=2, root=0), "2MB")
    sched = Schedule.of(
        [((0, 0), 0, 1, 0), ((0, 0), 1, 2, 1), ((0, 1), 0, 1, 1), ((0, 1), 1, 2, 2)], method="hand"
    )
    return inst, sched


def test_line_broadcast_pipelines() -> None:
    """mu = 1 MB, tr = mu/B = 20 us, alpha = 1 us (alpha/tau = 0.05 <= 0.1, so L = 1 slot).

    Sends in schedule order (slot, chunk): c0 0->1 starts 0, arrives 21; c0 1->2 starts when c0
    is at 1 (21), arrives 42; c1 0->1 waits for the link (free at 20, alpha pipelines), arrives
    41; c1 1->2 starts at max(41, link free at 21 + 20 = 41) = 41, arrives 62. This is the
    pipeline formula (hops + C - 1) tr + hops alpha = 3*20 + 2*1 = 62 us; algbw = 2 MB / 62 us.
    """
    inst, sched = _line_broadcast()
    assert verify(inst, sched).ok
    res = simulate(inst, sched)
    order = [(s.chunk, s.src, s.dst) for s in sched.sends]
    assert order == [((0, 0), 0, 1), ((0, 0), 1, 2), ((0, 1), 0, 1), ((0, 1), 1, 2)]
    np.testing.assert_allclose(res.start_us, [0.0, 21.0, 20.0, 41.0])
    np.testing.assert_allclose(res.finish_us, [21.0, 42.0, 41.0, 62.0])
    assert res.completion_us == pytest.approx(62.0)
    assert res.algbw_GBps == pytest.approx(2e6 / 62e3)
    assert res.arrival_us[((0, 1), 2)] == pytest.approx(62.0)
    out = res.to_dict()
    assert out["completion_us"] == pytest.approx(62.0) and len(out["start_us"]) == 4


def _ring_schedule(n: int) -> Schedule:
    """Unidirectional ring AllGather: at step k node i forwards chunk of node (i - k) mod n."""
    return Schedule.of([(((i - k) % n, 0), i, (i + 1) % n, k) for k in range(n - 1) for i in range(n)])


@pytest.mark.parametrize("n", [3, 4, 6])
def test_ring_allgather_matches_alpha_beta_formula(n: int) -> None:
    """Uniform ring, B = 25 GB/s, alpha = 0.5 us, 1 MB AllGather with C = 1: mu = 1 MB / n.

    Step k's send at node i needs the chunk that arrived from step k-1 at time k (alpha + tr)
    (induction), and its link was freed at (k-1)(alpha + tr) + tr, earlier; so it starts at
    k (alpha + tr) and the last step k = n-2 ends at T = (n-1)(alpha + mu/B).
    """
    topo = ring_topology(n, bw=25.0, alpha=0.5)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB")
    sched = _ring_schedule(n)
    assert verify(inst, sched).ok
    tr = 1e6 / n / 25e9 * 1e6
    res = simulate(inst, sched)
    assert res.completion_us == pytest.approx((n - 1) * (0.5 + tr))
    for s, start in zip(sched.sends, res.start_us, strict=True):
        assert start == pytest.approx(s.slot * (0.5 + tr))


def test_reduce_cost_is_added_at_the_receiver() -> None:
    """One send of one chunk with reduce=True: arrival = alpha + mu/B + cost * mu.
    Line 0 - 1, broadcast 1 MB, B = 50 GB/s: tr = 20 us, alpha 1 us, cost 1e-6 us/B: +1 us."""
    topo = line_topology(2, bw=50.0, alpha=1.0)
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=1, root=0), "1MB")
    sched = Schedule((Send(slot=0, chunk=(0, 0), src=0, dst=1, reduce=True),))
    assert simulate(inst, sched).completion_us == pytest.approx(21.0)
    assert simulate(inst, sched, reduce_cost_us_per_byte=1e-6).completion_us == pytest.approx(22.0)
    with pytest.raises(ValidationError, match="reduce_cost_us_per_byte"):
        simulate(inst, sched, reduce_cost_us_per_byte=-1.0)


def test_non_causal_schedule_is_rejected() -> None:
    """Node 1 forwards chunk [0, 0] in slot 0, before it has it; or one never sent to it."""
    inst, _ = _line_broadcast()
    early = Schedule.of([((0, 0), 0, 1, 0), ((0, 0), 1, 2, 0), ((0, 1), 0, 1, 1), ((0, 1), 1, 2, 2)])
    with pytest.raises(ValidationError, match=r"chunk \[0, 0\] on link 1->2 at slot 0.*only from slot 1"):
        simulate(inst, early)
    never = Schedule.of([((0, 0), 0, 1, 0), ((0, 1), 1, 2, 1)])
    with pytest.raises(ValidationError, match=r"chunk \[0, 1\] on link 1->2 at slot 1.*never arrives"):
        simulate(inst, never)


def test_bad_link_and_unmet_demand_are_rejected() -> None:
    inst, _ = _line_broadcast()
    with pytest.raises(ValidationError, match=r"no link 0->2"):
        simulate(inst, Schedule.of([((0, 0), 0, 2, 0)]))
    with pytest.raises(ValidationError, match=r"chunk \[0, 1\] never reaches node 1"):
        simulate(inst, Schedule.of([((0, 0), 0, 1, 0), ((0, 0), 1, 2, 1)]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_instances(allow_capacity=False, alpha_threshold=0.0))
def test_replay_properties(inst: Instance) -> None:
    """For a valid schedule with capacity = 1 and alpha_threshold = 0 (so delta tau >= alpha and
    l tau >= mu/B): every send starts by slot * tau plus (omega_e - 1) transfers of its link
    (omega_e > 1 only on a link faster than the slot, which serves its slot's chunks in turn;
    induction in the simulate docstring) and is usable by (slot + L) tau, so the completion is
    <= makespan * tau; every send lasts alpha + mu/B; sends on one link start at least mu/B
    apart; and the completion is >= the microsecond lower bound."""
    sched = greedy_schedule(inst)
    report = verify(inst, sched)
    assert report.ok
    res = simulate(inst, sched)
    assert isinstance(res, SimResult)
    tau = inst.tau_us
    assert res.completion_us <= report.makespan_slots * tau * (1 + 1e-9) + 1e-9  # type: ignore[operator]
    assert res.completion_us >= compute_bounds(inst).best_us * (1 - 1e-9) - 1e-9
    index = inst.topology.link_index
    last_start: dict[int, float] = {}
    for s, start, finish in zip(sched.sends, res.start_us, res.finish_us, strict=True):
        e = index[(s.src, s.dst)]
        tr = float(inst.transfer_us[e])
        omega = int(inst.link_capacity[e])
        assert start <= (s.slot * tau + (omega - 1) * tr) * (1 + 1e-9) + 1e-9
        assert finish <= (s.slot + int(inst.latency[e])) * tau * (1 + 1e-9) + 1e-9
        assert finish - start == pytest.approx(float(inst.topology.alpha[e]) + tr)
        if e in last_start:
            assert start - last_start[e] >= tr * (1 - 1e-9)
        last_start[e] = start


def test_reduce_chain_waits_for_contributions() -> None:
    """A Reduce to 0 on the line 0 - 1 - 2 (combining collective built by hand), C = 2, 2 MB:
    mu = 1 MB, tr = 20 us, alpha = 1 us, reduce cost r mu = 1 us per reduce (r = 1e-6 us/B).

    Chunk i: 2 -> 1 at slot i and 1 -> 0 at slot i+1, both reduce. Chunk 0: reaches 1 at
    0 + 21 + 1 = 22, leaves 1 at 22 and reaches 0 at 22 + 21 + 1 = 44. Chunk 1: link 2 -> 1 is free
    at 20, so it reaches 1 at 20 + 21 + 1 = 42; link 1 -> 0 is free at 22 + 20 = 42; it reaches 0 at
    42 + 21 + 1 = 64 = the pipeline 62 plus one reduce per hop.
    """
    from ccplan.instances.collectives import Collective

    topo = line_topology(3, bw=50.0, alpha=1.0)
    coll = Collective(
        "custom", 2, tuple(((0, i), (0, 1, 2)) for i in range(2)), tuple(((0, i), (0,)) for i in range(2)),
        pieces=2, combining=True,
    )
    inst = make_instance(topo, coll, "2MB")
    sends = [Send(slot=i, chunk=(0, i), src=2, dst=1, reduce=True) for i in range(2)]
    sends += [Send(slot=i + 1, chunk=(0, i), src=1, dst=0, reduce=True) for i in range(2)]
    res = simulate(inst, Schedule(tuple(sends)), reduce_cost_us_per_byte=1e-6)
    assert res.completion_us == pytest.approx(64.0)
    assert res.arrival_us[((0, 0), 0)] == pytest.approx(44.0)
    assert simulate(inst, Schedule(tuple(sends))).completion_us == pytest.approx(62.0)
