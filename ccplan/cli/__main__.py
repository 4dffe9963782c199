"""``python -m ccplan.cli``: the ``ccplan`` command line (:func:`ccplan.cli.main`)."""

from ccplan.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
