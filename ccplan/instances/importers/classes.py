"""Per-class link defaults of imported machines, and the user's overrides.

A vendor tool names the *kind* of connection between two devices (``NV2``, ``PIX``,
``XGMI`` ...) but not its bandwidth or latency. Each kind maps to a :data:`LINK_CLASSES`
entry; :class:`ClassDefaults` holds one bandwidth and one alpha per class and is what every
importer reads. The numbers and where they come from:

========  ============  ========  ===================================================================
class     GB/s          alpha us  source
========  ============  ========  ===================================================================
NV        25 per link   0.7       NVLink 2, 3 and 4 (V100, A100, H100) carry 25 GB/s per link and
                                  direction (V100: 6 links, A100: 12, H100: 18); ``NV#`` = # links.
                                  Alpha: TE-CCL Table 3 (NVLink). NVLink 1 (P100, 20 GB/s) is an
                                  override (``NV=20``).
NVSWITCH  25 per link   0.35      A GPU's NVSwitch port is its NVLink count x this (NVLink 3/4
                                  links into NVSwitch); alpha per hop: TE-CCL's DGX2 NVSwitch alpha.
PIX       24            1.0       PCIe Gen4 x16 as NCCL computes it (width x 120 / 80 GB/s,
PXB       24            1.0       ``kvDictPciGen`` of NCCL ``src/graph/topo.cc``; Gen3 = 12,
PHB       24            1.0       Gen5 = 48). Alpha: NCCL's PCI hardware latency (LL, 1.0 us).
NODE      24            1.0       Same PCIe rate across host bridges of one socket.
SYS       9             1.0       NCCL's inter-socket bandwidth for Skylake-class UPI
                                  (``SKL_QPI_BW`` in NCCL ``topo.h``); older QPI is 6.
XGMI      50 per link   0.7       AMD Infinity Fabric link of MI250 (TE-CCL's AMD topology);
                                  alpha as NVLink (TE-CCL leaves AMD alpha to the user).
NET       12.5          1.3       One 100 Gb/s NIC (TE-CCL's NDv2/DGX2 inter-node links, Table 3).
========  ============  ========  ===================================================================

Overrides: ``--class-bw NV=20 --class-alpha SYS=2`` on the command line, or a JSON/TOML file
``{"bandwidth_GBps": {"NV": 20}, "alpha_us": {"SYS": 2}}`` (:func:`load_overrides`).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ccplan.errors import ValidationError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 needs the tomli backport
    import tomli as tomllib

LINK_CLASSES: tuple[str, ...] = ("NV", "NVSWITCH", "PIX", "PXB", "PHB", "NODE", "SYS", "XGMI", "NET")
"""Connection classes an importer can name; ``NV`` and ``XGMI`` are per link."""

PCIE_LEVELS: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")
"""PCIe path classes from nearest to farthest (nvidia-smi's legend order)."""

PCIE_GEN_GBPS: Mapping[int, float] = MappingProxyType({1: 3.0, 2: 6.0, 3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0})
"""x16 bandwidth per PCIe generation as NCCL computes it (16 lanes x per-lane rate / 80)."""

_BANDWIDTH: Mapping[str, float] = MappingProxyType(
    {
        "NV": 25.0,
        "NVSWITCH": 25.0,
        "PIX": 24.0,
        "PXB": 24.0,
        "PHB": 24.0,
        "NODE": 24.0,
        "SYS": 9.0,
        "XGMI": 50.0,
        "NET": 12.5,
    }
)
_ALPHA: Mapping[str, float] = MappingProxyType(
    {
        "NV": 0.7,
        "NVSWITCH": 0.35,
        "PIX": 1.0,
        "PXB": 1.0,
        "PHB": 1.0,
        "NODE": 1.0,
        "SYS": 1.0,
        "XGMI": 0.7,
        "NET": 1.3,
    }
)


def _check_class(name: str, where: str) -> str:
    key = name.strip().upper()
    if key not in LINK_CLASSES:
        raise ValidationError(f"{where}: unknown link class {name!r} (classes: {', '.join(LINK_CLASSES)})")
    return key


def _positive(value: Any, where: str, allow_zero: bool) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{where}: {value!r} is not a number") from None
    if isinstance(value, bool) or not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise ValidationError(f"{where}: must be a {kind} finite number, got {value!r}")
    return number


@dataclass(frozen=True)
class ClassDefaults:
    """Bandwidth (GB/s, per link for NV/XGMI) and alpha (us) of every link class.

    Parameters
    ----------
    bandwidth_GBps, alpha_us : mapping
        Class name -> value; missing classes take the documented defaults (module doc).
    """

    bandwidth_GBps: Mapping[str, float] = field(default_factory=lambda: dict(_BANDWIDTH))
    alpha_us: Mapping[str, float] = field(default_factory=lambda: dict(_ALPHA))

    def __post_init__(self) -> None:
        bw = dict(_BANDWIDTH)
        for key, value in dict(self.bandwidth_GBps).items():
            name = _check_class(key, "bandwidth_GBps")
            bw[name] = _positive(value, f"bandwidth_GBps.{name}", allow_zero=False)
        alpha = dict(_ALPHA)
        for key, value in dict(self.alpha_us).items():
            name = _check_class(key, "alpha_us")
            alpha[name] = _positive(value, f"alpha_us.{name}", allow_zero=True)
        object.__setattr__(self, "bandwidth_GBps", MappingProxyType(bw))
        object.__setattr__(self, "alpha_us", MappingProxyType(alpha))

    def bw(self, link_class: str) -> float:
        """Bandwidth of ``link_class`` in GB/s."""
        return self.bandwidth_GBps[link_class]

    def alpha(self, link_class: str) -> float:
        """Alpha of ``link_class`` in microseconds."""
        return self.alpha_us[link_class]

    def with_overrides(
        self, bandwidth_GBps: Mapping[str, Any] | None = None, alpha_us: Mapping[str, Any] | None = None
    ) -> ClassDefaults:
        """A copy with some classes changed."""
        return replace(
            self,
            bandwidth_GBps={**self.bandwidth_GBps, **dict(bandwidth_GBps or {})},
            alpha_us={**self.alpha_us, **dict(alpha_us or {})},
        )

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{"bandwidth_GBps": {...}, "alpha_us": {...}}`` (the override file's form)."""
        return {"bandwidth_GBps": dict(self.bandwidth_GBps), "alpha_us": dict(self.alpha_us)}


def parse_assignments(items: Iterable[str], option: str) -> dict[str, float]:
    """``["NV=20", "SYS=6"]`` -> ``{"NV": 20.0, "SYS": 6.0}``; ``option`` names the flag in errors."""
    out: dict[str, float] = {}
    for item in items:
        if "=" not in item:
            raise ValidationError(f"{option} {item!r} must look like CLASS=VALUE (e.g. NV=25)")
        key, raw = item.split("=", 1)
        name = _check_class(key, option)
        out[name] = _positive(raw.strip(), f"{option} {name}", allow_zero=option.endswith("alpha"))
    return out


def load_overrides(path: str | Path) -> ClassDefaults:
    """Class defaults with the overrides of a JSON or TOML file applied.

    The file holds up to two tables, ``bandwidth_GBps`` and ``alpha_us``, each mapping a
    class name to a number; anything else is an error.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"class overrides file {str(p)!r}: cannot read ({exc})") from None
    try:
        data = tomllib.loads(text) if p.suffix.lower() == ".toml" else json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{p.name}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"{p.name}: invalid TOML: {exc}") from None
    if not isinstance(data, dict):
        raise ValidationError(f"{p.name}: top level must be a table/object")
    unknown = sorted(set(data) - {"bandwidth_GBps", "alpha_us"})
    if unknown:
        raise ValidationError(f"{p.name}: unknown key {unknown[0]!r} (allowed: bandwidth_GBps, alpha_us)")
    for key in ("bandwidth_GBps", "alpha_us"):
        if not isinstance(data.get(key, {}), dict):
            raise ValidationError(f"{p.name}: {key} must be a table/object of CLASS = number")
    return ClassDefaults(bandwidth_GBps=data.get("bandwidth_GBps", {}), alpha_us=data.get("alpha_us", {}))
