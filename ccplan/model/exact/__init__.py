"""The exact engine ``milp``: the paper's MILP (constraints (2)-(14)) solved by CP-SAT.

Pipeline (DESIGN.md: the heuristic hands the exact engine its horizon and an incumbent):

1. an upper bound: the makespan of a heuristic schedule (method
   ``extra["warm_start_method"]``, default ``"heuristic"``), or, when no heuristic is
   registered, of :func:`greedy_schedule` below; ``options.horizon`` overrides it;
2. a lower bound: ``ccplan.bounds.lower_bound_slots`` (latency, ingress and cut bounds);
3. the Pyomo model (``ccplan.model.milp.build_model``), optionally written out
   (``options.dump_model``);
4. a size check (``ccplan.model.size.estimate_size``) before every build: a model above the
   memory budget or the time left is not built, and the best verified schedule comes back
   as ``feasible`` with ``details["fallback"]``;
   then a search strategy (:data:`STRATEGIES`): ``direct`` minimises D over the horizon in
   one solve; ``ascending`` asks "is there a schedule with D <= h?" for h = lower bound,
   +1, ... on a model built for horizon h, so the first "yes" is optimal and every "no"
   raises the bound; ``descending`` asks the same questions downwards from the warm start,
   so the first "no" proves the incumbent optimal; ``auto`` (default) picks ``direct`` for
   small models and ``ascending`` for large ones (with a time limit: ascending for half of
   it, then large-neighbourhood search, :mod:`ccplan.model.lns`, when the gap is open);
   ``lns`` runs that search for the whole run, and a refused whole model falls back to it;
   ``extra["prove"]`` adds CP-SAT's own refutation of "D <= m - 1" for the final makespan m;
5. the backend (:data:`BACKENDS`): CP-SAT (default) or HiGHS (cross-checks);
6. when the solver returns no incumbent but the heuristic schedule exists, that schedule is
   returned with status ``feasible`` (CP-SAT can time out in presolve even with a complete
   hint; ``docs/exact.md``).

The CP-SAT defaults (:data:`DEFAULT_CPSAT_PARAMS`) were measured with
``benchmarks/exact.py``; ``docs/exact.md`` lists the measurements.
"""

from __future__ import annotations

import csv
import heapq
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ccplan.contract import Outcome, SolveOptions, get_engine, register
from ccplan.errors import CCPlanError, ValidationError
from ccplan.instances.instance import Instance
from ccplan.limits import memory_budget
from ccplan.model.run import (
    BACKENDS,
    BUILD_SHARE,
    DEFAULT_CPSAT_PARAMS,
    BackendResult,
    _progress,
    _RefusedError,
    _Run,
    solve_model_with,
)
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)


DEFAULT_STRATEGY = "auto"
"""``direct`` for small models, ``ascending`` for large ones (:func:`_auto`); measured in
docs/exact.md."""

AUTO_DIRECT_NONZEROS = 200_000
"""``auto`` solves one ``min D`` model (``direct``) up to this many estimated nonzeros at the
warm start's horizon: below it one build beats one build per question of ``ascending``."""


# --------------------------------------------------------------------------- backends


# --------------------------------------------------------------------------- bounds & fallback


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


# --------------------------------------------------------------------------- engine helpers


def _admit(run: _Run, horizon: int) -> None:
    """Refuse (raise :class:`_RefusedError`) a model that would not fit the memory budget or the
    time left, judged by its estimated size before anything is built."""
    from ccplan.model.size import estimate_size

    extra = run.options.extra
    est = estimate_size(run.instance, horizon, dense=bool(extra.get("dense", False)),
                        cuts=bool(extra.get("cuts", True)))
    run.estimate = {"horizon": horizon, "variables": est.variables, "rows": est.rows,
                    "nonzeros": est.nonzeros, "bytes": est.bytes, "seconds": round(est.seconds, 3)}
    if est.bytes > run.memory_budget:
        raise _RefusedError(f"model for H={horizon} too large ({est.describe()}) for the memory budget "
                       f"of {run.memory_budget / 1e9:.1f} GB")
    remaining = run.remaining()
    if remaining is not None and est.seconds > BUILD_SHARE * remaining:
        raise _RefusedError(f"model for H={horizon} ({est.describe()}) needs ~{est.seconds:.0f} s to build, "
                       f"{remaining:.0f} s of the time limit are left")


def _build(run: _Run, horizon: int) -> Any:
    """Build the model for ``horizon`` (after :func:`_admit` accepted it)."""
    from ccplan.model.milp import build_model, model_size

    _admit(run, horizon)
    t0 = time.perf_counter()
    extra = run.options.extra
    model = build_model(
        run.instance,
        horizon,
        dense=bool(extra.get("dense", False)),
        lower_bound=run.global_bound if run.lower_bound_cut else None,
        cuts=bool(extra.get("cuts", True)),
    )
    run.build_seconds += time.perf_counter() - t0
    run.model_size = dict(model_size(model))
    return model


def _dump(run: _Run, horizon: int) -> None:
    """Write the optimisation model over the full horizon H (the heuristic's makespan, as the
    paper proposes for other solvers), whatever the strategy later builds."""
    from ccplan.model.milp import write_model

    assert run.options.dump_model is not None
    write_model(_build(run, horizon), run.options.dump_model)
    run.dumped = True


def _hint(run: _Run, model: Any, horizon: int) -> Mapping[Any, float] | None:
    """The warm start as a complete hint, when it fits the model's horizon."""
    from ccplan.model.milp import hint_from_schedule

    if not run.options.warm_start or run.warm is None or run.warm_makespan is None:
        return None
    if run.warm_makespan > horizon:
        return None
    try:
        hint = hint_from_schedule(model, run.instance, run.warm)
    except (ValidationError, TypeError) as exc:
        # The solve goes on without a hint; the schedule stays the fallback incumbent.
        log.warning("no warm-start hint from %s: %s", run.warm_method, exc)
        run.hint_error = f"{type(exc).__name__}: {exc}"
        return None
    run.hint_method = run.warm_method
    return hint


def _solve(run: _Run, model: Any, horizon: int, hint: Mapping[Any, float] | None, *,
           feasibility: bool, domains: Mapping[Any, tuple[int, int]] | None = None) -> BackendResult:
    from ccplan.model.milp import schedule_from_model

    opts = run.options
    remaining = run.remaining()
    log_path = opts.log_path
    if log_path is not None and run.steps:
        # one log per solve; the first keeps the requested name
        log_path = log_path.with_name(f"{log_path.stem}.step{len(run.steps)}-h{horizon}{log_path.suffix}")
    offset = time.perf_counter() - run.start
    res = solve_model_with(
        run.backend,
        model,
        time_limit=None if remaining is None else max(remaining, 0.05),
        workers=opts.workers,
        seed=opts.seed,
        params_text=run.params_text,
        hint=hint,
        log_path=log_path,
        progress_callback=_progress(run, offset),
        stop_after_first_solution=feasibility,
        **({} if domains is None else {"domains": domains}),
    )
    run.solve_seconds += res.wall_seconds
    run.translate_seconds += res.translate_seconds
    for t, obj, bound in res.trajectory:
        run.trajectory.append((offset + t, obj, max(bound, float(run.global_bound))))
    step: dict[str, Any] = {
        "horizon": horizon,
        "question": "D <= h ?" if feasibility else "min D",
        "status": res.status,
        "objective": res.objective,
        "bound": res.bound,
        "seconds": round(res.wall_seconds, 3),
        "hint_status": res.hint_status,
    }
    if not run.steps:
        run.hint_status = res.hint_status
    if res.has_solution:
        schedule = schedule_from_model(model, run.instance)
        schedule = Schedule.of(schedule.sends, method="milp")
        run.offer(schedule, f"{res.backend}@H={horizon}")
        step["makespan"] = verify(run.instance, schedule).makespan_slots
    run.steps.append(step)
    if res.details.get("interrupted"):
        step["interrupted"] = True
        raise KeyboardInterrupt  # the incumbent is saved; the strategy stops here
    return res


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-6)


def _infeasible_at(run: _Run, h: int) -> None:
    """The solver proved that no schedule has makespan <= h."""
    if run.incumbent_makespan is not None and run.incumbent_makespan <= h:
        log.error("solver claims no schedule with makespan <= %d, but a verified one has %d: "
                  "model and verifier disagree", h, run.incumbent_makespan)
        return
    if not run.lower_bound_cut and (run.solver_infeasible is None or h > run.solver_infeasible):
        run.solver_infeasible = h
    run.raise_bound(h + 1)


def _prove(run: _Run) -> None:
    """``--prove``: make CP-SAT itself refute "D <= m - 1" for the incumbent's makespan m
    (on a model without the ``D >= LB`` row), unless a strategy step already did."""
    m = run.incumbent_makespan
    if m is None or m < 1 or run.solver_infeasible == m - 1:
        return
    if m - 1 < 1:
        return  # a horizon-0 model has no slot: makespan 1 cannot be beaten by a send
    run.lower_bound_cut = False
    _ask(run, m - 1)


def _bound_from(run: _Run, res: BackendResult, h: int) -> None:
    """Turn a solve's bound on the horizon-h model into a global bound."""
    if res.status == "infeasible":
        _infeasible_at(run, h)
    elif res.bound is not None:
        # The model only covers makespans <= h; every other schedule has makespan >= h + 1.
        run.raise_bound(min(_ceil(res.bound), h + 1))


def _direct(run: _Run, horizon: int) -> None:
    """One solve: min D over the horizon (the paper's objective)."""
    model = _build(run, horizon)
    hint = _hint(run, model, horizon)
    res = _solve(run, model, horizon, hint, feasibility=False)
    _bound_from(run, res, horizon)


def _next_below(run: _Run, h: int) -> int:
    return h if run.incumbent_makespan is None else min(h, run.incumbent_makespan - 1)


def _descending(run: _Run, horizon: int) -> None:
    """Feasibility questions "D <= h?" for decreasing h, each on a model built for horizon h.

    The first h is one below the warm start (or ``horizon`` without one); a schedule with
    makespan m moves h to m - 1; "infeasible" at h proves the incumbent (makespan h + 1)
    optimal. A model for a smaller h has fewer slots and its infeasibility proof is
    shorter than closing the gap of the full model.
    """
    h = _next_below(run, horizon)
    while h >= run.global_bound:
        res = _ask(run, h)
        if res is None:
            return
        if not res.has_solution:
            return
        if run.incumbent_makespan is None or run.incumbent_makespan > h:
            log.error("feasibility answer at h=%d did not yield a schedule with makespan <= h", h)
            return
        h = _next_below(run, h)


def _ask(run: _Run, h: int) -> BackendResult | None:
    """One feasibility question "D <= h?" (model for horizon h, bound raised on "no");
    None when the time limit leaves no room to ask it."""
    remaining = run.remaining()
    if remaining is not None and remaining <= 0.05:
        run.fallback = run.fallback or f"time limit reached before the question D <= {h}"
        return None
    model, domains = _question_model(run, h)
    outer = run.soft_deadline
    if run.question_cap is not None:
        # the question (not its model's build) gets at most the cap, then auto hands over
        cap_at = time.perf_counter() + run.question_cap
        run.soft_deadline = cap_at if outer is None else min(outer, cap_at)
    try:
        res = _solve(run, model, h, _hint(run, model, h), feasibility=True, domains=domains)
    finally:
        run.soft_deadline = outer
    _bound_from(run, res, h)
    if res.status == "infeasible" and run.later_question_cap is not None:
        run.question_cap = run.later_question_cap  # answered: the questions are not stalled
    return res


QUESTION_SPAN = 4
"""One model answers the questions ``h .. h + max(QUESTION_SPAN, h // 8)`` (at most up to
one below the incumbent); a question beyond builds the next one. Runs ask few questions
(NDv2 2ch 64 KB: 6, DGX2 2ch 1 MB: 5 in 10 minutes), while the model for a poor warm
start's horizon can be far larger than the first question needs (AMD 2ch 1 GB: 2.93 M
nonzeros at horizon 63 against 1.81 M at the bound 49)."""


def _question_model(run: _Run, h: int) -> tuple[Any, Mapping[Any, tuple[int, int]] | None]:
    """The model that answers "D <= h ?", and the CP-SAT domains that make it do so.

    With CP-SAT one model, built and translated once for the largest horizon the strategy
    may ask (``run.question_top``, at most :data:`QUESTION_SPAN` or h/8 above h), answers
    the questions up to its horizon: the variables the model for
    ``h`` would not have are fixed at 0 and ``D`` is bounded to ``[bound, h]`` in the proto
    (:func:`ccplan.model.milp.horizon_restriction`). Other backends, a refused large
    model or ``extra["reuse_model"] = False`` build the model for ``h`` (domains None).
    """
    from pyomo.common.collections import ComponentMap

    from ccplan.model.milp import horizon_restriction

    if run.backend != "cpsat" or not run.options.extra.get("reuse_model", True):
        return _build(run, h), None
    cached = run.question_model
    if cached is None or cached[1] < h or cached[2] != run.lower_bound_cut:
        top = max(h, min(run.question_top or h, h + max(QUESTION_SPAN, h // 8)))
        try:
            model = _build(run, top)
        except _RefusedError:
            if top == h:
                raise
            top = h
            model = _build(run, top)
        run.question_model = cached = (model, top, run.lower_bound_cut)
    model, top, _ = cached
    domains = ComponentMap((var, (0, 0)) for var in horizon_restriction(model, h))
    domains[model.D] = (run.global_bound if run.lower_bound_cut else 0, h)
    return model, domains


def _ascending(run: _Run, horizon: int) -> None:
    """Feasibility questions "D <= h?" for h = lower bound, +1, ...: the first yes is optimal."""
    h = run.global_bound
    run.question_top = horizon if run.incumbent_makespan is None else min(horizon, run.incumbent_makespan - 1)
    while run.incumbent_makespan is None or h < run.incumbent_makespan:
        if h > horizon:
            return
        res = _ask(run, h)
        if res is None:
            return
        if res.status != "infeasible":
            return  # a schedule with makespan <= h (optimal, as h is a bound) or a time out
        h += 1


def _auto(run: _Run, horizon: int) -> None:
    """``direct`` when the model over the horizon is small (:data:`AUTO_DIRECT_NONZEROS`),
    else ``ascending`` (many small models instead of one large one)."""
    from ccplan.model.size import estimate_size

    est = estimate_size(run.instance, horizon, dense=bool(run.options.extra.get("dense", False)))
    chosen = "direct" if est.nonzeros <= AUTO_DIRECT_NONZEROS else "ascending"
    run.auto_choice = chosen
    if chosen == "direct" or run.options.time_limit is None or not run.options.extra.get("lns", True):
        STRATEGIES[chosen](run, horizon)
        return
    _ascending_then_lns(run, horizon)


AUTO_ASCENDING_SHARE = 0.5
"""Under ``auto`` on a large model with a time limit, the ascending questions get this share
of the time left; a question still open then is a stalled search, and LNS gets the rest."""

AUTO_QUESTION_SHARE = 0.2
"""Under ``auto`` (as :data:`AUTO_ASCENDING_SHARE`), one question open longer than this share
of the time left at the start is a stalled search too. Measured in 10-minute runs (2
workers, load 6-8): DGX2 2 chassis 1 MB answers "no" to 37..40 in 45-74 s each; AMD 2
chassis 1 GB leaves its first question, "D <= 49?", open for the whole share (258 s), while
LNS alone over the same 600 s reaches 50 slots where ``auto`` ended at 51."""

AUTO_FIRST_QUESTION_SHARE = 0.1
"""The first question's cap (instead of :data:`AUTO_QUESTION_SHARE`): until one "no" shows
that CP-SAT answers this instance's questions, a question that stays open is more likely to
stay open for good. On AMD 2 chassis 1 GB "D <= 49?" never got an answer (111-273 s
tried), and each second it takes is one LNS does not get (``--strategy lns`` reached 50 at
407 s, ``auto`` with a 111 s first question ended at 51); NDv2 2 chassis 64 KB answers its
questions in about 20 s each (load 7)."""


def _ascending_then_lns(run: _Run, horizon: int) -> None:
    """``ascending`` until :data:`AUTO_ASCENDING_SHARE` of the time left is used, then LNS
    on the incumbent with the rest when the gap is still open (docs/exact.md, LNS section)."""
    remaining = run.remaining()
    assert remaining is not None
    run.soft_deadline = time.perf_counter() + AUTO_ASCENDING_SHARE * remaining
    run.question_cap = AUTO_FIRST_QUESTION_SHARE * remaining
    run.later_question_cap = AUTO_QUESTION_SHARE * remaining
    try:
        _ascending(run, horizon)
    except _RefusedError as exc:
        # A question's model does not fit the memory budget or the ascending share of the
        # time: the refusal path (LNS, else the heuristic) with the whole time left.
        run.soft_deadline = run.question_cap = None
        run.fallback = str(exc)
        run.steps.append({"horizon": run.estimate.get("horizon"), "status": "refused", "reason": str(exc)})
        run.auto_choice = "ascending+lns"
        if not _lns_instead(run):
            _heuristic_instead(run)
        return
    finally:
        run.soft_deadline = None
        run.question_cap = run.later_question_cap = None
        run.question_model = None  # the questions' shared model is not LNS's: free it
    if run.incumbent_makespan is not None and run.incumbent_makespan > run.global_bound:
        run.auto_choice = "ascending+lns"
        _lns(run, horizon)


def _lns(run: _Run, horizon: int) -> None:
    """Large neighbourhood search on the incumbent (:mod:`ccplan.model.lns`)."""
    from ccplan.model.lns import lns_search

    lns_search(run, horizon)


Strategy = Callable[[_Run, int], None]

STRATEGIES: dict[str, Strategy] = {
    "direct": _direct, "descending": _descending, "ascending": _ascending, "auto": _auto,
    "lns": _lns,
}
"""Search strategies of the ``milp`` engine (``extra["strategy"]``)."""


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


HEURISTIC_INSTEAD_FACTOR = 4.0
"""See :func:`_heuristic_instead`. Measured with ``--time-limit 20`` on a shared machine:
DGX2 4 chassis 1 MB C=8 has an 8.5 s first round and a 7 s heuristic budget ran about 20 s;
NDv2 10 chassis 1 KB has a 0.8 s first round and kept its 13 s budget."""


def _heuristic_instead(run: _Run) -> None:
    """No model fits: spend the time the solver would have had on the heuristic (70 % of
    what is left, its default effort without a limit) and keep what it improves.

    Skipped when less than :data:`HEURISTIC_INSTEAD_FACTOR` times the warm start's first
    round is left: the portfolio's fixed variants each cost about one such round and do
    not stop on the clock, so a shorter budget would overrun the limit."""
    if run.options.horizon is not None or run.warm_method not in ("heuristic", "greedy"):
        return
    remaining = run.remaining()
    first = run.warm_facts.get("first_round_seconds", 0.0)
    if remaining is not None and (remaining < 1.0 or remaining < HEURISTIC_INSTEAD_FACTOR * first):
        return
    try:
        engine = get_engine("heuristic")
    except (ValidationError, ImportError):
        return
    limit = None if remaining is None else 0.7 * remaining
    out = engine(run.instance, SolveOptions(time_limit=limit, workers=run.options.workers,
                                            seed=run.options.seed + 1))
    if out.schedule is not None:
        run.offer(out.schedule, "heuristic (model refused)")


def _lns_instead(run: _Run) -> bool:
    """The whole model was refused: LNS re-optimises parts of the incumbent instead.
    False when no neighbourhood model fits (the heuristic then gets the time)."""
    from ccplan.model.lns import lns_search

    if run.incumbent_makespan is None:
        return False
    return lns_search(run, run.incumbent_makespan)


def _has_chassis(instance: Instance) -> bool:
    from ccplan.instances.clusters import has_chassis

    return has_chassis(instance.topology)


WARM_START_COMPANIONS: dict[str, Callable[[Instance], bool]] = {"cut-aware": _has_chassis}
"""Engines that run once after the ``heuristic`` portfolio's warm-start rounds, where they
apply (engine name -> predicate); the best verified schedule is the warm start. The
portfolio runs ``cut-aware`` only after four other variants, which its progress-budgeted
rounds do not reach on AMD 4 chassis 1 GB (109 slots after 10 s, where ``cut-aware`` alone
gives 85 in 3 s)."""


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
            engine = get_engine(name)
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
        engine = get_engine(name)
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


RELAX_SHARE = 0.2
"""The flow-over-time bound (:mod:`ccplan.bounds.flow_lp`) gets at most this share of the time
left after the warm start (at most :data:`RELAX_CAP` s)."""

RELAX_CAP = 60.0
"""Most seconds of the flow-over-time bound (also without a time limit)."""

RELAX_DESTINATIONS = 4
"""Destinations the flow-over-time bound checks (one per symmetry class, those the
incumbent serves last first: ``relax.destination_order``). The bound only needs the
destination that refutes a horizon; on the issue's instances that is the first (DGX2: an
odd GPU; AMD 4 chassis: GCD 5), and each LP costs 1-15 s there."""

RELAX_MAX_ARCS = 100_000
"""No flow-over-time bound when links x horizon exceeds this (the LP's size, built in Python
at ~20 us per arc; AMD 4 chassis 1 GB: 54,000; NDv2 10
chassis 1 KB has a horizon of 21,614 slots)."""


def _flow_bound(run: _Run, horizon: int) -> None:
    """Raise the run's bound with the flow-over-time relaxation (:mod:`ccplan.bounds.flow_lp`)
    when the model is large (``auto``'s threshold, :data:`AUTO_DIRECT_NONZEROS`; small
    models are proven faster by CP-SAT itself) and the gap is open. ``extra["flow_bound"]``:
    ``"auto"`` (default), True (always), False (never); never under ``--prove``."""
    from ccplan.bounds.flow_lp import applies, destination_order, flow_bound
    from ccplan.model.lns import arrivals
    from ccplan.model.size import estimate_size

    mode = run.options.extra.get("flow_bound", "auto")
    if mode is False or run.options.extra.get("prove", False):
        return
    m = run.incumbent_makespan
    if m is None or m <= run.global_bound or not applies(run.instance):
        return
    if mode == "auto":
        if run.instance.topology.num_links * horizon > RELAX_MAX_ARCS:
            return
        est = estimate_size(run.instance, horizon, dense=bool(run.options.extra.get("dense", False)))
        if est.nonzeros <= AUTO_DIRECT_NONZEROS:
            return
    remaining = run.remaining()
    budget = RELAX_CAP if remaining is None else min(RELAX_CAP, RELAX_SHARE * remaining)
    if budget <= 0.05:
        return
    per: dict[int, list[int]] = {}
    if run.incumbent is not None:
        for (_chunk, v), t in arrivals(run.instance, run.incumbent).items():
            per.setdefault(v, []).append(t)
    try:
        fb = flow_bound(run.instance, run.global_bound, upper=m, time_limit=budget,
                        destinations=destination_order(run.instance, per)[:RELAX_DESTINATIONS])
    except (RuntimeError, ValueError, MemoryError) as exc:
        # an LP HiGHS could not solve: the run goes on with the bound it has
        log.warning("flow-over-time bound skipped: %s", exc)
        return
    if fb is None:
        return
    run.flow = fb.as_dict()
    run.raise_bound(fb.slots)


def _lower_bound(instance: Instance) -> int:
    from ccplan.bounds import lower_bound_slots

    return int(lower_bound_slots(instance))


def _write_progress(path: Path, trajectory: list[tuple[float, float, float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["seconds", "objective", "bound"])
        for t, obj, bound in sorted(trajectory):
            writer.writerow([f"{t:.4f}", "" if math.isnan(obj) else f"{obj:g}", f"{bound:g}"])


def _check_extra(extra: Mapping[str, Any]) -> tuple[str, str, str]:
    backend = str(extra.get("solver", "cpsat"))
    if backend not in BACKENDS:
        raise ValidationError(
            f"extra['solver'] {backend!r} is unknown (choose from {', '.join(sorted(BACKENDS))})"
        )
    strategy = str(extra.get("strategy", DEFAULT_STRATEGY))
    if strategy not in STRATEGIES:
        raise ValidationError(
            f"extra['strategy'] {strategy!r} is unknown (choose from {', '.join(sorted(STRATEGIES))})"
        )
    if extra.get("flow_bound", "auto") not in ("auto", True, False):
        raise ValidationError(
            f"extra['flow_bound'] must be 'auto', True or False, got {extra['flow_bound']!r}"
        )
    params = DEFAULT_CPSAT_PARAMS
    user = extra.get("cpsat_params")
    if user:
        if not isinstance(user, str):
            raise ValidationError("extra['cpsat_params'] must be a string in SatParameters text format")
        params = f"{params} {user}"  # a repeated scalar field: the later value wins
    if backend == "cpsat":
        from ccplan.model.cpsat import validate_params_text

        params = validate_params_text(params)
    return backend, strategy, params


@register("milp")
def solve_milp(instance: Instance, options: SolveOptions) -> Outcome:
    """The exact engine: MILP (2)-(14) over a heuristic horizon, solved by CP-SAT.

    Parameters
    ----------
    instance : Instance
    options : SolveOptions
        ``horizon`` (default: the warm-start makespan), ``warm_start`` (complete hint from
        the heuristic schedule), ``time_limit`` (whole run), ``workers``, ``seed``,
        ``log_path`` (CP-SAT log; later solves of a strategy add ``.stepK-hH`` to the name),
        ``progress_path`` (CSV ``seconds,objective,bound``), ``dump_model`` (.lp/.mps of the
        model over the full horizon H). ``extra``: ``solver`` (``cpsat``|``highs``), ``strategy``
        (:data:`STRATEGIES`), ``cpsat_params`` (text format, added to
        :data:`DEFAULT_CPSAT_PARAMS`), ``warm_start_method`` (registered engine, default
        ``heuristic``), ``warm_start_schedule`` (a :class:`Schedule` to start from instead;
        verified first), ``heuristic_time_limit``,
        ``dense``, ``cuts``, ``lower_bound_cut`` (pass the bound to the model as ``D >= LB``,
        default True, False under ``prove``), ``always_solve`` (solve even when the warm
        start meets the lower bound; default False), ``prove`` (CP-SAT refutes one slot
        below the result, ``details["proof"]``), ``memory_budget`` (bytes, default
        :func:`ccplan.limits.memory_budget`), ``reuse_model`` (default True: the "D <= h ?"
        questions of a run share one model and one translation), ``progress_callback``
        (elapsed, incumbent, bound, gap), ``on_progress`` (elapsed, incumbent, bound), ``lns``
        (False: no large-neighbourhood search after a stall or a refusal), ``flow_bound``
        (``"auto"``, True, False: the flow-over-time bound, :func:`_flow_bound`), ``lns_rounds``,
        ``lns_nonzeros``, ``lns_window_nonzeros``, ``lns_slice``, ``lns_neighbourhoods``
        (:func:`ccplan.model.lns.lns_search`). Ctrl-C returns
        the best verified schedule with ``details["interrupted"] = True``.

    Returns
    -------
    Outcome
        ``optimal`` only with a proof (solver optimum, or "infeasible" one slot below the
        incumbent); ``feasible`` with the best verified schedule otherwise (possibly the
        warm start: P5 in docs/exact.md); ``infeasible`` when no schedule fits an explicit
        ``horizon``; ``unknown`` when nothing was found in time.
    """
    start = time.perf_counter()
    if instance.collective.combining:
        raise ValidationError(
            f"milp solves data-movement collectives; {instance.collective.kind!r} is combining "
            "(ccplan.pipeline.solve reduces it to data-movement parts first)"
        )
    backend, strategy, params = _check_extra(options.extra)
    # One budget for the whole run (ccplan.limits: --memory-budget, $CCPLAN_MEMORY_BUDGET);
    # extra["memory_budget"] narrows it for the model alone.
    budget = options.extra.get("memory_budget", memory_budget())
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
        raise ValidationError(f"extra['memory_budget'] must be a positive number of bytes, got {budget!r}")
    lower = _lower_bound(instance)
    prove = bool(options.extra.get("prove", False))
    run = _Run(instance, options, backend, params, lower, start, global_bound=lower,
               memory_budget=float(budget),
               # --prove: every "no" must come from the solver alone, not from ccplan.bounds
               lower_bound_cut=bool(options.extra.get("lower_bound_cut", not prove)))

    warm_seconds = 0.0
    horizon: int | None = options.horizon
    try:
        if options.warm_start or options.horizon is None:
            # Ctrl-C here leaves no schedule yet; the except below still returns cleanly.
            run.warm, run.warm_method, warm_seconds = _warm_start(instance, options, lower, run.warm_facts)
        if run.warm is not None:
            run.warm_makespan = verify(instance, run.warm).makespan_slots
            run.offer(run.warm, run.warm_method)
        if run.warm_facts.get("interrupted"):
            raise KeyboardInterrupt  # Ctrl-C during the warm start: its schedule is the answer
        report_progress = _progress(run, 0.0)
        if report_progress is not None:
            # The warm start can take seconds; say what it found before the first model is built.
            report_progress(time.perf_counter() - start, None, None, None)
        horizon = options.horizon if options.horizon is not None else run.warm_makespan
        assert horizon is not None
        if options.horizon is not None and run.warm_makespan is not None:
            horizon = min(horizon, run.warm_makespan)  # nothing above the warm start is worth a slot
        if horizon >= lower:
            _flow_bound(run, horizon)
        met = run.incumbent_makespan is not None and run.incumbent_makespan <= run.global_bound
        if options.dump_model is not None and horizon >= 1:
            _dump(run, horizon)
        if horizon < lower:
            run.steps.append(
                {"horizon": horizon, "status": "infeasible", "reason": f"horizon < lower bound {lower}"}
            )
        elif met and prove:
            # The bound already proves the warm start optimal; the solver is asked on its own.
            _prove(run)
        elif met and not options.extra.get("always_solve", False):
            # The warm start already meets a proven lower bound: nothing left for a solver to prove.
            run.steps.append(
                {"horizon": horizon, "status": "skipped", "reason": "warm start meets the lower bound"}
            )
        else:
            STRATEGIES[strategy](run, horizon)
            if prove:
                _prove(run)
    except _RefusedError as exc:
        run.fallback = str(exc)
        run.steps.append({"horizon": run.estimate.get("horizon"), "status": "refused", "reason": str(exc)})
        log.warning("milp: %s; returning the best verified schedule", exc)
        try:
            # LNS on models of a few chunks when they fit; else the heuristic gets the time
            if not (options.extra.get("lns", True) and _lns_instead(run)):
                _heuristic_instead(run)
        except KeyboardInterrupt:
            run.interrupted = True
    except KeyboardInterrupt:
        # Ctrl-C in the build, the translation or (via the adapter) the search: keep the
        # best verified schedule and say so (contract of ccplan.errors.SolveInterrupted).
        run.interrupted = True
    if options.progress_path is not None:
        _write_progress(options.progress_path, run.trajectory)
    if options.log_path is not None and not any("question" in st for st in run.steps):
        # No solver ran; leave a log that says why instead of no file at all.
        options.log_path.parent.mkdir(parents=True, exist_ok=True)
        note = run.steps[-1].get("reason", "") if run.steps else ""
        options.log_path.write_text(
            f"ccplan milp: no solver run ({note}); warm start {run.warm_method} makespan "
            f"{run.warm_makespan}, lower bound {run.global_bound}\n"
        )

    schedule = run.incumbent
    makespan = run.incumbent_makespan
    if options.horizon is not None and makespan is not None and makespan > options.horizon:
        schedule, makespan = None, None  # the warm start does not fit the requested horizon
    bound = run.global_bound
    if makespan is not None:
        bound = min(bound, makespan)
        status = "optimal" if makespan <= run.global_bound else "feasible"
    elif options.horizon is not None and run.global_bound > options.horizon:
        status = "infeasible"
    else:
        status = "unknown"
    last = run.steps[-1] if run.steps else {}
    details = {
        "backend": backend,
        "strategy": strategy if run.auto_choice is None else f"auto:{run.auto_choice}",
        "horizon": horizon,
        "lower_bound_input": lower,
        "model_size": run.model_size,
        "build_seconds": round(run.build_seconds, 3),
        "translate_seconds": round(run.translate_seconds, 3),
        "solve_seconds": round(run.solve_seconds, 3),
        "warm_start_seconds": round(warm_seconds, 3),
        "warm_start_first_round_seconds": round(run.warm_facts.get("first_round_seconds", 0.0), 3),
        # a companion engine (WARM_START_COMPANIONS) whose schedule beat the portfolio's
        "warm_start_companion": run.warm_facts.get("companion"),
        "cpsat_status": last.get("status"),
        "best_bound": bound,
        "trajectory": [(round(t, 4), o, b) for t, o, b in run.trajectory],
        "hint_method": run.hint_method,
        "hint_status": run.hint_status,
        "hint_error": run.hint_error,
        "heuristic_method": run.warm_method,
        "heuristic_makespan": run.warm_makespan,
        "incumbent_source": run.incumbent_source if schedule is not None else None,
        "cpsat_params": params if backend == "cpsat" else "",
        "steps": run.steps,
        # the analytic bound beside what the solver's answers added to it
        "bounds": {"analytic": lower, "flow": None if run.flow is None else run.flow["slots"],
                   "with_solver": run.global_bound},
        "memory_budget": run.memory_budget,
        "model_estimate": run.estimate,
    }
    if makespan is not None and status == "optimal":
        details["proof"] = (
            "solver" if run.solver_infeasible is not None and run.solver_infeasible >= makespan - 1
            else "lower bound" if makespan <= lower
            else "flow bound" if run.flow is not None and makespan <= run.flow["slots"]
            else "solver and lower bound"
        )
    if run.fallback is not None:
        details["fallback"] = run.fallback
    if run.lns_report is not None:
        details["lns"] = run.lns_report.as_dict()
    if run.flow is not None:
        details["flow_bound"] = run.flow
    if run.interrupted:
        details["interrupted"] = True
    return Outcome(schedule=schedule, status=status, bound_slots=float(bound), details=details)
