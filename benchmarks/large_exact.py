"""The exact engine on the issue's five large instances, 10 minutes each (run by hand).

::

    python benchmarks/large_exact.py                       # all five, --time-limit 600, 2 workers
    python benchmarks/large_exact.py --instances amd-2ch-1GB --time-limit 120
    python benchmarks/large_exact.py --strategy lns        # pass a strategy to every run

Each instance runs as ``python -m ccplan.cli solve --topology T --chassis N --size S
--collective allgather --method milp --time-limit T --workers 2`` in a subprocess (the
command is printed), with ``--report``, ``--progress`` and ``--out`` files in the ``--out``
directory (kept). Columns: instance, method, makespan, bound (the engine's best proven
bound), gap = (makespan - bound) / makespan, seconds (wall time of the subprocess), the
strategy the engine reports, LNS rounds and improvements, the heuristic's makespan, and the
load average before and after the run (the machine may be shared: say so with the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INSTANCES: dict[str, list[str]] = {
    "amd-2ch-1GB": ["--topology", "amd", "--chassis", "2", "--size", "1GB"],
    "dgx2-2ch-1MB": ["--topology", "dgx2", "--chassis", "2", "--size", "1MB"],
    "ndv2-2ch-64KB": ["--topology", "ndv2", "--chassis", "2", "--size", "64KB"],
    "dgx2-4ch-1GB": ["--topology", "dgx2", "--chassis", "4", "--size", "1GB"],
    "amd-4ch-1GB": ["--topology", "amd", "--chassis", "4", "--size", "1GB"],
}
"""AllGather, one chunk per GPU; the targets: gap <= 2 % (2 chassis), <= 3 % (4 chassis)."""


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", default=",".join(INSTANCES), help="comma-separated names")
    p.add_argument("--time-limit", type=float, default=600.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--strategy", default=None, help="milp strategy (default: the engine's auto)")
    p.add_argument("--out", type=Path, default=None, help="directory for reports (default: a new temp dir)")
    args = p.parse_args(argv)
    names = [n for n in args.instances.split(",") if n]
    unknown = [n for n in names if n not in INSTANCES]
    if unknown:
        p.error(f"unknown instance {unknown[0]!r} (choose from {', '.join(INSTANCES)})")
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="large_exact-"))
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}, {os.cpu_count()} cores, CP-SAT workers {args.workers}, "
          f"time limit {args.time_limit:g} s; load average (1/5/15 min) printed per run")
    print("instance,method,makespan,bound,gap,seconds,strategy,lns_rounds,lns_improvements,"
          "heuristic_makespan,load_before,load_after")
    for name in names:
        report = args.out / f"{name}.report.json"
        progress = args.out / f"{name}.progress.csv"
        cmd = [sys.executable, "-m", "ccplan.cli", "solve", *INSTANCES[name], "--collective", "allgather",
               "--method", "milp", "--time-limit", f"{args.time_limit:g}", "--workers", str(args.workers),
               "--quiet", "--report", str(report), "--progress", str(progress),
               "--out", str(args.out / f"{name}.schedule.json")]
        if args.strategy:
            cmd += ["--strategy", args.strategy]
        print("# " + " ".join(cmd[1:]), flush=True)
        before = _load()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not report.exists():
            err = proc.stderr.strip()[-200:]
            print(f"{name},milp,,,,{wall:.1f},exit {proc.returncode}: {err}", flush=True)
            continue
        data = json.loads(report.read_text())
        det = data.get("details", {})
        makespan, bound = data["makespan_slots"], data["lower_bound_slots"]
        gap = (makespan - bound) / makespan if makespan else float("nan")
        lns = det.get("lns") or {}
        print(f"{name},milp,{makespan},{bound},{100 * gap:.1f}%,{wall:.1f},{det.get('strategy')},"
              f"{lns.get('rounds', 0)},{lns.get('improvements', 0)},{det.get('heuristic_makespan')},"
              f"{before},{_load()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
