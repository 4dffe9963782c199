"""Schedules and model values: the sends of a solved model (:func:`schedule_from_model`) and a
schedule as a complete assignment of the variables, the warm-start hint (:func:`hint_from_schedule`)."""

from __future__ import annotations

from collections import defaultdict

import pyomo.environ as pyo
from pyomo.common.collections import ComponentMap

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.model.milp.index import model_index
from ccplan.schedule.core import Schedule, Send


def schedule_from_model(model: pyo.ConcreteModel, instance: Instance) -> Schedule:
    """Read the sends (``x > 0.5``) of a solved model as a :class:`Schedule`.

    Variables without a value (never loaded) count as 0.
    """
    meta = model_index(model)
    if meta.instance != instance:
        raise ValidationError("instance differs from the one the model was built for")
    links = instance.topology.links
    sends = []
    for (s, c, e, t), var in model.x.items():
        value = var.value
        if value is not None and value > 0.5:
            link = links[e]
            sends.append(Send(slot=int(t), chunk=(int(s), int(c)), src=link.src, dst=link.dst))
    return Schedule(tuple(sends), method="milp")


def _contributing(instance: Instance, schedule: Schedule) -> list[Send]:
    """The sends that lie on some path to a demand (the others cannot change the makespan
    and may have no variable in the sparse build, whose latest-time rule drops them)."""
    demanders: dict[Chunk, set[int]] = defaultdict(set)
    for chunk, v in instance.collective.demands:
        demanders[chunk].add(v)
    forwarding: dict[Chunk, set[int]] = defaultdict(set)
    kept: list[Send] = []
    # A non-holder receives a chunk once and forwards it only later, so walking the sends
    # backwards decides every send into w after all sends out of w. A cut-through switch may
    # receive a chunk several times, each before it forwards it; its hop into a GPU may land
    # in its own slot, so within a slot the switches' sends are walked last (the verifier's
    # order reversed).
    bufferless = instance.bufferless
    ordered = sorted(schedule.sends, key=lambda s: (s.slot, s.src not in bufferless))
    for send in reversed(ordered):
        if send.dst in demanders[send.chunk] or send.dst in forwarding[send.chunk]:
            kept.append(send)
            forwarding[send.chunk].add(send.src)
    kept.reverse()
    return kept


def hint_from_schedule(
    model: pyo.ConcreteModel, instance: Instance, schedule: Schedule
) -> ComponentMap:
    """A complete assignment of every model variable that encodes ``schedule``.

    Returns a :class:`pyomo.common.collections.ComponentMap` (a mapping ``VarData -> int``
    keyed by identity: Pyomo variables are not hashable).

    The schedule is verified first. Sends that help no demand are dropped (they cannot lower
    the makespan); the others set ``x = 1``; ``y[k, v, t] = 1`` from the arrival slot on,
    ``z`` marks the arrival slot of each demand, ``D`` is the makespan. For a window model
    (``build_model(..., start=...)``) ``schedule`` is the whole schedule the start state was
    read from: its sends before the window are the model's constants, its holdings and
    sends in flight at the window's first slot are the model's holders there.

    Raises
    ------
    ValidationError
        If the schedule fails verification, its makespan exceeds the horizon, a send has no
        variable in this (sparse) build, or the makespan is below the model's
        ``cut_lower_bound`` (the bound passed to :func:`build_model` was wrong).
    """
    from ccplan.schedule.verify import verify

    meta = model_index(model)
    if meta.instance != instance:
        raise ValidationError("instance differs from the one the model was built for")
    report = verify(instance, schedule)
    if not report.ok:
        raise ValidationError(f"hint schedule fails verification: {report.violations[0]}")
    assert report.makespan_slots is not None
    H = meta.horizon
    if report.makespan_slots > H:
        raise ValidationError(
            f"hint schedule has makespan {report.makespan_slots} > horizon {H} of the model"
        )
    topo = instance.topology
    lat = instance.latency
    coll = instance.collective
    values = ComponentMap((var, 0) for var in model.component_data_objects(pyo.Var, descend_into=True))

    arrival: dict[tuple[Chunk, int], int] = {}
    passing: dict[tuple[Chunk, int], set[int]] = defaultdict(set)  # cut-through switches
    origin = 0 if meta.start is None else meta.start.slot
    if meta.start is None:
        for chunk, nodes in coll.holders.items():
            for v in nodes:
                arrival[(chunk, v)] = 0
    else:
        for held in meta.start.ready:
            arrival[held] = origin  # a holder of the window model (in flight included)
    for send in _contributing(instance, schedule):
        if send.slot < origin:
            continue  # a constant of the window model
        e = topo.link_index[(send.src, send.dst)]
        key = (send.chunk[0], send.chunk[1], e, send.slot)
        if key not in model.x:
            raise ValidationError(
                f"hint: {send.describe()} has no variable x{list(key)} in this build "
                f"(horizon {H}, earliest/latest pruning of the sparse model)"
            )
        values[model.x[key]] = 1
        if send.dst in instance.bufferless and send.dst not in coll.holders[send.chunk]:
            passing[(send.chunk, send.dst)].add(send.slot + int(lat[e]))
        else:
            arrival[(send.chunk, send.dst)] = send.slot + int(lat[e])

    for (s, c, v, t), var in model.y.items():
        if ((s, c), v) in passing:
            values[var] = int(t in passing[((s, c), v)])
            continue
        at = arrival.get(((s, c), v))
        values[var] = int(at is not None and at <= t)
    for (s, c, v, t), var in model.z.items():
        values[var] = int(arrival.get(((s, c), v)) == t and t > 0)
    makespan = max((arrival[(chunk, v)] for chunk, v in coll.demands), default=0)
    if meta.start is not None:
        # the whole schedule's makespan: the open demands' arrivals and the constants' floor
        makespan = max([meta.start.floor, *(arrival[d] for d in meta.start.demands(coll))])
    if meta.lower_bound is not None and makespan < meta.lower_bound:
        raise ValidationError(
            f"hint schedule has makespan {makespan} below the model's lower_bound {meta.lower_bound}"
        )
    values[model.D] = makespan
    return values
