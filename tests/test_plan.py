"""``ccplan plan``: best verified schedule per collective and size, bound, validated MSCCL XML,
report; and the three quickstart commands of docs/quickstart.md."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from ccplan.cli import main
from ccplan.errors import ValidationError
from ccplan.export.xml_validate import validate_xml
from ccplan.instances.builtin import resolve_topology
from ccplan.plan import PlanRequest, run_plan
from ccplan.schedule import load_schedule, verify

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "import"


def _check_plan_dir(out: Path, expected_cells: int) -> dict:
    """Every best schedule verifies, every XML passes the validator against its instance, and
    every cell's makespan is at least the best bound of its (collective, size, chunk count)."""
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan["best"]) == expected_cells
    for best in plan["best"]:
        instance, schedule = load_schedule(out / best["schedule"])
        report = verify(instance, schedule)
        assert report.ok and report.makespan_slots == best["makespan_slots"]
        assert best["xml"] is not None, best["xml_failures"]
        opts = best["xml_options"]
        assert validate_xml(out / best["xml"], expect=instance, dialect=opts["dialect"]).ok
        assert best["makespan_slots"] >= best["lower_bound_slots"]
        assert best["gap"] == pytest.approx(
            (best["makespan_slots"] - best["lower_bound_slots"]) / best["makespan_slots"]
        )
        for cell in plan["cells"]:
            # a slot bound holds for schedules of its own chunk count (--chunks auto may pick
            # another C per cell)
            if (cell["collective"], cell["size"], cell.get("chunks")) == (
                best["collective"], best["size"], best["chunks"]
            ) and cell.get("verified"):
                assert cell["makespan_slots"] >= best["lower_bound_slots"]
    assert (out / "report.md").is_file()
    return plan


def test_plan_builtin_ring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Built-in ring, n=4 (duplex 50 GB/s links, alpha 0.7 us). AllGather of 1MB, C=1: chunk
    250 KB, tau = 250e3 / 50e9 s = 5 us, alpha/tau = 0.14 > 0.1 so delta = 1 and L = 2 slots
    per hop. The opposite GPU's chunk needs 2 hops: makespan >= 4 slots, and 4 is reached
    (each GPU sends its chunk both ways, the neighbours forward it once) = 20 us. The ring
    baseline needs 3 hops in one direction = 6 slots = 30 us."""
    out = tmp_path / "plan"
    rc = main(
        [
            "plan", "--topology", "ring", "--topo-arg", "n=4", "--collectives", "allgather,allreduce",
            "--sizes", "64KB,1MB", "--time-limit", "3", "--out", str(out), "--quiet", "--chunks", "1",
        ]
    )  # fmt: skip
    assert rc == 0
    assert "report ->" in capsys.readouterr().out
    plan = _check_plan_dir(out, expected_cells=4)
    ag = next(b for b in plan["best"] if b["collective"] == "allgather" and b["size"] == "1MB")
    assert ag["makespan_us"] == pytest.approx(20.0)
    assert ag["baselines"]["ring"]["makespan_us"] == pytest.approx(30.0)
    assert "tree" not in ag["baselines"]  # tree implements no AllGather
    ar = next(b for b in plan["best"] if b["collective"] == "allreduce" and b["size"] == "1MB")
    assert set(ar["baselines"]) == {"ring", "tree"}
    methods = {c["method"] for c in plan["cells"]}
    assert methods == {"heuristic", "milp", "ring", "tree"}
    report = (out / "report.md").read_text()
    assert "allgather_bandwidth.png" in report and (out / "img" / "allgather_bandwidth.png").is_file()
    assert (out / "img" / "allreduce_1MB_gantt.png").is_file()
    # The CLI validator accepts every file too.
    for best in plan["best"]:
        assert (
            main(["validate-xml", str(out / best["xml"]), "--dialect", best["xml_options"]["dialect"]]) == 0
        )


def test_plan_chooses_the_chunk_count_by_default(tmp_path: Path) -> None:
    """The same ring and AllGather 1 MB with the default ``--chunks auto``: C = 1 gives the
    20 us of the derivation above, so any C the plan keeps is at most that; more chunks
    pipeline over the two hops, so the plan picks C > 1 and beats it. The row says the C it
    chose, the switch model, the physical bound and the claim in words; the schedule file
    is of that C."""
    req = PlanRequest(
        resolve_topology("ring", n=4), ("allgather",), ("1MB",), methods=("heuristic",), baselines=(),
        time_limit=5,
    )
    assert req.chunks == "auto"
    run_plan(req, tmp_path / "p", plots=False)
    plan = _check_plan_dir(tmp_path / "p", expected_cells=1)
    best = plan["best"][0]
    assert best["chunks"] > 1 and best["makespan_us"] < 20.0
    assert best["switch_model"] == "store-and-forward"
    assert best["physical_bound_us"] is not None and f"C = {best['chunks']}" in best["claim"]
    instance, _ = load_schedule(tmp_path / "p" / best["schedule"])
    assert instance.collective.chunks == best["chunks"]


def test_plan_imported_pcie_box_two_processes(tmp_path: Path) -> None:
    """An imported topology with switches (the PCIe tree: relays collapse in the XML), run
    on two local worker processes."""
    from ccplan.instances.importers import import_topology

    topo = import_topology(DATA / "nvsmi_pcie_8gpu.txt")
    req = PlanRequest(
        topo, ("allgather",), ("64KB",), methods=("heuristic",), baselines=("ring",), time_limit=2
    )
    res = run_plan(req, tmp_path / "p", processes=2, plots=False)
    _check_plan_dir(tmp_path / "p", expected_cells=1)
    # one cell, both buffer modes: the in-place file and the out-of-place one
    assert sorted(p.name for p in res.xml_files) == ["allgather_64KB.xml", "allgather_64KB_op.xml"]
    assert all(p.is_file() for p in res.xml_files)


def test_plan_on_dask(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed")
    topo = resolve_topology("ring", n=4)
    req = PlanRequest(
        topo, ("allgather",), ("1MB",), methods=("heuristic",), baselines=("ring",), time_limit=2,
        chunks=1,  # the C = 1 optimum of test_plan_builtin_ring: 20 us on both
    )
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        res = run_plan(req, tmp_path / "d", dask_address=cluster.scheduler_address, plots=False)
    local = run_plan(req, tmp_path / "l", plots=False)
    assert [b["makespan_us"] for b in res.best] == [b["makespan_us"] for b in local.best] == [20.0]


def test_plan_bad_input_exit_2_nothing_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan"
    rc = main(["plan", "--topology", "ring", "--collectives", "allgather,allgahter", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "allgahter" in err
    assert not out.exists()
    rc = main(["plan", "--topology", "ring", "--sizes", "1XB", "--out", str(out)])
    assert rc == 2 and "1XB" in capsys.readouterr().err
    with pytest.raises(ValidationError, match="method 'fast'"):
        PlanRequest(resolve_topology("ring"), ("allgather",), ("1MB",), methods=("fast",))


def _quickstart_commands() -> list[str]:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    block = re.search(r"```console\n(.*?)```", text, re.S)
    assert block, "docs/quickstart.md has no console block"
    return [line[2:].strip() for line in block.group(1).splitlines() if line.startswith("$ ")]


def test_quickstart_three_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three commands of docs/quickstart.md, as written, with the sample DGX-1 output in
    place of the real nvidia-smi and small sizes and a short budget appended."""
    commands = _quickstart_commands()
    assert len(commands) == 3
    assert commands[0] == "nvidia-smi topo -m > topo.txt"
    monkeypatch.chdir(tmp_path)
    shutil.copy(DATA / "nvsmi_dgx1_v100.txt", tmp_path / "topo.txt")
    assert commands[1].startswith("ccplan import-topology")
    assert main(shlex.split(commands[1])[1:]) == 0
    assert commands[2].startswith("ccplan plan")
    fast = ["--sizes", "64KB", "--time-limit", "2", "--methods", "heuristic", "--no-plots", "--quiet"]
    assert main([*shlex.split(commands[2])[1:], *fast]) == 0
    plan = _check_plan_dir(tmp_path / "plan", expected_cells=2)
    assert {b["collective"] for b in plan["best"]} == {"allgather", "allreduce"}


def test_alltoall_falls_back_to_out_of_place(tmp_path: Path) -> None:
    """The exporter refuses in-place AllToAll (it would need scratch shuffles), so the plan
    keeps the next option set, out-of-place, and says why the first one failed."""
    req = PlanRequest(
        resolve_topology("ring", n=4), ("alltoall",), ("1MB",), methods=("heuristic",), baselines=()
    )
    res = run_plan(req, tmp_path / "a", plots=False)
    (best,) = res.best
    assert best["xml_options"] == {"dialect": "executor", "inplace": False, "channels": 1}
    assert "in-place alltoall" in best["xml_failures"][0]
    _check_plan_dir(tmp_path / "a", expected_cells=1)


def _interrupting_engine(instance, options):  # type: ignore[no-untyped-def]
    """The ring schedule, reported as the best-so-far of an engine stopped by Ctrl-C."""
    from ccplan.contract import Outcome
    from ccplan.pipeline import get_engine

    out = get_engine("ring")(instance, options)
    return Outcome(out.schedule, "feasible", details={"interrupted": True})


def test_interrupted_cell_stops_the_plan_and_keeps_finished_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cells run in order heuristic@64KB, stopper@64KB, heuristic@1MB, stopper@1MB; the
    second reports an interruption, so the plan stops after 2 of 4 cells, still writes the
    64KB XML and report, and the CLI exits 130 naming the report."""
    from ccplan import contract as methods
    from ccplan.errors import SolveInterrupted

    monkeypatch.setitem(methods._ENGINES, "stopper", _interrupting_engine)
    req = PlanRequest(
        resolve_topology("ring", n=4),
        ("allgather",),
        ("64KB", "1MB"),
        methods=("heuristic", "stopper"),
        baselines=(),
    )
    with pytest.raises(SolveInterrupted) as info:
        run_plan(req, tmp_path / "i", plots=False)
    res = info.value.result
    assert len(res.rows) == 2 and [b["size"] for b in res.best] == ["64KB"]
    assert res.xml_files[0].is_file()
    assert "Interrupted: 2 of 4 cells" in res.report.read_text()
    rc = main(
        [
            "plan", "--topology", "ring", "--topo-arg", "n=4", "--collectives", "allgather",
            "--sizes", "64KB,1MB", "--methods", "heuristic,stopper", "--baselines", "",
            "--no-plots", "--quiet", "--out", str(tmp_path / "c"),
        ]
    )  # fmt: skip
    assert rc == 130
    assert "plan interrupted after 2 of 4 cells" in capsys.readouterr().err


def test_ctrl_c_between_cells(tmp_path: Path) -> None:
    from ccplan.errors import SolveInterrupted

    def stop(row: object) -> None:
        raise KeyboardInterrupt

    req = PlanRequest(resolve_topology("ring", n=4), ("allgather",), ("1MB",), methods=("heuristic",))
    with pytest.raises(SolveInterrupted, match="after 1 of 2 cells"):
        run_plan(req, tmp_path / "k", plots=False, on_row=stop)
    assert (tmp_path / "k" / "xml" / "allgather_1MB.xml").is_file()


def test_plan_on_imported_cluster(tmp_path: Path) -> None:
    """Two DGX-1 joined by 4 NICs each on one switch: a NIC serves two GPUs, so chunks relay
    GPU -> NIC -> switch -> NIC -> GPU; the XML collapses the relays and still validates."""
    from ccplan.instances.importers import Network, import_topology

    topo = import_topology(DATA / "nvsmi_dgx1_v100.txt", network=Network(nodes=2, nics_per_node=4))
    assert len(topo.gpus) == 16 and len(topo.switches) == 2 * 4 + 1
    req = PlanRequest(topo, ("allgather",), ("1MB",), methods=("heuristic",), baselines=(), time_limit=3)
    run_plan(req, tmp_path / "c", plots=False)
    _check_plan_dir(tmp_path / "c", expected_cells=1)


def test_a_strictly_faster_baseline_is_the_best_and_exported(tmp_path: Path) -> None:
    """DGX-1 AllGather 1 GB with C = 6: each GPU receives 7 x 6 = 42 chunks over 150 GB/s of
    in-links, i.e. 3 chunks per slot (tau = one chunk on a 50 GB/s double NVLink): the ingress
    bound is 14 slots, and NCCL's 6 rings of 25 GB/s fill those in-links. MTEGCCA alone needs
    more here (measured 18). The plan hands the user the faster schedule: the ring's, marked
    as a baseline, and its XML."""
    topo = resolve_topology("dgx1")
    req = PlanRequest(
        topo, ("allgather",), ("1GB",), methods=("mteg",), baselines=("ring",), chunks=6, time_limit=5
    )
    res = run_plan(req, tmp_path / "p", plots=False)
    plan = _check_plan_dir(tmp_path / "p", expected_cells=1)
    (best,) = plan["best"]
    (mteg,) = [r for r in plan["cells"] if r["method"] == "mteg"]
    assert mteg["makespan_slots"] > best["makespan_slots"]
    assert best["method"] == "ring" and best["role"] == "baseline"
    assert best["makespan_slots"] == 14
    assert {p.name for p in res.xml_files} == {"allgather_1GB.xml", "allgather_1GB_op.xml"}


def test_a_faster_schedule_without_xml_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same plan as above (the ring 14 slots, MTEGCCA more), but no export option can write
    the ring's schedule (stood in for here: at large C NCCL's rings need thousands of steps per
    thread block, and runtimes load 64, legacy 256). The user gets the fastest schedule the
    runtime can load, MTEGCCA's with its XML, and the plan lists the ring as passed over."""
    import ccplan.plan as plan_module

    real = plan_module.choose_exports

    def choose(instance, schedule, name):  # type: ignore[no-untyped-def]
        if "ring" in (schedule.method or ""):
            return {}, ["refused for the test"]
        return real(instance, schedule, name)

    monkeypatch.setattr(plan_module, "choose_exports", choose)
    topo = resolve_topology("dgx1")
    req = PlanRequest(
        topo, ("allgather",), ("1GB",), methods=("mteg",), baselines=("ring",), chunks=6, time_limit=5
    )
    res = run_plan(req, tmp_path / "p", plots=False)
    plan = json.loads((tmp_path / "p" / "plan.json").read_text())
    (best,) = plan["best"]
    assert best["method"] == "mteg" and best["xml"]
    (over,) = best["faster_without_xml"]
    assert over["method"] == "ring" and over["makespan_us"] < best["makespan_us"]
    assert "refused for the test" in over["reason"]
    assert "passed over" in (tmp_path / "p" / "report.md").read_text()
    assert {p.name for p in res.xml_files} == {"allgather_1GB.xml", "allgather_1GB_op.xml"}
