"""Plan a machine: for every collective and size, the best verified schedule, its bound, the
MSCCL XML files the runtime loads, and one report that sets it beside ring/tree baselines.

:func:`run_plan` is the library call behind ``ccplan plan``. A plan is the grid

    collectives x sizes x (candidate methods + baselines)

Every cell is one :func:`ccplan.pipeline.solve` call (so every schedule has been verified
independently and carries the lower bound), run by the sweep executor
(:func:`ccplan.sweep._local_results` / :func:`ccplan.sweep._dask_results`): local worker
processes, or a Dask cluster given its scheduler address. The time budget is per cell (the
engine's own time limit).

For each (collective, size), the *best* is the verified schedule with the smallest makespan,
a candidate's on a tie; a baseline that is strictly faster than every candidate is the best
(its ``role`` says so): the user gets the fastest schedule we can verify and export (a faster
one that no export option can write is passed over and listed in ``faster_without_xml``). It is
exported to MSCCL XML, in-place and out-of-place, each with the first option set of
:data:`EXPORT_ATTEMPTS` for that buffer mode whose XML passes
:func:`ccplan.export.xml_validate.validate_xml` against the instance; the report names the
set used. No XML is written that did not pass. Per collective and buffer mode the files' size
ranges tile ``[0, inf)`` and each states its protocol (:func:`write_plan_xml`), so a runtime
given ``xml/`` runs the file planned nearest to each call.

Output directory layout::

    report.md                     the report (tables, plots)
    report.html                   the same, one self-contained page (pictures embedded)
    plan.json                     every cell's numbers, the options used, the files written
    manifest.json                 every XML file: collective, size range, buffer mode, protocol,
                                  channels, the schedule and its numbers (docs/formats.md)
    plan.csv                      one row per cell, nccl-tests' columns (ccplan.export.nccl_table)
    xml/<coll>_<size>.xml         MSCCL algorithm of the best schedule, in-place calls
    xml/<coll>_<size>_op.xml      the same for out-of-place calls
    xml/legacy/...                files only legacy MSCCL accepts (not loaded from xml/)
    schedules/<coll>_<size>.json  the best schedule (``ccplan verify`` / ``export`` read it)
    img/*.png                     algbw/busbw vs size, Gantt and utilisation of the best schedule
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ccplan.errors import CCPlanError, SolveInterrupted, ValidationError
from ccplan.export.msccl_files import EXPORT_ATTEMPTS, choose_exports, write_plan_xml
from ccplan.export.nccl_table import csv_text
from ccplan.instances.topology import Topology
from ccplan.parsing import plain_number
from ccplan.pipeline.solve import BUSBW_FACTORS, ROW_FIELDS, Result

log = logging.getLogger(__name__)

__all__ = [
    "EXPORT_ATTEMPTS",
    "PLAN_COLLECTIVES",
    "PlanRequest",
    "PlanResult",
    "choose_exports",
    "plan_cell",
    "run_plan",
    "write_plan_xml",
]

PLAN_COLLECTIVES: tuple[str, ...] = (
    "allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce"
)
"""Collectives a plan accepts: those the MSCCL exporter maps to a runtime collective."""

@dataclass(frozen=True)
class PlanRequest:
    """What to plan.

    Parameters
    ----------
    topology : Topology
        The machine (a built-in, a JSON file, or an import).
    collectives : tuple of str
        E.g. ``("allgather", "allreduce")``.
    sizes : tuple of str
        Output buffer sizes (``"64KB"``, ``"1MB"`` ...).
    methods : tuple of str
        Candidates for the best schedule (default the heuristic search and the exact engine).
    baselines : tuple of str
        Reported beside the best (ring, tree); skipped for collectives they do not implement.
    chunks : int
        Chunks per contribution C.
    time_limit : float
        Seconds per cell (the engine's own limit).
    workers : int
        CP-SAT workers per cell.
    root : int, optional
        Root of rooted collectives.
    tau_rule, alpha_threshold
        Slotting, as ``ccplan solve``.
    switch_reduce : bool
        Switches add partial sums themselves (``--switch-reduce``; MSCCL XML cannot express a
        schedule that uses it, so such a cell gets no XML).
    """

    topology: Topology
    collectives: tuple[str, ...]
    sizes: tuple[str, ...]
    methods: tuple[str, ...] = ("heuristic", "milp")
    baselines: tuple[str, ...] = ("ring", "tree")
    chunks: int | str = "auto"
    time_limit: float = 10.0
    workers: int = 1
    root: int | None = None
    tau_rule: str = "fastest"
    alpha_threshold: float = 0.1
    switch_reduce: bool = False

    def __post_init__(self) -> None:
        from ccplan.instances import make_collective, make_instance
        from ccplan.instances.catalog import ROOTED
        from ccplan.instances.instance import parse_size
        from ccplan.parsing import float_value, int_value, show
        from ccplan.pipeline import get_engine

        # Everything a cell would refuse is refused here, before any cell runs, with the
        # checks `ccplan solve` applies to the same values (an error row per cell otherwise).
        if not isinstance(self.topology, Topology):
            raise ValidationError(f"plan: topology must be a Topology, got {type(self.topology).__name__}")
        for name in ("collectives", "sizes", "methods", "baselines"):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, (tuple, list)):
                # a bare string would be split into its letters
                raise ValidationError(f"plan: {name} must be a list of strings, got {show(value)}")
            if any(not isinstance(v, str) or not v for v in value):
                raise ValidationError(f"plan: {name} must be a list of non-empty strings, got {show(value)}")
            object.__setattr__(self, name, tuple(value))
        if not self.collectives:
            raise ValidationError("plan: give at least one collective")
        if not self.sizes:
            raise ValidationError("plan: give at least one size")
        if not self.methods:
            raise ValidationError("plan: give at least one method")
        if len(self.topology.gpus) < 2:
            # refused before any file is written: every cell would be empty (a one-GPU machine)
            raise ValidationError(
                f"plan: topology {self.topology.name!r} has {len(self.topology.gpus)} GPU(s); "
                "a collective needs at least two, so there is nothing to plan"
            )
        if self.chunks != "auto":
            int_value(self.chunks, "plan: chunks", low=1)
        if self.root is not None:
            int_value(self.root, "plan: root")
        float_value(self.time_limit, "plan: time_limit", positive=True)
        int_value(self.workers, "plan: workers", low=1)
        float_value(self.alpha_threshold, "plan: alpha_threshold", low=0)
        _no_duplicates("collectives", self.collectives)
        _no_duplicates("methods", self.methods)
        _no_duplicates("baselines", self.baselines)
        _no_duplicates("sizes", [parse_size(size) for size in self.sizes], shown=self.sizes)
        for coll in self.collectives:
            if coll not in PLAN_COLLECTIVES:
                raise ValidationError(
                    f"plan: collective {show(coll)} has no MSCCL mapping "
                    f"(choose from {', '.join(PLAN_COLLECTIVES)})"
                )
        if self.root is not None and not any(c in ROOTED for c in self.collectives):
            rooted = ", ".join(sorted(c for c in ROOTED if c in PLAN_COLLECTIVES))
            raise ValidationError(
                f"plan: root {self.root}: none of {', '.join(self.collectives)} takes a root "
                f"(root applies to {rooted})"
            )
        for coll in self.collectives:
            first = _first_chunks(self.chunks)
            collective = make_collective(coll, self.topology, chunks=first, root=self.root)
            for size in self.sizes:
                try:
                    make_instance(
                        self.topology,
                        collective,
                        size,
                        tau_rule=self.tau_rule,
                        alpha_threshold=self.alpha_threshold,
                        switch_reduce=self.switch_reduce,
                    )
                except ValidationError as exc:
                    raise ValidationError(f"plan: {coll} at size {size}: {exc}") from None
        for method in (*self.methods, *self.baselines):
            get_engine(method)


def _no_duplicates(name: str, values: Sequence[Any], shown: Sequence[str] | None = None) -> None:
    """Refuse a value listed twice (its cells would run twice and write the same files)."""
    seen: dict[Any, int] = {}
    for i, value in enumerate(values):
        if value in seen:
            first = (shown or values)[seen[value]]
            again = (shown or values)[i]
            same = "" if first == again else f" (the same as {first!r})"
            raise ValidationError(f"plan: {name} lists {again!r} twice{same}")
        seen[value] = i


# ============================================================================ one cell


def _first_chunks(chunks: int | str) -> int:
    """The chunk count a request's checks build with (``auto`` starts at C = 1)."""
    return 1 if chunks == "auto" else int(chunks)


def plan_cell(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Solve one cell in a worker and return its row, with the schedule JSON when verified.

    Never raises: a failure goes to ``row["error"]`` so that one bad cell does not lose the
    others.
    """
    from ccplan.contract import SolveOptions
    from ccplan.errors import SolveInterrupted
    from ccplan.instances import make_collective, make_instance
    from ccplan.pipeline.chunks import solve_auto_chunks
    from ccplan.pipeline.solve import solve

    row: dict[str, Any] = {k: payload[k] for k in ("key", "collective", "size", "method", "role")}
    try:
        topo = Topology.from_dict(payload["topology"])

        def build(chunks: int) -> Any:
            coll = make_collective(payload["collective"], topo, chunks=chunks, root=payload["root"])
            return make_instance(
                topo,
                coll,
                payload["size"],
                tau_rule=payload["tau_rule"],
                alpha_threshold=payload["alpha_threshold"],
                # what the machine does, as its topology states (built-ins: the paper's default)
                switch_model=topo.switch_model or "store-and-forward",
                switch_reduce=bool(payload.get("switch_reduce", False)),
            )

        options = SolveOptions(time_limit=payload["time_limit"], workers=payload["workers"], seed=0)
        try:
            if payload["chunks"] == "auto":
                # C doubled against the physical bound within the cell's time (pipeline.chunks)
                instance, result = solve_auto_chunks(build, payload["method"], options)
            else:
                instance = build(int(payload["chunks"]))
                result = solve(instance, payload["method"], options)
        except SolveInterrupted as exc:
            # Ctrl-C contract (ccplan/errors.py): keep the verified best-so-far, tell the caller to stop.
            row["interrupted"] = True
            row["status"] = "interrupted"
            partial = cast("Result | None", exc.result)
            if partial is not None:
                _fill(row, partial, partial.instance)  # the instance of the C it ran
            return row
        _fill(row, result, instance)
        if result.details.get("interrupted"):
            row["interrupted"] = True
    except Exception as exc:  # reported in the table, the other cells go on
        row["status"] = "error"
        row["error"] = f"{type(exc).__name__}: {exc}"
        log.debug("plan cell %s failed", payload.get("key"), exc_info=True)
    return row


def _fill(row: dict[str, Any], result: Any, instance: Any) -> None:
    data = result.to_dict(instance)
    # what is proven and in which model, and the distance to the physics (any chunking)
    for k in (*ROW_FIELDS, "chunks"):
        row[k] = data[k]
    row["lower_bound_us"] = result.lower_bound_slots * instance.tau_us
    if row.get("role") == "baseline":
        from ccplan.heuristics.baselines import baseline_label

        row["label"] = baseline_label(row["method"], result.details)  # "NCCL-style ring (k channels)"
    row["size_bytes"] = instance.size_bytes
    if result.schedule is not None and result.verified:
        row["schedule"] = result.schedule.to_dict(instance)


def _payloads(request: PlanRequest) -> list[dict[str, Any]]:
    from ccplan.heuristics.baselines import supports

    topo = request.topology.to_dict()
    out = []
    roles = [(m, "candidate") for m in request.methods]
    for coll in request.collectives:
        cell_roles = roles + [(b, "baseline") for b in request.baselines if supports(b, coll)]
        for size in request.sizes:
            for method, role in cell_roles:
                out.append(
                    {
                        "key": f"{coll}|{size}|{method}|{role}",
                        "collective": coll,
                        "size": size,
                        "method": method,
                        "role": role,
                        "topology": topo,
                        "chunks": request.chunks,
                        "root": request.root,
                        "time_limit": request.time_limit,
                        "workers": request.workers,
                        "tau_rule": request.tau_rule,
                        "alpha_threshold": request.alpha_threshold,
                        "switch_reduce": request.switch_reduce,
                    }
                )
    return out


# ============================================================================ export


# ============================================================================ the plan


@dataclass(frozen=True)
class PlanResult:
    """What :func:`run_plan` wrote.

    Attributes
    ----------
    out_dir : Path
    report : Path
        The markdown report.
    rows : tuple of dict
        One per cell (without schedules), as in ``plan.json``.
    best : tuple of dict
        One per (collective, size): best method, numbers, XML file and export options.
    """

    out_dir: Path
    report: Path
    rows: tuple[Mapping[str, Any], ...]
    best: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)

    @property
    def xml_files(self) -> list[Path]:
        """The MSCCL XML files written, every buffer mode and dialect (each passed the validator)."""
        return [
            self.out_dir / path
            for b in self.best
            for path in (b.get("xml_files") or ([b["xml"]] if b.get("xml") else []))
        ]


def _ring_label(best: Sequence[Mapping[str, Any]]) -> str:
    """The ring baseline as its runs named it ("NCCL-style ring (6 channels)"), else "ring"."""
    for b in best:
        label = (b.get("baselines") or {}).get("ring", {}).get("label")
        if label:
            return str(label)
    return "ring"


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def _execute(
    payloads: list[dict[str, Any]], dask_address: str | None, processes: int
) -> Iterator[dict[str, Any]]:
    from ccplan.sweep import _dask_results, _local_results

    if dask_address:
        return _dask_results(payloads, dask_address, cell=plan_cell)
    return _local_results(payloads, processes, cell=plan_cell)


def run_plan(
    request: PlanRequest,
    out_dir: str | Path,
    *,
    dask_address: str | None = None,
    processes: int = 1,
    plots: bool = True,
    on_row: Callable[[Mapping[str, Any]], None] | None = None,
) -> PlanResult:
    """Run every cell, pick the best verified schedule per (collective, size), export, report.

    Parameters
    ----------
    request : PlanRequest
    out_dir : path
        Created if missing; files of a previous plan in it are overwritten.
    dask_address : str, optional
        Dask scheduler address; run the cells there instead of local processes.
    processes : int
        Local worker processes (1 = in this process).
    plots : bool
        Draw the pictures (needs matplotlib; without it the report says so).
    on_row : callable, optional
        Called with every finished cell's row (progress display).

    Raises
    ------
    ValidationError
        ``out_dir`` cannot be created; ``processes`` not positive.
    """
    from ccplan.schedule import Schedule, save_schedule

    if not isinstance(processes, int) or processes < 1:
        raise ValidationError(f"processes must be a positive integer, got {processes!r}")
    out = Path(out_dir)
    try:
        for sub in ("xml", "schedules", "img"):
            (out / sub).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValidationError(f"cannot create plan directory {str(out)!r}: {exc.strerror or exc}") from None
    payloads = _payloads(request)
    rows: list[dict[str, Any]] = []
    interrupted = False
    try:
        for row in _execute(payloads, dask_address, processes):
            rows.append(row)
            if on_row is not None:
                on_row(row)
            if row.get("interrupted"):
                interrupted = True
                break
    except KeyboardInterrupt:
        # Ctrl-C between cells (or in the parent of worker processes): report what finished.
        interrupted = True
    order = {p["key"]: i for i, p in enumerate(payloads)}
    rows.sort(key=lambda r: order[r["key"]])
    n = len(request.topology.gpus)
    for r in rows:
        algbw = r.get("algbw_GBps")
        factor = BUSBW_FACTORS.get(r["collective"])
        r["busbw_GBps"] = None if algbw is None else algbw * (1.0 if factor is None else factor(n))

    best_rows: list[dict[str, Any]] = []
    for coll in request.collectives:
        for size in request.sizes:
            cell = [r for r in rows if r["collective"] == coll and r["size"] == size]
            if not cell:
                continue
            verified = [r for r in cell if r.get("schedule") is not None]
            entry: dict[str, Any] = {"collective": coll, "size": size}
            if not verified:
                entry["error"] = "no method produced a verified schedule"
                best_rows.append(entry)
                continue
            preference = [*request.methods, *request.baselines]
            # the fastest verified schedule, whoever made it (a candidate's on a tie), that the
            # runtime can load: one without any XML is passed over for the next (and said so)
            ranked = sorted(
                verified,
                key=lambda r: (r["makespan_us"], r["role"] != "candidate", preference.index(r["method"])),
            )
            stem = f"{coll}_{_slug(size)}"
            passed_over: list[dict[str, Any]] = []
            first_failures: list[str] | None = None
            for best in ranked:
                instance, schedule = Schedule.from_dict(best["schedule"])
                exports, failures = choose_exports(instance, schedule, stem)
                if exports:
                    break
                first_failures = first_failures if first_failures is not None else failures
                passed_over.append(
                    {"method": best["method"], "makespan_us": best["makespan_us"],
                     "reason": failures[0] if failures else "no XML"}
                )  # fmt: skip
            else:  # nothing exports: the fastest, without XML (its reasons in xml_failures)
                best, passed_over = ranked[0], []
                instance, schedule = Schedule.from_dict(best["schedule"])
                exports, failures = {}, first_failures or []
            # The tightest bound any cell of the same chunk count proved holds for every schedule
            # of this instance (a slot bound at another C, which --chunks auto may pick, does not).
            bound_slots = max(
                r["lower_bound_slots"]
                for r in cell
                if r.get("lower_bound_slots") is not None and r.get("chunks") == best.get("chunks")
            )
            sched_path = out / "schedules" / f"{stem}.json"
            save_schedule(sched_path, instance, schedule)
            gap = (
                (best["makespan_slots"] - bound_slots) / best["makespan_slots"]
                if best["makespan_slots"]
                else 0.0
            )
            entry.update(
                method=best["method"],
                role=best["role"],
                faster_without_xml=passed_over,
                status=best["status"],
                makespan_us=best["makespan_us"],
                makespan_slots=best["makespan_slots"],
                lower_bound_slots=bound_slots,
                lower_bound_us=bound_slots * best["tau_us"],
                gap=gap,
                algbw_GBps=best["algbw_GBps"],
                busbw_GBps=best["busbw_GBps"],
                chunks=best.get("chunks"),
                switch_model=best.get("switch_model"),
                physical_bound_us=best.get("physical_bound_us"),
                physical_gap=best.get("physical_gap"),
                claim=best.get("claim"),
                schedule=str(sched_path.relative_to(out)),
                xml=None,
                xml_options=None,
                xml_files=[],
                xml_failures=failures,
                baselines={
                    r["method"]: {
                        k: r.get(k) for k in ("makespan_us", "algbw_GBps", "busbw_GBps", "error", "label")
                    }
                    for r in cell
                    if r["role"] == "baseline"
                },
                _instance=instance,
                _schedule=schedule,
                _exports=exports,
            )
            best_rows.append(entry)
    write_plan_xml(out, best_rows, n, request.topology.name)

    images: dict[str, list[str]] = {}
    plot_note = None
    if plots:
        try:
            images = _draw(request, rows, best_rows, out)
        except CCPlanError as exc:
            plot_note = str(exc)
    public_best = [{k: v for k, v in b.items() if not k.startswith("_")} for b in best_rows]
    public_rows = [{k: v for k, v in r.items() if k != "schedule"} for r in rows]
    report = out / "report.md"
    note = None
    if interrupted:
        note = f"Interrupted: {len(rows)} of {len(payloads)} cells finished; the others are missing."
    _write_text(report, _markdown(request, public_rows, public_best, images, plot_note, note))
    _write_text(out / "report.html", _html(request, public_rows, best_rows, plots, plot_note, note))
    _write_text(
        out / "plan.json",
        json.dumps(
            {
                "topology": request.topology.name,
                "gpus": n,
                "request": {
                    "collectives": list(request.collectives),
                    "sizes": list(request.sizes),
                    "methods": list(request.methods),
                    "baselines": list(request.baselines),
                    "chunks": request.chunks,
                    "time_limit": request.time_limit,
                    "workers": request.workers,
                },
                "best": public_best,
                "cells": public_rows,
                "images": images,
            },
            indent=1,
        )
        + "\n",
    )
    _write_text(out / "plan.csv", csv_text(public_rows, public_best, n))
    result = PlanResult(out_dir=out, report=report, rows=tuple(public_rows), best=tuple(public_best))
    if interrupted:
        raise SolveInterrupted(
            f"plan interrupted after {len(rows)} of {len(payloads)} cells; their report -> {report}", result
        )
    return result


def _write_text(path: Path, text: str) -> None:
    # staged and renamed; a failed write (a full disk) removes the staged file
    from ccplan.atomic import write_atomic

    write_atomic(path, text)


# ============================================================================ pictures and report


def _draw(
    request: PlanRequest, rows: list[dict[str, Any]], best_rows: list[dict[str, Any]], out: Path
) -> dict[str, list[str]]:
    """Per collective: algbw and busbw vs size (one line per method); Gantt and utilisation
    of the best schedule at the largest size. Returns collective -> image paths (relative)."""
    from ccplan.export import plots
    from ccplan.instances.instance import parse_size

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CCPlanError("plots need matplotlib, which is not installed: pip install matplotlib") from None
    images: dict[str, list[str]] = {}
    for coll in request.collectives:
        files: list[str] = []
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        for method in (*request.methods, *request.baselines):
            pts = sorted(
                (parse_size(r["size"]), r["algbw_GBps"], r["busbw_GBps"])
                for r in rows
                if r["collective"] == coll and r["method"] == method and r.get("algbw_GBps") is not None
            )
            if not pts:
                continue
            xs = [p[0] for p in pts]
            style = "-o" if method in request.methods else "--s"
            axes[0].plot(xs, [p[1] for p in pts], style, label=method)
            axes[1].plot(xs, [p[2] for p in pts], style, label=method)
        for ax, what in zip(axes, ("algbw", "busbw"), strict=True):
            ax.set_xscale("log")
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel(f"{what} (GB/s)")
            ax.set_title(f"{coll}: {what} vs size")
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize="small")
        fig.tight_layout()
        bw_path = out / "img" / f"{coll}_bandwidth.png"
        fig.savefig(bw_path, dpi=110)
        plt.close(fig)
        files.append(str(bw_path.relative_to(out)))
        ok = [b for b in best_rows if b["collective"] == coll and "_schedule" in b]
        if ok:
            largest = max(ok, key=lambda b: parse_size(b["size"]))
            stem = f"{coll}_{_slug(largest['size'])}"
            for kind, func in (("gantt", plots.gantt), ("utilization", plots.utilization)):
                path = out / "img" / f"{stem}_{kind}.png"
                func(largest["_instance"], largest["_schedule"], path)
                files.append(str(path.relative_to(out)))
        images[coll] = files
    return images


def _html(
    request: PlanRequest,
    rows: Sequence[Mapping[str, Any]],
    best_rows: Sequence[Mapping[str, Any]],
    plots: bool,
    plot_note: str | None,
    note: str | None,
) -> str:
    """The self-contained ``report.html``: the report's tables, its pictures embedded."""
    from ccplan.export.report_html import render_html

    topo = request.topology
    return render_html(
        {
            "topology": topo.name,
            "gpus": len(topo.gpus),
            "switches": len(topo.switches),
            "links": topo.num_links,
            "request": {
                "collectives": list(request.collectives),
                "sizes": list(request.sizes),
                "methods": list(request.methods),
                "baselines": list(request.baselines),
                "chunks": request.chunks,
                "time_limit": request.time_limit,
            },
            "best": best_rows,
            "cells": rows,
            "plots": plots,
            "plot_note": plot_note,
            "note": note,
        }
    )


def _num(value: Any, spec: str = ".4g") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if spec == ".4g" and isinstance(value, (int, float)):
        return plain_number(value)  # 15000, never 1.5e+04
    return format(value, spec)


def _switch_words(topo: Topology) -> str:
    """The switch model every cell uses, and why (plan takes what the topology states)."""
    if topo.switch_model is not None:
        return f"{topo.switch_model}, as the topology states"
    return "store-and-forward, the default: the topology states no switch model"


def _markdown(
    request: PlanRequest,
    rows: Sequence[Mapping[str, Any]],
    best: Sequence[Mapping[str, Any]],
    images: Mapping[str, list[str]],
    plot_note: str | None,
    note: str | None = None,
) -> str:
    topo = request.topology
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    lines = [
        f"# Plan for {topo.name}",
        "",
        f"{len(topo.gpus)} GPUs, {len(topo.switches)} switches ({_switch_words(topo)}), "
        f"{topo.num_links} directed links. "
        f"Candidates: {', '.join(request.methods)}; baselines: {', '.join(request.baselines) or 'none'}. "
        + (
            "C chosen per cell (`--chunks auto`: doubled until within 1 % of the physical bound), "
            if request.chunks == "auto"
            else f"C = {request.chunks} chunk(s) per contribution, "
        )
        + f"{request.time_limit:g} s per cell, "
        f"{request.workers} CP-SAT worker(s); load average {_num(load, '.2f')} when the report was written.",
        "",
        "Every schedule below passed the independent verifier; every XML file passed `validate-xml` "
        "against its instance. Gap = (makespan - lower bound) / makespan, in slots. Times, the "
        "schedules' and the baselines', are those of the alpha-beta model, not measurements.",
        "",
        *([f"**{note}**", ""] if note else []),
        "## Best schedule per collective and size",
        "",
        "| collective | size | method | status | time (us) | bound (us) | gap | algbw (GB/s) | busbw (GB/s) "
        f"| {_ring_label(best)} (us) | tree (us) | XML | export options |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in best:
        if "method" not in b:
            lines.append(f"| {b['collective']} | {b['size']} | - | {b.get('error', '')} |" + " |" * 9)
            continue
        base = b.get("baselines", {})
        ring = base.get("ring", {}).get("makespan_us") if "ring" in base else None
        tree = base.get("tree", {}).get("makespan_us") if "tree" in base else None
        opts = b.get("xml_options")
        opt_text = "-" if not opts else ", ".join(f"{k}={v}" for k, v in opts.items())
        xml = f"[{Path(b['xml']).name}]({b['xml']})" if b.get("xml") else "not exportable"
        lines.append(
            f"| {b['collective']} | {b['size']} | {b['method']} | {b['status']} | {_num(b['makespan_us'])} "
            f"| {_num(b['lower_bound_us'])} | {_num(b['gap'], '.1%')} | {_num(b['algbw_GBps'])} "
            f"| {_num(b['busbw_GBps'])} | {_num(ring)} | {_num(tree)} | {xml} | {opt_text} |"
        )
    failed = [b for b in best if b.get("method") and not b.get("xml")]
    if failed:
        lines += ["", "XML export failures (no file written):", ""]
        for b in failed:
            for why in b.get("xml_failures", []):
                lines.append(f"- {b['collective']} {b['size']}: {why}")
    over = [(b, o) for b in best for o in b.get("faster_without_xml") or []]
    if over:
        lines += ["", "Faster schedules passed over because no export option could write them:", ""]
        lines += [
            f"- {b['collective']} {b['size']}: {o['method']} {_num(o['makespan_us'])} us ({o['reason']})"
            for b, o in over
        ]
    lines += [
        "",
        "## Every cell",
        "",
        "| collective | size | method | role | status | time (us) | bound (us) | algbw (GB/s) | busbw (GB/s) "
        "| solve (s) | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['collective']} | {r['size']} | {r['method']} | {r['role']} | {r.get('status', '-')} "
            f"| {_num(r.get('makespan_us'))} | {_num(r.get('lower_bound_us'))} | {_num(r.get('algbw_GBps'))} "
            f"| {_num(r.get('busbw_GBps'))} | {_num(r.get('solve_seconds'), '.2f')} "
            f"| {str(r.get('error', '')).replace('|', '/')} |"
        )
    if images or plot_note:
        lines += ["", "## Pictures", ""]
        if plot_note:
            lines.append(f"No pictures: {plot_note}")
        for coll, files in images.items():
            lines.append(f"### {coll}")
            lines.append("")
            lines += [f"![{Path(f).stem}]({f})" for f in files]
            lines.append("")
    lines += [
        "",
        "busbw = algbw x 2(n-1)/n (AllReduce), (n-1)/n (AllGather, ReduceScatter, AllToAll), 1 (Broadcast, "
        "Reduce), as nccl-tests report it.",
        "",
    ]
    return "\n".join(lines)
