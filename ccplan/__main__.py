"""``python -m ccplan``: the same entry point as the ``ccplan`` console script.

Ctrl-C or SIGTERM while the command line module loads ends with the same one line and exit
code 130 as during a command (``ccplan.cli.main`` takes over from its first statement).
"""

import signal
import sys


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    try:
        from ccplan.cli import main
    except KeyboardInterrupt:
        print("ccplan: interrupted; nothing saved", file=sys.stderr)
        raise SystemExit(130) from None
    raise SystemExit(main())
