"""Verilog generation for the components, with a digest-keyed cache."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from amaranth import Fragment, Signal, Value
from amaranth.back import rtlil
from amaranth.back.verilog import _convert_rtlil_text  # no public way to pass -sv
from amaranth.hdl._ir import PortDirection
from amaranth.lib.wiring import In

from .accelerator import Accelerator
from .axis import StreamCore
from .csr import RegisterBlock
from .datapath import GemmDatapath
from .dma import DmaReader, DmaWriter
from .systolic import SystolicArray

__all__ = ["COMPONENTS", "FAMILY_DSP", "make", "generate_verilog", "verilog_key", "to_verilog",
           "to_rtlil"]

#: Components that can be generated on their own, by name.
COMPONENTS = {
    "accelerator": Accelerator,
    "datapath": GemmDatapath,
    "stream_core": StreamCore,
    "array": SystolicArray,
    "csr": RegisterBlock,
    "dma_reader": DmaReader,
    "dma_writer": DmaWriter,
}


#: How each device family maps MACs onto DSP slices: its slice, instantiated, and the
#: packing used where the parameters do not say (one MAC per DSP48E1, inferred; two per
#: DSP48E2). ``packing=2`` on xc7 packs two MACs per instantiated DSP48E1.
FAMILY_DSP = {
    "xc7": {"primitive": True, "dsp_slice": "DSP48E1"},
    "xcup": {"primitive": True, "dsp_slice": "DSP48E2"},
}
FAMILY_PACKING = {"xc7": 1, "xcup": 2}


def make(kind: str, **params):
    """Construct the component ``kind`` (a key of :data:`COMPONENTS`) with ``params``.

    ``family`` (``"xc7"`` or ``"xcup"``) in ``params`` picks the DSP slice and, unless
    ``packing`` is given, the packing: one MAC per DSP48E1 by inference on xc7, two per
    instantiated DSP48E2 on xcup (``packing=2`` on xc7: two per instantiated DSP48E1).
    """
    family = params.pop("family", None)
    if family is not None:
        if family not in FAMILY_DSP:
            raise ValueError(f"family must be one of {sorted(FAMILY_DSP)}, not {family!r}")
        params = {"packing": FAMILY_PACKING[family], **params, **FAMILY_DSP[family]}
    if kind not in COMPONENTS:
        raise ValueError(f"kind must be one of {sorted(COMPONENTS)}, not {kind!r}")
    if kind == "array":      # the accelerator's slr_groups, as the datapath splits them
        from .datapath import slr_cols
        groups = params.get("slr_groups", 1)
        params = {k: v for k, v in params.items()
                  if k in ("rows", "cols", "packing", "primitive", "dsp_slice")}
        if groups != 1:
            params["slr_cols"] = slr_cols(params["cols"], groups)
    if kind == "csr":
        params = {k: v for k, v in params.items() if k == "addr_width"}
    return COMPONENTS[kind](**params)


def _ports(component) -> dict:
    ports = {}
    for path, member, value in component.signature.flatten(component):
        value = Value.cast(value)
        if isinstance(value, Signal):
            direction = PortDirection.Input if member.flow == In else PortDirection.Output
            ports["__".join(map(str, path))] = (value, direction)
    return ports


def _arrays(component):
    """The systolic arrays inside ``component`` (found through its sub-component attributes)."""
    found, todo, seen = [], [component], set()
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, SystolicArray):
            found.append(obj)
        for attr in ("engine", "datapath", "core", "array"):
            sub = getattr(obj, attr, None)
            if sub is not None:
                todo.append(sub)
    return found


def _convert(component, name: str, backend) -> str:
    """Convert ``component``; its array cells become one module per kind, emitted once."""
    registry = {}
    for array in _arrays(component):
        array.cell_modules = registry
    text = backend(component, name)
    for cell_name, factory in sorted(registry.items()):
        text += "\n" + backend(factory(), cell_name)
    return text


def _rtlil(component, name: str) -> str:
    rtlil_text, _ = rtlil.convert_fragment(Fragment.get(component, None), _ports(component),
                                           name, emit_src=False)
    return rtlil_text


def to_rtlil(component, name: str) -> str:
    """RTLIL for a ``wiring.Component`` (what Yosys synthesizes from; see :func:`to_verilog`)."""
    return _convert(component, name, _rtlil)


def to_verilog(component, name: str) -> str:
    """Verilog for a ``wiring.Component``, its signature members as ports.

    Differs from ``amaranth.back.verilog.convert`` in three ways: constant members (the
    ``ready`` of an always-ready stream) are not ports; the systolic array's cells are one
    Verilog module per kind of cell, instantiated R x C times (so large arrays convert in
    seconds, and the netlist reads like hand-written Verilog); and combinational logic is
    written as re-evaluated once at time zero in simulation (see below).
    """
    text = _convert(component, name, lambda c, n: _convert_rtlil_text(_rtlil(c, n)))
    # Yosys makes every ``always @*`` block sensitive to a register initialised to 0, so that
    # it runs at time zero; Icarus applies the initialiser before the blocks wait on it, and a
    # block whose inputs never change then stays X. Toggling the register once at #0 fixes it.
    return re.sub(r"^(\s*)reg (\\\$auto\$verilog_backend\S*)\s*=\s*0;$",
                  r"\1reg \2 = 0;\n`ifndef SYNTHESIS\n\1initial #0 \2 = 1;\n`endif",
                  text, flags=re.MULTILINE)


def _source_digest() -> str:
    """A digest of what the generated RTL is made from: ``rtl/`` and the register map and
    hardware constants in ``firmware/spec/`` (a new register changes the CSR block)."""
    h = hashlib.sha256()
    spec = Path(__file__).resolve().parents[1] / "firmware" / "spec"
    for path in sorted(Path(__file__).parent.glob("*.py")) + sorted(spec.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def verilog_key(kind: str, name: str, **params) -> str:
    """What :func:`generate_verilog` stores beside a file (``.digest``) and compares to reuse
    it: a digest of the RTL sources (and ``firmware/spec``), the component, its parameters
    and its name."""
    return json.dumps({"src": _source_digest(), "kind": kind, "params": params, "name": name},
                      sort_keys=True)


def generate_verilog(kind: str, out_dir: str | Path, *, name: str | None = None,
                     fmt: str = "v", **params) -> Path:
    """Write ``<out_dir>/<name>.v`` for component ``kind``; reuse it if nothing changed.

    ``fmt="il"`` writes RTLIL (``<name>.il``) instead, for Yosys.

    The cache key is a digest of the RTL sources and the parameters, stored beside the file.
    Returns the path of the Verilog file.
    """
    name = name or f"gemm_{kind}"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if fmt not in ("v", "il"):
        raise ValueError(f"fmt must be 'v' or 'il', not {fmt!r}")
    path = out_dir / f"{name}.{fmt}"
    stamp = out_dir / f"{name}.{fmt}.digest"
    key = verilog_key(kind, name, **params)
    if path.exists() and stamp.exists() and stamp.read_text() == key:
        return path
    component = make(kind, **params)
    path.write_text(to_verilog(component, name) if fmt == "v" else to_rtlil(component, name))
    stamp.write_text(key)
    return path
