"""C tiles -> BFP8 tile blocks in memory: int8 mantissa rows and an exponent per tile block."""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.spec.regmap import TILE_BLOCK

from .dma import dma_command_layout, dma_write_layout
from .epilogue import ReluMask, TileQuantizer
from .fifo import Fifo
from .fp32 import Fp32Add, Fp32Mul
from .prng import RandomLanes
from .rescale import rescale_output_layout
from .sideload import side_job_layout
from .writeback import job_grid_row, job_row, write_job_layout

__all__ = ["BfpWriteBack", "bfp_desc_layout"]


def bfp_desc_layout(addr_width: int = 64, pool: bool = False) -> data.StructLayout:
    """What :class:`BfpWriteBack` reads of the running descriptor (held while its tiles
    pass); with ``pool``, a max pool's (``pool``, the argmax's address and stride) or its
    backward pass's (``unpool``: C written at the pool's input, ``c_n`` columns)."""
    return data.StructLayout({
        **({"pool": 1, "unpool": 1, "c_n": unsigned(32), "argmax_addr": unsigned(addr_width),
            "argmax_stride": unsigned(32)} if pool else {}),
        "m": unsigned(32), "n": unsigned(32),
        "c_addr": unsigned(addr_width), "c_stride": unsigned(32),
        "c_exp_addr": unsigned(addr_width), "stochastic": 1, "seed": unsigned(64),
        "relu": 1, "mask_addr": unsigned(addr_width), "mask_stride": unsigned(32),
        "bias": 2, "mask_in": 1, "sgd": 1, "lr": unsigned(32), "decay": unsigned(32),
        "f32": 1,       # C is float32 (through the epilogue), not BFP8
    })


def _unit_layout(addr_width: int) -> data.StructLayout:
    """A unit (a block of C tiles, one tile block of the format) as the writer needs it."""
    T = TILE_BLOCK
    return data.StructLayout({
        "base": unsigned(addr_width),      # C's address of the unit's element (0, 0)
        "exp_addr": unsigned(addr_width),  # the address of its exponent
        "rows_in": range(T + 1),           # its rows inside the matrix
        "cols_in": range(T + 1),           # its columns inside the matrix
    })


def _mask_row_layout(cols: int, byte_bits: int = 14) -> data.StructLayout:
    """A C tile row's ReLU mask bits as the tagger queues them: matrix row ``m``, byte
    ``byte`` of the mask row (``n0 / 8``), ``bits`` (0 beyond N) and a strobe a byte."""
    return data.StructLayout({"m": unsigned(17), "byte": unsigned(byte_bits), "bits": cols,
                              "strb": cols // 8})


def _argmax_row_layout(cols: int) -> data.StructLayout:
    """A pooled tile row's argmax as the pool stage queues it: matrix row ``m``, its first
    column ``col``, a byte a lane and a strobe a lane (0 beyond N)."""
    return data.StructLayout({"m": unsigned(17), "col": unsigned(17),
                              "bytes": data.ArrayLayout(8, cols), "strb": cols})


def _row_tag_layout(cols: int, segs: int, pool: bool = False,
                    byte_bits: int = 14) -> data.StructLayout:
    """What travels beside a row through the bias adder: its place in the unit (``row``,
    ``seg``), its mask row's (``m``, ``byte``; ``mask_en``: the row lies inside the
    matrix), the lanes inside the matrix and the stored mask bits (``mask_in``, ones where
    none is used); with ``pool``, its pool phase (``ph``, first ``pf``, last ``pl``) and its
    tile's first column ``col`` (the argmax's)."""
    return data.StructLayout({"row": range(TILE_BLOCK), "seg": range(max(2, segs)),
                              "m": unsigned(17), "byte": unsigned(byte_bits), "lanes": cols,
                              "mask_en": 1, "mask_in": cols,
                              **({"ph": 8, "pf": 1, "pl": 1, "col": 17} if pool else {})})


def float32_greater(a, b):
    """IEEE ``a > b`` of two float32 bit patterns: false where either is a NaN or both
    are zeros (``-0 == +0``). Combinational."""
    def nan(x):
        return (x[23:31] == 0xFF) & (x[:23] != 0)
    ma, mb = a[:31], b[:31]
    zeros = (ma == 0) & (mb == 0)
    gt = Mux(a[31] != b[31], ~a[31] & ~zeros, Mux(a[31], ma < mb, ma > mb))
    return gt & ~nan(a) & ~nan(b)


def _pick(lanes, part, lane: int, width: int, parts: int):
    """Lane ``lane`` of part ``part`` of ``lanes`` cut into ``parts`` parts of ``width``."""
    value = lanes[lane]
    for j in range(1, parts):
        value = Mux(part == j, lanes[j * width + lane], value)
    return value


def bfp8_lead(q):
    """The first half of :func:`bfp8_to_float32`: int8 ``q``'s sign, magnitude (0 to 128)
    and the place of the magnitude's leading one (0 for a magnitude of 0 or 1)."""
    sign = q[7]
    mag = Mux(sign, -q, q)[:8]                  # 1 .. 128 (0: zero)
    p = Const(0, 3)                             # the leading one's place
    for i in range(1, 8):
        p = Mux(mag[i], i, p)
    return sign, mag, p


def bfp8_assemble(sign, mag, p, e):
    """The second half of :func:`bfp8_to_float32`: the float32 bit pattern of ``q * 2**e``
    from :func:`bfp8_lead`'s parts of ``q`` and the int8 exponent ``e``."""
    big = e.as_signed() + p                     # the value's binary exponent
    norm = (mag << (~p)[:3])[:8]                # the leading one at bit 7 (7 - p)
    field = (big + 127)[:8]
    normal = Cat(Const(0, 16), norm[:7], field, sign)
    tiny = Cat((Cat(Const(0, 22), mag, Const(0, 1)) >> ~e[0])[:31], sign)    # e is -128 or -127
    inf = Cat(Const(0x7F800000, 31), sign)
    return Mux(mag == 0, 0, Mux(big >= 128, inf, Mux(big >= -126, normal, tiny)))


def bfp8_to_float32(q, e):
    """The float32 bit pattern of ``q * 2**e`` (int8 ``q`` and ``e``), as
    :func:`sim.models.bfp.dequantize_tiles` computes it: exact, +-inf from ``2**128`` up
    (no quantised block reaches it), subnormal below ``2**-126``. Combinational: the
    magnitude's leading one (:func:`bfp8_lead`), an 8-bit shift and the exponent's sum
    (:func:`bfp8_assemble`); the write-back registers the parts between the two."""
    return bfp8_assemble(*bfp8_lead(q), e)


def _f32_row_layout(cols: int) -> data.StructLayout:
    """A float32 C row (``f32``) queued for its write command: matrix row ``m``, the byte
    offset of its first column in the row, its words and the lanes inside the matrix."""
    return data.StructLayout({"m": unsigned(17), "off": unsigned(19),
                              "data": data.ArrayLayout(32, cols), "lanes": cols})


def _random_job_layout() -> data.StructLayout:
    """A stochastic unit's random bits to draw: rows ``rows``, first element (m0, n0)."""
    T = TILE_BLOCK
    return data.StructLayout({"m0": unsigned(17), "n0": unsigned(17), "rows": range(T + 1)})


class BfpWriteBack(wiring.Component):
    """Writes C as BFP8 tile blocks (quantised int8 mantissa rows and one exponent a block)
    through the epilogue, or with ``fp32`` as float32 rows through it.

    The engine walks a BFP8 descriptor in blocks of ``T / rows`` x ``T / cols`` C tiles (T =
    :data:`firmware.spec.regmap.TILE_BLOCK`), so each walker block is one tile block of the
    format (a *unit*), clipped by the matrix's edges. Each job on :attr:`jobs` announces a C
    tile (``rows`` rows of ``cols`` float32 words on :attr:`i_stream`); the first tile of a
    unit (``m0`` and ``n0`` multiples of T) starts it. The tiles' rows, tagged with their
    place in the unit, and zero rows for the tile columns a unit at the right edge lacks, go
    to a :class:`rtl.epilogue.TileQuantizer`, which finds the block's exponent and quantises
    with round to nearest or stochastic rounding; the random bits come from a
    :class:`rtl.prng.RandomLanes` keyed by the descriptor's seed, a row of lanes per output
    beat (the counter of element (m, n) as :func:`sim.models.bfp.quantize_tiles` uses it).
    Each quantised beat inside the matrix is one DMA write command of its bus words, with
    strobes on the bytes of columns below N; after a unit's last beat one more command writes
    its exponent byte into the grid at ``c_exp_addr`` (``ceil(N / T)`` bytes a row). Rows
    beyond M and columns beyond N are never written. The numpy model of record is
    :func:`sim.models.bfp.quantize_tiles`; the layout is the functional model's
    (:mod:`sim.models.functional`).

    With ``relu`` built in and the descriptor's ``relu`` set (``DESC_EPILOGUE.RELU``), each
    row passes a :class:`rtl.epilogue.ReluMask` on its way to the quantiser (``v = v if v >
    0 else +0.0``), and each tile row inside the matrix queues its mask bits (``v > 0`` of
    the value before ReLU, 0 for columns beyond N) as one more write command of one bus
    word: ``cols / 8`` bytes at ``mask_addr + m * mask_stride + n0 / 8``, strobes on the
    bytes holding a column below N (the layout of :func:`sim.models.bfp.pack_mask`, a row's
    unused high bits 0). The mask's row address is computed in two registered stages (a 17 x
    32 product, then the sum) after a FIFO of :data:`MASK_QUEUE` rows; a full queue holds the
    rows back. Mask and tile block commands share the port a whole command at a time (its
    command and word before another's), the mask's first when neither has started.

    With ``side`` built in, each row first passes an :class:`rtl.fp32.Fp32Add` of ``cols /
    fold`` lanes, in :attr:`fold` parts (its tags through a FIFO of :data:`TAG_QUEUE` beside
    it), that adds the descriptor's
    bias (``bias`` 1: the row's, 2: the column's; +0.0 without one, which leaves every
    value that the quantiser or the mask can tell apart), and the ReLU stage also zeroes
    the elements whose stored mask bit is 0 (``mask_in``, ReLU's backward). The unit's bias
    and mask bits come from a :class:`rtl.sideload.UnitSideLoader` outside: a unit with
    either waits in the tagger for its :attr:`side_unit` beat, each row is looked up by
    :attr:`side_row` and :attr:`side_seg` as it enters the adder, and :attr:`release`
    pulses with the unit's last row. The order is :func:`sim.models.bfp.epilogue`'s: bias,
    ReLU and its mask, stored mask, quantiser.

    With ``sgd`` built in (and ``side``), each row's parts pass three registers (the part as
    picked, the weight's sign, magnitude and leading one, then the weight decoded) and an
    :class:`rtl.fp32.Fp32Mul` of ``2 * cols / fold`` lanes before the adder. For a
    descriptor with ``sgd`` (``DESC_EPILOGUE.SGD``) the GEMM's value is multiplied by
    ``-lr`` and the stored weight by ``decay``, and the adder sums them
    (:func:`sim.models.bfp.sgd_step`): the weight is the unit's stored BFP8 mantissa and
    exponent from the side loader (:attr:`w_lanes`, :attr:`w_exp`), decoded exactly by
    :func:`bfp8_to_float32`, or for a float32 C of one row its stored value, which the side
    loader reads as the column biases. Other descriptors multiply both operands by 1.0,
    which leaves every sum as it was.

    With ``fp32`` built in (and ``side``; a float32 tile row of whole bus words) a
    descriptor with ``f32`` writes a float32 C instead: no quantiser job, unit record or
    zero row is made, and each row inside the matrix leaves the ReLU stage for a FIFO of
    :data:`F32_QUEUE` rows and two registered address stages (``m * c_stride``, then
    ``c_addr + that + 4 * n0``), then one write command of the words holding its columns
    below N (strobes on theirs), sharing the port with the mask commands a whole command at
    a time. Such rows take ``4 * cols / bus bytes`` cycles each at the port.

    A unit's base address ``c_addr + m0 * c_stride + n0`` and exponent address
    ``c_exp_addr + (m0 / T) * ceil(N / T) + n0 / T`` (with ``conv``, the job's grid row
    ``er`` for ``m0 / T``) are computed in registered stages (a
    17 x 32 product) while its first tile waits. ``c_addr`` and ``c_stride`` are multiples
    of the bus width (the checker's rule for C), so a beat's bytes start at ``(n0 + seg *
    cols) mod (bus bytes)`` within a bus word.

    Parameters
    ----------
    rows, cols : int
        Array shape: equal, dividing T, at least 4.
    data_width, addr_width : int
        AXI bus.
    relu : bool
        Build the ReLU and its mask writes (the descriptor's ``relu``; without them it is
        ignored). Needs ``cols`` of at least 8 (a tile row's mask is whole bytes).
    side : bool
        Build the bias adder and the stored mask (the descriptor's ``bias`` and ``mask_in``,
        with a :class:`rtl.sideload.UnitSideLoader` on the ``side_*`` ports).
    sgd : bool
        Build the optimiser's step (the descriptor's ``sgd``, ``lr`` and ``decay``; needs
        ``side``).
    fp32 : bool
        Build the float32 rows' writes (the descriptor's ``f32``; needs ``side`` and ``4 *
        cols`` a multiple of the bus's bytes).
    conv : bool
        Jobs of :func:`rtl.writeback.write_job_layout` with ``conv``: C may be a stack of
        matrices of ``desc.m`` rows each, with a tile grid each; a unit is clipped by its
        matrix's edges and its exponent written at its row of the stack's grid.
    pool : bool
        With ``conv`` and a tile row's ``cols`` bytes within a bus word: a descriptor with
        ``pool`` (a forward convolution's max pool) comes as each unit once per window
        phase (the jobs' ``ph``, ``pf``, ``pl``, ``mc``): a register stage after ReLU keeps
        the unit's running maximum and argmax in a memory (:meth:`_pool_stage`), the
        phases before the last make no quantiser job or unit record, and the last phase's
        rows go to the quantiser as their maxima and, inside the matrix, as one write
        command of their argmax bytes at ``argmax_addr + m * argmax_stride + n0``. ReLU's
        mask rows are written at the job's column ``mc`` (the pool's input's).

    Attributes
    ----------
    jobs : In(stream.Signature(rtl.writeback.write_job_layout(``conv``)))
    i_stream : In(stream.Signature(rtl.rescale.rescale_output_layout(cols)))
    desc : In(bfp_desc_layout(addr_width))
        Held while the descriptor's tiles pass.
    wr_cmd : Out(stream.Signature(rtl.dma.dma_command_layout(addr_width)))
    wr_data : Out(stream.Signature(rtl.dma.dma_write_layout(data_width)))
    wr_done : In(1)
        Pulses once per completed write command.
    idle : Out(1)
        No job, row or unit is held and every write has been acknowledged.
    nonfinite : Out(1)
        Sticky: a block held inf or NaN (written as zeros with exponent 0). Cleared by
        :attr:`clear`.
    clear : In(1)
    side_unit : In(stream.Signature(rtl.sideload.side_job_layout(``conv``)))
        With ``side``: the side loader's units, one taken per unit with a bias or
        ``mask_in``.
    side_row, side_seg : Out
        With ``side``: the row and segment (of the oldest unit not released) to look up.
    bias_row, bias_lanes, mask_lanes : In
        With ``side``: the side loader's lookups.
    release : Out(1)
        With ``side``: the unit's last row is in the adder.
    w_lanes : In(data.ArrayLayout(signed(8), cols))
        With ``sgd``: the side loader's lookup of the stored mantissas.
    w_exp : In(signed(8))
        With ``sgd``: their unit's exponent.
    side_phase : Out(8)
        With ``pool``: the tile's window phase, for the side loader's comparison.
    a_match : In(cols)
        With ``pool``: per lane, whether the argmax the side loader looked up is
        :attr:`side_phase` (a pool's backward pass writes the lanes where it is).

    Latency
    -------
    A unit's first mantissa write command is offered about ``fill_latency + DRAIN_LATENCY +
    2`` cycles (:class:`rtl.epilogue.TileQuantizer`) after its last row is taken (with
    ``side``, :data:`rtl.fp32.Fp32Add.LATENCY` + ``fold - 1`` more; with ``sgd``
    :data:`rtl.fp32.Fp32Mul.LATENCY` + 3 more again); its exponent's after its last beat's
    words. A row's mask command is offered 4 cycles after the row reaches the ReLU stage
    (the FIFO's 2, the two address stages), when the port is free.

    Throughput
    ----------
    A row a cycle in, with ``side`` a row every :attr:`fold` cycles (plus
    :data:`UNIT_CYCLES` per unit, and a zero row per missing beat of an edge unit); out, a
    quantised beat every :attr:`fold` (``max(1, cols / bus bytes)``) cycles, a cycle per
    unit for its exponent and, with ReLU, a cycle per tile row inside the matrix for its
    mask. The random bits come a beat every :attr:`fold` cycles too.
    """

    #: Cycles the tagger spends on a unit's first job before its rows pass (the geometry
    #: and the addresses, registered).
    UNIT_CYCLES = 4
    #: Tile rows' masks queued for their write commands.
    MASK_QUEUE = 16
    #: float32 C rows (``fp32``) queued for their write commands.
    F32_QUEUE = 4
    #: Rows in the bias adder or queued after it (its :data:`rtl.fp32.Fp32Add.LATENCY` rows
    #: and more): their tags, and their sums in a FIFO of their own, so that the adder
    #: never stalls (a row enters only while both have room).
    TAG_QUEUE = 16

    def __init__(self, rows: int, cols: int, *, data_width: int = 128, addr_width: int = 32,
                 relu: bool = False, side: bool = False, sgd: bool = False,
                 fp32: bool = False, conv: bool = False, pool: bool = False):
        T = TILE_BLOCK
        if rows != cols or cols < 4 or T % cols:
            raise ValueError(f"BFP8 output needs a square array of 4 to {T} lanes dividing "
                             f"{T}, not {rows}x{cols}")
        if relu and cols < 8:
            raise ValueError(f"relu needs at least 8 columns (a tile row's mask in whole "
                             f"bytes), not {cols}")
        if sgd and not side:
            raise ValueError("sgd needs side (the stored weights come from the side loader)")
        if fp32 and (not side or (4 * cols) % (data_width // 8)):
            raise ValueError(f"fp32 needs side and a float32 tile row of whole bus words, "
                             f"not {cols} lanes on a {data_width}-bit bus")
        self.relu, self.side, self.sgd = bool(relu), bool(side), bool(sgd)
        if pool and (not conv or cols > data_width // 8):
            raise ValueError(f"pool needs conv and a tile row's argmax ({cols} bytes) within a "
                             f"bus word ({data_width // 8} bytes)")
        self.fp32, self.conv, self.pool = bool(fp32), bool(conv), bool(pool)
        #: Bits of a mask row's byte offset: a pool's input has up to 2**20 columns.
        self.byte_bits = 18 if self.conv else 14
        self.rows, self.cols = rows, cols
        self.data_width, self.addr_width = data_width, addr_width
        self.segs = T // cols
        #: Cycles the writer spends on a quantised beat (its bus words): the bias adder and
        #: the random bits are built this many times narrower, taking a row in as many
        #: cycles, so that neither outpaces the port.
        self.fold = max(1, cols // (data_width // 8))
        super().__init__({
            "jobs": In(stream.Signature(write_job_layout(conv))),
            "i_stream": In(stream.Signature(rescale_output_layout(cols))),
            "desc": In(bfp_desc_layout(addr_width, pool)),
            "wr_cmd": Out(stream.Signature(dma_command_layout(addr_width))),
            "wr_data": Out(stream.Signature(dma_write_layout(data_width))),
            "wr_done": In(1),
            "idle": Out(1),
            "nonfinite": Out(1),
            "clear": In(1),
            **({"side_unit": In(stream.Signature(side_job_layout(conv))),
                "side_row": Out(range(T)), "side_seg": Out(range(T // cols)),
                "bias_row": In(32), "bias_lanes": In(data.ArrayLayout(32, cols)),
                "mask_lanes": In(cols), "release": Out(1)} if self.side else {}),
            **({"w_lanes": In(data.ArrayLayout(signed(8), cols)), "w_exp": In(signed(8))}
               if self.sgd else {}),
            **({"side_phase": Out(8), "a_match": In(cols)} if pool else {}),
        })
        #: Rows the tag FIFO and the sums FIFO hold: enough for those in the arithmetic
        #: (with ``sgd`` the decoding registers and :class:`rtl.fp32.Fp32Mul` too) at a row
        #: every :attr:`fold` cycles.
        self.tag_queue = self.TAG_QUEUE
        if self.sgd and self.fold == 1:
            self.tag_queue = 2 * self.TAG_QUEUE

    def elaborate(self, platform):
        m = Module()
        C, T = self.cols, TILE_BLOCK
        AW = self.addr_width
        # a float32 C (``fp32`` built): rows to their own write commands, no quantiser
        self._f32 = self.desc.f32 if self.fp32 else Const(0, 1)
        m.submodules.quantizer = qz = TileQuantizer(C, T)
        F = self.fold
        m.submodules.random = rnd = RandomLanes(C // F, out_fifo=32)
        ulay, rlay = _unit_layout(AW), _random_job_layout()
        m.submodules.units = units = Fifo(width=ulay.size, depth=8)
        m.submodules.rjobs = rjobs = Fifo(width=rlay.size, depth=8)
        tlay = _row_tag_layout(C, self.segs, self.pool, self.byte_bits)

        mq = None
        if self.relu or self.side:
            m.submodules.relu = ReluMask(C)
        if self.relu:
            m.submodules.masks = mq = Fifo(width=_mask_row_layout(C, self.byte_bits).size,
                                           depth=self.MASK_QUEUE)
        fq = None
        if self.fp32:
            m.submodules.f32rows = fq = Fifo(width=_f32_row_layout(C).size,
                                             depth=self.F32_QUEUE)
        # the tagger's rows (their words, the bias to add, their tags) -> through the bias
        # adder, the tags through a FIFO beside it, in order -> the ReLU and the quantizer
        rs = SimpleNamespace(valid=Signal(name="rs_valid"), ready=Signal(name="rs_ready"),
                             data=Signal(data.ArrayLayout(32, C), name="rs_data"),
                             bias=Signal(data.ArrayLayout(32, C), name="rs_bias"),
                             w=Signal(data.ArrayLayout(signed(8), C), name="rs_w"),
                             wexp=Signal(signed(8), name="rs_wexp"),
                             tag=Signal(tlay, name="rs_tag"))
        out = SimpleNamespace(valid=Signal(name="out_valid"), ready=Signal(name="out_ready"),
                              data=Signal(data.ArrayLayout(32, C), name="out_data"),
                              tag=Signal(tlay, name="out_tag"))
        path_idle = 1
        if self.side:
            # The adder never stalls (its ready is a constant, so no enable fans out to its
            # registers): a row enters only while the tag FIFO has room, and the tag FIFO
            # holds one tag for every row in the adder or in the sums FIFO, which is as deep.
            # With a fold of F the adder has C / F lanes and takes a row's lanes in F parts on
            # F cycles (the row's tag queued with its first), and the sums' parts are gathered
            # into a row for the FIFO.
            L = C // F
            m.submodules.adder = add = Fp32Add(L)
            m.submodules.tags = tq = Fifo(width=tlay.size, depth=self.tag_queue)
            m.submodules.sums = sq = Fifo(width=32 * C, depth=self.tag_queue)
            pop = Signal()
            part = Signal(range(F))              # the row's part going in
            first = part == 0
            feed = Signal()
            m.d.comb += [feed.eq(rs.valid & (tq.w_rdy | ~first)),
                         rs.ready.eq(part == F - 1) if F > 1 else rs.ready.eq(tq.w_rdy),
                         tq.w_data.eq(rs.tag), tq.w_en.eq(feed & first),
                         add.o_stream.ready.eq(1)]
            if self.sgd:
                # With the optimiser built, every row's two operands pass a multiplier
                # first: the GEMM's value by -lr and the stored weight (decoded from BFP8)
                # by decay for an SGD descriptor (decay * w - lr * g), the value and the
                # bias by 1.0 otherwise (exact: the adder's sum is unchanged). A register
                # holds the decoded part; the multiplier never stalls either.
                m.submodules.scale = mul = Fp32Mul(2 * L)
                sgd = self.desc.sgd
                one = Const(0x3F800000, 32)
                fa = Mux(sgd, Cat(self.desc.lr[:31], ~self.desc.lr[31]), one)
                fb = Mux(sgd, self.desc.decay, one)
                # three registers: the part as picked (the side loader's lookups end there),
                # the stored weight's sign, magnitude and leading one, then the weight
                # decoded (one stage of the decoding is deeper than the 200 MHz budget)
                p_valid, q_valid, d_valid = Signal(), Signal(), Signal()
                p_a = Signal(data.ArrayLayout(32, L), reset_less=True)
                p_b = Signal(data.ArrayLayout(32, L), reset_less=True)
                p_w = Signal(data.ArrayLayout(8, L), reset_less=True)
                p_e = Signal(8, reset_less=True)
                q_a = Signal(data.ArrayLayout(32, L), reset_less=True)
                q_b = Signal(data.ArrayLayout(32, L), reset_less=True)
                q_s = Signal(L, reset_less=True)
                q_m = Signal(data.ArrayLayout(8, L), reset_less=True)
                q_p = Signal(data.ArrayLayout(3, L), reset_less=True)
                q_e = Signal(8, reset_less=True)
                d_a = Signal(data.ArrayLayout(32, L), reset_less=True)
                d_b = Signal(data.ArrayLayout(32, L), reset_less=True)
                m.d.sync += [p_valid.eq(feed), q_valid.eq(p_valid), d_valid.eq(q_valid),
                             p_e.eq(rs.wexp), q_e.eq(p_e)]
                for lane in range(L):
                    sign, mag, lead = bfp8_lead(p_w[lane])
                    m.d.sync += [p_a[lane].eq(_pick(rs.data, part, lane, L, F)),
                                 p_b[lane].eq(_pick(rs.bias, part, lane, L, F)),
                                 p_w[lane].eq(_pick(rs.w, part, lane, L, F)),
                                 q_a[lane].eq(p_a[lane]), q_b[lane].eq(p_b[lane]),
                                 q_s[lane].eq(sign), q_m[lane].eq(mag), q_p[lane].eq(lead),
                                 d_a[lane].eq(q_a[lane]),
                                 d_b[lane].eq(Mux(sgd & ~self._f32,
                                                  bfp8_assemble(q_s[lane], q_m[lane],
                                                                q_p[lane], q_e),
                                                  q_b[lane]))]
                    m.d.comb += [mul.i_stream.payload.a[lane].eq(d_a[lane]),
                                 mul.i_stream.payload.a[L + lane].eq(d_b[lane]),
                                 mul.i_stream.payload.b[lane].eq(fa),
                                 mul.i_stream.payload.b[L + lane].eq(fb),
                                 add.i_stream.payload.a[lane].eq(mul.o_stream.payload.p[lane]),
                                 add.i_stream.payload.b[lane].eq(
                                     mul.o_stream.payload.p[L + lane])]
                m.d.comb += [mul.i_stream.valid.eq(d_valid), mul.o_stream.ready.eq(1),
                             add.i_stream.valid.eq(mul.o_stream.valid)]
            else:
                m.d.comb += add.i_stream.valid.eq(feed)
                for lane in range(L):
                    m.d.comb += [
                        add.i_stream.payload.a[lane].eq(_pick(rs.data, part, lane, L, F)),
                        add.i_stream.payload.b[lane].eq(_pick(rs.bias, part, lane, L, F))]
            if F > 1:
                with m.If(feed):
                    m.d.sync += part.eq(Mux(part == F - 1, 0, part + 1))
                # the sums' parts before the last, held until the last comes
                got = Signal(range(F))
                held = [Signal(32 * L, name=f"sum_part{j}", reset_less=True)
                        for j in range(F - 1)]
                with m.If(add.o_stream.valid):
                    m.d.sync += got.eq(Mux(got == F - 1, 0, got + 1))
                    for j in range(F - 1):
                        with m.If(got == j):
                            m.d.sync += held[j].eq(add.o_stream.payload.s)
                m.d.comb += [sq.w_data.eq(Cat(*held, add.o_stream.payload.s)),
                             sq.w_en.eq(add.o_stream.valid & (got == F - 1))]
            else:
                m.d.comb += [sq.w_data.eq(add.o_stream.payload.s),
                             sq.w_en.eq(add.o_stream.valid)]
            m.d.comb += [out.valid.eq(sq.r_rdy), out.data.eq(sq.r_data),
                         out.tag.eq(tq.r_data), pop.eq(sq.r_rdy & out.ready),
                         sq.r_en.eq(pop), tq.r_en.eq(pop)]
            path_idle = tq.empty
        else:
            m.d.comb += [out.valid.eq(rs.valid), rs.ready.eq(out.ready), out.data.eq(rs.data),
                         out.tag.eq(rs.tag)]

        tag_idle = self._tagger(m, qz, units, rjobs, rs)
        self._rows_out(m, qz, mq, fq, out)
        rnd_idle = self._random(m, rnd, rjobs)
        mk = self._mask_address(m, mq) if self.relu else None
        fr = self._f32_address(m, fq) if self.fp32 else None
        ak = self._argmax_address(m, self._aq) if self.pool else None
        wr_idle = self._writer(m, qz, units, mk, fr, ak)
        idle = (tag_idle & rnd_idle & wr_idle & qz.idle & ~units.r_rdy & ~rjobs.r_rdy
                & path_idle & (mk.idle if self.relu else 1) & (fr.idle if self.fp32 else 1))
        m.d.comb += self.idle.eq((idle & ak.idle & self._pool_idle) if self.pool else idle)
        return m

    # ---- rows out of the adder -> ReLU and the stored mask -> the quantizer; mask rows -----

    def _rows_out(self, m, qz, mq, fq, out):
        C = self.cols
        d, tag = self.desc, out.tag
        f32 = self._f32
        p = qz.i_stream.payload
        if not self.pool:
            m.d.comb += [p.row.eq(tag.row), p.seg.eq(tag.seg)]
        if not (self.relu or self.side):
            m.d.comb += [p.data.eq(out.data), qz.i_stream.valid.eq(out.valid),
                         out.ready.eq(qz.i_stream.ready)]
            return
        rl = m.submodules.relu
        # the quantizer, or with ``pool`` the pool stage before it
        q_ready = Signal()
        m.d.comb += [rl.i_stream.payload.data.eq(out.data),
                     rl.i_stream.payload.relu.eq(d.relu if self.relu else 0),
                     rl.i_stream.payload.backward.eq(
                         ((d.mask_in | d.unpool) if self.pool else d.mask_in)
                         if self.side else 0),
                     rl.i_stream.payload.mask_in.eq(tag.mask_in),
                     rl.i_stream.valid.eq(out.valid), rl.o_stream.ready.eq(q_ready)]
        if not self.pool:
            m.d.comb += [p.data.eq(rl.o_stream.payload.data), q_ready.eq(qz.i_stream.ready)]
        # the row's sink: the quantizer, or with a float32 C the queue of its rows (a row
        # beyond the matrix, or of no column inside it, is dropped)
        sink_ready = q_ready
        if self.fp32:
            keep = tag.mask_en & tag.lanes.any()
            sink_ready = Mux(f32, fq.w_rdy | ~keep, q_ready)
            frow = data.View(_f32_row_layout(C), fq.w_data)
            m.d.comb += [frow.m.eq(tag.m),
                         # 4 * n0: the unit's column (n0 / T, from the mask byte) and the
                         # segment's
                         frow.off.eq(((tag.byte >> 2) << 7)
                                     + Cat(Const(0, 2 + C.bit_length() - 1), tag.seg)),
                         frow.data.eq(rl.o_stream.payload.data), frow.lanes.eq(tag.lanes)]
        mask_ok = 1                          # the mask queue takes the row (or none is due)
        if self.relu:
            mrow = data.View(_mask_row_layout(C, self.byte_bits), mq.w_data)
            m.d.comb += [mrow.m.eq(tag.m), mrow.byte.eq(tag.byte),
                         mrow.bits.eq(rl.o_stream.payload.mask & tag.lanes),
                         mrow.strb.eq(Cat(*(tag.lanes[8 * b] for b in range(C // 8))))]
            mask_ok = mq.w_rdy | ~d.relu | ~tag.mask_en
            m.d.comb += mq.w_en.eq(out.valid & sink_ready & d.relu & tag.mask_en
                                   & mq.w_rdy)
        if self.fp32:
            m.d.comb += fq.w_en.eq(out.valid & mask_ok & f32 & keep & fq.w_rdy)
        if self.pool:
            self._pool_stage(m, qz, out.valid & mask_ok & ~f32, q_ready,
                             rl.o_stream.payload.data, tag)
        else:
            m.d.comb += qz.i_stream.valid.eq(out.valid & mask_ok & ~f32)
        m.d.comb += out.ready.eq(sink_ready & mask_ok)

    # ---- the pool stage: rows -> their running maximum -> the quantizer; argmax rows ------

    def _pool_stage(self, m, qz, valid, ready, row, tag):
        """A register stage before the quantizer (``pool``): a row (``valid``, ``row``,
        ``tag``; ``ready`` out) is taken into it as a memory of the unit's rows (a word per
        row and segment: the lanes' running maximum and argmax) is read at its place; a
        cycle later the row leaves for the quantizer (``pool`` 0 or the last phase) or for
        the memory, as itself at the first phase, else lane by lane the larger
        (:func:`float32_greater`: a later phase replaces a value only when strictly
        greater) with its phase as the argmax, and at a max pool's last phase its argmax
        bytes leave for their queue. A row's place recurs only a unit later, so the read
        never sees a write in flight."""
        C, T, S = self.cols, TILE_BLOCK, self.segs
        d = self.desc
        vlay = data.StructLayout({"v": data.ArrayLayout(32, C), "a": data.ArrayLayout(8, C)})
        tlay = tag.shape()
        m.submodules.pool_rows = mem = memory.Memory(shape=vlay, depth=T * S, init=[])
        rd = mem.read_port()
        wr = mem.write_port()
        m.submodules.argmaxes = aq = Fifo(width=_argmax_row_layout(C).size,
                                          depth=self.MASK_QUEUE)
        self._aq = aq
        s_valid = Signal()
        s_row = Signal(data.ArrayLayout(32, C), reset_less=True)
        s_tag = Signal(tlay, reset_less=True)
        pooling = d.pool
        emit = ~pooling | s_tag.pl                       # to the quantizer
        arg = pooling & s_tag.pl & s_tag.mask_en         # an argmax row (inside the matrix)
        leave = Signal()
        m.d.comb += leave.eq(s_valid & (~emit | qz.i_stream.ready) & (~arg | aq.w_rdy))
        m.d.comb += ready.eq(~s_valid | leave)
        take = valid & ready
        def place(t):                     # (a row's word: its row and segment)
            return Cat(t.seg[:(S - 1).bit_length()], t.row) if S > 1 else t.row
        m.d.comb += [rd.addr.eq(place(tag)), rd.en.eq(take)]
        with m.If(ready):
            m.d.sync += [s_valid.eq(valid), s_row.eq(row), s_tag.eq(tag)]
        old = data.View(vlay, rd.data)
        new = Signal(vlay)
        for lane in range(C):
            better = s_tag.pf | float32_greater(s_row[lane], old.v[lane])
            m.d.comb += [new.v[lane].eq(Mux(better, s_row[lane], old.v[lane])),
                         new.a[lane].eq(Mux(better, s_tag.ph, old.a[lane]))]
        p = qz.i_stream.payload
        m.d.comb += [wr.addr.eq(place(s_tag)), wr.data.eq(new),
                     wr.en.eq(leave & pooling & ~s_tag.pl),
                     p.row.eq(s_tag.row), p.seg.eq(s_tag.seg),
                     p.data.eq(Mux(pooling, new.v, s_row)),
                     qz.i_stream.valid.eq(s_valid & emit & (~arg | aq.w_rdy))]
        e = data.View(_argmax_row_layout(C), aq.w_data)
        m.d.comb += [e.m.eq(s_tag.m), e.col.eq(s_tag.col), e.bytes.eq(new.a),
                     e.strb.eq(s_tag.lanes),
                     aq.w_en.eq(s_valid & arg & aq.w_rdy & qz.i_stream.ready)]
        self._pool_idle = ~s_valid & aq.empty

    # ---- jobs and rows -> quantizer jobs and tagged beats; unit records --------------------

    def _tagger(self, m, qz, units, rjobs, rs):
        R, C, S, T = self.rows, self.cols, self.segs, TILE_BLOCK
        lr, lt = R.bit_length() - 1, T.bit_length() - 1
        AW = self.addr_width
        d, job, i = self.desc, self.jobs.payload, self.i_stream
        m0 = Signal(17, reset_less=True)     # the tile's row in C (a stack's row)
        # (with ``conv``: its row in its matrix, and its tile block's row of the exponent
        # grid; else m0 and m0 / T)
        mr = Signal(17, reset_less=True) if self.conv else m0
        er = Signal(17, reset_less=True) if self.conv else m0 >> lt
        # (with ``conv``: its column of the mask, the pool's input's; with ``pool``, its
        # phase, and whether the phase is the first and the last)
        mc = Signal(21, reset_less=True) if self.conv else None
        ph = Signal(8, reset_less=True)
        pf = Signal(reset_less=True)
        pl = Signal(reset_less=True)
        pooled = (d.pool & ~pl) if self.pool else 0      # a phase before the last
        n0 = Signal(17, reset_less=True)
        rows_in = Signal(range(T + 1), reset_less=True)
        cols_in = Signal(range(T + 1), reset_less=True)
        bm = Signal(range(S + 1), reset_less=True)     # the unit's tile rows and columns
        bn = Signal(range(S + 1), reset_less=True)
        tiles_left = Signal(range(S * S + 1))
        prod = Signal(AW + 17, reset_less=True)
        eprod = Signal(AW, reset_less=True)
        base = Signal(AW, reset_less=True)       # the unit's C and exponent addresses
        ebase = Signal(AW, reset_less=True)
        wcol = Signal(17, reset_less=True)       # its column where C is written
        r = Signal(range(R))                 # the tile's row being passed
        row0 = Signal(range(T), reset_less=True)   # the tile's first row in the unit
        # ... and row0 + r, the row being passed, in a register of its own: the side
        # loader's lookups start from it (a carry chain in front of them is too deep)
        srow = Signal(range(T), reset_less=True)
        seg = Signal(range(S), reset_less=True)    # its segment
        zrow = Signal(range(T))              # zero beats of the missing segments
        zseg = Signal(range(S))
        # (a pool's backward pass writes C at the pool's input: its columns, and the tile's
        # column there)
        unpool = d.unpool if self.pool else 0
        c_n = Mux(unpool, d.c_n, d.n) if self.pool else d.n
        wc = Mux(unpool, mc, n0) if self.pool else n0
        gn = Signal(17)                      # ceil(N / T)
        m.d.comb += gn.eq((c_n[:17] + (T - 1)) >> lt)
        t_rows = Signal(range(R + 1), reset_less=True)   # the tile's rows and columns
        t_cols = Signal(range(C + 1), reset_less=True)   # inside the matrix

        # the rows' tags; with the side data, the unit's bias and stored mask bits, looked up
        # by the row and segment (0 and ones where the descriptor has none)
        tag = rs.tag
        ones = (1 << C) - 1
        need_side = 0                        # the unit has side data: wait for it
        if self.side:
            need_side = (d.bias != 0) | d.mask_in | (d.sgd if self.sgd else 0) | unpool
            # (an SGD of a float32 C: its stored weights come as the column biases)
            bias_on = (d.bias == 1) | (d.bias == 2) | ((d.sgd if self.sgd else 0) & self._f32)
            m.d.comb += [self.side_row.eq(srow), self.side_seg.eq(seg)]
            lane_bias = [Mux(bias_on, self.bias_row | self.bias_lanes[lane], 0)
                         for lane in range(C)]
            row_mask = Mux(d.mask_in, self.mask_lanes, ones)
            if self.pool:
                # (a pool's backward pass: a lane passes where its window's argmax is this
                # phase)
                m.d.comb += self.side_phase.eq(ph)
                match = self.a_match
                row_mask = row_mask & Mux(unpool, match, ones)
        else:
            lane_bias, row_mask = [0] * C, ones
        m.d.comb += [tag.m.eq(m0 + r), tag.byte.eq((mc if self.conv else n0) >> 3)]
        if self.pool:
            m.d.comb += [tag.ph.eq(ph), tag.pf.eq(pf), tag.pl.eq(pl), tag.col.eq(n0)]

        qjob = qz.jobs.payload
        unit = data.View(_unit_layout(self.addr_width), units.w_data)
        rjob = data.View(_random_job_layout(), rjobs.w_data)
        with m.FSM(name="tagger") as fsm:
            with m.State("JOB"):
                m.d.comb += self.jobs.ready.eq(1)
                with m.If(self.jobs.valid):
                    rem_m = Signal(18)
                    rem_n = Signal(18)
                    jr = job_row(job)
                    jc = Mux(unpool, job.mc, job.n0) if self.pool else job.n0
                    m.d.comb += [rem_m.eq(d.m[:17] - jr), rem_n.eq(c_n[:17] - jc)]
                    if self.conv:
                        m.d.sync += [mr.eq(jr), er.eq(job_grid_row(job)), mc.eq(job.mc)]
                    if self.pool:
                        m.d.sync += [ph.eq(job.ph), pf.eq(job.pf), pl.eq(job.pl)]
                    m.d.sync += [m0.eq(job.m0), n0.eq(job.n0), r.eq(0),
                                 row0.eq(jr[:lt]), srow.eq(jr[:lt]), seg.eq(job.n0[:lt] >> lr),
                                 t_rows.eq(Mux(rem_m >= R, R, rem_m)),
                                 t_cols.eq(Mux(rem_n >= C, C, rem_n))]
                    with m.If((jr[:lt] == 0) & (job.n0[:lt] == 0)):
                        m.next = "GEOMETRY"
                    with m.Else():
                        m.next = "ROWS"
            with m.State("GEOMETRY"):        # the unit's extent and its products
                rem_m = Signal(18)
                rem_n = Signal(18)
                m.d.comb += [rem_m.eq(d.m[:17] - mr), rem_n.eq(c_n[:17] - wc)]
                m.d.sync += [rows_in.eq(Mux(rem_m >= T, T, rem_m)),
                             cols_in.eq(Mux(rem_n >= T, T, rem_n)),
                             prod.eq(m0 * d.c_stride),
                             eprod.eq(er * gn), wcol.eq(wc)]
                m.next = "COUNT"
            with m.State("COUNT"):
                # (the addresses' sums registered here, not in ISSUE: the descriptor's
                # multiplexers and a carry chain of the address's width are one path)
                m.d.sync += [bm.eq((rows_in + (R - 1)) >> lr), bn.eq((cols_in + (C - 1)) >> lr),
                             base.eq(d.c_addr + prod + wcol),
                             ebase.eq(d.c_exp_addr + eprod + (wcol >> lt))]
                m.next = "ISSUE"
            with m.State("ISSUE"):           # the quantizer's job, the unit's records
                m.d.comb += [qjob.rows.eq(bm * R), qjob.rows_valid.eq(rows_in),
                             qjob.cols_valid.eq(cols_in), qjob.stochastic.eq(d.stochastic),
                             unit.base.eq(base), unit.exp_addr.eq(ebase),
                             unit.rows_in.eq(rows_in), unit.cols_in.eq(cols_in),
                             rjob.m0.eq(m0), rjob.n0.eq(wc), rjob.rows.eq(bm * R)]
                side_ok = 1
                if self.side:
                    side_ok = self.side_unit.valid | ~need_side
                # (a float32 C, or a pool's phase before the last: no quantiser job, no unit
                # record)
                f32 = (self._f32 | pooled) if self.pool else self._f32
                room = units.w_rdy & (rjobs.w_rdy | ~d.stochastic | f32) & side_ok
                can = (qz.jobs.ready | f32) & room
                m.d.comb += [qz.jobs.valid.eq(room & ~f32), units.w_en.eq(can & ~f32),
                             rjobs.w_en.eq(can & d.stochastic & ~f32)]
                if self.side:
                    m.d.comb += self.side_unit.ready.eq(can & need_side)
                with m.If(can):
                    m.d.sync += tiles_left.eq(bm * bn)
                    m.next = "ROWS"
            with m.State("ROWS"):
                m.d.comb += [rs.data.eq(i.payload.data), tag.row.eq(srow), tag.seg.eq(seg),
                             tag.lanes.eq(Cat(*(lane < t_cols for lane in range(C)))),
                             tag.mask_en.eq(r < t_rows), tag.mask_in.eq(row_mask),
                             *(rs.bias[lane].eq(lane_bias[lane]) for lane in range(C)),
                             rs.valid.eq(i.valid), i.ready.eq(rs.ready)]
                if self.sgd:
                    m.d.comb += [rs.w.eq(self.w_lanes), rs.wexp.eq(self.w_exp)]
                with m.If(i.valid & rs.ready):
                    m.d.sync += [r.eq(r + 1), srow.eq(Mux(r == R - 1, row0, srow + 1))]
                    with m.If(r == R - 1):
                        m.d.sync += tiles_left.eq(tiles_left - 1)
                        if self.side:
                            m.d.comb += self.release.eq((tiles_left == 1) & need_side)
                        with m.If((tiles_left == 1) & (bn != S) & ~self._f32):
                            m.d.sync += [zrow.eq(0), zseg.eq(bn)]
                            m.next = "ZEROS"
                        with m.Else():
                            m.next = "JOB"
            with m.State("ZEROS"):           # the missing segments of an edge unit
                m.d.comb += [rs.data.eq(0), tag.row.eq(zrow), tag.seg.eq(zseg),
                             tag.mask_in.eq(ones), rs.valid.eq(1)]
                with m.If(rs.ready):
                    last_seg = zseg == S - 1
                    m.d.sync += zseg.eq(Mux(last_seg, bn, zseg + 1))
                    with m.If(last_seg):
                        m.d.sync += zrow.eq(zrow + 1)
                        with m.If(zrow == bm * R - 1):
                            m.next = "JOB"
        return fsm.ongoing("JOB")

    # ---- random bits: a row of lanes per output beat of a stochastic unit -------------------

    def _random(self, m, rnd, rjobs):
        C, S, F = self.cols, self.segs, self.fold
        L = C // F                            # the generator's lanes: a beat in F requests
        rj = data.View(_random_job_layout(), rjobs.r_data)
        row = Signal(range(TILE_BLOCK + 1))
        seg = Signal(range(S))
        part = Signal(range(F))
        m.d.comb += [rnd.i_stream.payload.seed.eq(self.desc.seed),
                     rnd.i_stream.payload.m.eq(rj.m0 + row),
                     rnd.i_stream.payload.n0.eq(rj.n0 + seg * C + part * L),
                     rnd.i_stream.valid.eq(rjobs.r_rdy)]
        with m.If(rjobs.r_rdy & rnd.i_stream.ready):
            last_part = part == F - 1
            if F > 1:
                m.d.sync += part.eq(Mux(last_part, 0, part + 1))
            with m.If(last_part):
                last_seg = seg == S - 1
                m.d.sync += seg.eq(Mux(last_seg, 0, seg + 1))
                with m.If(last_seg):
                    m.d.sync += row.eq(row + 1)
                    with m.If(row == rj.rows - 1):
                        m.d.sync += row.eq(0)
                        m.d.comb += rjobs.r_en.eq(1)
        qz = m.submodules.quantizer
        o = rnd.o_stream
        if F > 1:
            # a beat's parts before the last, held until the last comes
            got = Signal(range(F))
            held = [Signal(16 * L, name=f"random_part{j}", reset_less=True)
                    for j in range(F - 1)]
            last = got == F - 1
            m.d.comb += [qz.r_stream.valid.eq(o.valid & last),
                         o.ready.eq(~last | qz.r_stream.ready),
                         qz.r_stream.payload.eq(Cat(*held, o.payload.r))]
            with m.If(o.valid & o.ready):
                m.d.sync += got.eq(Mux(last, 0, got + 1))
                for j in range(F - 1):
                    with m.If(got == j):
                        m.d.sync += held[j].eq(o.payload.r)
            idle = ~rjobs.r_rdy & (got == 0)
        else:
            m.d.comb += [qz.r_stream.valid.eq(o.valid), o.ready.eq(qz.r_stream.ready),
                         qz.r_stream.payload.eq(o.payload.r)]
            idle = ~rjobs.r_rdy
        # (bits in flight: RandomLanes and its FIFO hold them until the quantizer takes them)
        return idle

    # ---- mask rows -> their write commands' addresses ---------------------------------------

    def _mask_address(self, m, mq):
        """:meth:`_row_address` for the mask queue: ``m * mask_stride``, then ``mask_addr +
        that + byte``, with the row's ``bits`` and ``strb``."""
        C = self.cols
        e = data.View(_mask_row_layout(C, self.byte_bits), mq.r_data)
        return self._row_address(m, mq, "mk", e.m, self.desc.mask_stride, self.desc.mask_addr,
                                 ("byte", self.byte_bits, e.byte),
                                 bits=(C, e.bits), strb=(C // 8, e.strb))

    def _argmax_address(self, m, aq):
        """:meth:`_row_address` for the argmax queue: ``m * argmax_stride``, then
        ``argmax_addr + that + col``, with the row's ``bytes`` and ``strb``."""
        C = self.cols
        e = data.View(_argmax_row_layout(C), aq.r_data)
        return self._row_address(m, aq, "ak", e.m, self.desc.argmax_stride,
                                 self.desc.argmax_addr, ("col", 17, e.col),
                                 bytes=(8 * C, e.bytes), strb=(C, e.strb))

    def _row_address(self, m, q, prefix, row, stride, base, offset, **payload):
        """Two registered stages after a queue of side rows (a mask's, an argmax's): ``row *
        stride``, then ``base + that + offset`` (``offset``: its name, width and value).
        Returns the command held for the writer: ``valid``, ``addr``, each ``payload``
        entry's value (name: width and value), ``done`` (the writer's: its command and word
        are out this cycle) and ``idle``; signals named ``prefix_...``."""
        AW = self.addr_width
        off_name, off_width, off_value = offset
        a_valid = Signal()
        a_prod = Signal(AW, reset_less=True)
        a_off = Signal(off_width, name=f"a_{off_name}", reset_less=True)
        a_pay = {k: Signal(w, name=f"a_{k}", reset_less=True) for k, (w, _) in payload.items()}
        cmd = SimpleNamespace(valid=Signal(name=f"{prefix}_valid"),
                              done=Signal(name=f"{prefix}_done"),
                              addr=Signal(AW, name=f"{prefix}_addr", reset_less=True),
                              idle=Signal(name=f"{prefix}_idle"),
                              **{k: Signal(w, name=f"{prefix}_{k}", reset_less=True)
                                 for k, (w, _) in payload.items()})
        b_free = ~cmd.valid | cmd.done
        a_free = ~a_valid | b_free
        m.d.comb += q.r_en.eq(q.r_rdy & a_free)
        with m.If(a_free):
            m.d.sync += [a_valid.eq(q.r_rdy), a_prod.eq(row * stride), a_off.eq(off_value),
                         *(a_pay[k].eq(v) for k, (_, v) in payload.items())]
        with m.If(b_free):
            m.d.sync += [cmd.valid.eq(a_valid), cmd.addr.eq(base + a_prod + a_off),
                         *(getattr(cmd, k).eq(a_pay[k]) for k in payload)]
        m.d.comb += cmd.idle.eq(q.empty & ~a_valid & ~cmd.valid)
        return cmd

    # ---- float32 rows -> their write commands' addresses -------------------------------------

    def _f32_address(self, m, fq):
        """Two registered stages after the float32 rows' queue: ``m * c_stride`` and the
        row's words (4 bytes a lane inside the matrix, in bus words), then ``c_addr + that +
        off``. Returns the command held for the writer: ``valid``, ``addr``, ``words``,
        ``data``, ``lanes``, ``done`` (the writer's: its last word is out this cycle) and
        ``idle``."""
        C, AW = self.cols, self.addr_width
        bpw = self.data_width // 8
        d = self.desc
        e = data.View(_f32_row_layout(C), fq.r_data)
        count = Const(0, range(C + 1))
        for lane in range(C):
            count = count + e.lanes[lane]
        a_valid = Signal()
        a_prod = Signal(AW, reset_less=True)
        a_off = Signal(19, reset_less=True)
        a_words = Signal(range(4 * C // bpw + 1), reset_less=True)
        a_data = Signal(32 * C, reset_less=True)
        a_lanes = Signal(C, reset_less=True)
        fr = SimpleNamespace(valid=Signal(name="fr_valid"), done=Signal(name="fr_done"),
                             addr=Signal(AW, name="fr_addr", reset_less=True),
                             words=Signal(range(4 * C // bpw + 1), name="fr_words",
                                          reset_less=True),
                             data=Signal(32 * C, name="fr_data", reset_less=True),
                             lanes=Signal(C, name="fr_lanes", reset_less=True),
                             idle=Signal(name="fr_idle"))
        b_free = ~fr.valid | fr.done
        a_free = ~a_valid | b_free
        lb = bpw.bit_length() - 1
        m.d.comb += fq.r_en.eq(fq.r_rdy & a_free)
        with m.If(a_free):
            m.d.sync += [a_valid.eq(fq.r_rdy), a_prod.eq(e.m * d.c_stride), a_off.eq(e.off),
                         a_words.eq(((count << 2) + (bpw - 1)) >> lb),
                         a_data.eq(e.data), a_lanes.eq(e.lanes)]
        with m.If(b_free):
            m.d.sync += [fr.valid.eq(a_valid), fr.addr.eq(d.c_addr + a_prod + a_off),
                         fr.words.eq(a_words), fr.data.eq(a_data), fr.lanes.eq(a_lanes)]
        m.d.comb += fr.idle.eq(fq.empty & ~a_valid & ~fr.valid)
        return fr

    # ---- quantised beats (and masks) -> DMA write commands and words ------------------------

    def _writer(self, m, qz, units, mk, fr, ak=None):
        C, S = self.cols, self.segs
        bpw = self.data_width // 8
        AW = self.addr_width
        words = max(1, C // bpw)           # bus words a beat spans
        unit = data.View(_unit_layout(AW), units.r_data)
        o = qz.o_stream
        beat = o.payload

        # the beat being written, held until its command and words are out
        held = Signal()
        h_q = Signal(data.ArrayLayout(unsigned(8), C), reset_less=True)
        h_exp = Signal(8, reset_less=True)
        h_nbytes = Signal(range(C + 1), reset_less=True)   # its bytes inside the matrix
        h_addr = Signal(AW, reset_less=True)
        cmd_out = Signal()                 # its command has been taken
        word = Signal(range(words + 1))    # its words taken
        exp_pending = Signal()             # the unit's exponent write is next
        exp_cmd_out = Signal()
        exp_word_out = Signal()
        row_addr = Signal(AW, reset_less=True)
        first = Signal(init=1)             # the next beat is a unit's first
        nonf = Signal()

        col0 = beat.seg * C                # the beat's first column in the unit
        cur_row = Mux(first, unit.base, row_addr)
        nbytes = Mux(unit.cols_in > col0, unit.cols_in - col0, 0)
        inside = (beat.row < unit.rows_in) & (unit.cols_in > col0)

        # the held beat: a command of ceil(nbytes / bpw) words (or one), then its words
        cmd, wd = self.wr_cmd.payload, self.wr_data.payload
        nwords = Signal(range(words + 1))
        off = Signal(range(bpw))
        lb = bpw.bit_length() - 1
        m.d.comb += off.eq(h_addr[:lb])
        if words > 1:
            m.d.comb += nwords.eq((h_nbytes + (bpw - 1)) >> lb)
        else:
            m.d.comb += nwords.eq(1)
        exp_off = Signal(range(bpw))
        m.d.comb += exp_off.eq(unit.exp_addr[:lb])
        beat_done = Signal()              # the held beat's last handshake is this cycle
        exp_done = Signal()               # the exponent's
        # A mask command has the port while it is partly out, or when neither the held beat
        # nor the exponent has started: a command's words stay together, in command order.
        mk_go = Signal()
        mk_cmd_out = Signal()
        mk_word_out = Signal()
        if mk is None:                     # (no ReLU: never a mask)
            mk = SimpleNamespace(valid=Const(0), addr=Const(0, AW), bits=Const(0, C),
                                 strb=Const(0, max(1, C // 8)), done=Signal(name="mk_done"))
        # a float32 row's command and words (``fp32``; never beside a held beat)
        fr_cmd_out = Signal()
        fr_word = Signal(range(4 * C // bpw + 1))
        if fr is None:
            fr = SimpleNamespace(valid=Const(0), done=Signal(name="fr_done"))
        # a pooled row's argmax command (``pool``): as a mask's, after the mask's
        ak_go = Signal()
        ak_cmd_out = Signal()
        ak_word_out = Signal()
        if ak is None:
            ak = SimpleNamespace(valid=Const(0), done=Signal(name="ak_done"))
        started = ((held & (cmd_out | (word != 0)))
                   | (~held & exp_pending & (exp_cmd_out | exp_word_out))
                   | (fr.valid & (fr_cmd_out | (fr_word != 0))))
        if self.pool:
            started = started | ak_cmd_out | ak_word_out
        m.d.comb += mk_go.eq(mk.valid & (mk_cmd_out | mk_word_out | ~started))
        if self.pool:
            m.d.comb += ak_go.eq(ak.valid & ~mk_go & (ak_cmd_out | ak_word_out | ~started))
        with m.If(mk_go):
            # the mask bytes, repeated over the word (their offset in it is a multiple of
            # their count), strobes on those inside the matrix
            m.d.comb += [cmd.addr.eq(mk.addr), cmd.beats.eq(1),
                         self.wr_cmd.valid.eq(~mk_cmd_out),
                         self.wr_data.valid.eq(~mk_word_out),
                         wd.data.eq(Cat(*(mk.bits for _ in range(8 * bpw // C)))),
                         wd.strb.eq(mk.strb << mk.addr[:lb])]
            with m.If(self.wr_cmd.ready):
                m.d.sync += mk_cmd_out.eq(1)
            with m.If(self.wr_data.ready):
                m.d.sync += mk_word_out.eq(1)
            m.d.comb += mk.done.eq((mk_cmd_out | self.wr_cmd.ready)
                                   & (mk_word_out | self.wr_data.ready))
            with m.If(mk.done):
                m.d.sync += [mk_cmd_out.eq(0), mk_word_out.eq(0)]
        if self.pool:
            with m.Elif(ak_go):
                # the argmax bytes, repeated over the word (their offset in it a multiple
                # of their count), strobes on those inside the matrix
                m.d.comb += [cmd.addr.eq(ak.addr), cmd.beats.eq(1),
                             self.wr_cmd.valid.eq(~ak_cmd_out),
                             self.wr_data.valid.eq(~ak_word_out),
                             wd.data.eq(Cat(*(ak.bytes for _ in range(bpw // C)))),
                             wd.strb.eq(ak.strb << ak.addr[:lb])]
                with m.If(self.wr_cmd.ready):
                    m.d.sync += ak_cmd_out.eq(1)
                with m.If(self.wr_data.ready):
                    m.d.sync += ak_word_out.eq(1)
                m.d.comb += ak.done.eq((ak_cmd_out | self.wr_cmd.ready)
                                       & (ak_word_out | self.wr_data.ready))
                with m.If(ak.done):
                    m.d.sync += [ak_cmd_out.eq(0), ak_word_out.eq(0)]
        with m.Elif(held):
            m.d.comb += [cmd.addr.eq(h_addr), cmd.beats.eq(nwords),
                         self.wr_cmd.valid.eq(~cmd_out),
                         self.wr_data.valid.eq(word != nwords)]
            with m.If(self.wr_cmd.ready & ~cmd_out):
                m.d.sync += cmd_out.eq(1)
            with m.If(self.wr_data.ready & (word != nwords)):
                m.d.sync += word.eq(word + 1)
            m.d.comb += beat_done.eq((cmd_out | self.wr_cmd.ready) & (
                (word == nwords) | (self.wr_data.ready & (word == nwords - 1))))
            with m.If(beat_done):
                m.d.sync += held.eq(0)
            # the word: bytes of the beat from ``word * bpw`` (C >= bpw) or the beat moved
            # to its offset in the word (C < bpw); strobes on the bytes inside the matrix
            if C >= bpw:
                for b in range(bpw):
                    idx = Signal(range(C), name=f"wb_idx{b}")
                    m.d.comb += [idx.eq(word * bpw + b),
                                 wd.data[8 * b:8 * b + 8].eq(h_q[idx]),
                                 wd.strb[b].eq(idx < h_nbytes)]
            else:
                lc = max(1, (C - 1).bit_length())
                for b in range(bpw):
                    lane = Signal(range(bpw), name=f"wb_lane{b}")
                    ok = (b >= off) & (b < off + C)
                    m.d.comb += [lane.eq(b - off),
                                 wd.data[8 * b:8 * b + 8].eq(Mux(ok, h_q[lane[:lc]], 0)),
                                 wd.strb[b].eq(ok & (lane < h_nbytes))]
        with m.Elif(exp_pending):
            # the unit's exponent: one word, one strobe
            m.d.comb += [cmd.addr.eq(unit.exp_addr), cmd.beats.eq(1),
                         self.wr_cmd.valid.eq(~exp_cmd_out),
                         self.wr_data.valid.eq(~exp_word_out),
                         wd.data.eq(Cat(*(h_exp for _ in range(bpw)))),
                         wd.strb.eq(Const(1, bpw) << exp_off)]
            with m.If(self.wr_cmd.ready):
                m.d.sync += exp_cmd_out.eq(1)
            with m.If(self.wr_data.ready):
                m.d.sync += exp_word_out.eq(1)
            m.d.comb += exp_done.eq((exp_cmd_out | self.wr_cmd.ready)
                                    & (exp_word_out | self.wr_data.ready))
            with m.If(exp_done):
                m.d.sync += exp_pending.eq(0)
                m.d.comb += units.r_en.eq(1)
        if self.fp32:
            with m.Elif(fr.valid):
                # a float32 row: its words from the first, strobes on the lanes inside
                m.d.comb += [cmd.addr.eq(fr.addr), cmd.beats.eq(fr.words),
                             self.wr_cmd.valid.eq(~fr_cmd_out),
                             self.wr_data.valid.eq(fr_word != fr.words),
                             wd.data.eq(fr.data.word_select(fr_word, 8 * bpw)),
                             wd.strb.eq(Cat(*(fr.lanes.word_select(fr_word, bpw // 4)[j // 4]
                                             for j in range(bpw))))]
                with m.If(self.wr_cmd.ready & ~fr_cmd_out):
                    m.d.sync += fr_cmd_out.eq(1)
                with m.If(self.wr_data.ready & (fr_word != fr.words)):
                    m.d.sync += fr_word.eq(fr_word + 1)
                m.d.comb += fr.done.eq((fr_cmd_out | self.wr_cmd.ready) & (
                    (fr_word == fr.words)
                    | (self.wr_data.ready & (fr_word == fr.words - 1))))
                with m.If(fr.done):
                    m.d.sync += [fr_cmd_out.eq(0), fr_word.eq(0)]

        # the next beat is taken as the held one (if any) finishes, never with an exponent
        # write pending (its unit record is popped then)
        take = Signal()
        m.d.comb += [o.ready.eq((~held | beat_done) & ~exp_pending & units.r_rdy),
                     take.eq(o.valid & o.ready)]
        with m.If(take):
            m.d.sync += [h_q.eq(beat.q), h_exp.eq(beat.exp[0]),
                         h_nbytes.eq(Mux(nbytes > C, C, nbytes)),
                         h_addr.eq(cur_row + col0), held.eq(inside), cmd_out.eq(0),
                         word.eq(0), exp_pending.eq(beat.last),
                         exp_cmd_out.eq(0), exp_word_out.eq(0),
                         first.eq(beat.last),
                         row_addr.eq(Mux(beat.seg == S - 1, cur_row + self.desc.c_stride,
                                         cur_row))]
            with m.If(beat.nonfinite):
                m.d.sync += nonf.eq(1)
        with m.If(self.clear):
            m.d.sync += nonf.eq(0)
        m.d.comb += self.nonfinite.eq(nonf)

        # writes in flight: a command issued, not yet acknowledged
        issued = self.wr_cmd.valid & self.wr_cmd.ready
        pending = Signal(range(1 << 10))
        m.d.sync += pending.eq(pending + issued - self.wr_done)
        return ~held & ~exp_pending & (pending == 0)
