"""Rendering: the XML text, the automatic choice of settings and the streamed file.

:func:`_render` yields the document line by line from a built program (planning each rank
again); :func:`to_msccl_xml` and :func:`export_msccl` return it as one string,
:func:`write_msccl_xml` and :func:`write_msccl_export` stream it atomically to a file.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccplan.atomic import sigint_blocked, staging_path
from ccplan.errors import ValidationError
from ccplan.export.msccl.building import _build, _Built
from ccplan.export.msccl.dialects import DEFAULT_MAX_TBS, MAX_CHANNELS
from ccplan.export.msccl.layout import Loc
from ccplan.export.msccl.planning import _Op, _Planner
from ccplan.export.msccl.selection import render_max_bytes
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)


def _fmt_loc(loc: Loc | None) -> tuple[str, int]:
    return ("o", -1) if loc is None else (loc.buf, loc.off)


def _render(built: _Built) -> Iterator[str]:
    """The XML of ``built``, one newline-terminated line at a time (section 1.1 element order).

    A generator, so a writer holds one line (and one rank's plan) at a time rather than the
    whole document: the text of a 1,024-GPU schedule is several times the size of its steps.
    """
    layout, inst_count, channels = built.layout, built.instances, built.channels
    planner = built.planner
    n = layout.ngpus
    k_total = layout.nchunks * inst_count
    yield (
        f'<algo name="{built.name}" proto="{built.proto}" nchannels="{channels * inst_count}" '
        f'nchunksperloop="{k_total}" '
        f'ngpus="{n}" coll="{built.dialect.coll_names[layout.kind]}" inplace="{int(built.inplace)}" '
        f'outofplace="{int(not built.inplace)}" minBytes="{built.min_bytes}" '
        f'maxBytes="{render_max_bytes(built.max_bytes, built.dialect.name)}">\n'
    )
    for r in range(n):
        plan = planner.plan(r, built.copy_seq[r])
        ntb = len(plan.tbs)
        yield (
            f'  <gpu id="{r}" i_chunks="{layout.i_chunks[r] * inst_count}" '
            f'o_chunks="{layout.o_chunks[r] * inst_count}" s_chunks="{built.s_chunks[r] * inst_count}">\n'
        )
        for inst in range(inst_count):
            for b, block in enumerate(plan.tbs):
                chan = inst * channels + block.chan
                tb_id = inst * ntb + b
                yield f'    <tb id="{tb_id}" send="{block.send}" recv="{block.recv}" chan="{chan}">\n'
                for op in plan.programs.get(b, ()):
                    for line in _render_op(op, planner, inst, inst_count, inst * ntb):
                        yield line + "\n"
                yield "    </tb>\n"
        yield "  </gpu>\n"
    yield "</algo>\n"
    log.debug(
        "msccl export %s: %d transfers, %d thread blocks",
        built.describe,
        built.transfers,
        built.thread_blocks,
    )


def to_msccl_xml(
    instance: Instance,
    schedule: Schedule,
    *,
    dialect: str = "executor",
    proto: str = "Simple",
    channels: int = 1,
    instances: int = 1,
    inplace: bool = True,
    name: str = "ccplan",
    switches: str = "collapse",
    max_tbs: int = DEFAULT_MAX_TBS,
    min_bytes: int = 0,
    max_bytes: int | None = None,
) -> str:
    """Render ``schedule`` as an MSCCL algorithm XML (recipe of section 1.3, see the package doc).

    Parameters
    ----------
    instance, schedule
        A schedule that passes :func:`ccplan.schedule.verify` (not re-checked here).
    dialect : {"executor", "legacy"}
        ``executor`` for Azure/msccl-executor-nccl and RCCL (64 steps per thread block,
        ``reducescatter``), ``legacy`` for microsoft/msccl (256 steps, ``reduce_scatter``).
    proto : {"Simple", "LL", "LL128"}
    channels : int
        Channels of one instance; chunk k uses channel ``k mod channels``.
    instances : int
        Replicate the program (interleaved chunks, fresh channels).
    inplace : bool
        Emit the in-place variant (``inplace="1" outofplace="0"``) or the out-of-place one.
    name : str
        ``name`` attribute (letters, digits, ``_ . -``).
    switches : {"collapse", "refuse"}
        How relays through switch nodes are handled (package doc).
    max_tbs : int
        Thread blocks per GPU allowed (co-residency; 108 = A100 SMs).
    min_bytes, max_bytes : int, optional
        The inclusive range of call sizes (the runtime's ``nBytes``, the whole buffer) the
        runtime runs this file for; ``max_bytes=None`` is no upper limit (``maxBytes="0"`` for
        the executor, 1 TiB for legacy MSCCL, which also compares ``<`` and gets
        ``max_bytes + 1``; :func:`ccplan.export.msccl.selection.render_max_bytes`).

    Returns
    -------
    str
        The XML text (no prolog, one element per line: the executor's tokenizer needs it).

    Raises
    ------
    ValidationError
        Bad option; a collective without MSCCL mapping; a schedule that cannot be expressed
        within a runtime limit (steps per thread block, thread blocks, channels, offsets) --
        the message names the limit and the option that helps.
    """
    built = _build(
        instance,
        schedule,
        dialect=dialect,
        proto=proto,
        channels=channels,
        instances=instances,
        inplace=inplace,
        name=name,
        switches=switches,
        max_tbs=max_tbs,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
    )
    return "".join(_render(built))


def _shift(loc: Loc | None, inst: int, instances: int) -> tuple[str, int]:
    buf, off = _fmt_loc(loc)
    return buf, (off if off < 0 else off * instances + inst)


def _render_op(op: _Op, planner: _Planner, inst: int, instances: int, tb_base: int) -> list[str]:
    """The ``<step>`` lines of ``op`` (with its leading ``nop``s) for replica ``inst``."""
    lines = []
    deps = op.deps
    first = op.step - max(0, len(deps) - 1)
    for k, d in enumerate(deps[:-1]):
        lines.append(
            f'      <step s="{first + k}" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" '
            f'depid="{tb_base + d.tb}" deps="{d.step}" hasdep="0"/>'
        )
    src: Loc | None
    dst: Loc | None
    if op.type == "s":
        # the receiver's side: where it stores the chunk
        src, dst = op.src, planner.loc(planner.landed, op.transfer)
    elif op.type in ("r", "rcs"):
        # the sender's side: what it sends
        src, dst = planner.loc(planner.sent, op.transfer), op.dst
    else:
        src, dst = op.src, op.dst
    sbuf, soff = _shift(src, inst, instances)
    dbuf, doff = _shift(dst, inst, instances)
    depid, dstep = (tb_base + deps[-1].tb, deps[-1].step) if deps else (-1, -1)
    lines.append(
        f'      <step s="{op.step}" type="{op.type}" srcbuf="{sbuf}" srcoff="{soff}" dstbuf="{dbuf}" '
        f'dstoff="{doff}" cnt="{op.cnt}" depid="{depid}" deps="{dstep}" hasdep="{int(op.hasdep)}"/>'
    )
    return lines


@dataclass(frozen=True)
class ExportChoice:
    """The settings :func:`export_msccl` settled on, and the XML text."""

    text: str
    channels: int
    inplace: bool
    tried: tuple[str, ...]
    """One line per rejected setting and why (for the log and the CLI's note)."""


def _choose(
    instance: Instance,
    schedule: Schedule,
    *,
    dialect: str,
    proto: str,
    channels: int | None,
    instances: int,
    inplace: bool | None,
    switches: str,
) -> tuple[_Built, tuple[str, ...]]:
    """The first setting :func:`export_msccl` accepts, built, and the rejected ones."""
    places = [inplace] if inplace is not None else [True, False]
    if channels is not None:
        widths = [channels]
    else:
        widths = []
        c = 1
        while c * instances <= MAX_CHANNELS:
            widths.append(c)
            c *= 2
        widths = widths or [1]
    tried: list[str] = []
    last: ValidationError | None = None
    for place in places:
        for width in widths:
            try:
                built = _build(
                    instance,
                    schedule,
                    dialect=dialect,
                    proto=proto,
                    channels=width,
                    instances=instances,
                    inplace=place,
                    name="ccplan",
                    switches=switches,
                    max_tbs=DEFAULT_MAX_TBS,
                )
            except ValidationError as exc:
                msg = str(exc)
                last = exc
                tried.append(f"channels={width} {'in' if place else 'out-of'}-place: {msg}")
                if msg.startswith("inplace:") and len(places) > 1:
                    break  # the layout, not the width: try out-of-place
                if msg.startswith("steps per thread block") and width != widths[-1]:
                    continue
                if msg.startswith("steps per thread block"):
                    break
                raise
            return built, tuple(tried)
    assert last is not None
    raise last


def export_msccl(
    instance: Instance,
    schedule: Schedule,
    *,
    dialect: str = "executor",
    proto: str = "Simple",
    channels: int | None = None,
    instances: int = 1,
    inplace: bool | None = None,
    switches: str = "collapse",
) -> ExportChoice:
    """:func:`to_msccl_xml` with the settings the runtime accepts chosen automatically.

    ``inplace=None`` takes the in-place variant where the collective's buffer layout allows it
    (not AllToAll, not a ReduceScatter with chunks out of rank order) and out-of-place
    otherwise. ``channels=None`` takes the fewest channels (1, 2, 4, ...) whose thread blocks
    fit the dialect's ``MSCCL_MAX_NUM_STEPS`` (64 for the executor): chunk ``k`` runs on
    channel ``k mod channels``, so more channels mean fewer steps per thread block. Given
    values are used as they are. Errors that no such choice can cure are raised at once.

    Raises
    ------
    ValidationError
        As :func:`to_msccl_xml`, for the last setting tried.
    """
    built, tried = _choose(
        instance,
        schedule,
        dialect=dialect,
        proto=proto,
        channels=channels,
        instances=instances,
        inplace=inplace,
        switches=switches,
    )
    return ExportChoice("".join(_render(built)), built.channels, built.inplace, tried)


@dataclass(frozen=True)
class WrittenExport:
    """What :func:`write_msccl_export` wrote: the file, its size and the settings chosen."""

    path: Path
    bytes: int
    channels: int
    inplace: bool
    tried: tuple[str, ...]
    """One line per rejected setting and why (as :attr:`ExportChoice.tried`)."""


def write_msccl_export(
    path: str | Path,
    instance: Instance,
    schedule: Schedule,
    *,
    dialect: str = "executor",
    proto: str = "Simple",
    channels: int | None = None,
    instances: int = 1,
    inplace: bool | None = None,
    switches: str = "collapse",
) -> WrittenExport:
    """:func:`export_msccl`, streamed to ``path`` instead of returned as one string.

    The settings are chosen and every runtime limit checked before the file is opened; the
    XML is then written line by line to a staged file next to ``path`` and renamed into
    place when complete (all or none: a failure or Ctrl-C leaves ``path`` as it was). The
    bytes are those of ``export_msccl(...).text``, but the document never exists in memory
    as a whole, which is what makes a 1,024-GPU schedule exportable in bounded memory.

    Raises
    ------
    ValidationError
        As :func:`export_msccl`; or ``path`` is a directory.
    """
    built, tried = _choose(
        instance,
        schedule,
        dialect=dialect,
        proto=proto,
        channels=channels,
        instances=instances,
        inplace=inplace,
        switches=switches,
    )
    size = _stream(path, built)
    return WrittenExport(Path(path), size, built.channels, built.inplace, tried)


def write_msccl_xml(path: str | Path, instance: Instance, schedule: Schedule, **options: Any) -> int:
    """:func:`to_msccl_xml` with the same keyword options, streamed atomically to ``path``.

    Returns
    -------
    int
        Bytes written (the length of ``to_msccl_xml(...)``, which is ASCII).

    Raises
    ------
    ValidationError
        As :func:`to_msccl_xml` (before ``path`` is touched); ``path`` is a directory.
    """
    settings: dict[str, Any] = {
        "dialect": "executor",
        "proto": "Simple",
        "channels": 1,
        "instances": 1,
        "inplace": True,
        "name": "ccplan",
        "switches": "collapse",
        "max_tbs": DEFAULT_MAX_TBS,
        "min_bytes": 0,
        "max_bytes": None,
    }
    unknown = sorted(set(options) - set(settings))
    if unknown:
        raise ValidationError(f"write_msccl_xml: unknown option(s) {', '.join(unknown)}")
    settings.update(options)
    return _stream(path, _build(instance, schedule, **settings))


def _stream(path: str | Path, built: _Built) -> int:
    """Write the lines of :func:`_render` to a staged file and rename it to ``path``."""
    target = Path(path)
    if target.is_dir():
        raise ValidationError(f"cannot write {str(target)!r}: it is a directory")
    tmp = staging_path(target)
    size = 0
    try:
        # newline="" keeps "\n" as is on every platform: the bytes equal to_msccl_xml's text.
        with tmp.open("w", encoding="ascii", newline="") as fh:
            for line in _render(built):
                fh.write(line)
                size += len(line)
        with sigint_blocked():
            tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return size
