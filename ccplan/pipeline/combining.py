r"""Turning a data-movement engine into a combining one (DESIGN.md, "Collectives").

- **ReduceScatter** = AllGather on the reversed topology, reversed in time. Let the AllGather
  schedule on ``G^R`` (every link turned around; same ``l``, ``delta``, ``L``) have makespan
  ``D``. Its send ``(c, b -> a, t)`` on the reversed link becomes the send
  ``(c, a -> b, D - t - L)`` with ``reduce=True`` on the original link ``a -> b``:

  * the occupancy ``t .. t+l-1`` maps to ``D-t-L .. D-t-L+l-1``, i.e. slot ``x`` goes to
    ``(D - delta - 1) - x``: a reflection with one constant per link, so two sends that did not
    overlap on a link still do not (capacity is preserved). Single-port is preserved when all
    links out of a node share one ``delta``, and all links into it (:func:`ports_reflect`);
    otherwise two sends of a node on different slots may land on the same one. Outages sit
    at fixed slots: an outage of ``a -> b`` in slot ``x`` is one of ``b -> a`` in
    ``D - delta - 1 - x``, which needs ``D`` before the reversed problem is solved;
  * causality: in the AllGather, ``a`` forwards ``c`` (at slots ``t' >= t + L``) only after it
    arrived; reversed, every partial sum ``a`` receives lands at ``D - t'  <= D - t - L``, i.e.
    at or before the slot in which ``a`` sends its own, so ``a`` sends the sum of its whole
    subtree; the owner receives last, at ``D - t0`` for the first AllGather send ``t0`` of ``c``;
  * counting: the AllGather delivers ``c`` once to every node along an arborescence from its
    owner, so reversed every contribution travels one path of that arborescence and is counted
    once. Branches that end in a switch (nothing to contribute) are pruned.
  * switches: the reversal of a switch's multicast is a sum in the switch. Unless the switch
    may reduce (``Instance.reducing_switches``), every partial sum that entered it is relayed
    instead, through the switch to the node the sum went to, which reduces it
    (:func:`ccplan.schedule.relays.unfold_switch_sums`, placed against links, ports and
    outages; one partial sum of a chunk in a switch at a time).

  Slots are then shifted so that the first send is in slot 0.

  Where the reflection alone may break a rule, more candidates are built and the shortest
  verified one is kept (:func:`_reversed_phase`): with single-port and unequal delays, the
  reflection of the AllGather on the *uniform-delay twin* (every ``delta`` raised to the
  largest: one constant for every link, and a partial sum that arrives earlier than the twin
  assumed is still in time); with outages, the reflection of an AllGather solved with the
  outages reflected about a horizon ``D`` (tried from the makespan without outages upward,
  kept when the AllGather ends by ``D``); and every candidate that still breaks a rule is
  repaired by :func:`retime`, which re-places the sends in slot order against the link,
  ports and outages while keeping each partial sum's inputs. Every returned schedule is
  verified. For ``trees`` with switches that cannot reduce, the reduction of
  :mod:`ccplan.heuristics.trees_reduce` (trees packed and placed with one partial sum per
  path through such a switch) comes first; it is the only candidate above
  :data:`NATIVE_ONLY_ABOVE` chunks, where the relays' placement is too slow to try as well,
  and is then verified once, by the caller (``solve``, or the AllReduce below).
- **Reduce** = Broadcast on the reversed topology, reversed the same way.
- **AllReduce** = ReduceScatter (as above, against the outages), then the AllGather of the
  engine on the original topology shifted by the ReduceScatter makespan (``"concat"``).
  ``"overlap"`` then moves every AllGather send as early as its inputs allow (against the
  outages and ports too): a chunk's broadcast may start as soon as *that* chunk is reduced
  at its owner, and may reach a GPU once that GPU has sent on its own partial sum of it (a
  copy of the finished sum must not be folded into a partial one).
  ``"pipelined"`` first re-places the ReduceScatter shard by shard (:func:`relist`), so that
  shards finish one after another instead of all at its end, then overlaps the AllGather in
  the order the shards finish. The default (``"best"``) keeps the shortest verified schedule.
  On machines of several chassis two more candidates join (``"best"`` only):
  ``cluster-allreduce`` and the pipelined hierarchical ``hier-allreduce``
  (:mod:`ccplan.heuristics.hier_allreduce`), which runs first. When it is already within
  :data:`HIER_SUFFICES` of the physical bound, the reversal is not run at all: through
  switches that may not reduce its unfolding of the switch sums takes time that grows faster
  than ``C`` and is not bounded by the time limit, and a larger ``C`` (``--chunks auto``)
  gains more from the hierarchical schedule than the reversal could at this one.
  For ``trees`` and ``heuristic`` (:data:`TREES_ALLREDUCE_METHODS`) the ``"best"`` AllReduce
  first builds ``trees-allreduce`` (:mod:`ccplan.heuristics.trees_allreduce`: the trees
  ReduceScatter, then the trees AllGather, its packings kept across C). It is kept alone when
  within :data:`TREES_SUFFICES` of the physical bound. Above :data:`TREES_ONLY_ABOVE` chunks
  in all, where the reversal and the cluster grow faster than ``C``, and when a portfolio is
  probed (a soft budget of 0, ``--chunks auto``), only ``hier-allreduce`` may join it; above
  that many chunks only on machines where it did not lose to the trees at the last C both ran
  (:func:`~ccplan.pipeline.allreduce_natives.hier_lost`); so for ``trees`` at every C (its
  reversal builds the same trees, relaying the switch sums); otherwise the others follow with
  :data:`OTHERS_SHARE` of the time left (``--chunks auto`` must not spend its budget at small
  C) and the shortest verified schedule wins. Where the trees are kept without the others
  they are verified once, by :func:`ccplan.pipeline.solve` (its replay takes seconds at a
  million sends).

Routing: :func:`ccplan.pipeline.solve` sends a combining instance here (:func:`solve_combining`)
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

import numpy as np

from ccplan.contract import Outcome, SolveOptions, sub_engine
from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk, allgather, broadcast
from ccplan.instances.combining import reducescatter
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology
from ccplan.limits import Deadline, OutOfTimeError
from ccplan.pipeline.allreduce_natives import (
    HIER_SUFFICES,
    OTHERS_SHARE,
    TREES_ONLY_ABOVE,
    TREES_SUFFICES,
    checked,
    hier_lost,
    hierarchical,
    left_options,
    native_outcome,
    note_hier,
    trees_candidate,
)
from ccplan.schedule.combining import ports_reflect
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.relays import chained_relays, place_relays, unfold_switch_sums
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)

NATIVE_COMBINING: frozenset[str] = frozenset(
    {"ring", "ring-1", "tree", "double-binary-tree", "recursive-doubling", "recursive-halving-doubling",
     "hierarchical", "multitree", "exact-combining", "cluster-allreduce", "hier-allreduce",
     "trees-allreduce"}
)
"""Methods that schedule combining collectives themselves (no reversal needed)."""

ALLREDUCE_MODES: tuple[str, ...] = ("best", "concat", "overlap", "pipelined")

def _sub_instance(instance: Instance, topology: Any, collective: Any) -> Instance:
    """Same size, slot rule and port model on another topology/collective (no outages: they
    do not carry over to a reversed or shifted phase, whose result is re-timed against them)."""
    return replace(instance, topology=topology, collective=collective, outages=())


def _phase_options(options: SolveOptions, share: float) -> SolveOptions:
    if options.time_limit is None:
        return options
    return replace(options, time_limit=max(1e-3, options.time_limit * share))


def _run(method: str, instance: Instance, options: SolveOptions) -> tuple[Schedule, Outcome]:
    outcome = sub_engine(method)(instance, options)
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


def reverse_schedule(
    reversed_instance: Instance, schedule: Schedule, horizon: int | None = None
) -> Schedule:
    """Time-reverse a data-movement schedule valid on ``reversed_instance`` (a topology with
    every link turned around) into a receive-and-reduce schedule on the original topology.

    Parameters
    ----------
    reversed_instance : Instance
        The AllGather / Broadcast instance on the reversed topology.
    schedule : Schedule
        A valid schedule for it.
    horizon : int, optional
        The constant ``D`` of the reflection, kept as given (no shift): the reflection of an
        instance whose outages were mapped with it (:func:`reflect_outages`). Default: the
        schedule's own last useful arrival, then shifted so that the first send is in slot 0.

    Returns
    -------
    Schedule
        Sends on the original links, ``reduce=True``.

    Raises
    ------
    ValidationError
        A useful send arrives after ``horizon`` (its reflection would start before slot 0).
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
    last = max(s.slot + int(lat[index[(s.src, s.dst)]]) for s in kept)
    if horizon is not None and last > horizon:
        raise ValidationError(
            f"the schedule's last useful arrival, slot {last}, is after the horizon {horizon}"
        )
    end = last if horizon is None else horizon
    raw = [(end - s.slot - int(lat[index[(s.src, s.dst)]]), s) for s in kept]
    shift = min(t for t, _ in raw) if horizon is None else 0
    sends = tuple(Send(slot=t - shift, chunk=s.chunk, src=s.dst, dst=s.src, reduce=True) for t, s in raw)
    return Schedule(sends, method=schedule.method)


def _uniform_delay(instance: Instance) -> Instance:
    """``instance`` with every link's propagation ``delta`` raised to the largest one (every
    alpha set to the alpha of a slowest-to-propagate link; the slot length kept as an explicit
    ``tau``, so ``l`` and ``omega`` do not change). Its per-link reflection is one global
    reflection (module docstring)."""
    worst = int(np.argmax(instance.delay))
    alpha = instance.topology.links[worst].alpha_us
    topo = instance.topology
    twin = Topology(
        name=f"{topo.name}-uniform-delay",
        nodes=topo.nodes,
        links=tuple(replace(lk, alpha_us=alpha) for lk in topo.links),
        description=topo.description,
    )
    return replace(
        instance, topology=twin, tau_rule="explicit", tau_us_explicit=instance.tau_us, alpha_cap=None
    )


def reflect_outages(instance: Instance, reversed_instance: Instance, horizon: int) -> Instance:
    """``reversed_instance`` with the outages of ``instance`` reflected as
    :func:`reverse_schedule` with ``horizon`` reflects sends.

    A reversed send in slot ``t`` on ``b -> a`` becomes the send in ``horizon - t - L`` on
    ``a -> b``, whose occupancy slot ``x`` is the reversed occupancy slot
    ``horizon - delta - 1 - x`` (``delta`` of the reversed link). An outage of ``a -> b`` in
    slot ``x`` is therefore one of ``b -> a`` in that slot; those that fall before slot 0 lie
    after every reflected send and are dropped.
    """
    delay = reversed_instance.delay
    index = reversed_instance.topology.link_index
    mapped = []
    for a, b, x in instance.outages:
        y = horizon - int(delay[index[(b, a)]]) - 1 - x
        if y >= 0:
            mapped.append((b, a, y))
    return replace(reversed_instance, outages=tuple(mapped))


OUTAGE_ROUNDS = 4
"""Horizons :func:`_reversed_phase` tries with the outages reflected (module docstring)."""


NATIVE_REDUCTION: frozenset[str] = frozenset({"trees", "heuristic"})
"""Methods whose reduction through switches that cannot reduce is built by
:mod:`ccplan.heuristics.trees_reduce` (reduce trees whose paths through such a switch are
packed and placed one by one) instead of relaying the reflected AllGather's switch sums:
``trees``, and the ``heuristic`` portfolio, whose AllGather includes the ``trees`` engine
(the user path ``solve --method heuristic`` relayed its reflection only, and on AMD x2 ran
out of its minute at C = 1)."""


NATIVE_ONLY_ABOVE = 16
"""Chunks in all (C x GPUs) above which the native reduction, when it applies, is the only
candidate; below, the relayed reflections are tried as well and the shortest is kept (on a
two-chassis fabric of four GPUs the relays meet the bound, the native reduction is 2 slots
longer). Kept small: the relays' slot-by-slot placement and the AllGather run for them cost
more than the native reduction from a few dozen chunks on (leaf-spine 64 at C = 1: 27.6 s
with them, 13.1 s without; AMD x2 at C = 1 with the ``heuristic`` portfolio: 31 s of
``--chunks auto``'s minute; with 512 here it spent its minute below C = 16 on leaf-spine)."""


def _native_reduction(
    instance: Instance, method: str, options: SolveOptions, check: bool = True
) -> tuple[Schedule, Outcome] | None:
    """The reduction of :mod:`ccplan.heuristics.trees_reduce` when it applies to ``method`` and
    ``instance`` and verifies, else None (the generic reversal follows). A relayed
    reflection of a tree that branches in such a switch sends one partial sum per branch over
    the switch's link (on AMD x2's saturated NIC uplinks 37 % above the bound at C = 32).

    ``check=False`` leaves the verification to the caller (the schedule is then returned as
    the phase's only candidate, and ``solve`` or the AllReduce verifies it): the replay of a
    reduction is most of the time at large C (AMD x2 C = 1,024: 21 s for 1.1 M sends, the
    reduction itself 4.4 s), and it ran twice."""
    from ccplan.heuristics.trees_reduce import applies, reduction_schedule

    if method not in NATIVE_REDUCTION or not applies(instance):
        return None
    start = time.perf_counter()
    deadline = Deadline.after(options.time_limit)
    try:
        schedule = reduction_schedule(instance, deadline, options.extra)
    except (OutOfTimeError, ValidationError) as exc:
        log.info("reversal: the trees reduction gave nothing (%s); relayed reflections follow", exc)
        return None
    slots = None
    if check:
        report = verify(instance, schedule)
        if not report.ok:
            log.error("the trees reduction fails verification: %s", report.violations[0])
            return None
        slots = report.makespan_slots
    details: dict[str, Any] = {
        "reduction": "trees_reduce", "slots": slots, "seconds": time.perf_counter() - start,
    }
    if (options.extra or {}).get("auto_probe"):
        # a probe skips the windowed packings (trees_reduce._windowed): a full run may do better
        details["auto_probe"] = "trees reduction without windowed packings"
    return schedule, Outcome(schedule=schedule, status="feasible", details=details)


def _reversed_phase(
    instance: Instance, method: str, kind: str, options: SolveOptions
) -> tuple[Schedule, Outcome]:
    """The ReduceScatter / Reduce of ``instance`` from ``method``'s AllGather / Broadcast on the
    reversed topology: the shortest verified of the reflections of the module docstring, each
    repaired by :func:`retime` when it breaks single-port or an outage.

    Raises
    ------
    ValidationError
        The engine found no schedule, or (a bug) no repaired reflection verifies.
    """
    topo = instance.topology
    rev = topo.reversed()
    coll = instance.collective
    if kind == "reducescatter":
        twin = allgather(rev, chunks=coll.chunks)
    else:
        twin = broadcast(rev, chunks=coll.chunks, root=coll.root)
    rev_instance = _sub_instance(instance, rev, twin)
    only = coll.chunks * len(topo.gpus) > NATIVE_ONLY_ABOVE
    native = _native_reduction(instance, method, options, check=not only)
    if native is not None and only:
        return native  # the relayed reflections' placement grows too fast to try as well
    # Unequal delays at a node make the per-link reflection shift its links by different
    # constants, which breaks single-port; the uniform-delay twin's reflection keeps it.
    uniform = not ports_reflect(instance)
    runs = 1 + uniform + (OUTAGE_ROUNDS if instance.outages else 0)
    phase = _phase_options(options, 1 / runs)
    relay_deadline = Deadline.after(options.time_limit)
    schedule, outcome = _run(method, rev_instance, phase)
    best: tuple[int, Schedule] | None = None
    if native is not None:
        best = (int(native[1].details["slots"]), native[0])  # verified in _native_reduction
    failure = ""

    def consider(tree: Schedule) -> None:
        nonlocal failure
        # a sum in a switch that cannot reduce is relayed: to the switch's successor (star)
        # or from sender to sender (chain); both are tried, within the phase's time
        for chain in (False, True):
            try:
                unfolded = unfold_switch_sums(instance, tree, chain, relay_deadline)
            except OutOfTimeError:
                failure = failure or "the time limit was reached while relaying switch sums"
                return
            if unfolded is None:
                failure = failure or "a reflection is not a reduction tree: its switch sums cannot be relayed"
                return
            consider_one(unfolded)
            if unfolded is tree:
                return  # nothing was relayed

    def consider_one(reflected: Schedule) -> None:
        nonlocal best, failure
        versions = [reflected]
        report = verify(instance, reflected)
        if not report.ok:
            failure = failure or str(report.violations[0])
            versions = [retime(instance, reflected)]
        elif instance.outages:
            versions.append(retime(instance, reflected))  # may move sends into freed slots
        for version in versions:
            report = verify(instance, version) if version is not reflected else report
            if report.ok and report.makespan_slots is not None:
                if best is None or report.makespan_slots < best[0]:
                    best = (report.makespan_slots, version)
            else:
                log.error("a retimed reflection fails verification: %s", report.violations[0])

    consider(reverse_schedule(rev_instance, schedule))
    own = rev_instance
    try:
        # further runs only add candidates: one that finds nothing in its time is skipped
        if uniform:
            own = _uniform_delay(rev_instance)
            slow_schedule, _ = _run(method, own, phase)
            consider(reverse_schedule(own, slow_schedule))
        if instance.outages:
            # The outages sit at fixed slots, so the reflection needs its constant in advance:
            # try the makespan of the run without them, then the one the last try needed (or
            # one more), while that is below the best so far (a reflection ends by its horizon).
            horizon = verify(rev_instance, schedule).makespan_slots or 0
            for _ in range(OUTAGE_ROUNDS):
                if best is not None and horizon >= best[0]:
                    break
                mapped = reflect_outages(instance, own, horizon)
                dark, _ = _run(method, mapped, phase)
                need = verify(mapped, dark).makespan_slots or 0
                if need <= horizon:
                    consider(reverse_schedule(mapped, dark, horizon))
                    break
                horizon = max(horizon + 1, need)
    except ValidationError as exc:
        log.info("reversal: a further run gave no schedule: %s", exc)
    if best is None:
        raise ValidationError(f"no valid {coll.kind} from the reversed {twin.kind} of {method!r}: {failure}")
    if failure:
        log.info("reversal repaired by retiming (%s)", failure)
    return best[1], outcome


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
    return _replace(instance, schedule, lambda x: (x.chunk[1], x.chunk[0], x.slot))


def retime(instance: Instance, schedule: Schedule) -> Schedule:
    """Re-place the sends of a reduction schedule in their own slot order, each at the earliest
    slot at which every partial sum that reached its sender before it has arrived and its link
    and ports are free: ``omega`` with the outages, and single-port (the repair of a reversal,
    module docstring).

    The input needs only causality (each node sends a partial sum after the partial sums it
    folds in arrived, as every reversal gives); capacity, ports and outages may be violated.
    Every node then sends the same partial sum as before, so the output is valid.
    """
    return _replace(instance, schedule, lambda x: (x.slot, x.chunk, x.src, x.dst))


def _replace(instance: Instance, schedule: Schedule, key: Callable[[Send], Any]) -> Schedule:
    """List re-timing shared by :func:`relist` and :func:`retime`: the sends in ``key`` order,
    each at the earliest slot after its inputs (module docstring of :func:`relist`) at which
    its ``l`` occupancy slots are free on the link (``omega``, outages) and, single-port, at
    both ends. Relays through switches that cannot reduce are placed whole, one partial sum
    in a switch at a time (:func:`ccplan.schedule.relays.place_relays`)."""
    relays = chained_relays(instance, schedule)
    if relays is not None:
        relays.sort(key=lambda r: key(r.hops[0]))
        return place_relays(instance, relays, method=schedule.method)
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
    for s in sorted(schedule.sends, key=key):
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
        return sub_engine(method)(instance, opts)
    kind = coll.kind
    start = time.perf_counter()
    details: dict[str, Any] = {"construction": kind, "engine": method}
    if kind in ("reducescatter", "reduce"):
        sched, outcome = _reversed_phase(instance, method, kind, opts)
        details["phase_status"] = outcome.status
        if "auto_probe" in outcome.details:  # --chunks auto runs the method again at its C
            details["auto_probe"] = outcome.details["auto_probe"]
        schedule = Schedule(sched.sends, method=f"{method}+reverse")
    elif kind == "allreduce":
        topo = instance.topology
        natives: list[tuple[str, Schedule, int]] = []
        large = coll.chunks * len(topo.gpus) > TREES_ONLY_ABOVE
        try:
            found = trees_candidate(instance, method, opts)
        except OutOfTimeError as exc:
            if large:  # the others are slower still at this C
                raise ValidationError(
                    f"trees-allreduce ran out of time ({exc}); the others are slower"
                ) from None
            log.info("trees-allreduce ran out of time: %s", exc)
            found = None
        declined = found if isinstance(found, str) else None
        probe = False
        trees = None if isinstance(found, str) else found
        if trees is not None:
            details["trees_excess"] = trees[2]
            natives.append(("trees", trees[0], trees[1]))
            if trees[2] <= TREES_SUFFICES:
                return native_outcome("trees", trees[0], method, details, start, "others skipped")
            # a candidate of --chunks auto (chunks.AUTO_PROBE) or a portfolio asked for its first
            # complete schedule only (soft budget 0)
            probe = bool(opts.extra.get("auto_probe")) or (
                opts.extra.get("soft_budget") is not None and float(opts.extra["soft_budget"]) <= 0
            )
            opts = left_options(opts, OTHERS_SHARE, start)
            # at few chunks hier-allreduce is cheap (AMD x2: 1.3 s at C = 16) and always runs: a
            # record from C = 1, where its extra steps' alphas decide, would keep it out at the C
            # where it wins (DGX-2 x2: 1.90 times the bound at C = 1, 1.02 at C = 128)
            if large and hier_lost(instance):
                why = "others skipped" if probe else "others skipped at this C"
                return native_outcome("trees", trees[0], method, details, start, why)
        others_start = time.perf_counter()
        hier = hierarchical(instance, opts)
        if hier is not None:
            details["hier_excess"] = hier[2]
            natives.append(("hier", hier[0], hier[1]))
        if trees is not None:
            note_hier(instance, trees[1], None if hier is None else hier[1])
            # for ``trees`` the reversal would build the same trees again, relaying switch sums
            if large or probe or method == "trees":
                pick = min(natives, key=lambda x: x[2])
                why = "others skipped" if probe or method == "trees" else "others skipped at this C"
                return native_outcome(pick[0], pick[1], method, details, start, why)
        if declined is not None and (hier is None or hier[2] > TREES_SUFFICES):
            # the trees reduction declined: the trees AllReduce with the relayed reversal
            half = _phase_options(left_options(opts, 1.0, others_start), 0.5)
            log.info("%s; the trees AllReduce's ReduceScatter by the reversal of trees", declined)
            try:
                relayed = trees_candidate(
                    instance, method, left_options(opts, 1.0, others_start),
                    relayed=lambda rs_inst: _reversed_phase(rs_inst, "trees", "reducescatter", half)[0],
                )
            except OutOfTimeError:
                relayed = None
            trees = None if isinstance(relayed, str) else relayed
            if trees is not None:
                details["trees_excess"] = trees[2]
                natives.append(("trees", trees[0], trees[1]))
                if trees[2] <= TREES_SUFFICES or large:
                    why = "others skipped" if trees[2] <= TREES_SUFFICES else "others skipped at this C"
                    return native_outcome("trees", trees[0], method, details, start, why)
        best_native = min(natives, key=lambda x: x[2]) if natives else None
        if best_native is not None and hier is not None and hier[2] <= HIER_SUFFICES:
            # the reversal through switches that may not reduce is slower than C grows
            return native_outcome(best_native[0], best_native[1], method, details, start, "reversal skipped")
        opts = left_options(opts, 1.0, others_start)
        if trees is not None:
            # it competes with the reversal's candidates: verify it first
            trees = checked(instance, trees)
            natives = [x for x in natives if x[0] != "trees"]
            if trees is not None:
                natives.append(("trees", trees[0], trees[1]))
            best_native = min(natives, key=lambda x: x[2]) if natives else None
        # the ReduceScatter half runs on the same slots as the AllReduce: keep the outages
        rs_instance = replace(instance, collective=reducescatter(topo, coll.chunks))
        try:
            rs, rs_out = _reversed_phase(rs_instance, method, "reducescatter", _phase_options(opts, 0.5))
        except ValidationError as exc:
            if best_native is None:
                raise
            return native_outcome(
                best_native[0], best_native[1], method, details, start, f"reversal failed: {exc}"
            )
        rs_report = verify(rs_instance, rs)
        if not rs_report.ok or rs_report.makespan_slots is None:
            raise ValidationError(f"reversed ReduceScatter failed verification: {rs_report.violations[0]}")
        d_rs = rs_report.makespan_slots
        ag_instance = _sub_instance(instance, instance.topology, allgather(instance.topology, coll.chunks))
        try:
            ag, ag_out = _run(method, ag_instance, _phase_options(opts, 0.5))
        except ValidationError as exc:
            if best_native is None:
                raise
            return native_outcome(
                best_native[0], best_native[1], method, details, start, f"reversal failed: {exc}"
            )
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
            cluster = sub_engine("cluster-allreduce")(instance, opts).schedule
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
        for name, cand, slots in natives:  # verified by their engines
            details[f"{name}_slots"] = slots
            if best is None or slots < best[0]:
                best = (slots, name, cand)
        if best is None:
            first = verify(instance, concat).violations[0]
            raise ValidationError(f"no valid AllReduce from {method!r}: {first}")
        details.update(rs_slots=d_rs, ag_status=ag_out.status, rs_status=rs_out.status, mode=best[1])
        schedule = best[2].renamed(f"{method}+{best[1]}")
    else:
        raise ValidationError(f"no combining construction for collective {kind!r}")
    details["seconds"] = time.perf_counter() - start
    return Outcome(schedule=schedule, status="feasible", details=details)


def needs_reversal(method: str, instance: Instance) -> bool:
    """Whether ``solve`` must route ``instance`` through :func:`solve_combining`."""
    return instance.collective.combining and method not in NATIVE_COMBINING


