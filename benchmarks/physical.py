"""The physical lower bound (``ccplan.physical``) on the built-in machines (by hand).

::

    python benchmarks/physical.py                       # AllGather 1 GB, six machines + 64x64 torus
    python benchmarks/physical.py --collectives allgather,allreduce,alltoall --no-torus

Columns: topology, collective, bound (us), binding part, the throughput part, algbw at the
bound (GB/s), seconds of :func:`ccplan.physical.physical_bound` (instance construction not
included), load average before/after (the machine may be shared: say so).
"""

from __future__ import annotations

import argparse
import os
import time

from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import resolve_topology
from ccplan.physical import physical_bound

MACHINES = (
    ("dgx1", {}),
    ("ndv2", {"chassis": 2}),
    ("ndv2", {"chassis": 4}),
    ("dgx2", {"chassis": 2}),
    ("amd", {"chassis": 1}),
    ("amd", {"chassis": 2}),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectives", default="allgather")
    parser.add_argument("--size", default="1GB")
    parser.add_argument("--no-torus", action="store_true", help="skip the 64x64 torus")
    args = parser.parse_args()
    machines = list(MACHINES)
    if not args.no_torus:
        machines.append(("torus2d", {"rows": 64, "cols": 64}))
    print(f"load before: {os.getloadavg()[0]:.2f}")
    print(f"{'topology':<16}{'collective':<15}{'bound_us':>12}  {'binding':<11}{'throughput':>12}"
          f"{'algbw':>9}{'seconds':>9}")
    for kind in args.collectives.split(","):
        for name, params in machines:
            topo = resolve_topology(name, **params)
            inst = make_instance(topo, make_collective(kind, topo, chunks=1), args.size)
            start = time.perf_counter()
            pb = physical_bound(inst)
            seconds = time.perf_counter() - start
            print(
                f"{topo.name:<16}{kind:<15}{pb.us:>12.1f}  {pb.binding:<11}{pb.parts['throughput']:>12.1f}"
                f"{inst.algbw_GBps(pb.us):>9.2f}{seconds:>9.2f}"
            )
            for note in pb.notes:
                print(f"{'':<16}note: {note}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
