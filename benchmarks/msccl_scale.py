"""MSCCL export and ``validate-xml`` at cluster scale: seconds and peak memory per step.

Usage (from the repository root)::

    ccplan solve --topology torus2d --topo-arg rows=16 --topo-arg cols=16 --size 1GB \\
        --method layered --out t16.npz
    python benchmarks/msccl_scale.py t16.npz [t24.npz ...] [--cap 8000000000] [--checkout DIR]

For each schedule file it runs, each in a fresh child process under ``prlimit --as=CAP``:
``ccplan export FILE --format msccl-xml --out FILE.xml`` and then ``ccplan validate-xml
FILE.xml --expect FILE``. It prints one row per schedule: sends, export seconds and peak
resident MB, validate seconds and peak MB, the XML's size, the validator's verdict, and the
load average before each child (the machine may be shared). ``--checkout DIR`` runs another
checkout's code (``PYTHONPATH=DIR``, default: this script's checkout), e.g. to measure the
code before a change; the children run in the schedule's directory so that no checkout in
the working directory shadows it. Peak memory is
the child's ``ru_maxrss`` (``resource.getrusage(RUSAGE_CHILDREN)`` after it exits, one child
at a time through a fresh wrapper process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

WRAPPER = """
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
seconds = time.perf_counter() - t0
peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": proc.returncode, "seconds": seconds, "peak_mb": peak_kb / 1024,
                  "out": proc.stdout[-2000:], "err": proc.stderr[-2000:]}))
"""


def run(cmd: list[str], cap: int, env: dict[str, str], cwd: Path) -> dict[str, object]:
    """Run ``cmd`` in a child capped at ``cap`` bytes of address space; time and peak RSS.

    ``cwd`` must not be a checkout: ``python -m`` puts the working directory first on
    ``sys.path``, which would shadow ``PYTHONPATH``.
    """
    load = os.getloadavg()[0]
    full = ["prlimit", f"--as={cap}", "--", sys.executable, "-c", WRAPPER, *cmd]
    res = json.loads(
        subprocess.run(full, capture_output=True, text=True, env=env, cwd=cwd, check=True).stdout
    )
    res["load"] = load
    return res


def sends_of(path: Path) -> int:
    import numpy as np

    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            return len(data["slot"])
    return len(json.loads(path.read_text())["sends"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("schedules", nargs="+", type=Path)
    ap.add_argument("--cap", type=int, default=8_000_000_000, help="address-space cap per child (bytes)")
    ap.add_argument("--checkout", type=Path, help="run this checkout's ccplan (default: the script's own)")
    ap.add_argument("--skip-validate", action="store_true")
    args = ap.parse_args()
    checkout = (args.checkout or Path(__file__).resolve().parent.parent).resolve()
    env = dict(os.environ, PYTHONPATH=str(checkout))
    ccplan = [sys.executable, "-m", "ccplan.cli"]
    print(
        "| schedule | sends | export s | export MB | validate s | validate MB | XML MB | verdict | load |\n"
        "|---|---:|---:|---:|---:|---:|---:|---|---|"
    )
    for sched in args.schedules:
        sched = sched.resolve()
        xml = sched.with_suffix(".xml")
        cwd = sched.parent
        ex = run(
            [*ccplan, "export", str(sched), "--format", "msccl-xml", "--out", str(xml)], args.cap, env, cwd
        )
        if ex["rc"] != 0:
            print(f"| {sched.name} | export failed: {str(ex['err'])[-300:]} |")
            continue
        size = xml.stat().st_size / 1e6
        if args.skip_validate:
            va: dict[str, object] = {"seconds": float("nan"), "peak_mb": float("nan"), "rc": -1, "load": 0.0}
            verdict = "-"
        else:
            va = run([*ccplan, "validate-xml", str(xml), "--expect", str(sched)], args.cap, env, cwd)
            verdict = (
                "OK" if va["rc"] == 0 else f"rc {va['rc']}: {str(va['out'])[:80]!r} {str(va['err'])[-200:]!r}"
            )
        print(
            f"| {sched.name} | {sends_of(sched):,} | {ex['seconds']:.1f} | {ex['peak_mb']:,.0f} | "
            f"{va['seconds']:.1f} | {va['peak_mb']:,.0f} | {size:.1f} | {verdict} | "
            f"{ex['load']:.1f} / {va['load']:.1f} |",
            flush=True,
        )
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
