"""``ccplan methods``: list the registered methods.
"""

from __future__ import annotations

import argparse

from ccplan.cli.output import EXIT_OK


def cmd_methods(args: argparse.Namespace) -> int:
    from ccplan.contract import method_names

    for name in method_names():
        print(name)
    return EXIT_OK
