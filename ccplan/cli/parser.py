"""Parser building: the sub-commands (:data:`COMMANDS`) and the argument parser that prints a
usage error as one line with exit code 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ccplan.cli.bounds import _add_bounds, cmd_bounds
from ccplan.cli.export import _add_export, cmd_export
from ccplan.cli.import_topology import _add_import_topology, cmd_import_topology
from ccplan.cli.methods import cmd_methods
from ccplan.cli.output import EXIT_USAGE
from ccplan.cli.plan import _add_plan, cmd_plan
from ccplan.cli.plot_progress import _add_plot_progress, cmd_plot_progress
from ccplan.cli.simulate import _add_simulate, cmd_simulate
from ccplan.cli.solve import _add_solve, cmd_solve
from ccplan.cli.sweep import _add_sweep, cmd_sweep
from ccplan.cli.topologies import _add_topologies, cmd_topologies
from ccplan.cli.validate_xml import _add_validate_xml, cmd_validate_xml
from ccplan.cli.verify import _add_verify, cmd_verify
from ccplan.parsing import one_line


@dataclass(frozen=True)
class Command:
    """A sub-command: how to add its arguments and what to run."""

    help: str
    add: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _add_nothing(p: argparse.ArgumentParser) -> None:
    return None


COMMANDS: dict[str, Command] = {
    "topologies": Command("list the built-in topologies", _add_topologies, cmd_topologies),
    "methods": Command("list the registered methods", _add_nothing, cmd_methods),
    "solve": Command("compute a schedule", _add_solve, cmd_solve),
    "verify": Command("check a schedule independently (exit 1 on violation)", _add_verify, cmd_verify),
    "bounds": Command("lower bounds (and the heuristic upper bound)", _add_bounds, cmd_bounds),
    "simulate": Command("replay a schedule in continuous alpha-beta time", _add_simulate, cmd_simulate),
    "export": Command("export a schedule (MSCCL XML, JSON, pictures)", _add_export, cmd_export),
    "validate-xml": Command(
        "check MSCCL XML files, or a directory's size ranges (exit 1 on error)",
        _add_validate_xml,
        cmd_validate_xml,
    ),
    "plot-progress": Command("plot a solver progress CSV", _add_plot_progress, cmd_plot_progress),
    "sweep": Command(
        "run or resume a grid of solves (resumable; --dask for a cluster)", _add_sweep, cmd_sweep
    ),
    "import-topology": Command(
        "topology JSON from nvidia-smi topo -m, an NCCL XML dump or rocm-smi --showtopo",
        _add_import_topology,
        cmd_import_topology,
    ),
    "plan": Command(
        "best verified schedule, bound, MSCCL XML and a report per collective and size",
        _add_plan,
        cmd_plan,
    ),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2, no usage dump
        line = one_line(f"ccplan: error: {one_line(message, 200)} (see `{self.prog} --help`)")
        self.exit(EXIT_USAGE, line + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per entry of :data:`COMMANDS`."""
    from ccplan import __version__

    parser = _Parser(prog="ccplan", description="Topology-aware schedules for collective communication.")
    parser.add_argument("--version", action="version", version=f"ccplan {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser.add_argument(
        "--memory-budget",
        metavar="SIZE",
        help="refuse work estimated to need more memory than this (default 4GB, or $CCPLAN_MEMORY_BUDGET)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        command.add(p)
        p.set_defaults(_run=command.run)
    return parser
