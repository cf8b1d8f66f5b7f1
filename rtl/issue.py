"""Tile commands + exponent vectors -> datapath commands; operand vectors -> the datapath."""

from amaranth import Array, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .checker import descriptor_layout
from .datapath import command_layout
from .fifo import Fifo

__all__ = ["CommandIssue", "DESC_FIELDS", "tile_command_layout", "vector_layout"]


#: The descriptor's fields each tile command carries (:func:`tile_command_layout`), with
#: their shapes in :func:`rtl.checker.descriptor_layout`.
DESC_FIELDS = ("transpose_a", "transpose_b", "raw", "row_vec", "col_vec", "row_exp", "col_exp")


def tile_command_layout(block: int) -> data.StructLayout:
    """One tile GEMM as the walker issues it: C tile ``(i, j)`` of the block, one K chunk.

    The fields are those of :func:`rtl.datapath.command_layout` that change from tile to tile,
    and the descriptor's own (:data:`DESC_FIELDS`: the transposes, ``raw``, the exponents),
    which travel with each command, so that the next descriptor's commands may queue behind
    the last ones of the descriptor before it; the exponent vectors come from the block's.
    """
    slots = max(2, 2 * block)
    desc = descriptor_layout().members
    return data.StructLayout({
        "k": unsigned(16), "a_slot": range(slots), "b_slot": range(slots),
        "load_a": 1, "load_b": 1, "a_extra": range(slots), "b_extra": range(slots),
        "emit": 1, "store": 1, "add": 1, "acc_slot": range(block * block),
        "i": range(block), "j": range(block), **{f: desc[f] for f in DESC_FIELDS}})



def vector_layout(lanes: int, tag_width: int) -> data.StructLayout:
    """A gearbox vector: operand data (tag bit 0 clear) or exponent vector ``tag >> 1``."""
    return data.StructLayout({"data": data.ArrayLayout(signed(8), lanes), "tag": tag_width})


class CommandIssue(wiring.Component):
    """Completes the walker's tile commands and hands the gearboxes' vectors to the datapath.

    Tile commands queue (``max(4, block**2)`` entries) and leave on :attr:`cmd` with their
    descriptor's ``transpose_a``, ``transpose_b``, ``raw`` and exponents (carried by each
    command: commands of two descriptors may be queued): the scalar ``row_exp`` /
    ``col_exp``, or with ``row_vec`` / ``col_vec`` the block's vectors ``rexp[i]`` /
    ``cexp[j]``. Vectors from the gearboxes with tag bit 0 set are exponent
    vectors: ``tag >> 1`` names the register they go to (always taken); the others go to
    :attr:`a_stream` / :attr:`b_stream`. A pulse on :attr:`exp_issued` announces one exponent
    vector load; commands wait until every announced vector is in. :attr:`drained` says that no
    command is queued and no vector awaited: the walker's cue to load the next block's vectors.
    The numpy model is :func:`sim.engine_models.issue`.

    Latency and throughput: a command leaves 2 cycles after it arrives (queue), one a cycle;
    vectors pass combinationally; an exponent vector is usable the cycle after it arrives.

    Parameters
    ----------
    rows, cols : int
        Array shape (lanes of A and B).
    block : int
        C tiles per block side.
    tag_width : int
        Width of the gearbox tags (``1 + log2(block)``, at least 2).

    Members
    -------
    i_cmd : In(stream.Signature(tile_command_layout(block)))
    a_vectors, b_vectors : In(stream.Signature(vector_layout(rows / cols, tag_width)))
    exp_issued : In(1)
    cmd : Out(stream.Signature(rtl.datapath.command_layout(rows, cols, 2 * block, block**2)))
    a_stream, b_stream : Out(stream.Signature(ArrayLayout(signed(8), rows / cols)))
    drained : Out(1)
    """

    def __init__(self, rows: int = 8, cols: int = 8, *, block: int = 4, tag_width: int = 2):
        self.rows, self.cols, self.block, self.tag_width = rows, cols, block, tag_width
        slots = max(2, 2 * block)
        super().__init__({
            "i_cmd": In(stream.Signature(tile_command_layout(block))),
            "a_vectors": In(stream.Signature(vector_layout(rows, tag_width))),
            "b_vectors": In(stream.Signature(vector_layout(cols, tag_width))),
            "exp_issued": In(1),
            "cmd": Out(stream.Signature(command_layout(rows, cols, slots, block * block))),
            "a_stream": Out(stream.Signature(data.ArrayLayout(signed(8), rows))),
            "b_stream": Out(stream.Signature(data.ArrayLayout(signed(8), cols))),
            "drained": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        R, C, BL = self.rows, self.cols, self.block
        # exponent registers: data, written before any command that reads them may leave
        rexp = [Signal(data.ArrayLayout(signed(8), R), name=f"rexp{i}", reset_less=True)
                for i in range(BL)]
        cexp = [Signal(data.ArrayLayout(signed(8), C), name=f"cexp{j}", reset_less=True)
                for j in range(BL)]
        exp_pending = Signal(range(2 * BL + 1))
        exp_written = Signal(range(3))

        for vin, port, regs in ((self.a_vectors, self.a_stream, rexp),
                                (self.b_vectors, self.b_stream, cexp)):
            is_exp = vin.payload.tag[0]
            m.d.comb += [port.payload.eq(vin.payload.data),
                         port.valid.eq(vin.valid & ~is_exp),
                         vin.ready.eq(Mux(is_exp, 1, port.ready))]
            with m.If(vin.valid & is_exp):
                m.d.sync += Array(regs)[vin.payload.tag[1:]].eq(vin.payload.data)
        m.d.comb += exp_written.eq((self.a_vectors.valid & self.a_vectors.payload.tag[0])
                                   + (self.b_vectors.valid & self.b_vectors.payload.tag[0]))
        m.d.sync += exp_pending.eq(exp_pending + self.exp_issued - exp_written)

        layout = tile_command_layout(BL)
        m.submodules.queue = queue = Fifo(width=layout.size, depth=max(4, BL * BL))
        m.d.comb += [queue.w_data.eq(self.i_cmd.payload), queue.w_en.eq(self.i_cmd.valid),
                     self.i_cmd.ready.eq(queue.w_rdy)]
        head = d = data.View(layout, queue.r_data)      # (the command's descriptor fields)
        out = self.cmd.payload
        m.d.comb += [
            self.cmd.valid.eq(queue.r_rdy & (exp_pending == 0)),
            queue.r_en.eq(self.cmd.ready & (exp_pending == 0)),
            self.drained.eq(queue.empty & (exp_pending == 0)),
            out.k.eq(head.k), out.a_slot.eq(head.a_slot), out.b_slot.eq(head.b_slot),
            out.load_a.eq(head.load_a), out.load_b.eq(head.load_b),
            out.a_extra.eq(head.a_extra), out.b_extra.eq(head.b_extra),
            out.transpose_a.eq(d.transpose_a), out.transpose_b.eq(d.transpose_b),
            out.clear.eq(1), out.emit.eq(head.emit), out.store.eq(head.store),
            out.add.eq(head.add), out.acc_slot.eq(head.acc_slot), out.raw.eq(d.raw),
        ]
        rsel = Array(rexp)[head.i]
        csel = Array(cexp)[head.j]
        for r in range(R):
            m.d.comb += out.row_exp[r].eq(Mux(d.row_vec, rsel[r], d.row_exp))
        for c in range(C):
            m.d.comb += out.col_exp[c].eq(Mux(d.col_vec, csel[c], d.col_exp))
        return m
