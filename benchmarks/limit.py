"""The ``trees`` engine against the throughput limit (1 GB, AllGather / ReduceScatter / AllReduce).

The throughput limit of AllGather is ``T* = (M/N) * max_S |S ∩ GPUs| / B+(S)`` over node sets
``S`` that leave a GPU out (ForestColl), computed exactly by max-flows
(:func:`ccplan.heuristics.trees_pack.optimal_rate` on the link bandwidths, not the slots);
ReduceScatter's is the same on the reversed topology and AllReduce's reference is their sum
(ForestColl's reduce-scatter + allgather). ``ratio = T* / makespan`` (1 = the limit).

The chunk count: ``C = clamp(PIECES / N, 8, 2048)`` rounded down to a power of two (about
``PIECES`` chunks in all, so the pipeline fill is a small share of the makespan while the
sends stay around ``PIECES * N``); ``--chunks`` overrides it.

Usage::

    python benchmarks/limit.py                          # every instance, three collectives
    python benchmarks/limit.py --instances dgx1 amd-2 --collectives allgather
    python benchmarks/limit.py --large                  # torus 32x32 and NDv2 x128 AllGather
    python benchmarks/limit.py --auto                   # ccplan's --chunks auto picks C

Each instance runs in a subprocess (this script with ``--child``: ``ccplan.pipeline.solve``
with ``--method trees``, verification and bounds included) that reports its own peak
resident memory. AllReduce uses combine.py's ``concat`` mode by default (``--allreduce``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ccplan.heuristics.trees import bandwidth_network  # noqa: E402
from ccplan.heuristics.trees_pack import optimal_rate  # noqa: E402
from ccplan.instances.builtin import resolve_topology  # noqa: E402

INSTANCES: dict[str, list[str]] = {
    "dgx1": ["--topology", "dgx1"],
    "ndv2-2": ["--topology", "ndv2", "--chassis", "2"],
    "ndv2-4": ["--topology", "ndv2", "--chassis", "4"],
    "dgx2-2": ["--topology", "dgx2", "--chassis", "2"],
    "amd-1": ["--topology", "amd", "--chassis", "1"],
    "amd-2": ["--topology", "amd", "--chassis", "2"],
    "torus-8x8": ["--topology", "torus2d", "--topo-arg", "rows=8", "--topo-arg", "cols=8"],
    "leaf-spine-64": ["--topology", "leaf_spine", "--topo-arg", "leaves=8", "--topo-arg", "gpus_per_leaf=8",
                      "--topo-arg", "spines=4"],
}
LARGE: dict[str, list[str]] = {
    "torus-32x32": ["--topology", "torus2d", "--topo-arg", "rows=32", "--topo-arg", "cols=32"],
    "ndv2-128": ["--topology", "ndv2", "--chassis", "128"],
}
PIECES = 16384
SIZE = 1e9


def _topology(args: list[str]):  # type: ignore[no-untyped-def]
    name = args[1]
    params: dict[str, int] = {}
    rest = args[2:]
    for flag, value in zip(rest[::2], rest[1::2], strict=True):
        if flag == "--chassis":
            params["chassis"] = int(value)
        else:
            key, _, val = value.partition("=")
            params[key] = int(val)
    return resolve_topology(name, **params)


def limit_us(topology, kind: str) -> float:  # type: ignore[no-untyped-def]
    """The throughput limit of ``kind`` for 1 GB on ``topology``, in microseconds."""
    if kind == "allreduce":
        return limit_us(topology, "reducescatter") + limit_us(topology, "allgather")
    topo = topology.reversed() if kind == "reducescatter" else topology
    net = bandwidth_network(topo)
    gpus = [topo.node_index[g] for g in topo.gpus]
    x, _ = optimal_rate(net, gpus, gpus)  # GB/s per GPU
    return SIZE / len(gpus) / float(x) * 1e-3


def chunks_for(num_gpus: int) -> int:
    """The module docstring's rule."""
    c = max(8, min(2048, PIECES // num_gpus))
    return 1 << (c.bit_length() - 1)


def child(name: str, kind: str, chunks: int, time_limit: float, allreduce: str) -> int:
    """Solve one instance in this process and print its figures as one JSON line."""
    from ccplan.contract import SolveOptions
    from ccplan.instances import make_collective, make_instance
    from ccplan.pipeline import solve

    topo = _topology({**INSTANCES, **LARGE}[name])
    if chunks == 0:  # --auto: ccplan's --chunks auto (C = 1, 2, 4, ... against the physical bound)
        from ccplan.pipeline.chunks import solve_auto_chunks

        inst, res = solve_auto_chunks(
            lambda c: make_instance(topo, make_collective(kind, topo, chunks=c), "1GB"), "trees",
            SolveOptions(time_limit=time_limit, extra={"allreduce": allreduce}),
        )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"makespan_us": res.makespan_us, "verified": res.verified, "peak_MB": peak,
                          "mode": f"auto C={inst.collective.chunks}"}))
        return 0
    inst = make_instance(topo, make_collective(kind, topo, chunks=chunks), "1GB")
    if kind == "allreduce" and allreduce == "concat":
        makespan_us, verified = _concat_allreduce(inst, time_limit)
        mode = "concat"
    else:
        res = solve(inst, "trees", SolveOptions(time_limit=time_limit, extra={"allreduce": allreduce}))
        makespan_us, verified, mode = res.makespan_us, res.verified, res.details.get("mode", "")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"makespan_us": makespan_us, "verified": verified, "peak_MB": peak, "mode": mode}))
    return 0


def _concat_allreduce(inst, time_limit: float) -> tuple[float | None, bool]:  # type: ignore[no-untyped-def]
    """combine.py's ``concat`` AllReduce, built here: its ``solve_combining`` also runs the
    cluster-allreduce candidate whatever the mode, whose placement grows with C squared (9 of
    11 s at C = 64 on NDv2 x2), so at these chunk counts it never finishes. ReduceScatter by
    trees (reversed), then the AllGather by trees shifted by its makespan; the whole
    schedule goes through the verifier on the AllReduce instance."""
    from dataclasses import replace

    from ccplan.contract import SolveOptions
    from ccplan.instances import make_collective
    from ccplan.pipeline import solve
    from ccplan.schedule.core import Schedule, Send
    from ccplan.schedule.verify import verify

    topo = inst.topology
    c = inst.collective.chunks
    opts = SolveOptions(time_limit=time_limit / 2, extra={"flow_bound": False})
    rs = solve(replace(inst, collective=make_collective("reducescatter", topo, chunks=c)), "trees", opts)
    ag = solve(replace(inst, collective=make_collective("allgather", topo, chunks=c)), "trees", opts)
    if rs.schedule is None or ag.schedule is None or rs.makespan_slots is None:
        return None, False
    shift = rs.makespan_slots
    sends = rs.schedule.sends + tuple(Send(s.slot + shift, s.chunk, s.src, s.dst) for s in ag.schedule.sends)
    report = verify(inst, Schedule(sends, method="trees+rs+ag"))
    if not report.ok or report.makespan_slots is None:
        return None, False
    return report.makespan_slots * inst.tau_us, True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", nargs="*", default=None)
    p.add_argument("--collectives", nargs="*", default=["allgather", "reducescatter", "allreduce"])
    p.add_argument("--chunks", type=int, default=None)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--auto", action="store_true", help="--chunks auto instead of a fixed C (C column: 0)")
    p.add_argument("--large", action="store_true", help="the 1,024-GPU AllGather instances instead")
    p.add_argument("--allreduce", default="concat", choices=("best", "concat", "overlap", "pipelined"),
                   help="combine.py's AllReduce mode (default concat: its overlap modes are slow at "
                        "these chunk counts)")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        name, kind, c, tl, mode = args.child
        return child(name, kind, int(c), float(tl), mode)
    table = LARGE if args.large else INSTANCES
    names = args.instances or list(table)
    collectives = ["allgather"] if args.large else args.collectives
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"# load average {os.getloadavg()}, 1 GB, method trees, time limit {args.time_limit:g} s")
    print("instance,collective,limit_us,trees_us,ratio,C,seconds,peak_MB,verified,allreduce_mode")
    for name in names:
        inst = {**INSTANCES, **LARGE}[name]
        topo = _topology(inst)
        n = len(topo.gpus)
        c = 0 if args.auto else args.chunks or (1 if args.large else chunks_for(n))
        for kind in collectives:
            ref = limit_us(topo, kind)
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, __file__, "--child", name, kind, str(c), str(args.time_limit),
                 args.allreduce],
                cwd=ROOT, env=env, capture_output=True, text=True,
            )
            wall = time.perf_counter() - t0
            lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
            if proc.returncode != 0 or not lines:
                print(f"{name},{kind},{ref:.1f},,,{c},{wall:.1f},,False,"
                      f"exit {proc.returncode}: {proc.stderr.strip()[-160:]}", flush=True)
                continue
            data = json.loads(lines[-1])
            us = data["makespan_us"]
            ratio = ref / us if us else 0.0
            print(f"{name},{kind},{ref:.1f},{us:.1f},{ratio:.4f},{c},{wall:.1f},{data['peak_MB']:.0f},"
                  f"{data['verified']},{data['mode']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
