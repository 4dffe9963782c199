"""The exact engine's warm start: the schedule that gives the run its horizon and first
incumbent. The ``heuristic`` portfolio in rounds budgeted by progress (or another engine, or a
given schedule), the companion engines that run after it, and the built-in greedy schedule
(:func:`greedy_schedule`) when no heuristic is registered or none gives a valid schedule."""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ccplan.contract import Outcome, SolveOptions, sub_engine
from ccplan.errors import CCPlanError, ValidationError
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)


def _shortest_latency(instance: Instance) -> dict[Any, tuple[dict[int, int], dict[int, int]]]:
    """Per chunk: multi-source Dijkstra over link latencies L from the chunk's holders.

    Returns ``chunk -> (distance, parent link index)``.
    """
    topo = instance.topology
    lat = instance.latency
    out: dict[Any, tuple[dict[int, int], dict[int, int]]] = {}
    for chunk, holders in instance.collective.holders.items():
        dist = {h: 0 for h in holders}
        parent: dict[int, int] = {}
        heap = [(0, h) for h in sorted(holders)]
        heapq.heapify(heap)
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist.get(u, math.inf):
                continue
            for li in topo.out_links[u]:
                v = topo.links[li].dst
                nd = d + int(lat[li])
                if nd < dist.get(v, math.inf):
                    dist[v] = nd
                    parent[v] = li
                    heapq.heappush(heap, (nd, v))
        out[chunk] = (dist, parent)
    return out


def greedy_schedule(instance: Instance) -> Schedule:
    """A cheap valid schedule, used as horizon and incumbent when no heuristic is registered.

    Each chunk follows its shortest-latency tree from its holders (restricted to the nodes
    on the way to a demand); edges are scheduled chunk by chunk, parents before children, at
    the earliest slot where the sender holds the chunk and the link (and, with
    ``single_port``, both ports) is free over the whole occupancy window ``t .. t+l-1``
    against ``omega``. Every node receives a chunk at most once (tree), so the schedule
    satisfies the canonical semantics; the engine still verifies it. Cut-through switches:
    built on the store-and-forward twin and re-timed (:mod:`ccplan.schedule.cut_through`).
    """
    if instance.bufferless:
        from ccplan.schedule.cut_through import retime

        return retime(instance, greedy_schedule(instance.with_switch_model("store-and-forward")))
    topo = instance.topology
    occ = instance.occupancy
    lat = instance.latency
    load: dict[tuple[int, int], int] = defaultdict(int)
    send_port: set[tuple[int, int]] = set()
    recv_port: set[tuple[int, int]] = set()
    sends: list[Send] = []
    trees = _shortest_latency(instance)
    wanted = instance.collective.wanted
    for chunk in instance.collective.chunk_ids:
        dist, parent = trees[chunk]
        holders = instance.collective.holders[chunk]
        needed: set[int] = set()
        for v in wanted.get(chunk, ()):
            while v not in holders and v not in needed:
                if v not in parent:
                    raise ValidationError(
                        f"chunk {list(chunk)} cannot reach node {v}: no path in the topology"
                    )
                needed.add(v)
                v = topo.links[parent[v]].src
        avail = {h: 0 for h in holders}
        for v in sorted(needed, key=lambda n: (dist[n], n)):
            li = parent[v]
            u = topo.links[li].src
            t = avail[u]
            span = int(occ[li])
            while not all(
                load[(li, s)] < instance.omega(li, s)
                and (not instance.single_port or ((u, s) not in send_port and (v, s) not in recv_port))
                for s in range(t, t + span)
            ):
                t += 1
            for s in range(t, t + span):
                load[(li, s)] += 1
                if instance.single_port:
                    send_port.add((u, s))
                    recv_port.add((v, s))
            avail[v] = t + int(lat[li])
            sends.append(Send(t, chunk, u, v))
    return Schedule.of(sends, method="milp-greedy")


WARM_START_SHARE = 0.1
"""Most of a time limit the warm start may take (it usually stops much earlier)."""

WARM_START_FIRST_ROUND = 0.01
"""Least seconds of the first timed heuristic round (else twice the ``quick`` run's time);
each further round doubles it."""

WARM_START_CAP = 8.0
"""Most seconds the warm start takes without a time limit."""

WARM_START_TINY_NONZEROS = 10_000
"""Below this many nonzeros (:func:`ccplan.model.size.estimate_size` at the first round's
makespan) the warm start ends after its first round. Measured on the 24 random instances of
``benchmarks/plain_cpsat.py`` (quiet machine): such models are searched by CP-SAT in
0.01-0.16 s, while the further rounds cost 0.05-0.4 s of a 0.1-0.6 s run; the instances whose
search takes seconds have 11,000-16,000 nonzeros and keep the rounds."""

WARM_START_PATIENCE = 2
"""Rounds in a row without improvement that end the warm start. Every round runs the
portfolio afresh with twice the budget, so a round that only repeats MTEGCCA's answer says
little; with one round of patience DGX2 2 chassis 1 MB stopped at 58 slots after 3 s, where
the next, longer rounds reach 46 (measured on a shared machine). The extra cost on small
instances is two short rounds, a few hundredths of a second."""


def _heuristic_until_stagnation(
    instance: Instance, options: SolveOptions, engine: Any, t0: float, lower: int,
    facts: dict[str, Any] | None = None,
) -> tuple[Schedule | None, int | None]:
    """The ``heuristic`` portfolio, budgeted by progress rather than by a fixed share; its
    best schedule and that schedule's makespan (None, None when it found none).

    First one run with a budget of :data:`WARM_START_FIRST_ROUND` (the portfolio always
    runs its first variant, MTEGCCA, and stops when the budget is gone; q seconds in all);
    then timed rounds of 2q, 4q ... seconds while the makespan is above ``ccplan.bounds`` and
    the rounds fit in :data:`WARM_START_SHARE` of the time limit (:data:`WARM_START_CAP` s
    without one). :data:`WARM_START_PATIENCE` rounds in a row that do not improve end the warm
    start: CP-SAT gets the rest. Scaling the rounds by q keeps the
    warm start in proportion to the instance: milliseconds on small ones, where a solver
    answers in a fraction of a second, seconds on large ones. (The ``quick`` effort is not
    used: it runs four variants whatever the budget, 40-60 s on DGX2 4 chassis C=8.)
    """
    def round_options(budget: float) -> SolveOptions:
        # The round's budget is soft (the portfolio's first real variant always completes);
        # the run's own time limit, what is left of it, stays hard.
        hard = None
        if options.time_limit is not None:
            hard = max(options.time_limit - (time.perf_counter() - t0), 1e-3)
        return SolveOptions(time_limit=hard, workers=options.workers, seed=options.seed,
                            extra={"soft_budget": budget})

    from ccplan.model.size import estimate_size

    def stopped(out: Outcome) -> bool:
        # Ctrl-C inside a round: the portfolio returns its best so far, flagged; no more rounds
        if out.details.get("interrupted") and facts is not None:
            facts["interrupted"] = True
        return bool(out.details.get("interrupted"))

    tq = time.perf_counter()
    first = engine(instance, round_options(WARM_START_FIRST_ROUND))
    budget = max(WARM_START_FIRST_ROUND, 2 * (time.perf_counter() - tq))
    if facts is not None:
        facts["first_round_seconds"] = time.perf_counter() - tq
    best = first.schedule
    best_m = None if best is None else verify(instance, best).makespan_slots
    if stopped(first):
        return best, best_m
    if best_m is not None and estimate_size(instance, best_m).nonzeros < WARM_START_TINY_NONZEROS:
        return best, best_m  # CP-SAT answers such a model faster than another round runs
    cap = WARM_START_CAP if options.time_limit is None else WARM_START_SHARE * options.time_limit
    misses = 0
    while best_m is not None and best_m > lower:
        if time.perf_counter() - t0 + budget > cap:
            break
        out = engine(instance, round_options(budget))
        m = None if out.schedule is None else verify(instance, out.schedule).makespan_slots
        budget *= 2
        if stopped(out):
            if m is not None and m < best_m:
                best, best_m = out.schedule, m
            break
        if m is None or m >= best_m:
            misses += 1
            if misses >= WARM_START_PATIENCE:
                break  # stagnation
            continue
        best, best_m, misses = out.schedule, m, 0
    return best, best_m


def _has_chassis(instance: Instance) -> bool:
    from ccplan.instances.clusters import has_chassis

    return has_chassis(instance.topology)


def _trees_apply(instance: Instance) -> bool:
    """The ``trees`` engine schedules this instance directly (AllGather / Broadcast) and its
    pipelining has chunks to work with."""
    return instance.collective.kind in ("allgather", "broadcast") and instance.collective.chunks > 1


WARM_START_COMPANIONS: dict[str, Callable[[Instance], bool]] = {
    "cut-aware": _has_chassis, "trees": _trees_apply,
}
"""Engines that run once after the ``heuristic`` portfolio's warm-start rounds, where they
apply (engine name -> predicate); the best verified schedule is the warm start. The
portfolio runs ``cut-aware`` only after four other variants, which its progress-budgeted
rounds do not reach on AMD 4 chassis 1 GB (109 slots after 10 s, where ``cut-aware`` alone
gives 85 in 3 s). ``trees`` (pipelined tree packing) is near the throughput limit where
many chunks per GPU follow one another, which the portfolio's first rounds may not reach."""


def _companions(
    instance: Instance, options: SolveOptions, t0: float, best: Schedule | None, best_m: int | None,
    lower: int,
) -> tuple[Schedule | None, str | None]:
    """Run :data:`WARM_START_COMPANIONS` that apply; return the best schedule and the name of
    the companion that gave it (None when the portfolio's stays best). ``best_m`` is
    ``best``'s makespan, as the portfolio's rounds verified it."""
    source: str | None = None
    for name, applies in WARM_START_COMPANIONS.items():
        if best_m is not None and best_m <= lower:
            break
        try:
            engine = sub_engine(name)
            if not applies(instance):
                continue
        except (ValidationError, ImportError):
            continue
        limit = WARM_START_CAP
        if options.time_limit is not None:
            limit = WARM_START_SHARE * (options.time_limit - (time.perf_counter() - t0))
            if limit < 0.1:
                break
        try:
            out = engine(instance, SolveOptions(time_limit=limit, workers=options.workers, seed=options.seed))
        except CCPlanError as exc:
            log.info("warm-start companion %r failed: %s", name, exc)
            continue
        if out.schedule is None:
            continue
        m = verify(instance, out.schedule).makespan_slots
        if m is not None and (best_m is None or m < best_m):
            best, best_m, source = out.schedule, m, name
    return best, source


def _warm_start(
    instance: Instance, options: SolveOptions, lower: int, facts: dict[str, Any] | None = None
) -> tuple[Schedule | None, str, float]:
    """The heuristic schedule (or the built-in greedy one) and the name of its method."""
    t0 = time.perf_counter()
    given = options.extra.get("warm_start_schedule")
    if given is not None:
        if not isinstance(given, Schedule):
            raise ValidationError("extra['warm_start_schedule'] must be a Schedule")
        report = verify(instance, given)
        if not report.ok:
            raise ValidationError(f"extra['warm_start_schedule'] fails verification: {report.violations[0]}")
        return given, "given", time.perf_counter() - t0
    name = str(options.extra.get("warm_start_method", "heuristic"))
    schedule: Schedule | None = None
    method = name
    try:
        engine = sub_engine(name)
    except (ValidationError, ImportError):
        # Unknown name, or declared but its module is not there (yet).
        engine = None
        log.info("warm-start method %r is not registered; using the built-in greedy schedule", name)
    if engine is not None:
        h_limit = options.extra.get("heuristic_time_limit")
        try:
            if h_limit is not None or name != "heuristic":
                h_opts = SolveOptions(time_limit=h_limit, workers=options.workers, seed=options.seed)
                schedule = engine(instance, h_opts).schedule
            else:
                schedule, span = _heuristic_until_stagnation(instance, options, engine, t0, lower, facts)
                if facts is None or not facts.get("interrupted"):
                    schedule, companion = _companions(instance, options, t0, schedule, span, lower)
                    if companion is not None and facts is not None:
                        facts["companion"] = companion
        except CCPlanError as exc:
            log.warning("warm-start method %r failed: %s", name, exc)
    if schedule is None or not verify(instance, schedule).ok:
        if schedule is not None:
            log.warning("warm-start method %r returned an invalid schedule; using the greedy one", name)
        schedule = greedy_schedule(instance)
        method = "greedy"
    return schedule, method, time.perf_counter() - t0
