"""``benchmarks/limit.py``: its references (throughput limit, physical bound), the median of
``--repeat`` runs, and the user path (``--method heuristic``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ccplan.instances.builtin import ring

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "limit.py"


@pytest.fixture(scope="module")
def limit() -> ModuleType:
    spec = importlib.util.spec_from_file_location("limit_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["limit_benchmark"] = module
    spec.loader.exec_module(module)
    return module


def test_limit_of_a_one_way_ring_by_hand(limit: ModuleType) -> None:
    """One-way ring of 4 GPUs at 50 GB/s: every GPU needs the other 3 quarters of M through
    its one incoming link, and the cut S = three GPUs attains it: T* = (M/4) * 3 / B.
    64 MB: 16e6 * 3 / 50e9 s = 960 us; 1 GB: 15,000 us. ReduceScatter (reversed ring) the
    same; AllReduce the sum of both."""
    topo = ring(4, bidirectional=False, bandwidth_GBps=50.0, alpha_us=0.7)
    assert limit.limit_us(topo, "allgather", 64e6) == pytest.approx(960.0)
    assert limit.limit_us(topo, "allgather") == pytest.approx(15000.0)
    assert limit.limit_us(topo, "reducescatter", 64e6) == pytest.approx(960.0)
    assert limit.limit_us(topo, "allreduce", 64e6) == pytest.approx(1920.0)


def test_physical_bound_counts_the_latency_the_limit_leaves_out(limit: ModuleType) -> None:
    """On the same ring the last byte to GPU 3 from GPU 0 crosses three links of alpha 0.7 us,
    so no schedule ends before the 960 us of bandwidth plus part of that latency: the
    physical bound lies in (960, 960 + 3 * 0.7] (the windowed cut cannot charge more alpha
    than the longest path holds)."""
    topo = ring(4, bidirectional=False, bandwidth_GBps=50.0, alpha_us=0.7)
    phys = limit.physical_us(topo, "allgather", 64e6)
    assert 960.0 < phys <= 960.0 + 3 * 0.7 + 1e-9


def test_target_reference_by_size_and_collective(limit: ModuleType) -> None:
    """Issue 25: AllGather / ReduceScatter at 1 GB against the throughput limit; at 64 MB
    (latency counted) and AllReduce at any size against the physical bound."""
    assert limit.target("allgather", 1e9) == "limit"
    assert limit.target("reducescatter", 1e9) == "limit"
    assert limit.target("allgather", 64e6) == "physical"
    assert limit.target("allreduce", 1e9) == "physical"


def test_median_run_is_the_middle_time_and_failures_count_as_slowest(limit: ModuleType) -> None:
    runs = [
        {"makespan_us": 3.0, "chunks": 4},
        {"makespan_us": 1.0, "chunks": 8},
        {"makespan_us": 2.0, "chunks": 16},
    ]
    assert limit.median_run(runs)["chunks"] == 16
    failed = [
        {"makespan_us": None, "chunks": 1},
        {"makespan_us": 5.0, "chunks": 2},
        {"makespan_us": 9.0, "chunks": 4},
    ]
    assert limit.median_run(failed)["makespan_us"] == 9.0
    assert limit.median_run([{"makespan_us": 1.0}, {"makespan_us": 2.0}])["makespan_us"] == 1.0


def test_user_path_child_runs_ccplan_solve_and_reports_a_verified_time(
    limit: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--method heuristic`` runs the command line (``ccplan solve --method heuristic``) in the
    child; DGX-1 AllGather 64 MB at C = 4: a verified schedule, never below the physical
    bound (any chunking, alpha-beta time)."""
    assert limit.child("dgx1", "allgather", 4, 30.0, "concat", 64e6, "heuristic") == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["verified"] is True
    assert data["chunks"] == 4
    topo = limit._topology(limit.INSTANCES["dgx1"])
    assert data["makespan_us"] >= limit.physical_us(topo, "allgather", 64e6) * (1 - 1e-9)
