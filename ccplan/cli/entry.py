"""The entry point :func:`main`: parses the command line, runs the command, and maps every
outcome (an error, an interrupt, a broken pipe, a bug) to one line and an exit code.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from ccplan.cli.output import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from ccplan.cli.parser import build_parser
from ccplan.cli.signals import _clock, _stopping, _take_interrupt, _watch_signals, threading_main
from ccplan.errors import CCPlanError
from ccplan.parsing import one_line, show

log = logging.getLogger("ccplan.cli")


def _bad_input(exc: BaseException) -> str | None:
    """What an exception says about the input, when its class can only come from a bad input
    file (a parser's error, a truncated archive, a runaway nesting or number), else None.

    The last-resort guard of :func:`main`: every reader refuses bad input by name with a
    :class:`~ccplan.errors.ValidationError` first; this keeps one it missed at exit 2.
    """
    import json
    import xml.parsers.expat
    import zipfile
    import zlib
    from xml.etree.ElementTree import ParseError

    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    text = show(str(exc), 120)
    if isinstance(exc, RecursionError):
        return "an input is nested too deeply to read"
    if isinstance(exc, UnicodeDecodeError):
        return f"an input file is not UTF-8 text ({text})"
    syntax = (json.JSONDecodeError, tomllib.TOMLDecodeError, ParseError, xml.parsers.expat.ExpatError)
    if isinstance(exc, syntax):
        return f"an input file is not well-formed ({type(exc).__name__}: {text})"
    if isinstance(exc, (zipfile.BadZipFile, zlib.error, EOFError)):
        return f"an input file is truncated or corrupt ({type(exc).__name__}: {text})"
    if isinstance(exc, OverflowError) or (
        isinstance(exc, ValueError) and "integer string conversion" in str(exc)
    ):
        return f"a number in the input is out of range ({type(exc).__name__}: {text})"
    return None


def _safe_streams() -> None:
    """Let stdout and stderr write any text: under an ASCII locale a topology name with
    non-ASCII letters is printed with backslash escapes instead of failing the command."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        encoding = str(getattr(stream, "encoding", "") or "").lower().replace("-", "").replace("_", "")
        if reconfigure is not None and encoding not in ("utf8", "utf16", "utf32"):
            with contextlib.suppress(ValueError, OSError):  # a detached or closed stream
                reconfigure(errors="backslashreplace")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ccplan`` console script; returns the exit code.

    Exit codes: 0 success, 1 a schedule or XML file fails its check, 2 bad input or work
    refused by the memory budget (one line on stderr), 3 no schedule found (infeasible
    horizon, time limit), 4 an internal error (one line; ``-v`` shows the traceback),
    130 interrupted (one line saying what was saved).
    """
    _clock["start"] = time.perf_counter()
    _safe_streams()
    import signal

    def _terminate(signum: int, frame: Any) -> None:
        # SIGTERM (a job scheduler, `kill`) takes the Ctrl-C path: save what there is, exit 130.
        raise KeyboardInterrupt

    # First of all: a SIGTERM during the imports below (a second on a busy machine) must
    # take the same path as one during the work, not end the process without a word.
    old_term = signal.signal(signal.SIGTERM, _terminate) if threading_main() else None

    def early(code: int) -> int:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        return code

    try:
        parser = build_parser()  # imports the method registry (numpy, scipy, ...)
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (one line already printed), --help, --version
        return early(exc.code if isinstance(exc.code, int) else EXIT_USAGE)
    except KeyboardInterrupt:
        print("ccplan: interrupted; nothing saved", file=sys.stderr)
        return early(EXIT_INTERRUPTED)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return early(EXIT_USAGE)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    _stopping["handled"] = False
    _stopping["rescue"] = None
    unwatch = _watch_signals()
    if not args.verbose:
        # Pyomo logs its own account of an interrupted or failed solve; ours is the one line.
        logging.getLogger("pyomo").setLevel(logging.CRITICAL)
    try:
        from ccplan import limits

        if args.memory_budget is not None:
            limits.set_memory_budget(limits.parse_budget(args.memory_budget, "--memory-budget"))
        code = int(args._run(args))
        sys.stdout.flush()  # a broken pipe shows here, inside the handlers below
        return code
    except CCPlanError as exc:
        print(one_line(f"ccplan: error: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _take_interrupt()
        # outside the command's own interrupt path (e.g. while the schedule was verified):
        # what the command set up to save (solve: the engine's best verified schedule)
        text = "nothing saved"
        rescue = _stopping.get("rescue")
        if callable(rescue):
            try:
                text = str(rescue())
            except Exception:
                log.debug("saving on interrupt failed", exc_info=True)
        print(f"ccplan: interrupted; {text}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Output piped into e.g. `head`: stop quietly, as Unix tools do, keeping the status
        # the command had decided on before it printed.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(getattr(args, "_status", EXIT_OK))
    except OSError as exc:  # the file system refused (a full disk, a permission): one line
        where = f"{str(exc.filename)!r}: " if exc.filename else ""
        print(one_line(f"ccplan: error: {where}{exc.strerror or exc}"), file=sys.stderr)
        return EXIT_USAGE
    except MemoryError:
        print(
            "ccplan: error: out of memory (the work exceeded what the machine or the process limit "
            "allows, and the up-front estimate did not catch it; lower --chunks or the topology size)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except Exception as exc:  # a bug: one line by default, the traceback with -v
        if args.verbose:
            log.exception("internal error")
        why = _bad_input(exc)
        if why is not None:
            # a reader let through an input it should have refused by name: still bad input
            print(one_line(f"ccplan: error: {args.command}: {why}"), file=sys.stderr)
            return EXIT_USAGE
        text = str(exc).splitlines()[0] if str(exc) else ""
        print(
            one_line(
                f"ccplan: internal error: {type(exc).__name__}: {text[:200]} "
                "(rerun with -v for the traceback)"
            ),
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    finally:
        from ccplan import limits as _limits

        _limits.set_memory_budget(None)
        _stopping["rescue"] = None
        unwatch()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
