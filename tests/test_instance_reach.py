"""The instance's reachability check across strongly connected components.

Two directed 3-rings, {0, 1, 2} and {3, 4, 5}, joined by the one link 2 -> 3: everything in
the first ring reaches the second, nothing comes back. So a Broadcast or Scatter from 0 or 2
is hostable (every target is reachable from the root), while anything that needs a chunk of
node 3 at node 0 is not, and the error names the first such demand (chunks in order, then
targets) and the holder with no path.
"""

from __future__ import annotations

import pytest

from ccplan.errors import ValidationError
from ccplan.instances import make_collective, make_instance
from ccplan.instances.topology import Topology, make_topology


def _two_rings() -> Topology:
    ring = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (2, 3)]
    return make_topology("tr", gpus=range(6), directed_links=[(a, b, 50.0, 0.7) for a, b in ring])


@pytest.mark.parametrize(
    ("kind", "root"), [("broadcast", 0), ("broadcast", 2), ("scatter", 0), ("scatter", 2)]
)
def test_reachable_across_components(kind: str, root: int) -> None:
    topo = _two_rings()
    make_instance(topo, make_collective(kind, topo, root=root), "1GB")


@pytest.mark.parametrize(
    ("kind", "root", "message"),
    [
        ("allgather", None, r"allgather: chunk \[3, 0\] cannot reach node 0 \(no path from node 3\)"),
        ("gather", 2, r"gather: chunk \[3, 0\] cannot reach node 2 \(no path from node 3\)"),
        # combining: every contribution must reach every receiver
        ("reduce", 2, r"reduce: chunk \[2, 0\] cannot reach node 2 \(no path from node 3\)"),
        ("allreduce", None, r"allreduce: chunk \[0, 0\] cannot reach node 0 \(no path from node 3\)"),
    ],
)
def test_unreachable_across_components(kind: str, root: int | None, message: str) -> None:
    topo = _two_rings()
    coll = make_collective(kind, topo, root=root) if root is not None else make_collective(kind, topo)
    with pytest.raises(ValidationError, match=message):
        make_instance(topo, coll, "1GB")
