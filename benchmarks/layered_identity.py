"""Send-for-send identity of ``layered`` schedules across two versions of the code.

Speed work on :mod:`ccplan.heuristics.layered` must keep its schedules unchanged. Run this
script once with the old code on ``PYTHONPATH`` (``dump``) and once with the new code
(``compare``); it builds the same instances, runs ``layered`` on each and compares the sorted
``(slot, chunk, src, dst, reduce)`` tuples of every schedule::

    PYTHONPATH=<old checkout> python benchmarks/layered_identity.py dump old.pkl
    PYTHONPATH=<new checkout> python benchmarks/layered_identity.py compare old.pkl
    (add --large to both for the bigger instances)

Cases: DGX1, NDv2 x2/x4, DGX2 x2, AMD x2, torus 8x8, mesh 6x6, leaf-spine 4x4, each with
AllGather 1 GB C=1 and 64 KB C=2; NDv2 x4 single-port 1 GB C=1; NDv2 x2 and torus 8x8 with
slack 1 and seed 3; NDv2 x2 with an outage and with capacity 2; broadcast on NDv2 x2.
``--large`` adds bigger ones (a few minutes): torus 16x16 and 20x20, NDv2 x16, DGX2 x4,
AMD x4, torus 12x12 64 KB C=2, fat-tree k=4 C=2, mesh 12x12.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ccplan.heuristics.layered import LayeredOptions, layered_schedule
from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology

Row = tuple[int, tuple[int, int], int, int, bool]

TOPOLOGIES: dict[str, Callable[[], Topology]] = {
    "dgx1": bt.dgx1,
    "ndv2-2": lambda: bt.ndv2(2),
    "ndv2-4": lambda: bt.ndv2(4),
    "dgx2-2": lambda: bt.dgx2(2),
    "amd-2": lambda: bt.amd(2),
    "torus8": lambda: bt.torus2d(8, 8),
    "mesh6": lambda: bt.mesh2d(6, 6),
    "leaf-spine-4x4": lambda: bt.leaf_spine(4, 4, 2),
}


def cases() -> list[tuple[str, Callable[[], tuple[Instance, LayeredOptions]]]]:
    """Named instance builders (built lazily, one at a time)."""
    out: list[tuple[str, Callable[[], tuple[Instance, LayeredOptions]]]] = []
    for name, make in TOPOLOGIES.items():
        for size, chunks in (("1GB", 1), ("64KB", 2)):

            def build(
                make: Callable[[], Topology] = make, size: str = size, chunks: int = chunks
            ) -> tuple[Instance, LayeredOptions]:
                topo = make()
                return make_instance(topo, make_collective("allgather", topo, chunks), size), LayeredOptions()

            out.append((f"{name} {size} C={chunks}", build))

    def single_port() -> tuple[Instance, LayeredOptions]:
        topo = bt.ndv2(4)
        return make_instance(
            topo, make_collective("allgather", topo), "1GB", single_port=True
        ), LayeredOptions()

    def slack(make: Callable[[], Topology]) -> Callable[[], tuple[Instance, LayeredOptions]]:
        def build() -> tuple[Instance, LayeredOptions]:
            topo = make()
            return make_instance(topo, make_collective("allgather", topo), "1GB"), LayeredOptions(
                slack=1, seed=3
            )

        return build

    def outage() -> tuple[Instance, LayeredOptions]:
        topo = bt.ndv2(2)
        inst = make_instance(topo, make_collective("allgather", topo), "1GB", outages=[(0, 1, 2), (1, 0, 3)])
        return inst, LayeredOptions()

    def capacity() -> tuple[Instance, LayeredOptions]:
        topo = bt.ndv2(2)
        return make_instance(topo, make_collective("allgather", topo, 2), "1GB", capacity=2), LayeredOptions()

    def broadcast() -> tuple[Instance, LayeredOptions]:
        topo = bt.ndv2(2)
        return make_instance(topo, make_collective("broadcast", topo, 4, root=3), "1GB"), LayeredOptions()

    out += [
        ("ndv2-4 1GB C=1 single-port", single_port),
        ("ndv2-2 1GB C=1 slack=1 seed=3", slack(lambda: bt.ndv2(2))),
        ("torus8 1GB C=1 slack=1 seed=3", slack(lambda: bt.torus2d(8, 8))),
        ("ndv2-2 1GB C=1 outages", outage),
        ("ndv2-2 1GB C=2 capacity 2", capacity),
        ("ndv2-2 broadcast C=4", broadcast),
    ]
    return out


def large_cases() -> list[tuple[str, Callable[[], tuple[Instance, LayeredOptions]]]]:
    """Bigger instances (``--large``), AllGather, built lazily."""
    specs: list[tuple[str, Callable[[], Topology], str, int]] = [
        ("torus16 1GB C=1", lambda: bt.torus2d(16, 16), "1GB", 1),
        ("torus20 1GB C=1", lambda: bt.torus2d(20, 20), "1GB", 1),
        ("ndv2-16 1GB C=1", lambda: bt.ndv2(16), "1GB", 1),
        ("dgx2-4 1GB C=1", lambda: bt.dgx2(4), "1GB", 1),
        ("amd-4 1GB C=1", lambda: bt.amd(4), "1GB", 1),
        ("torus12 64KB C=2", lambda: bt.torus2d(12, 12), "64KB", 2),
        ("fat-tree-4 1GB C=2", lambda: bt.fat_tree(4), "1GB", 2),
        ("mesh12 1GB C=1", lambda: bt.mesh2d(12, 12), "1GB", 1),
    ]
    out: list[tuple[str, Callable[[], tuple[Instance, LayeredOptions]]]] = []
    for name, make, size, chunks in specs:

        def build(
            make: Callable[[], Topology] = make, size: str = size, chunks: int = chunks
        ) -> tuple[Instance, LayeredOptions]:
            topo = make()
            return make_instance(topo, make_collective("allgather", topo, chunks), size), LayeredOptions()

        out.append((name, build))
    return out


def run_all(large: bool = False) -> dict[str, list[Row]]:
    """Schedule of every case as sorted send tuples."""
    got: dict[str, list[Row]] = {}
    for name, build in cases() + (large_cases() if large else []):
        inst, opts = build()
        t0 = time.perf_counter()
        sched = layered_schedule(inst, opts)
        got[name] = sorted((s.slot, s.chunk, s.src, s.dst, s.reduce) for s in sched.sends)
        print(f"{name:34} {len(sched):7d} sends {time.perf_counter() - t0:6.2f} s", flush=True)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["dump", "compare"])
    ap.add_argument("file")
    ap.add_argument("--large", action="store_true", help="add the bigger instances")
    args = ap.parse_args(argv)
    got = run_all(args.large)
    path = Path(args.file)
    if args.mode == "dump":
        path.write_bytes(pickle.dumps(got))
        return 0
    old: dict[str, list[Row]] = pickle.loads(path.read_bytes())
    bad = 0
    for name, rows in got.items():
        same = old.get(name) == rows
        bad += not same
        print(f"{name:34} {'identical' if same else 'DIFFERENT'}")
    print(f"{len(got) - bad} of {len(got)} identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
