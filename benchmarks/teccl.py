"""Head-to-head with every published TE-CCL AllGather cell, under TE-CCL's own semantics.

Run by hand (never as a timed test)::

    python benchmarks/teccl.py                                  # all 33 cells
    python benchmarks/teccl.py --cells dgx2-2 --sizes 1GB,1MB --milp-time-limit 120
    python benchmarks/teccl.py --json teccl.json                # also write the rows

Cells: TE-CCL's ``Fast`` outputs (``ccplan/data/published.json``, series ``teccl_fast_*``) for
NDv2 2 chassis, NDv2 4 chassis and DGX2 2 chassis, output buffer 1 KB .. 1 GB, C = 1.

Semantics (TE-CCL's, docs/model.md): cut-through switches (``switch_model="cut-through"``),
``delta = 0`` when ``alpha / tau <= 0.1``, per-link capacity ``floor(B tau / mu)`` chunks per slot,
and TE-CCL's epoch: ``tau = mu / max B`` raised to ``min alpha / 200`` (``alpha_cap=200``). Where that
rule does not give the epoch TE-CCL's published output used (DGX2 at 1 KB and 4 KB, whose
configs multiply the epoch by 4), the published epoch is used as an explicit ``tau``; the
``tau`` column says which. Our time is ``D * tau``, theirs ``epochs * tau``.

Instances differ in one place: TE-CCL's NDv2 2-chassis model treats GPU 0 as a switch and so
serves 15 GPUs; ours serves all 16 (a harder instance).

Methods per cell: the ``heuristic`` portfolio (every heuristic is re-timed for cut-through
switches), then, unless its makespan already meets the lower bound, the exact engine ``milp``
(CP-SAT, ``--workers``) warm-started from it. Columns: instance, method, makespan (slots),
bound (slots), gap, seconds, ours (us), TECCL_fast (us), ours / TECCL_fast, proven.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

from ccplan.contract import SolveOptions
from ccplan.errors import CCPlanError
from ccplan.instances import Instance, make_collective, make_instance
from ccplan.instances.builtin import dgx2, ndv2
from ccplan.instances.instance import TECCL_ALPHA_CAP
from ccplan.pipeline.solve import Result, solve

SIZES = ("1KB", "4KB", "16KB", "64KB", "256KB", "1MB", "4MB", "16MB", "64MB", "256MB", "1GB")
"""The published sizes, in the order of every series of ``published.json``."""

CELLS = {
    "ndv2-2": ("teccl_fast_ndv2_2ch", lambda: ndv2(2)),
    "ndv2-4": ("teccl_fast_ndv2_4ch", lambda: ndv2(4)),
    "dgx2-2": ("teccl_fast_dgx2_2ch", lambda: dgx2(2)),
}


@dataclass
class Row:
    instance: str
    size: str
    method: str
    tau_us: float
    tau_source: str
    makespan_slots: int | None
    bound_slots: int
    gap: float | None
    seconds: float
    ours_us: float | None
    teccl_us: float
    teccl_epochs: int
    ratio: float | None
    proven: bool
    verified: bool


def published() -> dict[str, Any]:
    text = resources.files("ccplan.data").joinpath("published.json").read_text()
    return {s["id"]: s for s in json.loads(text)["series"]}


def teccl_instance(topo_factory: Any, size: str, tau_published: float) -> tuple[Instance, str]:
    """The cell under TE-CCL's semantics (module docstring) and where its tau comes from."""
    topo = topo_factory()
    coll = make_collective("allgather", topo, chunks=1)
    common = {"alpha_threshold": 0.1, "switch_model": "cut-through"}
    inst = make_instance(topo, coll, size, alpha_cap=TECCL_ALPHA_CAP, **common)  # type: ignore[arg-type]
    if math.isclose(inst.tau_us, tau_published, rel_tol=1e-6):
        return inst, "rule"
    explicit = make_instance(topo, coll, size, tau_rule="explicit", tau_us=tau_published, **common)  # type: ignore[arg-type]
    return explicit, "published"


def _row(label: str, size: str, method: str, res: Result, inst: Instance, tau_src: str,
         teccl_us: float, epochs: int) -> Row:
    ours = res.makespan_us
    return Row(
        instance=label,
        size=size,
        method=method,
        tau_us=inst.tau_us,
        tau_source=tau_src,
        makespan_slots=res.makespan_slots,
        bound_slots=res.lower_bound_slots,
        gap=res.gap,
        seconds=res.solve_seconds,
        ours_us=ours,
        teccl_us=teccl_us,
        teccl_epochs=epochs,
        ratio=None if ours is None else ours / teccl_us,
        proven=res.status == "optimal",
        verified=res.verified,
    )


def run(cells: list[str], sizes: list[str] | None, heuristic_limit: float, milp_limit: float,
        workers: int, milp: bool, heuristic: bool = True) -> list[Row]:
    series = published()
    rows: list[Row] = []
    for label in cells:
        sid, factory = CELLS[label]
        s = series[sid]
        for i, size in enumerate(SIZES):
            if sizes and size not in sizes:
                continue
            inst, tau_src = teccl_instance(factory, size, float(s["tau_us"][i]))
            teccl_us = float(s["finish_us"][i])
            epochs = int(s["epochs"][i])
            best: Row | None = None
            for method, limit in (("heuristic", heuristic_limit), ("milp", milp_limit)):
                if method == "milp" and (not milp or (best is not None and best.proven)):
                    continue
                if method == "heuristic" and not heuristic:
                    continue
                t0 = time.perf_counter()
                try:
                    res = solve(inst, method, SolveOptions(time_limit=limit, workers=workers))
                except CCPlanError as exc:
                    print(f"{label} {size} {method}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                row = _row(label, size, method, res, inst, tau_src, teccl_us, epochs)
                row.seconds = time.perf_counter() - t0
                rows.append(row)
                _print(row)
                if best is None or (row.makespan_slots or math.inf) < (best.makespan_slots or math.inf):
                    best = row
    return rows


def _fmt(x: Any, spec: str = ".4g") -> str:
    return "-" if x is None else format(x, spec)


HEADER = ("instance", "size", "method", "tau_us", "tau", "makespan", "bound", "gap", "seconds",
          "ours_us", "teccl_us", "teccl_epochs", "ours/teccl", "proven")


def _print(r: Row) -> None:
    print(" | ".join([
        r.instance, r.size, r.method, _fmt(r.tau_us), r.tau_source, _fmt(r.makespan_slots, "d"),
        _fmt(r.bound_slots, "d"), _fmt(None if r.gap is None else 100 * r.gap, ".2f") + "%",
        _fmt(r.seconds, ".2f"), _fmt(r.ours_us, ".6g"), _fmt(r.teccl_us, ".6g"), str(r.teccl_epochs),
        _fmt(r.ratio, ".4f"), "yes" if r.proven else "no",
    ]), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cells", default=",".join(CELLS), help=f"comma-separated, from {', '.join(CELLS)}")
    p.add_argument("--sizes", help="comma-separated subset, e.g. 1GB,1MB")
    p.add_argument("--heuristic-time-limit", type=float, default=10.0)
    p.add_argument("--milp-time-limit", type=float, default=60.0)
    p.add_argument("--workers", type=int, default=2, help="CP-SAT workers (default 2)")
    p.add_argument("--no-milp", action="store_true", help="heuristics only")
    p.add_argument("--milp-only", action="store_true", help="skip the heuristic row (milp warm-starts)")
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    cells = [c for c in args.cells.split(",") if c]
    for c in cells:
        if c not in CELLS:
            p.error(f"--cells: unknown cell {c!r} (choose from {', '.join(CELLS)})")
    load = os.getloadavg()
    print(f"# load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (shared machine), "
          f"CP-SAT workers {args.workers}, heuristic {args.heuristic_time_limit:g} s, "
          f"milp {args.milp_time_limit:g} s")
    print(" | ".join(HEADER))
    rows = run(cells, args.sizes.split(",") if args.sizes else None, args.heuristic_time_limit,
               args.milp_time_limit, args.workers, not args.no_milp, not args.milp_only)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(r) for r in rows], fh, indent=1)
    load = os.getloadavg()
    print(f"# load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
