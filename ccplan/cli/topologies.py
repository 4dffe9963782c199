"""``ccplan topologies``: list the built-in topologies.
"""

from __future__ import annotations

import argparse
import json

from ccplan.cli.output import EXIT_OK


def cmd_topologies(args: argparse.Namespace) -> int:
    from ccplan.instances.builtin import catalog

    rows = catalog()
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    header = f"{'name':<16} {'gpus':>5} {'switches':>8} {'links':>6}  description"
    print(header)
    print("-" * len(header))
    for r in rows:
        counts = f"{r['gpus']:>5} {r['switches']:>8} {r['links']:>6}"
        print(f"{r['name']:<16} {counts}  {r['description']}")
        params = ", ".join(f"{k}={v}" for k, v in dict(r.get("parameters", {})).items())
        if params:
            print(f"{'':<40}parameters: {params}")
    return EXIT_OK


def _add_topologies(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
