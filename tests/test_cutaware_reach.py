"""The cut-aware scheduler on a strongly connected topology whose fast links are one-way.

``tests/data/five_gpu_single_port.json``: 0<->3 at 16 GB/s, 1<->3 at 25, 2<->3 at 16 with
alpha 2.1 us, 4->2 at 50 (one way), 4<->3 at 16. Every node reaches every other (through 3),
so the instance's own reach check accepts every collective. The links faster than 25 GB/s
(only 4->2) join 2 and 4 in one *weakly* connected cluster although 2 reaches 4 only through
3, outside it: the cut-aware search, which spreads a chunk that entered a cluster over the
links inside it, then ended with node 4 unserved and raised "chunk [2, 0] cannot reach node 4",
which ``solve --method heuristic --single-port`` and ``bounds`` (its upper bound) passed on
as a refusal. (Without single-port the heuristic reached the lower bound before it tried the
cut-aware variant.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.cli import main
from ccplan.contract import SolveOptions
from ccplan.heuristics.cutaware import cluster_levels
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import amd, dgx2, ndv2
from ccplan.instances.topology import Topology
from ccplan.pipeline import get_engine
from ccplan.schedule.verify import verify

FIVE = Path(__file__).parent / "data" / "five_gpu_single_port.json"


def _five() -> Topology:
    return Topology.from_dict(json.loads(FIVE.read_text()))


def _reaches_all_inside(topo: Topology, members: set[int]) -> bool:
    """Every member reaches every other over links with both ends in ``members`` (BFS)."""
    for start in members:
        seen = {start}
        todo = [start]
        while todo:
            x = todo.pop()
            for lk in topo.links:
                if lk.src == x and lk.dst in members and lk.dst not in seen:
                    seen.add(lk.dst)
                    todo.append(lk.dst)
        if seen != members:
            return False
    return True


@pytest.mark.parametrize("topo", [_five(), ndv2(2), dgx2(2), amd(2)], ids=lambda t: t.name)
def test_every_cluster_below_level_0_is_strongly_connected_inside(topo: Topology) -> None:
    """The property the search relies on, checked by an independent BFS on every cluster."""
    nodes = topo.node_ids
    for labels in cluster_levels(topo)[1:]:
        for k in set(labels.tolist()):
            members = {nodes[i] for i, x in enumerate(labels.tolist()) if x == k}
            assert _reaches_all_inside(topo, members), (topo.name, sorted(members))


@pytest.mark.parametrize("single_port", [False, True])
def test_cut_aware_serves_the_node_behind_a_one_way_fast_link(single_port: bool) -> None:
    topo = _five()
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB", single_port=single_port)
    out = get_engine("cut-aware")(inst, SolveOptions(time_limit=5, workers=1))
    assert out.schedule is not None
    report = verify(inst, out.schedule)
    assert report.ok, report.violations[:2]
    assert report.makespan_slots is not None and report.makespan_slots >= lower_bound_slots(inst)


def test_cli_solve_and_bounds_plan_it_with_single_port(capsys: pytest.CaptureFixture[str]) -> None:
    """``solve --method heuristic --single-port`` plans a verified schedule (exit 0) and
    ``bounds`` gives its bounds (exit 0) instead of the refusal (exit 2)."""
    common = ["--topology", str(FIVE), "--collective", "allgather", "--size", "1MB", "--single-port"]
    assert main(["solve", *common, "--method", "heuristic", "--time-limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "verified     True" in out
    assert main(["bounds", *common, "--time-limit", "1", "--no-flow"]) == 0
    assert "cannot reach" not in capsys.readouterr().err
