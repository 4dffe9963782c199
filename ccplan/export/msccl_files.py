"""The XML files of a plan: per buffer mode the export options that validate, size ranges
that tile ``[0, inf)`` per collective, protocols by size, and the manifest.

:func:`choose_exports` finds, per buffer mode, the first option set of :data:`EXPORT_ATTEMPTS`
whose XML passes the validator; :func:`write_plan_xml` renders the files once all planned
sizes of a collective are known (their ranges depend on the neighbouring sizes) and writes
the manifest (docs/formats.md). :mod:`ccplan.plan` calls both.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ccplan.atomic import write_atomic
from ccplan.errors import CCPlanError

__all__ = ["EXPORT_ATTEMPTS", "MANIFEST", "choose_exports", "write_plan_xml"]

EXPORT_ATTEMPTS: tuple[Mapping[str, Any], ...] = (
    {"dialect": "executor", "inplace": True, "channels": 1},
    {"dialect": "executor", "inplace": False, "channels": 1},
    {"dialect": "executor", "inplace": True, "channels": 2},
    {"dialect": "executor", "inplace": False, "channels": 2},
    {"dialect": "executor", "inplace": True, "channels": 4},
    {"dialect": "executor", "inplace": False, "channels": 4},
    {"dialect": "executor", "inplace": True, "channels": 8},
    {"dialect": "executor", "inplace": False, "channels": 8},
    {"dialect": "legacy", "inplace": True, "channels": 1},
    {"dialect": "legacy", "inplace": False, "channels": 1},
    {"dialect": "legacy", "inplace": True, "channels": 4},
    {"dialect": "legacy", "inplace": False, "channels": 4},
)
"""MSCCL export options tried in order; per buffer mode, the first whose XML validates is kept.

Both buffer modes get the same sequence (a plan writes a file for each mode); more channels
spread chunks over more thread blocks when one block would exceed the executor's 64 steps;
the legacy runtime allows 256 steps per block.
"""


def choose_exports(
    instance: Any, schedule: Any, name: str
) -> tuple[dict[bool, tuple[Mapping[str, Any], int]], list[str]]:
    """Per buffer mode, the first option set of :data:`EXPORT_ATTEMPTS` whose XML validates.

    Returns
    -------
    (dict, list of str)
        ``{inplace: (options, nchunksperloop)}`` for each buffer mode (True = in-place) some
        attempt exported and the validator passed, and one line per failed attempt saying why.
        Nothing is written: :func:`write_plan_xml` renders the files once their size ranges
        are known.
    """
    from ccplan.export.msccl import to_msccl_xml
    from ccplan.export.xml_validate import validate_xml

    failures: list[str] = []
    chosen: dict[bool, tuple[Mapping[str, Any], int]] = {}
    for attempt in EXPORT_ATTEMPTS:
        if attempt["inplace"] in chosen:
            continue
        label = ", ".join(f"{k}={v}" for k, v in attempt.items())
        try:
            text = to_msccl_xml(
                instance,
                schedule,
                dialect=attempt["dialect"],
                inplace=attempt["inplace"],
                channels=attempt["channels"],
                name=name.replace("+", "_"),
            )
        except CCPlanError as exc:
            failures.append(f"{label}: export refused: {exc}")
            continue
        report = validate_xml(text, expect=instance, dialect=attempt["dialect"])
        if not report.ok:
            failures.append(f"{label}: validate-xml: {report.errors[0]}")
            continue
        chosen[attempt["inplace"]] = (attempt, int(report.stats["nchunksperloop"]))
    return chosen, failures


MANIFEST = "manifest.json"
"""The manifest's name in the plan directory (beside ``xml/``, not in it: RCCL and the MSCCL
executor parse every regular file of ``MSCCL_ALGO_DIR`` as an algorithm)."""


def write_plan_xml(out: Path, best_rows: Sequence[dict[str, Any]], ngpus: int, topology: str) -> Path:
    """Render the XML files of every exportable best schedule with their size ranges; manifest.

    Per (collective, dialect, buffer mode), the files of the planned sizes get ranges that
    tile ``[0, inf)`` (:func:`ccplan.export.msccl.size_ranges`, boundaries rounded to what the
    upper file can serve) and a protocol by size (:func:`ccplan.export.msccl.protocol_for`).
    In-place files are ``xml/<coll>_<size>.xml``, out-of-place ones ``..._op.xml`` (RCCL's
    naming); files that only the legacy dialect accepts go to ``xml/legacy/``, so that
    ``xml/`` holds what RCCL and the executor load. Each entry of ``best_rows`` gets ``xml``
    (the in-place file, else the out-of-place one), ``xml_options`` and ``xml_files``.
    Files listed in a previous manifest of ``out`` and not written again are removed (their
    ranges would overlap the new ones). The manifest (docs/formats.md) is written atomically.

    Returns
    -------
    Path
        The manifest.
    """
    from ccplan.export.msccl import DIALECTS, byte_granularity, protocol_for, size_ranges, write_msccl_xml

    Member = tuple[dict[str, Any], Mapping[str, Any], int]
    groups: dict[tuple[str, str, bool], list[Member]] = defaultdict(list)
    for entry in best_rows:
        for inplace, (options, k) in sorted(entry.get("_exports", {}).items(), reverse=True):
            groups[(entry["collective"], options["dialect"], inplace)].append((entry, options, k))
    files: list[dict[str, Any]] = []
    for (coll, dialect, inplace), members in groups.items():
        members.sort(key=lambda m: m[0]["_instance"].size_bytes)
        sizes = [round(m[0]["_instance"].size_bytes) for m in members]
        # Two spellings of one size ("1MB", "1000KB") would compete for every call: keep the first.
        keep = [i for i, s in enumerate(sizes) if i == 0 or s != sizes[i - 1]]
        members = [members[i] for i in keep]
        sizes = [sizes[i] for i in keep]
        ranges = size_ranges(sizes, [byte_granularity(coll, ngpus, k) for _, _, k in members])
        for (entry, options, k), rng, size in zip(members, ranges, sizes, strict=True):
            proto, note = protocol_for(size, ngpus)
            stem = f"{coll}_{_slug(entry['size'])}" + ("" if inplace else "_op")
            rel = Path("xml") / ("" if dialect == "executor" else dialect) / f"{stem}.xml"
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            write_msccl_xml(
                out / rel,
                entry["_instance"],
                entry["_schedule"],
                dialect=dialect,
                inplace=inplace,
                channels=options["channels"],
                proto=proto,
                min_bytes=rng.min_bytes,
                max_bytes=rng.max_bytes,
                name=stem.replace("+", "_"),
            )
            record = {
                "path": rel.as_posix(),
                "collective": coll,
                "coll": DIALECTS[dialect].coll_names[coll],
                "dialect": dialect,
                "ngpus": ngpus,
                "min_bytes": rng.min_bytes,
                "max_bytes": rng.max_bytes,
                "inplace": inplace,
                "outofplace": not inplace,
                "proto": proto,
                "proto_note": note,
                "nchannels": options["channels"],
                "instances": 1,
                "nchunksperloop": k,
                "size": entry["size"],
                "size_bytes": size,
                "method": entry["method"],
                "chunks": entry.get("chunks"),
                "makespan_us": entry["makespan_us"],
                "lower_bound_us": entry.get("lower_bound_us"),
                "physical_bound_us": entry.get("physical_bound_us"),
                "physical_gap": entry.get("physical_gap"),
                "verified": True,
                "schedule": entry.get("schedule"),
            }
            files.append(record)
            entry.setdefault("xml_files", []).append(record["path"])
            if entry.get("xml") is None:
                entry["xml"], entry["xml_options"] = record["path"], dict(options)
    files.sort(key=lambda f: (f["collective"], f["dialect"], not f["inplace"], f["min_bytes"]))
    manifest = out / MANIFEST
    written = {f["path"] for f in files}
    try:
        previous = json.loads(manifest.read_text()).get("files", [])
    except (OSError, ValueError, AttributeError):
        previous = []
    for old in previous:
        path = old.get("path") if isinstance(old, dict) else None
        stale = isinstance(path, str) and path not in written and path.startswith("xml/")
        if stale and str(path).endswith(".xml"):
            (out / str(path)).unlink(missing_ok=True)
    not_exported = [
        {"collective": e["collective"], "size": e["size"], "buffer_mode": mode}
        for e in best_rows
        if e.get("method")
        for inplace, mode in ((True, "in-place"), (False, "out-of-place"))
        if inplace not in e.get("_exports", {})
    ]
    write_atomic(
        manifest,
        json.dumps(
            {
                "format": "ccplan-msccl-manifest",
                "version": 1,
                "topology": topology,
                "ngpus": ngpus,
                "files": files,
                "not_exported": not_exported,
            },
            indent=1,
        )
        + "\n",
    )
    return manifest


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
