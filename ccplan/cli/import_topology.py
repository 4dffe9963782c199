"""``ccplan import-topology``: a topology JSON from ``nvidia-smi topo -m``, an NCCL XML dump or
``rocm-smi --showtopo``, with the importers' assumptions as ``note:`` lines.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from ccplan.cli.args import _nonneg_float, _positive_float
from ccplan.cli.output import EXIT_OK, _check_writable, _write_json
from ccplan.errors import ValidationError
from ccplan.parsing import int_value


def _class_defaults(args: argparse.Namespace) -> Any:
    from ccplan.instances.importers import ClassDefaults, load_overrides, parse_assignments

    base = load_overrides(args.class_file) if args.class_file else ClassDefaults()
    return base.with_overrides(
        parse_assignments(args.class_bw or [], "--class-bw"),
        parse_assignments(args.class_alpha or [], "--class-alpha"),
    )


def _network(args: argparse.Namespace) -> Any:
    from ccplan.instances.importers import Network

    return Network(
        nodes=int_value(args.nodes, "--nodes", low=1),
        nics_per_node=int_value(args.nics_per_node, "--nics-per-node", low=1),
        bandwidth_GBps=args.nic_bw,
        alpha_us=args.nic_alpha,
        fabric=args.fabric,
    )


class _NoteCollector(logging.Handler):
    """Print each importer warning as one ``note:`` line on stderr and remember its text."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.seen = seen

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        self.seen.append(text)
        print(f"note: {text}", file=sys.stderr)


SAMPLES: dict[str, str] = {
    "dgx1-v100": "nvsmi_dgx1_v100.txt",
    "dgx-h100": "nvsmi_dgx_h100.txt",
    "pcie-8gpu": "nvsmi_pcie_8gpu.txt",
    "mi250-8gcd": "rocm_smi_mi250_8gcd.txt",
}
"""``--sample NAME`` -> the tool output shipped in ``ccplan/data/samples`` (``nvidia-smi topo
-m`` of a DGX-1 V100, a DGX H100 and a PCIe box of 8 GPUs; ``rocm-smi --showtopo`` of an
MI250 with 8 GCDs), for a machine without GPUs or without ``nvidia-smi``."""


def _sample_path(name: str) -> Path:
    from importlib.resources import files

    from ccplan.parsing import choose

    chosen = choose(name, list(SAMPLES), "--sample")
    return Path(str(files("ccplan").joinpath("data", "samples", SAMPLES[chosen])))


def _input_file(args: argparse.Namespace) -> Path:
    """The tool output to read: FILE, or the bundled ``--sample``. An empty FILE (what
    ``nvidia-smi topo -m > topo.txt`` leaves when nvidia-smi is missing) is refused with the
    command that imports a sample instead."""
    if args.sample is not None:
        if args.file:
            raise ValidationError(
                f"give FILE or --sample, not both (got {args.file!r} and --sample {args.sample})"
            )
        return _sample_path(args.sample)
    path = Path(args.file)
    try:
        empty = path.is_file() and path.stat().st_size == 0
    except OSError:
        empty = False  # the importer names the problem
    if empty:
        raise ValidationError(
            f"{args.file} is empty (did `nvidia-smi topo -m` fail or is it missing? without a GPU "
            f"machine, import a bundled sample: ccplan import-topology --sample dgx1-v100 --out {args.out})"
        )
    return path


def cmd_import_topology(args: argparse.Namespace) -> int:
    from ccplan.instances.importers import import_topology

    defaults = _class_defaults(args)
    if args.show_defaults:
        print(json.dumps(defaults.to_dict(), indent=1))
        return EXIT_OK
    if not (args.file or args.sample) or not args.out:
        raise ValidationError("import-topology needs FILE (or --sample NAME) and --out (or --show-defaults)")
    source = _input_file(args)
    out = Path(args.out)
    _check_writable(out)
    if args.pcie_gen is not None:
        from ccplan.instances.importers import ClassDefaults

        # Two sources for one number would leave the user guessing which one won.
        given = [c for c in ("PIX", "PXB", "PHB", "NODE") if defaults.bw(c) != ClassDefaults().bw(c)]
        if given:
            raise ValidationError(
                f"--pcie-gen {args.pcie_gen} and a {given[0]} bandwidth from --class-bw/--class-file "
                "both set the PCIe rate; give one"
            )
    # The importers log the assumptions they make; each is one "note:" line on stderr.
    assumed: list[str] = []
    handler = _NoteCollector(assumed)
    importer_log = logging.getLogger("ccplan.instances.importers")
    importer_log.addHandler(handler)
    propagate, importer_log.propagate = importer_log.propagate, False
    try:
        topo = import_topology(
            source,
            args.format,
            defaults=defaults,
            pcie=args.pcie,
            pcie_gen=args.pcie_gen,
            nvswitch=args.nvswitch,
            network=_network(args),
            name=args.name,
        )
    finally:
        importer_log.removeHandler(handler)
        importer_log.propagate = propagate
    _write_json(out, topo.to_dict())
    bws = sorted(set(topo.bandwidth.tolist()))
    print(f"{topo.name}: {len(topo.gpus)} GPUs, {len(topo.switches)} switches, {topo.num_links} links")
    print(f"bandwidths (GB/s): {', '.join(f'{b:g}' for b in bws)}")
    for note in filter(None, topo.description.split("; ")):
        if note not in assumed:
            print(f"note: {note}")
    print(f"wrote {out}")
    return EXIT_OK


def _add_import_topology(p: argparse.ArgumentParser) -> None:
    from ccplan.instances.importers import IMPORTERS
    from ccplan.instances.importers.classes import PCIE_GEN_GBPS
    from ccplan.instances.importers.machine import FABRICS, PCIE_POLICIES

    p.add_argument("file", nargs="?", help="nvidia-smi topo -m output, NCCL XML dump, rocm-smi --showtopo")
    p.add_argument(
        "--sample",
        metavar="NAME",
        help=f"import a bundled tool output instead of FILE (no GPU needed): {', '.join(SAMPLES)}",
    )
    p.add_argument("--format", default="auto", choices=["auto", *IMPORTERS], help="input format")
    p.add_argument("--out", help="topology JSON to write")
    p.add_argument("--name", help="topology name (default from the input)")
    g = p.add_argument_group("link classes (defaults: docs/import.md)")
    g.add_argument("--class-bw", action="append", metavar="CLASS=GBPS", help="e.g. NV=20, SYS=6 (repeatable)")
    g.add_argument("--class-alpha", action="append", metavar="CLASS=US", help="e.g. PIX=1.5 (repeatable)")
    g.add_argument("--class-file", help="JSON/TOML with bandwidth_GBps and alpha_us tables")
    g.add_argument("--show-defaults", action="store_true", help="print the class table and exit")
    g.add_argument("--pcie", default="auto", choices=PCIE_POLICIES, help="keep the PCIe tree")
    g.add_argument(
        "--pcie-gen",
        type=int,
        choices=sorted(PCIE_GEN_GBPS),
        help="PCIe generation of every PCIe link (default: the NCCL dump's link_speed, else Gen4)",
    )
    g.add_argument("--nvswitch", default="auto", choices=["auto", "yes", "no"], help="NV# via an NVSwitch")
    g = p.add_argument_group("several machines")
    g.add_argument("--nodes", type=int, default=1, help="copies of the machine (default 1)")
    g.add_argument("--nics-per-node", type=int, default=1, help="NICs per machine (default 1)")
    g.add_argument("--nic-bw", type=_positive_float, help="GB/s per NIC (default: file, else class NET)")
    g.add_argument("--nic-alpha", type=_nonneg_float, help="alpha per NIC hop in us (default: class NET)")
    g.add_argument("--fabric", default="switch", choices=FABRICS, help="one switch or one switch per rail")
