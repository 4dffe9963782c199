"""Large neighbourhood search (LNS) with the paper's MILP, for models too large to solve whole.

One LNS round keeps the incumbent schedule fixed outside a *neighbourhood* and lets CP-SAT
re-optimise the inside:

1. a neighbourhood is a set of chunks (chosen around the bottleneck, see
   :data:`NEIGHBOURHOODS`) and optionally a first free slot: sends of the chosen chunks before
   it stay as they are (a window of slots);
2. every send of the other chunks is fixed. Their link occupancy becomes reserved capacity:
   a (link, slot) they fill is an outage of a sub-instance (``omega = 0``), a partly used one
   keeps the rest of ``omega`` as an extra row, and under ``single_port`` the ports they use
   are closed to the free sends;
3. the sub-instance holds the chosen chunks only, with the same chunk size, slot length and
   links, so :func:`ccplan.model.milp.build_model` builds exactly the neighbourhood's part of
   equations (2)-(14) of ``000_*.txt`` (nothing of the fixed chunks is built), for the
   incumbent's makespan ``m`` as horizon;
4. the objective is the paper's ``min D`` with two tie-breaks, weighted lexicographically:
   then the free demands first received in slot ``m`` (a round that cannot lower the
   makespan still empties its last slot, so a later round can), then the sum of the free
   demands' arrivals ``D_{s,v,c}`` of (14) (moving deliveries earlier frees link slots for
   the next rounds: with the late count alone, rounds on DGX2 2 chassis 1 MB sat on one
   plateau for 300 s). ``D`` is bounded below by the fixed chunks' makespan and by the
   proven lower bound (both valid: the whole schedule's makespan is the larger of the fixed
   and the free part's);
5. the incumbent's own sends of the chosen chunks are the complete hint; the answer is merged
   with the fixed sends, verified on the whole instance, and accepted when it lowers
   ``(makespan, demands first received at the makespan, sum of arrivals)``
   lexicographically.

A *slot window* (rule ``slots``) frees every chunk instead, in the last slots ``a .. m``: the
round builds the window model of :func:`ccplan.model.milp.build_model` with ``start`` (the
incumbent's state at slot ``a``, :func:`ccplan.model.size.start_state`: holdings of GPUs
and switches, sends in flight, link slots they still occupy), no sub-instance; the sends
before ``a`` are the fixed part. ``a`` is the earliest slot whose window model fits the
window's own size target (:func:`window_start`).

The neighbourhood size adapts: it grows when CP-SAT proves a round optimal in a fraction of
its time slice and shrinks when a round times out without improvement; a slot window also
grows (reaches further back) after a round proved optimal without a gain. ``docs/exact.md``
(section "Large neighbourhood search") says when the ``milp`` engine uses it.
"""

from __future__ import annotations

import logging
import random
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk, Collective
from ccplan.instances.instance import Instance
from ccplan.model.size import StartState, estimate_size, link_slots_taken, start_state
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify

if TYPE_CHECKING:
    from ccplan.model.run import _Run

log = logging.getLogger(__name__)

LNS_TARGET_NONZEROS = 120_000
"""First neighbourhood size, in estimated model nonzeros (``ccplan.model.size``): about one
second of build and translation, and a CP-SAT search of seconds on 2 workers."""

LNS_MIN_NONZEROS = 20_000
"""The adaptive size never goes below this (or one chunk)."""

LNS_SLICE_SECONDS = 20.0
"""CP-SAT time of one round (less when the time limit leaves less)."""

LNS_QUICK_SHARE = 0.25
"""A round proved optimal within this share of its slice grows the next neighbourhood."""

LNS_GROW, LNS_SHRINK = 1.5, 0.7
"""Factors of the adaptive neighbourhood size."""

LNS_STALE_ROUNDS = 8
"""After this many rounds in a row without an improvement LNS stops (no time limit) or gives
the heuristic another run (:func:`_better_start`, twice its first share) and goes on."""

LNS_MIN_SECONDS = 1.0
"""No round is started with less time than this left."""

LNS_HEURISTIC_SHARE = 0.1
"""Before the first round, the ``heuristic`` portfolio gets this share of the time left (at
most :data:`LNS_HEURISTIC_CAP` s) when the warm start was that portfolio stopped by its
stagnation rule: on AMD 2 chassis 1 GB its 1 s warm start gives 64 slots, 10 s give 52, and
LNS rounds on 1-9 chunks from 64 reached only 59 in 150 s."""

LNS_HEURISTIC_CAP = 60.0
"""Most seconds of the heuristic run before LNS (10 s without a time limit)."""

LNS_WINDOW_NONZEROS = 250_000
"""First size of a slot window (``slots`` rounds), in estimated nonzeros of its window
model; it adapts like the chunk neighbourhoods' size, on its own."""

LNS_WINDOW_OVERSIZE = 4.0
"""A slot window that must reach back to the first send landing in the last slot may exceed
its size target; beyond this factor the round takes a ``late`` neighbourhood instead (on
AMD 4 chassis 1 GB one slot's window is ~200,000 nonzeros and a send takes up to 8 slots)."""

ROTATION: tuple[str, ...] = ("slots", "late", "slots", "links", "slots", "window", "slots", "random")
"""Order in which the rules of :data:`NEIGHBOURHOODS` take the rounds: slot windows first and
every other round (on AMD 2 chassis 1 GB they lowered the makespan where rounds of a few
chunks only moved deliveries out of the last slot; in the 10-minute ``lns`` run both gains,
52 -> 51 -> 50, came from ``slots`` rounds)."""


# --------------------------------------------------------------------------- the restriction
@dataclass(frozen=True)
class Neighbourhood:
    """What one LNS round may change.

    Parameters
    ----------
    kind : str
        Name of the rule that chose it (a key of :data:`NEIGHBOURHOODS`).
    chunks : tuple of Chunk
        The free chunks; all other chunks keep their sends.
    from_slot : int
        Sends of the free chunks that start before this slot stay fixed too (0: the free
        chunks are re-routed from scratch).
    all_chunks : bool
        A slot window: every chunk is free from ``from_slot`` on (``chunks`` must then name
        them all) and the round builds the window model of
        :func:`ccplan.model.milp.build_model` with ``start`` (no sub-instance).
    """

    kind: str
    chunks: tuple[Chunk, ...]
    from_slot: int = 0
    all_chunks: bool = False

    def __post_init__(self) -> None:
        if not self.chunks:
            raise ValidationError("neighbourhood.chunks must name at least one chunk")
        if len(set(self.chunks)) != len(self.chunks):
            raise ValidationError("neighbourhood.chunks lists a chunk twice")
        if not isinstance(self.from_slot, int) or isinstance(self.from_slot, bool) or self.from_slot < 0:
            raise ValidationError(
                f"neighbourhood.from_slot must be a non-negative integer, got {self.from_slot!r}"
            )
        if not isinstance(self.all_chunks, bool):
            raise ValidationError(f"neighbourhood.all_chunks must be a bool, got {self.all_chunks!r}")


@dataclass(frozen=True)
class Restriction:
    """The incumbent split at a set of free chunks (see :func:`restrict`).

    Attributes
    ----------
    instance : Instance
        The sub-instance: the free chunks only; (link, slot) pairs the fixed sends fill are
        outages.
    fixed : tuple of Send
        Sends of the other chunks (kept as they are).
    free : tuple of Send
        The incumbent's sends of the free chunks (the hint).
    residual : mapping
        ``(link index, slot) -> capacity left`` where the fixed sends use part of ``omega``.
    busy_send, busy_recv : frozenset of (node, slot)
        Ports the fixed sends occupy (``single_port`` only; empty otherwise).
    fixed_makespan : int
        Latest first arrival of a demand of a fixed chunk (0 when there is none).
    """

    instance: Instance
    fixed: tuple[Send, ...]
    free: tuple[Send, ...]
    residual: Mapping[tuple[int, int], int]
    busy_send: frozenset[tuple[int, int]]
    busy_recv: frozenset[tuple[int, int]]
    fixed_makespan: int


def arrivals(instance: Instance, schedule: Schedule) -> dict[tuple[Chunk, int], int]:
    """First slot from which each demand ``(chunk, node)`` holds its chunk (a verified schedule
    delivers each chunk to a node at most once)."""
    lat = instance.latency
    index = instance.topology.link_index
    wanted = set(instance.collective.demands)
    out: dict[tuple[Chunk, int], int] = {}
    for send in schedule.sends:
        key = (send.chunk, send.dst)
        if key in wanted:
            at = send.slot + int(lat[index[(send.src, send.dst)]])
            out[key] = min(at, out.get(key, at))
    return out


def score(instance: Instance, schedule: Schedule) -> tuple[int, int, int]:
    """``(makespan, demands first received at the makespan, sum of all first arrivals)``:
    what LNS lowers, in this order."""
    arr = arrivals(instance, schedule)
    if not arr:
        return 0, 0, 0
    m = max(arr.values())
    return m, sum(1 for t in arr.values() if t == m), sum(arr.values())


def restrict(instance: Instance, schedule: Schedule, chunks: tuple[Chunk, ...]) -> Restriction:
    """Split ``schedule`` into the sends of ``chunks`` (free) and the others (fixed).

    The sub-instance keeps the topology, the collective's ``pieces`` (so the chunk size, the
    slot length and every ``l`` and ``L`` are unchanged) and the free chunks' pre- and
    postconditions; the fixed sends' occupancy enters as outages (full) and
    :attr:`Restriction.residual` (partial).

    Raises
    ------
    ValidationError
        A chunk that is not in the collective.
    """
    coll = instance.collective
    known = set(coll.chunk_ids)
    free_set = set(chunks)
    unknown = sorted(free_set - known)
    if unknown:
        raise ValidationError(f"neighbourhood: chunk {list(unknown[0])} is not in the collective")
    topo = instance.topology
    fixed = tuple(s for s in schedule.sends if s.chunk not in free_set)
    free = tuple(s for s in schedule.sends if s.chunk in free_set)
    load, busy_send, busy_recv = link_slots_taken(instance, fixed)
    outages = set(instance.outages)
    residual: dict[tuple[int, int], int] = {}
    for (e, q), used in load.items():
        left = instance.omega(e, q) - used
        if left <= 0:
            link = topo.links[e]
            outages.add((link.src, link.dst, q))
        else:
            residual[(e, q)] = left
    sub_coll = Collective(
        kind=coll.kind,
        chunks=coll.chunks,
        pre=tuple((c, h) for c, h in coll.pre if c in free_set),
        post=tuple((c, w) for c, w in coll.post if c in free_set),
        pieces=coll.pieces,
        root=coll.root,
        dests=coll.dests,
    )
    # Every other field (switch model, alpha cap, slot rule, ...) stays the incumbent's.
    sub = replace(instance, collective=sub_coll, outages=tuple(sorted(outages)))
    fixed_arr = [t for (chunk, _v), t in arrivals(instance, schedule).items() if chunk not in free_set]
    return Restriction(
        instance=sub,
        fixed=fixed,
        free=free,
        residual=residual,
        busy_send=frozenset(busy_send),
        busy_recv=frozenset(busy_recv),
        fixed_makespan=max(fixed_arr, default=0),
    )


def build_neighbourhood_model(
    restriction: Restriction, horizon: int, *, from_slot: int = 0, lower_bound: int = 0
) -> tuple[Any, Any]:
    """The neighbourhood's part of (2)-(14) with the LNS objective (module docstring, step 4).

    Parameters
    ----------
    restriction : Restriction
    horizon : int
        The incumbent's makespan ``m`` (the free part never needs more).
    from_slot : int
        Free chunks' ``x`` before this slot are fixed to the incumbent's sends.
    lower_bound : int
        A proven lower bound on the whole schedule's makespan.

    Returns
    -------
    (model, hint)
        The Pyomo model (extra components ``lns_residual_capacity`` and ``lns_objective``;
        ``obj_1`` deactivated) and a complete hint built from the incumbent's free sends.
    """
    import pyomo.environ as pyo

    from ccplan.model.milp import build_model, hint_from_schedule

    sub = restriction.instance
    model = build_model(sub, horizon, lower_bound=None, cuts=True)
    topo = sub.topology
    occ = [int(v) for v in sub.occupancy]
    index = topo.link_index

    on_link: dict[tuple[int, int], list[Any]] = defaultdict(list)
    incumbent = {(s.chunk[0], s.chunk[1], index[(s.src, s.dst)], s.slot) for s in restriction.free}
    for key, var in model.x.items():
        _s, _c, e, t = key
        link = topo.links[e]
        if restriction.busy_send or restriction.busy_recv:
            window = range(t, t + occ[e])
            if any((link.src, q) in restriction.busy_send or (link.dst, q) in restriction.busy_recv
                   for q in window):
                var.fix(0)  # a port the fixed sends use (single_port)
                continue
        if t < from_slot:
            var.fix(1 if key in incumbent else 0)
            continue
        on_link[(e, t)].append(var)

    # (7) against what the fixed sends leave of omega on partly used (link, slot) pairs.
    rows = []
    for (e, q), left in sorted(restriction.residual.items()):
        terms = [v for t in range(max(0, q - occ[e] + 1), q + 1) for v in on_link.get((e, t), ())]
        if len(terms) > left:
            rows.append((terms, left))
    model.lns_residual_capacity = pyo.ConstraintList(
        doc="(7) on links the fixed chunks use in part: free chunks take at most what is left"
    )
    for terms, left in rows:
        model.lns_residual_capacity.add(pyo.quicksum(terms) <= left)

    floor = min(horizon, max(restriction.fixed_makespan, lower_bound))
    _lns_objective(model, sub.collective.demands, horizon, floor)

    hint = None
    try:
        hint = hint_from_schedule(model, sub, Schedule(restriction.free, method="incumbent"))
        hint[model.D] = max(int(hint[model.D]), floor)
    except ValidationError as exc:
        log.info("lns: no hint for this neighbourhood: %s", exc)
    return model, hint


def _lns_objective(model: Any, demands: tuple[tuple[Chunk, int], ...], horizon: int, floor: int) -> None:
    """Replace ``obj_1`` by the LNS objective (module docstring, step 4) over ``demands``
    and raise ``D``'s lower bound to ``floor``."""
    import pyomo.environ as pyo

    late = [model.z[s, c, v, horizon] for (s, c), v in demands if (s, c, v, horizon) in model.z]
    # Lexicographic weights: the sum of arrivals is at most n * H, the late count at most n.
    n = len(demands)
    w_late = n * horizon + 1
    w_d = (n + 1) * w_late
    model.obj_1.deactivate()
    model.lns_objective = pyo.Objective(
        expr=w_d * model.D + w_late * pyo.quicksum(late)
        + pyo.quicksum(model.arrival[s, c, v] for (s, c), v in demands),
        sense=pyo.minimize,
        doc="LNS: min D, then the free demands first received in the last slot, then the sum "
        "of their first arrivals (14)",
    )
    model.D.setlb(floor)


def build_window_model(
    instance: Instance, schedule: Schedule, start: StartState, horizon: int, *, lower_bound: int = 0
) -> tuple[Any, Any]:
    """A slot window: every chunk free from ``start.slot`` on, the sends before it fixed.

    The window model of :func:`ccplan.model.milp.build_model` (``start``; equations (2)-(14)
    from the state of ``schedule`` at ``start.slot``: holdings of GPUs and switches, sends
    in flight, link slots they still occupy) with the LNS objective over the demands open
    at ``start.slot``. Nothing of the slots before the window is built.

    Parameters
    ----------
    instance : Instance
    schedule : Schedule
        The incumbent (verified); ``start`` must be :func:`ccplan.model.size.start_state` of it.
    start : StartState
    horizon : int
        The incumbent's makespan ``m``.
    lower_bound : int
        A proven lower bound on the whole schedule's makespan.

    Returns
    -------
    (model, hint)
        As :func:`build_neighbourhood_model`; the model's sends (absolute slots) and the
        schedule's sends before ``start.slot`` make a complete schedule.
    """
    from ccplan.model.milp import build_model, hint_from_schedule

    model = build_model(instance, horizon, lower_bound=None, cuts=True, start=start)
    floor = min(horizon, max(start.floor, lower_bound))
    _lns_objective(model, start.demands(instance.collective), horizon, floor)
    hint = None
    try:
        hint = hint_from_schedule(model, instance, schedule)
        hint[model.D] = max(int(hint[model.D]), floor)
    except ValidationError as exc:
        log.info("lns: no hint for this window: %s", exc)
    return model, hint


# --------------------------------------------------------------------------- neighbourhoods
@dataclass
class _State:
    """The incumbent as the neighbourhood rules see it."""

    instance: Instance
    schedule: Schedule
    makespan: int
    arrival: dict[tuple[Chunk, int], int]
    rng: random.Random
    window_nonzeros: float = LNS_WINDOW_NONZEROS  # size target of a slot window

    def chunk_finish(self) -> dict[Chunk, int]:
        out: dict[Chunk, int] = defaultdict(int)
        for (chunk, _v), t in self.arrival.items():
            out[chunk] = max(out[chunk], t)
        return out


def _fill(first: list[Chunk], state: _State, size: int) -> tuple[Chunk, ...]:
    """``first`` (in order, at most ``size``), then chunks finishing latest, ties at random."""
    chosen: list[Chunk] = []
    for c in first:
        if c not in chosen and len(chosen) < size:
            chosen.append(c)
    finish = state.chunk_finish()
    rest = [c for c in state.instance.collective.chunk_ids if c not in chosen]
    state.rng.shuffle(rest)
    rest.sort(key=lambda c: -finish.get(c, 0))
    chosen.extend(rest[: max(0, size - len(chosen))])
    return tuple(chosen)


def _late_chunks(state: _State) -> list[Chunk]:
    count: dict[Chunk, int] = defaultdict(int)
    for (chunk, _v), t in state.arrival.items():
        if t == state.makespan:
            count[chunk] += 1
    late = list(count)
    state.rng.shuffle(late)
    late.sort(key=lambda c: -count[c])
    return late


def _late(state: _State, size: int) -> Neighbourhood:
    """The chunks that reach some demand in the last slot, then the next latest."""
    return Neighbourhood("late", _fill(_late_chunks(state), state, size))


def _links(state: _State, size: int) -> Neighbourhood:
    """Chunks that use the links into the nodes that receive in the last slot (the
    bottleneck), most such sends first."""
    topo = state.instance.topology
    lat = state.instance.latency
    index = topo.link_index
    hot_nodes = {v for (_c, v), t in state.arrival.items() if t == state.makespan}
    uses: dict[Chunk, int] = defaultdict(int)
    for s in state.schedule.sends:
        if s.dst in hot_nodes:
            # sends landing late count more: they compete for the same in-links at the end
            uses[s.chunk] += 1 + s.slot + int(lat[index[(s.src, s.dst)]])
    ranked = list(uses)
    state.rng.shuffle(ranked)
    ranked.sort(key=lambda c: -uses[c])
    late = _late_chunks(state)
    # keep one late chunk in front so that the round can touch the last slot
    return Neighbourhood("links", _fill(late[:1] + ranked, state, size))


def _window(state: _State, size: int) -> Neighbourhood:
    """The ``late`` chunks with their first half fixed: more chunks, a smaller search."""
    chunks = _fill(_late_chunks(state), state, size)
    return Neighbourhood("window", chunks, from_slot=state.makespan // 2)


def window_start(instance: Instance, schedule: Schedule, makespan: int, nonzeros: float) -> int:
    """The earliest slot ``a`` whose window model (slots ``a .. makespan``, every chunk free)
    has at most ``nonzeros`` estimated nonzeros; ``makespan - 1`` when even the last slot's
    is larger (the smallest window). A binary search: the estimate shrinks as ``a`` grows."""
    lo, hi = 0, max(0, makespan - 1)
    while lo < hi:
        mid = (lo + hi) // 2
        est = estimate_size(instance, makespan, start=start_state(instance, schedule, mid))
        if est.nonzeros <= nonzeros:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _slots(state: _State, size: int) -> Neighbourhood:
    """A slot window at the end: every chunk free in the last slots, where the late demands
    are, with the state at the window's first slot fixed (switches' copies included). Its
    length follows the window's own size target (``size`` counts chunks: not used), but it
    always starts at or before the first send that delivers a demand in the last slot: a
    send in flight across the window's start is fixed, and one that lands in the last slot
    would pin ``D`` (on DGX2 2 chassis 1 MB a NIC send takes L = 21 slots, so windows of
    the size target alone, 15-30 slots, could never lower the makespan)."""
    a = window_start(state.instance, state.schedule, state.makespan, state.window_nonzeros)
    lat, index = state.instance.latency, state.instance.topology.link_index
    wanted = set(state.instance.collective.demands)
    last = [s.slot for s in state.schedule.sends
            if (s.chunk, s.dst) in wanted and s.slot + int(lat[index[(s.src, s.dst)]]) == state.makespan]
    a = min([a, *last])
    return Neighbourhood("slots", state.instance.collective.chunk_ids, from_slot=a, all_chunks=True)


def _random(state: _State, size: int) -> Neighbourhood:
    """Any chunks (diversification)."""
    ids = list(state.instance.collective.chunk_ids)
    state.rng.shuffle(ids)
    return Neighbourhood("random", tuple(ids[:size]))


NeighbourhoodRule = Callable[[_State, int], Neighbourhood]

NEIGHBOURHOODS: dict[str, NeighbourhoodRule] = {
    "late": _late, "slots": _slots, "links": _links, "window": _window, "random": _random,
}
"""Neighbourhood rules, tried in this order round after round."""


# --------------------------------------------------------------------------- the search
@dataclass
class LnsReport:
    """What an LNS run did (``details["lns"]`` of the ``milp`` engine)."""

    start_makespan: int | None = None
    makespan: int | None = None
    rounds: int = 0
    improvements: int = 0
    seconds: float = 0.0
    stopped: str = ""
    last_size: int = 0
    heuristic_runs: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"start_makespan": self.start_makespan, "makespan": self.makespan,
                "rounds": self.rounds, "improvements": self.improvements,
                "seconds": round(self.seconds, 3), "stopped": self.stopped,
                "neighbourhood_chunks": self.last_size, "heuristic_runs": self.heuristic_runs,
                "improvements_by_kind": dict(self.by_kind)}


def _per_chunk_nonzeros(run: _Run, horizon: int) -> float:
    from ccplan.model.size import estimate_size

    est = estimate_size(run.instance, horizon)
    return est.nonzeros / max(1, len(run.instance.collective.chunk_ids))


def _fits(run: _Run, restriction: Restriction | StartState, horizon: int) -> tuple[bool, float]:
    """The sub-model's (or the window model's) estimated size against the memory budget and
    the time left."""
    from ccplan.model.run import BUILD_SHARE

    if isinstance(restriction, StartState):
        est = estimate_size(run.instance, horizon, start=restriction)
    else:
        est = estimate_size(restriction.instance, horizon)
    remaining = run.remaining()
    ok = est.bytes <= run.memory_budget and (remaining is None or est.seconds <= BUILD_SHARE * remaining)
    return ok, est.seconds


def _better_start(run: _Run, share: float = LNS_HEURISTIC_SHARE, seed: int = 1) -> float:
    """Give the ``heuristic`` portfolio a longer run (``share`` of the time left, at most
    :data:`LNS_HEURISTIC_CAP` s); keep its schedule if it verifies and is better. Only when
    the warm start was that portfolio (or the greedy fallback) and no explicit horizon or
    given schedule is in play. Returns the seconds spent."""
    from ccplan.contract import SolveOptions, sub_engine

    if run.options.horizon is not None or run.warm_method not in ("heuristic", "greedy"):
        return 0.0
    if run.options.extra.get("warm_start_method", "heuristic") != "heuristic":
        return 0.0
    remaining = run.remaining()
    limit = 10.0 if remaining is None else min(LNS_HEURISTIC_CAP, share * remaining)
    if limit < 1.0:
        return 0.0
    try:
        engine = sub_engine("heuristic")
    except (ValidationError, ImportError):
        return 0.0
    t0 = time.perf_counter()
    out = engine(run.instance, SolveOptions(time_limit=limit, workers=run.options.workers,
                                            seed=run.options.seed + seed))
    if out.schedule is not None:
        run.offer(out.schedule, "heuristic (LNS stalled)" if seed > 1 else "heuristic (before LNS)")
    return time.perf_counter() - t0


def lns_search(run: _Run, horizon: int) -> bool:
    """Improve ``run``'s incumbent by LNS until the time limit, a proof (incumbent = bound),
    ``extra["lns_rounds"]`` rounds, or :data:`LNS_STALE_ROUNDS` rounds without improvement
    when there is no time limit.

    Returns False (and does nothing) when there is no incumbent or not even one chunk's
    model fits the memory budget and the time left. ``extra``: ``lns_rounds``,
    ``lns_nonzeros`` (first chunk-neighbourhood size), ``lns_window_nonzeros`` (first slot
    window size), ``lns_slice`` (CP-SAT seconds per round), ``lns_neighbourhoods`` (the
    rotation, names of :data:`NEIGHBOURHOODS`; ``slots`` is left out on instances with
    cut-through switches).
    """
    from ccplan.model.milp import schedule_from_model
    from ccplan.model.run import _progress, solve_model_with

    report = LnsReport()
    run.lns_report = report
    if run.incumbent is None or run.incumbent_makespan is None:
        report.stopped = "no incumbent"
        return False
    instance = run.instance
    opts = run.options
    t_start = time.perf_counter()
    from ccplan.model.size import BYTES_PER_NONZERO

    # The refused whole model's estimate (a horizon at most the incumbent's) answers this at
    # no cost; a second estimate of a huge model would eat the time the fallback needs.
    known = run.estimate.get("nonzeros")
    n_all = max(1, len(instance.collective.chunk_ids))
    per_chunk = known / n_all if known else _per_chunk_nonzeros(run, run.incumbent_makespan)
    if per_chunk * BYTES_PER_NONZERO > run.memory_budget:
        report.stopped = "one chunk's model does not fit the memory budget"
        return False
    if run.incumbent_makespan > run.global_bound:
        _better_start(run)
    rng = random.Random(opts.seed)
    current = run.incumbent
    assert current is not None
    cur_score = score(instance, current)
    report.start_makespan = report.makespan = cur_score[0]
    n_chunks = len(instance.collective.chunk_ids)
    per_chunk = _per_chunk_nonzeros(run, cur_score[0])
    target = float(opts.extra.get("lns_nonzeros", LNS_TARGET_NONZEROS))
    window_target = float(opts.extra.get("lns_window_nonzeros", LNS_WINDOW_NONZEROS))
    max_rounds = opts.extra.get("lns_rounds")
    slice_s = float(opts.extra.get("lns_slice", LNS_SLICE_SECONDS))
    kinds = list(opts.extra.get("lns_neighbourhoods", ROTATION))
    unknown = [k for k in kinds if k not in NEIGHBOURHOODS]
    if unknown or not kinds:
        raise ValidationError(
            f"extra['lns_neighbourhoods']: choose from {', '.join(NEIGHBOURHOODS)}, got {kinds!r}"
        )
    if instance.bufferless and "slots" in kinds:
        # a cut-through switch's state at a slot is not a holding
        kinds = [k for k in kinds if k != "slots"] or ["late"]
    stale = 0
    progress = _progress(run, 0.0)
    while True:
        if cur_score[0] <= run.global_bound:
            report.stopped = "incumbent meets the lower bound"
            break
        if max_rounds is not None and report.rounds >= int(max_rounds):
            report.stopped = "round limit"
            break
        if stale >= LNS_STALE_ROUNDS:
            if opts.time_limit is None:
                report.stopped = f"{stale} rounds without improvement"
                break
            # Stalled with time left: the heuristic gets another, longer run (on the largest
            # models it improves more per second than rounds of a few chunks); LNS goes on
            # from the better schedule.
            report.heuristic_runs += 1
            _better_start(run, share=2 * LNS_HEURISTIC_SHARE, seed=1 + report.heuristic_runs)
            stale = 0
            assert run.incumbent is not None
            if score(instance, run.incumbent) < cur_score:
                current = run.incumbent
                cur_score = score(instance, current)
                per_chunk = _per_chunk_nonzeros(run, cur_score[0])
            continue
        remaining = run.remaining()
        if remaining is not None and remaining < LNS_MIN_SECONDS:
            report.stopped = "time limit"
            break
        m = cur_score[0]
        size = max(1, min(n_chunks, int(target / max(per_chunk, 1.0))))
        state = _State(instance, current, m, arrivals(instance, current), rng, window_target)
        hood = NEIGHBOURHOODS[kinds[report.rounds % len(kinds)]](state, size)
        start: StartState | None = None
        if hood.all_chunks:
            start = start_state(instance, current, hood.from_slot)
            ok, build_s = _fits(run, start, m)
            while not ok and hood.from_slot < m - 1:
                # a shorter window: half the size target
                window_target = max(LNS_MIN_NONZEROS, window_target / 2)
                a = max(hood.from_slot + 1, window_start(instance, current, m, window_target))
                hood = Neighbourhood(hood.kind, hood.chunks, a, all_chunks=True)
                start = start_state(instance, current, a)
                ok, build_s = _fits(run, start, m)
            if ok and estimate_size(instance, m, start=start).nonzeros > LNS_WINDOW_OVERSIZE * window_target:
                ok = False  # far above its target (module constant): not worth a round
            if not ok:
                # not even the last slot's window fits: a chunk neighbourhood this round
                hood = _late(state, size)
                start = None
        if start is None:
            restriction = restrict(instance, current, hood.chunks)
            ok, build_s = _fits(run, restriction, m)
            while not ok and len(hood.chunks) > 1:
                hood = Neighbourhood(hood.kind, hood.chunks[: max(1, len(hood.chunks) // 2)], hood.from_slot)
                restriction = restrict(instance, current, hood.chunks)
                ok, build_s = _fits(run, restriction, m)
                target = min(target, len(hood.chunks) * per_chunk)
            if not ok:
                report.stopped = "one chunk's model does not fit the memory budget or the time left"
                break
        report.rounds += 1
        report.last_size = len(hood.chunks)
        tb = time.perf_counter()
        fixed: tuple[Send, ...]
        if start is not None:
            model, hint = build_window_model(instance, current, start, m, lower_bound=run.global_bound)
            fixed, model_instance = tuple(s for s in current.sends if s.slot < start.slot), instance
        else:
            model, hint = build_neighbourhood_model(restriction, m, from_slot=hood.from_slot,
                                                    lower_bound=run.global_bound)
            fixed, model_instance = restriction.fixed, restriction.instance
        run.build_seconds += time.perf_counter() - tb
        remaining = run.remaining()
        limit = slice_s if remaining is None else max(min(slice_s, remaining - 0.5), 0.05)
        log_path = None
        if opts.log_path is not None and report.rounds == 1:
            log_path = opts.log_path.with_name(f"{opts.log_path.stem}.lns1-h{m}{opts.log_path.suffix}")
            if not any("question" in st for st in run.steps):
                log_path = opts.log_path  # the first solve of the run keeps the requested name
        res = solve_model_with(run.backend, model, time_limit=limit, workers=opts.workers,
                               seed=opts.seed + report.rounds, params_text=run.params_text, hint=hint,
                               log_path=log_path)
        run.solve_seconds += res.wall_seconds
        run.translate_seconds += res.translate_seconds
        step: dict[str, Any] = {
            "horizon": m, "question": f"lns {hood.kind}", "chunks": len(hood.chunks),
            "from_slot": hood.from_slot, "status": res.status, "seconds": round(res.wall_seconds, 3),
            "hint_status": res.hint_status,
        }
        improved = False
        if res.has_solution:
            new = schedule_from_model(model, model_instance).sends
            merged = Schedule.of(fixed + tuple(new), method="milp")
            rep = verify(instance, merged)
            if not rep.ok:
                log.error("lns: merged schedule fails verification: %s", rep.violations[0])
            else:
                new_score = score(instance, merged)
                step["makespan"], step["late"], step["arrivals"] = new_score
                if new_score < cur_score:
                    improved = True
                    current, cur_score = merged, new_score
                    report.improvements += 1
                    report.by_kind[hood.kind] = report.by_kind.get(hood.kind, 0) + 1
                    if not run.offer(merged, f"lns {hood.kind}"):
                        # same makespan, fewer demands in its last slot: keep it as the incumbent
                        run.incumbent, run.incumbent_source = merged, f"lns {hood.kind}"
                    elif progress is not None:
                        progress(time.perf_counter() - run.start, float(new_score[0]), None, None)
        run.steps.append(step)
        if res.details.get("interrupted"):
            step["interrupted"] = True
            report.makespan = cur_score[0]
            report.seconds = time.perf_counter() - t_start
            raise KeyboardInterrupt
        stale = 0 if improved else stale + 1
        quick = res.status == "optimal" and res.wall_seconds < LNS_QUICK_SHARE * limit
        if start is not None:
            # A window proved optimal without a gain cannot give more at that length: the
            # next one reaches further back (it slides from the end backwards as it grows).
            if quick or (res.status == "optimal" and not improved):
                window_target = window_target * LNS_GROW
            elif not improved and res.status != "optimal":
                window_target = max(LNS_MIN_NONZEROS, window_target * LNS_SHRINK)
        elif quick and len(hood.chunks) == size:
            target = target * LNS_GROW
        elif not improved and res.status != "optimal":
            target = max(LNS_MIN_NONZEROS, per_chunk, target * LNS_SHRINK)
        log.info("lns round %d (%s, %d chunks from slot %d): %s, score %s, %.1f s build",
                 report.rounds, hood.kind, len(hood.chunks), hood.from_slot, res.status, cur_score,
                 build_s)
    report.makespan = cur_score[0]
    report.seconds = time.perf_counter() - t_start
    return report.rounds > 0 or report.stopped == "incumbent meets the lower bound"
