"""``python -m ccplan``: the same entry point as the ``ccplan`` console script."""

from ccplan.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
