"""MTEGCCA end to end: :func:`mteg_schedule` (Steps 1-5), :func:`extend_schedule` (rip-up and
reroute around fixed sends) and the registered engine ``mteg``."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ccplan.contract import Outcome, SolveOptions, register, run_constructor
from ccplan.errors import ValidationError
from ccplan.heuristics.mteg.builder import _Builder
from ccplan.heuristics.mteg.graph import Reservations
from ccplan.heuristics.mteg.options import MtegOptions
from ccplan.heuristics.mteg.tasks import Task, decompose, merge_tasks, order_tasks
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.limits import NEVER, Deadline
from ccplan.schedule.core import Schedule, Send


@dataclass(frozen=True)
class MtegResult:
    """A schedule built by :func:`mteg_schedule` and how it was built."""

    schedule: Schedule
    makespan: int
    horizon: int
    extensions: int
    searches: int
    seconds: float
    options: MtegOptions
    order: tuple[int, ...] = field(default=())
    late_tasks: tuple[int, ...] = field(default=())
    """Task indices ordered by their latest delivery, latest first (for restarts)."""


def _columns_schedule(builder: _Builder) -> tuple[Schedule, dict[Chunk, int]]:
    """The builder's sends as a column-backed :class:`Schedule` and each chunk's last arrival."""
    source = np.asarray(builder.col_source, dtype=np.int64)
    index = np.asarray(builder.col_index, dtype=np.int64)
    link = np.asarray(builder.col_link, dtype=np.int64)
    slot = np.asarray(builder.col_slot, dtype=np.int64)
    tail = np.asarray(builder.tail, dtype=np.int64)
    head = np.asarray(builder.head, dtype=np.int64)
    schedule = Schedule.from_columns(
        slot=slot, chunk_source=source, chunk_index=index, src=tail[link], dst=head[link], method="mteg"
    )
    finish: dict[Chunk, int] = {}
    if len(slot):
        arrive = slot + np.asarray(builder.lat, dtype=np.int64)[link]
        width = int(index.max()) + 1
        code = source * width + index
        order = np.argsort(code, kind="stable")
        codes, first = np.unique(code[order], return_index=True)
        last = np.maximum.reduceat(arrive[order], first)
        finish = {(int(c) // width, int(c) % width): int(a) for c, a in zip(codes, last, strict=True)}
    return schedule, finish


def mteg_schedule(
    instance: Instance, options: MtegOptions | None = None, deadline: Deadline = NEVER
) -> MtegResult:
    """Run MTEGCCA (Steps 1-5) and return the schedule.

    Parameters
    ----------
    instance : Instance
        A data-movement collective (combining collectives are built from these elsewhere).
    options : MtegOptions, optional
        Defaults are the paper's algorithm.
    deadline : Deadline
        Checked before every Takahashi-Matsuyama search.

    Raises
    ------
    OutOfTimeError
        ``deadline`` passed before the schedule was complete.
    ValidationError
        A combining collective or bad options.
    CCPlanError
        A demand that no path can serve.
    """
    opts = options or MtegOptions()
    if instance.collective.combining:
        raise ValidationError(
            f"mteg schedules data-movement collectives; {instance.collective.kind!r} is combining "
            "(build it from AllGather/Broadcast on the reversed topology)"
        )
    start = time.perf_counter()
    tasks = decompose(instance, per_chunk=opts.tree == "chunk")
    ordered = order_tasks(tasks, opts)
    builder = _Builder(instance, opts, deadline=deadline)
    builder.run([merge_tasks(ordered)] if opts.tree == "all" and ordered else ordered)
    schedule, finish = _columns_schedule(builder)
    makespan = max(finish.values(), default=0)
    task_finish = {k.index: max((finish.get(c, 0) for c in k.chunks), default=0) for k in tasks}
    late = tuple(sorted(task_finish, key=lambda i: (-task_finish[i], i)))
    return MtegResult(
        schedule=schedule,
        makespan=makespan,
        horizon=max(makespan, 1),
        extensions=builder.extensions,
        searches=builder.searches,
        seconds=time.perf_counter() - start,
        options=opts,
        order=tuple(k.index for k in ordered),
        late_tasks=late,
    )


def extend_schedule(
    instance: Instance,
    fixed: Iterable[Send],
    tasks: Sequence[Task],
    options: MtegOptions | None = None,
    reservations: Reservations | None = None,
    partial: Mapping[Chunk, Sequence[Send]] | None = None,
    deadline: Deadline = NEVER,
) -> list[Send]:
    """Route ``tasks`` (Steps 3-4) around the link-slots that ``fixed`` already occupies.

    The rip-up-and-reroute improvement of :mod:`ccplan.heuristics.search` uses this: the
    sends of some chunks are removed and their trees rebuilt in the MTEG whose edges the
    other chunks' sends have taken. ``fixed`` must not contain sends of the tasks' chunks.

    Returns
    -------
    list of Send
        The new sends only.
    """
    opts = options or MtegOptions()
    builder = _Builder(instance, opts, reservations, deadline)
    if reservations is None:
        link_index = instance.topology.link_index
        for send in fixed:
            builder.res.reserve(link_index[(send.src, send.dst)], send.slot)
    builder.run(tasks, partial)
    return builder.sends


@register("mteg")
def mteg_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Engine ``mteg``: the faithful MTEGCCA (options from ``options.extra``, see
    :class:`MtegOptions`; ``options.horizon`` is the initial H)."""
    extra = dict(options.extra)
    if options.horizon is not None and "horizon" not in extra:
        extra["horizon"] = options.horizon
    opts = MtegOptions.from_mapping(extra, seed=options.seed)
    result, failed = run_constructor(
        lambda deadline: mteg_schedule(instance, opts, deadline), options.time_limit, opts.label()
    )
    if failed is not None:
        return failed
    return Outcome(
        schedule=result.schedule,
        status="feasible",
        details={
            "variant": opts.label(),
            "horizon": result.horizon,
            "horizon_extensions": result.extensions,
            "searches": result.searches,
            "makespan_slots": result.makespan,
        },
    )
