"""A plan's numbers the way nccl-tests prints and a spreadsheet reads them: the terminal table
of ``ccplan plan`` (one per collective, ``size count type time(us) algbw busbw`` and an
``# Avg bus bandwidth`` line) and ``plan.csv`` (one row per cell).

nccl-tests' conventions (NVIDIA/nccl-tests, ``doc/PERFORMANCE.md`` and ``src/common.cu``):

- ``size`` is the larger of the send and receive buffers, which is ccplan's size for every
  collective here (the output of AllGather, the input of ReduceScatter, the buffer of
  AllReduce, Broadcast, Reduce and AllToAll);
- ``count`` is the element count passed to the NCCL call: ``size / sizeof(type)`` for
  AllReduce, Broadcast and Reduce, and per rank, ``size / sizeof(type) / n``, for AllGather,
  ReduceScatter and AllToAll (:data:`PER_RANK_COUNT`);
- ``time`` in microseconds with 2, 1 or 0 decimals below 100, below 10000 and above
  (:func:`nccl_time`); ``algbw = size / time`` and ``busbw = algbw x`` the collective's
  factor, both in GB/s with 2 decimals;
- ``# Avg bus bandwidth`` is the mean busbw over the sizes.

ccplan's times come from the alpha-beta model of the machine, not from a measurement; the
table says so. No data type is modelled: ``type`` is ``float`` (4 bytes), nccl-tests'
default, and only the ``count`` column depends on it.

This module formats; the numbers (busbw included, with the factor of
:data:`ccplan.pipeline.BUSBW_FACTORS`) come from :mod:`ccplan.plan`.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ccplan.parsing import parse_size, plain_number

__all__ = [
    "CSV_COLUMNS",
    "DTYPE",
    "DTYPE_BYTES",
    "PER_RANK_COUNT",
    "count_elements",
    "csv_text",
    "nccl_time",
    "table_lines",
]

DTYPE = "float"
"""The element type the ``count`` column assumes (nccl-tests' default ``-d float``)."""

DTYPE_BYTES = 4
"""Bytes of :data:`DTYPE`."""

PER_RANK_COUNT = frozenset({"allgather", "reducescatter", "alltoall"})
"""Collectives whose nccl-tests ``count`` is per rank (``size / sizeof(type) / n``): the
``sendcount`` of ncclAllGather, the ``recvcount`` of ncclReduceScatter, the count each rank
sends each peer in AllToAll."""

CSV_COLUMNS: tuple[str, ...] = (
    "collective",
    "size",
    "size_bytes",
    "count",
    "type",
    "method",
    "role",
    "best",
    "status",
    "chunks",
    "switch_model",
    "time_us",
    "algbw_GBps",
    "busbw_GBps",
    "physical_bound_us",
    "physical_gap",
    "slot_bound_us",
    "verified",
    "xml",
    "error",
)
"""Columns of ``plan.csv``: one row per cell (collective, size, method), failed cells too
(``status`` ``error``, or an engine status and no time; the reason in ``error``); ``best`` is ``yes`` on the
cell chosen for its (collective, size)."""


def _method(entry: Mapping[str, Any]) -> str:
    """The best entry's method, marked ``*`` when a baseline was the fastest."""
    return f"{entry['method']}*" if entry.get("role") == "baseline" else str(entry["method"])


def count_elements(collective: str, size_bytes: float, gpus: int) -> float:
    """nccl-tests' ``count`` column for ``size_bytes`` of :data:`DTYPE` on ``gpus`` ranks
    (fractional when the size does not divide, which nccl-tests would round down)."""
    count = size_bytes / DTYPE_BYTES
    return count / gpus if collective in PER_RANK_COUNT else count


def nccl_time(us: float | None) -> str:
    """A time in microseconds as nccl-tests prints it: 2 decimals below 100 us, 1 below
    10000 us, none above (``-`` for no time)."""
    if us is None or not math.isfinite(us):
        return "-"
    if us >= 10000:
        return f"{us:.0f}"
    return f"{us:.1f}" if us >= 100 else f"{us:.2f}"


def _bw(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _count(value: float) -> str:
    return str(int(value)) if value.is_integer() else plain_number(value, 6)


def _size_bytes(entry: Mapping[str, Any]) -> float:
    value = entry.get("size_bytes")
    return float(value) if isinstance(value, (int, float)) else parse_size(entry["size"])


def best_baseline(entry: Mapping[str, Any]) -> tuple[str, float] | None:
    """The fastest baseline beside a best entry: (method, time in us), or None."""
    times = [
        (b["makespan_us"], name)
        for name, b in (entry.get("baselines") or {}).items()
        if isinstance(b, Mapping) and isinstance(b.get("makespan_us"), (int, float))
    ]
    if not times:
        return None
    us, name = min(times)
    return name, float(us)


_HEAD = (
    f"{'size':>10}  {'count':>12}  {'type':>6}  {'time(us)':>9}  {'algbw':>7}  {'busbw':>7}  "
    f"{'bound(us)':>9}  {'gap':>6}  {'method':<12} {'C':>4}  best baseline (us)"
)
_UNITS = (
    f"{'':>10}  {'(elements)':>12}  {'':>6}  {'':>9}  {'(GB/s)':>7}  {'(GB/s)':>7}  "
    f"{'':>9}  {'':>6}"
)


def table_lines(
    collective: str, best: Sequence[Mapping[str, Any]], gpus: int, busbw_factor: float
) -> list[str]:
    """The terminal table of one collective: a header, one line per size (the best schedule
    of that size, or ``no schedule`` and why), ``# Avg bus bandwidth`` over the sizes that
    have a schedule (``N/A`` when none has).

    ``best`` holds the plan's best entries of ``collective`` in size order (``size``,
    ``size_bytes``, ``makespan_us``, ``algbw_GBps``, ``busbw_GBps``, ``physical_bound_us``,
    ``physical_gap``, ``method``, ``chunks``, ``baselines``; no ``method`` when the size has
    no schedule, ``error`` then says why).
    """
    lines = [
        f"# {collective}: busbw = algbw x {plain_number(busbw_factor)} (nccl-tests' factor, n = {gpus})",
        "#" + _HEAD[1:],
        "#" + _UNITS[1:].rstrip(),
    ]
    busbws: list[float] = []
    for entry in best:
        size = str(entry["size"])
        count = _count(count_elements(collective, _size_bytes(entry), gpus))
        lead = f"{size:>10}  {count:>12}  {DTYPE:>6}"
        if "method" not in entry:
            lines.append(f"{lead}  {'-':>9}  no schedule: {entry.get('error', 'no verified schedule')}")
            continue
        if isinstance(entry.get("busbw_GBps"), (int, float)) and math.isfinite(entry["busbw_GBps"]):
            busbws.append(float(entry["busbw_GBps"]))
        gap = entry.get("physical_gap")
        base = best_baseline(entry)
        chunks = entry.get("chunks")
        lines.append(
            f"{lead}  {nccl_time(entry.get('makespan_us')):>9}  {_bw(entry.get('algbw_GBps')):>7}  "
            f"{_bw(entry.get('busbw_GBps')):>7}  {nccl_time(entry.get('physical_bound_us')):>9}  "
            f"{'-' if gap is None else f'{gap:.1%}':>6}  {_method(entry):<12} "
            f"{'-' if chunks is None else chunks:>4}  "
            + ("-" if base is None else f"{base[0]} {nccl_time(base[1])}")
        )
    average = f"{sum(busbws) / len(busbws):.3f}" if busbws else "N/A"
    lines.append(f"# Avg bus bandwidth    : {average}")
    return lines


def csv_text(
    cells: Sequence[Mapping[str, Any]], best: Sequence[Mapping[str, Any]], gpus: int
) -> str:
    """``plan.csv``: a header of :data:`CSV_COLUMNS` and one row per cell, in the plan's
    order. Numbers are plain (``15000``, never ``1.5e+04``); an absent one is empty."""
    chosen = {(b["collective"], b["size"]): b for b in best if "method" in b}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for cell in cells:
        entry = chosen.get((cell["collective"], cell["size"]))
        is_best = (
            entry is not None
            and cell.get("role") == entry.get("role", "candidate")
            and entry["method"] == cell["method"]
        )
        size_bytes = _size_bytes(cell)
        values: dict[str, Any] = {
            "collective": cell["collective"],
            "size": cell["size"],
            "size_bytes": size_bytes,
            "count": count_elements(cell["collective"], size_bytes, gpus),
            "type": DTYPE,
            "method": cell["method"],
            "role": cell.get("role", ""),
            "best": "yes" if is_best else "no",
            "status": cell.get("status") or "error",
            "chunks": cell.get("chunks"),
            "switch_model": cell.get("switch_model"),
            "time_us": cell.get("makespan_us"),
            "algbw_GBps": cell.get("algbw_GBps"),
            "busbw_GBps": cell.get("busbw_GBps"),
            "physical_bound_us": cell.get("physical_bound_us"),
            "physical_gap": cell.get("physical_gap"),
            "slot_bound_us": cell.get("lower_bound_us"),
            "verified": cell.get("verified"),
            "xml": entry.get("xml") if is_best and entry is not None else None,
            "error": cell.get("error"),
        }
        writer.writerow([_csv_value(values[k]) for k in CSV_COLUMNS])
    return buffer.getvalue()


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 2**53 else plain_number(value, 10)
    return " ".join(str(value).split())
