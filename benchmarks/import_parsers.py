"""Time and peak memory of the ``nvidia-smi topo -m`` and ``rocm-smi --showtopo`` parsers on
large generated matrices (and of ``import-topology`` on them).

Run by hand::

    python benchmarks/import_parsers.py                      # 1,000-GPU nvidia-smi, 2,000-GPU rocm-smi
    python benchmarks/import_parsers.py --nvidia 500 --rocm 500

Each case runs in a fresh subprocess (``ccplan import-topology FILE --out ...``), so the
peak resident memory (``ru_maxrss`` of the child) is the command's own. The matrices:

- nvidia-smi, NVSwitch machine: ``NV18`` between every GPU pair (the DGX H100 matrix grown
  to N GPUs), 8 NIC columns, the affinity columns;
- nvidia-smi, PCIe machine: ``PIX`` within groups of 2, ``PXB`` within 4, ``NODE`` within
  half of the GPUs, ``SYS`` across the halves, ``NV2`` between the GPUs of a group of 8;
- rocm-smi: ``Weight``, ``Hops`` and ``Link Type`` sections, xGMI within groups of 8 (hop 1),
  ``PCIE`` elsewhere, two NUMA nodes.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def nvidia_switch(n: int) -> str:
    """``nvidia-smi topo -m`` of an N-GPU NVSwitch machine with 8 NICs."""
    nics = 8
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\t" + "\t".join(f"NIC{i}" for i in range(nics))
    lines = [head + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a in range(n):
        cells = [" X" if a == b else "NV18" for b in range(n)]
        cells += ["PIX" if a % nics == k else "SYS" for k in range(nics)]
        lines.append(f"GPU{a}\t" + "\t".join(cells) + "\t0-55\t0\t\tN/A")
    lines.append("")
    lines.append("NIC Legend:")
    lines.append("")
    lines += [f"  NIC{k}: mlx5_{k}" for k in range(nics)]
    return "\n".join(lines) + "\n"


def _pcie_class(a: int, b: int, n: int) -> str:
    if a // 8 == b // 8:
        return "NV2"
    if a // 2 == b // 2:
        return "PIX"
    if a // 4 == b // 4:
        return "PXB"
    if (a < n // 2) == (b < n // 2):
        return "NODE"
    return "SYS"


def nvidia_pcie(n: int) -> str:
    """``nvidia-smi topo -m`` of an N-GPU PCIe machine (NV2 pairs in groups of 8)."""
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n))
    lines = [head + "\tCPU Affinity\tNUMA Affinity"]
    for a in range(n):
        cells = [" X" if a == b else _pcie_class(a, b, n) for b in range(n)]
        lines.append(f"GPU{a}\t" + "\t".join(cells) + "\t0-55\t0")
    return "\n".join(lines) + "\n"


def rocm(n: int) -> str:
    """``rocm-smi --showtopo`` of an N-GCD machine: xGMI within groups of 8, PCIe across."""

    def section(title: str, cell: object) -> list[str]:
        out = [f"========================= {title} ========================="]
        out.append("       " + "".join(f"GPU{i:<10}" for i in range(n)))
        for a in range(n):
            out.append(f"GPU{a:<4}  " + " ".join(str(cell(a, b)) for b in range(n)))  # type: ignore[operator]
        out.append("")
        return out

    near = lambda a, b: a // 8 == b // 8  # noqa: E731
    lines = ["============================== ROCm System Management Interface =============================="]
    lines += section("Weight between two GPUs", lambda a, b: 0 if a == b else (15 if near(a, b) else 30))
    lines += section("Hops between two GPUs", lambda a, b: 0 if a == b else (1 if near(a, b) else 2))
    lines += section(
        "Link Type between two GPUs", lambda a, b: 0 if a == b else ("XGMI" if near(a, b) else "PCIE")
    )
    lines.append("=================================== Numa Nodes ===================================")
    for g in range(n):
        lines.append(f"GPU[{g}]\t\t: (Topology) Numa Node: {int(g >= n // 2)}")
    lines.append("============================== End of ROCm SMI Log ==============================")
    return "\n".join(lines) + "\n"


def run(label: str, text: str, fmt: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "topo.txt"
        src.write_text(text)
        out = Path(tmp) / "topo.json"
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "ccplan", "import-topology", str(src), "--format", fmt, "--out", str(out)],
            cwd=ROOT, capture_output=True, text=True,
        )
        seconds = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        first = (proc.stdout or proc.stderr).splitlines()[:1]
        return {
            "case": label,
            "input MB": round(len(text) / 1e6, 1),
            "exit": proc.returncode,
            "wall s": round(seconds, 2),
            # ru_maxrss of the children is the largest child so far: a new maximum is this one's
            "peak MB": round(peak / 1e3) if peak > before else f"<= {round(before / 1e3)}",
            "output": first[0] if first else "",
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvidia", type=int, default=1000, help="GPUs of the nvidia-smi matrices")
    parser.add_argument("--rocm", type=int, default=2000, help="GPUs of the rocm-smi matrix")
    args = parser.parse_args(argv)
    rows = [
        run(f"nvidia-smi NVSwitch {args.nvidia} GPUs", nvidia_switch(args.nvidia), "nvidia-smi"),
        run(f"nvidia-smi PCIe {args.nvidia} GPUs", nvidia_pcie(args.nvidia), "nvidia-smi"),
        run(f"rocm-smi {args.rocm} GPUs", rocm(args.rocm), "rocm-smi"),
    ]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
