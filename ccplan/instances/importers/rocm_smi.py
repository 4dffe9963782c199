"""``rocm-smi --showtopo`` output -> :class:`~ccplan.instances.importers.machine.Machine`.

The output has titled sections (``=== Weight between two GPUs ===``, ``Hops``, ``Link Type``,
``Numa Nodes``). Which ``XGMI`` pairs are *direct* cables is read from the Weight matrix:
AMD documents that ``Hops`` reads 1 for every pair reachable over xGMI, however many xGMI
links the route crosses, while the weight is 15 per xGMI hop (the KFD io_link weight,
``15 * num_hops_xgmi``), so a direct pair has weight :data:`XGMI_WEIGHT_PER_HOP`. Without a
Weight section the Hops matrix is the fallback (Hops 1 = direct) and a note says that this
may count two-hop pairs as direct; without either every ``XGMI`` pair is direct (noted).
``PCIE`` pairs have no direct link. ``--showtopo`` does not print how many xGMI links join a
pair (MI250's two GCDs of one package have four), so each direct pair counts as one link of
the ``XGMI`` class; give the width with a class override or edit the topology JSON. GPUs on
one NUMA node share a host bridge (``PHB``); NUMA nodes are joined by ``SYS`` (no Numa
section: one node, noted); that PCIe tree is used when xGMI does not reach every GPU. The
PCIe generation is not in ``--showtopo``: the class default (Gen4) applies unless
``--pcie-gen`` or ``--class-bw`` says otherwise.
"""

from __future__ import annotations

import itertools
import logging
import re
import sys

from ccplan.errors import ValidationError
from ccplan.instances.importers.machine import Cable, Machine, pcie_tree

_TITLE = re.compile(r"^=+\s*(.*?)\s*=+\s*$")
_GPU = re.compile(r"GPU(\d+)$")
_NUMA = re.compile(r"GPU\[(\d+)\]\s*:\s*\(Topology\)\s*Numa Node:\s*(-?\d+)")

XGMI_WEIGHT_PER_HOP = 15
"""Weight one xGMI hop adds (amdkfd: ``props->weight = 15 * num_hops_xgmi``; AMD SMI docs)."""

log = logging.getLogger(__name__)


def _err(source: str, line: int, message: str) -> ValidationError:
    return ValidationError(f"{source}:{line}: {message}")


class _Matrix:
    """A parsed section: ``rows[a][b]`` is the entry of row GPU<a>, column GPU<b> (tokens
    interned: a 2,000-GPU matrix repeats a handful of strings 4 million times), and
    ``line[a]`` the line number of row GPU<a>. Rows as lists, not a dict per pair: the
    dict of 4 million ``(a, b) -> (token, line)`` entries per section took 1 GB."""

    def __init__(self, rows: list[list[str]], line: list[int]) -> None:
        self.rows = rows
        self.line = line

    def __getitem__(self, pair: tuple[int, int]) -> tuple[str, int]:
        a, b = pair
        return self.rows[a][b], self.line[a]

    def __bool__(self) -> bool:
        return bool(self.rows)


def _matrix(lines: list[tuple[int, str]], title: str, source: str) -> tuple[int, _Matrix]:
    rows = [(no, text) for no, text in lines if text.strip()]
    if not rows:
        raise ValidationError(f"{source}: section {title!r} is empty")
    head_no, head_text = rows[0]
    head = head_text.split()
    if not head or not all(_GPU.match(t) for t in head):
        raise _err(source, head_no, f"section {title!r}: expected a header of GPU columns")
    cols = [int(_GPU.match(t).group(1)) for t in head]  # type: ignore[union-attr]
    if cols != list(range(len(cols))):
        raise _err(source, head_no, f"section {title!r}: columns must be GPU0 .. GPU{len(cols) - 1}")
    n = len(cols)
    out: list[list[str] | None] = [None] * n
    line = [0] * n
    for no, text in rows[1:]:
        toks = text.split()
        match = _GPU.match(toks[0])
        if not match:
            raise _err(source, no, f"section {title!r}: row must start with GPU<n>, got {toks[0]!r}")
        a = int(match.group(1))
        if a >= n or out[a] is not None:
            raise _err(source, no, f"section {title!r}: unexpected or repeated row GPU{a}")
        if len(toks) - 1 != n:
            raise _err(
                source, no, f"section {title!r}: row GPU{a} has {len(toks) - 1} entries, expected {n}"
            )
        out[a] = list(map(sys.intern, toks[1:]))
        line[a] = no
    missing = [g for g in cols if out[g] is None]
    if missing:
        raise _err(source, head_no, f"section {title!r}: no row for GPU{missing[0]}")
    return n, _Matrix(out, line)  # type: ignore[arg-type]


def parse_rocm_smi(text: str, source: str = "<input>") -> Machine:
    """Parse ``rocm-smi --showtopo`` text.

    Raises
    ------
    ValidationError
        ``source:line: ...``: no link-type section, a bad row, an unknown link type, a
        non-integer hop count, sections of different sizes, an asymmetric pair.
    """
    sections: dict[str, list[tuple[int, str]]] = {}
    current: str | None = None
    for no, raw in enumerate(text.splitlines(), start=1):
        match = _TITLE.match(raw.strip())
        if match and raw.strip().startswith("="):
            current = match.group(1).lower()
            sections[current] = []
            continue
        if current is not None:
            sections[current].append((no, raw))
    link_key = next((k for k in sections if k.startswith("link type")), None)
    if link_key is None:
        raise ValidationError(
            f"{source}:1: no 'Link Type between two GPUs' section (is this `rocm-smi --showtopo`?)"
        )
    n, types = _matrix(sections[link_key], "Link Type", source)
    extra: dict[str, _Matrix] = {}
    for prefix, title in (("weight", "Weight"), ("hops", "Hops")):
        key = next((k for k in sections if k.startswith(prefix)), None)
        if key is not None:
            n_x, extra[prefix] = _matrix(sections[key], title, source)
            if n_x != n:
                raise _err(source, sections[key][0][0], f"{title} has {n_x} GPUs, Link Type has {n}")
    weights, hops = extra.get("weight", _Matrix([], [])), extra.get("hops", _Matrix([], []))
    notes = [f"imported from rocm-smi --showtopo ({source})"]

    def note(text: str) -> None:
        log.warning(text)
        notes.append(text)

    if not weights and hops:
        note(
            "no Weight section: XGMI pairs at Hops 1 read as direct links (rocm-smi prints Hops 1 "
            "for every xGMI-reachable pair, so two-hop pairs may be counted as direct)"
        )
    elif not weights:
        note("no Weight or Hops section: every XGMI pair read as a direct link")
    if not any(k.startswith("numa") for k in sections):
        note("no Numa Nodes section: all GPUs assumed on one NUMA node")
    numa: dict[int, int] = {}
    for no, raw in sections.get("numa nodes", []):
        match = _NUMA.search(raw)
        if match:
            g = int(match.group(1))
            if g >= n:
                raise _err(source, no, f"GPU[{g}] is not in the link-type matrix (GPU0 .. GPU{n - 1})")
            numa[g] = int(match.group(2))
    cables: list[Cable] = []
    levels: dict[tuple[int, int], str] = {}
    odd: list[tuple[int, int, int]] = []
    known = {"XGMI", "PCIE"}
    upper = {t: t.upper() for row in types.rows for t in set(row)}  # a handful of distinct tokens
    for a in range(n):
        row_a = types.rows[a]
        for b in range(a + 1, n):
            kind, other = upper[row_a[b]], upper[types.rows[b][a]]
            if kind not in known or other not in known or kind != other:
                for x, y, k in ((a, b, row_a[b]), (b, a, types.rows[b][a])):
                    if k.upper() not in known:
                        raise _err(
                            source,
                            types.line[x],
                            f"GPU{x} column GPU{y}: unknown link type {k!r} (expected XGMI or PCIE)",
                        )
                raise _err(
                    source,
                    types.line[a],
                    f"GPU{a} -> GPU{b} is {row_a[b]} but GPU{b} -> GPU{a} is {types.rows[b][a]} "
                    f"(line {types.line[b]})",
                )
            if kind == "XGMI" and _direct(a, b, weights, hops, source, odd):
                cables.append(Cable(a, b, "XGMI", 1))
    # The PCIe tree joins the GPUs of one NUMA node at PHB and all at SYS: the tree of every
    # pair's class equals the tree of a chain through each NUMA node plus a chain through
    # the nodes (the same groups at every level; 2 million pairs for 2,000 GPUs took 8 s).
    first: dict[int, int] = {}
    for g in range(n):
        node = numa.get(g, 0)
        if node in first:
            levels[(first[node], g)] = "PHB"
        else:
            first[node] = g
    heads = list(first.values())
    for x, y in itertools.pairwise(heads):
        levels[(x, y)] = "SYS"
    if odd:
        a, b, w = odd[0]
        note(
            f"{len(odd)} XGMI weight(s) not a multiple of {XGMI_WEIGHT_PER_HOP} (first GPU{a}-GPU{b}: {w}), "
            f"weights up to {XGMI_WEIGHT_PER_HOP} read as direct links"
        )
    hubs, edges = pcie_tree(n, levels)
    return Machine(
        name=f"rocm-{n}gpu",
        gpus=n,
        cables=tuple(cables),
        hubs=hubs,
        hub_edges=edges,
        notes=(*notes, "each direct xGMI pair counted as one link (widths are not in --showtopo)"),
    )


def _number(table: _Matrix, a: int, b: int, what: str, source: str) -> int:
    raw, line = table[(a, b)]
    try:
        return int(raw)
    except ValueError:
        raise _err(source, line, f"GPU{a} column GPU{b}: {what} {raw!r} is not an integer") from None


def _direct(
    a: int,
    b: int,
    weights: _Matrix,
    hops: _Matrix,
    source: str,
    odd: list[tuple[int, int, int]],
) -> bool:
    """Whether the XGMI pair ``a < b`` is one xGMI hop apart (module doc: Weight, else Hops).

    Weights that are not a multiple of 15 are appended to ``odd`` (the caller notes them).
    """
    if weights:
        both = [_number(weights, x, y, "weight", source) for x, y in ((a, b), (b, a))]
        if both[0] != both[1]:
            raise _err(
                source,
                weights[(a, b)][1],
                f"weight GPU{a} -> GPU{b} is {both[0]} but GPU{b} -> GPU{a} is {both[1]} "
                f"(line {weights[(b, a)][1]})",
            )
        if both[0] % XGMI_WEIGHT_PER_HOP:
            odd.append((a, b, both[0]))
        # At most one hop's weight: direct (a weight below 15 is nearer still, not farther).
        return both[0] <= XGMI_WEIGHT_PER_HOP
    if hops:
        return _number(hops, a, b, "hop count", source) == 1
    return True
