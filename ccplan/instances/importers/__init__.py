"""Import a machine's topology from the tools people already run on it.

Formats (:data:`IMPORTERS`): ``nvidia-smi`` (``nvidia-smi topo -m``), ``nccl-xml`` (NCCL's
``NCCL_TOPO_DUMP_FILE``) and ``rocm-smi`` (``rocm-smi --showtopo``); ``auto`` picks one from
the text. Link classes become numbers through
:class:`~ccplan.instances.importers.classes.ClassDefaults` (documented defaults, user
overrides); :class:`~ccplan.instances.importers.machine.Network` joins several copies of the
machine. Importers produce :class:`~ccplan.instances.topology.Topology` objects only.
Malformed input raises :class:`~ccplan.errors.ValidationError` whose message starts with
``file:line:``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ccplan.errors import ValidationError
from ccplan.instances.importers.classes import (
    PCIE_GEN_GBPS,
    PCIE_LEVELS,
    ClassDefaults,
    load_overrides,
    parse_assignments,
)
from ccplan.instances.importers.machine import Machine, Network, check_pcie_gen, join_machines
from ccplan.instances.importers.nccl_xml import parse_nccl_xml
from ccplan.instances.importers.nvidia_smi import parse_nvidia_smi
from ccplan.instances.importers.rocm_smi import parse_rocm_smi
from ccplan.instances.topology import Topology

__all__ = [
    "IMPORTERS",
    "ClassDefaults",
    "Machine",
    "Network",
    "detect_format",
    "import_topology",
    "join_machines",
    "load_overrides",
    "parse_assignments",
    "read_machine",
]

log = logging.getLogger(__name__)

Parser = Callable[[str, str, str], Machine]


def _nvidia(text: str, source: str, nvswitch: str) -> Machine:
    return parse_nvidia_smi(text, source, nvswitch=nvswitch)


def _nccl(text: str, source: str, nvswitch: str) -> Machine:
    return parse_nccl_xml(text, source)


def _rocm(text: str, source: str, nvswitch: str) -> Machine:
    return parse_rocm_smi(text, source)


IMPORTERS: dict[str, Parser] = {"nvidia-smi": _nvidia, "nccl-xml": _nccl, "rocm-smi": _rocm}
"""Format name -> parser ``(text, source name, nvswitch policy) -> Machine``."""


def detect_format(text: str, source: str = "<input>") -> str:
    """Guess the format of a tool's output from its first lines."""
    head = text.lstrip()[:4000]
    if head.startswith("<"):
        return "nccl-xml"
    if "ROCm System Management Interface" in head or "Link Type between two GPUs" in head:
        return "rocm-smi"
    if "GPU0" in head:
        return "nvidia-smi"
    raise ValidationError(
        f"{source}:1: cannot tell the format (expected nvidia-smi topo -m, an NCCL XML dump or "
        "rocm-smi --showtopo); give --format"
    )


def read_machine(path: str | Path, fmt: str = "auto", nvswitch: str = "auto") -> Machine:
    """Parse a tool's output file into a :class:`Machine` (classes not yet turned into numbers)."""
    p = Path(path)
    from ccplan.instances.estimate import estimate_import_text

    try:
        estimate_import_text(f"topology file {str(p)!r}", p.stat().st_size).check()
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"topology file {str(p)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValidationError(f"topology file {str(p)!r}: not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise ValidationError(f"{p.name}:1: the file is empty")
    name = fmt if fmt != "auto" else detect_format(text, p.name)
    if name not in IMPORTERS:
        raise ValidationError(f"format {fmt!r} is unknown (choose from auto, {', '.join(IMPORTERS)})")
    return IMPORTERS[name](text, p.name, nvswitch)


def import_topology(
    path: str | Path,
    fmt: str = "auto",
    *,
    defaults: ClassDefaults | None = None,
    pcie: str = "auto",
    pcie_gen: int | None = None,
    nvswitch: str = "auto",
    network: Network | None = None,
    name: str | None = None,
) -> Topology:
    """Read a tool's output and return the topology of one machine or of a cluster of copies.

    Parameters
    ----------
    path : path
        Output of ``nvidia-smi topo -m``, an NCCL topology dump, or ``rocm-smi --showtopo``.
    fmt : {"auto", "nvidia-smi", "nccl-xml", "rocm-smi"}
    defaults : ClassDefaults, optional
        Per-class bandwidth/alpha (documented defaults when None).
    pcie : {"auto", "always", "never"}
        Keep the PCIe tree (see :meth:`Machine.to_topology`).
    pcie_gen : int, optional
        PCIe generation 1 .. 6 of every PCIe link: sets the ``PIX``/``PXB``/``PHB``/``NODE``
        classes to its x16 rate (over ``defaults``) and replaces the per-lane rate of the
        links an NCCL dump gives (their width kept). None: the file's ``link_speed`` where it
        has one, else the class defaults (Gen4; nvidia-smi and rocm-smi do not print it).
    nvswitch : {"auto", "yes", "no"}
        nvidia-smi only: whether NV# counts go through an NVSwitch.
    network : Network, optional
        Join ``network.nodes`` copies (NIC count and fabric as declared there). A NIC
        bandwidth left unset takes the slowest NIC speed the file shows (NCCL dumps carry
        ``<net speed>``), else the ``NET`` class default.
    name : str, optional
        Topology name (default: derived from the file).

    Returns
    -------
    Topology
        With ``switch_model = "cut-through"`` when it has switches (NVSwitch, PCIe, NIC and
        fabric switches forward cut-through; docs/import.md), else not stated.

    Raises
    ------
    ValidationError
        Malformed input (``file:line: ...``), or a machine of one GPU left alone (no
        collective to plan; ``network`` with two or more nodes joins copies of it).
    """
    d = defaults or ClassDefaults()
    check_pcie_gen(pcie_gen)
    if pcie_gen is not None:
        d = d.with_overrides({c: PCIE_GEN_GBPS[pcie_gen] for c in PCIE_LEVELS if c != "SYS"})
    machine = read_machine(path, fmt, nvswitch)
    if machine.gpus == 1 and (network is None or network.nodes == 1):
        raise ValidationError(
            f"{Path(path).name}: the machine has one GPU, so there is no collective to plan "
            "(join copies with --nodes N, or import a machine of two or more GPUs)"
        )
    topo = machine.to_topology(d, pcie=pcie, pcie_gen=pcie_gen)
    if network is not None and network.nodes > 1:
        from ccplan.instances.estimate import estimate_joined_machines

        # before any copy is made: --nodes 100000 would grow for minutes, then past the budget
        estimate_joined_machines(topo, network.nodes, network.nics_per_node).check()
        speeds = [gbps for _, gbps in machine.nics if gbps is not None]
        if network.bandwidth_GBps is None and speeds:
            # The slowest NIC the dump shows bounds what any rank can rely on.
            network = replace(network, bandwidth_GBps=min(speeds))
            topo = replace(
                topo, description=f"{topo.description}; NIC bandwidth {min(speeds):g} GB/s from the file"
            )
        topo = join_machines(topo, network, d)
    final_name = name or topo.name
    # Every switch an importer makes is an NVSwitch, a PCIe switch / host bridge, a NIC or a
    # fabric switch: all forward packets of a few KB at most, so a chunk streams through them
    # (docs/import.md, "Switch model"). A machine without switches states nothing.
    model = "cut-through" if topo.switches else None
    if model:
        log.warning("switches forward cut-through (switch_model %r; docs/import.md)", model)
    return Topology(
        name=final_name, nodes=topo.nodes, links=topo.links, description=topo.description, switch_model=model
    )
