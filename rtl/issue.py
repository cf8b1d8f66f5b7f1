"""Tile commands + exponent vectors -> datapath commands; operand vectors -> the datapath."""

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
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
    its index in the block; with ``k_blocks`` the top bit names the bank of exponent
    registers it goes to, and with ``cols == 2 * TILE_BLOCK`` too the bit below it marks
    the exponent of a B tile's second tile block of columns.

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
    return (1 + max(1, block.bit_length() - 1) + int(exp_halves(cols, k_blocks))
            + int(bool(k_blocks)))


def tile_command_layout(block: int, k_blocks: bool = False,
                        rows: int | None = None) -> data.StructLayout:
    """One tile GEMM as the walker issues it: C tile ``(i, j)`` of the block, one K chunk.

    The fields are those of :func:`rtl.datapath.command_layout` that change from tile to tile,
    and the descriptor's own (:data:`DESC_FIELDS`: the transposes, ``raw``, the exponents),
    which travel with each command, so that the next descriptor's commands may queue behind
    the last ones of the descriptor before it; the exponent vectors come from the block's.
    With ``k_blocks`` the descriptor's ``tiles`` too (the command is one K block), the
    ``bank`` of exponent registers the command reads (:class:`CommandIssue`), and for an
    array of ``rows`` rows ``read_rows``, the rows of a stored K-block tile read out
    (:func:`rtl.datapath.command_layout`).
    """
    slots = max(2, 2 * block)
    desc = descriptor_layout(k_blocks).members
    return data.StructLayout({
        "k": unsigned(16), "a_slot": range(slots), "b_slot": range(slots),
        "load_a": 1, "load_b": 1, "a_extra": range(slots), "b_extra": range(slots),
        "emit": 1, "store": 1, "add": 1, "acc_slot": range(block * block),
        "i": range(block), "j": range(block), **{f: desc[f] for f in DESC_FIELDS},
        **({"tiles": 1, "bank": 1} if k_blocks else {}),
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
        of the vector tagged ``j`` with the tag's bit below the top set
        (:func:`exp_tag_width`).

        The exponent registers are two banks. An exponent vector goes to the bank its tag's
        top bit names; a command (with its ``bank``) reads that bank's and waits only for
        that bank's vectors; :attr:`exp_issued` has a pulse per bank. :attr:`free` says per
        bank that no command of it is queued and none of its vectors awaited: the walker
        loads one K chunk's exponents into the free bank while the chunk before computes
        from the other.

    Attributes
    ----------
    i_cmd : In(stream.Signature(tile_command_layout(block)))
    a_vectors, b_vectors : In(stream.Signature(vector_layout(rows / cols, tag_width)))
    exp_issued : In(1), or In(2) with ``k_blocks`` (one per bank)
    cmd : Out(stream.Signature(rtl.datapath.command_layout(rows, cols, 2 * block, block**2)))
    a_stream, b_stream : Out(stream.Signature(ArrayLayout(signed(8), rows / cols)))
    drained : Out(1)
    free : Out(2)
        With ``k_blocks``: per bank, no command of it queued and no vector of it awaited.

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
        #: ``TILE_BLOCK`` on take the exponent of a vector whose tag has the bit below the
        #: bank's set.
        self.exp_halves = exp_halves(cols, self.k_blocks)
        if self.k_blocks and tag_width < exp_tag_width(block, cols, True):
            raise ValueError(f"tag_width must be at least {exp_tag_width(block, cols, True)}, "
                             f"not {tag_width}")
        slots = max(2, 2 * block)
        super().__init__({
            "i_cmd": In(stream.Signature(tile_command_layout(block, self.k_blocks, rows))),
            "a_vectors": In(stream.Signature(vector_layout(rows, tag_width))),
            "b_vectors": In(stream.Signature(vector_layout(cols, tag_width))),
            "exp_issued": In(2 if self.k_blocks else 1),
            "cmd": Out(stream.Signature(command_layout(rows, cols, slots, block * block,
                                                       self.k_blocks))),
            "a_stream": Out(stream.Signature(data.ArrayLayout(signed(8), rows))),
            "b_stream": Out(stream.Signature(data.ArrayLayout(signed(8), cols))),
            "drained": Out(1),
            **({"free": Out(2)} if self.k_blocks else {}),
        })

    def elaborate(self, platform):
        m = Module()
        R, C, BL = self.rows, self.cols, self.block
        banks = range(2 if self.k_blocks else 1)
        # exponent registers, per bank: data, written before any command that reads them
        # may leave
        rexp = [[Signal(data.ArrayLayout(signed(8), R), name=f"rexp{i}" + "_b" * b,
                        reset_less=True) for i in range(BL)] for b in banks]
        cexp = [[Signal(data.ArrayLayout(signed(8), C), name=f"cexp{j}" + "_b" * b,
                        reset_less=True) for j in range(BL)] for b in banks]
        # the second exponent of each B tile, for its lanes from TILE_BLOCK on (exp_halves)
        chi = [[Signal(signed(8), name=f"cexp_hi{j}" + "_b" * b, reset_less=True)
                for j in range(BL if self.exp_halves else 0)] for b in banks]
        # exponent vectors announced and not yet written, per bank
        exp_pending = [Signal(range((3 if self.exp_halves else 2) * BL + 1),
                              name=f"exp_pending{b}") for b in banks]
        exp_written = [Signal(range(3), name=f"exp_written{b}") for b in banks]

        # An exponent vector is registered first, with its write enables in copies of their
        # own for each LANES_PER_SELECT lanes, and written to its register the cycle after:
        # no one flag enables every flip-flop of a block of exponents.
        written = [[] for _ in banks]
        for side, vin, port, regs in (("a", self.a_vectors, self.a_stream, rexp),
                                      ("b", self.b_vectors, self.b_stream, cexp)):
            tag = vin.payload.tag
            is_exp = tag[0]
            # (tag: bit 0, the index, [the second tile block's bit], [the bank])
            top = len(tag) - int(self.exp_halves) - int(self.k_blocks)
            index = tag[1:top]
            hi = tag[top] if self.exp_halves else Const(0, 1)
            bank = tag[-1] if self.k_blocks else Const(0, 1)
            take_plain = vin.valid & is_exp & ~hi       # (a vector of the first tile block)
            m.d.comb += [port.payload.eq(vin.payload.data),
                         port.valid.eq(vin.valid & ~is_exp),
                         vin.ready.eq(Mux(is_exp, 1, port.ready))]
            lanes = len(vin.payload.data)
            vec_q = Signal.like(vin.payload.data, name=f"{side}_exp_q", reset_less=True)
            m.d.sync += vec_q.eq(vin.payload.data)
            for b in banks:
                take = Signal(name=f"{side}_exp_take{b}")
                m.d.sync += take.eq(vin.valid & is_exp & (bank == b))
                written[b].append(take)
                for reg, reg_value in enumerate(regs[b]):
                    ens = lane_copies(m, take_plain & (index == reg) & (bank == b), lanes,
                                      LANES_PER_SELECT, primitive=self.primitive,
                                      name=f"{side}_exp_en{reg}_" + "b_" * b)
                    for lane in range(lanes):
                        with m.If(ens[lane]):
                            m.d.sync += reg_value[lane].eq(vec_q[lane])
                    if side == "b" and self.exp_halves:
                        en_hi = Signal(name=f"b_exp_hi_en{reg}" + "_b" * b)
                        m.d.sync += en_hi.eq(vin.valid & is_exp & hi & (index == reg)
                                             & (bank == b))
                        with m.If(en_hi):
                            m.d.sync += chi[b][reg].eq(vec_q[0])
        for b in banks:
            m.d.comb += exp_written[b].eq(written[b][0] + written[b][1])
            m.d.sync += exp_pending[b].eq(exp_pending[b] + self.exp_issued[b]
                                          - exp_written[b])

        layout = tile_command_layout(BL, self.k_blocks, R)
        m.submodules.queue = queue = Fifo(width=layout.size, depth=max(4, BL * BL),
                                          lookahead=True)
        m.d.comb += [queue.w_data.eq(self.i_cmd.payload), queue.w_en.eq(self.i_cmd.valid),
                     self.i_cmd.ready.eq(queue.w_rdy)]
        head = d = data.View(layout, queue.r_data)      # (the command's descriptor fields)
        out = self.cmd.payload
        # the head command's bank: its vectors all in
        head_ready = Signal()
        if self.k_blocks:
            m.d.comb += head_ready.eq(Mux(head.bank, exp_pending[1] == 0, exp_pending[0] == 0))
            # commands queued per bank: a bank is free once none is and none of its vectors
            # is awaited
            queued = [Signal(range(max(4, BL * BL) + 2), name=f"queued{b}") for b in banks]
            for b in banks:
                into = self.i_cmd.valid & self.i_cmd.ready & (self.i_cmd.payload.bank == b)
                out_of = self.cmd.valid & self.cmd.ready & (head.bank == b)
                m.d.sync += queued[b].eq(queued[b] + into - out_of)
                m.d.comb += self.free[b].eq((queued[b] == 0) & (exp_pending[b] == 0))
        else:
            m.d.comb += head_ready.eq(exp_pending[0] == 0)
        m.d.comb += [
            self.cmd.valid.eq(queue.r_rdy & head_ready),
            queue.r_en.eq(self.cmd.ready & head_ready),
            self.drained.eq(queue.empty & (Cat(*exp_pending) == 0)),
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
            ns = len(sel)
            copies = lane_copies(m, Cat(sel, getattr(nxt, vec), *(
                [nxt.tiles, nxt.bank] if self.k_blocks else [])), lanes, LANES_PER_SELECT,
                                 primitive=self.primitive, name=f"head_{name}",
                                 enable=queue.r_load)
            for lane, copy in enumerate(copies):
                c_sel, c_vec = copy[:ns], copy[ns]
                if self.k_blocks:     # (the K block's one exponent, in lane 0)
                    c_tiles, c_bank = copy[ns + 1], copy[ns + 2]
                    chosen = Array(Array(reg[lane] for reg in bank_regs)
                                   for bank_regs in regs)[c_bank][c_sel]
                    if name == "j" and self.exp_halves and lane >= TILE_BLOCK:
                        first = Array(Array(bank_chi) for bank_chi in chi)[c_bank][c_sel]
                    else:
                        first = Array(Array(reg[0] for reg in bank_regs)
                                      for bank_regs in regs)[c_bank][c_sel]
                    m.d.comb += outs[lane].eq(Mux(c_tiles, first,
                                                  Mux(c_vec, chosen, scalar)))
                else:
                    chosen = Array(reg[lane] for reg in regs[0])[c_sel]
                    m.d.comb += outs[lane].eq(Mux(c_vec, chosen, scalar))
        if self.k_blocks:
            m.d.comb += [out.kblock.eq(d.tiles), out.read_rows.eq(head.read_rows)]
        return m
