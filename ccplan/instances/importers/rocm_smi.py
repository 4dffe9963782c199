"""``rocm-smi --showtopo`` output -> :class:`~ccplan.instances.importers.machine.Machine`.

The output has titled sections (``=== Weight between two GPUs ===``, ``Hops``, ``Link Type``,
``Numa Nodes``). A pair of link type ``XGMI`` at one hop is a direct xGMI cable; ``PCIE``
pairs (and xGMI pairs more than one hop apart) have no direct link. ``--showtopo`` does not
print how many xGMI links join a pair (MI250's two GCDs of one package have four), so each
direct pair counts as one link of the ``XGMI`` class; give the width with a class override
or edit the topology JSON. GPUs on one NUMA node share a host bridge (``PHB``); NUMA nodes are
joined by ``SYS``; that PCIe tree is used when xGMI does not reach every GPU.
"""

from __future__ import annotations

import re

from ccplan.errors import ValidationError
from ccplan.instances.importers.machine import Cable, Machine, pcie_tree

_TITLE = re.compile(r"^=+\s*(.*?)\s*=+\s*$")
_GPU = re.compile(r"GPU(\d+)$")
_NUMA = re.compile(r"GPU\[(\d+)\]\s*:\s*\(Topology\)\s*Numa Node:\s*(-?\d+)")


def _err(source: str, line: int, message: str) -> ValidationError:
    return ValidationError(f"{source}:{line}: {message}")


def _matrix(
    lines: list[tuple[int, str]], title: str, source: str
) -> tuple[int, dict[tuple[int, int], tuple[str, int]]]:
    rows = [(no, text.split()) for no, text in lines if text.strip()]
    if not rows:
        raise ValidationError(f"{source}: section {title!r} is empty")
    head_no, head = rows[0]
    if not head or not all(_GPU.match(t) for t in head):
        raise _err(source, head_no, f"section {title!r}: expected a header of GPU columns")
    cols = [int(_GPU.match(t).group(1)) for t in head]  # type: ignore[union-attr]
    if cols != list(range(len(cols))):
        raise _err(source, head_no, f"section {title!r}: columns must be GPU0 .. GPU{len(cols) - 1}")
    out: dict[tuple[int, int], tuple[str, int]] = {}
    seen: set[int] = set()
    for no, toks in rows[1:]:
        match = _GPU.match(toks[0])
        if not match:
            raise _err(source, no, f"section {title!r}: row must start with GPU<n>, got {toks[0]!r}")
        a = int(match.group(1))
        if a not in cols or a in seen:
            raise _err(source, no, f"section {title!r}: unexpected or repeated row GPU{a}")
        seen.add(a)
        if len(toks) - 1 != len(cols):
            raise _err(
                source, no, f"section {title!r}: row GPU{a} has {len(toks) - 1} entries, expected {len(cols)}"
            )
        for b, tok in enumerate(toks[1:]):
            out[(a, b)] = (tok, no)
    missing = [g for g in cols if g not in seen]
    if missing:
        raise _err(source, head_no, f"section {title!r}: no row for GPU{missing[0]}")
    return len(cols), out


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
    hops: dict[tuple[int, int], tuple[str, int]] = {}
    hop_key = next((k for k in sections if k.startswith("hops")), None)
    if hop_key is not None:
        n_h, hops = _matrix(sections[hop_key], "Hops", source)
        if n_h != n:
            raise _err(source, sections[hop_key][0][0], f"Hops has {n_h} GPUs, Link Type has {n}")
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
    for a in range(n):
        for b in range(a + 1, n):
            kind, no = types[(a, b)]
            other, other_no = types[(b, a)]
            for x, y, k, line in ((a, b, kind, no), (b, a, other, other_no)):
                if k.upper() not in ("XGMI", "PCIE"):
                    raise _err(
                        source, line, f"GPU{x} column GPU{y}: unknown link type {k!r} (expected XGMI or PCIE)"
                    )
            if kind.upper() != other.upper():
                raise _err(
                    source,
                    no,
                    f"GPU{a} -> GPU{b} is {kind} but GPU{b} -> GPU{a} is {other} (line {other_no})",
                )
            kind = kind.upper()
            distance = 1
            if hops:
                raw, hop_no = hops[(a, b)]
                try:
                    distance = int(raw)
                except ValueError:
                    raise _err(
                        source, hop_no, f"GPU{a} column GPU{b}: hop count {raw!r} is not an integer"
                    ) from None
            if kind == "XGMI" and distance == 1:
                cables.append(Cable(a, b, "XGMI", 1))
            levels[(a, b)] = "PHB" if numa.get(a, 0) == numa.get(b, 0) else "SYS"
    hubs, edges = pcie_tree(n, levels)
    return Machine(
        name=f"rocm-{n}gpu",
        gpus=n,
        cables=tuple(cables),
        hubs=hubs,
        hub_edges=edges,
        notes=(
            f"imported from rocm-smi --showtopo ({source})",
            "each direct xGMI pair counted as one link (widths are not in --showtopo)",
        ),
    )
