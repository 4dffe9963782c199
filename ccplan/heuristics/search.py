"""``heuristic``: the best schedule we can build without a solver, within a time budget.

Portfolio (deterministic for a given ``seed`` and the same number of completed steps; run in
this order until the budget is spent or a schedule reaches the lower bound of
:func:`ccplan.bounds.lower_bound_slots`, which proves it optimal):

1. MTEGCCA as in the paper (:mod:`ccplan.heuristics.mteg` defaults: size order, one TM run
   per task, closest terminal by MTEG tree cost);
2. MTEGCCA with earliest-arrival TM selection; per-chunk trees with interleaved chunk order
   (both selections; only when a task has several chunks);
3. the layered constructor of ``002_*.txt`` (:mod:`ccplan.heuristics.layered`), slack 0 and 1;
   on machines whose slowest links separate chassis, the cut-aware list schedule
   (:mod:`ccplan.heuristics.cutaware`: one copy per chunk across each chassis cut);
4. reverse task order (both selections);
5. "squeaky wheel": rerun the best MTEG variant with the tasks whose deliveries finished
   last moved to the front (they get the link-slots first), repeated while it helps;
6. restarts: seeded random task orders (``seed``, ``seed+1``, ...) for both selections, each
   followed by one squeaky-wheel step, and seeded layered runs, for 30 % of the budget;
7. improvement step, rip-up and reroute (:func:`rip_up_reroute`, a large-neighbourhood
   search) on the best schedule for the rest of the budget: remove the sends of a chunk that
   finishes at the makespan (plus a few random chunks), or of a leaf delivery at the
   makespan plus other leaf deliveries into the same node, and rebuild those trees with the
   TM search in the MTEG the other sends occupy; keep the result when (makespan, deliveries
   at the makespan, sum of arrivals) does not get worse.

Every candidate goes through :func:`ccplan.schedule.verify`; only verified schedules count.
Effort (``options.extra["effort"]``): ``"quick"`` runs items 1-4 only (no budget),
``"normal"`` (default) all items within a 5 s budget, ``"thorough"`` the same with 20 s.
Every stage checks the clock (before each Takahashi-Matsuyama search, each layer, each
rip-up iteration) and a stage cut short is dropped. Without ``time_limit`` the first
complete schedule is always built and the budget stops the later stages; a given
``time_limit`` is a hard limit for all stages: the portfolio then starts with the classic ring
(:mod:`ccplan.heuristics.baselines`, for the collectives it implements: seconds even for
16000 chunks) as a safety net, and item 1 with the per-chunk-tree variant (the cheapest
when a task has many chunks). The pipelined tree packing (:mod:`ccplan.heuristics.trees`,
AllGather and Broadcast with several chunks per GPU) runs after item 4, or, under a time
limit and from :data:`TREES_FIRST` chunks on, before everything else, the ring then only
when it gave no schedule: its work grows linearly with the chunks, the others' faster. A
candidate of ``--chunks auto`` on :data:`PROBE_GPUS` GPUs or more is the tree packing alone. If no stage
completes within the limit, the engine returns no schedule and says why in
``details["reason"]``. Ctrl-C returns the best verified schedule so far with
``details["interrupted"] = True``. ``Outcome.details`` names the winning variant and lists
every variant's makespan.

Because items 6-7 stop on the clock, a normal-effort result can depend on machine speed;
``effort="quick"`` is fully deterministic.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ccplan.contract import Outcome, SolveOptions, register
from ccplan.errors import CCPlanError, ValidationError
from ccplan.heuristics.cutaware import CutAwareOptions, cut_aware_schedule
from ccplan.heuristics.layered import LayeredOptions, layered_schedule
from ccplan.heuristics.mteg import (
    MtegOptions,
    MtegResult,
    Reservations,
    decompose,
    extend_schedule,
    latency_bound,
    mteg_schedule,
)
from ccplan.instances.clusters import has_chassis
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.limits import NEVER, Deadline, OutOfTimeError
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)

SAFETY_NET = "ring-1"
"""Baseline run first under a hard time limit, so that a schedule exists early."""

NCCL_RING = "ring"
"""NCCL's multi-channel rings (:mod:`ccplan.heuristics.baselines.channels`), a portfolio stage
when each GPU has several chunks."""

RESTART_SHARE = 0.3
"""Share of the budget for random-order restarts; rip-up-and-reroute gets the rest."""

TREES_FIRST = 256
"""Chunks (in all) from which, under a time limit, the tree packing runs first (module
docstring): below it MTEGCCA's variants take a second or less (AMD x2 AllGather, C = 4: 0.3-0.8 s
each against 4 s for the packing), from it on the tree packing is the cheaper and the better
(C = 16: 4 s to more than 16 s for MTEGCCA, and 404 against 383 slots)."""

PROBE_GPUS = 16
"""GPUs from which a ``--chunks auto`` candidate (``probe``) of an AllGather or Broadcast is the
tree packing only, whatever its chunk count (below, the portfolio's constructors are quick and
at few chunks the better ones: DGX-1 AllGather reaches its slot bound with the layered
constructor at C = 32, 0.9955 of the throughput limit, where the packing alone stopped the
doubling at 0.9825)."""

EFFORTS: dict[str, float] = {"quick": 0.0, "normal": 5.0, "thorough": 20.0}
"""Effort level -> default time budget in seconds (0: the fixed variants only)."""


@dataclass(frozen=True)
class Candidate:
    """One verified variant: its label, makespan and schedule."""

    label: str
    makespan: int
    schedule: Schedule
    seconds: float


def _bound(instance: Instance) -> int:
    """Lower bound to stop at: ccplan.bounds if available, else the latency bound."""
    try:
        from ccplan.bounds import lower_bound_slots
    except ImportError:  # pragma: no cover - bounds.py is part of the package
        return latency_bound(instance)
    return lower_bound_slots(instance)


def heuristic_search(
    instance: Instance,
    time_limit: float | None = None,
    effort: str = "normal",
    seed: int = 0,
    budget: float | None = None,
    probe: bool = False,
) -> tuple[Candidate | None, list[Candidate], dict[str, object]]:
    """Run the portfolio; return the best candidate, all candidates and run facts.

    Parameters
    ----------
    instance : Instance
    time_limit : float, optional
        Seconds for the whole search, a hard limit: every stage checks the clock (before
        each Takahashi-Matsuyama search, each layer) and a stage cut short is dropped. With a
        limit, variants with one tree per chunk (the cheapest) run first. The best candidate
        is None only when no stage completed within the limit. Without a limit the effort's
        default budget applies to every stage after the first complete schedule.
    effort : {"quick", "normal", "thorough"}
    seed : int
        First seed of the random-order restarts.
    budget : float, optional
        A soft budget in seconds, at most ``time_limit``: the first complete schedule beyond
        the ring safety net is always built (within ``time_limit``), and the budget stops the
        stages after it. The exact engine's warm start uses it to grow its rounds by progress.
    probe : bool
        A candidate of ``--chunks auto`` (``options.extra["auto_probe"]``): an AllGather or
        Broadcast on :data:`PROBE_GPUS` GPUs or more gets the tree packing only
        (``facts["auto_probe"]``).

    Raises
    ------
    ValidationError
        Unknown effort.
    """
    if effort not in EFFORTS:
        raise ValidationError(f"heuristic option effort must be one of {sorted(EFFORTS)}, got {effort!r}")
    if budget is not None and not budget >= 0:
        raise ValidationError(f"heuristic option soft_budget must be >= 0 seconds, got {budget!r}")
    if budget is None:
        budget = EFFORTS[effort] if time_limit is None else float(time_limit)
    elif time_limit is not None:
        budget = min(budget, float(time_limit))
    if effort == "quick":
        budget = 0.0
    start = time.perf_counter()
    # A given time limit is a hard deadline for every stage, the first included; the effort's
    # default budget only stops the later stages (the first always completes a schedule).
    hard = Deadline.after(time_limit) if time_limit is not None else NEVER
    # budget 0: with effort "quick" no budget at all (its fixed variants all run), otherwise
    # the first complete schedule only
    soft = Deadline(start + budget) if budget > 0 or effort != "quick" else NEVER
    bound = _bound(instance)
    multi_chunk = any(len(k.chunks) > 1 for k in decompose(instance))
    from ccplan.heuristics.trees import KINDS as TREE_KINDS

    many = len(instance.collective.holders) >= TREES_FIRST
    trees_kind = instance.collective.kind in TREE_KINDS
    # A candidate of ``--chunks auto`` (``probe``) on PROBE_GPUS GPUs or more: the tree
    # packing only, being the cheap one (leaf-spine of 64 GPUs, C = 1: 4 s against 39 s for
    # MTEGCCA's first variant, whose improvement search then took the candidate's whole
    # share); the portfolio runs in full at the chosen C.
    probe_trees = probe and trees_kind and len(instance.topology.gpus) >= PROBE_GPUS
    trees_first = trees_kind and time_limit is not None and (many or probe_trees)
    trees_apply = trees_kind and (multi_chunk or trees_first)
    if probe_trees:
        budget = 0.0
        soft = Deadline(start)
    cands: list[Candidate] = []
    mteg_runs: list[MtegResult] = []
    best: Candidate | None = None
    timed_out: list[str] = []
    failed: list[str] = []

    restarts = 0
    lns_iterations = 0

    def stage_deadline() -> Deadline:
        # The ring safety net does not count as the first schedule: the first real variant
        # gets the whole hard limit, so a soft budget never leaves the ring as the answer.
        if best is None or best.label == SAFETY_NET:
            return hard
        return Deadline(min(hard.at, soft.at))

    def consider(label: str, make: Callable[[], Schedule], result: MtegResult | None = None) -> None:
        nonlocal best
        t0 = time.perf_counter()
        try:
            schedule = make()
        except OutOfTimeError:
            timed_out.append(label)
            return
        except (CCPlanError, ArithmeticError, LookupError, ValueError) as exc:
            # One variant's failure (a refusal, or a defect the verifier would also catch)
            # must not end the portfolio: the others may still give a verified schedule.
            log.error("heuristic variant %s failed: %s: %s", label, type(exc).__name__, exc)
            failed.append(label)
            return
        report = verify(instance, schedule)
        seconds = time.perf_counter() - t0
        if not report.ok or report.makespan_slots is None:
            log.error("heuristic variant %s failed verification: %s", label, report.violations[:1])
            return
        cand = Candidate(label, report.makespan_slots, schedule.renamed("heuristic"), seconds)
        cands.append(cand)
        if result is not None:
            mteg_runs.append(result)
        if best is None or cand.makespan < best.makespan or (
            cand.makespan == best.makespan and best.label == SAFETY_NET
        ):
            best = cand

    def mteg(opts: MtegOptions) -> None:
        holder: dict[str, MtegResult] = {}

        def make() -> Schedule:
            holder["r"] = mteg_schedule(instance, opts, stage_deadline())
            return holder["r"].schedule

        consider(f"mteg[{opts.label()}]", make)
        if "r" in holder:
            mteg_runs.append(holder["r"])

    def layered(opts: LayeredOptions) -> None:
        consider(opts.label(), lambda: layered_schedule(instance, opts, stage_deadline()))

    def cut_aware(opts: CutAwareOptions) -> None:
        consider(opts.label(), lambda: cut_aware_schedule(instance, opts, stage_deadline()))

    def trees() -> None:
        # Pipelined tree packing (ForestColl-class) reaches the throughput limit where many
        # chunks follow one another; with one chunk per GPU MTEGCCA's trees are as good.
        from ccplan.heuristics.trees import trees_schedule

        if trees_apply:
            # a --chunks auto probe skips the trees engine's costlier steps (its step 6)
            extra = {"auto_probe": True} if probe else None
            consider("trees", lambda: trees_schedule(instance, stage_deadline(), extra))

    def baseline(name: str, left: float, *, count_timeout: bool) -> None:
        # the registered baseline: ``instance`` is already the problem this engine was given
        # (the pipeline's twin or reversal, if any, has been applied)
        from ccplan.contract import registered
        from ccplan.heuristics.baselines import supports

        if not supports(name, instance.collective.kind) or left <= 0:
            return
        try:
            out = registered(name)(instance, SolveOptions(time_limit=left))
        except (CCPlanError, RecursionError) as exc:  # no ring through this topology
            log.debug("heuristic: no %s stage: %s", name, exc)
            return
        if out.schedule is None:
            if count_timeout:
                timed_out.append(name)
            return
        schedule = out.schedule
        consider(name, lambda: schedule)

    def nccl_rings() -> None:
        # NCCL's rings split the data over k channels: with C a multiple of k (or many chunks)
        # they fill every link the search kept, which the tree heuristics can miss by a slot.
        if multi_chunk:
            baseline(NCCL_RING, stage_deadline().remaining(), count_timeout=True)

    def done() -> bool:
        return best is not None and best.makespan <= bound

    def out_of_time() -> bool:
        # restarts and squeaky wheel get the first 30 % of the budget, rip-up-and-reroute the rest
        return time.perf_counter() - start >= RESTART_SHARE * budget or hard.expired

    def safety_net() -> None:
        # Under a hard limit, a classic ring (seconds even for 16000 chunks) first, so that a
        # verified schedule exists when no MTEG variant completes in time.
        baseline(SAFETY_NET, hard.remaining(), count_timeout=False)

    def run_all() -> None:
        if trees_first:
            # Many chunks per GPU under a hard limit: the tree packing first. Its work is
            # linear in the chunks, while the classic ring and MTEGCCA grow faster (AMD x2
            # AllGather, C = 512: ring 25 s, MTEGCCA past 60 s; C = 16 already past 16 s),
            # so with trees later a limit that the chunk count makes short leaves the ring.
            trees()
        if time_limit is not None and best is None:
            safety_net()
        for step in _fixed_variants(
            multi_chunk, cheap_first=time_limit is not None, chassis=has_chassis(instance.topology)
        ):
            if done() or hard.expired:
                break
            past_budget = time.perf_counter() - start >= budget
            if effort != "quick" and best is not None and best.label != SAFETY_NET and past_budget:
                break
            if isinstance(step, MtegOptions):
                mteg(step)
            elif isinstance(step, CutAwareOptions):
                cut_aware(step)
            else:
                layered(step)
        if not trees_first and not done() and not hard.expired:
            trees()
        if not done() and not hard.expired:
            nccl_rings()
        if effort == "quick" or best is None or done() or hard.expired:
            return
        improve()

    def improve() -> None:
        nonlocal restarts, lns_iterations
        if not out_of_time() and mteg_runs:
            squeak(min(mteg_runs, key=lambda r: r.makespan), rounds=8)
        for opts in _random_variants(seed, multi_chunk):
            if done() or out_of_time():
                break
            restarts += 1
            if isinstance(opts, LayeredOptions):
                layered(opts)
                continue
            before = len(mteg_runs)
            mteg(opts)
            if len(mteg_runs) > before:
                squeak(mteg_runs[-1], rounds=1)
        if best is not None and not done() and time.perf_counter() < min(start + budget, hard.at):
            base: Candidate = best
            improved, lns_iterations = rip_up_reroute(
                instance, base.schedule, min(start + budget, hard.at), bound, seed
            )
            consider(f"{base.label}+reroute", lambda: improved)

    def squeak(base: MtegResult, rounds: int) -> None:
        current = base
        for _ in range(rounds):
            if done() or out_of_time():
                return
            order = _promote_late(current)
            if order == current.order:
                return
            opts = MtegOptions(order="given", task_order=order, tree=base.options.tree,
                               select=base.options.select, interleave=base.options.interleave)
            before = len(mteg_runs)
            mteg(opts)
            if len(mteg_runs) == before:
                return
            nxt = mteg_runs[-1]
            if nxt.makespan > current.makespan:
                return
            current = nxt

    interrupted = False
    try:
        run_all()
    except KeyboardInterrupt:
        # Ctrl-C: keep the best verified schedule so far (the contract of ccplan.errors).
        interrupted = True
    facts: dict[str, object] = {
        "lower_bound_slots": bound,
        "reached_bound": best is not None and best.makespan <= bound,
        "restarts": restarts,
        "reroute_iterations": lns_iterations,
        "seconds": time.perf_counter() - start,
        "budget_seconds": budget,
    }
    if probe_trees:
        facts["auto_probe"] = "trees only"
    if timed_out:
        facts["stopped_by_time_limit"] = timed_out
    if failed:
        facts["failed_variants"] = failed
    if interrupted:
        facts["interrupted"] = True
    return best, cands, facts


def _score(
    lat: dict[tuple[int, int], int], by_chunk: dict[Chunk, list[Send]]
) -> tuple[tuple[int, int, int], dict[Chunk, int]]:
    """(makespan, deliveries arriving at the makespan, sum of arrivals) and per-chunk finish."""
    arrivals = []
    finish = {}
    for c, sends in by_chunk.items():
        arr = [s.slot + lat[(s.src, s.dst)] for s in sends]
        arrivals.extend(arr)
        finish[c] = max(arr, default=0)
    makespan = max(arrivals, default=0)
    return (makespan, sum(1 for a in arrivals if a == makespan), sum(arrivals)), finish


def rip_up_reroute(
    instance: Instance,
    schedule: Schedule,
    deadline: float,
    bound: int,
    seed: int = 0,
    max_rip: int = 4,
    max_iterations: int | None = None,
    leaf_share: float = 0.5,
    accept_worse: float = 0.05,
) -> tuple[Schedule, int]:
    """Improvement step: rip up the trees of a few chunks and rebuild them (LNS).

    Each iteration removes the sends of one chunk that finishes at the makespan plus up to
    ``max_rip - 1`` random other chunks, rebuilds their trees with
    :func:`~ccplan.heuristics.mteg.extend_schedule` (TM selection drawn at random) in the
    MTEG whose edges the remaining sends occupy, and keeps the result when the key
    (makespan, deliveries at the makespan, sum of arrival slots) does not get worse. So late
    deliveries move into link-slots freed by the rebuilt trees. Stops at ``deadline``
    (``time.perf_counter()`` value) or when the makespan reaches ``bound``.

    Returns
    -------
    (Schedule, int)
        The best schedule (not yet verified by this function) and the number of iterations.
    """
    rng = random.Random(seed)
    lat = {lk.key: int(x) for lk, x in zip(instance.topology.links, instance.latency, strict=True)}
    coll = instance.collective
    by_chunk: dict[Chunk, list[Send]] = {c: [] for c in coll.chunk_ids}
    for snd in schedule.sends:
        by_chunk[snd.chunk].append(snd)
    key, finish = _score(lat, by_chunk)
    best_key, best_by_chunk = key, dict(by_chunk)
    tasks = {t.chunks[0]: t for t in decompose(instance, per_chunk=True)}
    movable = sorted(tasks)
    link_index = instance.topology.link_index
    res = Reservations(instance)
    for snd in schedule.sends:
        res.reserve(link_index[(snd.src, snd.dst)], snd.slot)
    iterations = 0
    while time.perf_counter() < deadline and key[0] > bound and movable:
        if max_iterations is not None and iterations >= max_iterations:
            break
        iterations += 1
        # removed[c]: the sends of chunk c taken out this iteration
        removed: dict[Chunk, list[Send]] = {}
        if rng.random() < leaf_share:
            _pick_leaves(rng, by_chunk, lat, key[0], max_rip, removed)
        if not removed:
            _pick_chunks(rng, movable, finish, key[0], max_rip, by_chunk, removed)
        order = sorted(removed)
        rng.shuffle(order)
        trial = {c: list(sends) for c, sends in by_chunk.items()}
        for c in order:
            gone = set(removed[c])
            trial[c] = [snd for snd in by_chunk[c] if snd not in gone]
            for snd in removed[c]:
                res.release(link_index[(snd.src, snd.dst)], snd.slot)
        opts = MtegOptions(select=rng.choice(("tree-cost", "earliest")), horizon=max(1, key[0]))
        kept = {c: trial[c] for c in order}
        try:
            new = extend_schedule(instance, (), [tasks[c] for c in order], opts, reservations=res,
                                  partial=kept, deadline=Deadline(deadline))
        except OutOfTimeError:
            break  # the reservations are half-updated, but best_by_chunk does not depend on them
        for snd in new:
            trial[snd.chunk].append(snd)
        new_key, new_finish = _score(lat, trial)
        # accept improvements, and sideways moves at the same makespan with a small
        # probability (lets the search leave plateaus of the secondary keys)
        if new_key <= key or (new_key[0] <= key[0] and rng.random() < accept_worse):
            by_chunk, key, finish = trial, new_key, new_finish
            if key < best_key:
                best_key, best_by_chunk = key, dict(by_chunk)
        else:
            for snd in new:
                res.release(link_index[(snd.src, snd.dst)], snd.slot)
            for c in order:
                for snd in removed[c]:
                    res.reserve(link_index[(snd.src, snd.dst)], snd.slot)
    sends = tuple(snd for lst in best_by_chunk.values() for snd in lst)
    return Schedule(sends, method="heuristic"), iterations


def _pick_chunks(rng: random.Random, movable: list[Chunk], finish: dict[Chunk, int], makespan: int,
                 max_rip: int, by_chunk: dict[Chunk, list[Send]], removed: dict[Chunk, list[Send]]) -> None:
    """Move A: a whole chunk that finishes at the makespan plus a few random chunks."""
    critical = [c for c in movable if finish[c] == makespan]
    ripped = {rng.choice(critical)} if critical else set()
    extra = rng.randint(0, max(0, min(max_rip - 1, len(movable) - 1)))
    while len(ripped) < 1 + extra:
        ripped.add(rng.choice(movable))
    for c in ripped:
        removed[c] = list(by_chunk[c])


def _pick_leaves(rng: random.Random, by_chunk: dict[Chunk, list[Send]], lat: dict[tuple[int, int], int],
                 makespan: int, max_rip: int, removed: dict[Chunk, list[Send]]) -> None:
    """Move B: a delivery at the makespan to a leaf of its tree, plus other leaf deliveries
    into the same node (they compete for its in-links), taken out to be re-routed."""
    leaves: dict[int, list[Send]] = {}
    critical: list[Send] = []
    for sends in by_chunk.values():
        forwarding = {snd.src for snd in sends}
        for snd in sends:
            if snd.dst not in forwarding:
                leaves.setdefault(snd.dst, []).append(snd)
                if snd.slot + lat[(snd.src, snd.dst)] == makespan:
                    critical.append(snd)
    if not critical:
        return
    first = rng.choice(critical)
    others = [snd for snd in leaves[first.dst] if snd != first]
    picked = [first, *rng.sample(others, min(len(others), rng.randint(1, max(1, max_rip))))]
    for snd in picked:
        removed.setdefault(snd.chunk, []).append(snd)


def _fixed_variants(
    multi_chunk: bool, cheap_first: bool = False, chassis: bool = False
) -> Iterator[MtegOptions | LayeredOptions | CutAwareOptions]:
    # One tree per chunk is far cheaper than one Steiner tree per task when a task has many
    # chunks (1 s against 36 s for DGX-1 AllGather with C=300); under a time limit it runs
    # first so that a schedule exists early.
    if multi_chunk and cheap_first:
        yield MtegOptions(tree="chunk", interleave=True)
    yield MtegOptions()
    yield MtegOptions(select="earliest")
    if multi_chunk:
        if not cheap_first:
            yield MtegOptions(tree="chunk", interleave=True)
        yield MtegOptions(tree="chunk", interleave=True, select="earliest")
    yield LayeredOptions(slack=0)
    yield LayeredOptions(slack=1)
    if chassis:
        # several chassis behind slow links: one copy per chunk across each cut
        yield CutAwareOptions()
    yield MtegOptions(order="reverse")
    yield MtegOptions(order="reverse", select="earliest")


def _random_variants(seed: int, multi_chunk: bool) -> Iterator[MtegOptions | LayeredOptions]:
    k = 0
    while True:
        for select in ("tree-cost", "earliest"):
            yield MtegOptions(order="random", seed=seed + k, select=select)
            if multi_chunk:
                yield MtegOptions(order="random", seed=seed + k, select=select, tree="chunk")
        yield LayeredOptions(seed=seed + k)
        k += 1


def _promote_late(result: MtegResult) -> tuple[int, ...]:
    """Squeaky wheel: the tasks that finished in the last quarter of the makespan go first
    (in their current relative order), the rest keep theirs."""
    pos = {k: i for i, k in enumerate(result.order)}
    late_set = set(result.late_tasks[: max(1, len(result.late_tasks) // 4)])
    late = sorted(late_set, key=lambda k: pos[k])
    rest = [k for k in result.order if k not in late_set]
    return tuple(late + rest)


@register("heuristic")
def heuristic_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Engine ``heuristic``: the portfolio above. ``extra["effort"]``, ``time_limit`` (hard)
    and ``extra["soft_budget"]`` (seconds, see :func:`heuristic_search`) set the budget;
    ``seed`` the restarts. Status ``feasible`` (optimal is never claimed)."""
    effort = str(options.extra.get("effort", "normal"))
    soft = options.extra.get("soft_budget")
    best, cands, facts = heuristic_search(
        instance, options.time_limit, effort, options.seed, None if soft is None else float(soft),
        probe=bool(options.extra.get("auto_probe", False)),
    )
    if best is None:
        reason = f"time limit of {options.time_limit:g} s reached before any variant completed a schedule"
        if facts.get("interrupted"):
            reason = "interrupted before any variant completed a schedule"
        return Outcome(schedule=None, status="unknown", details={"reason": reason, **facts})
    makespans: dict[str, int] = {}
    for c in cands:
        makespans.setdefault(c.label, c.makespan)
    details = {
        "variant": best.label,
        "makespan_slots": best.makespan,
        "horizon": max(best.makespan, 1),
        "variants": makespans,
        "variants_tried": len(cands),
        **facts,
    }
    return Outcome(schedule=best.schedule, status="feasible", details=details)
