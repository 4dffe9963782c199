"""The machine an importer reads, before link classes become numbers, and the cluster join.

Importers fill a :class:`Machine`: GPUs (ranks ``0 .. G-1``), direct GPU-GPU cables with their
class and link count (``NV2``, ``XGMI``), NVSwitch ports, and the PCIe tree (hubs joined by
class-labelled edges). :meth:`Machine.to_topology` applies a
:class:`~ccplan.instances.importers.classes.ClassDefaults` and returns a
:class:`~ccplan.instances.topology.Topology`. :func:`join_machines` copies a one-machine
topology over several nodes joined by a declared network (:class:`Network`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from ccplan.errors import ValidationError
from ccplan.instances.importers.classes import LINK_CLASSES, PCIE_GEN_GBPS, PCIE_LEVELS, ClassDefaults
from ccplan.instances.topology import Link, Node, Topology

PCIE_POLICIES: tuple[str, ...] = ("auto", "always", "never")
FABRICS: tuple[str, ...] = ("switch", "rail")


@dataclass(frozen=True)
class Cable:
    """A duplex GPU-GPU connection of ``count`` links of class ``link_class`` (``NV``, ``XGMI``)."""

    a: int
    b: int
    link_class: str
    count: int = 1

    def __post_init__(self) -> None:
        if self.link_class not in LINK_CLASSES:
            raise ValidationError(f"cable {self.a}-{self.b}: unknown class {self.link_class!r}")
        if self.count < 1:
            raise ValidationError(f"cable {self.a}-{self.b}: link count must be >= 1, got {self.count}")


@dataclass(frozen=True)
class HubEdge:
    """PCIe tree edge ``child -> parent``; a child is ``("gpu", rank)`` or ``("hub", index)``."""

    child: tuple[str, int]
    parent: int
    link_class: str
    bandwidth_GBps: float | None = None
    """Measured/declared bandwidth (e.g. from an NCCL dump's link_speed); None: class default."""
    lanes: int | None = None
    """PCIe lane count the file gives (NCCL's link_width, 0 read as 16); lets a PCIe generation
    override recompute ``bandwidth_GBps`` while keeping the width. None: not from the file."""


@dataclass(frozen=True)
class Machine:
    """One machine as an importer saw it.

    Parameters
    ----------
    name : str
    gpus : int
        GPU count; ranks ``0 .. gpus-1`` in the tool's order.
    cables : tuple of Cable
        Direct GPU-GPU connections.
    nvswitch_ports : mapping
        GPU rank -> NVLink count to the (single, merged) NVSwitch; empty without NVSwitch.
    hubs : int
        Number of PCIe hubs (switches, host bridges, sockets).
    hub_edges : tuple of HubEdge
        The PCIe tree.
    nics : tuple of (name, GB/s or None)
        Network cards seen on the machine.
    notes : tuple of str
        Choices the importer made (shown by the CLI, kept in the description).
    """

    name: str
    gpus: int
    cables: tuple[Cable, ...] = ()
    nvswitch_ports: Mapping[int, int] = field(default_factory=dict)
    hubs: int = 0
    hub_edges: tuple[HubEdge, ...] = ()
    nics: tuple[tuple[str, float | None], ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValidationError(f"machine {self.name!r}: no GPU found")
        for c in self.cables:
            if not (0 <= c.a < self.gpus and 0 <= c.b < self.gpus) or c.a == c.b:
                raise ValidationError(
                    f"machine {self.name!r}: cable {c.a}-{c.b} does not join two of its GPUs"
                )
        for g, count in self.nvswitch_ports.items():
            if not 0 <= g < self.gpus or count < 1:
                raise ValidationError(f"machine {self.name!r}: NVSwitch port of GPU {g} with {count} links")
        for e in self.hub_edges:
            if not 0 <= e.parent < self.hubs:
                raise ValidationError(f"machine {self.name!r}: PCIe edge to unknown hub {e.parent}")
        object.__setattr__(self, "nvswitch_ports", MappingProxyType(dict(self.nvswitch_ports)))

    def _fast_graph_connected(self) -> bool:
        parent = list(range(self.gpus))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for c in self.cables:
            parent[find(c.a)] = find(c.b)
        ported = [g for g, n in self.nvswitch_ports.items() if n > 0]
        for g in ported[1:]:
            parent[find(g)] = find(ported[0])
        return len({find(g) for g in range(self.gpus)}) == 1

    def to_topology(
        self, defaults: ClassDefaults | None = None, pcie: str = "auto", pcie_gen: int | None = None
    ) -> Topology:
        """The machine with numbers on its links.

        Parameters
        ----------
        defaults : ClassDefaults, optional
            Per-class bandwidth and alpha (module doc of ``classes``).
        pcie : {"auto", "always", "never"}
            Include the PCIe tree: ``auto`` only when NVLink/xGMI/NVSwitch leave some GPUs
            unreachable (collective libraries do not route over PCIe when NVLink connects
            everyone, and every extra switch node enlarges the models).
        pcie_gen : int, optional
            PCIe generation (1 .. 6) that replaces the per-lane rate of every PCIe edge whose
            width the file gave (``lanes``); the class-default edges follow ``defaults``.

        Returns
        -------
        Topology
            GPUs ``0 .. G-1`` first, then the NVSwitch (if any), then PCIe hubs.
        """
        if pcie not in PCIE_POLICIES:
            raise ValidationError(f"pcie must be one of {PCIE_POLICIES}, got {pcie!r}")
        check_pcie_gen(pcie_gen)
        d = defaults or ClassDefaults()
        nodes = [Node(g, "gpu") for g in range(self.gpus)]
        links: list[Link] = []

        def duplex(a: int, b: int, bw: float, alpha: float) -> None:
            links.append(Link(a, b, bw, alpha))
            links.append(Link(b, a, bw, alpha))

        for c in self.cables:
            duplex(c.a, c.b, c.count * d.bw(c.link_class), d.alpha(c.link_class))
        next_id = self.gpus
        if self.nvswitch_ports:
            sw = next_id
            next_id += 1
            nodes.append(Node(sw, "switch"))
            for g, count in sorted(self.nvswitch_ports.items()):
                duplex(g, sw, count * d.bw("NVSWITCH"), d.alpha("NVSWITCH"))
        use_pcie = pcie == "always" or (pcie == "auto" and not self._fast_graph_connected())
        if use_pcie and self.hubs:
            base = next_id
            nodes.extend(Node(base + h, "switch") for h in range(self.hubs))
            for e in self.hub_edges:
                child = e.child[1] if e.child[0] == "gpu" else base + e.child[1]
                bw = e.bandwidth_GBps if e.bandwidth_GBps is not None else d.bw(e.link_class)
                if pcie_gen is not None and e.lanes is not None:
                    bw = e.lanes * PCIE_GEN_GBPS[pcie_gen] / 16
                duplex(child, base + e.parent, bw, d.alpha(e.link_class))
        notes = list(self.notes)
        if self.hubs and not use_pcie:
            notes.append(
                "PCIe tree left out (pcie=never)"
                if pcie == "never"
                else "PCIe tree left out: NVLink/xGMI connects every GPU (use pcie=always to keep it)"
            )
        topo = Topology(name=self.name, nodes=tuple(nodes), links=tuple(links), description="; ".join(notes))
        if pcie != "never" and not _connected(topo):
            raise ValidationError(
                f"machine {self.name!r}: the imported links leave some GPUs unreachable from others"
            )
        return topo


def check_pcie_gen(gen: int | None, option: str = "pcie_gen") -> None:
    """Refuse a PCIe generation outside :data:`~ccplan.instances.importers.classes.PCIE_GEN_GBPS`."""
    if gen is not None and (isinstance(gen, bool) or gen not in PCIE_GEN_GBPS):
        raise ValidationError(f"{option} must be one of {', '.join(map(str, PCIE_GEN_GBPS))}, got {gen!r}")


def _connected(topo: Topology) -> bool:
    import networkx as nx

    graph = topo.to_networkx()
    return bool(nx.is_strongly_connected(graph)) if graph.number_of_nodes() > 1 else True


def _find(parent: list[int], x: int) -> int:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def pcie_tree(gpus: int, level_of: Mapping[tuple[int, int], str]) -> tuple[int, tuple[HubEdge, ...]]:
    """The PCIe tree implied by pairwise path classes (``PIX`` < ``PXB`` < ... < ``SYS``).

    GPUs whose pairwise class is at most ``PIX`` share a PCIe switch, at most ``PXB`` a
    switch hierarchy, at most ``PHB``/``NODE`` a CPU, and ``SYS`` joins the sockets; at each
    level the groups (connected components) that merge get one new hub. Pairs with unknown
    class (e.g. shown as ``NV#``) add no edge: transitivity through other pairs decides.

    Returns
    -------
    (int, tuple of HubEdge)
        Hub count and the edges child -> parent, labelled with the level that joined them.
    """
    top: list[tuple[str, int]] = [("gpu", g) for g in range(gpus)]
    edges: list[HubEdge] = []
    hubs = 0
    for depth, level in enumerate(PCIE_LEVELS):
        parent = list(range(gpus))
        for (a, b), cls in level_of.items():
            if PCIE_LEVELS.index(cls) <= depth:
                parent[_find(parent, a)] = _find(parent, b)
        groups: dict[int, list[int]] = {}
        for g in range(gpus):
            groups.setdefault(_find(parent, g), []).append(g)
        for members in groups.values():
            tops = sorted({top[g] for g in members})
            if len(tops) < 2:
                continue
            hub = hubs
            hubs += 1
            for t in tops:
                edges.append(HubEdge(t, hub, level))
            for g in members:
                top[g] = ("hub", hub)
    return hubs, tuple(edges)


@dataclass(frozen=True)
class Network:
    """How several copies of one machine are joined.

    Parameters
    ----------
    nodes : int
        Machine count (1 = no network).
    nics_per_node : int
        NICs per machine. Up to G (the GPU count): GPU rank g uses NIC ``g * nics // G``.
        More than G (16 NICs on an 8-GPU box): NIC r belongs to GPU ``r * G // nics``, so
        each GPU drives ``nics / G`` NICs of its own.
    bandwidth_GBps, alpha_us : float, optional
        Per-NIC bandwidth and alpha; None takes the ``NET`` class default.
    fabric : {"switch", "rail"}
        ``switch``: every NIC on one switch; ``rail``: NIC r of every machine on switch r
        (rail-optimised fabric, one switch per NIC index).
    """

    nodes: int = 1
    nics_per_node: int = 1
    bandwidth_GBps: float | None = None
    alpha_us: float | None = None
    fabric: str = "switch"

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, int) or self.nodes < 1:
            raise ValidationError(f"nodes must be a positive integer, got {self.nodes!r}")
        if not isinstance(self.nics_per_node, int) or self.nics_per_node < 1:
            raise ValidationError(f"nics_per_node must be a positive integer, got {self.nics_per_node!r}")
        if self.fabric not in FABRICS:
            raise ValidationError(f"fabric must be one of {FABRICS}, got {self.fabric!r}")
        if self.bandwidth_GBps is not None and not (
            math.isfinite(self.bandwidth_GBps) and self.bandwidth_GBps > 0
        ):
            raise ValidationError(
                f"nic bandwidth must be a positive finite number, got {self.bandwidth_GBps!r}"
            )
        if self.alpha_us is not None and not (math.isfinite(self.alpha_us) and self.alpha_us >= 0):
            raise ValidationError(f"nic alpha must be a non-negative finite number, got {self.alpha_us!r}")


def join_machines(machine: Topology, network: Network, defaults: ClassDefaults | None = None) -> Topology:
    """``network.nodes`` copies of ``machine`` joined by NICs and a switch or rail fabric.

    Ids: the GPUs of copy m are ``m*G .. m*G+G-1`` (GPUs first, as in the built-ins), then
    every copy's own switches, then NIC nodes, then fabric switches. A NIC that serves one
    GPU is not a node (the GPU's link to the fabric is the NIC); a NIC shared by several GPUs
    is a switch node, joined to its GPUs at the ``PIX`` class rate, so they share its
    bandwidth. A GPU with several NICs of its own (more NICs than GPUs) has one link per
    fabric switch it reaches: on a rail fabric each NIC goes to its own rail switch; on one
    switch its NICs become one link of their summed bandwidth (a topology holds at most one
    link per direction between two nodes).
    """
    if network.nodes == 1:
        return machine
    d = defaults or ClassDefaults()
    nic_bw = network.bandwidth_GBps if network.bandwidth_GBps is not None else d.bw("NET")
    nic_alpha = network.alpha_us if network.alpha_us is not None else d.alpha("NET")
    gpus = list(machine.gpus)
    switches = list(machine.switches)
    n_g, n_s, k = len(gpus), len(switches), network.nics_per_node
    total_gpus = network.nodes * n_g
    ident: list[dict[int, int]] = []
    for m in range(network.nodes):
        mapping = {g: m * n_g + r for r, g in enumerate(gpus)}
        mapping.update({s: total_gpus + m * n_s + i for i, s in enumerate(switches)})
        ident.append(mapping)
    next_id = total_gpus + network.nodes * n_s
    nodes = [Node(i, "gpu") for i in range(total_gpus)]
    nodes += [Node(total_gpus + i, "switch") for i in range(network.nodes * n_s)]
    links = [
        Link(ident[m][lk.src], ident[m][lk.dst], lk.bandwidth_GBps, lk.alpha_us)
        for m in range(network.nodes)
        for lk in machine.links
    ]
    fabric_count = k if network.fabric == "rail" else 1
    fabric = list(range(next_id, next_id + fabric_count))
    next_id += fabric_count
    nodes += [Node(f, "switch") for f in fabric]
    users: dict[int, list[int]] = {r: [] for r in range(k)}
    if k <= n_g:
        for r in range(n_g):
            users[r * k // n_g].append(r)
    else:
        for nic in range(k):
            users[nic].append(nic * n_g // k)
    # A GPU's own NICs on one fabric switch make one link of their summed bandwidth.
    own: dict[tuple[int, int], int] = {}
    for nic, ranks in users.items():
        if len(ranks) == 1:
            key = (ranks[0], nic if network.fabric == "rail" else 0)
            own[key] = own.get(key, 0) + 1
    for m in range(network.nodes):
        done: set[tuple[int, int]] = set()
        for nic, ranks in users.items():
            sw = fabric[nic] if network.fabric == "rail" else fabric[0]
            width = 1
            if len(ranks) == 1:
                port = m * n_g + ranks[0]
                key = (ranks[0], nic if network.fabric == "rail" else 0)
                if key in done:
                    continue
                done.add(key)
                width = own[key]
            else:
                port = next_id
                next_id += 1
                nodes.append(Node(port, "switch"))
                for r in ranks:
                    g = m * n_g + r
                    pix_bw, pix_alpha = d.bw("PIX"), d.alpha("PIX")
                    links += [Link(g, port, pix_bw, pix_alpha), Link(port, g, pix_bw, pix_alpha)]
            bw = width * nic_bw
            links += [Link(port, sw, bw, nic_alpha), Link(sw, port, bw, nic_alpha)]
    name = f"{machine.name}-x{network.nodes}-{network.fabric}"
    desc = (
        f"{network.nodes} x {machine.name}, {k} NIC(s) per node at {nic_bw:g} GB/s, alpha {nic_alpha:g} us, "
        f"{network.fabric} fabric"
    )
    nodes.sort(key=lambda n: n.id)
    full = f"{machine.description}; {desc}" if machine.description else desc
    return Topology(name=name, nodes=tuple(nodes), links=tuple(links), description=full)


def ranks_in_order(seq: Sequence[int]) -> dict[int, int]:
    """Map tool device numbers (possibly sparse) to dense ranks in ascending order."""
    return {dev: r for r, dev in enumerate(sorted(seq))}
