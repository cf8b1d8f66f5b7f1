"""Verilog generation for the components, with a digest-keyed cache."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from amaranth import Signal, Value
from amaranth.back import verilog

from .datapath import GemmDatapath
from .systolic import SystolicArray

__all__ = ["COMPONENTS", "make", "generate_verilog"]

#: Components that can be generated on their own, by name.
COMPONENTS = {
    "datapath": GemmDatapath,
    "array": SystolicArray,
}


def make(kind: str, **params):
    """Construct the component ``kind`` ("datapath" or "array") with ``params``."""
    if kind not in COMPONENTS:
        raise ValueError(f"kind must be one of {sorted(COMPONENTS)}, not {kind!r}")
    if kind == "array":
        params = {k: v for k, v in params.items() if k in ("rows", "cols")}
    return COMPONENTS[kind](**params)


def _source_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def generate_verilog(kind: str, out_dir: str | Path, *, name: str | None = None,
                     **params) -> Path:
    """Write ``<out_dir>/<name>.v`` for component ``kind``; reuse it if nothing changed.

    The cache key is a digest of the RTL sources and the parameters, stored beside the file.
    Returns the path of the Verilog file.
    """
    name = name or f"gemm_{kind}"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.v"
    stamp = out_dir / f"{name}.digest"
    key = json.dumps({"src": _source_digest(), "kind": kind, "params": params, "name": name},
                     sort_keys=True)
    if path.exists() and stamp.exists() and stamp.read_text() == key:
        return path
    component = make(kind, **params)
    # Constant members (the ``ready`` of an always-ready stream) are not ports.
    ports = [Value.cast(value) for _, _, value in component.signature.flatten(component)]
    ports = [value for value in ports if isinstance(value, Signal)]
    path.write_text(verilog.convert(component, name=name, ports=ports, emit_src=False))
    stamp.write_text(key)
    return path
