"""The time limit and the memory budget of ``--method milp`` on models too large to build.

Run by hand::

    python benchmarks/limits.py                 # both commands, --time-limit 20, 4 GB cap

Each command runs as ``python -m ccplan.cli solve ... --method milp --time-limit T`` in a
subprocess whose address space is capped (``resource.setrlimit(RLIMIT_AS)``); the table
gives the wall time, the peak resident memory of the child, the written schedule's
verification (``ccplan verify``) and the engine's fallback reason.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS: dict[str, list[str]] = {
    "ndv2-10-1KB": ["--topology", "ndv2", "--chassis", "10", "--size", "1KB"],
    "dgx2-4-1MB-C8": ["--topology", "dgx2", "--chassis", "4", "--size", "1MB", "--chunks", "8"],
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--time-limit", type=float, default=20.0)
    p.add_argument("--cap-gb", type=float, default=4.0)
    args = p.parse_args(argv)
    cap = int(args.cap_gb * 2**30)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"# load average {os.getloadavg()}, shared machine; cap {args.cap_gb} GB address space")
    print("instance,method,makespan,bound,gap,seconds,peak_MB,verified,fallback")
    with tempfile.TemporaryDirectory() as tmp:
        for name, inst_args in COMMANDS.items():
            out, rep = Path(tmp) / f"{name}.json", Path(tmp) / f"{name}.report.json"
            t0 = time.perf_counter()
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            proc = subprocess.run(
                [sys.executable, "-m", "ccplan.cli", "solve", *inst_args, "--method", "milp",
                 "--time-limit", str(args.time_limit), "--quiet", "--out", str(out), "--report", str(rep)],
                cwd=ROOT, env=env, capture_output=True, text=True,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)),
            )
            wall = time.perf_counter() - t0
            peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
            if proc.returncode != 0 or not rep.exists():
                print(f"{name},milp,,,,{wall:.1f},{peak:.0f},False,exit {proc.returncode}: "
                      f"{proc.stderr.strip()[-200:]}")
                continue
            data = json.loads(rep.read_text())
            check = subprocess.run([sys.executable, "-m", "ccplan.cli", "verify", str(out)],
                                   cwd=ROOT, env=env, capture_output=True, text=True)
            reason = str(data["details"].get("fallback", "")).replace(",", ";")
            print(f"{name},milp,{data['makespan_slots']},{data['lower_bound_slots']},{data['gap']:.3f},"
                  f"{wall:.1f},{peak:.0f},{check.returncode == 0},{reason}", flush=True)
    print(f"# load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
