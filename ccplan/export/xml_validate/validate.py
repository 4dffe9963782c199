"""The entry point :func:`validate_xml`: the checks of the package doc, in order.

Parse, structure and limits, the happens-before graph (dependencies, connections, deadlock),
then, only on a structurally sound document, races and the buffer replay.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import IO, Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.export.msccl.dialects import COLL_TO_KIND, DEFAULT_MAX_TBS, DIALECTS, Dialect
from ccplan.export.xml_validate.graph import _check_dependencies, _find_cycle, _Graph, _match_connections
from ccplan.export.xml_validate.parsing import _open_source, _parse, _Scanner
from ccplan.export.xml_validate.races import _Canon, _check_races
from ccplan.export.xml_validate.replay import _expected_layout, _quiet_ranks, _simulate
from ccplan.export.xml_validate.report import XmlReport, _Errors
from ccplan.export.xml_validate.structure import _check_structure
from ccplan.instances.instance import Instance


def validate_xml(
    text_or_path: str | Path,
    *,
    expect: Instance | None = None,
    dialect: str = "executor",
    max_tbs: int = DEFAULT_MAX_TBS,
) -> XmlReport:
    """Check an MSCCL algorithm XML (see the package doc for the list of checks).

    The document is read as a stream (``iterparse``, every ``<tb>`` cleared once read): the
    memory is the per-step columns and the happens-before graph in numpy arrays, plus the
    buffer contents of the simulation, not the document or an object per step.

    Parameters
    ----------
    text_or_path : str or Path
        XML text (starts with ``<``) or a file path.
    expect : Instance, optional
        Check the postcondition of this instance (buffer layout as :func:`to_msccl_xml`
        writes it, ranks = ``expect.topology.gpus``); otherwise the collective named by
        ``coll`` with the standard MSCCL layout.
    dialect : {"executor", "legacy"}
        Which runtime's limits apply (steps per thread block, required attributes).
    max_tbs : int
        Thread blocks per GPU that can be co-resident (SM count).

    Returns
    -------
    XmlReport
    """
    if dialect not in DIALECTS:
        raise ValidationError(f"dialect must be one of {tuple(DIALECTS)}, got {dialect!r}")
    dia = DIALECTS[dialect]
    source, close = _open_source(text_or_path)
    try:
        return _validate(source, expect, dia, max_tbs)
    finally:
        if close:
            source.close()


def _validate(source: IO[str], expect: Instance | None, dia: Dialect, max_tbs: int) -> XmlReport:
    scanner = _Scanner(source)
    errs = _Errors()
    stats: dict[str, Any] = {}
    body = _Errors()
    status, header, doc, sizes, _ = _parse(scanner, dia, body)
    # The format notes come first, whatever the parse found after them.
    if scanner.prolog:
        errs.add("format", "an <?xml ...?> prolog is not understood by the executor's tokenizer")
    if scanner.multiline is not None:
        errs.add(
            "format",
            f"element at line {scanner.multiline} spans several lines; the executor's tokenizer "
            "needs each element's attributes on one line",
        )
    errs.items += body.items
    if status != "ok":
        return XmlReport(False, tuple(errs.items), stats)
    assert header is not None
    ngpus, nchannels, k_total, coll, inplace = (
        header.ngpus,
        header.nchannels,
        header.k_total,
        header.coll,
        header.inplace,
    )
    stats.update(ngpus=ngpus, nchannels=nchannels, nchunksperloop=k_total, coll=coll, inplace=inplace)
    for g in range(ngpus):
        if g not in sizes:
            errs.add("attribute", f'no <gpu id="{g}"> element', gpu=g)
            sizes[g] = {"i": 0, "o": 0, "s": 0}
    col = doc.finish()
    n = len(col["s"])
    _check_structure(doc, col, sizes, ngpus, nchannels, dia.max_steps, max_tbs, dia.max_tb_id, errs)
    per_tb = Counter(doc.tb_gpu)
    nop = doc.code.get("nop", -1)
    stats.update(
        tbs_max=max((per_tb.get(g, 0) for g in range(ngpus)), default=0),
        steps_max=max(doc.tb_count, default=0),
        steps_total=n,
        nops=int(np.count_nonzero(col["type"] == nop)),
    )
    structural = bool(errs.items)
    if any(doc.tb_incomplete):
        # Matching sends to receives and ordering them needs every step: with one unreadable,
        # each later check would report a consequence of the same missing attribute.
        return XmlReport(False, tuple(errs.items), stats)

    # ------------------------------------------------------------------ graph
    # (gpu, tb id) -> record; a repeated id keeps the last block, as a dict would.
    tb_map: dict[tuple[int, int], int] = {}
    for index, key in enumerate(zip(doc.tb_gpu, doc.tb_id, strict=True)):
        tb_map[key] = index
    winner = np.zeros(len(doc.tb_id), dtype=bool)
    winner[list(tb_map.values())] = True
    rec = col["rec"]
    same_next = (rec[1:] == rec[:-1]) & winner[rec[:-1]] if n else np.zeros(0, bool)
    prog_src = np.flatnonzero(same_next)
    edge_src = [prog_src]
    edge_dst = [prog_src + 1]
    dep_src, dep_dst = _check_dependencies(doc, col, tb_map, errs)
    edge_src.append(dep_src)
    edge_dst.append(dep_dst)
    snd, rcv = _match_connections(doc, col, tb_map, errs)
    edge_src.append(snd)
    edge_dst.append(rcv)
    stats["transfers"] = len(snd)
    graph = _Graph(n, np.concatenate(edge_src), np.concatenate(edge_dst))
    level, cyclic = graph.levels()
    if len(cyclic):
        cycle = _find_cycle(cyclic, graph)
        names = [f"GPU {col['gpu'][v]} tb {col['tb'][v]} step {col['s'][v]}" for v in cycle]
        gpus_in = sorted({int(col["gpu"][v]) for v in cycle})
        first = cycle[0]
        span = (
            "across GPUs " + ", ".join(map(str, gpus_in)) if len(gpus_in) > 1 else f"within GPU {gpus_in[0]}"
        )
        errs.add(
            "cycle",
            f"happens-before cycle {span} (deadlock): "
            + " -> ".join(names[:12])
            + (" ..." if len(names) > 12 else ""),
            int(col["gpu"][first]),
            int(col["tb"][first]),
            int(col["s"][first]),
        )
        return XmlReport(False, tuple(errs.items), stats)
    stats["critical_path"] = int(level.max()) + 1 if n else 0
    if structural or any(e.kind in ("unmatched", "dependency") for e in errs.items):
        return XmlReport(False, tuple(errs.items), stats)

    # ------------------------------------------------------------------ races and simulation
    kind = COLL_TO_KIND.get(coll)
    order = np.lexsort((np.arange(n), level))
    max_size = max((v for sz in sizes.values() for v in sz.values()), default=0)
    canon = _Canon(kind or "", inplace, ngpus, k_total, doc, max_size)
    _check_races(doc, col, graph, level, canon, errs)
    try:
        layout, factor = _expected_layout(
            expect,
            kind,
            coll,
            ngpus,
            k_total,
            inplace,
            lambda receives: _quiet_ranks(doc, col, ngpus, receives),
        )
    except ValidationError as exc:
        errs.add("postcondition", f"cannot derive the expected result: {exc}")
        return XmlReport(False, tuple(errs.items), stats)
    _simulate(doc, col, order, snd, rcv, layout, factor, canon, errs)
    return XmlReport(not errs.items, tuple(errs.items), stats)
