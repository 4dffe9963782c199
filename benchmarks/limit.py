"""The ``trees`` engine (or the user path) against the throughput limit and the physical bound.

The throughput limit of AllGather is ``T* = (M/N) * max_S |S ∩ GPUs| / B+(S)`` over node sets
``S`` that leave a GPU out (ForestColl), computed exactly by max-flows
(:func:`ccplan.heuristics.trees_pack.optimal_rate` on the link bandwidths, not the slots);
ReduceScatter's is the same on the reversed topology and AllReduce's reference is their sum
(ForestColl's reduce-scatter + allgather). It counts no latency. The physical bound
(:func:`ccplan.physical.physical_bound`: any chunking, continuous alpha-beta time) counts it:
its ``windowed`` part is the same cut problems with each link's window shortened by the
alphas before and after it. ``ratio = reference / makespan`` (1 = the reference), printed
against both; issue 25's targets use the throughput limit for AllGather / ReduceScatter at
1 GB, and the physical bound at smaller sizes and for AllReduce (``target`` column).

The chunk count: ``C = clamp(PIECES / N, 8, 2048)`` rounded down to a power of two (about
``PIECES`` chunks in all, so the pipeline fill is a small share of the makespan while the
sends stay around ``PIECES * N``); ``--chunks`` overrides it, ``--auto`` lets ccplan's
``--chunks auto`` pick it.

Usage::

    python benchmarks/limit.py                          # every instance, three collectives, 1 GB
    python benchmarks/limit.py --instances dgx1 amd-2 --collectives allgather
    python benchmarks/limit.py --large                  # torus 32x32 and NDv2 x128 AllGather
    python benchmarks/limit.py --auto                   # ccplan's --chunks auto picks C
    python benchmarks/limit.py --auto --size 64MB --repeat 3 --collectives allgather reducescatter
    python benchmarks/limit.py --method heuristic --size 64MB   # the user path, --chunks auto

Each run is a subprocess (this script with ``--child``) that reports its own peak resident
memory. ``--method trees``: ``ccplan.pipeline.solve`` with ``--method trees``, verification and
bounds included. ``--method heuristic``: the command line ``ccplan solve ... --chunks auto
--method heuristic --time-limit T --workers 1 --json``, run in the child's process.
AllReduce by ``trees`` is the library's ``trees-allreduce`` (ReduceScatter trees, then AllGather
trees moved send by send into free slots) unless ``--allreduce`` names another mode.
The user path also saves its schedule (``--out``) and replays it in continuous alpha-beta
time (:func:`ccplan.schedule.simulate.simulate`, after the timed run): ``replay_us`` and
``ratio_replay = physical_us / replay_us``. The slot time ``time_us`` rounds every transfer up
to whole slots and drops alphas below ``alpha_threshold`` (a torus 6 x 6 AllGather 64 MB at
C = 4 is 311.1 us in slots, under the physical bound's 311.8, and 329.1 us replayed); the
replay is the schedule's time in the model the physical bound holds for.
``--repeat N`` runs each case N times and prints the median makespan (the ratios are of the
median) with every run's time in ``runs_us``; the 1-minute load average at the start of the
case is printed beside the seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ccplan.heuristics.trees import bandwidth_network  # noqa: E402
from ccplan.heuristics.trees_pack import optimal_rate  # noqa: E402
from ccplan.instances.builtin import resolve_topology  # noqa: E402
from ccplan.parsing import format_size, parse_size  # noqa: E402

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
METHODS = ("trees", "heuristic")


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


def limit_us(topology, kind: str, size: float = SIZE) -> float:  # type: ignore[no-untyped-def]
    """The throughput limit of ``kind`` for ``size`` bytes on ``topology``, in microseconds."""
    if kind == "allreduce":
        return limit_us(topology, "reducescatter", size) + limit_us(topology, "allgather", size)
    topo = topology.reversed() if kind == "reducescatter" else topology
    net = bandwidth_network(topo)
    gpus = [topo.node_index[g] for g in topo.gpus]
    x, _ = optimal_rate(net, gpus, gpus)  # GB/s per GPU
    return size / len(gpus) / float(x) * 1e-3


def physical_us(topology, kind: str, size: float = SIZE) -> float:  # type: ignore[no-untyped-def]
    """The physical bound of ``kind`` for ``size`` bytes (switches only relay), in microseconds."""
    from ccplan.instances import make_collective, make_instance
    from ccplan.physical import physical_bound

    return physical_bound(make_instance(topology, make_collective(kind, topology, chunks=1), size)).us


def target(kind: str, size: float) -> str:
    """The reference issue 25 holds ``kind`` to at ``size``: the throughput limit for AllGather
    and ReduceScatter at 1 GB and up, the physical bound (latency counted) otherwise."""
    return "limit" if kind != "allreduce" and size >= SIZE else "physical"


def median_run(runs: list[dict]) -> dict:  # type: ignore[type-arg]
    """The run with the median makespan (the lower middle one for an even count; runs with no
    makespan count as slowest), so its C and mode go with the median time."""
    order = sorted(runs, key=lambda r: (r.get("makespan_us") is None, r.get("makespan_us") or 0.0))
    return order[(len(order) - 1) // 2]


def chunks_for(num_gpus: int) -> int:
    """The module docstring's rule."""
    c = max(8, min(2048, PIECES // num_gpus))
    return 1 << (c.bit_length() - 1)


def child(name: str, kind: str, chunks: int, time_limit: float, allreduce: str, size: float = SIZE,
          method: str = "trees") -> int:
    """Solve one instance in this process and print its figures as one JSON line."""
    from ccplan.contract import SolveOptions
    from ccplan.instances import make_collective, make_instance
    from ccplan.pipeline import solve

    if method == "heuristic":
        return _user_path(name, kind, chunks, time_limit, size)
    topo = _topology({**INSTANCES, **LARGE}[name])
    if chunks == 0:  # --auto: ccplan's --chunks auto (C = 1, 2, 4, ... against the physical bound)
        from ccplan.pipeline.chunks import solve_auto_chunks

        inst, res = solve_auto_chunks(
            lambda c: make_instance(topo, make_collective(kind, topo, chunks=c), size), "trees",
            SolveOptions(time_limit=time_limit, extra={"allreduce": allreduce}),
        )
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({"makespan_us": res.makespan_us, "verified": res.verified, "peak_MB": peak,
                          "chunks": inst.collective.chunks,
                          "mode": f"auto: {res.details.get('auto_stop', '')}"}))
        return 0
    inst = make_instance(topo, make_collective(kind, topo, chunks=chunks), size)
    res = solve(inst, "trees", SolveOptions(time_limit=time_limit, extra={"allreduce": allreduce}))
    makespan_us, verified, mode = res.makespan_us, res.verified, res.details.get("mode", "")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"makespan_us": makespan_us, "verified": verified, "peak_MB": peak, "chunks": chunks,
                      "mode": mode}))
    return 0


def _user_path(name: str, kind: str, chunks: int, time_limit: float, size: float) -> int:
    """``ccplan solve ... --method heuristic --workers 1 --json`` (``--chunks auto`` when
    ``chunks`` is 0), run by the command line's own entry point in this process."""
    import tempfile

    from ccplan.cli import main as cli_main
    from ccplan.schedule import load_schedule
    from ccplan.schedule.simulate import simulate

    saved = Path(tempfile.mkdtemp()) / "schedule.npz"
    argv = ["solve", *{**INSTANCES, **LARGE}[name], "--collective", kind, "--size", format_size(size),
            "--chunks", str(chunks) if chunks else "auto", "--method", "heuristic",
            "--time-limit", f"{time_limit:g}", "--workers", "1", "--json", "--out", str(saved)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(argv)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    replay, t0 = None, time.perf_counter()
    if code == 0 and saved.exists():  # the alpha-beta time of the same schedule (after the timed run)
        replay = simulate(*load_schedule(saved)).completion_us
        saved.unlink()
    replay_seconds = time.perf_counter() - t0
    if code != 0:
        why = (err.getvalue().strip().splitlines() or [""])[-1][-200:]
        print(json.dumps({"makespan_us": None, "verified": False, "peak_MB": peak, "chunks": chunks,
                          "mode": f"ccplan solve exit {code}: {why}"}))
        return 0
    data = json.loads(out.getvalue())
    details = data.get("details") or {}
    mode = str(details.get("variant", data.get("method", "")))
    if details.get("auto_stop"):
        mode += f"; auto: {details['auto_stop']}"
    print(json.dumps({"makespan_us": data["makespan_us"], "verified": data["verified"], "peak_MB": peak,
                      "chunks": data["chunks"], "mode": mode, "replay_us": replay,
                      "replay_seconds": replay_seconds}))
    return 0


def _run_child(name: str, kind: str, c: int, args: argparse.Namespace, size: float,
               env: dict[str, str]) -> dict:  # type: ignore[type-arg]
    """One run in a subprocess: its JSON figures plus ``seconds`` (None makespan on failure)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", name, kind, str(c), str(args.time_limit), args.allreduce,
         repr(size), args.method],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    wall = time.perf_counter() - t0
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"makespan_us": None, "verified": False, "peak_MB": None, "chunks": c, "seconds": wall,
                "mode": f"exit {proc.returncode}: {proc.stderr.strip()[-160:]}"}
    found = json.loads(lines[-1])
    # the process's wall time less the replay after the timed run
    return {**found, "seconds": wall - float(found.get("replay_seconds") or 0.0)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", nargs="*", default=None)
    p.add_argument("--collectives", nargs="*", default=["allgather", "reducescatter", "allreduce"])
    p.add_argument("--chunks", type=int, default=None)
    p.add_argument("--size", default="1GB", help="data size, as ccplan reads it (1GB, 64MB, ...)")
    p.add_argument("--repeat", type=int, default=1, help="runs per case; the median is printed")
    p.add_argument("--method", default="trees", choices=METHODS,
                   help="trees (this script's engine) or heuristic (the user path: ccplan solve "
                        "--method heuristic --chunks auto --workers 1)")
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--auto", action="store_true", help="--chunks auto instead of a fixed C")
    p.add_argument("--large", action="store_true", help="the 1,024-GPU AllGather instances instead")
    p.add_argument("--allreduce", default="best", choices=("best", "concat", "overlap", "pipelined"),
                   help="the AllReduce mode of ccplan.pipeline.combining (default best: trees-allreduce "
                        "first)")
    p.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        name, kind, c, tl, mode, size_text, method = args.child
        return child(name, kind, int(c), float(tl), mode, float(size_text), method)
    if args.repeat < 1:
        p.error(f"--repeat must be at least 1, got {args.repeat}")
    size = parse_size(args.size)
    table = LARGE if args.large else INSTANCES
    names = args.instances or list(table)
    collectives = ["allgather"] if args.large else args.collectives
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    auto = args.auto or (args.method == "heuristic" and args.chunks is None)
    print(f"# load average {os.getloadavg()}, {format_size(size)}, method {args.method}, "
          f"time limit {args.time_limit:g} s, median of {args.repeat}")
    print("instance,collective,limit_us,physical_us,time_us,ratio_limit,ratio_physical,target,C,seconds,"
          "load,peak_MB,verified,runs_us,replay_us,ratio_replay,mode")
    for name in names:
        inst = {**INSTANCES, **LARGE}[name]
        topo = _topology(inst)
        n = len(topo.gpus)
        c = 0 if auto else args.chunks or (1 if args.large else chunks_for(n))
        for kind in collectives:
            ref = limit_us(topo, kind, size)
            phys = physical_us(topo, kind, size)
            load = os.getloadavg()[0]
            runs = [_run_child(name, kind, c, args, size, env) for _ in range(args.repeat)]
            run = median_run(runs)
            us = run["makespan_us"]
            seconds = statistics.median(r["seconds"] for r in runs)
            times = ";".join("" if r["makespan_us"] is None else f"{r['makespan_us']:.1f}" for r in runs)
            verified = all(r["verified"] for r in runs)
            peak = max((r["peak_MB"] for r in runs if r["peak_MB"] is not None), default=None)
            cs = sorted({int(r["chunks"]) for r in runs})
            mode = str(run["mode"]).replace(",", ";")
            if us is None:
                print(f"{name},{kind},{ref:.1f},{phys:.1f},,,,{target(kind, size)},{'/'.join(map(str, cs))},"
                      f"{seconds:.1f},{load:.1f},,{verified},{times},,,{mode}", flush=True)
                continue
            replay = run.get("replay_us")
            replayed = "," if replay is None else f"{replay:.1f},{phys / replay:.4f}"
            print(f"{name},{kind},{ref:.1f},{phys:.1f},{us:.1f},{ref / us:.4f},{phys / us:.4f},"
                  f"{target(kind, size)},{'/'.join(map(str, cs))},{seconds:.1f},{load:.1f},"
                  f"{'' if peak is None else f'{peak:.0f}'},{verified},{times},{replayed},{mode}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
