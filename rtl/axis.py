"""The compute core on its own, with AXI4-Stream ports (e.g. behind Xilinx's AXI DMA)."""

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .datapath import GemmDatapath, command_layout

__all__ = ["AXI4StreamSignature", "StreamCore"]


def _bytes(bits: int) -> int:
    return -(-bits // 8) * 8


class AXI4StreamSignature(wiring.Signature):
    """AXI4-Stream from the transmitter's side: TDATA (a whole number of bytes), TVALID,
    TREADY and, if asked for, TLAST."""

    def __init__(self, data_bits: int, last: bool = False):
        members = {"tdata": Out(_bytes(data_bits)), "tvalid": Out(1), "tready": In(1)}
        if last:
            members["tlast"] = Out(1)
        super().__init__(members)


class StreamCore(wiring.Component):
    """:class:`rtl.datapath.GemmDatapath` behind AXI4-Stream ports.

    * ``s_axis_cmd``: one beat per tile command, TDATA = the bits of
      :func:`rtl.datapath.command_layout` (field order as listed there, LSB first), padded to
      bytes;
    * ``s_axis_a`` / ``s_axis_b``: operand beats, TDATA = ``rows`` / ``cols`` int8 values,
      byte ``i`` = lane ``i`` (the forms of :class:`rtl.buffer.TransposableBuffer`);
    * ``m_axis_c``: C rows, TDATA = ``cols`` 32-bit words (float32 or int32), word ``j`` =
      column ``j``; TLAST on the last row of each tile.

    Parameters and timing are those of :class:`rtl.datapath.GemmDatapath`: the streams are
    wired straight through.
    """

    def __init__(self, rows: int, cols: int, depth: int = 512, **kwargs):
        self.core = GemmDatapath(rows, cols, depth, **kwargs)
        self.rows, self.cols = rows, cols
        cmd_bits = command_layout(rows, cols, self.core.slots, self.core.acc_slots).size
        super().__init__({
            "s_axis_cmd": In(AXI4StreamSignature(cmd_bits)),
            "s_axis_a": In(AXI4StreamSignature(8 * rows)),
            "s_axis_b": In(AXI4StreamSignature(8 * cols)),
            "m_axis_c": Out(AXI4StreamSignature(32 * cols, last=True)),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        for axis, port in ((self.s_axis_cmd, core.cmd), (self.s_axis_a, core.a_stream),
                           (self.s_axis_b, core.b_stream)):
            m.d.comb += [port.payload.eq(axis.tdata), port.valid.eq(axis.tvalid),
                         axis.tready.eq(port.ready)]
        out = core.o_stream
        m.d.comb += [self.m_axis_c.tdata.eq(out.payload.data), self.m_axis_c.tlast.eq(
            out.payload.last), self.m_axis_c.tvalid.eq(out.valid),
            out.ready.eq(self.m_axis_c.tready), self.error.eq(core.error)]
        return m
