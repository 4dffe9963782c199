"""The independent verifier: checks a schedule against an instance, nothing else.

It depends only on :class:`~ccplan.instances.Instance` and :class:`Schedule` (no engine, no
solver), replays the sends slot by slot with the canonical semantics of DESIGN.md and names
the chunk, link and slot of every violation.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.limits import BYTES_PER_LINK_SLOT_OF, BYTES_PER_SEND_COLUMNS, Estimate
from ccplan.schedule.arrivals import ArrivalMap, _find, _node_positions, send_columns
from ccplan.schedule.core import Schedule
from ccplan.schedule.estimate import estimate_schedule
from ccplan.schedule.report import (  # noqa: F401  (re-exported: the verifier's report types)
    VIOLATION_KINDS,
    Occupancy,
    Report,
    Violation,
    _overloaded,
    occupancy_overloads,
)


def verify(instance: Instance, schedule: Schedule, *, fast: bool = True) -> Report:
    """Check ``schedule`` against ``instance`` under the canonical slot semantics.

    Rules checked (numbers refer to the MILP of ``000_*.txt``):

    - every send uses an existing link and a chunk of the collective;
    - causality (5): the sender holds the chunk at the start of the send slot;
    - a node receives a chunk at most once and never one it already held (6 as an equality);
    - capacity (7) over the whole occupancy window ``t .. t+l-1`` against ``omega``;
    - single-port (instance option): one send and one receive per node per slot;
    - the postcondition (8);
    - under ``switch_model == "cut-through"``: a switch holds nothing, so it sends a chunk
      only in a slot in which that chunk arrives there (it may receive a chunk again in a
      later slot, never twice in one slot), and a hop from a switch into a GPU delivers at
      ``t + delta`` (``instance.latency``); see docs/model.md.

    Parameters
    ----------
    instance : Instance
    schedule : Schedule
    fast : bool
        Decide first with the column verifier (:func:`verify_columns`, for schedules of at
        least :data:`COLUMN_VERIFY_MIN_SENDS` sends or kept as columns: data-movement
        collectives, store-and-forward); it accepts a schedule exactly when the replay below
        does, and when it finds any violation (or does not apply) the replay runs and gives
        the Report with its messages. Combining collectives (store-and-forward or
        cut-through) are decided first, for schedules of at least
        :data:`~ccplan.schedule.verify_combining_fast.COMBINING_FAST_MIN_SENDS` sends or
        kept as columns, by the compiled pass
        :func:`~ccplan.schedule.verify_combining_fast.verify_combining_columns`, which
        accepts exactly what the replay of :mod:`ccplan.schedule.combining` accepts.
        ``False`` runs the replay only (the reference the tests compare against).

    Returns
    -------
    Report
    """
    kept = "_columns" in schedule.__dict__
    if fast and instance.collective.combining:
        from ccplan.schedule.verify_combining_fast import COMBINING_FAST_MIN_SENDS, verify_combining_columns

        if len(schedule) >= COMBINING_FAST_MIN_SENDS or kept:
            report = verify_combining_columns(instance, schedule)
            if report is not None:
                return report
    if fast and (len(schedule) >= COLUMN_VERIFY_MIN_SENDS or kept):
        report = verify_columns(instance, schedule)
        if report is not None:
            return report
        if kept:
            # a schedule kept as columns was admitted on the column verifier's memory
            # (estimate_verify); the replay that words the violations makes a Send per
            # send, about 5 times as much at 16.8 million sends: refused here, not half-run

            estimate_schedule(
                instance, schedule, "verify (the column check failed; the replay that lists the violations)"
            ).check()
    return _verify_replay(instance, schedule)


def column_check_applies(instance: Instance, schedule: Schedule) -> bool:
    """Whether :func:`verify_columns` can accept ``schedule`` (data movement, store-and-forward
    with every ``L >= 1``, no reducing send); when False the replay decides."""
    if instance.collective.combining or instance.bufferless:
        return False
    latency = np.asarray(instance.latency, dtype=np.int64)
    if len(latency) and int(latency.min()) < 1:
        return False
    return not bool(schedule.columns()["reduce"].any())


COLUMN_VERIFY_MIN_SENDS = 256
"""Below this many sends a schedule held as Send objects is replayed directly: the column
verifier's fixed numpy cost (about 0.6 ms) is more than the replay of a few hundred sends
(DGX1 AllGather, 56 sends: replay 0.35 ms, columns 0.64 ms; torus 4x4, 240 sends: 0.79 vs
0.82 ms; torus 8x8, 4,032 sends: 7.1 vs 3.0 ms), and the heuristic portfolio verifies every
candidate, dozens per warm start. A schedule already kept as columns always takes the column
path (no Send objects are made for it)."""


def _verify_replay(instance: Instance, schedule: Schedule) -> Report:
    """The replay verifier: every send in chronological order (see :func:`verify`)."""
    if instance.collective.combining:
        # Combining collectives track sets of contributions, not copies.
        from ccplan.schedule.combining import verify_combining

        return verify_combining(instance, schedule)
    topo = instance.topology
    coll = instance.collective
    holders = coll.holders
    latency = instance.latency
    violations: list[Violation] = []

    hold: dict[tuple[Chunk, int], int] = {}
    for chunk, nodes in holders.items():
        for v in nodes:
            hold[(chunk, v)] = 0

    occupied = Occupancy(instance)
    bufferless = instance.bufferless
    # Arrival slots at bufferless (cut-through) switches: they forward only in those slots.
    passing: dict[tuple[Chunk, int], set[int]] = {}

    # Sends are chronological; every arrival is at least one slot after its send, so all
    # arrivals that a send in slot t may rely on are registered before slot t is processed.
    # The exception is a cut-through hop (switch into GPU, L = delta may be 0): it may feed a
    # GPU's send in the same slot, so within a slot the switches' sends go first (a switch
    # itself is fed only by links of L >= 1, i.e. by earlier slots).
    sends_in_order = schedule.sends
    if bufferless:
        sends_in_order = tuple(sorted(schedule.sends, key=lambda s: (s.slot, s.src not in bufferless)))
    for send in sends_in_order:
        key = (send.src, send.dst)
        if send.reduce:
            # A reduce combines contributions; a data-movement collective has none to combine.
            violations.append(
                Violation(
                    "reduce-not-combining",
                    f"{send.describe()}: {coll.kind} is not a combining collective, a send "
                    "cannot reduce",
                    send.chunk,
                    key,
                    send.slot,
                )
            )
            continue
        if send.chunk not in holders:
            violations.append(
                Violation(
                    "unknown-chunk",
                    f"{send.describe()}: the collective has no such chunk",
                    send.chunk,
                    key,
                    send.slot,
                )
            )
            continue
        if key not in topo.link_index:
            violations.append(
                Violation(
                    "no-link",
                    f"{send.describe()}: the topology has no link {send.src}->{send.dst}",
                    send.chunk,
                    key,
                    send.slot,
                )
            )
            continue
        link = topo.link_index[key]
        if send.src in bufferless and send.src not in holders[send.chunk]:
            slots = passing.get((send.chunk, send.src), set())
            if send.slot not in slots:
                where = f"slots {sorted(slots)}" if slots else "no slot"
                violations.append(
                    Violation(
                        "causality",
                        f"{send.describe()}: cut-through switch {send.src} holds nothing and the "
                        f"chunk passes it in {where}, not in slot {send.slot}",
                        send.chunk,
                        key,
                        send.slot,
                    )
                )
                continue
            held_from: int | None = send.slot
        else:
            held_from = hold.get((send.chunk, send.src))
        if held_from is None or held_from > send.slot:
            when = "never holds it" if held_from is None else f"holds it only from slot {held_from}"
            violations.append(
                Violation(
                    "causality",
                    f"{send.describe()}: node {send.src} does not hold the chunk at the start "
                    f"of slot {send.slot} ({when})",
                    send.chunk,
                    key,
                    send.slot,
                )
            )
            continue
        arrive = send.slot + int(latency[link])
        if send.dst in bufferless and send.dst not in holders[send.chunk]:
            slots = passing.setdefault((send.chunk, send.dst), set())
            if arrive in slots:
                violations.append(
                    Violation(
                        "duplicate-receive",
                        f"{send.describe()}: cut-through switch {send.dst} already receives the "
                        f"chunk in slot {arrive}",
                        send.chunk,
                        key,
                        send.slot,
                    )
                )
            else:
                slots.add(arrive)
                hold[(send.chunk, send.dst)] = min(arrive, hold.get((send.chunk, send.dst), arrive))
            occupied.add(send, link)
            continue
        previous = hold.get((send.chunk, send.dst))
        if previous is not None:
            violations.append(
                Violation(
                    "duplicate-receive",
                    f"{send.describe()}: node {send.dst} already receives or holds the chunk "
                    f"(from slot {previous}); a node holds a chunk at most once",
                    send.chunk,
                    key,
                    send.slot,
                )
            )
        else:
            hold[(send.chunk, send.dst)] = arrive
        occupied.add(send, link)

    violations.extend(occupied.violations())

    makespan = 0
    missing = False
    for chunk, node in coll.demands:
        at = hold.get((chunk, node))
        if at is None:
            missing = True
            violations.append(
                Violation(
                    "postcondition", f"chunk {list(chunk)} never reaches node {node}", chunk, None, None
                )
            )
        else:
            makespan = max(makespan, at)
    ms = None if missing else makespan
    return Report(
        ok=not violations,
        violations=tuple(violations),
        makespan_slots=ms,
        makespan_us=None if ms is None else instance.slots_to_us(ms),
        num_sends=len(schedule.sends),
        arrivals=hold,
    )


# --------------------------------------------------------------------------- column verifier
def _pair_keys(
    instance: Instance, table: tuple[tuple[Chunk, tuple[int, ...]], ...], chunk_pos: Mapping[Chunk, int]
) -> np.ndarray:
    """``chunk * n + node`` of every (chunk, node) listed by a pre- or postcondition table."""
    n = instance.topology.num_nodes
    parts = [np.asarray(nodes, dtype=np.int64) for _, nodes in table]
    counts = np.array([len(p) for p in parts], dtype=np.int64)
    chunk = np.repeat(np.array([chunk_pos[c] for c, _ in table], dtype=np.int64), counts)
    nodes = _node_positions(instance, np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
    return chunk * n + nodes


def verify_columns(instance: Instance, schedule: Schedule) -> Report | None:
    """Accept a valid schedule with array operations, or return None.

    The rules of :func:`verify`, for data-movement collectives under store-and-forward
    (every link's ``L >= 1``), over the schedule's columns instead of a replay:

    - every chunk is the collective's and every link exists (two binary searches);
    - a node receives a chunk at most once and never one it holds at slot 0 (6): the
      (chunk, node) keys of the precondition and of every receipt, sorted, have no repeat;
    - causality (5): the key (chunk, sender) of every send is found there with a slot
      ``<= t`` (0 for the precondition, else its one receipt's ``t' + L``);
    - capacity (7), outages and single-port: :func:`occupancy_overloads` finds none;
    - the postcondition (8): every demand's key is there; the makespan is the latest.

    With every ``L >= 1`` this is the replay's verdict: the replay registers a receipt
    before any send of a later slot, and a send can only use a receipt of an earlier slot
    (``t' + L <= t`` means ``t' < t``), so when no rule above breaks, each send the replay
    meets finds the holding it needs and the replay reports nothing; when one breaks, so
    does the replay (``tests/test_verify_fast.py`` checks the agreement on hundreds of
    schedules and mutations).

    Returns
    -------
    Report or None
        The Report (``ok``, no violations, arrivals as an :class:`ArrivalMap`) of an accepted
        schedule; None when any rule breaks or the column path does not apply (combining
        collectives, cut-through switches, a link of ``L = 0``, a reducing send): the
        replay then decides and words the violations.
    """
    if not column_check_applies(instance, schedule):
        return None
    coll = instance.collective
    latency = np.asarray(instance.latency, dtype=np.int64)
    cols = schedule.columns()
    topo = instance.topology
    n = topo.num_nodes
    chunks = coll.chunk_ids
    chunk_pos = {c: i for i, c in enumerate(chunks)}
    num = len(cols["slot"])

    # chunk of each send: (source, index) packed, binary search among the sorted chunk ids
    width = max([c[1] for c in chunks] + [int(cols["chunk_index"].max()) if num else 0]) + 1
    top = max([c[0] for c in chunks] + [int(cols["chunk_source"].max()) if num else 0]) + 1
    if top * width >= 1 << 62 or len(chunks) * n >= 1 << 62:
        return None
    known = np.array([a * width + b for a, b in chunks], dtype=np.int64)  # sorted: chunks are
    sent = send_columns(instance, cols, known, width)
    if sent is None:
        return None
    chunk, src, dst, link = sent

    # one holding per (chunk, node): the precondition's and the receipts' keys, sorted
    pre = _pair_keys(instance, coll.pre, chunk_pos)
    keys = np.concatenate([pre, chunk.astype(np.int64) * n + dst])
    del dst
    order = np.argsort(keys)
    keys = keys[order]
    if len(keys) > 1 and bool(np.any(keys[1:] == keys[:-1])):
        return None
    slot = cols["slot"]
    arrive = np.concatenate([np.zeros(len(pre), dtype=np.int64), slot + latency[link]])
    held_from = arrive[order]
    del order, arrive

    # causality: the sender holds the chunk at the start of the send's slot
    pos, found = _find(keys, chunk.astype(np.int64) * n + src)
    del chunk, src
    if not found.all() or bool(np.any(held_from[pos] > slot)):
        return None
    del pos, found

    if occupancy_overloads(instance, link, slot, cols["src"], cols["dst"], with_sends=False):
        return None

    # postcondition: every wanted (chunk, node) not held at slot 0 is held in the end
    wanted = _pair_keys(instance, coll.post, chunk_pos)
    if len(pre):
        _, at_start = _find(np.sort(pre), wanted)
        wanted = wanted[~at_start]
    pos, found = _find(keys, wanted)
    if not found.all():
        return None
    makespan = int(held_from[pos].max()) if len(pos) else 0
    return Report.accepted(instance, makespan, num, ArrivalMap(keys, held_from, chunks, topo.node_ids))


def estimate_verify(instance: Instance, schedule: Schedule, what: str = "verify") -> Estimate:
    """Memory of :func:`ccplan.schedule.verify` on ``schedule``: the column verifier's
    (:data:`BYTES_PER_SEND_COLUMNS`) for a schedule kept as columns that it can accept, else
    the replay's (:func:`estimate_schedule`). Should the column check find a violation, the
    replay that words it checks its own estimate first."""

    if "_columns" not in schedule.__dict__ or not column_check_applies(instance, schedule):
        return estimate_schedule(instance, schedule, what)
    per_link_slot = BYTES_PER_LINK_SLOT_OF["layered"]
    return estimate_schedule(
        instance, schedule, what, per_send=BYTES_PER_SEND_COLUMNS, per_link_slot=per_link_slot
    )
