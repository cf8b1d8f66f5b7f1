"""A simulated PYNQ board: the ``pynq`` package's shapes over a :class:`sim.native.NativeSim`.

:class:`SimBoard` holds one simulated accelerator (its Verilog as a native model with its AXI
memory) at the board's register address, and :meth:`SimBoard.module` returns a module object
to install as ``sys.modules["pynq"]``, so :mod:`firmware.runtime.pynq_backend` runs unchanged:

* ``Overlay(bitfile)``: "loads" a bitstream: the file must exist; its ``ip_dict``
  (``{name: {"phys_addr", "addr_range", ...}}``) comes from the ``.hwh`` beside it, or from
  the board's generated one (:func:`write_hwh`) when there is none;
* ``MMIO(base, length)``: ``read(offset)`` / ``write(offset, value)``, offsets from ``base``;
  reaches the accelerator's registers when ``[base, base + length)`` lies in its register
  range, anything else raises (on a board it would hang or fault the bus). Each access lets
  the simulated clock run ``cycles_per_access`` cycles (time passes while the ARM polls);
* ``allocate(shape, dtype)``: an ndarray subclass with ``device_address`` /
  ``physical_address``, ``flush()``, ``invalidate()``, ``freebuffer()`` (and ``close()``,
  ``sync_to_device()``, ``sync_from_device()``), carved out of the simulated CMA (``cma``
  bytes of the DRAM) by a first-fit allocator (4 KB pages, like PYNQ's CMA buffers); a full
  CMA raises ``RuntimeError("BO allocation failed: ...")``, as ``pynq.allocate`` does on a
  board. The array the CPU sees is **not**
  the DRAM: ``flush()`` copies it to the DRAM and ``invalidate()`` copies the DRAM back, as a
  cache would, and both sides start with different garbage — so a driver that forgets either
  computes on stale data and a test notices.

:func:`write_bitstream_dir` writes what ``build.py`` and Vivado would leave for a board — a
placeholder ``.bit``, a minimal ``.hwh`` and ``report.json`` with its ``"host"`` section — for
tests of the command-line path. ``dsp_rows`` is dropped from the simulated configuration: a
row of LUT multipliers computes the same products as a row of DSP slices, and the all-DSP
model is the one the other simulations build (and cache).
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np

from firmware.spec import boards, regmap
from firmware.spec.boards import REGISTER_RANGE

__all__ = ["SimBoard", "sim_params", "sim_library", "pynq_device", "write_hwh", "hwh_text",
           "write_report", "write_bitstream_dir"]

PAGE = 4096
#: The accelerator parameters :class:`sim.native.NativeSim` takes from a configuration.
_SIM_PARAMS = ("rows", "cols", "depth", "block", "queue", "data_width", "addr_width",
               "packing", "dsp_slice", "write_ports", "read_ports", "burst_beats")


def sim_params(config: dict) -> dict:
    """The parameters of :class:`sim.native.NativeSim` (and :func:`sim.native.build`) for an
    accelerator configuration, as :class:`SimBoard` builds it."""
    return {k: config[k] for k in _SIM_PARAMS if k in config}


def _ps_parameters(board: str, clock_mhz: float) -> str:
    """The PS's ``PARAMETERS`` that PYNQ's ``.hwh`` parser reads: each PL clock's enable and
    its two divisors (FCLK0 / pl_clk0 at the board's clock from a 1000 MHz PLL, the others
    off). Empty for the XDMA, which has no PL clocks of its own."""
    if board == "vu9p":
        return ""
    div = max(1, round(1000 / clock_mhz))
    if board == "pynq-z1":
        enable, divisor = "PCW_FPGA_FCLK{i}_ENABLE", "PCW_FCLK{i}_PERIPHERAL_DIVISOR{j}"
        freq = "PCW_FPGA{i}_PERIPHERAL_FREQMHZ"
    else:
        enable = "PSU__FPGA_PL{i}_ENABLE"
        divisor = "PSU__CRL_APB__PL{i}_REF_CTRL__DIVISOR{j}"
        freq = "PSU__CRL_APB__PL{i}_REF_CTRL__FREQMHZ"
    params = []
    for i in range(4):
        params += [(enable.format(i=i), int(i == 0)), (freq.format(i=i), clock_mhz if i == 0
                                                       else 0),
                   (divisor.format(i=i, j=0), div if i == 0 else 1),
                   (divisor.format(i=i, j=1), 1)]
    lines = "\n".join(f'        <PARAMETER NAME="{k}" VALUE="{v}"/>' for k, v in params)
    return f"      <PARAMETERS>\n{lines}\n      </PARAMETERS>\n"


def sim_library(config: dict) -> Path:
    """The compiled native model :class:`SimBoard` loads for ``config`` (built when missing),
    to hand to a :class:`SimBoard` in an environment without the hardware tools
    (``SimBoard(..., library=path)``)."""
    from firmware.spec.ports import burst_beats, resolve_port
    from sim.native import build

    params = sim_params(config)
    params["burst_beats"] = burst_beats(resolve_port("ideal"), params.get("burst_beats"))
    return Path(build(**params))


def hwh_text(board: str, base_addr: int | None = None, ip_name: str = boards.IP_NAME) -> str:
    """A minimal, plausible Vivado ``.hwh`` for ``board``: the PS (or XDMA) module, with the
    PL clock parameters PYNQ's parser reads, whose memory map has the accelerator's register
    range, another PL slave beside it, and the accelerator's module. PYNQ's own parser
    (``pynq.pl_server.hwh_parser``, the Zynq or Zynq UltraScale+ class) reads the Zynq
    boards' (tests/test_pynq_real.py)."""
    b = boards.board(board)
    base = b.base_addr if base_addr is None else base_addr
    high = base + REGISTER_RANGE - 1
    ps, master = {"pynq-z1": ("ps", "M_AXI_GP0"), "zcu104": ("ps", "M_AXI_HPM0_FPD"),
                  "vu9p": ("xdma", "M_AXI_LITE")}[board]
    vlnv = {"pynq-z1": "xilinx.com:ip:processing_system7:5.5",
            "zcu104": "xilinx.com:ip:zynq_ultra_ps_e:3.5", "vu9p": "xilinx.com:ip:xdma:4.1"}
    gpio = base + 2 * REGISTER_RANGE

    def memrange(block, lo, hi, inst, slave, memtype="REGISTER", bus=master):
        attrs = {"ADDRESSBLOCK": block, "BASENAME": "C_BASEADDR", "BASEVALUE": f"0x{lo:08X}",
                 "HIGHNAME": "C_HIGHADDR", "HIGHVALUE": f"0x{hi:08X}", "INSTANCE": inst,
                 "IS_DATA": "TRUE", "IS_INSTRUCTION": "TRUE", "MASTERBUSINTERFACE": bus,
                 "MEMTYPE": memtype, "SLAVEBUSINTERFACE": slave}
        return "        <MEMRANGE " + "\n            ".join(
            f'{k}="{v}"' for k, v in attrs.items()) + "/>"

    ranges = "\n".join([
        memrange("reg0", base, high, ip_name, "s_axi_control"),
        memrange("Reg", gpio, gpio + 0xFFFF, "axi_gpio_0", "S_AXI")])
    return f"""<?xml version="1.0" encoding="UTF-8" standalone="no" ?>
<EDKSYSTEM EDWVERSION="1.2" TIMESTAMP="Thu Jan  1 00:00:00 2026" VIVADOVERSION="2022.1">
  <SYSTEMINFO ARCH="{b.family}" BOARD="" DEVICE="" NAME="bfp" PACKAGE="" SPEEDGRADE=""/>
  <EXTERNALPORTS/>
  <MODULES>
    <MODULE FULLNAME="/{ps}" INSTANCE="{ps}" MODTYPE="{vlnv[board].split(':')[2]}"
        VLNV="{vlnv[board]}">
{_ps_parameters(board, b.clock_mhz)}      <BUSINTERFACES>
        <BUSINTERFACE BUSNAME="ps_accel_axi" NAME="{master}" TYPE="MASTER"
            VLNV="xilinx.com:interface:aximm:1.0"/>
      </BUSINTERFACES>
      <MEMORYMAP>
{ranges}
      </MEMORYMAP>
    </MODULE>
    <MODULE FULLNAME="/{ip_name}" INSTANCE="{ip_name}" IPTYPE="PERIPHERAL"
        MODTYPE="bfp_accel_top" VLNV="xilinx.com:module_ref:bfp_accel_top:1.0">
      <PARAMETERS>
        <PARAMETER NAME="Component_Name" VALUE="bfp_accel_0_0"/>
      </PARAMETERS>
      <BUSINTERFACES>
        <BUSINTERFACE BUSNAME="ps_accel_axi" NAME="s_axi_control" TYPE="SLAVE"
            VLNV="xilinx.com:interface:aximm:1.0"/>
      </BUSINTERFACES>
    </MODULE>
    <MODULE FULLNAME="/axi_gpio_0" INSTANCE="axi_gpio_0" IPTYPE="PERIPHERAL"
        MODTYPE="axi_gpio" VLNV="xilinx.com:ip:axi_gpio:2.0">
      <BUSINTERFACES>
        <BUSINTERFACE BUSNAME="ps_accel_axi" NAME="S_AXI" TYPE="SLAVE"
            VLNV="xilinx.com:interface:aximm:1.0"/>
      </BUSINTERFACES>
    </MODULE>
  </MODULES>
</EDKSYSTEM>
"""


def write_hwh(path, board: str, base_addr: int | None = None) -> Path:
    path = Path(path)
    path.write_text(hwh_text(board, base_addr))
    return path


def write_report(path, board: str, config: dict | None = None, **host) -> Path:
    """``report.json`` as ``build.py`` writes it without an estimate: platform, config and the
    ``"host"`` section (``host`` entries override it, e.g. ``base_addr="0x40000000"``)."""
    cfg = boards.config(board, **(config or {}))
    path = Path(path)
    report = {"platform": board, "config": cfg, "macs_per_cycle": cfg["rows"] * cfg["cols"],
              "host": {**boards.host_section(board, cfg), **host}}
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def write_bitstream_dir(directory, board: str, config: dict | None = None, *,
                        hwh: bool = True, report: bool = True) -> Path:
    """A directory as a board build leaves it: ``<stem>.bit`` (a placeholder), ``<stem>.hwh``
    and ``report.json``. Returns the bitfile's path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    b = boards.board(board)
    bit = directory / b.bitfile
    bit.write_bytes(b"\x00\x09\x0f\xf0 simulated bitstream\n")
    if hwh:
        write_hwh(bit.with_suffix(".hwh"), board)
    if report:
        write_report(directory / "report.json", board, config)
    return bit


class _CmaFull(Exception):
    """The simulated CMA has no room for an allocation (the message says how much)."""


class _Allocator:
    """First-fit over whole pages of ``[base, limit)``; ``used`` and ``peak`` bytes."""

    def __init__(self, base: int, limit: int):
        self.free = [(base, limit)]
        self.size, self.used, self.peak = limit - base, 0, 0

    def alloc(self, nbytes: int) -> int:
        size = max(PAGE, -(-nbytes // PAGE) * PAGE)
        for i, (lo, hi) in enumerate(self.free):
            if hi - lo >= size:
                self.free[i] = (lo + size, hi)
                if lo + size == hi:
                    del self.free[i]
                self.used += size
                self.peak = max(self.peak, self.used)
                return lo
        largest = max((hi - lo for lo, hi in self.free), default=0)
        raise _CmaFull(f"{nbytes} bytes asked for, the simulated CMA of {self.size} bytes "
                       f"has {self.size - self.used} free, {largest} contiguous")

    def release(self, addr: int, nbytes: int) -> None:
        size = max(PAGE, -(-nbytes // PAGE) * PAGE)
        self.used -= size
        self.free.append((addr, addr + size))
        self.free.sort()
        merged = [self.free[0]]
        for lo, hi in self.free[1:]:
            if lo == merged[-1][1]:
                merged[-1] = (merged[-1][0], hi)
            else:
                merged.append((lo, hi))
        self.free = merged


class SimBuffer(np.ndarray):
    """The CPU's view of a contiguous DRAM buffer (``pynq.buffer.PynqBuffer``'s shape)."""

    def __array_finalize__(self, obj):
        # views (slices, reshapes) flush and invalidate the whole buffer they came from
        self._board = getattr(obj, "_board", None)
        self.device_address = getattr(obj, "device_address", None)
        self.physical_address = self.device_address
        self._owner = (obj._owner if getattr(obj, "_owner", None) is not None else obj) \
            if isinstance(obj, SimBuffer) else None

    def _span(self):
        owner = self._owner if self._owner is not None else self
        return owner, owner.device_address, owner.nbytes

    def flush(self):
        """CPU to DRAM (clean the cache lines)."""
        owner, addr, n = self._span()
        if owner._board is None:
            raise ValueError("flush() of a freed buffer")
        owner._board.sim.memory[addr:addr + n] = np.asarray(owner).view(np.uint8).reshape(-1)
        owner._board.flushes += 1

    def invalidate(self):
        """DRAM to CPU (drop the cache lines)."""
        owner, addr, n = self._span()
        if owner._board is None:
            raise ValueError("invalidate() of a freed buffer")
        np.asarray(owner).view(np.uint8).reshape(-1)[:] = owner._board.sim.memory[addr:addr + n]
        owner._board.invalidates += 1

    sync_to_device = flush
    sync_from_device = invalidate

    def freebuffer(self):
        owner, addr, n = self._span()
        if owner._board is not None:
            owner._board._allocator.release(addr, n)
            owner._board.live -= 1
            owner._board = None

    close = freebuffer

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.freebuffer()


class SimBoard:
    """A board with the accelerator at its register address (see the module documentation).

    Parameters
    ----------
    board : str
        A :data:`firmware.spec.boards.BOARDS` name: the register address and the default
        configuration.
    config : dict, optional
        The accelerator's configuration (a report's ``"config"``), default the board's.
    base_addr : int, optional
        Where the registers are, default the board's.
    cycles_per_access : int
        Simulated cycles per register access.
    memory : int
        Bytes of simulated DRAM (from address 0).
    cma : int, optional
        Bytes of the DRAM ``allocate`` hands out (from the second 4 KB page); default all but
        the first page. A multiple of 4096.
    **options
        More :class:`sim.native.NativeSim` options (``port``, ``latency``, ``seed``...).

    Attributes
    ----------
    loaded : list of str
        The bitfiles "downloaded".
    live, flushes, invalidates, accesses, refused : int
        Buffers allocated and not freed, cache operations, register accesses, and
        allocations the full CMA refused.
    """

    def __init__(self, board: str = "pynq-z1", config: dict | None = None, *,
                 base_addr: int | None = None, cycles_per_access: int = 64,
                 memory: int = 16 << 20, cma: int | None = None, **options):
        from sim.native import NativeSim

        cma = memory - PAGE if cma is None else cma
        if (not isinstance(cma, int) or isinstance(cma, bool) or cma < PAGE or cma % PAGE
                or cma > memory - PAGE):
            raise ValueError(f"cma must be a multiple of {PAGE} bytes in [{PAGE}, "
                             f"{memory - PAGE}] (memory less a page), not {cma!r}")

        self.board = boards.board(board)
        self.config = dict(config) if config is not None else self.board.config()
        self.base_addr = self.board.base_addr if base_addr is None else base_addr
        self.cycles_per_access = cycles_per_access
        self.sim = NativeSim(memory=memory, **options, **sim_params(self.config))
        self.sim.memory[:] = 0xCD                     # DRAM garbage
        self._allocator = _Allocator(PAGE, PAGE + cma)
        self.loaded: list[str] = []                   # bitfiles "downloaded"
        self.live = self.flushes = self.invalidates = self.accesses = 0
        self.refused = 0                              # allocations the full CMA refused

    # -- the pynq API --------------------------------------------------------------------------
    def module(self) -> types.ModuleType:
        """A stand-in ``pynq`` module bound to this board."""
        board = self
        mod = types.ModuleType("pynq", "simulated PYNQ (sim.native.pynq_sim)")

        class Overlay:
            def __init__(self, bitfile, download=True, **kwargs):
                path = Path(bitfile)
                if not path.is_file():
                    raise OSError(f"bitstream file {bitfile} does not exist")
                hwh = path.with_suffix(".hwh")
                text = hwh.read_text() if hwh.is_file() else hwh_text(board.board.name,
                                                                       board.base_addr)
                self.bitfile_name = str(path)
                self.ip_dict = _ip_dict(text)
                if download:
                    board.loaded.append(str(path))

        class MMIO:
            def __init__(self, base_addr, length=4, **kwargs):
                lo, hi = board.base_addr, board.base_addr + REGISTER_RANGE
                if not (lo <= base_addr and base_addr + length <= hi):
                    raise ValueError(f"nothing at {base_addr:#x}..{base_addr + length:#x} on "
                                     f"the simulated {board.board.name}: the accelerator's "
                                     f"registers are at {lo:#x}..{hi:#x}")
                self.base_addr, self.length = base_addr, length
                self._offset = base_addr - lo

            def _check(self, offset):
                if not 0 <= offset <= self.length - 4 or offset % 4:
                    raise ValueError(f"MMIO offset {offset:#x} is outside the mapping "
                                     f"(length {self.length:#x}) or unaligned")

            def read(self, offset=0, length=4):
                self._check(offset)
                board.accesses += 1
                board.sim.step(board.cycles_per_access)
                return board.sim.read32(self._offset + offset)

            def write(self, offset, value):
                self._check(offset)
                board.accesses += 1
                board.sim.write32(self._offset + offset, int(value))
                board.sim.step(board.cycles_per_access)

        def allocate(shape, dtype="u4", target=None, **kwargs):
            cpu = np.empty(shape, dtype=dtype)
            cpu.view(np.uint8).reshape(-1)[:] = 0x5A              # stale cache contents
            try:
                addr = board._allocator.alloc(cpu.nbytes)
            except _CmaFull as e:
                board.refused += 1
                raise RuntimeError(f"BO allocation failed: {e}") from None
            buf = cpu.view(SimBuffer)
            buf._board, buf._owner = board, None
            buf.device_address = buf.physical_address = addr
            board.live += 1
            return buf

        mod.Overlay, mod.MMIO, mod.allocate = Overlay, MMIO, allocate
        mod.__version__ = "3.0.1+sim"
        return mod

    def install(self, monkeypatch=None) -> types.ModuleType:
        """Install :meth:`module` as ``sys.modules["pynq"]`` (through pytest's ``monkeypatch``
        when given, so it is undone after the test)."""
        import sys
        mod = self.module()
        if monkeypatch is not None:
            monkeypatch.setitem(sys.modules, "pynq", mod)
        else:
            sys.modules["pynq"] = mod
        return mod

    @property
    def cma_used(self) -> int:
        """Bytes of the CMA in buffers not freed (whole pages)."""
        return self._allocator.used

    @property
    def cma_peak(self) -> int:
        """The most bytes of the CMA in buffers at once."""
        return self._allocator.peak

    def reads_id(self) -> bool:
        return self.sim.read32(regmap.offset("ID")) == regmap.MAGIC


# -- the real pynq package over a SimBoard --------------------------------------------------------
class _XrtBuffer:
    """``pyxrt.bo`` over a :class:`SimBoard`'s CMA: the host's copy (``map``) apart from the
    DRAM, ``sync`` copying one way or the other, the CMA given back when the object goes (as
    XRT frees a buffer object with its last handle)."""

    class flags:                                    # noqa: N801 -- pyxrt's name
        normal, cacheable = 0, 1 << 24

    def __init__(self, board, size, flags, idx):
        try:
            self._addr = board._allocator.alloc(size)
        except _CmaFull as e:
            board.refused += 1
            raise RuntimeError(f"failed to allocate a buffer object: {e}") from None
        self._board, self._size = board, size
        self._host = np.full(size, 0x5A, np.uint8)   # stale cache contents
        board.live += 1

    def map(self):
        return memoryview(self._host)

    def size(self):
        return self._size

    def address(self):
        return self._addr

    def sync(self, direction):
        mem = self._board.sim.memory
        if direction == _SYNC_TO_DEVICE:
            mem[self._addr:self._addr + self._size] = self._host
            self._board.flushes += 1
        else:
            self._host[:] = mem[self._addr:self._addr + self._size]
            self._board.invalidates += 1

    def __del__(self):
        board = getattr(self, "_board", None)
        if board is not None:
            board._allocator.release(self._addr, self._size)
            board.live -= 1
            self._board = None


_SYNC_TO_DEVICE, _SYNC_FROM_DEVICE = 0, 1


class _RegisterWindow:
    """What ``mmap`` of ``/dev/mem`` gives ``pynq.MMIO``: 32-bit words by index, here the
    simulated accelerator's registers (anything else raises, as it would hang a board)."""

    def __init__(self, board, base_addr, length):
        lo, hi = board.base_addr, board.base_addr + REGISTER_RANGE
        if not (lo <= base_addr and base_addr + length <= hi):
            raise ValueError(f"nothing at {base_addr:#x}..{base_addr + length:#x} on the "
                             f"simulated {board.board.name}: the accelerator's registers are "
                             f"at {lo:#x}..{hi:#x}")
        self.board, self.offset, self.words = board, base_addr - lo, length // 4

    def __len__(self):
        return self.words

    def _at(self, idx):
        if not 0 <= idx < self.words:
            raise IndexError(f"register word {idx} outside the mapping of {self.words}")
        self.board.accesses += 1
        return self.offset + 4 * int(idx)

    def __getitem__(self, idx):
        off = self._at(idx)
        self.board.sim.step(self.board.cycles_per_access)
        return np.uint32(self.board.sim.read32(off))

    def __setitem__(self, idx, value):
        self.board.sim.write32(self._at(idx), int(value))
        self.board.sim.step(self.board.cycles_per_access)


_DEVICE_CLASS = None
#: Where the Zynq PS's own registers begin (SLCR at 0xF8000000, the UltraScale+ CRL_APB above).
_PS_REGISTERS = 0xF800_0000
#: The PS clock registers pynq reads and writes when it loads an overlay (``pynq.ps.Clocks``),
#: as the boot firmware leaves them: ``{board: {block base: {offset: word}}}``. The PL clocks'
#: source is a 1000 MHz IO PLL (the divisors of :func:`hwh_text` assume it): on the Zynq-7000
#: 50 MHz x 20 (``PLL_FDIV``, bits 12-18), the ARM PLL at 1300 MHz and the CPU at 650; on the
#: UltraScale+ 33.333 MHz x 60 / 2 (``FBDIV`` bits 8-14, ``DIV2`` bit 16), the APU at 1200.
#: PL clock words: divisor0 at bits 8-13, divisor1 at bits 20-25 (Zynq) or 16-21 (and CLKACT,
#: bit 24, on the UltraScale+); FCLK0 / pl_clk0 runs at 100 MHz until an overlay sets it.
_PS_CLOCK_WORDS = {
    "pynq-z1": {0xF800_0000: {0x100: 26 << 12, 0x104: 21 << 12, 0x108: 20 << 12,
                              0x120: 2 << 8,
                              **{0x170 + 0x10 * i: 10 << 8 | 1 << 20 for i in range(4)}}},
    "zcu104": {0xFF5E_0000: {0x20: 60 << 8 | 1 << 16, 0x30: 60 << 8 | 1 << 16,
                             **{0xC0 + 4 * i: 1 << 24 | 1 << 16 | 10 << 8 for i in range(4)}},
               0xFD1A_0000: {0x20: 72 << 8 | 1 << 16, 0x2C: 64 << 8 | 1 << 16,
                             0x38: 60 << 8 | 1 << 16, 0x60: 1 << 8}},
}


def _ps_register_block(board: str, base_addr: int, length: int) -> np.ndarray:
    """A block of the PS's registers as plain words, the clock registers set as the boot
    firmware leaves them (:data:`_PS_CLOCK_WORDS`), everything else zero."""
    words = np.zeros(length // 4, np.uint32)
    for block, values in _PS_CLOCK_WORDS.get(board, {}).items():
        for offset, value in values.items():
            idx = (block + offset - base_addr) // 4
            if 0 <= idx < len(words):
                words[idx] = value
    return words


def _device_class():
    """The ``pynq.Device`` subclass over a :class:`SimBoard`, defined (and so registered in
    pynq's device list) once. It is pynq's ``XrtDevice`` as ``EmbeddedDevice`` uses it on a
    Zynq board — buffers through pynq's ``XrtMemory``, ``PynqBuffer``, ``allocate_bo``,
    ``flush`` and ``invalidate`` — with the two layers under pynq replaced: ``pyxrt``'s buffer
    objects (:class:`_XrtBuffer`) and libc's ``munmap`` (the host copies are numpy's)."""
    global _DEVICE_CLASS
    if _DEVICE_CLASS is not None:
        return _DEVICE_CLASS
    import ctypes

    import pynq.buffer
    from pynq.metadata.runtime_metadata_parser import RuntimeMetadataParser
    from pynq.pl_server import hwh_parser, xrt_device
    from pynq.pl_server.device import Device
    from pynqmetadata.frontends import Metadata

    if not hasattr(xrt_device, "pyxrt"):
        xrt_device.pyxrt = types.SimpleNamespace(
            bo=_XrtBuffer, xclBOSyncDirection=types.SimpleNamespace(
                XCL_BO_SYNC_BO_TO_DEVICE=_SYNC_TO_DEVICE,
                XCL_BO_SYNC_BO_FROM_DEVICE=_SYNC_FROM_DEVICE))
    if not hasattr(pynq.buffer, "libc"):
        pynq.buffer.libc = types.SimpleNamespace(munmap=lambda ptr, size: 0)
        pynq.buffer.ctypes = ctypes

    class SimPynqDevice(xrt_device.XrtDevice):
        """A software board in pynq's device list (:func:`pynq_device`)."""

        _probe_priority_ = 7
        instances: list = []

        @classmethod
        def _probe_(cls):
            return list(cls.instances)

        def __init__(self, board):
            Device.__init__(self, f"sim_{board.board.name}")
            self.capabilities = {"MEMORY_MAPPED": True}
            self.board = self.handle = board
            self.active_bos, self._bo_cache, self._streams = [], [], {}
            self.arch = "armv7l" if board.board.name == "pynq-z1" else "aarch64"
            self.ps_registers = {}

        @property
        def name(self):
            return f"simulated {self.board.board.name}"

        @property
        def default_memory(self):
            alloc = self.board._allocator
            return xrt_device.XrtMemory(self, {"idx": 0, "size": alloc.size,
                                               "base_address": PAGE, "tag": "PSDDR",
                                               "used": 1, "streaming": False, "type": "DDR"})

        def mmap(self, base_addr, length):
            if base_addr >= _PS_REGISTERS:
                # the PS's own registers (the PL clocks pynq sets on download): plain words
                key = (base_addr, length)
                if key not in self.ps_registers:
                    self.ps_registers[key] = _ps_register_block(self.board.board.name,
                                                                base_addr, length)
                return self.ps_registers[key]
            return _RegisterWindow(self.board, base_addr, length)

        def get_bitfile_metadata(self, bitfile_name, partial=False):
            hwh = hwh_parser.get_hwh_name(bitfile_name)
            if not Path(hwh).is_file():
                raise RuntimeError("Unable to find metadata for bitstream")
            # what EmbeddedDevice reads a full bitstream's .hwh with
            parser = RuntimeMetadataParser(Metadata(input=Path(hwh)))
            parser.refresh_hierarchy_dict()
            return parser

        def download(self, bitstream, parser=None):
            self.board.loaded.append(str(bitstream.bitfile_name))
            self.post_download(bitstream, parser, self.name)

    _DEVICE_CLASS = SimPynqDevice
    return SimPynqDevice


def pynq_device(board: SimBoard):
    """A device of the installed ``pynq`` package over ``board``, registered in pynq and made
    its active device: ``pynq.Overlay``, ``pynq.MMIO`` and ``pynq.allocate`` then run pynq's
    own code down to the board (see :func:`_device_class`). Needs the ``pynq`` package (3.x)
    and a Zynq board (``pynq-z1`` or ``zcu104``); a full CMA fails ``pynq.allocate`` with
    pynq's ``RuntimeError("BO allocation failed: ...")``.

    Returns
    -------
    pynq.Device
        The device (``pynq.Device.active_device``).
    """
    import pynq

    if board.board.name not in ("pynq-z1", "zcu104"):
        raise ValueError(f"board must be a Zynq board (pynq-z1, zcu104) for pynq's device, "
                         f"not {board.board.name!r}")
    cls = _device_class()
    dev = cls(board)
    cls.instances[:] = [dev]
    pynq.Device._devices = [dev]
    pynq.Device.active_device = dev
    return dev


def _ip_dict(text: str) -> dict:
    """``Overlay.ip_dict`` from ``.hwh`` text, parsed as PYNQ does: the register-type
    ``MEMRANGE``s, by instance, with the module's VLNV as ``type``."""
    import xml.etree.ElementTree as ET
    root = ET.fromstring(text)
    vlnv = {m.get("INSTANCE"): m.get("VLNV") for m in root.iter("MODULE")}
    ips = {}
    for r in root.iter("MEMRANGE"):
        inst = r.get("INSTANCE")
        if r.get("MEMTYPE") != "REGISTER" or inst in ips:
            continue
        base, high = int(r.get("BASEVALUE"), 0), int(r.get("HIGHVALUE"), 0)
        ips[inst] = {"phys_addr": base, "addr_range": high - base + 1,
                     "type": vlnv.get(inst), "fullpath": inst, "parameters": {},
                     "registers": {}, "state": None}
    return ips
