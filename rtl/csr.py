"""AXI4-Lite register block generated from :data:`firmware.spec.regmap.REGISTERS`."""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from firmware.spec import regmap

__all__ = ["AXI4LiteSignature", "RegisterBlock", "RESP_OKAY", "RESP_SLVERR"]

RESP_OKAY = 0b00
RESP_SLVERR = 0b10


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite, from the manager's side (a subordinate uses it flipped)."""

    def __init__(self, addr_width: int, data_width: int = 32):
        if data_width not in (32, 64):
            raise ValueError(f"data_width must be 32 or 64, not {data_width!r}")
        self.addr_width, self.data_width = addr_width, data_width
        super().__init__({
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1),
            "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })


def _port(name: str) -> str:
    return name.lower()


def _latched_pair(reg) -> str | None:
    """For a read-only ``X_LO`` with a read-only ``X_HI`` (reading LO latches HI): ``X_HI``."""
    if reg.access != "ro" or not reg.name.endswith("_LO"):
        return None
    try:
        hi = regmap.by_name(reg.name[:-3] + "_HI")
    except KeyError:
        return None
    return hi.name if hi.access == "ro" else None


class RegisterBlock(wiring.Component):
    """The accelerator's control registers behind an AXI4-Lite subordinate port.

    One port per register, named after it in lower case: ``ro`` registers are inputs (the
    hardware's value); ``rw`` registers are outputs (the host's value, reset to 0, byte
    strobes honoured; the descriptor's, ``DESC_*``, are data the host writes whole before
    each ``ENQUEUE`` and have no reset: 0 at power-up, kept through a reset); ``w1p``
    registers are outputs that pulse for one cycle with the bits written as 1; ``w1c``
    registers take a ``<name>_set`` input whose 1 bits set them and are outputs of their
    current value. For every kind, bytes whose write strobe is low are not
    written (in a ``w1p`` or ``w1c`` register they count as 0 bits). Reading ``X_LO`` of a
    read-only 64-bit pair latches ``X_HI``, so the host reads a consistent 64-bit counter.

    Unmapped addresses and writes to read-only registers answer SLVERR. One transaction of
    each direction is in flight at a time.

    Attributes
    ----------
    bus : In(AXI4LiteSignature(addr_width))
    <register> : In(32) / Out(32)
    <register>_set : In(32)  (w1c only)

    Latency
    -------
    A write's response is valid :data:`WRITE_LATENCY` cycles after its address and data are
    taken (the write is registered, then applied); a read's data is valid
    :data:`READ_LATENCY` cycles after its address is taken (the address, then the register in
    its group of 16, then the group are registered).

    Throughput
    ----------
    One read and one write transaction in flight at a time.
    """

    #: ``rw`` registers whose name starts with this are data: no reset.
    DATA_PREFIX = "DESC_"

    def __init__(self, addr_width: int = 12):
        if not isinstance(addr_width, int) or (1 << addr_width) < regmap.SIZE:
            raise ValueError(f"addr_width must cover {regmap.SIZE:#x} bytes, not {addr_width!r}")
        self.addr_width = addr_width
        members = {"bus": In(AXI4LiteSignature(addr_width))}
        for reg in regmap.REGISTERS:
            name = _port(reg.name)
            if reg.access == "ro":
                members[name] = In(32)
            else:
                members[name] = Out(32)
            if reg.access == "w1c":
                members[f"{name}_set"] = In(32)
        super().__init__(members)

    #: Cycles from a read's address handshake to RVALID.
    READ_LATENCY = 3
    #: Cycles from a write's address and data handshake to BVALID (and the write's effect).
    WRITE_LATENCY = 2

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        # ---- writes -----------------------------------------------------------------------
        # The descriptor registers are held in reset-less storage (no reset fan-out for data).
        store = {}
        for reg in regmap.REGISTERS:
            if reg.access == "rw" and reg.name.startswith(self.DATA_PREFIX):
                store[reg.name] = Signal(32, name=f"{_port(reg.name)}_q", reset_less=True)
                m.d.comb += getattr(self, _port(reg.name)).eq(store[reg.name])
        for reg in regmap.REGISTERS:
            port = getattr(self, _port(reg.name))
            if reg.access == "w1p":
                m.d.sync += port.eq(0)
            if reg.access == "w1c":
                m.d.sync += port.eq(port | getattr(self, f"{_port(reg.name)}_set"))

        # A write is registered at its handshake (``wpend``), its address decoded on the way,
        # and applied the next cycle.
        wdata = Signal(32, reset_less=True)
        wstrb = Signal(4, reset_less=True)
        wpend = Signal()
        # The bits the host writes: bytes whose strobe is low count as 0 bits, so a w1p or
        # w1c register is only pulsed or cleared in the bytes actually written.
        wbits = Signal(32)
        m.d.comb += wbits.eq(wdata & Cat(wstrb[i].replicate(8) for i in range(4)))
        take_write = Signal()
        m.d.comb += take_write.eq(bus.awvalid & bus.wvalid & ~bus.bvalid & ~wpend)
        m.d.comb += [bus.awready.eq(take_write), bus.wready.eq(take_write)]
        m.d.sync += wpend.eq(take_write)
        # (one select bit per writable register, so that applying the write is a gate per
        # bit; the response is OKAY when one is set)
        writable = [reg for reg in regmap.REGISTERS if reg.access != "ro"]
        wsel = Signal(len(writable), reset_less=True)
        with m.If(take_write):
            hits = Cat(bus.awaddr[2:] == reg.offset >> 2 for reg in writable)
            m.d.sync += [wdata.eq(bus.wdata), wstrb.eq(bus.wstrb), wsel.eq(hits)]
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        with m.If(wpend):
            m.d.sync += [bus.bvalid.eq(1), bus.bresp.eq(Mux(wsel.any(), RESP_OKAY, RESP_SLVERR))]
            for i, reg in enumerate(writable):
                port = store.get(reg.name, getattr(self, _port(reg.name)))
                with m.If(wsel[i]):
                    if reg.access == "rw":
                        for byte in range(4):
                            with m.If(wstrb[byte]):
                                m.d.sync += port[8 * byte:8 * byte + 8].eq(
                                    wdata[8 * byte:8 * byte + 8])
                    elif reg.access == "w1p":
                        m.d.sync += port.eq(wbits)
                    else:  # w1c: a set in this cycle wins over the clear
                        set_ = getattr(self, f"{_port(reg.name)}_set")
                        m.d.sync += port.eq((port & ~wbits) | set_)

        # ---- reads ------------------------------------------------------------------------
        # Three registered steps, so that no path from the address to the data is more than
        # a 16:1 multiplexer deep: the address at its handshake (``rpend``); then, in each
        # group of 16 registers, the one addressed (``rgroup``); then the group (``rvalid``).
        raddr = Signal(len(bus.araddr) - 2, reset_less=True)
        rpend = Signal()
        rgroup = Signal()
        m.d.comb += bus.arready.eq(~bus.rvalid & ~rpend & ~rgroup)
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [raddr.eq(bus.araddr[2:]), rpend.eq(1)]
        with m.Else():
            m.d.sync += rpend.eq(0)
        m.d.sync += rgroup.eq(rpend)
        with m.If(bus.rvalid & bus.rready):
            m.d.sync += bus.rvalid.eq(0)
        # Reading X_LO of a read-only pair copies X_HI into a register that X_HI then reads.
        latched = {}              # LO name -> (HI name, latch register)
        for reg in regmap.REGISTERS:
            hi = _latched_pair(reg)
            if hi is not None:
                latched[reg.name] = (hi, Signal(32, name=f"{_port(hi)}_latched",
                                                reset_less=True))     # read after LO
        latch_of_hi = {hi: latch for hi, latch in latched.values()}
        GROUP = 16
        n_groups = max(reg.offset >> 2 for reg in regmap.REGISTERS) // GROUP + 1
        g_data = [Signal(32, name=f"rgroup{g}_data", reset_less=True) for g in range(n_groups)]
        g_ok = [Signal(name=f"rgroup{g}_ok", reset_less=True) for g in range(n_groups)]
        g_addr = Signal(len(raddr), reset_less=True)       # unmapped groups: SLVERR
        with m.If(rpend):
            m.d.sync += [g_addr.eq(raddr // GROUP)]
            m.d.sync += [x.eq(0) for x in g_data + g_ok]
            for g in range(n_groups):
                with m.Switch(raddr % GROUP):
                    for reg in regmap.REGISTERS:
                        if (reg.offset >> 2) // GROUP != g:
                            continue
                        with m.Case((reg.offset >> 2) % GROUP):
                            m.d.sync += g_ok[g].eq(1)
                            if reg.access != "w1p":
                                port = getattr(self, _port(reg.name))
                                m.d.sync += g_data[g].eq(latch_of_hi.get(reg.name, port))
            with m.Switch(raddr):
                for reg in regmap.REGISTERS:
                    if reg.name in latched:
                        with m.Case(reg.offset >> 2):
                            hi, latch = latched[reg.name]
                            m.d.sync += latch.eq(getattr(self, _port(hi)))
        with m.If(rgroup):
            m.d.sync += [bus.rvalid.eq(1), bus.rdata.eq(0), bus.rresp.eq(RESP_SLVERR)]
            with m.Switch(g_addr):
                for g in range(n_groups):
                    with m.Case(g):
                        m.d.sync += [bus.rdata.eq(g_data[g]),
                                     bus.rresp.eq(Mux(g_ok[g], RESP_OKAY, RESP_SLVERR))]
        return m
