"""The independent verifier: hand-made schedules and random corruptions of valid ones.

Every corruption must be rejected with a violation whose message names the chunk (``[s, i]``),
the link (``u->v``) and the slot where they apply.
"""

from __future__ import annotations

import dataclasses

import pytest
from helpers import demand_makespan, greedy_schedule, line_topology, random_instances, ring_topology
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ccplan.instances import Instance, make_collective, make_instance
from ccplan.schedule import Schedule, Send, verify
from ccplan.schedule.verify import Report, Violation

_SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _names(
    v: Violation, chunk: tuple[int, int] | None, link: tuple[int, int] | None, slot: int | None
) -> bool:
    """Whether the violation's message names the given chunk, link and slot (those not None)."""
    msg = v.message
    ok = True
    if chunk is not None:
        ok &= str(list(chunk)) in msg
    if link is not None:
        ok &= f"{link[0]}->{link[1]}" in msg
    if slot is not None:
        ok &= f"slot {slot}" in msg
    return ok


def _find(report: Report, kind: str, chunk=None, link=None, slot=None) -> Violation | None:  # type: ignore[no-untyped-def]
    for v in report.violations:
        if v.kind == kind and _names(v, chunk, link, slot):
            return v
    return None


# --------------------------------------------------------------------------- hand-made schedules


def test_line_broadcast_three_chunks_pipelines_in_four_slots() -> None:
    """Line 0 - 1 - 2, broadcast of C=3 chunks from 0, uniform links (l = L = 1).

    Chunk i goes 0 -> 1 at slot i and 1 -> 2 at slot i+1: each link carries one chunk per slot,
    node 1 holds chunk i from slot i+1 (just in time), and chunk 2 reaches node 2 at
    (2 + 1) + 1 = 4 = C + hops - 1. No schedule is faster: node 2 receives 3 chunks on one
    link, and its first can leave node 1 no earlier than slot 1.
    """
    topo = line_topology(3)
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=3, root=0), "3MB")
    assert list(inst.latency) == [1, 1, 1, 1]
    sends = [((0, i), 0, 1, i) for i in range(3)] + [((0, i), 1, 2, i + 1) for i in range(3)]
    report = verify(inst, Schedule.of(sends))
    assert report.ok, report.violations
    assert report.makespan_slots == 4
    assert report.makespan_us == pytest.approx(4 * inst.tau_us)
    assert report.arrivals[((0, 2), 1)] == 3 and report.arrivals[((0, 2), 2)] == 4


def test_ring_allgather_makespan() -> None:
    """Unidirectional ring of 4, C = 1, l = L = 1: the ring algorithm takes N - 1 = 3 slots."""
    topo = ring_topology(4)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB")
    sends = [(((i - k) % 4, 0), i, (i + 1) % 4, k) for k in range(3) for i in range(4)]
    report = verify(inst, Schedule.of(sends))
    assert report.ok and report.makespan_slots == 3


# --------------------------------------------------------------------------- corruptions


@_SETTINGS
@given(random_instances(), st.data())
def test_makespan_is_the_max_arrival(inst: Instance, data: st.DataObject) -> None:
    """The verifier's makespan equals the max over demands of (send slot + L) recomputed here."""
    sched = greedy_schedule(inst, seed=data.draw(st.integers(0, 5)))
    report = verify(inst, sched)
    assert report.ok
    assert report.makespan_slots == demand_makespan(inst, sched)


@_SETTINGS
@given(random_instances(), st.data())
def test_dropping_a_send_is_rejected(inst: Instance, data: st.DataObject) -> None:
    """Every send of the greedy lies on a path to a demand: dropping it leaves that demand unmet
    (postcondition, naming the chunk) or a later send of the chunk without it (causality,
    naming chunk, link and slot)."""
    sched = greedy_schedule(inst)
    assume(len(sched) > 0)
    i = data.draw(st.integers(0, len(sched) - 1))
    dropped = sched.sends[i]
    report = verify(inst, Schedule(sched.sends[:i] + sched.sends[i + 1 :]))
    assert not report.ok
    kinds = ("postcondition", "causality")
    hits = [v for v in report.violations if v.chunk == dropped.chunk and v.kind in kinds]
    assert hits
    remaining = {(s.chunk, s.src, s.dst, s.slot) for s in sched.sends if s is not dropped}
    for v in hits:
        if v.kind == "postcondition":
            assert _names(v, dropped.chunk, None, None)
        else:
            # A later send of the chunk that relied on it, directly or through another such send.
            assert v.link is not None and v.slot is not None
            assert (dropped.chunk, *v.link, v.slot) in remaining
            assert _names(v, dropped.chunk, v.link, v.slot)
    # The node the dropped send fed either needed the chunk or forwards it.
    assert any(v.kind == "postcondition" and f"node {dropped.dst}" in v.message for v in hits) or any(
        v.kind == "causality" and v.link is not None and v.link[0] == dropped.dst for v in hits
    )


@_SETTINGS
@given(random_instances(), st.data())
def test_moving_a_send_before_its_chunk_arrives_is_rejected(inst: Instance, data: st.DataObject) -> None:
    """A relay send moved to a slot before the chunk is usable at its sender breaks causality."""
    sched = greedy_schedule(inst)
    report = verify(inst, sched)
    relays = [s for s in sched.sends if s.src not in inst.collective.holders[s.chunk]]
    assume(relays)
    send = data.draw(st.sampled_from(relays))
    at = report.arrivals[(send.chunk, send.src)]
    assert at >= 1
    new_slot = data.draw(st.integers(0, at - 1))
    moved = [s for s in sched.sends if s is not send] + [dataclasses.replace(send, slot=new_slot)]
    bad = verify(inst, Schedule(tuple(moved)))
    assert not bad.ok
    assert _find(bad, "causality", send.chunk, (send.src, send.dst), new_slot)


@_SETTINGS
@given(random_instances(allow_capacity=False), st.data())
def test_second_chunk_on_an_occupied_link_slot_is_rejected(inst: Instance, data: st.DataObject) -> None:
    """With omega = 1, a second send starting in the same slot on the same link exceeds capacity;
    the extra chunk is one the sender holds by then (or the same chunk again). Only links whose
    omega is 1 qualify: under the slowest-link tau a faster link carries more per slot."""
    sched = greedy_schedule(inst)
    report = verify(inst, sched)
    index = inst.topology.link_index
    single = [s for s in sched.sends if inst.link_capacity[index[(s.src, s.dst)]] == 1]
    assume(len(single) > 0)
    send = data.draw(st.sampled_from(single))
    held = sorted(c for (c, node), t in report.arrivals.items() if node == send.src and t <= send.slot)
    others = [c for c in held if c != send.chunk] or [send.chunk]
    extra = Send(slot=send.slot, chunk=data.draw(st.sampled_from(others)), src=send.src, dst=send.dst)
    bad = verify(inst, Schedule((*sched.sends, extra)))
    assert not bad.ok
    assert _find(bad, "capacity", None, (send.src, send.dst), send.slot)
    v = _find(bad, "capacity", None, (send.src, send.dst), send.slot)
    assert v is not None and str(list(extra.chunk)) in v.message


@_SETTINGS
@given(random_instances(), st.data())
def test_duplicate_receive_is_rejected(inst: Instance, data: st.DataObject) -> None:
    """Sending a chunk again to a node that already receives it (same link, a later slot)."""
    sched = greedy_schedule(inst)
    assume(len(sched) > 0)
    send = data.draw(st.sampled_from(sched.sends))
    later = send.slot + data.draw(st.integers(1, 5))
    again = dataclasses.replace(send, slot=later)
    bad = verify(inst, Schedule((*sched.sends, again)))
    assert _find(bad, "duplicate-receive", send.chunk, (send.src, send.dst), later)


@_SETTINGS
@given(random_instances(), st.data())
def test_send_on_missing_link_is_rejected(inst: Instance, data: st.DataObject) -> None:
    topo = inst.topology
    missing = [(a, b) for a in topo.node_ids for b in topo.node_ids if a != b and not topo.has_link(a, b)]
    assume(missing)
    a, b = data.draw(st.sampled_from(missing))
    chunk = data.draw(st.sampled_from(inst.collective.chunk_ids))
    slot = data.draw(st.integers(0, 9))
    bad = verify(inst, Schedule((*greedy_schedule(inst).sends, Send(slot=slot, chunk=chunk, src=a, dst=b))))
    assert _find(bad, "no-link", chunk, (a, b), slot)


@_SETTINGS
@given(random_instances(allow_single_port=False), st.data())
def test_single_port_violation_is_rejected(inst: Instance, data: st.DataObject) -> None:
    """With single_port, a node that sends on two out-links in one slot is rejected, naming the
    node's sends (chunk, link, slot) in the message."""
    sp_inst = dataclasses.replace(inst, single_port=True)
    sched = greedy_schedule(sp_inst)
    assert verify(sp_inst, sched).ok
    topo = inst.topology
    candidates = [
        (s, x) for s in sched.sends for e in topo.out_links[s.src] if (x := topo.links[e].dst) != s.dst
    ]
    assume(candidates)
    send, other = data.draw(st.sampled_from(candidates))
    extra = Send(slot=send.slot, chunk=send.chunk, src=send.src, dst=other)
    bad = verify(sp_inst, Schedule((*sched.sends, extra)))
    hit = _find(bad, "single-port-send", extra.chunk, (extra.src, extra.dst), extra.slot)
    assert hit is not None and f"node {send.src}" in hit.message


@_SETTINGS
@given(random_instances(), st.data())
def test_send_in_an_outage_slot_is_rejected(inst: Instance, data: st.DataObject) -> None:
    """Declaring an outage (omega = 0) in a slot a send occupies makes that send a capacity violation."""
    sched = greedy_schedule(inst)
    assume(len(sched) > 0)
    send = data.draw(st.sampled_from(sched.sends))
    e = inst.topology.link_index[(send.src, send.dst)]
    slot = send.slot + data.draw(st.integers(0, int(inst.occupancy[e]) - 1))
    out = dataclasses.replace(inst, outages=(*inst.outages, (send.src, send.dst, slot)))
    bad = verify(out, sched)
    v = _find(bad, "capacity", send.chunk, (send.src, send.dst), slot)
    assert v is not None and "omega is 0" in v.message


def test_reduce_flag_on_a_data_movement_collective_is_a_violation():
    """AllGather on the line 0-1: the two sends at slot 0 are a valid schedule (makespan 1);
    flagging one as a reduce makes it invalid (nothing to combine), named by chunk and link."""
    topo = line_topology(2)
    inst = make_instance(topo, make_collective("allgather", topo), "2MB")
    good = Schedule((Send(0, (0, 0), 0, 1), Send(0, (1, 0), 1, 0)))
    assert verify(inst, good).ok
    bad = Schedule((Send(0, (0, 0), 0, 1, reduce=True), Send(0, (1, 0), 1, 0)))
    report = verify(inst, bad)
    assert not report.ok
    kinds = [v.kind for v in report.violations]
    assert "reduce-not-combining" in kinds
    v = report.violations[kinds.index("reduce-not-combining")]
    assert v.chunk == (0, 0) and v.link == (0, 1) and v.slot == 0
