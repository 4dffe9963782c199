r"""Turning a data-movement engine into a combining one (DESIGN.md, "Collectives").

- **ReduceScatter** = AllGather on the reversed topology, reversed in time. Let the AllGather
  schedule on ``G^R`` (every link turned around; same ``l``, ``delta``, ``L``) have makespan
  ``D``. Its send ``(c, b -> a, t)`` on the reversed link becomes the send
  ``(c, a -> b, D - t - L)`` with ``reduce=True`` on the original link ``a -> b``:

  * the occupancy ``t .. t+l-1`` maps to ``D-t-L .. D-t-L+l-1``, i.e. slot ``x`` goes to
    ``(D - delta - 1) - x``: a reflection with one constant per link, so two sends that did not
    overlap on a link still do not (capacity is preserved; outages are not mapped);
  * causality: in the AllGather, ``a`` forwards ``c`` (at slots ``t' >= t + L``) only after it
    arrived; reversed, every partial sum ``a`` receives lands at ``D - t'  <= D - t - L``, i.e.
    at or before the slot in which ``a`` sends its own, so ``a`` sends the sum of its whole
    subtree; the owner receives last, at ``D - t0`` for the first AllGather send ``t0`` of ``c``;
  * counting: the AllGather delivers ``c`` once to every node along an arborescence from its
    owner, so reversed every contribution travels one path of that arborescence and is counted
    once. Branches that end in a switch (nothing to contribute) are pruned.

  Slots are then shifted so that the first send is in slot 0.
- **Reduce** = Broadcast on the reversed topology, reversed the same way.
- **AllReduce** = ReduceScatter, then the AllGather of the engine on the original topology
  shifted by the ReduceScatter makespan (``"concat"``). ``"overlap"`` then moves every
  AllGather send as early as its inputs allow: a chunk's broadcast may start as soon as *that*
  chunk is reduced at its owner, and may reach a GPU once that GPU has sent on its own partial
  sum of it (a copy of the finished sum must not be folded into a partial one).
  ``"pipelined"`` first re-places the ReduceScatter shard by shard (:func:`relist`), so that
  shards finish one after another instead of all at its end, then overlaps the AllGather in
  the order the shards finish. The default (``"best"``) keeps the shortest verified schedule.

Routing: :func:`ccplan.methods.solve` sends a combining instance here (:func:`solve_combining`)
unless the method is in :data:`NATIVE_COMBINING`, whose engines build combining schedules
themselves.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk, allgather, broadcast
from ccplan.instances.combining import reducescatter
from ccplan.instances.instance import Instance
from ccplan.methods import Outcome, Result, SolveOptions, get_engine, solve
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)

NATIVE_COMBINING: frozenset[str] = frozenset(
    {"ring", "tree", "double-binary-tree", "recursive-doubling", "recursive-halving-doubling",
     "hierarchical", "multitree", "exact-combining", "cluster-allreduce"}
)
"""Methods that schedule combining collectives themselves (no reversal needed)."""

ALLREDUCE_MODES: tuple[str, ...] = ("best", "concat", "overlap", "pipelined")


def _sub_instance(instance: Instance, topology: Any, collective: Any) -> Instance:
    """Same size, slot rule and port model on another topology/collective (no outages)."""
    return replace(instance, topology=topology, collective=collective, outages=())


def _phase_options(options: SolveOptions, share: float) -> SolveOptions:
    if options.time_limit is None:
        return options
    return replace(options, time_limit=max(1e-3, options.time_limit * share))


def _run(method: str, instance: Instance, options: SolveOptions) -> tuple[Schedule, Outcome]:
    outcome = get_engine(method)(instance, options)
    if outcome.schedule is None:
        raise ValidationError(
            f"method {method!r} found no {instance.collective.kind} schedule ({outcome.status}) "
            f"for the combining construction on {instance.topology.name!r}"
        )
    report = verify(instance, outcome.schedule)
    if not report.ok:
        raise ValidationError(
            f"method {method!r} produced an invalid {instance.collective.kind} schedule for the "
            f"combining construction: {report.violations[0]}"
        )
    return outcome.schedule, outcome


def reverse_schedule(reversed_instance: Instance, schedule: Schedule) -> Schedule:
    """Time-reverse a data-movement schedule valid on ``reversed_instance`` (a topology with
    every link turned around) into a receive-and-reduce schedule on the original topology.

    Parameters
    ----------
    reversed_instance : Instance
        The AllGather / Broadcast instance on the reversed topology.
    schedule : Schedule
        A valid schedule for it.

    Returns
    -------
    Schedule
        Sends on the original links, ``reduce=True``, first send in slot 0.
    """
    topo = reversed_instance.topology
    coll = reversed_instance.collective
    lat = reversed_instance.latency
    # Prune branches that reach no GPU that needs the chunk: reversed they would carry nothing.
    children: dict[tuple[Chunk, int], list[Send]] = defaultdict(list)
    for s in schedule.sends:
        children[(s.chunk, s.src)].append(s)
    wanted = coll.wanted
    useful: dict[tuple[Chunk, int], bool] = {}

    def is_useful(c: Chunk, v: int) -> bool:
        key = (c, v)
        if key not in useful:
            useful[key] = False  # a node holds a chunk once: no cycles, this is only a guard
            useful[key] = (v in wanted.get(c, ()) and v not in coll.holders[c]) or any(
                is_useful(c, s.dst) for s in children[key]
            )
        return useful[key]

    kept = [s for s in schedule.sends if is_useful(s.chunk, s.dst)]
    if not kept:
        return Schedule((), method=schedule.method)
    index = topo.link_index
    horizon = max(s.slot + int(lat[index[(s.src, s.dst)]]) for s in kept)
    raw = [(horizon - s.slot - int(lat[index[(s.src, s.dst)]]), s) for s in kept]
    shift = min(t for t, _ in raw)
    sends = tuple(Send(slot=t - shift, chunk=s.chunk, src=s.dst, dst=s.src, reduce=True) for t, s in raw)
    return Schedule(sends, method=schedule.method)


def _reversed_phase(
    instance: Instance, method: str, kind: str, options: SolveOptions
) -> tuple[Schedule, Outcome]:
    topo = instance.topology
    rev = topo.reversed()
    coll = instance.collective
    if kind == "reducescatter":
        twin = allgather(rev, chunks=coll.chunks)
    else:
        twin = broadcast(rev, chunks=coll.chunks, root=coll.root)
    rev_instance = _sub_instance(instance, rev, twin)
    schedule, outcome = _run(method, rev_instance, options)
    return reverse_schedule(rev_instance, schedule), outcome


def _overlap(instance: Instance, rs: Schedule, ag: Schedule, shift: int, by_ready: bool = False) -> Schedule:
    """Move the AllGather sends of an AllReduce as early as their inputs allow (module doc).

    ``by_ready`` places them shard by shard in the order the shards finish their reduction
    (each shard's sends in their own order), so a shard finished early is not queued behind
    one that finishes late on a shared link."""
    topo = instance.topology
    occ = [int(x) for x in instance.occupancy]
    lat = [int(x) for x in instance.latency]
    load: dict[tuple[int, int], int] = defaultdict(int)
    sport: set[tuple[int, int]] = set()
    rport: set[tuple[int, int]] = set()

    def book(link: int, t: int) -> None:
        src, dst = topo.links[link].key
        for x in range(t, t + occ[link]):
            load[(link, x)] += 1
            if instance.single_port:
                sport.add((src, x))
                rport.add((dst, x))

    def free(link: int, t: int) -> bool:
        src, dst = topo.links[link].key
        for x in range(t, t + occ[link]):
            if load[(link, x)] >= instance.omega(link, x):
                return False
            if instance.single_port and ((src, x) in sport or (dst, x) in rport):
                return False
        return True

    last_event: dict[tuple[Chunk, int], int] = defaultdict(lambda: -1)
    done_at: dict[Chunk, int] = defaultdict(int)
    for s in rs.sends:
        link = topo.link_index[(s.src, s.dst)]
        book(link, s.slot)
        arrive = s.slot + lat[link]
        last_event[(s.chunk, s.src)] = max(last_event[(s.chunk, s.src)], s.slot)
        last_event[(s.chunk, s.dst)] = max(last_event[(s.chunk, s.dst)], arrive)
        done_at[s.chunk] = max(done_at[s.chunk], arrive)
    full_at: dict[tuple[Chunk, int], int] = {}
    for c, owners in instance.collective.post:
        del owners
        full_at[(c, c[0])] = done_at[c]
    out = list(rs.sends)
    order = sorted(ag.sends, key=lambda x: (done_at[x.chunk], x.chunk, x.slot)) if by_ready else ag.sends
    for s in order:
        link = topo.link_index[(s.src, s.dst)]
        ready = full_at.get((s.chunk, s.src), s.slot + shift)
        t = max(ready, last_event[(s.chunk, s.dst)] + 1 - lat[link], 0)
        while not free(link, t):
            t += 1
        book(link, t)
        full_at[(s.chunk, s.dst)] = t + lat[link]
        out.append(Send(slot=t, chunk=s.chunk, src=s.src, dst=s.dst, reduce=False))
    return Schedule(tuple(out), method=rs.method)


def relist(instance: Instance, schedule: Schedule) -> Schedule:
    """Re-place a ReduceScatter schedule shard by shard: every send, in the order (chunk index,
    owner, original slot), at the earliest slot at which its link is free and every partial sum
    of its chunk that reached its sender before it in ``schedule`` has arrived.

    Each node sends the same partial sum as before (the same inputs precede it), so the
    schedule stays valid; what changes is *when* shards finish. A reversed AllGather finishes
    every shard near its end, because every GPU sends its partial sums in a different order;
    in shard order the first shards finish early, and the AllGather of ``"overlap"`` can start
    on them while the ReduceScatter still runs (opposite directions of the same links).
    """
    topo = instance.topology
    occ = [int(x) for x in instance.occupancy]
    lat = [int(x) for x in instance.latency]
    inputs: dict[tuple[Chunk, int], list[Send]] = defaultdict(list)
    for s in schedule.sends:
        inputs[(s.chunk, s.dst)].append(s)
    load: dict[tuple[int, int], int] = defaultdict(int)
    sport: set[tuple[int, int]] = set()
    rport: set[tuple[int, int]] = set()
    placed: dict[Send, int] = {}
    out = []
    for s in sorted(schedule.sends, key=lambda x: (x.chunk[1], x.chunk[0], x.slot)):
        link = topo.link_index[(s.src, s.dst)]
        arrival = {d: lat[topo.link_index[(d.src, d.dst)]] for d in inputs[(s.chunk, s.src)]}
        deps = [d for d, L in arrival.items() if d.slot + L <= s.slot]
        t = max((placed[d] + arrival[d] for d in deps), default=0)
        while not all(
            load[(link, x)] < instance.omega(link, x)
            and not (instance.single_port and ((s.src, x) in sport or (s.dst, x) in rport))
            for x in range(t, t + occ[link])
        ):
            t += 1
        for x in range(t, t + occ[link]):
            load[(link, x)] += 1
            if instance.single_port:
                sport.add((s.src, x))
                rport.add((s.dst, x))
        placed[s] = t
        out.append(Send(slot=t, chunk=s.chunk, src=s.src, dst=s.dst, reduce=s.reduce))
    return Schedule(tuple(sorted(out)), method=schedule.method)


def solve_combining(instance: Instance, method: str, options: SolveOptions | None = None) -> Outcome:
    """Run data-movement engine ``method`` and build the combining schedule from it.

    Non-combining instances are passed straight to the engine. ``options.extra["allreduce"]``
    selects ``"best"`` (default), ``"concat"`` or ``"overlap"`` for AllReduce; a time limit is
    split between the two phases of AllReduce.

    Returns
    -------
    Outcome
        Status ``feasible`` (the construction proves no optimality); ``details`` holds the
        phases' statuses and makespans.
    """
    opts = options or SolveOptions()
    coll = instance.collective
    if not coll.combining:
        return get_engine(method)(instance, opts)
    if instance.outages:
        log.warning("the reversal construction ignores outages; the result is verified against them")
    kind = coll.kind
    start = time.perf_counter()
    details: dict[str, Any] = {"construction": kind, "engine": method}
    if kind in ("reducescatter", "reduce"):
        sched, outcome = _reversed_phase(instance, method, kind, opts)
        details["phase_status"] = outcome.status
        schedule = Schedule(sched.sends, method=f"{method}+reverse")
    elif kind == "allreduce":
        topo = instance.topology
        rs_instance = _sub_instance(instance, topo, reducescatter(topo, coll.chunks))
        rs, rs_out = _reversed_phase(rs_instance, method, "reducescatter", _phase_options(opts, 0.5))
        rs_report = verify(rs_instance, rs)
        if not rs_report.ok or rs_report.makespan_slots is None:
            raise ValidationError(f"reversed ReduceScatter failed verification: {rs_report.violations[0]}")
        d_rs = rs_report.makespan_slots
        ag_instance = _sub_instance(instance, instance.topology, allgather(instance.topology, coll.chunks))
        ag, ag_out = _run(method, ag_instance, _phase_options(opts, 0.5))
        mode = str(opts.extra.get("allreduce", "best")) if opts.extra else "best"
        if mode not in ALLREDUCE_MODES:
            raise ValidationError(f"extra.allreduce must be one of {ALLREDUCE_MODES}, got {mode!r}")
        concat = Schedule(
            rs.sends + tuple(Send(s.slot + d_rs, s.chunk, s.src, s.dst, False) for s in ag.sends),
            method=f"{method}+rs+ag",
        )
        candidates: list[tuple[str, Schedule]] = []
        if mode in ("best", "concat"):
            candidates.append(("concat", concat))
        if mode in ("best", "overlap"):
            candidates.append(("overlap", _overlap(instance, rs, ag, d_rs)))
        if mode in ("best", "pipelined"):
            staggered = relist(rs_instance, rs)
            rep = verify(rs_instance, staggered)
            if rep.ok and rep.makespan_slots is not None:
                candidates.append(("pipelined", _overlap(instance, staggered, ag, rep.makespan_slots, True)))
        try:
            # Machines of several chassis: one reduction per chassis, one exchange per pair.
            cluster = get_engine("cluster-allreduce")(instance, opts).schedule
        except ValidationError as exc:
            log.debug("cluster-allreduce does not apply: %s", exc)
            cluster = None
        if cluster is not None and mode == "best":
            candidates.append(("cluster", cluster))
        best: tuple[int, str, Schedule] | None = None
        for name, cand in candidates:
            rep = verify(instance, cand)
            details[f"{name}_slots"] = rep.makespan_slots if rep.ok else None
            if rep.ok and rep.makespan_slots is not None and (best is None or rep.makespan_slots < best[0]):
                best = (rep.makespan_slots, name, cand)
        if best is None:
            first = verify(instance, concat).violations[0]
            raise ValidationError(f"no valid AllReduce from {method!r}: {first}")
        details.update(rs_slots=d_rs, ag_status=ag_out.status, rs_status=rs_out.status, mode=best[1])
        schedule = Schedule(best[2].sends, method=f"{method}+{best[1]}")
    else:
        raise ValidationError(f"no combining construction for collective {kind!r}")
    details["seconds"] = time.perf_counter() - start
    return Outcome(schedule=schedule, status="feasible", details=details)


def combining_engine(method: str) -> Callable[[Instance, SolveOptions], Outcome]:
    """An engine (``(instance, options) -> Outcome``) that handles combining collectives with
    ``method`` through :func:`solve_combining` and passes others to ``method`` unchanged."""

    def engine(instance: Instance, options: SolveOptions) -> Outcome:
        return solve_combining(instance, method, options)

    engine.__name__ = f"combining_{method.replace('-', '_')}"
    return engine


def needs_reversal(method: str, instance: Instance) -> bool:
    """Whether ``solve`` must route ``instance`` through :func:`solve_combining`."""
    return instance.collective.combining and method not in NATIVE_COMBINING


AUTO_CHUNKS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
"""Chunk counts ``C`` ``--chunks auto`` may try, in this order (see :data:`AUTO_PATIENCE`)."""

AUTO_MAX_PIECES = 256
"""``--chunks auto`` skips a ``C`` that cuts the buffer into more pieces than this (the
schedulers' work grows with the chunk count; DGX2 with 2 chassis, 32 GPUs, still gets C = 8)."""

AUTO_PATIENCE = 2
"""``--chunks auto`` stops doubling ``C`` after this many candidates in a row that were not
faster than the best so far: more chunks pipeline better until the per-chunk alpha and the
slot rounding eat the gain, so the time against ``C`` falls and then rises (one bad candidate
may be a heuristic's accident, two are taken as the turn)."""


def auto_chunk_candidates(pieces_per_chunk: int) -> list[int]:
    """The ``C`` values ``--chunks auto`` may try for a collective cut into
    ``pieces_per_chunk`` pieces per unit of ``C`` (within :data:`AUTO_MAX_PIECES`)."""
    return [c for c in AUTO_CHUNKS if c == 1 or c * pieces_per_chunk <= AUTO_MAX_PIECES]


def solve_auto_chunks(
    build: Callable[[int], Instance], method: str, options: SolveOptions | None = None
) -> tuple[Instance, Result]:
    """Pick the chunk count for the size: solve with ``C`` = 1, 2, 4, ... (:data:`AUTO_CHUNKS`,
    within :data:`AUTO_MAX_PIECES`) until :data:`AUTO_PATIENCE` candidates in a row are not
    faster, and keep the verified schedule with the shortest time (microseconds, since a
    slot's length changes with ``C``).

    Parameters
    ----------
    build : callable
        ``C -> Instance`` (same topology, collective and size).
    method : str
    options : SolveOptions, optional
        A time limit is shared among the candidates still to try in proportion to ``C`` (an
        engine's work grows about linearly with the chunk count); time a candidate leaves
        unused goes to the next ones.

    Returns
    -------
    (Instance, Result)
        The chosen instance and its result; ``details["auto_chunks"]`` maps every ``C`` tried
        to its makespan in microseconds (None when it failed or did not verify).

    Raises
    ------
    ValidationError
        No candidate gave a verified schedule (the first failure is named).
    """
    opts = options or SolveOptions()
    first = build(AUTO_CHUNKS[0])
    candidates = auto_chunk_candidates(first.collective.pieces // first.collective.chunks)
    start = time.perf_counter()
    tried: dict[str, float | None] = {}
    best: tuple[float, Instance, Result] | None = None
    failure: str | None = None
    misses = 0
    for i, c in enumerate(candidates):
        share = opts
        if opts.time_limit is not None:
            left = max(1e-3, opts.time_limit - (time.perf_counter() - start))
            share = replace(opts, time_limit=max(1e-3, left * c / sum(candidates[i:])))
        instance = first if c == AUTO_CHUNKS[0] else build(c)
        try:
            result = solve(instance, method, share)
        except ValidationError as exc:
            failure = failure or f"C={c}: {exc}"
            tried[str(c)] = None
            result = None
        us = result.makespan_us if result is not None and result.verified else None
        if result is not None:
            tried[str(c)] = us
        if us is not None and result is not None and (best is None or us < best[0]):
            best = (us, instance, result)
            misses = 0
        else:
            misses += 1
            if misses >= AUTO_PATIENCE and best is not None:
                break
    if best is None:
        raise ValidationError(f"--chunks auto: no chunk count gave a verified schedule ({failure})")
    _, instance, result = best
    log.info("--chunks auto chose C=%d of %s", instance.collective.chunks, tried)
    return instance, replace(result, details={**dict(result.details), "auto_chunks": tried})
