"""Combining collectives: definitions, the contribution-set verifier, the reversal construction.

Independent check used throughout: :func:`numeric_replay` gives every GPU a random 61-bit integer
per chunk and replays a schedule with real additions (``reduce``) and overwrites (copy). A
schedule that counts a contribution twice or loses one ends with a wrong sum at some
destination, whatever the verifier says; the verifier's verdict is compared with it.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.instances.builtin import dgx1, fully_connected, line, ring, star_switch
from ccplan.instances.collectives import allgather, broadcast
from ccplan.instances.combining import COMBINING, allreduce, make_combining, reduce, reducescatter
from ccplan.instances.instance import Instance, make_instance
from ccplan.pipeline import get_engine
from ccplan.pipeline.combining import reverse_schedule, solve_combining
from ccplan.schedule.combining import verify_combining
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify


def numeric_replay(instance: Instance, schedule: Schedule, seed: int = 0) -> bool:
    """True when every ``post`` node ends with the exact sum of all contributions.

    Payload = sender's value at the start of the send slot; arrivals at slot ``t`` are applied
    before the sends of slot ``t`` read (copies first, then additions), as in DESIGN.md.
    """
    rng = random.Random(seed)
    coll = instance.collective
    value: dict[tuple[int, tuple[int, int]], int] = {}
    total: dict[tuple[int, int], int] = {}
    for c, holders in coll.holders.items():
        total[c] = 0
        for v in holders:
            x = rng.getrandbits(61)
            value[(v, c)] = x
            total[c] += x
    lat = instance.latency
    index = instance.topology.link_index
    pending: dict[int, list[tuple[Send, int]]] = defaultdict(list)
    by_slot: dict[int, list[Send]] = defaultdict(list)
    for s in schedule.sends:
        by_slot[s.slot].append(s)

    def land(upto: int | None) -> None:
        for t in sorted(k for k in pending if upto is None or k <= upto):
            for s, x in sorted(pending.pop(t), key=lambda p: (p[0].reduce, p[0])):
                key = (s.dst, s.chunk)
                value[key] = value.get(key, 0) + x if s.reduce else x

    for t in sorted(by_slot):
        land(t)
        for s in by_slot[t]:
            pending[t + int(lat[index[(s.src, s.dst)]])].append((s, value.get((s.src, s.chunk), 0)))
    land(None)
    return all(value.get((v, c)) == total[c] for c, nodes in coll.post for v in nodes)


def _inst(topo, coll, size="1MB", **kw):
    return make_instance(topo, coll, size, **kw)


# --------------------------------------------------------------------------- definitions
def test_definitions_pre_post_pieces():
    """ReduceScatter/AllReduce: every GPU contributes to each of N*C chunks; RS chunk (g, i) ends
    at g only, AR chunks at every GPU; Reduce: C chunks end at the root. Sizes as TE-CCL."""
    topo = ring(4)
    rs = reducescatter(topo, chunks=2)
    assert rs.combining and rs.pieces == 8
    assert rs.holders[(2, 1)] == frozenset(range(4))
    assert rs.wanted[(2, 1)] == frozenset({2})
    ar = allreduce(topo, chunks=1)
    assert ar.pieces == 4 and ar.wanted[(1, 0)] == frozenset(range(4))
    rd = reduce(topo, chunks=3, root=2)
    assert rd.pieces == 3 and rd.root == 2 and rd.wanted[(2, 0)] == frozenset({2})
    assert set(COMBINING) == {"reducescatter", "allreduce", "reduce"}
    with pytest.raises(ValidationError, match="root"):
        make_combining("reduce", star_switch(3), root=3)
    with pytest.raises(ValidationError, match="unknown"):
        make_combining("scan", topo)


# --------------------------------------------------------------------------- verifier by hand
def _line3_rs() -> tuple[Instance, list[Send]]:
    """ReduceScatter on the line 0 - 1 - 2 (alpha 0, so L = 1 on every link).

    Shard 0: 2->1 (reduce) at slot 0, then 1->0 at slot 1: 0 holds {0,1,2} from slot 2.
    Shard 2: the mirror image, 0->1 at 0 and 1->2 at 1: complete at 2 from slot 2.
    Shard 1: 0->1 and 2->1 are busy in slot 0, so both go at slot 1: complete from slot 2.
    Makespan 2, which is also the latency bound (0 and 2 are two hops apart).
    """
    inst = _inst(line(3, alpha_us=0.0), reducescatter(line(3, alpha_us=0.0)))
    sends = [
        Send(0, (0, 0), 2, 1, True), Send(1, (0, 0), 1, 0, True),
        Send(0, (2, 0), 0, 1, True), Send(1, (2, 0), 1, 2, True),
        Send(1, (1, 0), 0, 1, True), Send(1, (1, 0), 2, 1, True),
    ]
    return inst, sends


def test_verifier_accepts_hand_reducescatter_and_times_it():
    inst, sends = _line3_rs()
    rep = verify(inst, Schedule(tuple(sends)))
    assert rep.ok, rep.violations
    assert rep.makespan_slots == 2
    assert rep.arrivals[((1, 0), 1)] == 2 and rep.arrivals[((0, 0), 0)] == 2
    assert numeric_replay(inst, Schedule(tuple(sends)))


def test_verifier_rejects_double_count_naming_chunk_link_slot():
    """Reduce to root 0 on 3 fully connected GPUs: 1->0 at slot 0, 2->1 at slot 0 (lands at 1 in
    slot 1), then 1->0 again at slot 1 carries {1, 2}: contribution 1 reaches 0 twice."""
    topo = fully_connected(3, alpha_us=0.0)
    inst = _inst(topo, reduce(topo, root=0))
    sched = Schedule((Send(0, (0, 0), 1, 0, True), Send(0, (0, 0), 2, 1, True), Send(1, (0, 0), 1, 0, True)))
    rep = verify(inst, sched)
    kinds = [v.kind for v in rep.violations]
    assert "double-count" in kinds
    bad = next(v for v in rep.violations if v.kind == "double-count")
    assert bad.chunk == (0, 0) and bad.link == (1, 0) and bad.slot == 1
    assert "[1]" in bad.message
    assert not numeric_replay(inst, sched)


def test_verifier_rejects_copy_that_overwrites_with_an_incomplete_set():
    """Root 0 still holds its own unsent contribution {0}; a copy (reduce=False) of {1} would
    replace it: contribution 0 is lost."""
    topo = fully_connected(3, alpha_us=0.0)
    inst = _inst(topo, reduce(topo, root=0))
    sched = Schedule((Send(0, (0, 0), 2, 1, True), Send(1, (0, 0), 1, 0, False)))
    rep = verify(inst, sched)
    assert any(v.kind == "copy-overwrite" and v.link == (1, 0) for v in rep.violations)
    assert any(v.kind == "postcondition" and "[0]" in v.message for v in rep.violations)
    assert not numeric_replay(inst, sched)


def test_copy_of_complete_set_and_copy_into_dead_buffer_are_valid():
    """AllReduce on the line 0-1-2 by hand (L = 1): reduce 0->1 and 2->1 at slot 0 (1 holds
    everything from slot 1), then copy 1->0 and 1->2 at slot 1: both ends hold the complete
    sum (over their dead partial sums) from slot 2. Makespan 2."""
    topo = line(3, alpha_us=0.0)
    inst = _inst(topo, allreduce(topo))
    sends = []
    for c in inst.collective.chunk_ids:
        # Chunks share links, so they go one slot apart: chunk k uses slots 2k and 2k+1.
        k = c[0]
        sends += [Send(2 * k, c, 0, 1, True), Send(2 * k, c, 2, 1, True),
                  Send(2 * k + 1, c, 1, 0, False), Send(2 * k + 1, c, 1, 2, False)]
    rep = verify(inst, Schedule(tuple(sends)))
    assert rep.ok, rep.violations
    assert rep.makespan_slots == 6  # last chunk: slots 4 and 5, complete from 6
    assert numeric_replay(inst, Schedule(tuple(sends)))


def test_verifier_capacity_causality_and_switch_reduce_option():
    """Star of 2 GPUs through switch 2: the switch sends before it holds anything (causality);
    two sends on link 0->2 in one slot exceed omega = 1. Star of 3 through switch 3: GPUs 1
    and 2 send their parts into the switch in slot 0 and it forwards their sum: an in-switch
    reduction, a ``switch-reduce`` violation by default and accepted with switch_reduce."""
    topo = star_switch(2, alpha_us=0.0)
    inst = _inst(topo, reduce(topo, root=0))
    rep = verify(inst, Schedule((Send(0, (0, 0), 2, 0, True),)))
    assert any(v.kind == "causality" and v.link == (2, 0) and v.slot == 0 for v in rep.violations)
    inst3 = _inst(star_switch(3, alpha_us=0.0), reduce(star_switch(3, alpha_us=0.0), root=0))
    sched = Schedule((Send(0, (0, 0), 1, 3, True), Send(0, (0, 0), 2, 3, True), Send(1, (0, 0), 3, 0, True)))
    strict = verify_combining(inst3, sched)
    assert [v.kind for v in strict.violations] == ["switch-reduce"]
    assert "switch 3" in strict.violations[0].message
    assert verify(replace(inst3, switch_reduce=True), sched).ok
    cap = Schedule((Send(0, (0, 0), 1, 3, True), Send(0, (0, 0), 1, 3, True)))
    assert any(v.kind == "capacity" for v in verify(inst3, cap).violations)


# --------------------------------------------------------------------------- reversal
def test_reverse_schedule_slot_mapping():
    """Broadcast from 0 on the reversed line 0-1-2 (L = 1): 0->1 at 0, 1->2 at 1, makespan
    D = 2. Reversed: the send at t becomes one at D - t - L on the original link turned round:
    2->1 at 0 and 1->0 at 1, both reduces: a valid Reduce to 0 with makespan 2."""
    topo = line(3, alpha_us=0.0)
    rev = topo.reversed()
    bc = _inst(rev, broadcast(rev, root=0))
    ag_sched = Schedule((Send(0, (0, 0), 0, 1), Send(1, (0, 0), 1, 2)))
    assert verify(bc, ag_sched).ok
    rs = reverse_schedule(bc, ag_sched)
    assert set(rs.sends) == {Send(0, (0, 0), 2, 1, True), Send(1, (0, 0), 1, 0, True)}
    inst = _inst(topo, reduce(topo, root=0))
    rep = verify(inst, rs)
    assert rep.ok and rep.makespan_slots == 2


@pytest.mark.parametrize("topo", [ring(4, alpha_us=0.0), dgx1(), star_switch(4)], ids=lambda t: t.name)
@pytest.mark.parametrize("kind", ["reducescatter", "reduce", "allreduce"])
def test_solve_combining_with_mteg_verifies(topo, kind):
    """Every combining schedule built from the MTEG engine verifies, adds up numerically, is not
    below the lower bound; AllReduce is at most ReduceScatter + AllGather."""
    coll = make_combining(kind, topo, chunks=1, root=topo.gpus[-1])
    inst = _inst(topo, coll)
    out = solve_combining(inst, "mteg", SolveOptions(time_limit=10))
    assert out.schedule is not None
    rep = verify(inst, out.schedule)
    assert rep.ok, rep.violations[:3]
    assert numeric_replay(inst, out.schedule)
    assert rep.makespan_slots is not None and rep.makespan_slots >= lower_bound_slots(inst)
    if kind == "allreduce":
        assert rep.makespan_slots <= out.details["concat_slots"]


def test_reducescatter_delivers_each_shard_once():
    """Each shard's owner ends with exactly the set of all N contributions (verifier) and with
    the exact numeric sum (replay); no non-owner is required to hold anything."""
    topo = dgx1()
    inst = _inst(topo, reducescatter(topo, chunks=2))
    out = solve_combining(inst, "mteg", SolveOptions(time_limit=10))
    assert out.schedule is not None
    rep = verify(inst, out.schedule)
    assert rep.ok
    owners = {c: v for (c, v) in rep.arrivals if v == c[0]}
    assert set(owners) == set(inst.collective.chunk_ids)
    assert numeric_replay(inst, out.schedule, seed=3)


def test_non_combining_instance_passes_through():
    topo = ring(4)
    inst = _inst(topo, allgather(topo))
    out = solve_combining(inst, "mteg", SolveOptions(time_limit=5))
    assert out.schedule is not None and verify(inst, out.schedule).ok


# --------------------------------------------------------------------------- AlltoAll
@pytest.mark.parametrize("method", ["heuristic", "milp"])
def test_alltoall_through_engines(method):
    """AllToAll schedules of the registered engines verify (small instance for the MILP)."""
    from ccplan.instances.collectives import alltoall

    try:
        get_engine(method)
    except ValidationError:
        pytest.skip(f"engine {method} not registered")
    topo = ring(3, alpha_us=0.0) if method == "milp" else dgx1()
    inst = _inst(topo, alltoall(topo))
    out = solve_combining(inst, method, SolveOptions(time_limit=2))
    assert out.schedule is not None
    rep = verify(inst, out.schedule)
    assert rep.ok, rep.violations[:3]
    assert rep.makespan_slots is not None and rep.makespan_slots >= lower_bound_slots(inst)


def test_verifier_never_accepts_a_wrong_sum_under_random_corruption():
    """Drop a send, move it 1-2 slots earlier, or flip its reduce flag in valid ring and
    tree AllReduce schedules: whenever the numeric replay ends with a wrong sum somewhere, the
    verifier must reject the schedule (and it must accept the unmodified ones)."""
    import ccplan.heuristics.baselines  # noqa: F401  (registers ring and tree)
    from ccplan.pipeline.solve import solve

    rng = random.Random(7)
    topo = ring(4, alpha_us=0.0)
    inst = _inst(topo, allreduce(topo, 2))
    for method in ("ring", "tree"):
        base = solve(inst, method).schedule
        assert base is not None and verify(inst, base).ok and numeric_replay(inst, base)
        sends = list(base.sends)
        for trial in range(60):
            k = rng.randrange(len(sends))
            s = sends[k]
            op = trial % 3
            if op == 0:
                mutated = sends[:k] + sends[k + 1:]
            elif op == 1:
                earlier = Send(max(0, s.slot - rng.choice((1, 2))), s.chunk, s.src, s.dst, s.reduce)
                mutated = [*sends[:k], earlier, *sends[k + 1:]]
            else:
                mutated = [*sends[:k], Send(s.slot, s.chunk, s.src, s.dst, not s.reduce), *sends[k + 1:]]
            sched = Schedule(tuple(mutated))
            if not numeric_replay(inst, sched, seed=trial):
                assert not verify(inst, sched).ok, (method, op, s)
