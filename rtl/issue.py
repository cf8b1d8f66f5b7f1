"""Tile commands + exponent vectors -> datapath commands; operand vectors -> the datapath."""

from amaranth import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.spec.regmap import TILE_BLOCK

from .checker import descriptor_layout
from .datapath import command_layout
from .fifo import Fifo
from .xilinx import lane_copies

__all__ = ["CommandIssue", "DESC_FIELDS", "LANES_PER_SELECT", "exp_halves", "exp_tag_width",
           "tile_command_layout", "vector_layout"]

#: Lanes of exponents chosen by one copy of the head command's ``i`` / ``j`` (and of its
#: ``row_vec`` / ``col_vec``), and written by one copy of a register's write enable: a copy's two
#: low bits each select in ``8 * 8 * 2 = 128`` LUT6s (eight lanes of 8-bit exponents out of
#: block-many registers), whatever the number of lanes: one copy for every lane would drive
#: ``16 * lanes`` LUTs.
LANES_PER_SELECT = 8


#: The descriptor's fields each tile command carries (:func:`tile_command_layout`), with
#: their shapes in :func:`rtl.checker.descriptor_layout`.
DESC_FIELDS = ("transpose_a", "transpose_b", "raw", "row_vec", "col_vec", "row_exp", "col_exp")


def exp_halves(cols: int, k_blocks: bool) -> bool:
    """Whether an engine's B tiles span two tile blocks of columns in the K-block mode
    (``cols == 2 * TILE_BLOCK``), each taking a second exponent for its lanes from
    ``TILE_BLOCK`` on."""
    return bool(k_blocks) and cols == 2 * TILE_BLOCK


def exp_tag_width(block: int, cols: int, k_blocks: bool = False) -> int:
    """Bits of a load job's tag (:func:`rtl.loader.load_job_layout`) in an engine of
    ``block`` tiles a side: bit 0 marks an exponent vector, the next ``max(1, log2(block))``
    its index in the block; with ``k_blocks`` and ``cols == 2 * TILE_BLOCK`` one more, the
    top bit, marks the exponent of a B tile's second tile block of columns.

    Parameters
    ----------
    block : int
        Tiles a side of the walker's blocks.
    cols : int
        The array's columns.
    k_blocks : bool
        Whether the engine runs the K-block mode.

    Returns
    -------
    int
    """
    return 1 + max(1, block.bit_length() - 1) + int(exp_halves(cols, k_blocks))


def tile_command_layout(block: int, k_blocks: bool = False,
                        rows: int | None = None) -> data.StructLayout:
    """One tile GEMM as the walker issues it: C tile ``(i, j)`` of the block, one K chunk.

    The fields are those of :func:`rtl.datapath.command_layout` that change from tile to tile,
    and the descriptor's own (:data:`DESC_FIELDS`: the transposes, ``raw``, the exponents),
    which travel with each command, so that the next descriptor's commands may queue behind
    the last ones of the descriptor before it; the exponent vectors come from the block's.
    With ``k_blocks`` the descriptor's ``tiles`` too (the command is one K block), and for
    an array of ``rows`` rows ``read_rows``, the rows of a stored K-block tile read out
    (:func:`rtl.datapath.command_layout`).
    """
    slots = max(2, 2 * block)
    desc = descriptor_layout(k_blocks).members
    return data.StructLayout({
        "k": unsigned(16), "a_slot": range(slots), "b_slot": range(slots),
        "load_a": 1, "load_b": 1, "a_extra": range(slots), "b_extra": range(slots),
        "emit": 1, "store": 1, "add": 1, "acc_slot": range(block * block),
        "i": range(block), "j": range(block), **{f: desc[f] for f in DESC_FIELDS},
        **({"tiles": 1} if k_blocks else {}),
        **({"read_rows": range(rows + 1)} if k_blocks and rows else {})})



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
    The numpy model is :func:`sim.models.engine.issue`.

    Parameters
    ----------
    rows, cols : int
        Array shape (lanes of A and B).
    block : int
        C tiles per block side.
    tag_width : int
        Width of the gearbox tags (``1 + log2(block)``, at least 2; at least
        :func:`exp_tag_width`).
    primitive : bool
        Build the copies of the head command's ``i`` / ``j`` / ``row_vec`` / ``col_vec`` and
        of the exponent registers' write enables (one per :data:`LANES_PER_SELECT` lanes) as
        ``FDRE`` instances, which synthesis does not merge back into one
        (:func:`rtl.xilinx.register_copies`).
    k_blocks : bool
        Tile commands with ``tiles`` (one K block each) leave with ``kblock`` set and every
        lane's exponent lane 0 of the vector ``rexp[i]`` / ``cexp[j]`` (the walker loads
        the tile's one grid exponent there). With ``cols == 2 * TILE_BLOCK`` a B tile's
        lanes from ``TILE_BLOCK`` on lie in the next tile block of columns, and take lane 0
        of the vector tagged ``j`` with the tag's top bit set (:func:`exp_tag_width`).

    Attributes
    ----------
    i_cmd : In(stream.Signature(tile_command_layout(block)))
    a_vectors, b_vectors : In(stream.Signature(vector_layout(rows / cols, tag_width)))
    exp_issued : In(1)
    cmd : Out(stream.Signature(rtl.datapath.command_layout(rows, cols, 2 * block, block**2)))
    a_stream, b_stream : Out(stream.Signature(ArrayLayout(signed(8), rows / cols)))
    drained : Out(1)

    Latency
    -------
    A command leaves 2 cycles after it arrives (queue); vectors pass combinationally; an
    exponent vector is usable two cycles after it arrives (registered, then written).

    Throughput
    ----------
    One command a cycle.
    """

    def __init__(self, rows: int = 8, cols: int = 8, *, block: int = 4, tag_width: int = 2,
                 primitive: bool = False, k_blocks: bool = False):
        self.rows, self.cols, self.block, self.tag_width = rows, cols, block, tag_width
        self.primitive = bool(primitive)
        self.k_blocks = bool(k_blocks)
        #: A B tile's columns span two tile blocks (``cols == 2 * TILE_BLOCK``): lanes from
        #: ``TILE_BLOCK`` on take the exponent of a vector whose tag has its top bit set.
        self.exp_halves = exp_halves(cols, self.k_blocks)
        if self.exp_halves and tag_width < exp_tag_width(block, cols, True):
            raise ValueError(f"tag_width must be at least {exp_tag_width(block, cols, True)}, "
                             f"not {tag_width}")
        slots = max(2, 2 * block)
        super().__init__({
            "i_cmd": In(stream.Signature(tile_command_layout(block, self.k_blocks, rows))),
            "a_vectors": In(stream.Signature(vector_layout(rows, tag_width))),
            "b_vectors": In(stream.Signature(vector_layout(cols, tag_width))),
            "exp_issued": In(1),
            "cmd": Out(stream.Signature(command_layout(rows, cols, slots, block * block,
                                                       self.k_blocks))),
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
        # the second exponent of each B tile, for its lanes from TILE_BLOCK on (exp_halves)
        chi = [Signal(signed(8), name=f"cexp_hi{j}", reset_less=True)
               for j in range(BL if self.exp_halves else 0)]
        exp_pending = Signal(range((3 if self.exp_halves else 2) * BL + 1))
        exp_written = Signal(range(3))          # (registered: counted as the registers take them)

        # An exponent vector is registered first, with its write enables in copies of their
        # own for each LANES_PER_SELECT lanes, and written to its register the cycle after:
        # no one flag enables every flip-flop of a block of exponents.
        written = []
        for side, vin, port, regs in (("a", self.a_vectors, self.a_stream, rexp),
                                      ("b", self.b_vectors, self.b_stream, cexp)):
            is_exp = vin.payload.tag[0]
            index = vin.payload.tag[1:-1] if self.exp_halves else vin.payload.tag[1:]
            take_plain = vin.valid & is_exp      # (a vector of the first tile block)
            if self.exp_halves:
                take_plain = take_plain & ~vin.payload.tag[-1]
            m.d.comb += [port.payload.eq(vin.payload.data),
                         port.valid.eq(vin.valid & ~is_exp),
                         vin.ready.eq(Mux(is_exp, 1, port.ready))]
            lanes = len(vin.payload.data)
            vec_q = Signal.like(vin.payload.data, name=f"{side}_exp_q", reset_less=True)
            m.d.sync += vec_q.eq(vin.payload.data)
            take = Signal(name=f"{side}_exp_take")
            m.d.sync += take.eq(vin.valid & is_exp)
            written.append(take)
            for reg, reg_value in enumerate(regs):
                ens = lane_copies(m, take_plain & (index == reg), lanes,
                                  LANES_PER_SELECT, primitive=self.primitive,
                                  name=f"{side}_exp_en{reg}_")
                for lane in range(lanes):
                    with m.If(ens[lane]):
                        m.d.sync += reg_value[lane].eq(vec_q[lane])
                if side == "b" and self.exp_halves:
                    en_hi = Signal(name=f"b_exp_hi_en{reg}")
                    m.d.sync += en_hi.eq(vin.valid & is_exp & vin.payload.tag[-1]
                                         & (index == reg))
                    with m.If(en_hi):
                        m.d.sync += chi[reg].eq(vec_q[0])
        m.d.comb += exp_written.eq(written[0] + written[1])
        m.d.sync += exp_pending.eq(exp_pending + self.exp_issued - exp_written)

        layout = tile_command_layout(BL, self.k_blocks, R)
        m.submodules.queue = queue = Fifo(width=layout.size, depth=max(4, BL * BL),
                                          lookahead=True)
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
        # head.i / head.j and row_vec / col_vec again, in registers of their own for each
        # LANES_PER_SELECT lanes
        nxt = data.View(layout, queue.r_next)
        for name, vec, lanes, regs, scalar, outs in (
                ("i", "row_vec", R, rexp, d.row_exp, out.row_exp),
                ("j", "col_vec", C, cexp, d.col_exp, out.col_exp)):
            sel = getattr(nxt, name)
            copies = lane_copies(m, Cat(sel, getattr(nxt, vec), *(
                [nxt.tiles] if self.k_blocks else [])), lanes, LANES_PER_SELECT,
                                 primitive=self.primitive, name=f"head_{name}",
                                 enable=queue.r_load)
            for lane, copy in enumerate(copies):
                chosen = Array(reg[lane] for reg in regs)[copy[:len(sel)]]
                if self.k_blocks:     # (the K block's one exponent, in lane 0)
                    if name == "j" and self.exp_halves and lane >= TILE_BLOCK:
                        first = Array(chi)[copy[:len(sel)]]
                    else:
                        first = Array(reg[0] for reg in regs)[copy[:len(sel)]]
                    m.d.comb += outs[lane].eq(Mux(copy[-1], first,
                                                  Mux(copy[-2], chosen, scalar)))
                else:
                    m.d.comb += outs[lane].eq(Mux(copy[-1], chosen, scalar))
        if self.k_blocks:
            m.d.comb += [out.kblock.eq(d.tiles), out.read_rows.eq(head.read_rows)]
        return m
