"""nccl-tests conventions and friendlier mistakes (issue 26, items 4 and 5): sizes as nccl-tests
users type them and echoed as typed, ``plan -b/-e/-f``, the per-collective table with algbw and
busbw, ``plan.csv``, exit 3 naming the cells without a schedule, one line for a one-GPU
machine, "did you mean", the ``--size`` default said, and the bundled topology samples."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

import pytest

from ccplan.cli import main
from ccplan.errors import ValidationError
from ccplan.export.nccl_table import count_elements, nccl_time, table_lines
from ccplan.parsing import choose, format_size, parse_size, plain_number, size_series
from ccplan.schedule import load_schedule, verify

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "import"
EXPONENT = re.compile(r"\d[eE][-+]\d")


# --------------------------------------------------------------------------- sizes
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("128M", 128 * 2**20),  # nccl-tests' -b/-e letters are binary (its parsesize)
        ("1G", 2**30),
        ("1g", 2**30),
        ("4K", 4096),
        ("1T", 2**40),
        ("1GiB", 2**30),
        ("1TiB", 2**40),
        ("1GB", 10**9),  # decimal as TE-CCL
        ("64MB", 64 * 10**6),
        ("8", 8),
    ],
)
def test_parse_size_reads_nccl_tests_letters_binary(text: str, expected: int) -> None:
    """K/M/G/T = 2**10/20/30/40 as nccl-tests' parsesize; KB/MB/GB decimal; KiB binary."""
    assert parse_size(text) == expected


def test_sizes_never_print_in_exponent_form() -> None:
    """``format_size`` reads back to the same number and never has an exponent: 2**30 is
    1GiB (not 1.07374e+09B), 10**9 is 1GB, 1536 bytes is 1536B; plain_number keeps about 4
    significant digits in fixed notation (15000 -> 15000, not 1.5e+04)."""
    assert format_size(2**30) == "1GiB"
    assert format_size(10**9) == "1GB"
    assert format_size(1536) == "1536B"
    assert format_size(3 * 2**29) == "1536MiB"
    for value in (2**30, 10**9, 1536, 3.5, 2**40 + 1, 12345678901234.0):
        text = format_size(value)
        assert not EXPONENT.search(text) and parse_size(text) == pytest.approx(value)
    assert plain_number(15000.0) == "15000"
    assert plain_number(0.000123) == "0.000123"
    assert plain_number(12.3456) == "12.35"
    for k in range(-8, 16):
        text = plain_number(1.2345 * 10.0**k)
        assert not EXPONENT.search(text)
        assert float(text) == pytest.approx(1.2345 * 10.0**k, rel=1e-3)


def test_size_series_as_nccl_tests_b_e_f() -> None:
    """-b 1K -e 1G -f 4: 1024 * 4**k <= 2**30 for k = 0 .. 10, i.e. 2**(10 + 2k): 1K, 4K, 16K,
    64K, 256K, 1M, 4M, 16M, 64M, 256M, 1G (labels in the K/M/G the user wrote). -b 1KB -e 1MB
    -f 4: 1000, 4000, 16000, 64000, 256000 (1024000 > 10**6 stops), decimal labels."""
    labels = size_series("1K", "1G", 4)
    assert labels == ("1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M", "256M", "1G")
    assert [parse_size(x) for x in labels] == [2 ** (10 + 2 * k) for k in range(11)]
    assert size_series("1KB", "1MB", 4) == ("1KB", "4KB", "16KB", "64KB", "256KB")
    assert size_series("1KiB", "4KiB", 2) == ("1KiB", "2KiB", "4KiB")
    assert size_series("64M", "64M", 2) == ("64M",)
    with pytest.raises(ValidationError, match="larger than"):
        size_series("1G", "1K", 2)
    with pytest.raises(ValidationError, match="step-factor"):
        size_series("1K", "1G", 1)
    with pytest.raises(ValidationError, match="whole number of bytes"):
        size_series("1.5", "1K", 2)
    # 1, 2, 4, ... 2**99 <= 1e30: 100 sizes, above the cap of 64
    with pytest.raises(ValidationError, match="gives 100 sizes, more than 64"):
        size_series("1", "1e30", 2)


def test_cli_echoes_the_size_as_written_and_says_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    """``--size 1G`` is 2**30 = 1,073,741,824 bytes and is shown as ``1G``; the instance line
    reads 1GiB, not 1.07374e+09B. Without ``--size`` the header says the 1MB default."""
    assert main(["bounds", "--topology", "ring", "--size", "1G", "--no-upper"]) == 0
    out = capsys.readouterr().out
    assert "size      1G = 1,073,741,824 bytes\n" in out
    assert "size=1GiB" in out and not EXPONENT.search(out)
    assert main(["bounds", "--topology", "ring", "--no-upper"]) == 0
    assert "1MB = 1,000,000 bytes; the default, --size not given" in capsys.readouterr().out


# --------------------------------------------------------------------------- did you mean
def test_choose_accepts_spellings_and_suggests() -> None:
    kinds = ["allgather", "allreduce", "reduce", "reducescatter"]
    assert choose("AllReduce", kinds, "collective") == "allreduce"
    assert choose("all_reduce", kinds, "collective") == "allreduce"
    assert choose("Reduce-Scatter", kinds, "collective") == "reducescatter"
    with pytest.raises(ValidationError, match=r"did you mean 'allreduce'"):
        choose("allredce", kinds, "collective")
    with pytest.raises(ValidationError, match=r"'xyz' is unknown \(choose from"):
        choose("xyz", kinds, "collective")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--collective", "allredce"], "collective 'allredce' is unknown; did you mean 'allreduce'"),
        (["--topology", "dgx"], "did you mean 'dgx2' or 'dgx1'"),
        (["--upper-method", "milpp"], "did you mean 'milp'"),
    ],
)
def test_misspelt_names_get_did_you_mean(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    base = {"--topology": "ring", "--collective": "allgather"}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    args = ["bounds", *[x for kv in base.items() for x in kv]]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_other_spellings_of_a_name_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bounds", "--topology", "DGX-1", "--collective", "All_Reduce", "--no-upper"]) == 0
    assert "dgx1 allreduce" in capsys.readouterr().out


# --------------------------------------------------------------------------- plan
def _plan(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "plan", "--topology", "ring", "--topo-arg", "n=4", "--chunks", "1", "--time-limit", "2",
        "--no-plots", "--quiet", "--out", str(tmp_path / "plan"), *extra,
    ]  # fmt: skip


def test_plan_table_and_csv_follow_nccl_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ring of 4 (50 GB/s, alpha 0.7 us), AllGather of 1MB at C = 1: 20 us (derivation in
    tests/test_plan.py::test_plan_builtin_ring). nccl-tests' columns, by hand: count = 10**6 B
    / 4 B / 4 ranks = 62500 floats; algbw = 10**6 B / 20 us = 50 GB/s; busbw = 50 x (4-1)/4 =
    37.5 GB/s; time "20.00" (two decimals below 100 us). AllReduce's count is the whole buffer,
    10**6 / 4 = 250000, and its busbw factor 2 x 3/4 = 1.5; the sizes are named as written
    (All_Gather and AllReduce as the catalogue names them). At 1G (2**30 B) the chunk is 2**28
    B, tau = 2**28 B / 50 GB/s = 5368.7 us, alpha/tau < 0.1 so one slot per hop: AllGather
    takes 2 slots = 10737.4 us, and no output says 1.074e+04."""
    rc = main(_plan(tmp_path, "--collectives", "All_Gather,AllReduce", "--sizes", "1MB,1G",
                    "--methods", "heuristic", "--baselines", "ring"))  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert not EXPONENT.search(out)
    line = next(x for x in out.splitlines() if x.split()[:1] == ["1MB"] and "62500" in x)
    assert line.split()[:6] == ["1MB", "62500", "float", "20.00", "50.00", "37.50"]
    assert "# allreduce: busbw = algbw x 1.5 (nccl-tests' factor, n = 4)" in out
    assert out.count("# Avg bus bandwidth    : ") == 2
    big = next(x for x in out.splitlines() if x.split()[:1] == ["1G"] and str(2**30 // 16) in x)
    assert big.split()[3] == "10737"  # nccl-tests prints no decimals from 10000 us
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    with (tmp_path / "plan" / "plan.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(plan["cells"]) == 8  # 2 collectives x 2 sizes x (heuristic + ring)
    ag = next(r for r in rows if (r["collective"], r["size"], r["best"]) == ("allgather", "1MB", "yes"))
    assert (ag["count"], ag["type"], float(ag["time_us"])) == ("62500", "float", 20.0)
    assert float(ag["busbw_GBps"]) == pytest.approx(37.5)
    ar = next(r for r in rows if (r["collective"], r["size"], r["best"]) == ("allreduce", "1MB", "yes"))
    assert ar["count"] == "250000"
    assert float(ar["busbw_GBps"]) == pytest.approx(1.5 * float(ar["algbw_GBps"]))
    for best in plan["best"]:
        instance, schedule = load_schedule(tmp_path / "plan" / best["schedule"])
        assert verify(instance, schedule).ok
    for name in ("plan.csv", "report.md", "report.html"):
        text = re.sub(r"data:[^\"')]+", "", (tmp_path / "plan" / name).read_text())  # no base64
        assert "10737" in text and not EXPONENT.search(text), name
    assert main(["simulate", str(tmp_path / "plan" / "schedules" / "allgather_1G.json")]) == 0
    out = capsys.readouterr().out
    assert "slotted     10737.4 us" in out and not EXPONENT.search(out)


@pytest.mark.parametrize(
    ("collective", "factor"),
    [
        ("allgather", 3 / 4),
        ("reducescatter", 3 / 4),
        ("alltoall", 3 / 4),
        ("broadcast", 1.0),
        ("reduce", 1.0),
    ],
)
def test_busbw_factors_of_every_plan_collective(tmp_path: Path, collective: str, factor: float) -> None:
    """nccl-tests' doc/PERFORMANCE.md, n = 4: busbw = algbw x (n-1)/n for AllGather,
    ReduceScatter and AllToAll, x 1 for Broadcast and Reduce (AllReduce's 2(n-1)/n is in the
    test above); algbw = size / time (S/t)."""
    assert main(_plan(tmp_path, "--collectives", collective, "--sizes", "64KB",
                      "--methods", "heuristic", "--baselines", "")) == 0  # fmt: skip
    with (tmp_path / "plan" / "plan.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    time_us, algbw = float(row["time_us"]), float(row["algbw_GBps"])
    assert algbw == pytest.approx(64_000 / (time_us * 1e3))
    assert float(row["busbw_GBps"]) == pytest.approx(algbw * factor)
    assert row["switch_model"] == "store-and-forward"  # the built-in's paper default, named


def test_table_lines_by_hand() -> None:
    """One AllGather entry on 8 GPUs, 1M = 2**20 bytes: count = 2**20 / 4 / 8 = 32768; time
    398.46 us prints as nccl-tests does above 100 us (one decimal, 398.5) and 12751.3 us with
    none; a size without a schedule says so and leaves the average to the others."""
    entry = {
        "collective": "allgather", "size": "1M", "size_bytes": 2**20, "method": "heuristic",
        "chunks": 32, "makespan_us": 398.46, "algbw_GBps": 2.63, "busbw_GBps": 2.30,
        "physical_bound_us": 392.2, "physical_gap": 0.0157,
        "baselines": {"ring": {"makespan_us": 1174.4}, "tree": {"makespan_us": None}},
    }  # fmt: skip
    failed = {"collective": "allgather", "size": "1G", "size_bytes": 2**30, "error": "boom"}
    lines = table_lines("allgather", [entry, failed], 8, 0.875)
    row = lines[3].split()
    assert row == [
        "1M", "32768", "float", "398.5", "2.63", "2.30", "392.2", "1.6%", "heuristic", "32", "ring", "1174.4"
    ]  # fmt: skip
    assert lines[4].split()[:5] == ["1G", "33554432", "float", "-", "no"] and "boom" in lines[4]
    assert lines[-1] == "# Avg bus bandwidth    : 2.300"
    assert (nccl_time(6.876), nccl_time(12751.3), nccl_time(None)) == ("6.88", "12751", "-")
    assert count_elements("allreduce", 2**20, 8) == 2**18


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--sizes", "1MB", "-b", "1K", "-e", "1M"], "give --sizes or -b/--min-bytes"),
        (["-b", "1K"], "needs both -b/--min-bytes and -e/--max-bytes"),
        (["-f", "4"], "needs both"),
        (["-b", "1K", "-e", "1M", "-f", "1"], "-f/--step-factor: must be an integer in 2.."),
        (["-b", "1M", "-e", "1K"], "is larger than -e/--max-bytes"),
        (["--baselines", "rign"], "baseline 'rign' is unknown; did you mean 'ring'"),
    ],
)
def test_plan_size_flags_refused_before_any_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    assert main(_plan(tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not (tmp_path / "plan").exists()


def test_plan_b_e_f_plans_the_series(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-b 16K -e 1M -f 4: 16K, 64K, 256K, 1M (2**14 x 4**k <= 2**20), one row each, files
    named as the sizes are written."""
    rc = main(_plan(tmp_path, "-b", "16K", "-e", "1M", "-f", "4", "--collectives", "allgather",
                    "--methods", "heuristic", "--baselines", ""))  # fmt: skip
    assert rc == 0
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert [b["size"] for b in plan["best"]] == ["16K", "64K", "256K", "1M"]
    assert [b["size_bytes"] for b in plan["cells"]] == [2**14, 2**16, 2**18, 2**20]
    assert (tmp_path / "plan" / "schedules" / "allgather_256K.json").is_file()
    counts = [line.split()[1] for line in capsys.readouterr().out.splitlines() if line and line[0] != "#"]
    assert counts[:4] == [str(2**k // 16) for k in (14, 16, 18, 20)]  # bytes / 4 / 4 ranks


def test_plan_exits_3_naming_the_cells_without_a_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ring`` implements no AllToAll: with ring the only candidate, alltoall@64KB has no
    schedule while allgather@64KB has one. Exit 3, one stderr line naming alltoall@64KB;
    plan.csv keeps the failed cell with its status and error."""
    rc = main(_plan(tmp_path, "--collectives", "alltoall,allgather", "--sizes", "64KB",
                    "--methods", "ring", "--baselines", ""))  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 3
    assert captured.err.count("\n") == 1
    assert "no verified schedule for 1 of 2 cells: alltoall@64KB" in captured.err
    assert "no schedule:" in captured.out
    with (tmp_path / "plan" / "plan.csv").open() as fh:
        rows = {r["collective"]: r for r in csv.DictReader(fh)}
    assert rows["alltoall"]["status"] == "error" and "alltoall" in rows["alltoall"]["error"]
    assert rows["alltoall"]["time_us"] == "" and rows["allgather"]["best"] == "yes"


def test_one_gpu_machine_is_one_line_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A one-GPU machine: the nvidia-smi import refuses it, and a topology JSON of one GPU
    behind a switch (which planned 0 us "optimal" cells and exited 0 before) is refused by
    plan up front; each one line, exit 2, no file."""
    topo_json = tmp_path / "topo.json"
    assert main(["import-topology", str(DATA / "nvsmi_1gpu.txt"), "--out", str(topo_json)]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not topo_json.exists()
    link = {"bandwidth_GBps": 10.0, "alpha_us": 1.0}
    topo_json.write_text(json.dumps({
        "name": "one", "nodes": [{"id": 0, "kind": "gpu"}, {"id": 1, "kind": "switch"}],
        "links": [{"src": 0, "dst": 1, **link}, {"src": 1, "dst": 0, **link}],
    }))  # fmt: skip
    out = tmp_path / "plan"
    assert main(["plan", "--topology", str(topo_json), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has 1 GPU(s)" in err
    assert not out.exists()


# --------------------------------------------------------------------------- samples
def test_bundled_samples_match_the_test_data() -> None:
    from ccplan.cli.import_topology import SAMPLES, _sample_path

    for name, file in SAMPLES.items():
        assert _sample_path(name).read_bytes() == (DATA / file).read_bytes()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"data/samples/*.txt"' in pyproject  # installed with the package


def test_quickstart_sample_command_and_empty_nvidia_smi_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``nvidia-smi topo -m > topo.txt`` leaves without nvidia-smi (an empty file) is
    refused in one line that gives the sample command, and nothing is written; that command,
    as docs/quickstart.md prints it, imports the DGX-1 sample (8 GPUs)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "topo.txt").write_text("")
    assert main(["import-topology", "topo.txt", "--out", "topo.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ccplan import-topology --sample dgx1-v100 --out topo.json" in err
    assert not (tmp_path / "topo.json").exists()
    text = (ROOT / "docs" / "quickstart.md").read_text()
    commands = [c[2:] for c in re.findall(r"^\$ ccplan import-topology --sample .*$", text, re.M)]
    assert commands == ["ccplan import-topology --sample dgx1-v100 --out topo.json"]
    assert main(shlex.split(commands[0])[1:]) == 0
    topo = json.loads((tmp_path / "topo.json").read_text())
    assert sum(1 for node in topo["nodes"] if node["kind"] == "gpu") == 8
