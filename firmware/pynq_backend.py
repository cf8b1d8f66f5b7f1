"""The ``pynq`` backend: :class:`firmware.driver.Driver` over a board through the ``pynq`` package.

Only this module knows about PYNQ. It maps the accelerator's registers with ``pynq.MMIO`` and
allocates operand buffers with ``pynq.allocate`` (physically contiguous, cache-managed with
``flush``/``invalidate``); everything else — descriptor layout, the register sequence, error
handling — is the driver the ``rtl`` backend uses.

```python
from firmware import Device
dev = Device("pynq", rows=16, cols=16, data_width=64, bitfile="bfp_pynq_z1.bit")
```

Options: ``bitfile`` (an overlay to load; its ``.hwh`` must sit beside it), ``ip_name`` (the
accelerator's instance in the overlay, default: the first IP whose ``ID`` register reads
"BFP8"), ``base_addr`` (use an already-loaded design at this physical address instead),
``clock_hz`` (the accelerator clock, for turning poll intervals into sleeps).
"""

from __future__ import annotations

import time

from . import regmap
from .driver import Driver

__all__ = ["connect"]


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
        self.buf, self.array, self.addr = buf, buf, int(buf.device_address)

    def flush(self):
        self.buf.flush()

    def invalidate(self):
        self.buf.invalidate()


class _Memory:
    def __init__(self, pynq):
        self.pynq, self.live = pynq, []

    def buffer(self, nbytes):
        import numpy as np
        buf = _Buffer(self.pynq.allocate(shape=(nbytes,), dtype=np.uint8))
        self.live.append(buf)
        return buf

    def release(self):
        for buf in self.live:
            buf.buf.freebuffer()
        self.live = []


def connect(*, bitfile: str | None = None, ip_name: str | None = None,
            base_addr: int | None = None, clock_hz: float = 100e6) -> Driver:
    """A :class:`Driver` for the accelerator on this board."""
    try:
        import pynq
    except ImportError:
        raise RuntimeError("the pynq backend needs the 'pynq' package (it runs on the board's "
                           "ARM, with PYNQ's image); use backend='rtl' elsewhere") from None
    if base_addr is None:
        if bitfile is None:
            raise ValueError("the pynq backend needs bitfile= (an overlay) or base_addr=")
        overlay = pynq.Overlay(bitfile)
        candidates = [ip_name] if ip_name else list(overlay.ip_dict)
        for name in candidates:
            if name not in overlay.ip_dict:
                raise ValueError(f"ip_name {name!r} is not in the overlay; it has "
                                 f"{sorted(overlay.ip_dict)}")
            addr = int(overlay.ip_dict[name]["phys_addr"])
            if pynq.MMIO(addr, regmap.SIZE).read(regmap.offset("ID")) == regmap.MAGIC:
                base_addr = addr
                break
        else:
            raise RuntimeError("no accelerator (ID 'BFP8') found in the overlay")
    return Driver(_Regs(pynq.MMIO(base_addr, regmap.SIZE), clock_hz), _Memory(pynq))
