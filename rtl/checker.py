"""The GEMM descriptor and its checks: dimensions, alignment, strides, the address window."""

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.regmap import ErrorCode

__all__ = ["DescriptorChecker", "descriptor_layout", "verdict_layout"]


def descriptor_layout() -> data.StructLayout:
    """One GEMM as the host describes it (the ``DESC_*`` registers)."""
    return data.StructLayout({
        "m": unsigned(32), "n": unsigned(32), "k": unsigned(32),
        "transpose_a": 1, "transpose_b": 1, "raw": 1, "row_vec": 1, "col_vec": 1,
        "row_exp": signed(8), "col_exp": signed(8),
        "a_addr": unsigned(64), "a_stride": unsigned(32),
        "b_addr": unsigned(64), "b_stride": unsigned(32),
        "c_addr": unsigned(64), "c_stride": unsigned(32),
        "row_exp_addr": unsigned(64), "col_exp_addr": unsigned(64),
    })


def verdict_layout() -> data.StructLayout:
    """Payload of :attr:`DescriptorChecker.o_stream`: 0, or the first failing error code."""
    return data.StructLayout({"code": unsigned(8)})


class DescriptorChecker(wiring.Component):
    """Checks a descriptor before anything touches memory; one verdict per descriptor.

    In order, the first failing check decides the :class:`firmware.regmap.ErrorCode`:
    ``ZERO_DIMENSION`` (M, N or K is 0), ``DIMENSION_TOO_LARGE`` (M or N > 65535),
    ``K_TOO_LARGE`` (K > 65535), then, over the five regions (A, B, C, and the row / column
    exponent vectors when used): ``MISALIGNED`` (a base or stride not a multiple of the bus
    width), ``BAD_STRIDE`` (rows of a region overlap), ``OUT_OF_WINDOW`` (a region's last byte,
    rounded up to a bus word, beyond ``window_limit`` or ``2**addr_width``, or its base below
    ``window_base``). One 32 x 32 multiplier, shared by the regions, computes each region's
    last row offset. The numpy model is :func:`sim.engine_models.check`.

    The descriptor on :attr:`i_stream` stays there (not ready) while it is checked; it is
    taken in the cycle its verdict is taken from :attr:`o_stream`.

    Latency and throughput: the verdict is valid 1 cycle after the descriptor for a bad
    dimension, else 11 cycles after it (a select and a check cycle per region); one descriptor
    at a time.

    Parameters
    ----------
    data_width, addr_width : int
        AXI bus (alignment unit) and address width (the end of the address space).

    Members
    -------
    i_stream : In(stream.Signature(descriptor_layout()))
    window_base, window_limit : In(64)
        ``[window_base, window_limit)``: the addresses a descriptor may touch.
    o_stream : Out(stream.Signature(verdict_layout()))
    """

    def __init__(self, data_width: int = 128, addr_width: int = 32):
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        if addr_width not in (32, 40, 64):
            raise ValueError(f"addr_width must be 32, 40 or 64, not {addr_width!r}")
        self.data_width, self.addr_width = data_width, addr_width
        super().__init__({
            "i_stream": In(stream.Signature(descriptor_layout())),
            "window_base": In(64),
            "window_limit": In(64),
            "o_stream": Out(stream.Signature(verdict_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        bpw = self.data_width // 8
        wlog = bpw.bit_length() - 1
        d = self.i_stream.payload

        region = Signal(range(6))
        dims_code = Signal(8)
        bad_align = Signal()
        bad_stride = Signal()
        bad_window = Signal()
        rg_base = Signal(64)
        rg_rows = Signal(33)
        rg_stride = Signal(32)
        rg_bytes = Signal(35)
        rg_on = Signal()
        mul_a = Signal(32)
        mul_b = Signal(32)
        product = Signal(64)             # (rows - 1) * stride of the region selected last cycle
        m.d.sync += product.eq(mul_a * mul_b)
        regions = [   # base, stored rows, stride, bytes a row, used
            (d.a_addr, Mux(d.transpose_a, d.k, d.m), d.a_stride, Mux(d.transpose_a, d.m, d.k),
             1),
            (d.b_addr, Mux(d.transpose_b, d.n, d.k), d.b_stride, Mux(d.transpose_b, d.k, d.n),
             1),
            (d.c_addr, d.m, d.c_stride, d.n << 2, 1),
            (d.row_exp_addr, 1, 0, d.m, d.row_vec),
            (d.col_exp_addr, 1, 0, d.n, d.col_vec),
        ]
        end = Signal(67)
        m.d.comb += end.eq(rg_base + product + (((rg_bytes + bpw - 1) >> wlog) << wlog))

        with m.FSM(name="check"):
            with m.State("DIMS"):
                m.d.sync += [bad_align.eq(0), bad_stride.eq(0), bad_window.eq(0),
                             region.eq(0), dims_code.eq(0)]
                with m.If(self.i_stream.valid):
                    m.next = "VERDICT"
                    with m.If((d.m == 0) | (d.n == 0) | (d.k == 0)):
                        m.d.sync += dims_code.eq(ErrorCode.ZERO_DIMENSION)
                    with m.Elif((d.m > 65535) | (d.n > 65535)):
                        m.d.sync += dims_code.eq(ErrorCode.DIMENSION_TOO_LARGE)
                    with m.Elif(d.k > 65535):
                        m.d.sync += dims_code.eq(ErrorCode.K_TOO_LARGE)
                    with m.Else():
                        m.next = "REGION"
            with m.State("REGION"):        # select a region; its product arrives next cycle
                with m.Switch(region):
                    for idx, (base, rows, stride, nbytes, on) in enumerate(regions):
                        with m.Case(idx):
                            m.d.sync += [rg_base.eq(base), rg_rows.eq(rows),
                                         rg_stride.eq(stride), rg_bytes.eq(nbytes),
                                         rg_on.eq(on)]
                            m.d.comb += [mul_a.eq(rows - 1), mul_b.eq(stride)]
                m.next = "CHECK"
            with m.State("CHECK"):
                with m.If(rg_on):
                    with m.If((rg_base[:wlog] != 0) | (rg_stride[:wlog] != 0)):
                        m.d.sync += bad_align.eq(1)
                    with m.If((rg_rows > 1) & (rg_stride < rg_bytes)):
                        m.d.sync += bad_stride.eq(1)
                    with m.If((rg_base < self.window_base) | (end > self.window_limit)
                              | (end > (1 << self.addr_width))):
                        m.d.sync += bad_window.eq(1)
                m.d.sync += region.eq(region + 1)
                m.next = "REGION"
                with m.If(region == len(regions) - 1):
                    m.next = "VERDICT"
            with m.State("VERDICT"):
                code = self.o_stream.payload.code
                with m.If(dims_code != 0):
                    m.d.comb += code.eq(dims_code)
                with m.Elif(bad_align):
                    m.d.comb += code.eq(ErrorCode.MISALIGNED)
                with m.Elif(bad_stride):
                    m.d.comb += code.eq(ErrorCode.BAD_STRIDE)
                with m.Elif(bad_window):
                    m.d.comb += code.eq(ErrorCode.OUT_OF_WINDOW)
                m.d.comb += [self.o_stream.valid.eq(1),
                             self.i_stream.ready.eq(self.o_stream.ready)]
                with m.If(self.o_stream.ready):
                    m.next = "DIMS"
        return m
