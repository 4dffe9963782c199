"""``nvidia-smi topo -m`` output -> :class:`~ccplan.instances.importers.machine.Machine`.

The matrix names, for every GPU pair, either ``NV#`` (a bonded set of # NVLinks) or the PCIe
path class (``PIX`` < ``PXB`` < ``PHB`` < ``NODE`` < ``SYS``; old drivers print ``SOC`` for
``SYS``). Columns after the GPUs are NICs (``mlx5_0`` or ``NIC0`` with a ``NIC Legend``)
and affinity columns, which are read for NIC names only.

NVSwitch machines (DGX A100: ``NV12``, DGX H100: ``NV18`` between every pair) print the
GPU's whole NVLink count against every peer; no GPU has more than
:data:`MAX_NVLINKS_PER_GPU` links, so a row whose NV counts sum to more than that goes
through a switch. Such a machine becomes one NVSwitch node with a port of ``NV#`` links per
GPU (``nvswitch="auto"``; ``"yes"``/``"no"`` force the choice).
"""

from __future__ import annotations

import re

from ccplan.errors import ValidationError
from ccplan.instances.importers.classes import PCIE_LEVELS
from ccplan.instances.importers.machine import Cable, Machine, pcie_tree

MAX_NVLINKS_PER_GPU = 18
"""NVLinks of the largest GPU so far (H100, and B200 with NVLink 5): more in a row means a switch."""

NVSWITCH_CHOICES: tuple[str, ...] = ("auto", "yes", "no")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"GPU(\d+)$")
_NV = re.compile(r"NV(\d+)$")
_ALIASES = {"SOC": "SYS"}
_STOP_COLUMNS = {"CPU", "NUMA", "GPU"}


def _err(source: str, line: int, message: str) -> ValidationError:
    return ValidationError(f"{source}:{line}: {message}")


def parse_nvidia_smi(text: str, source: str = "<input>", nvswitch: str = "auto") -> Machine:
    """Parse ``nvidia-smi topo -m`` text.

    Parameters
    ----------
    text : str
        The command's output (ANSI colour codes are ignored).
    source : str
        File name used in error messages (``source:line: what``).
    nvswitch : {"auto", "yes", "no"}
        Whether NV links go through an NVSwitch (see module doc).

    Raises
    ------
    ValidationError
        Naming the line: no header, a row of the wrong length, an unknown class, a
        non-``X`` diagonal, an asymmetric pair, a missing or repeated GPU row.
    """
    if nvswitch not in NVSWITCH_CHOICES:
        raise ValidationError(f"nvswitch must be one of {NVSWITCH_CHOICES}, got {nvswitch!r}")
    lines = [_ANSI.sub("", raw).rstrip() for raw in text.splitlines()]
    header_at = None
    columns: list[str] = []
    for i, line in enumerate(lines):
        tokens = line.split()
        # The header's first cell is empty, but copy-paste often strips that indent; a GPU row
        # has "X" (or a class) where the header has the next device name.
        if (
            tokens
            and _GPU.match(tokens[0])
            and (line[:1].isspace() or (len(tokens) > 1 and _GPU.match(tokens[1])))
        ):
            header_at = i
            for tok in tokens:
                if tok in _STOP_COLUMNS:
                    break
                columns.append(tok)
            break
        if tokens and _GPU.match(tokens[0]):
            break
    if header_at is None:
        first = next((i + 1 for i, line in enumerate(lines) if line.strip()), 1)
        raise _err(source, first, "no header line starting with GPU0 (is this `nvidia-smi topo -m` output?)")
    gpu_cols = [c for c in columns if _GPU.match(c)]
    if columns[: len(gpu_cols)] != gpu_cols:
        raise _err(source, header_at + 1, "GPU columns must come before NIC columns in the header")
    devices = [int(_GPU.match(c).group(1)) for c in gpu_cols]  # type: ignore[union-attr]
    if sorted(devices) != list(range(len(devices))):
        raise _err(source, header_at + 1, f"GPU columns {gpu_cols} are not GPU0 .. GPU{len(devices) - 1}")
    nic_cols = columns[len(gpu_cols) :]
    rows: dict[int, tuple[int, list[str]]] = {}
    legend: dict[str, str] = {}
    in_legend = False
    for i in range(header_at + 1, len(lines)):
        line = lines[i]
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].rstrip(":") in ("Legend", "NIC") and line.rstrip().endswith(":"):
            in_legend = True
            continue
        if in_legend:
            match = re.match(r"\s*(NIC\d+)\s*:\s*(\S+)", line)
            if match:
                legend[match.group(1)] = match.group(2)
            continue
        if tokens[0] in nic_cols:
            continue  # NIC rows repeat the NIC columns' information
        match = _GPU.match(tokens[0])
        if not match:
            raise _err(source, i + 1, f"unexpected row {tokens[0]!r} (expected GPU<n>, a NIC or Legend:)")
        dev = int(match.group(1))
        if dev not in devices:
            raise _err(
                source, i + 1, f"row {tokens[0]} has no column in the header (GPU0 .. GPU{len(devices) - 1})"
            )
        if dev in rows:
            raise _err(source, i + 1, f"row {tokens[0]} appears twice (first at line {rows[dev][0]})")
        entries = tokens[1 : 1 + len(columns)]
        if len(entries) < len(columns):
            raise _err(
                source,
                i + 1,
                f"row {tokens[0]} has {len(entries)} entries, the header names {len(columns)} devices",
            )
        rows[dev] = (i + 1, entries)
    for dev in devices:
        if dev not in rows:
            raise _err(source, header_at + 1, f"the header names GPU{dev} but no row GPU{dev} follows")

    n = len(devices)
    label: dict[tuple[int, int], tuple[str, int]] = {}
    for a in range(n):
        line_no, entries = rows[a]
        for b in range(n):
            tok = _ALIASES.get(entries[b], entries[b])
            if a == b:
                if tok != "X":
                    raise _err(source, line_no, f"GPU{a} against itself must be X, got {entries[b]!r}")
                continue
            if not (_NV.match(tok) or tok in PCIE_LEVELS):
                raise _err(
                    source,
                    line_no,
                    f"GPU{a} column GPU{b}: unknown connection {entries[b]!r} "
                    "(expected X, NV#, PIX, PXB, PHB, NODE or SYS)",
                )
            if _NV.match(tok) and int(tok[2:]) < 1:
                raise _err(source, line_no, f"GPU{a} column GPU{b}: {tok} names no NVLink")
            label[(a, b)] = (tok, line_no)
    for (a, b), (tok, line_no) in label.items():
        other, other_line = label[(b, a)]
        if other != tok:
            raise _err(
                source,
                line_no,
                f"GPU{a} -> GPU{b} is {tok} but GPU{b} -> GPU{a} is {other} (line {other_line}); "
                "the matrix must be symmetric",
            )

    nv = {(a, b): int(tok[2:]) for (a, b), (tok, _) in label.items() if a < b and tok.startswith("NV")}
    # per GPU, its NV links in all and its widest NV# bond: one pass over the pairs (a pass
    # per GPU was cubic: 4 minutes for a 1,000-GPU NVSwitch matrix)
    per_gpu = [0] * n
    widest = [0] * n
    for (a, b), c in nv.items():
        per_gpu[a] += c
        per_gpu[b] += c
        widest[a] = max(widest[a], c)
        widest[b] = max(widest[b], c)
    switched = nvswitch == "yes" or (nvswitch == "auto" and max(per_gpu, default=0) > MAX_NVLINKS_PER_GPU)
    notes: list[str] = [f"imported from nvidia-smi topo -m ({source})"]
    cables: list[Cable] = []
    ports: dict[int, int] = {}
    if switched:
        ports = {g: widest[g] for g in range(n) if widest[g]}
        notes.append("NV# between all pairs read as one NVSwitch; a GPU's port = its NV# links")
    else:
        cables = [Cable(a, b, "NV", c) for (a, b), c in sorted(nv.items())]
    levels = {(a, b): tok for (a, b), (tok, _) in label.items() if a < b and tok in PCIE_LEVELS}
    hubs, edges = pcie_tree(n, levels)
    nics = tuple((legend.get(c, c), None) for c in nic_cols)
    return Machine(
        name=f"nvsmi-{n}gpu",
        gpus=n,
        cables=tuple(cables),
        nvswitch_ports=ports,
        hubs=hubs,
        hub_edges=edges,
        nics=nics,
        notes=tuple(notes),
    )
