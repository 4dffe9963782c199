"""Building: the options, the planning pass over the ranks and every runtime limit.

:func:`_build` decides everything short of the XML text: it checks the options, plans each
rank once to link the two ends of every transfer, and checks every runtime limit (steps per
thread block, thread blocks, offsets), so that rendering afterwards cannot fail on the
schedule's account.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ccplan.errors import ValidationError
from ccplan.export.msccl.dialects import (
    DIALECTS,
    MAX_CHANNELS,
    MAX_DEP_TB,
    MAX_OFFSET,
    MAX_TBS_PER_CHANNEL,
    PROTOCOLS,
    Dialect,
)
from ccplan.export.msccl.layout import BufferLayout, buffer_layout
from ccplan.export.msccl.planning import _TB, _Planner
from ccplan.export.msccl.transfers import _check_fifo, _transfer_columns
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule


@dataclass(frozen=True)
class _Built:
    """A program ready to render: every limit checked, each transfer's two ends linked.

    The steps themselves are not kept: :func:`_render` plans each rank again (the plan is
    deterministic), so the peak holds one rank's objects rather than one per step.
    """

    name: str
    proto: str
    channels: int
    instances: int
    inplace: bool
    dialect: Dialect
    layout: BufferLayout
    planner: _Planner
    s_chunks: tuple[int, ...]
    copy_seq: tuple[int, ...]
    transfers: int
    thread_blocks: int
    describe: str
    min_bytes: int = 0
    max_bytes: int | None = None
    """Inclusive size range the runtime runs the file for (None: no upper limit)."""


def _build(
    instance: Instance,
    schedule: Schedule,
    *,
    dialect: str,
    proto: str,
    channels: int,
    instances: int,
    inplace: bool,
    name: str,
    switches: str,
    max_tbs: int,
    min_bytes: int = 0,
    max_bytes: int | None = None,
) -> _Built:
    """Everything :func:`to_msccl_xml` checks and decides, short of the text (package doc, 1-7).

    Every runtime limit is checked here, so a caller that renders the result afterwards
    (:func:`write_msccl_xml` streams it to a file) has nothing left that can fail on the
    schedule's account. The ranks are planned one at a time; only each transfer's two
    linked locations (a few integers per transfer) outlive a rank's plan.
    """
    try:
        dia = DIALECTS[dialect]
    except KeyError:
        raise ValidationError(f"dialect must be one of {tuple(DIALECTS)}, got {dialect!r}") from None
    if proto not in PROTOCOLS:
        raise ValidationError(f"proto must be one of {PROTOCOLS}, got {proto!r}")
    for what, value in (("channels", channels), ("instances", instances), ("max_tbs", max_tbs)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValidationError(f"{what} must be a positive integer, got {value!r}")
    if channels * instances > MAX_CHANNELS:
        raise ValidationError(
            f"channels*instances = {channels * instances} exceeds MAXCHANNELS = {MAX_CHANNELS}; "
            "lower --channels or --instances"
        )
    if not isinstance(min_bytes, int) or isinstance(min_bytes, bool) or min_bytes < 0:
        raise ValidationError(f"min_bytes must be a non-negative integer, got {min_bytes!r}")
    if max_bytes is not None and (
        not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < min_bytes
    ):
        raise ValidationError(
            f"max_bytes must be None or an integer >= min_bytes = {min_bytes}, got {max_bytes!r}"
        )
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,200}", name):
        raise ValidationError(f"name must be 1-200 letters, digits, '_', '.', '-', got {name!r}")

    topo = instance.topology
    coll = instance.collective
    layout = buffer_layout(coll, topo.gpus, inplace)
    if layout.combining and not coll.combining:
        raise ValidationError(f"collective {coll.kind!r}: layout is combining but the collective is not")
    n = layout.ngpus
    chunk_idx = {c: k for k, c in enumerate(layout.chunk_order)}
    tr = _transfer_columns(instance, schedule, switches, chunk_idx)
    _check_fifo(tr, channels)
    planner = _Planner(layout, tr, channels, instances)

    # One pass over the ranks: link the transfers' ends, note the first violation of each
    # limit in the order the checks below report them.
    steps_bad: tuple[tuple[Any, ...], str] | None = None
    tbs_bad: str | None = None
    s_chunks: list[int] = []
    copy_seq: list[int] = []
    ntbs: list[int] = []
    copies = 0
    for r in range(n):
        copy_seq.append(copies)
        plan = planner.plan(r, copies)
        planner.link(plan)
        # a merged copy stands for cnt copies, each of which took a sequence number
        copies += sum(op.cnt for prog in plan.programs.values() for op in prog if op.type == "cpy")
        s_chunks.append(plan.scratch)
        ntbs.append(len(plan.tbs))
        for b, prog in plan.programs.items():
            s = prog[-1].step + 1 if prog else 0
            if s > dia.max_steps and (steps_bad is None or plan.first_key[b] < steps_bad[0]):
                steps_bad = (
                    plan.first_key[b],
                    f"steps per thread block: GPU {r} thread block {b} needs {s} steps but the {dia.name} "
                    "runtime "
                    f"allows MSCCL_MAX_NUM_STEPS = {dia.max_steps}; spread chunks over more channels "
                    f"(--channels {channels * 2}), use fewer chunks, or --dialect legacy (256 steps)",
                )
        if tbs_bad is None:
            tbs_bad = _tb_limits(r, plan.tbs, channels, instances, max_tbs, dia)
    if steps_bad is not None:
        raise ValidationError(steps_bad[1])
    if tbs_bad is not None:
        raise ValidationError(tbs_bad)
    for r in range(n):
        size = max(layout.i_chunks[r], layout.o_chunks[r], s_chunks[r]) * instances
        if size - 1 > MAX_OFFSET:
            raise ValidationError(
                f"offsets: GPU {r} buffers need {size} chunks but offsets are int16 (max {MAX_OFFSET}); "
                "use fewer chunks or instances"
            )

    return _Built(
        name=name,
        proto=proto,
        channels=channels,
        instances=instances,
        inplace=inplace,
        dialect=dia,
        layout=layout,
        planner=planner,
        s_chunks=tuple(s_chunks),
        copy_seq=tuple(copy_seq),
        transfers=len(tr),
        thread_blocks=sum(ntbs) * instances,
        describe=instance.describe(),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
    )


def _tb_limits(
    r: int, tbs: list[_TB], channels: int, instances: int, max_tbs: int, dia: Dialect
) -> str | None:
    """The first thread-block limit rank ``r`` breaks (co-residency, ``int8`` depid, per channel)."""
    count = len(tbs) * instances
    if count > max_tbs or count > dia.max_tb_id or count - 1 > MAX_DEP_TB:
        return (
            f"thread blocks: GPU {r} needs {count} thread blocks but at most "
            f"{min(max_tbs, MAX_DEP_TB + 1)} "
            "can be co-resident/addressed (int8 depid); lower --channels or --instances"
        )
    for ch in range(channels):
        ns = sum(1 for b in tbs if b.chan == ch and b.send >= 0)
        nr = sum(1 for b in tbs if b.chan == ch and b.recv >= 0)
        if max(ns, nr) > MAX_TBS_PER_CHANNEL:
            return (
                f"thread blocks per channel: GPU {r} channel {ch} has {max(ns, nr)} send or receive "
                "thread "
                f"blocks, the runtime allows {MAX_TBS_PER_CHANNEL}; use more channels"
            )
    return None
