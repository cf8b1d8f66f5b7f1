"""The ``pynq`` backend: :class:`firmware.runtime.driver.Driver` over a board through the
``pynq`` package.

Only this module knows about PYNQ. It maps the accelerator's registers with ``pynq.MMIO`` and
allocates operand buffers with ``pynq.allocate`` (physically contiguous, cache-managed with
``flush``/``invalidate``); everything else — descriptor layout, the register sequence, error
handling — is the driver the ``rtl`` backend uses. It needs numpy and the standard library
only (plus ``pynq`` itself when connecting), and runs on PYNQ's Python 3.10.

.. code-block:: python

    from firmware.runtime.pynq_backend import connect
    drv = connect(board="pynq-z1")     # finds bfp_pynq_z1.bit, its .hwh and report.json
    drv.info                           # HardwareInfo: the array and bus, from CONFIG registers
    drv.target                         # what was used: bitfile, report, base address, clock

Where each fact comes from (:func:`resolve`), first found wins:

* the **report** (``build/<board>/report.json`` of ``build.py``, with its ``"host"``
  section): ``report=`` (the file or its directory), else ``report.json`` beside the
  bitfile, else ``build/<board>/report.json`` (in the repository, then in the current
  directory), else ``/home/xilinx/overlays/report.json`` when it is the same board's;
* the **bitfile**: ``bitfile=``, else the report's ``host.bitfile`` beside the report, else
  ``<stem>.bit`` in ``/home/xilinx/overlays`` (where ``build.py --program --host`` copies it),
  else none (the design is taken as already loaded);
* the **base address**: ``base_addr=``, else the report's ``host.base_addr``, else the
  ``MEMRANGE`` of instance ``ip_name`` (default ``accel``) in the ``.hwh`` beside the bitfile,
  else :mod:`firmware.spec.boards`' address for the board, else the first IP of the loaded overlay
  whose ``ID`` register reads "BFP8". A report and a ``.hwh`` that disagree are an error;
* the **clock** (for turning poll intervals into sleeps): ``clock_hz=``, else the report's,
  else the board's, else 100 MHz;
* the **CMA size** (the memory ``pynq.allocate`` draws from, whose share
  :data:`firmware.runtime.device.POOL_SHARE` the device's buffer pool keeps by default):
  ``CmaTotal`` of ``/proc/meminfo`` (:func:`cma_size`), else :data:`PYNQ_CMA_BYTES`.

The array shape and bus width are read from the hardware's CONFIG registers
(``Driver.info``) and checked against the report's configuration: a bitstream from another
build fails with both named.
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from firmware.runtime.driver import Driver
from firmware.spec import boards, regmap

__all__ = ["connect", "resolve", "Target", "hwh_ranges", "hwh_base_addr", "cma_size",
           "OVERLAY_DIR", "MEMINFO", "PYNQ_CMA_BYTES"]

#: Where ``build.py --program --host`` copies the bitstream, ``.hwh`` and ``report.json``.
OVERLAY_DIR = Path("/home/xilinx/overlays")
_REPO = Path(__file__).resolve().parents[2]
#: Where Linux reports the CMA's size (``CmaTotal``).
MEMINFO = Path("/proc/meminfo")
#: The CMA of a PYNQ image when ``/proc/meminfo`` does not say: 128 MiB, the
#: ``CONFIG_CMA_SIZE_MBYTES=128`` of PYNQ's kernel configuration
#: (``sdbuild/boot/meta-pynq/recipes-kernel/linux/linux-xlnx/pynq.cfg`` in Xilinx/PYNQ).
PYNQ_CMA_BYTES = 128 << 20


class _Regs:
    def __init__(self, mmio, clock_hz):
        self.mmio, self.clock_hz = mmio, clock_hz

    def read32(self, offset):
        return int(self.mmio.read(offset))

    def write32(self, offset, value):
        self.mmio.write(offset, int(value) & 0xFFFFFFFF)

    def wait(self, cycles):
        time.sleep(cycles / self.clock_hz)


class _Buffer:
    def __init__(self, buf):
        # the CPU's view as a plain ndarray: results copied out of it are plain arrays, and
        # numpy never goes through the buffer class's own methods
        self.buf, self.addr = buf, int(buf.device_address)
        self.array = buf.view(np.ndarray)

    def flush(self):
        self.buf.flush()

    def invalidate(self):
        self.buf.invalidate()


class _Memory:
    def __init__(self, pynq):
        self.pynq, self.live = pynq, []

    def buffer(self, nbytes):
        buf = _Buffer(self.pynq.allocate(shape=(nbytes,), dtype=np.uint8))
        self.live.append(buf)
        return buf

    def free(self, buf):
        self.live = [b for b in self.live if b is not buf]
        buf.buf.freebuffer()

    def release(self):
        for buf in self.live:
            buf.buf.freebuffer()
        self.live = []


# -- the .hwh ----------------------------------------------------------------------------------
def hwh_ranges(hwh) -> dict:
    """The register ranges of a Vivado hardware handoff (``.hwh``): ``{instance: {"base_addr",
    "high_addr", "master", "slave"}}`` from its ``MEMRANGE`` elements (``MEMTYPE`` other than
    ``MEMORY``; the first range of each instance). ``hwh`` is a path or the XML text."""
    text = hwh if isinstance(hwh, str) and hwh.lstrip().startswith("<") else None
    try:
        root = ET.fromstring(text) if text is not None else ET.parse(str(hwh)).getroot()
    except ET.ParseError as e:
        raise ValueError(f"{hwh if text is None else 'the .hwh text'} is not valid XML: "
                         f"{e}") from None
    ranges = {}
    for r in root.iter("MEMRANGE"):
        inst, base = r.get("INSTANCE"), r.get("BASEVALUE")
        if not inst or base is None or r.get("MEMTYPE", "REGISTER").upper() == "MEMORY":
            continue
        if inst not in ranges:
            ranges[inst] = {"base_addr": int(base, 0),
                            "high_addr": int(r.get("HIGHVALUE", base), 0),
                            "master": r.get("MASTERBUSINTERFACE"),
                            "slave": r.get("SLAVEBUSINTERFACE")}
    return ranges


def hwh_base_addr(hwh, ip_name: str = boards.IP_NAME) -> int:
    """The base address of instance ``ip_name``'s registers in a ``.hwh`` (path or text)."""
    ranges = hwh_ranges(hwh)
    if ip_name not in ranges:
        where = "the .hwh" if isinstance(hwh, str) and hwh.lstrip()[:1] == "<" else hwh
        raise ValueError(f"no register range of instance {ip_name!r} in {where}; it has "
                         f"{sorted(ranges) or 'none'}")
    return ranges[ip_name]["base_addr"]


# -- resolving the facts -----------------------------------------------------------------------
@dataclass
class Target:
    """What :func:`connect` uses, and where each fact came from (``sources``)."""

    board: str | None = None
    bitfile: Path | None = None
    report: Path | None = None
    base_addr: int | None = None
    clock_hz: float = 100e6
    ip_name: str = boards.IP_NAME
    #: bytes of the CMA ``pynq.allocate`` draws from (:func:`cma_size`), set by :func:`connect`
    cma_bytes: int = PYNQ_CMA_BYTES
    #: the report's configuration (rows, cols, data_width...), None without a report
    config: dict | None = None
    sources: dict = field(default_factory=dict)

    @property
    def expected(self) -> dict | None:
        """rows, cols and data_width the hardware should have (from the report), or None."""
        if self.config is None:
            return None
        return {k: self.config[k] for k in ("rows", "cols", "data_width")}

    def configuration(self) -> dict | None:
        """rows, cols and data_width: the report's, else the board's default, else None."""
        if self.config is not None:
            return self.expected
        if self.board is not None:
            cfg = boards.config(self.board)
            return {k: cfg[k] for k in ("rows", "cols", "data_width")}
        return None


def _parse_addr(value, what: str) -> int:
    try:
        addr = value if isinstance(value, int) else int(str(value), 0)
    except ValueError:
        raise ValueError(f"{what} must be an address such as 0x43C00000, not {value!r}") \
            from None
    if isinstance(addr, bool) or addr < 0:
        raise ValueError(f"{what} must be a non-negative address, not {value!r}")
    return addr


def _load_report(path: Path) -> dict:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read the build report {path}: {e}") from None
    if not isinstance(report, dict) or not isinstance(report.get("config"), dict):
        raise ValueError(f"{path} is not a build report of build.py (no \"config\")")
    return report


def _find_report(board, bitfile, report):
    """(path, report) or (None, None)."""
    if report is not None:
        path = Path(report)
        if path.is_dir():
            path = path / "report.json"
        if not path.is_file():
            raise FileNotFoundError(f"no build report {path}")
        return path, _load_report(path)
    candidates = []
    if bitfile is not None:
        candidates.append(Path(bitfile).parent / "report.json")
    if board is not None:
        candidates += [_REPO / "build" / board / "report.json",
                       Path.cwd() / "build" / board / "report.json",
                       OVERLAY_DIR / "report.json"]
    for path in candidates:
        if path.is_file():
            data = _load_report(path)
            if board is None or data.get("platform") == board:
                return path, data
    return None, None


def resolve(*, board: str | None = None, bitfile=None, base_addr=None, report=None,
            clock_hz: float | None = None, ip_name: str | None = None) -> Target:
    """Work out the bitfile, report, base address and clock (see the module documentation)
    without touching the hardware."""
    t = Target(ip_name=ip_name or boards.IP_NAME)
    if board is not None:
        boards.board(board)                        # ValueError naming the boards
    report_path, data = _find_report(board, bitfile, report)
    host = {}
    if data is not None:
        platform = data.get("platform")
        if board is not None and platform is not None and platform != board:
            raise ValueError(f"the build report {report_path} is for {platform}, not {board}")
        board = board or platform
        host = data.get("host") or {}
        t.report, t.config, t.sources["config"] = report_path, dict(data["config"]), "report"
    t.board = board
    info = boards.BOARDS.get(board) if board is not None else None

    if bitfile is not None:
        t.bitfile = Path(bitfile)
        if not t.bitfile.is_file():
            raise FileNotFoundError(f"no bitstream {t.bitfile}")
        t.sources["bitfile"] = "argument"
    else:
        names = [host.get("bitfile")] if host.get("bitfile") else []
        if info is not None:
            names.append(info.bitfile)
        dirs = ([report_path.parent] if report_path is not None else []) + [OVERLAY_DIR]
        for d in dirs:
            for name in names:
                if (d / name).is_file():
                    t.bitfile, t.sources["bitfile"] = d / name, f"found in {d}"
                    break
            if t.bitfile is not None:
                break

    hwh_addr = None
    if t.bitfile is not None:
        hwh = t.bitfile.with_suffix(".hwh")
        if hwh.is_file():
            hwh_addr = hwh_base_addr(hwh, t.ip_name)
    if base_addr is not None:
        t.base_addr, t.sources["base_addr"] = _parse_addr(base_addr, "base_addr"), "argument"
    elif host.get("base_addr") is not None:
        t.base_addr = _parse_addr(host["base_addr"], f"{report_path}: host.base_addr")
        t.sources["base_addr"] = "report"
        if hwh_addr is not None and hwh_addr != t.base_addr:
            raise ValueError(f"the build report {report_path} puts the accelerator at "
                             f"{t.base_addr:#x} but {t.bitfile.with_suffix('.hwh')} at "
                             f"{hwh_addr:#x}: are they from the same build?")
    elif hwh_addr is not None:
        t.base_addr, t.sources["base_addr"] = hwh_addr, "hwh"
    elif info is not None:
        t.base_addr, t.sources["base_addr"] = info.base_addr, "board default"

    if clock_hz is not None:
        t.clock_hz, t.sources["clock_hz"] = float(clock_hz), "argument"
    elif host.get("clock_mhz"):
        t.clock_hz, t.sources["clock_hz"] = float(host["clock_mhz"]) * 1e6, "report"
    elif info is not None:
        t.clock_hz, t.sources["clock_hz"] = info.clock_hz, "board default"
    if t.clock_hz <= 0:
        raise ValueError(f"clock_hz must be positive, not {t.clock_hz!r}")
    return t


def cma_size(meminfo=None) -> tuple[int, str]:
    """The bytes of the board's CMA and where the figure came from.

    Parameters
    ----------
    meminfo : path, optional
        Linux's memory report, default :data:`MEMINFO`.

    Returns
    -------
    tuple of (int, str)
        ``CmaTotal`` of the report and its path, or :data:`PYNQ_CMA_BYTES` and "PYNQ's
        kernel default" where the report has no (or a zero) ``CmaTotal``.
    """
    path = Path(MEMINFO if meminfo is None else meminfo)
    try:
        lines = path.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "CmaTotal":
            fields = value.split()
            if fields and fields[0].isdigit() and int(fields[0]) > 0:
                unit = fields[1].lower() if len(fields) > 1 else "b"
                scale = {"kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}.get(unit, 1)
                return int(fields[0]) * scale, str(path)
    return PYNQ_CMA_BYTES, "PYNQ's kernel default"


def _describe(rows, cols, data_width) -> str:
    return f"a {rows}x{cols} array on a {data_width}-bit bus"


def connect(*, board: str | None = None, bitfile=None, ip_name: str | None = None,
            base_addr=None, report=None, clock_hz: float | None = None) -> Driver:
    """A :class:`Driver` for the accelerator on this board (see the module documentation).

    Loads ``bitfile`` (or the one found for ``board``) with ``pynq.Overlay``; the returned
    driver has ``target`` (a :class:`Target`: what was used and where it came from).

    Raises
    ------
    RuntimeError
        No ``pynq`` package, or no accelerator at the address.
    ValueError
        Nothing says where the accelerator is, a report and a ``.hwh`` disagree, or the
        hardware's array or bus is not the report's.
    FileNotFoundError
        A given bitfile or report does not exist.
    """
    t = resolve(board=board, bitfile=bitfile, base_addr=base_addr, report=report,
                clock_hz=clock_hz, ip_name=ip_name)
    try:
        import pynq
    except ImportError:
        raise RuntimeError("the pynq backend needs the 'pynq' package (it runs on the board's "
                           "ARM, with PYNQ's image); use backend='rtl' elsewhere") from None
    overlay = pynq.Overlay(str(t.bitfile)) if t.bitfile is not None else None
    if t.base_addr is None:
        if overlay is None:
            raise ValueError("the pynq backend needs board=, bitfile= (an overlay), report= or "
                             "base_addr=")
        candidates = [ip_name] if ip_name else list(overlay.ip_dict)
        for name in candidates:
            if name not in overlay.ip_dict:
                raise ValueError(f"ip_name {name!r} is not in the overlay; it has "
                                 f"{sorted(overlay.ip_dict)}")
            addr = int(overlay.ip_dict[name]["phys_addr"])
            if pynq.MMIO(addr, regmap.SIZE).read(regmap.offset("ID")) == regmap.MAGIC:
                t.base_addr, t.sources["base_addr"] = addr, f"overlay ip_dict[{name!r}]"
                break
        else:
            raise RuntimeError("no accelerator (ID 'BFP8') found in the overlay")
    drv = Driver(_Regs(pynq.MMIO(t.base_addr, regmap.SIZE), t.clock_hz), _Memory(pynq))
    t.cma_bytes, t.sources["cma_bytes"] = cma_size()
    drv.target = t
    want = t.expected
    if want is not None:
        got = {"rows": drv.info.rows, "cols": drv.info.cols, "data_width": drv.info.data_width}
        if got != want:
            raise ValueError(
                f"the hardware at {t.base_addr:#x} has {_describe(**got)} (its CONFIG "
                f"registers) but the build report {t.report} says {_describe(**want)}: the "
                f"loaded bitstream{' ' + str(t.bitfile) if t.bitfile else ''} is not that "
                "build's (rebuild, or pass the matching report=/bitfile=)")
    return drv
