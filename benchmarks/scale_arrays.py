"""Schedule, verifier, bound and instance at cluster scale, without an engine.

Builds a valid AllGather schedule of a ``rows x cols`` torus directly as numpy columns (row
rings, then column rings; see :func:`synthetic_torus_allgather`) and times the parts that
every run at this scale pays besides its engine: ``make_instance`` (its reachability check),
``Schedule.from_columns``, ``verify``, ``lower_bound_slots`` (in full, and cheap-first with
``stop_at``; with ``--no-symmetry`` also with every max-flow computed, the same value),
and optionally ``.sends`` (building the ``Send`` objects) and a columnar save /
load round trip. Each step's wall seconds, CPU seconds and the process's resident memory
after it (``RSS MB``) and its high-water mark so far (``peak MB``) are printed in a table, with
the load average (2 cores, shared machine).

Usage::

    python benchmarks/scale_arrays.py --rows 64 --cols 64
    python benchmarks/scale_arrays.py --rows 32 --cols 32 --sends --npz run.npz
    prlimit --as=8500000000 -- python benchmarks/scale_arrays.py --rows 64 --cols 64

``--stop-at`` gives the makespan the cheap-first bound may stop at (default: the lower bound
of an optimal torus AllGather, ``ceil((N - 1) / 4)`` deliveries per in-link plus the
first hop's latency, i.e. what a schedule that meets the bound reports; the synthetic
schedule itself is far slower, so its own makespan would not let the bound stop early).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def synthetic_torus_allgather(inst: Instance, rows: int, cols: int) -> dict[str, np.ndarray]:
    """A valid AllGather (C = 1) of the ``rows x cols`` torus as columns.

    Phase 1, row rings: in step ``k`` (``0 <= k < cols - 1``) GPU ``(r, c)`` sends the chunk
    of ``(r, c - k)`` to ``(r, c + 1)`` at slot ``k * L`` (``L``: the links' latency; the
    chunk arrived at ``(k - 1) * L + L``). After ``T1 = (cols - 1) * L`` slots every GPU holds
    its row's chunks. Phase 2, column rings: the chunk of ``(r0, c0)`` travels down every
    column ``c`` from row ``r0``: in step ``k`` from ``(r0 + k, c)`` to ``(r0 + k + 1, c)`` at
    slot ``T1 + k * cols + c0`` (its previous hop arrived ``cols - L >= 0`` slots earlier).
    Link ``(r, c) -> (r + 1, c)`` carries in step ``k`` the chunks of row ``r - k``, one per
    slot, so no link carries two chunks in a slot. ``N (N - 1)`` sends in all.
    """
    lat = np.asarray(inst.latency)
    occ = np.asarray(inst.occupancy)
    if len(set(lat.tolist())) != 1 or set(occ.tolist()) != {1}:
        raise SystemExit("the synthetic schedule assumes one latency and occupancy 1")
    L = int(lat[0])
    if cols < L:
        raise SystemExit("the synthetic schedule needs cols >= L")
    r = np.arange(rows)
    c = np.arange(cols)
    # phase 1: (r, c, k) -> chunk of (r, c - k), from (r, c) to (r, c + 1) at k * L
    R, C, K = np.meshgrid(r, c, np.arange(cols - 1), indexing="ij")
    p1 = {
        "slot": (K * L).ravel(),
        "chunk_source": (R * cols + (C - K) % cols).ravel(),
        "src": (R * cols + C).ravel(),
        "dst": (R * cols + (C + 1) % cols).ravel(),
    }
    del R, C, K
    t1 = (cols - 1) * L
    # phase 2: (r0, c0, c, k) -> chunk of (r0, c0) from (r0 + k, c) to (r0 + k + 1, c)
    n2 = rows * cols * cols * (rows - 1)
    out: dict[str, np.ndarray] = {}
    idx = np.arange(n2, dtype=np.int64)
    k = idx % (rows - 1)
    rest = idx // (rows - 1)
    cc = rest % cols
    rest //= cols
    c0 = rest % cols
    r0 = rest // cols
    del idx, rest
    slot2 = t1 + k * cols + c0
    src2 = ((r0 + k) % rows) * cols + cc
    dst2 = ((r0 + k + 1) % rows) * cols + cc
    chunk2 = r0 * cols + c0
    del k, cc, c0, r0
    out["slot"] = np.concatenate([p1["slot"], slot2])
    del slot2
    out["chunk_source"] = np.concatenate([p1["chunk_source"], chunk2])
    del chunk2
    out["src"] = np.concatenate([p1["src"], src2])
    del src2
    out["dst"] = np.concatenate([p1["dst"], dst2])
    del dst2
    out["chunk_index"] = np.zeros(len(out["slot"]), dtype=np.int64)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--cols", type=int, default=64)
    ap.add_argument("--size", default="1GB")
    ap.add_argument("--stop-at", type=int, default=None, help="makespan for the cheap-first bound")
    ap.add_argument("--no-full-bound", action="store_true", help="skip the full lower bound")
    ap.add_argument("--no-symmetry", action="store_true",
                    help="also time the full bound with every max-flow computed (bounds.slots.SYMMETRY off)")
    ap.add_argument("--sends", action="store_true", help="also build the Send objects (.sends)")
    ap.add_argument("--npz", help="also save and load the columnar file at this path")
    args = ap.parse_args(argv)
    from ccplan.bounds import lower_bound_slots
    from ccplan.schedule.verify import verify

    rows: list[tuple[str, float, float, float, float, Any]] = []

    def step(name: str, fn: Callable[[], Any]) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        value = fn()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rows.append((name, time.perf_counter() - t0, time.process_time() - c0, _rss_mb(), peak, value))
        print(f"  {name}: {rows[-1][1]:.1f} s", file=sys.stderr, flush=True)
        return value

    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores, shared machine)")
    topo = bt.torus2d(args.rows, args.cols)
    coll = make_collective("allgather", topo)
    inst = step("make_instance", lambda: make_instance(topo, coll, args.size))
    columns = [step("synthetic columns", lambda: synthetic_torus_allgather(inst, args.rows, args.cols))]
    sched = step("Schedule.from_columns", lambda: Schedule.from_columns(**columns.pop()))
    report = step("verify", lambda: verify(inst, sched))
    if not report.ok:
        raise SystemExit(f"rejected: {report.violations[0]}")
    n = args.rows * args.cols
    L = int(inst.latency[0])
    stop_at = args.stop_at if args.stop_at is not None else -(-(n - 1) // 4) + L - 1
    # the memo on the instance would hand the second call the first one's answer
    inst.__dict__.pop("_ccplan_lower_bound_slots", None)
    step(f"bound, stop_at={stop_at}", lambda: lower_bound_slots(inst, stop_at=stop_at))
    if not args.no_full_bound:
        inst.__dict__.pop("_ccplan_lower_bound_slots", None)
        step("bound (full)", lambda: lower_bound_slots(inst))
        if args.no_symmetry:
            import ccplan.bounds.slots

            inst.__dict__.pop("_ccplan_lower_bound_slots", None)
            ccplan.bounds.slots.SYMMETRY = False
            step("bound (full, no symmetry)", lambda: lower_bound_slots(inst))
            ccplan.bounds.slots.SYMMETRY = True
    if args.npz:
        from ccplan.schedule import load_schedule, save_schedule

        step("save .npz", lambda: save_schedule(args.npz, inst, sched))
        step("load .npz", lambda: load_schedule(args.npz, check_budget=False)[1] == sched)
    if args.sends:
        step(".sends (Send objects)", lambda: len(sched.sends))

    print(f"torus {args.rows}x{args.cols} AllGather {args.size}: {len(sched):,} sends, makespan "
          f"{report.makespan_slots} slots")
    print(f"{'step':28} {'wall s':>8} {'CPU s':>8} {'RSS MB':>8} {'peak MB':>8}  value")
    for name, wall, cpu, rss, peak_so_far, value in rows:
        shown = "" if isinstance(value, (dict, Schedule, Instance)) else value
        if name == "verify":
            shown = f"ok={value.ok}"
        print(f"{name:28} {wall:8.1f} {cpu:8.1f} {rss:8.0f} {peak_so_far:8.0f}  {shown}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident: {peak:.0f} MB; load average after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
