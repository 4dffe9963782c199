"""NCCL's topology dump (``NCCL_TOPO_DUMP_FILE``) -> :class:`~ccplan.instances.importers.machine.Machine`.

The dump nests ``<cpu>`` > ``<pci>`` (bridges, class ``0x060400``) > ``<pci>`` (device) >
``<gpu dev sm rank>`` with ``<nvlink target count tclass>`` children, and ``<nic>`` >
``<net name speed>``. Read as NCCL reads it (``src/graph/topo.cc``):

- a PCIe edge's bandwidth is ``link_width x rate / 80`` GB/s with the per-lane rate of the
  ``link_speed`` string (:data:`PCIE_RATE`); NCCL writes ``link_speed=""`` and
  ``link_width=""`` when ``/sys`` has no entry for the device (``ncclTopoGetXmlFromSys`` in
  ``src/graph/xml.cc``) and reads them as its table's fallback, 60 (8 GT/s, Gen3), and
  width 0 as x16 (``ncclTopoAddPci``): so do we, with a note (:data:`FALLBACK_RATE`); a
  ``<pci>`` without the attributes takes the class default;
- every ``<pci busid>`` names one device: a bus id used twice is an error;
- an NVLink whose target has class ``0x068000`` goes to an NVSwitch; all NVSwitches merge
  into one switch node (NCCL does the same), so a GPU's port is the sum of its counts;
- a NIC's ``speed`` is in Mb/s;
- sockets (``<cpu>``) are joined by one ``SYS`` hub.

The XML is read with ``xml.parsers.expat`` so that every error names its line.
"""

from __future__ import annotations

import logging
import re
import xml.parsers.expat
from collections.abc import Mapping
from dataclasses import dataclass, field

from ccplan.errors import ValidationError
from ccplan.instances.importers.machine import Cable, HubEdge, Machine

PCIE_RATE: Mapping[str, int] = {
    "2.5": 15,
    "5": 30,
    "8": 60,
    "16": 120,
    "32": 240,
    "64": 480,
}
"""GT/s -> per-lane rate in 100 Mb/s, NCCL's ``kvDictPciGen`` (2.5 GT/s = Gen1 ... 64 = Gen6)."""

FALLBACK_RATE = 60
"""NCCL's ``kvDictPciGen`` default for a speed it cannot read (``""``): 8 GT/s, i.e. Gen3."""

log = logging.getLogger(__name__)

NVSWITCH_CLASS = "0x068000"
CPU_CLASS = "0x068001"
BRIDGE_CLASS = "0x060400"


@dataclass
class _El:
    tag: str
    attrs: dict[str, str]
    line: int
    children: list[_El] = field(default_factory=list)
    parent: _El | None = None


def _parse(text: str, source: str) -> _El:
    root = _El("#document", {}, 0)
    stack = [root]
    parser = xml.parsers.expat.ParserCreate()

    def start(tag: str, attrs: dict[str, str]) -> None:
        el = _El(tag, dict(attrs), parser.CurrentLineNumber, parent=stack[-1])
        stack[-1].children.append(el)
        stack.append(el)

    def end(tag: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as exc:
        raise ValidationError(
            f"{source}:{exc.lineno}: invalid XML: {xml.parsers.expat.errors.messages[exc.code]}"
        ) from None
    return root


def _err(source: str, el: _El, message: str) -> ValidationError:
    return ValidationError(f"{source}:{el.line}: <{el.tag}> {message}")


def _int_attr(el: _El, key: str, source: str, minimum: int = 0) -> int:
    raw = el.attrs.get(key)
    if raw is None:
        raise _err(source, el, f"has no {key!r} attribute")
    try:
        value = int(raw, 0)
    except ValueError:
        raise _err(source, el, f"attribute {key}={raw!r} is not an integer") from None
    if value < minimum:
        raise _err(source, el, f"attribute {key}={raw!r} must be >= {minimum}")
    return value


def _pci_bw(el: _El, source: str, unknown: list[int]) -> tuple[float | None, int | None]:
    """``(GB/s, lanes)`` of a ``<pci>``'s upstream link; ``(None, None)`` without the attributes.

    An empty ``link_speed`` (NCCL could not read ``/sys``) takes NCCL's fallback rate and
    appends the element's line to ``unknown``.
    """
    speed, width = el.attrs.get("link_speed"), el.attrs.get("link_width")
    if speed is None or width is None:
        return None, None
    if not speed.strip():
        unknown.append(el.line)
        rate = FALLBACK_RATE
    else:
        match = re.match(r"\s*([0-9.]+)\s*GT/s", speed)
        key = None
        if match is not None:
            # "16.0 GT/s PCIe" (new kernels) and "16 GT/s" (old ones) name the same rate.
            key = match.group(1).rstrip("0").rstrip(".") if "." in match.group(1) else match.group(1)
        if key is None or key not in PCIE_RATE:
            raise _err(
                source,
                el,
                f"link_speed={speed!r} is not a PCIe rate (2.5, 5, 8, 16, 32 or 64 GT/s, or empty)",
            )
        rate = PCIE_RATE[key]
    # NCCL reads width 0, and the empty width it writes beside an empty speed, as x16.
    lanes = (_int_attr(el, "link_width", source, minimum=0) if width.strip() else 0) or 16
    return lanes * rate / 80.0, lanes


def _walk(el: _El) -> list[_El]:
    out = [el]
    for child in el.children:
        out.extend(_walk(child))
    return out


def parse_nccl_xml(text: str, source: str = "<input>") -> Machine:
    """Parse an NCCL topology dump.

    Raises
    ------
    ValidationError
        ``source:line: ...``: invalid XML, no ``<system>``, a GPU without its ``<pci>``, a
        missing or bad attribute, an NVLink to an unknown device, link counts that disagree.
    """
    doc = _parse(text, source)
    systems = [c for c in doc.children if c.tag == "system"]
    if not systems:
        first = doc.children[0] if doc.children else None
        line = first.line if first else 1
        raise ValidationError(f"{source}:{line}: the top element must be <system> (an NCCL topology dump)")
    system = systems[0]
    everything = _walk(system)
    gpus = [el for el in everything if el.tag == "gpu"]
    if not gpus:
        raise _err(source, system, "contains no <gpu>")
    busids: dict[str, _El] = {}
    for el in everything:
        if el.tag == "pci" and "busid" in el.attrs:
            bus = el.attrs["busid"].lower()
            if bus in busids:
                raise _err(source, el, f"busid {el.attrs['busid']!r} already used at line {busids[bus].line}")
            busids[bus] = el
    bus_of: dict[int, str] = {}
    rank_of_el: dict[int, int] = {}
    ranks_seen: dict[int, _El] = {}
    for el in gpus:
        pci = el.parent
        if pci is None or pci.tag != "pci" or "busid" not in pci.attrs:
            raise _err(source, el, "must sit inside a <pci busid=...> element")
        rank = _int_attr(el, "rank", source) if "rank" in el.attrs else _int_attr(el, "dev", source)
        if rank in ranks_seen:
            raise _err(source, el, f"rank {rank} already used at line {ranks_seen[rank].line}")
        ranks_seen[rank] = el
        bus_of[id(el)] = pci.attrs["busid"].lower()
        rank_of_el[id(el)] = rank
    order = sorted(ranks_seen)
    dense = {r: i for i, r in enumerate(order)}
    gpu_by_bus = {bus_of[id(el)]: dense[rank_of_el[id(el)]] for el in gpus}
    device_class = {
        el.attrs["busid"].lower(): el.attrs.get("class", "")
        for el in everything
        if el.tag == "pci" and "busid" in el.attrs
    }

    nv: dict[tuple[int, int], tuple[int, _El]] = {}
    ports: dict[int, int] = {}
    notes = [f"imported from an NCCL topology dump ({source})"]
    for el in gpus:
        g = gpu_by_bus[bus_of[id(el)]]
        for link in el.children:
            if link.tag != "nvlink":
                continue
            target = link.attrs.get("target", "").lower()
            if not target:
                raise _err(source, link, "has no 'target' attribute")
            count = _int_attr(link, "count", source, minimum=1)
            tclass = link.attrs.get("tclass", device_class.get(target, "")).lower()
            if target in gpu_by_bus:
                peer = gpu_by_bus[target]
                if peer == g:
                    raise _err(source, link, "targets its own GPU")
                key = (min(g, peer), max(g, peer))
                if key in nv and nv[key][0] != count:
                    raise _err(
                        source,
                        link,
                        f"count={count} but the other direction (line {nv[key][1].line}) says {nv[key][0]}",
                    )
                nv[key] = (count, link)
            elif tclass == NVSWITCH_CLASS:
                ports[g] = ports.get(g, 0) + count
            elif tclass == CPU_CLASS:
                notes.append(f"GPU {g}: NVLink to a CPU ignored (line {link.line})")
            else:
                raise _err(source, link, f"target {target!r} is neither a GPU of this dump nor an NVSwitch")

    # PCIe tree from the nesting: every <cpu> and bridge <pci> is a hub.
    hubs: dict[int, int] = {}
    edges: list[HubEdge] = []
    cpus = [el for el in system.children if el.tag == "cpu"]

    def hub(el: _El) -> int:
        if id(el) not in hubs:
            hubs[id(el)] = len(hubs)
        return hubs[id(el)]

    unknown_speed: list[int] = []

    def visit(el: _El, parent_hub: int, depth: int) -> None:
        for child in el.children:
            if child.tag != "pci":
                continue
            cls = child.attrs.get("class", "")
            level = "PIX" if depth > 0 else "PHB"
            gpu_child = next((c for c in child.children if c.tag == "gpu"), None)
            if gpu_child is not None:
                bw, lanes = _pci_bw(child, source, unknown_speed)
                edges.append(
                    HubEdge(("gpu", gpu_by_bus[bus_of[id(gpu_child)]]), parent_hub, level, bw, lanes)
                )
            elif cls == BRIDGE_CLASS:
                h = hub(child)
                bw, lanes = _pci_bw(child, source, unknown_speed)
                edges.append(HubEdge(("hub", h), parent_hub, "PXB" if depth > 0 else "PHB", bw, lanes))
                visit(child, h, depth + 1)

    for cpu in cpus:
        visit(cpu, hub(cpu), 0)
    if len(cpus) > 1:
        top = len(hubs)
        hubs[-1] = top
        edges.extend(HubEdge(("hub", hubs[id(cpu)]), top, "SYS") for cpu in cpus)
    if unknown_speed:
        lines = ", ".join(map(str, unknown_speed[:5])) + (", ..." if len(unknown_speed) > 5 else "")
        note = (
            f"empty link_speed on {len(unknown_speed)} PCIe link(s) (line {lines}): read as NCCL "
            "does, 8 GT/s (Gen3), unless --pcie-gen gives the generation"
        )
        log.warning(note)
        notes.append(note)
    attached = {e.child[1] for e in edges if e.child[0] == "gpu"}
    orphans = [g for g in range(len(order)) if g not in attached]
    if orphans and cpus:
        el = next(el for el in gpus if gpu_by_bus[bus_of[id(el)]] == orphans[0])
        notes.append(f"GPU at line {el.line} is not under a <cpu>: no PCIe path for it")

    nics: list[tuple[str, float | None]] = []
    for el in everything:
        if el.tag == "net":
            speed = el.attrs.get("speed")
            gbps = None
            if speed is not None:
                gbps = _int_attr(el, "speed", source, minimum=1) / 8000.0  # Mb/s -> GB/s
            nics.append((el.attrs.get("name", f"net{len(nics)}"), gbps))
    sms = {el.attrs.get("sm") for el in gpus}
    if sms == {"60"}:
        notes.append("sm 60 (P100): NVLink 1 runs at 20 GB/s per link; override NV=20")
    return Machine(
        name=f"nccl-{len(order)}gpu",
        gpus=len(order),
        cables=tuple(Cable(a, b, "NV", c) for (a, b), (c, _) in sorted(nv.items())),
        nvswitch_ports=ports,
        hubs=len(hubs),
        hub_edges=tuple(edges),
        nics=tuple(nics),
        notes=tuple(notes),
    )
