"""The ``ccplan`` command line: a thin layer over the library.

Every command is a library call; this package only parses arguments, prints, and maps
:class:`~ccplan.errors.CCPlanError` to one line on stderr with exit code 2.

Layout: :mod:`~ccplan.cli.entry` (:func:`main`: exit codes for every outcome),
:mod:`~ccplan.cli.parser` (:data:`COMMANDS`, :func:`build_parser`), one module per command
(:mod:`~ccplan.cli.solve`, :mod:`~ccplan.cli.plan`, :mod:`~ccplan.cli.sweep`, ...), and the
shared parts: :mod:`~ccplan.cli.args` (instance arguments, argument types),
:mod:`~ccplan.cli.output` (exit codes, formatting, output files), :mod:`~ccplan.cli.signals`
(Ctrl-C/SIGTERM handling) and :mod:`~ccplan.cli.progress` (progress lines of ``solve``).
``ccplan.cli:main`` is the console script's entry; ``python -m ccplan.cli`` runs it too.

The names below are re-exported from those modules. A setting such as
:data:`STOP_GRACE_SECONDS` is read where it is used: change it on :mod:`ccplan.cli.signals`.
"""

from __future__ import annotations

from ccplan.cli.bounds import cmd_bounds
from ccplan.cli.entry import main
from ccplan.cli.export import cmd_export
from ccplan.cli.import_topology import cmd_import_topology
from ccplan.cli.methods import cmd_methods
from ccplan.cli.output import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NO_SCHEDULE,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_VIOLATION,
)
from ccplan.cli.parser import COMMANDS, Command, build_parser
from ccplan.cli.plan import cmd_plan
from ccplan.cli.plot_progress import cmd_plot_progress
from ccplan.cli.progress import PROGRESS_LOGGERS
from ccplan.cli.signals import STOP_GRACE_SECONDS, threading_main
from ccplan.cli.simulate import cmd_simulate
from ccplan.cli.solve import cmd_solve
from ccplan.cli.sweep import cmd_sweep
from ccplan.cli.topologies import cmd_topologies
from ccplan.cli.validate_xml import cmd_validate_xml
from ccplan.cli.verify import cmd_verify

__all__ = [
    "COMMANDS",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_NO_SCHEDULE",
    "EXIT_OK",
    "EXIT_USAGE",
    "EXIT_VIOLATION",
    "PROGRESS_LOGGERS",
    "STOP_GRACE_SECONDS",
    "Command",
    "build_parser",
    "cmd_bounds",
    "cmd_export",
    "cmd_import_topology",
    "cmd_methods",
    "cmd_plan",
    "cmd_plot_progress",
    "cmd_simulate",
    "cmd_solve",
    "cmd_sweep",
    "cmd_topologies",
    "cmd_validate_xml",
    "cmd_verify",
    "main",
    "threading_main",
]
