r"""An exact answer for small combining instances (ReduceScatter, AllReduce, Reduce).

The verifier (:mod:`ccplan.schedule.combining`) tracks, for every node and chunk, the *set* of
contributions summed in the node's buffer. This module bounds and solves that problem with a
time-indexed Pyomo model in the canonical slot semantics, with *contributions as commodities*:

``s[c, e, t]``
    a send of chunk ``c`` starts on link ``e`` in slot ``t`` (arrival ``t + L_e <= H``);
``h[c, p, v, t]``
    node ``v`` has, by the start of slot ``t``, received (or owns) contribution ``p`` of ``c``;
``f[c, p, e, t]``
    the send ``s[c, e, t]`` carries contribution ``p``;
``done[t]``, ``D``
    every receiver holds every contribution from slot ``t`` on; ``D`` is the makespan.

One named component per constraint:

``carry_send`` ``f <= s``; ``carry_held`` ``f[c, p, (u, x), t] <= h[c, p, u, t]`` (a send carries
only what its sender holds at the start of its slot); ``nonempty`` ``s <= sum_p f`` (the
verifier rejects an empty payload as a causality violation); ``arrival``
``h[c, p, v, t] <= h[c, p, v, t-1] + sum f[c, p, e, t - L_e]`` over the links ``e`` into ``v``;
``monotone`` ``h[c, p, v, t] >= h[c, p, v, t-1]``; ``capacity``: the sends occupying a link in
slot ``x`` are at most ``omega(e, x)`` (occupancy window ``t .. t+l-1``); ``send_port`` and
``recv_port`` (only with ``single_port``); ``finish`` ``h[c, p, w, t] >= done[t]`` for every
contributor ``p`` and receiver ``w`` of ``c``; ``done_monotone``; ``makespan``
``D = sum_{t <= H} (1 - done[t])``. Objective: minimise ``D``.

**Switches that cannot reduce** (every switch not in ``Instance.reducing_switches``) hold one
partial sum of a chunk at a time: ``g[c, p, v, t]``, what the buffer holds at the start of
slot ``t`` (0 at slot 0), and a send out of the switch carries only that (``carry_held`` reads
``g`` there). ``buffer_keep`` ``g[t] <= g[t-1] + arriving f``; ``buffer_take`` ``g[t] <=
arriving f`` when a send lands (written ``g + landing <= 1 + arriving f``); ``one_landing``: at
most one send of the chunk lands in the switch per slot. Every valid schedule satisfies them:
the verifier's switch takes the payload of a landing copy (or of a reduce into its empty
buffer) and adds nothing to it; two landings in one slot are valid only as an incomplete copy
overwritten at once by the complete one, and without the first the point stays feasible.

**Relaxation, then certificate.** ``h`` is what a node has *ever* held, and a send may carry
any subset of it. Every schedule the verifier accepts gives a feasible point (its carried sets
are subsets of what the sender ever held; a complete final set means every contribution
arrived), so the model's optimum ``D*`` is a lower bound on the true optimum. The solver's
sends are then replayed with the verifier's rules (:func:`realise`): each payload is the
sender's actual set; an arrival reduces when the sets are disjoint, copies when the payload is
complete or the receiver's set was already sent on, and is dropped when it brings nothing.
When the replayed schedule verifies with makespan ``D*``, ``D*`` *is* the optimum (status
``optimal``); otherwise the engine returns the best verified schedule it has with ``D*`` as
its bound (status ``feasible``). The tests only call a value a true optimum when this
certificate holds.

The model goes through the public entry points of :mod:`ccplan.model.cpsat`
(:func:`~ccplan.model.cpsat.solve_with_cpsat`) and, as a cross-check, of
:mod:`ccplan.model.highs`.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ccplan.contract import Outcome, SolveOptions, register, sub_engine
from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.limits import NEVER, Deadline, OutOfTimeError
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)

DEFAULT_UPPER_METHODS: tuple[str, ...] = ("mteg", "ring", "multitree")
"""Methods tried, in order, for the horizon (an upper bound) when none is given."""


SECOND_STAGE_SECONDS = 5.0
"""Time for the fewest-sends stage when the caller gives no time limit."""


@dataclass(frozen=True)
class CombiningModel:
    """A built model and the index data needed to read it back.

    Attributes
    ----------
    model : pyomo ConcreteModel
    horizon : int
        ``H``: the last slot at which an arrival may land.
    chunks : tuple of Chunk
    """

    model: Any
    horizon: int
    chunks: tuple[Chunk, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.horizon, int) or self.horizon < 0:
            raise ValidationError(f"horizon must be a non-negative integer, got {self.horizon!r}")


def build_combining_model(instance: Instance, horizon: int, deadline: Deadline = NEVER) -> CombiningModel:
    """Build the contribution-commodity model of ``instance`` over slots ``0 .. horizon``.

    Parameters
    ----------
    instance : Instance
        Its collective must be combining.
    horizon : int
        ``H``; the model is feasible whenever some valid schedule has makespan ``<= H``.
    deadline : Deadline
        Checked at every constraint row: the build of a model too big for the time limit
        stops instead of running past it (AMD x1 ReduceScatter: 30 s of build).

    Returns
    -------
    CombiningModel

    Raises
    ------
    ValidationError
        Not a combining collective, or a negative horizon.
    OutOfTimeError
        ``deadline`` passed during the build.
    """
    import pyomo.environ as pyo

    coll = instance.collective
    if not coll.combining:
        raise ValidationError(f"collective {coll.kind!r} is not combining; use the milp method")
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 0:
        raise ValidationError(f"horizon must be a non-negative integer, got {horizon!r}")
    topo = instance.topology
    H = horizon
    occ = [int(x) for x in instance.occupancy]
    lat = [int(x) for x in instance.latency]
    links = range(topo.num_links)
    chunks = coll.chunk_ids
    cidx = {c: i for i, c in enumerate(chunks)}
    contributors = {cidx[c]: tuple(sorted(coll.holders[c])) for c in chunks}
    receivers = {cidx[c]: tuple(sorted(coll.wanted.get(c, ()))) for c in chunks}
    nodes = topo.node_ids

    s_index = [(c, e, t) for c in cidx.values() for e in links for t in range(0, H - lat[e] + 1)]
    h_index = [
        (c, p, v, t) for c, ps in contributors.items() for p in ps for v in nodes for t in range(H + 1)
    ]
    f_index = [(c, p, e, t) for (c, e, t) in s_index for p in contributors[c]]

    def timed(rule: Any) -> Any:
        # Pyomo calls a rule once per row: the clock is read there, not between components
        # (one component alone can take longer than the whole limit)
        def checked(*args: Any) -> Any:
            deadline.check()
            return rule(*args)

        return checked

    deadline.check()
    m = pyo.ConcreteModel(name=f"combining[{instance.describe()}]")
    m.s = pyo.Var(s_index, domain=pyo.Binary)
    m.h = pyo.Var(h_index, domain=pyo.Binary)
    m.f = pyo.Var(f_index, domain=pyo.Binary)
    m.done = pyo.Var(range(H + 1), domain=pyo.Binary)
    m.D = pyo.Var(domain=pyo.Integers, bounds=(0, H))

    for c, ps in contributors.items():
        for p in ps:
            for v in nodes:
                m.h[c, p, v, 0].fix(1 if v == p else 0)

    m.carry_send = pyo.Constraint(
        f_index, rule=timed(lambda m, c, p, e, t: m.f[c, p, e, t] <= m.s[c, e, t])
    )
    relaying = frozenset(topo.switches) - instance.reducing_switches

    def carry_held(m: Any, c: int, p: int, e: int, t: int) -> Any:
        src = topo.links[e].src
        # a switch that cannot reduce sends what its one buffer holds, not all it ever held
        held = m.g[c, p, src, t] if src in relaying else m.h[c, p, src, t]
        return m.f[c, p, e, t] <= held

    if relaying:
        g_index = [(c, p, v, t) for c, ps in contributors.items() for p in ps for v in sorted(relaying)
                   for t in range(H + 1)]
        m.g = pyo.Var(g_index, domain=pyo.Binary)
        for c, ps in contributors.items():
            for p in ps:
                for v in relaying:
                    m.g[c, p, v, 0].fix(0)
    m.carry_held = pyo.Constraint(f_index, rule=timed(carry_held))
    m.nonempty = pyo.Constraint(
        s_index,
        rule=timed(lambda m, c, e, t: m.s[c, e, t] <= sum(m.f[c, p, e, t] for p in contributors[c])),
    )
    into: dict[int, list[int]] = defaultdict(list)
    for e in links:
        into[topo.links[e].dst].append(e)
    later = [(c, p, v, t) for (c, p, v, t) in h_index if t >= 1]

    def arrival(m: Any, c: int, p: int, v: int, t: int) -> Any:
        arriving = [m.f[c, p, e, t - lat[e]] for e in into[v] if t - lat[e] >= 0]
        return m.h[c, p, v, t] <= m.h[c, p, v, t - 1] + sum(arriving)

    m.arrival = pyo.Constraint(later, rule=timed(arrival))
    m.monotone = pyo.Constraint(
        later, rule=timed(lambda m, c, p, v, t: m.h[c, p, v, t] >= m.h[c, p, v, t - 1])
    )
    if relaying:
        # The buffer of a switch that cannot reduce: it keeps its content or takes exactly the
        # payload of the one send that lands in a slot (module docstring, "switches").
        buffer_index = [(c, p, v, t) for (c, p, v, t) in later if v in relaying]
        landing_index = sorted({(c, v, t) for (c, _, v, t) in buffer_index})

        def arriving_f(m: Any, c: int, p: int, v: int, t: int) -> Any:
            return sum(m.f[c, p, e, t - lat[e]] for e in into[v] if t - lat[e] >= 0)

        def landing(m: Any, c: int, v: int, t: int) -> Any:
            return sum(m.s[c, e, t - lat[e]] for e in into[v] if t - lat[e] >= 0)

        def one_landing(m: Any, c: int, v: int, t: int) -> Any:
            if not any(t - lat[e] >= 0 for e in into[v]):
                return pyo.Constraint.Skip
            return landing(m, c, v, t) <= 1

        def buffer_keep(m: Any, c: int, p: int, v: int, t: int) -> Any:
            return m.g[c, p, v, t] <= m.g[c, p, v, t - 1] + arriving_f(m, c, p, v, t)

        m.buffer_keep = pyo.Constraint(buffer_index, rule=timed(buffer_keep))
        m.buffer_take = pyo.Constraint(
            buffer_index,
            rule=timed(
                lambda m, c, p, v, t: m.g[c, p, v, t] + landing(m, c, v, t) <= 1 + arriving_f(m, c, p, v, t)
            ),
        )
        m.one_landing = pyo.Constraint(landing_index, rule=timed(one_landing))

    starts: dict[int, list[int]] = {e: [t for t in range(0, H - lat[e] + 1)] for e in links}
    cap_index = [(e, x) for e in links for x in range(H)]

    def covering(e: int, x: int) -> list[int]:
        return [t for t in starts[e] if t <= x <= t + occ[e] - 1]

    def capacity(m: Any, e: int, x: int) -> Any:
        terms = [m.s[c, e, t] for c in cidx.values() for t in covering(e, x)]
        if not terms:
            return pyo.Constraint.Skip
        return sum(terms) <= instance.omega(e, x)

    m.capacity = pyo.Constraint(cap_index, rule=timed(capacity))
    if instance.single_port:
        port_index = [(v, x) for v in nodes for x in range(H)]

        def port(m: Any, v: int, x: int, end: str) -> Any:
            terms = [
                m.s[c, e, t]
                for e in links
                if getattr(topo.links[e], end) == v
                for c in cidx.values()
                for t in covering(e, x)
            ]
            return sum(terms) <= 1 if terms else pyo.Constraint.Skip

        m.send_port = pyo.Constraint(port_index, rule=timed(lambda m, v, x: port(m, v, x, "src")))
        m.recv_port = pyo.Constraint(port_index, rule=timed(lambda m, v, x: port(m, v, x, "dst")))

    finish_index = [
        (c, p, w, t) for c, ps in contributors.items() for p in ps for w in receivers[c] for t in range(H + 1)
    ]
    m.finish = pyo.Constraint(
        finish_index, rule=timed(lambda m, c, p, w, t: m.h[c, p, w, t] >= m.done[t])
    )
    m.done_monotone = pyo.Constraint(range(1, H + 1), rule=lambda m, t: m.done[t] >= m.done[t - 1])
    m.done[H].fix(1)
    m.makespan = pyo.Constraint(expr=sum(1 - m.done[t] for t in range(H + 1)) == m.D)
    m.objective = pyo.Objective(expr=m.D, sense=pyo.minimize)
    return CombiningModel(model=m, horizon=H, chunks=chunks)


def _fewest_sends(compiled: Any, built: CombiningModel, makespan: int) -> None:
    """On the translated model: ``D <= makespan`` and minimise the number of sends instead.

    Both go into the CP-SAT model (the domain of ``D`` and the objective), so the second
    stage needs no second translation of the Pyomo model (as long as the first: 40 s on
    AMD x1).
    """
    from pyomo.common.collections import ComponentMap

    from ccplan.model.cpsat import restrict_domains

    m = built.model
    restrict_domains(compiled, ComponentMap([(m.D, (0, makespan))]))
    objective = compiled.cp_model.proto.objective
    positions = [compiled.index.get(id(var)) for var in m.s.values()]
    kept = [pos for pos in positions if pos is not None]
    objective.vars.clear()
    objective.coeffs.clear()
    objective.domain.clear()
    objective.clear_offset()
    objective.scaling_factor = 1.0  # minimise
    objective.vars.extend(kept)
    objective.coeffs.extend([1] * len(kept))


def sends_from_model(built: CombiningModel, instance: Instance) -> list[tuple[Chunk, int, int, int]]:
    """The solver's sends ``(chunk, src, dst, slot)``, in slot order."""
    import pyomo.environ as pyo

    topo = instance.topology
    out = []
    for (c, e, t), var in built.model.s.items():
        value = var.value
        if value is not None and pyo.value(var) > 0.5:
            link = topo.links[e]
            out.append((built.chunks[c], link.src, link.dst, t))
    return sorted(out, key=lambda x: (x[3], x[0], x[1], x[2]))


def realise(instance: Instance, sends: list[tuple[Chunk, int, int, int]]) -> Schedule:
    """Replay ``sends`` with the verifier's set semantics and choose reduce or copy per arrival.

    An arrival whose payload is complete is a copy (dropped when the receiver is already
    complete); a payload disjoint from the receiver's set is reduced; a payload overlapping a
    set the receiver has already sent on is copied over it; a send with an empty payload is
    dropped. Dropping a send changes which sets count as sent on, so the replay is repeated
    until no send is dropped (at most ``len(sends)`` rounds). The result may still fail the
    verifier (an overlap into an unsent set); the caller verifies it.
    """
    current = list(sends)
    kept: list[Send] = []
    for _ in range(len(sends) + 1):
        kept, dropped = _replay_once(instance, current)
        if not dropped:
            break
        current = [x for i, x in enumerate(current) if i not in dropped]
    return Schedule(tuple(sorted(kept)), method="exact-combining")


def _replay_once(
    instance: Instance, current: list[tuple[Chunk, int, int, int]]
) -> tuple[list[Send], set[int]]:
    """One replay of :func:`realise`: the sends kept (with their reduce flags) and the indices
    of those that carry nothing."""
    coll = instance.collective
    lat = instance.latency
    index = instance.topology.link_index
    relaying = frozenset(instance.topology.switches) - instance.reducing_switches
    full = {c: frozenset(coll.holders[c]) for c in coll.chunk_ids}
    state: dict[tuple[int, Chunk], frozenset[int]] = {}
    for c, ps in full.items():
        for p in ps:
            state[(p, c)] = frozenset({p})
    forwarded: dict[tuple[int, Chunk], bool] = {}
    pending: dict[int, list[tuple[int, frozenset[int]]]] = defaultdict(list)
    kept: list[Send] = []
    dropped: set[int] = set()
    by_slot: dict[int, list[int]] = defaultdict(list)
    for i, (_, _, _, t) in enumerate(current):
        by_slot[t].append(i)
    horizon = max((t + int(lat[index[(u, v)]]) for _, u, v, t in current), default=0)
    for t in range(horizon + 1):
        # Copies (complete payloads) land before reduces, as the verifier applies them.
        for i, payload in sorted(pending.pop(t, []), key=lambda x: full[current[x[0]][0]] != x[1]):
            c, u, v, slot = current[i]
            cur = state.get((v, c), frozenset())
            if payload <= cur:
                # Brings nothing the receiver lacks (a complete copy into a complete buffer,
                # or a sub-sum it already counted): not sent at all.
                dropped.add(i)
                continue
            # Reduce into a disjoint set; copy a complete payload, or over a set already sent
            # on, or into a switch that cannot reduce (it relays). An overlap into a live set
            # stays a reduce, for the verifier to reject.
            copy = (
                payload == full[c]
                or (bool(cur & payload) and forwarded.get((v, c), False))
                or v in relaying
            )
            kept.append(Send(slot, c, u, v, reduce=not copy))
            state[(v, c)] = payload if copy else cur | payload
            forwarded[(v, c)] = False
        reads = []
        for i in by_slot.get(t, []):
            c, u, v, _ = current[i]
            payload = state.get((u, c), frozenset())
            if payload:
                reads.append((i, payload))
            else:
                dropped.add(i)
        for i, payload in reads:
            c, u, v, _ = current[i]
            forwarded[(u, c)] = True
            pending[t + int(lat[index[(u, v)]])].append((i, payload))
    return kept, dropped


@dataclass(frozen=True)
class CombiningAnswer:
    """What :func:`solve_exact_combining` found.

    Attributes
    ----------
    status : str
        ``optimal`` (certified: the realised schedule meets the model's proven optimum),
        ``feasible`` (a verified schedule and a proven bound that do not meet) or ``unknown``.
    bound : int or None
        Proven lower bound on the makespan (the model's optimum, or CP-SAT's bound on a time out).
    schedule : Schedule or None
        The best verified schedule (realised model solution or the horizon's schedule).
    makespan : int or None
    upper_source : str
        Where the schedule came from (``"model"`` or the upper-bound method's name).
    seconds : float
    reason : str
        Why the model did not decide the answer (e.g. the time limit passed during its
        build); empty otherwise.
    """

    status: str
    bound: int | None
    schedule: Schedule | None
    makespan: int | None
    upper_source: str
    seconds: float
    reason: str = ""


def _upper(
    instance: Instance, options: SolveOptions, deadline: Deadline = NEVER
) -> tuple[Schedule, int, str] | None:
    """The best verified schedule of :data:`DEFAULT_UPPER_METHODS` (None when the deadline
    passed before any of them found one)."""
    # The engines as the registry hands them out (time reversal for the data-movement ones);
    # each schedule is verified here, as the pipeline would.
    best: tuple[Schedule, int, str] | None = None
    for method in DEFAULT_UPPER_METHODS:
        if deadline.expired:
            if best is None:
                return None
            break
        left = None if deadline.at == NEVER.at else max(deadline.remaining(), 1e-3)
        try:
            outcome = sub_engine(method)(
                instance, SolveOptions(time_limit=left, workers=options.workers, seed=options.seed)
            )
        except ValidationError as exc:
            log.debug("upper bound by %s failed: %s", method, exc)
            continue
        schedule = outcome.schedule
        if schedule is None:
            continue
        report = verify(instance, schedule)
        makespan = report.makespan_slots
        if not report.ok or makespan is None:
            continue
        if best is None or makespan < best[1]:
            best = (schedule, makespan, method)
    if best is None and deadline.expired:
        return None
    if best is None:
        raise ValidationError(
            f"no method of {DEFAULT_UPPER_METHODS} found a schedule to bound the horizon of "
            f"{instance.describe()}"
        )
    return best


def solve_exact_combining(
    instance: Instance, options: SolveOptions | None = None, *, backend: str = "cpsat"
) -> CombiningAnswer:
    """Solve the model of ``instance`` and certify the optimum when the replay meets it.

    Parameters
    ----------
    instance : Instance
        A combining instance (small: the model has ``chunks x N x links x H`` binaries).
    options : SolveOptions, optional
        ``time_limit``, ``workers``, ``seed``; ``horizon`` skips the upper-bound methods (it
        must be at least the optimum, or the answer is ``unknown``).
    backend : {"cpsat", "highs"}

    Returns
    -------
    CombiningAnswer
    """
    from ccplan.model.cpsat import CpSatOptions, compile_model, solve_compiled

    opts = options or SolveOptions()
    start = time.perf_counter()
    # the time limit holds for the whole answer: upper bound, build, translation and search
    deadline = Deadline.after(opts.time_limit)
    upper: tuple[Schedule, int, str] | None = None
    if opts.horizon is None:
        upper = _upper(instance, opts, deadline)
        if upper is None:
            reason = f"time limit of {opts.time_limit:g} s reached before a first schedule"
            return CombiningAnswer("unknown", None, None, None, "none", time.perf_counter() - start, reason)
        horizon = upper[1]
    else:
        horizon = opts.horizon

    def left() -> float | None:
        return None if opts.time_limit is None else max(deadline.remaining(), 0.05)

    try:
        built = build_combining_model(instance, horizon, deadline)
        compiled = compile_model(built.model, deadline=deadline) if backend == "cpsat" else None
    except OutOfTimeError:
        # the model is too big for the time limit: the upper bound's schedule is the answer
        reason = f"time limit of {opts.time_limit:g} s reached while building the model"
        log.info("exact-combining: %s", reason)
        seconds = time.perf_counter() - start
        if upper is None:
            return CombiningAnswer("unknown", None, None, None, "none", seconds, reason)
        return CombiningAnswer("feasible", None, upper[0], upper[1], upper[2], seconds, reason)
    if compiled is not None:
        out = solve_compiled(compiled, CpSatOptions(time_limit=left(), workers=opts.workers, seed=opts.seed))
        status, objective, bound = out.status, out.objective, out.best_bound
    elif backend == "highs":
        from ccplan.model.highs import solve_with_highs

        hout = solve_with_highs(built.model, time_limit=left())
        status, objective, bound = hout.status, hout.objective, hout.bound
    else:
        raise ValidationError(f"backend must be 'cpsat' or 'highs', got {backend!r}")
    proven: int | None = None
    if status == "optimal" and objective is not None:
        proven = round(objective)
    elif bound is not None:
        proven = max(0, int(bound - 1e-9) + (0 if float(bound).is_integer() else 1))
    if status == "optimal" and proven is not None and compiled is not None:
        # Second stage: at the proven makespan, fewest sends. A minimal solution carries no
        # redundant payloads, which is what lets the replay below realise it.
        _fewest_sends(compiled, built, proven)
        # Any small solution will do, not a proven minimum: a quarter of the budget at most,
        # and never past the deadline.
        budget = SECOND_STAGE_SECONDS if opts.time_limit is None else 0.25 * opts.time_limit
        if opts.time_limit is not None:
            budget = min(budget, deadline.remaining())
        if budget >= 0.05:
            second = solve_compiled(
                compiled, CpSatOptions(time_limit=max(0.2, budget), workers=opts.workers, seed=opts.seed)
            )
            if not second.has_solution:
                # The first stage's values were overwritten only if the second found a solution.
                log.info("the fewest-sends stage found nothing (%s)", second.status)
    candidates: list[tuple[int, Schedule, str]] = []
    if upper is not None:
        candidates.append((upper[1], upper[0], upper[2]))
    if status in ("optimal", "feasible"):
        realised = realise(instance, sends_from_model(built, instance))
        report = verify(instance, realised)
        if report.ok and report.makespan_slots is not None:
            candidates.append((report.makespan_slots, realised, "model"))
        else:
            log.info("the model's sends do not realise: %s", report.violations[:1])
    seconds = time.perf_counter() - start
    if not candidates:
        return CombiningAnswer("unknown", proven, None, None, "none", seconds)
    makespan, schedule, source = min(candidates, key=lambda x: (x[0], x[2] != "model"))
    certified = proven is not None and makespan <= proven
    return CombiningAnswer(
        "optimal" if certified else "feasible", proven, schedule, makespan, source, seconds
    )


@register("exact-combining")
def exact_combining_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Engine for ``--method exact-combining`` (small combining instances only)."""
    answer = solve_exact_combining(instance, options)
    return Outcome(
        schedule=answer.schedule,
        status=answer.status if answer.schedule is not None else "unknown",
        bound_slots=None if answer.bound is None else float(answer.bound),
        details={
            "upper_source": answer.upper_source,
            "model_bound": answer.bound,
            "seconds": answer.seconds,
            **({"reason": answer.reason} if answer.reason else {}),
        },
    )
