"""The streamed XML validator on hand-made documents: corruptions, cycles, orders across GPUs.

Every document here is written out in full, so each expected verdict can be read off it by
hand (the docstrings give the derivation). ``validate_xml`` reads a file as a stream; the same
text passed as a string must give the same report.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import greedy_schedule

from ccplan.export.msccl import to_msccl_xml
from ccplan.export.xml_validate import validate_xml
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import dgx1

DATA = Path(__file__).parent / "data" / "xml"

HEAD = (
    '<algo name="t" proto="Simple" nchannels="1" nchunksperloop="{k}" ngpus="{n}" coll="{coll}" '
    'inplace="1" outofplace="0" minBytes="0" maxBytes="1099511627776">\n'
)


def step(
    s: int,
    typ: str,
    src: str,
    soff: int,
    dst: str,
    doff: int,
    depid: int = -1,
    deps: int = -1,
    hasdep: int = 0,
) -> str:
    return (
        f'      <step s="{s}" type="{typ}" srcbuf="{src}" srcoff="{soff}" dstbuf="{dst}" dstoff="{doff}" '
        f'cnt="1" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>\n'
    )


def gpu(g: int, blocks: list[tuple[int, int, list[str]]], o_chunks: int = 2) -> str:
    out = f'  <gpu id="{g}" i_chunks="0" o_chunks="{o_chunks}" s_chunks="0">\n'
    for tid, (send, recv, steps) in enumerate(blocks):
        out += f'    <tb id="{tid}" send="{send}" recv="{recv}" chan="0">\n' + "".join(steps) + "    </tb>\n"
    return out + "  </gpu>\n"


def doc(n: int, k: int, coll: str, gpus: list[str]) -> str:
    return HEAD.format(n=n, k=k, coll=coll) + "".join(gpus) + "</algo>\n"


@pytest.mark.parametrize("path", sorted((DATA / "good").glob("*.xml")) + sorted((DATA / "bad").glob("*.xml")))
def test_file_and_text_give_the_same_report(path: Path) -> None:
    """The stream (file) and the string are one document: identical verdicts and messages."""
    from_file = validate_xml(path)
    from_text = validate_xml(path.read_text())
    assert from_file.ok == from_text.ok
    assert [str(e) for e in from_file.errors] == [str(e) for e in from_text.errors]
    assert dict(from_file.stats) == dict(from_text.stats)


def test_cycle_with_a_step_behind_it_is_reported_not_crashed() -> None:
    """GPU 0 and GPU 1 each receive before they send (the cycle 0:tb1 r -> 0:tb1 s -> 1 r ->
    1 s -> back). GPU 0 tb 0 holds one copy that waits on tb 1 step 0: it is behind the cycle
    (Kahn leaves it unordered) but on no cycle, and it is the first step of the document, so a
    walk starting there has nowhere to go. The report names the cycle, starting at its first
    step in document order (GPU 0 tb 1 step 0)."""
    text = doc(
        2,
        2,
        "allgather",
        [
            gpu(
                0,
                [
                    (-1, -1, [step(0, "cpy", "o", 0, "o", 1, depid=1, deps=0)]),
                    (1, 1, [step(0, "r", "o", 1, "o", 1, hasdep=1), step(1, "s", "o", 0, "o", 0)]),
                ],
            ),
            gpu(1, [(0, 0, [step(0, "r", "o", 0, "o", 0), step(1, "s", "o", 1, "o", 1)])]),
        ],
    )
    report = validate_xml(text)
    assert not report.ok
    cycles = [e for e in report.errors if e.kind == "cycle"]
    assert len(cycles) == 1
    assert (cycles[0].gpu, cycles[0].tb, cycles[0].step) == (0, 1, 0)
    assert "across GPUs 0, 1" in cycles[0].message


def _cross_gpu(forward: bool) -> str:
    """GPU 0 sends o[0] (tb 0) and, in another thread block without a dependency, receives
    into o[0] from GPU 1 (tb 1). With ``forward`` GPU 1 receives the send and only then
    sends, so the read of o[0] on GPU 0 happens before its write through GPU 1; without it,
    GPU 1 sends first and nothing orders the two accesses."""
    g1 = (
        [step(0, "r", "o", 0, "o", 0), step(1, "s", "o", 1, "o", 0)]
        if forward
        else [step(0, "s", "o", 1, "o", 0), step(1, "r", "o", 0, "o", 0)]
    )
    return doc(
        2,
        2,
        "allgather",
        [
            gpu(0, [(1, -1, [step(0, "s", "o", 0, "o", 0)]), (-1, 1, [step(0, "r", "o", 1, "o", 0)])]),
            gpu(1, [(0, 0, g1)]),
        ],
    )


def test_order_through_another_gpu_is_no_race() -> None:
    """The only path from GPU 0's read to its write runs through GPU 1 (send, GPU 1 receive,
    GPU 1 send, receive): not a race, whatever the per-GPU clocks say."""
    report = validate_xml(_cross_gpu(forward=True))
    assert "race" not in report.kinds(), [str(e) for e in report.errors]


def test_unordered_accesses_are_a_race() -> None:
    """Without the path through GPU 1 the send of o[0] and the receive into o[0] on GPU 0
    are unordered: exactly one race, naming both thread blocks."""
    report = validate_xml(_cross_gpu(forward=False))
    races = [e for e in report.errors if e.kind == "race"]
    assert len(races) == 1
    assert "o[0]" in races[0].message and "tb 0 step 0 and tb 1 step 0" in races[0].message


def test_split_element_found_past_the_first_chunk(tmp_path: Path) -> None:
    """The line-format checks see the whole stream: a tag split over two lines after 20 KB of
    valid steps (the reader takes 16 KB at a time) is reported at its line; nothing else is
    wrong, and the unsplit text passes."""
    topo = dgx1()
    inst = make_instance(topo, make_collective("allgather", topo, 2), "1MB")
    text = to_msccl_xml(inst, greedy_schedule(inst), channels=2)
    lines = text.splitlines(keepends=True)
    split = next(i for i, ln in enumerate(lines) if "<step " in ln and sum(map(len, lines[:i])) > 20_000)
    lines[split] = lines[split].replace(' cnt="1"', '\n cnt="1"', 1)
    path = tmp_path / "split.xml"
    path.write_text("".join(lines))
    report = validate_xml(path, expect=inst)
    assert [e.kind for e in report.errors] == ["format"]
    assert f"line {split + 1} " in report.errors[0].message
    good = tmp_path / "ok.xml"
    good.write_text(text)
    assert validate_xml(good, expect=inst).ok


def test_truncated_file_is_a_parse_error_only(tmp_path: Path) -> None:
    """A file cut in the middle: one parse error; nothing read before the cut is reported."""
    text = (DATA / "good" / "ring4_allgather_inplace.xml").read_text()
    path = tmp_path / "cut.xml"
    path.write_text(text[: len(text) // 2])
    report = validate_xml(path)
    assert [e.kind for e in report.errors] == ["parse"]


def test_validate_xml_cli_reads_only_the_instance_of_a_columnar_file(tmp_path: Path) -> None:
    """``validate-xml --expect run.npz`` needs the instance alone: ``load_columnar_instance``
    returns the instance ``load_columnar`` returns, and the CLI accepts the XML against it
    (exit 0) and rejects a broken one (exit 1)."""
    from ccplan.cli import main
    from ccplan.schedule import save_schedule
    from ccplan.schedule.columnar import load_columnar, load_columnar_instance

    topo = dgx1()
    inst = make_instance(topo, make_collective("allgather", topo, 1), "1MB")
    schedule = greedy_schedule(inst)
    npz = tmp_path / "run.npz"
    save_schedule(npz, inst, schedule)
    assert load_columnar_instance(npz) == load_columnar(npz)[0] == inst
    xml = tmp_path / "run.xml"
    xml.write_text(to_msccl_xml(inst, schedule))
    assert main(["validate-xml", str(xml), "--expect", str(npz)]) == 0
    xml.write_text(to_msccl_xml(inst, schedule).replace('type="rcs"', 'type="r"', 1))
    assert main(["validate-xml", str(xml), "--expect", str(npz)]) == 1


def test_blocks_listed_out_of_id_order_keep_their_dependencies() -> None:
    """Broadcast from GPU 0 over GPU 1 to GPU 2, GPU 1's blocks listed as tb 1 then tb 0: tb 1
    sends o[0] after (depid 0, deps 0) tb 0 has received it. Ids, not document positions,
    name the blocks, so the read is ordered after the write: the file is valid. Without the
    dependency it is the race of ``race_no_dependency.xml`` (and the simulation, which may run
    the send first, can miss the postcondition too)."""

    def text(depid: int) -> str:
        g1 = (
            '  <gpu id="1" i_chunks="0" o_chunks="1" s_chunks="0">\n'
            '    <tb id="1" send="2" recv="-1" chan="0">\n'
            + step(0, "s", "o", 0, "o", 0, depid=depid, deps=0 if depid >= 0 else -1)
            + "    </tb>\n"
            '    <tb id="0" send="-1" recv="0" chan="0">\n'
            + step(0, "r", "o", 0, "o", 0, hasdep=1 if depid >= 0 else 0)
            + "    </tb>\n  </gpu>\n"
        )
        return doc(
            3,
            1,
            "broadcast",
            [
                gpu(0, [(1, -1, [step(0, "s", "o", 0, "o", 0)])], o_chunks=1),
                g1,
                gpu(2, [(-1, 1, [step(0, "r", "o", 0, "o", 0)])], o_chunks=1),
            ],
        )

    report = validate_xml(text(0))
    assert report.ok, [str(e) for e in report.errors]
    assert "race" in validate_xml(text(-1)).kinds()
