"""Send-for-send identity of ``mteg`` schedules across two versions of the code.

Speed work on :mod:`ccplan.heuristics.mteg` must keep its schedules unchanged. Run this
script once with the reference code on ``PYTHONPATH`` (``dump``) and once with the new code
(``compare``); it builds the same instances, runs MTEGCCA on each with the case's options and
compares the sorted ``(slot, chunk, src, dst)`` tuples of every schedule, and prints the
makespans of both when they differ::

    PYTHONPATH=<reference checkout> python benchmarks/mteg_identity.py dump ref.pkl
    PYTHONPATH=<new checkout> python benchmarks/mteg_identity.py compare ref.pkl
    (add --large to both for the bigger instances, --large-only for those alone,
    --only SUBSTRING to pick cases)

Cases (about 600, a few minutes with the reference code):

- 16 topologies (DGX1, NDv2 x2/x4/x8, DGX2 x2, AMD x1/x2, torus 4x4/8x8, mesh 6x6, a
  one-way ring, a line, a switch star, leaf-spine 4x4x2, fat-tree k=4, hypercube 4) with
  AllGather 1 GB C=1, AllGather 64 KB C=2 (alpha dominates: ``delta > 0``), Broadcast C=3,
  Multicast, Gather, Scatter C=2 and AllToAll, each under the paper's options and
  ``select="earliest"``;
- on 8 of them, for the AllGathers and the Broadcast, every variant: ``tree="chunk"`` (with
  and without ``interleave``), ``tree="all"``, ``order="reverse"``, ``order="random"`` with
  seeds 1-3 (both selections),
  ``order="given"``, ``horizon=1`` with ``growth=1.5`` (many horizon extensions);
- instance options: single-port, capacity 2, outages, ``tau`` from the slowest link, a
  cut-through switch model where the topology has switches;
- the rip-up-and-reroute improvement of :mod:`ccplan.heuristics.search` (30 seeded
  iterations: :func:`~ccplan.heuristics.mteg.extend_schedule` with shared
  :class:`~ccplan.heuristics.mteg.Reservations`, releases and partial trees).

``--large`` adds NDv2 x16/x24, torus 12x12/16x16, DGX2 x4, AMD x4, fat-tree k=6 and leaf-spine
6x6x3 with AllGather 1 GB C=1 (both selections).
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ccplan.heuristics.mteg import MtegOptions, decompose, mteg_schedule
from ccplan.heuristics.search import rip_up_reroute
from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology

Row = tuple[int, tuple[int, int], int, int]
Build = Callable[[], tuple[Instance, MtegOptions | None]]

TOPOLOGIES: dict[str, Callable[[], Topology]] = {
    "dgx1": bt.dgx1,
    "ndv2-2": lambda: bt.ndv2(2),
    "ndv2-4": lambda: bt.ndv2(4),
    "ndv2-8": lambda: bt.ndv2(8),
    "dgx2-2": lambda: bt.dgx2(2),
    "amd-1": lambda: bt.amd(1),
    "amd-2": lambda: bt.amd(2),
    "torus4": lambda: bt.torus2d(4, 4),
    "torus8": lambda: bt.torus2d(8, 8),
    "mesh6": lambda: bt.mesh2d(6, 6),
    "ring8-oneway": lambda: bt.ring(8, bidirectional=False),
    "line6": lambda: bt.line(6),
    "star6": lambda: bt.star_switch(6),
    "leaf-spine-4x4": lambda: bt.leaf_spine(4, 4, 2),
    "fat-tree-4": lambda: bt.fat_tree(4),
    "hypercube4": lambda: bt.hypercube(4),
}

# every variant on these
FULL = ("dgx1", "ndv2-4", "dgx2-2", "amd-2", "torus4", "mesh6", "star6", "fat-tree-4")

# (name, kind, size, chunks)
COLLS: tuple[tuple[str, str, str, int], ...] = (
    ("allgather 1GB C=1", "allgather", "1GB", 1),
    ("allgather 64KB C=2", "allgather", "64KB", 2),
    ("broadcast C=3", "broadcast", "1GB", 3),
    ("multicast", "multicast", "1MB", 1),
    ("gather", "gather", "1MB", 1),
    ("scatter C=2", "scatter", "1MB", 2),
    ("alltoall", "alltoall", "1MB", 1),
)


def _variants(n_tasks: int) -> list[tuple[str, MtegOptions]]:
    out = [
        ("chunk", MtegOptions(tree="chunk")),
        ("chunk+interleave", MtegOptions(tree="chunk", interleave=True)),
        ("chunk+interleave earliest", MtegOptions(tree="chunk", interleave=True, select="earliest")),
        ("all", MtegOptions(tree="all")),
        ("all earliest", MtegOptions(tree="all", select="earliest")),
        ("reverse", MtegOptions(order="reverse")),
        ("horizon=1 growth=1.5", MtegOptions(horizon=1, growth=1.5)),
        ("horizon=1 growth=1.5 earliest", MtegOptions(horizon=1, growth=1.5, select="earliest")),
    ]
    for seed in (1, 2, 3):
        out.append((f"random seed={seed}", MtegOptions(order="random", seed=seed)))
        out.append(
            (f"random seed={seed} earliest", MtegOptions(order="random", seed=seed, select="earliest"))
        )
    if n_tasks > 1:
        perm = (*range(1, n_tasks), 0)
        out.append(("given", MtegOptions(order="given", task_order=perm)))
    return out


def _dests(topo: Topology) -> list[int]:
    gpus = list(topo.gpus)
    return gpus[1::2] if len(gpus) > 2 else gpus[1:]


def cases() -> list[tuple[str, Build]]:
    """Named instance builders (built lazily, one at a time)."""
    out: list[tuple[str, Build]] = []
    for tname, make in TOPOLOGIES.items():
        for cname, kind, size, chunks in COLLS:

            def inst(
                make: Callable[[], Topology] = make, kind: str = kind, size: str = size, chunks: int = chunks
            ) -> Instance:
                topo = make()
                dests = _dests(topo) if kind == "multicast" else None
                return make_instance(topo, make_collective(kind, topo, chunks, dests=dests), size)

            for sel in ("tree-cost", "earliest"):

                def build(
                    inst: Callable[[], Instance] = inst, sel: str = sel
                ) -> tuple[Instance, MtegOptions | None]:
                    return inst(), MtegOptions(select=sel)

                out.append((f"{tname} {cname} {sel}", build))
            if tname in FULL and kind in ("allgather", "broadcast"):
                n_tasks = len(decompose(inst()))
                for vname, opts in _variants(n_tasks):

                    def vbuild(
                        inst: Callable[[], Instance] = inst, opts: MtegOptions = opts
                    ) -> tuple[Instance, MtegOptions | None]:
                        return inst(), opts

                    out.append((f"{tname} {cname} {vname}", vbuild))
    for tname in ("dgx1", "ndv2-4", "torus4", "amd-2", "star6", "fat-tree-4"):
        make = TOPOLOGIES[tname]
        specs: list[tuple[str, dict[str, Any]]] = [
            ("single-port", {"single_port": True}),
            ("capacity 2", {"capacity": 2}),
            ("tau slowest", {"tau_rule": "slowest"}),
        ]
        topo0 = make()
        first = topo0.links[0]
        second = topo0.links[len(topo0.links) // 2]
        specs.append(
            (
                "outages",
                {
                    "outages": [
                        (first.src, first.dst, 0),
                        (first.src, first.dst, 1),
                        (second.src, second.dst, 2),
                    ]
                },
            )
        )
        if topo0.switches:
            specs.append(("cut-through", {"switch_model": "cut-through"}))
        for sname, kw in specs:
            for chunks in (1, 2):
                for sel in ("tree-cost", "earliest"):

                    def kbuild(
                        make: Callable[[], Topology] = make,
                        kw: dict[str, Any] = kw,
                        chunks: int = chunks,
                        sel: str = sel,
                    ) -> tuple[Instance, MtegOptions | None]:
                        topo = make()
                        return make_instance(
                            topo, make_collective("allgather", topo, chunks), "1GB", **kw
                        ), MtegOptions(select=sel)

                    out.append((f"{tname} allgather C={chunks} {sname} {sel}", kbuild))
    for tname in ("dgx1", "ndv2-4", "torus4", "amd-2", "dgx2-2"):
        make = TOPOLOGIES[tname]
        for seed in (0, 1):

            def rbuild(
                make: Callable[[], Topology] = make, seed: int = seed
            ) -> tuple[Instance, MtegOptions | None]:
                topo = make()
                return make_instance(topo, make_collective("allgather", topo, 1), "64KB"), MtegOptions(
                    seed=seed
                )

            out.append((f"{tname} allgather 64KB rip-up seed={seed}", rbuild))
    return out


def large_cases() -> list[tuple[str, Build]]:
    """Bigger instances (``--large``), AllGather 1 GB C=1, built lazily."""
    specs: list[tuple[str, Callable[[], Topology]]] = [
        ("ndv2-16", lambda: bt.ndv2(16)),
        ("ndv2-24", lambda: bt.ndv2(24)),
        ("torus12", lambda: bt.torus2d(12, 12)),
        ("torus16", lambda: bt.torus2d(16, 16)),
        ("dgx2-4", lambda: bt.dgx2(4)),
        ("amd-4", lambda: bt.amd(4)),
        ("fat-tree-6", lambda: bt.fat_tree(6)),
        # relays dominate on leaf-spine (every search goes through the switches): the
        # reference takes minutes at 8x8x4 already, so a smaller one
        ("leaf-spine-6x6x3", lambda: bt.leaf_spine(6, 6, 3)),
    ]
    out: list[tuple[str, Build]] = []
    for name, make in specs:
        for sel in ("tree-cost", "earliest"):

            def build(
                make: Callable[[], Topology] = make, sel: str = sel
            ) -> tuple[Instance, MtegOptions | None]:
                topo = make()
                return make_instance(topo, make_collective("allgather", topo, 1), "1GB"), MtegOptions(
                    select=sel
                )

            out.append((f"{name} 1GB C=1 {sel}", build))
    return out


def run_case(name: str, build: Build) -> list[Row]:
    """The case's schedule as sorted send tuples (rip-up cases: the improved schedule)."""
    inst, opts = build()
    assert opts is not None
    if "rip-up" in name:
        base = mteg_schedule(inst, MtegOptions()).schedule
        sched, _ = rip_up_reroute(inst, base, math.inf, 0, seed=opts.seed, max_iterations=30)
    else:
        sched = mteg_schedule(inst, opts).schedule
    return sorted((s.slot, s.chunk, s.src, s.dst) for s in sched.sends)


def run_all(
    large: bool = False, only: str | None = None, large_only: bool = False
) -> dict[str, tuple[list[Row], int]]:
    """Schedule (sorted send tuples) and makespan of every case."""
    got: dict[str, tuple[list[Row], int]] = {}
    for name, build in ([] if large_only else cases()) + (large_cases() if large or large_only else []):
        if only is not None and only not in name:
            continue
        t0 = time.perf_counter()
        rows = run_case(name, build)
        inst, _ = build()
        lat = {lk.key: int(x) for lk, x in zip(inst.topology.links, inst.latency, strict=True)}
        span = max((t + lat[(u, v)] for t, _, u, v in rows), default=0)
        got[name] = (rows, span)
        print(f"{name:58} {len(rows):7d} sends {span:6d} slots {time.perf_counter() - t0:7.2f} s", flush=True)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["dump", "compare"])
    ap.add_argument("file")
    ap.add_argument("--large", action="store_true", help="add the bigger instances")
    ap.add_argument("--only", help="run only the cases whose name contains this")
    ap.add_argument("--large-only", action="store_true", help="only the bigger instances")
    args = ap.parse_args(argv)
    got = run_all(args.large, args.only, args.large_only)
    path = Path(args.file)
    if args.mode == "dump":
        path.write_bytes(pickle.dumps(got))
        return 0
    old: dict[str, tuple[list[Row], int]] = pickle.loads(path.read_bytes())
    bad = missing = 0
    for name, (rows, span) in got.items():
        if name not in old:
            missing += 1
            print(f"{name:58} not in {path.name}")
            continue
        same = old[name][0] == rows
        bad += not same
        if not same:
            print(f"{name:58} DIFFERENT: makespan {old[name][1]} -> {span}")
    print(
        f"{len(got) - bad - missing} of {len(got) - missing} identical"
        + (f" ({missing} not in the file)" if missing else "")
    )
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
