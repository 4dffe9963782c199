"""The arguments shared by the commands: the instance options (topology, collective, size,
chunks, slot rule ...), the instance they build, and the argparse value types that refuse a
bad value in one line naming the flag.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import Any

from ccplan.errors import ValidationError
from ccplan.parsing import MAX_DIGITS, MAX_INDEX, choose, int_text, parse_size, show

DEFAULT_SIZE = "1MB"
"""``--size`` when none is given; the commands print it as the default in their header."""


def _parse_topo_args(items: Sequence[str]) -> dict[str, Any]:
    # Values stay strings: resolve_topology converts them to each parameter's declared type.
    params: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValidationError(f"--topo-arg {item!r} must look like key=value (e.g. n=8)")
        key, raw = item.split("=", 1)
        params[key.strip()] = raw.strip()
    return params


def _topology_name(spec: str) -> str:
    """A built-in's name as ``--topology`` spells it (``DGX-1`` and ``dgx_1`` name ``dgx1``),
    or the file path unchanged; an unknown name is refused with "did you mean"."""
    from pathlib import Path

    from ccplan.instances.builtin import TOPOLOGIES

    if spec.lower().endswith(".json") or Path(spec).is_file():
        return spec
    listing = f"a built-in: {', '.join(TOPOLOGIES)}; or a topology JSON file"
    return choose(spec, list(TOPOLOGIES), "topology", listing=listing)


def _topology(args: argparse.Namespace) -> Any:
    from ccplan.instances.builtin import resolve_topology

    params = _parse_topo_args(args.topo_arg or [])
    if args.chassis is not None:
        params["chassis"] = args.chassis
    return resolve_topology(_topology_name(args.topology), **params)


def _collective_name(name: str) -> str:
    """``--collective`` as the catalogue names it (``AllReduce``, ``all_reduce`` ->
    ``allreduce``), or a "did you mean" refusal."""
    from ccplan.instances.catalog import COLLECTIVES

    return choose(name, sorted(COLLECTIVES), "collective")


def _method_name(name: str, what: str = "method") -> str:
    """A registered method's name (``MILP`` -> ``milp``, ``cut_aware`` -> ``cut-aware``), or a
    "did you mean" refusal."""
    from ccplan.contract import method_names

    return choose(name, list(method_names()), what)


def _size_text(args: argparse.Namespace) -> str:
    """``--size`` as given, or :data:`DEFAULT_SIZE` when it was left out."""
    return DEFAULT_SIZE if args.size is None else str(args.size)


def _size_line(args: argparse.Namespace) -> str:
    """The size as the user wrote it, its bytes, and whether it is the default: the header
    line of ``solve`` and ``bounds`` (``1G = 1,073,741,824 bytes``)."""
    text = _size_text(args)
    value = parse_size(text)
    exact = f"{int(value):,}" if value.is_integer() else f"{value:,.3f}"
    default = "; the default, --size not given" if args.size is None else ""
    return f"{text.strip()} = {exact} bytes{default}"


def _parse_dests(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int_text(x, "--dests entry") for x in text.split(",") if x.strip())
    except ValidationError as exc:
        raise ValidationError(f"--dests must be a comma-separated list of node ids ({exc})") from None


def _chunks_arg(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int_text(text, "--chunks", low=1)
    except ValidationError:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer (at most {MAX_INDEX}) or 'auto', got {show(text)}"
        ) from None


def _instance(args: argparse.Namespace, chunks: int | None = None) -> Any:
    from ccplan.instances import make_collective, make_instance
    from ccplan.instances.catalog import ROOTED

    args.collective = _collective_name(args.collective)
    if args.root is not None and args.collective not in ROOTED:
        rooted = ", ".join(sorted(ROOTED))
        raise ValidationError(
            f"--root {args.root}: {args.collective} has no root (--root applies to {rooted})"
        )
    if args.tau_rule == "explicit" and args.tau_us is None:
        raise ValidationError("--tau-rule explicit needs --tau-us (the slot length in microseconds)")
    if args.tau_us is not None and args.tau_rule != "explicit":
        raise ValidationError("--tau-us applies only with --tau-rule explicit")
    if args.dests is not None and args.collective != "multicast":
        raise ValidationError(
            f"--dests {args.dests}: only multicast takes destinations, not {args.collective}"
        )
    topology = _topology(args)
    count = args.chunks if chunks is None else chunks
    if count == "auto":
        raise ValidationError("--chunks auto is available for `solve` and `plan`")
    collective = make_collective(
        args.collective, topology, chunks=count, root=args.root, dests=_parse_dests(args.dests)
    )
    return make_instance(
        topology,
        collective,
        _size_text(args),
        tau_rule=args.tau_rule,
        tau_us=args.tau_us,
        alpha_threshold=args.alpha_threshold,
        single_port=args.single_port,
        switch_model=switch_model_of(args, topology)[0],
        alpha_cap=getattr(args, "alpha_cap", None),
        switch_reduce=bool(getattr(args, "switch_reduce", False)),
    )


def switch_model_of(args: argparse.Namespace, topology: Any) -> tuple[str, str]:
    """The switch model an instance gets and where it comes from: ``--switch-model`` when
    given, else the one the topology states (an imported machine: cut-through), else the
    paper's store-and-forward default (built-ins)."""
    given = getattr(args, "switch_model", None)
    if given is not None:
        return given, "--switch-model"
    if topology.switch_model is not None:
        return topology.switch_model, "as the topology states"
    return "store-and-forward", "the default"


def _arg_type(
    convert: Callable[[str], Any], kind: str, ok: Callable[[Any], bool], rule: str
) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text, then check ``ok``; argparse names the flag in
    front of the message (``--time-limit: must be a positive number, got '-1'``). Text longer
    than :data:`ccplan.parsing.MAX_DIGITS` characters is refused before it is converted, and
    the value is shown cut short, so the error stays one short line."""

    def parse(text: str) -> Any:
        try:
            if len(text.strip()) > MAX_DIGITS:
                raise ValueError(text)
            value = convert(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"must be {kind}, got {show(text)}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {show(text)}")
        return value

    return parse


_positive_float = _arg_type(float, "a number", lambda v: math.isfinite(v) and v > 0, "a positive number")
_nonneg_float = _arg_type(float, "a number", lambda v: math.isfinite(v) and v >= 0, "a number >= 0")
# counts, ids and slots: at most MAX_INDEX (the bound every file reader applies too)
_NONNEG = f"an integer in 0..{MAX_INDEX}"
_POSITIVE = f"an integer in 1..{MAX_INDEX}"
_SEED = f"an integer in -{MAX_INDEX}..{MAX_INDEX}"
_nonneg_int = _arg_type(int, _NONNEG, lambda v: 0 <= v <= MAX_INDEX, _NONNEG)
_positive_int = _arg_type(int, _POSITIVE, lambda v: 1 <= v <= MAX_INDEX, _POSITIVE)
_seed_int = _arg_type(int, _SEED, lambda v: abs(v) <= MAX_INDEX, _SEED)


def _add_instance_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("instance")
    g.add_argument(
        "--topology", required=True, help="built-in name (see `ccplan topologies`) or a topology JSON file"
    )
    g.add_argument("--chassis", type=_positive_int, help="chassis count for ndv2, dgx2, amd")
    g.add_argument(
        "--topo-arg",
        action="append",
        metavar="KEY=VALUE",
        help="parameter of a built-in topology, e.g. n=8 (repeatable)",
    )
    g.add_argument("--collective", default="allgather", help="allgather (default), broadcast, ...")
    g.add_argument("--root", type=_nonneg_int, help="root GPU of rooted collectives (default: the first GPU)")
    g.add_argument("--dests", help="multicast destinations, comma-separated")
    g.add_argument(
        "--size",
        help=f"output buffer size (default {DEFAULT_SIZE}, said in the output): bytes, 64KB, 1MB, 1GB "
        "(decimal), 128M, 1G (binary, as nccl-tests' -b/-e) or 1GiB",
    )
    g.add_argument(
        "--chunks",
        type=_chunks_arg,
        default=1,
        help="chunks per contribution C (default 1); `auto`: C = 1, 2, 4, ... against the physical bound",
    )
    g.add_argument(
        "--tau-rule",
        default="fastest",
        choices=["fastest", "slowest", "explicit"],
        help="slot length from the fastest link (paper, default), the slowest, or --tau-us",
    )
    g.add_argument("--tau-us", type=_positive_float, help="explicit slot length in microseconds")
    g.add_argument(
        "--alpha-threshold",
        type=_nonneg_float,
        default=0.1,
        help="alpha/tau at or below this counts as 0 slots (default 0.1, as TE-CCL)",
    )
    g.add_argument("--single-port", action="store_true", help="one send and one receive per node per slot")
    g.add_argument(
        "--switch-model",
        default=None,
        choices=["store-and-forward", "cut-through"],
        help="switches store and forward (paper) or cut through without a buffer (TE-CCL); "
        "default: what the topology JSON states (imported machines: cut-through), else store-and-forward",
    )
    g.add_argument(
        "--alpha-cap",
        type=_positive_float,
        help="TE-CCL's alpha cap: raise tau to min alpha / CAP when shorter (TE-CCL uses 200)",
    )
    g.add_argument(
        "--switch-reduce",
        action="store_true",
        help="switches add partial sums themselves (NVLS / SHARP-class hardware); off, they only relay",
    )
