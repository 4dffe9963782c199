"""Cluster-scale benchmark: the heuristics on hundreds to thousands of GPUs.

Prints one row per instance and method (AllGather, C = 1, default size 1 GB): GPUs, makespan
(slots, checked by the independent verifier), the slot lower bound
:func:`ccplan.bounds.lower_bound_slots` (``max(latency, ingress, cut)``, the value
``compute_bounds(...).best_slots`` reports; ``compute_bounds`` also computes the bound in
microseconds with one networkx max-flow per destination, which dominates its time at this
scale and is not needed for a gap in slots), the gap to it (``(makespan - bound) /
makespan``, as ``Result.gap`` and the CLI report it), the engine's seconds (wall clock,
and ``cpu_s``, the CPU seconds of the process: on the shared machine the wall clock grows with
the other jobs' load, the CPU time much less), the verifier's and the bound's seconds (the
bound as :func:`ccplan.pipeline.solve` computes it, ``stop_at`` the verified makespan, so it
skips its costly parts once it reaches the makespan; ``--full-bound`` computes all of them),
``make_instance``'s seconds (``inst_s``), and the
peak resident memory of the process that ran it (each row runs in a fresh child process, so
``peak MB`` is that row's own high-water mark: Python, the instance, the engine, the schedule
and the verifier together).

Usage::

    python benchmarks/scale.py                                   # torus 16x16, 24x24; ndv2 32
    python benchmarks/scale.py --instances torus32 ndv2-128 --methods layered
    python benchmarks/scale.py --instances torus32 --methods layered --no-bound
    python benchmarks/scale.py --instances torus32 --methods layered --full-bound
    python benchmarks/scale.py --instances dgx2-4 amd-4 --methods mteg layered cut-aware
    python benchmarks/scale.py --instances torus32 --methods layered --progress   # notes every 10 s
    python benchmarks/scale.py --list

Targets (2 cores): 1,024 GPUs (32x32 torus, NDv2 128 chassis) < 60 s and < 2 GB;
4,096 GPUs (64x64 torus) < 10 min and < 8 GB; gap <= 5 % on torus and NDv2; DGX2 and AMD
with 4 chassis: gap <= 10 % in < 10 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ccplan.instances import builtin as bt
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology
from ccplan.schedule.core import Schedule

INSTANCES: dict[str, Callable[[], Topology]] = {
    "torus8": lambda: bt.torus2d(8, 8),
    "torus16": lambda: bt.torus2d(16, 16),
    "torus24": lambda: bt.torus2d(24, 24),
    "torus32": lambda: bt.torus2d(32, 32),
    "torus64": lambda: bt.torus2d(64, 64),
    "mesh16": lambda: bt.mesh2d(16, 16),
    "mesh32": lambda: bt.mesh2d(32, 32),
    "ndv2-8": lambda: bt.ndv2(8),
    "ndv2-16": lambda: bt.ndv2(16),
    "ndv2-32": lambda: bt.ndv2(32),
    "ndv2-72": lambda: bt.ndv2(72),
    "ndv2-128": lambda: bt.ndv2(128),
    "dgx2-2": lambda: bt.dgx2(2),
    "dgx2-4": lambda: bt.dgx2(4),
    "dgx2-8": lambda: bt.dgx2(8),
    "dgx2-16": lambda: bt.dgx2(16),
    "dgx2-64": lambda: bt.dgx2(64),
    "amd-2": lambda: bt.amd(2),
    "amd-4": lambda: bt.amd(4),
    "amd-8": lambda: bt.amd(8),
    "amd-16": lambda: bt.amd(16),
    "amd-64": lambda: bt.amd(64),
    "leaf-spine-16x16": lambda: bt.leaf_spine(16, 16, 8),
    "leaf-spine-32x32": lambda: bt.leaf_spine(32, 32, 16),
    "fat-tree-8": lambda: bt.fat_tree(8),
    "fat-tree-16": lambda: bt.fat_tree(16),
}
DEFAULT = ("torus16", "torus24", "ndv2-32")


def _layered(inst: Instance) -> Schedule:
    from ccplan.heuristics.layered import layered_schedule

    return layered_schedule(inst)


def _mteg(inst: Instance) -> Schedule:
    from ccplan.heuristics.mteg import mteg_schedule

    return mteg_schedule(inst).schedule


def _cut_aware(inst: Instance) -> Schedule:
    from ccplan.heuristics.cutaware import cut_aware_schedule

    return cut_aware_schedule(inst)


ENGINES: dict[str, Callable[[Instance], Schedule]] = {
    "layered": _layered,
    "mteg": _mteg,
    "cut-aware": _cut_aware,
}


def _one(name: str, method: str, size: str, bound: bool, full_bound: bool = False) -> dict[str, object]:
    """Run one row in this process and return its fields (the parent prints them)."""
    from ccplan.instances import make_collective, make_instance
    from ccplan.schedule.verify import verify

    topo = INSTANCES[name]()
    t0 = time.perf_counter()
    inst = make_instance(topo, make_collective("allgather", topo), size)
    instance_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    c0 = time.process_time()
    schedule = ENGINES[method](inst)
    seconds = time.perf_counter() - t0
    cpu_s = time.process_time() - c0
    t0 = time.perf_counter()
    report = verify(inst, schedule)
    verify_s = time.perf_counter() - t0
    if not report.ok:
        raise SystemExit(f"{name} {method}: schedule rejected: {report.violations[0]}")
    lb: int | None = None
    bound_s = None
    if bound:
        from ccplan.bounds import lower_bound_slots

        t0 = time.perf_counter()
        # as ccplan.pipeline.solve does: the verified makespan lets the bound stop early
        lb = lower_bound_slots(inst, stop_at=None if full_bound else report.makespan_slots)
        bound_s = time.perf_counter() - t0
    return {
        "gpus": len(topo.gpus),
        "instance_s": instance_s,
        "makespan": report.makespan_slots,
        "bound": lb,
        "seconds": seconds,
        "cpu_s": cpu_s,
        "verify_s": verify_s,
        "bound_s": bound_s,
        "sends": len(schedule),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


CSV_FIELDS = ("instance", "method", "size", "gpus", "makespan", "bound", "seconds", "cpu_s", "verify_s",
              "bound_s", "sends", "peak_mb", "load", "instance_s")


def _append_csv(path: Path, row: dict[str, object]) -> None:
    """Append one row (header first when the file is new)."""
    import csv

    new = not path.exists()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", nargs="+", default=list(DEFAULT), choices=list(INSTANCES))
    ap.add_argument("--methods", nargs="+", default=["layered", "mteg"], choices=list(ENGINES))
    ap.add_argument("--size", default="1GB")
    ap.add_argument("--no-bound", action="store_true", help="skip the lower bound (slow at scale)")
    ap.add_argument(
        "--full-bound",
        action="store_true",
        help="compute every part of the bound (default: stop once it reaches the makespan, as solve does)",
    )
    ap.add_argument("--list", action="store_true", help="print the instance names and exit")
    ap.add_argument("--progress", action="store_true", help="show the engines' progress notes (stderr)")
    ap.add_argument("--csv", help="also append the rows to this CSV file (input of scripts/fig_scale.py)")
    ap.add_argument("--one", nargs=2, metavar=("INSTANCE", "METHOD"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(INSTANCES))
        return
    if args.one:
        if args.progress:
            import logging

            logging.basicConfig(level=logging.INFO, format="  %(message)s")
        print(json.dumps(_one(args.one[0], args.one[1], args.size, not args.no_bound, args.full_bound)))
        return

    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores, shared machine)")
    head = (f"{'instance':18} {'method':8} {'GPUs':>5} {'makespan':>8} {'bound':>6} {'gap%':>6} "
            f"{'seconds':>8} {'cpu_s':>8} {'verify_s':>8} {'bound_s':>8} {'inst_s':>7} {'peak_MB':>8}")
    print(head)
    print("-" * len(head))
    for name in args.instances:
        for method in args.methods:
            cmd = [sys.executable, __file__, "--one", name, method, "--size", args.size]
            if args.no_bound:
                cmd.append("--no-bound")
            if args.full_bound:
                cmd.append("--full-bound")
            if args.progress:
                cmd.append("--progress")
            err = None if args.progress else subprocess.PIPE
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, check=False)
            if proc.returncode != 0:
                why = (proc.stderr or "see above").strip().splitlines()[-1:]
                print(f"{name:18} {method:8} failed: {why}", flush=True)
                continue
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            if args.csv:
                _append_csv(Path(args.csv), {"instance": name, "method": method, "size": args.size,
                                             "load": os.getloadavg()[0], **row})
            lb = row["bound"]
            gap = "-" if not lb else f"{100.0 * (row['makespan'] - lb) / row['makespan']:.1f}"
            bound_s = "-" if row["bound_s"] is None else f"{row['bound_s']:.1f}"
            print(f"{name:18} {method:8} {row['gpus']:5d} {row['makespan']:8d} {lb if lb else '-':>6} "
                  f"{gap:>6} {row['seconds']:8.1f} {row.get('cpu_s', float('nan')):8.1f} "
                  f"{row['verify_s']:8.1f} {bound_s:>8} {row.get('instance_s', float('nan')):7.1f} "
                  f"{row['peak_mb']:8.0f}", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
