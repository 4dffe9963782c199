"""``--chunks auto`` (``ccplan.pipeline.combining.solve_auto_chunks``) and busbw in the CLI."""

from __future__ import annotations

import json

import pytest

from ccplan.cli import main
from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.instances.builtin import fully_connected, ring
from ccplan.instances.combining import allreduce
from ccplan.instances.instance import make_instance
from ccplan.pipeline.chunks import AUTO_CHUNKS, AUTO_MAX_PIECES, AUTO_PATIENCE, solve_auto_chunks
from ccplan.pipeline.solve import solve


def test_auto_chunks_keeps_the_fastest_verified_candidate():
    """Every candidate is solved again here, independently: the reported times are theirs, and
    the chosen instance is the one with the smallest time in microseconds (a slot's length
    changes with C, so slots would not compare)."""
    topo = ring(4, alpha_us=0.0)

    def build(c: int):
        return make_instance(topo, allreduce(topo, chunks=c), "1MB")

    inst, result = solve_auto_chunks(build, "ring")
    reported = result.details["auto_chunks"]
    allowed = [c for c in AUTO_CHUNKS if c == 1 or c * 4 <= AUTO_MAX_PIECES]
    # C is doubled from 1 without gaps, and the search stops only after AUTO_PATIENCE
    # candidates in a row that were not faster than the best before them
    assert [int(c) for c in reported] == allowed[: len(reported)]
    times = {}
    for c in reported:
        r = solve(build(int(c)), "ring")
        assert r.verified
        times[c] = r.makespan_us
    assert reported == pytest.approx(times)
    if len(reported) < len(allowed):
        order = list(times.values())
        tail = order[-AUTO_PATIENCE:]
        assert min(order[:-AUTO_PATIENCE]) <= min(tail)
    assert result.verified and result.makespan_us == min(times.values())
    assert inst.collective.chunks == int(min(times, key=lambda k: times[k]))


def test_auto_chunks_pipelines_where_it_pays():
    """Fully connected 3 GPUs, alpha 1 us, heuristic AllReduce: the result is never slower than
    the C = 1 schedule, and it is one of the candidates' own results."""
    topo = fully_connected(3, alpha_us=1.0)

    def build(c: int):
        return make_instance(topo, allreduce(topo, chunks=c), "4MB")

    inst, result = solve_auto_chunks(build, "mteg", SolveOptions(time_limit=20))
    one = solve(build(1), "mteg", SolveOptions(time_limit=5))
    assert result.verified and result.makespan_us <= one.makespan_us
    assert result.details["auto_chunks"][str(inst.collective.chunks)] == result.makespan_us


def test_auto_chunks_fails_with_one_line_when_nothing_verifies():
    topo = ring(4, alpha_us=0.0)
    with pytest.raises(ValidationError, match="no chunk count"):
        solve_auto_chunks(lambda c: make_instance(topo, allreduce(topo, chunks=c), "1MB"), "pairwise")


def test_cli_chunks_auto_and_busbw(capsys):
    code = main(["solve", "--topology", "ring", "--topo-arg", "n=4", "--collective", "allreduce",
                 "--size", "1MB", "--chunks", "auto", "--method", "ring", "--json", "--quiet"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    tried = data["details"]["auto_chunks"]
    assert data["verified"] and list(tried)[:2] == ["1", "2"] and all(v is not None for v in tried.values())
    assert data["busbw_GBps"] == pytest.approx(data["algbw_GBps"] * 2 * 3 / 4)


@pytest.mark.parametrize("argv", [
    ["bounds", "--topology", "dgx1", "--collective", "allreduce", "--chunks", "auto"],
    ["solve", "--topology", "dgx1", "--chunks", "0x"],
])
def test_cli_chunks_auto_bad_use_exits_2(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse rejects a malformed value itself
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "chunks" in err[0]
