"""A float32 matrix read from memory as C tiles: the quantise-only descriptor's source."""

from types import SimpleNamespace

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.spec.regmap import TILE_BLOCK

from .convcursor import conv_geometry_layout
from .dma import dma_command_layout
from .fifo import Fifo
from .readshare import read_word_layout
from .rescale import rescale_output_layout
from .writeback import write_job_layout

__all__ = ["Fp32TileReader", "fpread_desc_layout"]


def fpread_desc_layout(addr_width: int = 32, unfold: bool = False) -> data.StructLayout:
    """What :class:`Fp32TileReader` reads of the running descriptor (held while it runs):
    the matrix's shape, its address and the bytes between its rows; with ``unfold``, also
    whether to unfold a convolution's input and that convolution's geometry
    (:func:`rtl.convcursor.conv_geometry_layout`)."""
    fields = {"m": unsigned(32), "n": unsigned(32), "a_addr": unsigned(addr_width),
              "a_stride": unsigned(32)}
    if unfold:
        fields.update(unfold=1, geometry=conv_geometry_layout())
    return data.StructLayout(fields)


def _row_layout(cols: int, words: int) -> data.StructLayout:
    """A tile row as the command side hands it to the word side: whether it lies inside the
    matrix (its words were asked for), its bus words and its lanes inside the matrix."""
    return data.StructLayout({"inside": 1, "words_m1": range(max(2, words)),
                              "lanes": range(cols + 1)})


class Fp32TileReader(wiring.Component):
    """Reads an ``M x N`` float32 matrix as the C tiles of a BFP8 walk, for
    :class:`rtl.bfpwrite.BfpWriteBack`.

    The tiles come in the order of :func:`sim.models.fpread.tile_jobs`: units (tile blocks of
    ``T`` x ``T``, ``T`` = :data:`firmware.spec.regmap.TILE_BLOCK`) row by row, and inside a
    unit its ``rows`` x ``cols`` tiles inside the matrix row by row, the unit's first tile
    first (``m0`` and ``n0`` multiples of T), as the engine's walker hands a BFP8
    descriptor's C tiles to the write-back. Each tile is one job on :attr:`o_write` and
    ``rows`` beats on :attr:`o_stream`, a beat a tile row of ``cols`` float32 words: row ``m0
    + r``'s elements ``n0 .. n0 + cols - 1``, 0 beyond N, and zero beats for rows beyond M
    (what the datapath gives for a GEMM's padding). Each row inside the matrix is one read
    command on :attr:`rd_cmd` of the bus words that hold its elements inside the matrix,
    at ``a_addr + (m0 + r) * a_stride + 4 * n0``; rows beyond M are not read. ``a_addr``
    and ``a_stride`` are multiples of the bus word (the checker's rule), and a tile row is
    whole bus words (``4 * cols`` a multiple of the bus's bytes), so each command starts at
    a word. The numpy model of record is :func:`sim.models.fpread.tile_rows`.

    The job side runs ahead of the reads by :data:`TILE_QUEUE` tiles, the commands ahead of
    the words by :data:`ROW_QUEUE` rows; the words are taken as they come while a beat's
    register is free. Each row inside the matrix takes ``4 * cols / bus bytes`` cycles on
    the word side (a slot a bus word; its elements beyond N zeroed as it comes in), a row
    beyond M one cycle.

    With ``unfold`` (a build option) and the descriptor's ``unfold`` set, the matrix walked is
    a convolution's input unfolded, :func:`sim.models.conv.unfold` of the ``Cin x H * W *
    batch`` float32 input at ``a_addr`` (rows ``a_stride`` apart) under ``geometry`` (its
    ``mode`` unused): M is ``Cin * kh * kw``, N the output positions ``OH * OW * batch``.
    The batch must be a multiple of T, so that a unit is one output position's images: a
    tile row is then one read of ``cols`` floats, or none where its kernel offset reads
    padding (a zero row, as beyond M). The walk's addresses come from registers stepped by
    constants derived in a set-up of 6 cycles at :attr:`start`: a kernel column, row or
    input channel on from row to row, images, an output column or row on from unit to unit.

    Parameters
    ----------
    rows, cols : int
        Array shape (a tile's rows and lanes): powers of two dividing T.
    data_width, addr_width : int
        AXI bus; ``4 * cols`` a multiple of ``data_width / 8``.
    unfold : bool
        Build the unfolding walk.

    Attributes
    ----------
    desc : In(fpread_desc_layout(addr_width, unfold))
        Taken at :attr:`start`.
    start : In(1)
        Pulse: walk :attr:`desc` (only while :attr:`idle`: the commands of a walk read the
        descriptor taken at its start until its last tile's).
    walking : Out(1)
        Jobs are still to be handed out.
    idle : Out(1)
        No job, command, row or word is held.
    o_write : Out(stream.Signature(rtl.writeback.write_job_layout()))
    o_stream : Out(stream.Signature(rtl.rescale.rescale_output_layout(cols)))
        ``last`` on a tile's last row.
    rd_cmd : Out(stream.Signature(rtl.dma.dma_command_layout(addr_width)))
    rd_words : In(stream.Signature(rtl.readshare.read_word_layout(data_width)))

    Latency
    -------
    A tile's first command is offered 5 cycles after its job (the queue's 2, the tile's
    registers, the row address's product and sum); a row's beat the cycle after its last
    word.

    Throughput
    ----------
    A job a cycle while the queue has room; a command a cycle, 3 cycles more a tile; a word
    a cycle, and a row every ``4 * cols / bus bytes`` cycles (a row beyond M in one).
    """

    #: Tiles the job side runs ahead of the commands.
    TILE_QUEUE = 4
    #: Rows whose commands are out and whose words have not all come.
    ROW_QUEUE = 16

    def __init__(self, rows: int, cols: int, *, data_width: int = 128, addr_width: int = 32,
                 unfold: bool = False):
        T = TILE_BLOCK
        for name, v in (("rows", rows), ("cols", cols)):
            if not isinstance(v, int) or v < 1 or v & (v - 1) or T % v:
                raise ValueError(f"{name} must be a power of two dividing {T}, not {v!r}")
        bpw = data_width // 8
        if data_width not in (64, 128, 256, 512) or (4 * cols) % bpw:
            raise ValueError(f"a tile row of {cols} float32 words must be whole words of a "
                             f"{data_width}-bit bus (64, 128, 256 or 512 bits, 4 * cols a "
                             f"multiple of its bytes)")
        self.rows, self.cols, self.unfold = rows, cols, bool(unfold)
        self.data_width, self.addr_width = data_width, addr_width
        self.words = 4 * cols // bpw                  # bus words a tile row
        super().__init__({
            "desc": In(fpread_desc_layout(addr_width, self.unfold)),
            "start": In(1),
            "walking": Out(1),
            "idle": Out(1),
            "o_write": Out(stream.Signature(write_job_layout())),
            "o_stream": Out(stream.Signature(rescale_output_layout(cols))),
            "rd_cmd": Out(stream.Signature(dma_command_layout(addr_width))),
            "rd_words": In(stream.Signature(read_word_layout(data_width))),
        })

    def elaborate(self, platform):
        m = Module()
        job = write_job_layout()
        m.submodules.tiles = tq = Fifo(width=job.size, depth=self.TILE_QUEUE)
        rl = _row_layout(self.cols, self.words)
        m.submodules.rows = rq = Fifo(width=rl.size, depth=self.ROW_QUEUE)
        # the descriptor, taken at start: the engine may take the next one meanwhile
        self._held = Signal(fpread_desc_layout(self.addr_width, self.unfold),
                            reset_less=True)
        with m.If(self.start & ~self.walking):
            m.d.sync += self._held.eq(self.desc)
        jobs_idle = self._jobs(m, tq)
        cmd_idle = self._commands(m, tq, rq)
        words_idle = self._words(m, rq)
        m.d.comb += self.idle.eq(jobs_idle & tq.empty & cmd_idle & rq.empty & words_idle)
        return m

    # ---- the walk: units row by row, a unit's tiles row by row -----------------------------

    def _jobs(self, m, tq):
        R, C, T = self.rows, self.cols, TILE_BLOCK
        lt = T.bit_length() - 1
        run = Signal()                           # jobs are still to be handed out
        um, un = Signal(17), Signal(17)          # the unit's first row and column
        m0, n0 = Signal(17), Signal(17)          # the tile's
        o = self.o_write
        # (a job is offered only with room for it in the queue)
        m.d.comb += [o.payload.m0.eq(m0), o.payload.n0.eq(n0), o.valid.eq(run & tq.w_rdy),
                     tq.w_data.eq(Cat(m0, n0)), tq.w_en.eq(o.valid & o.ready),
                     self.walking.eq(run)]
        # (``x + step < extent`` as ``x < extent - step``, the differences registered with
        # the descriptor: no adder in front of the comparisons)
        n_c, m_r = Signal(signed(18), reset_less=True), Signal(signed(18), reset_less=True)
        n_t, m_t = Signal(signed(18), reset_less=True), Signal(signed(18), reset_less=True)
        with m.If(self.start & ~run):
            mm, nn = self.desc.m[:17], self.desc.n[:17]
            m.d.sync += [n_c.eq(nn - C), m_r.eq(mm - R), n_t.eq(nn - T), m_t.eq(mm - T),
                         um.eq(0), un.eq(0), m0.eq(0), n0.eq(0), run.eq(1)]
        with m.If(o.valid & o.ready):
            # (the next tile's corner is inside its unit unless this one ends its row, or its
            # column, of the unit)
            with m.If((n0 < n_c) & (n0[:lt] != T - C)):
                m.d.sync += n0.eq(n0 + C)                 # the next tile of the row
            with m.Elif((m0 < m_r) & (m0[:lt] != T - R)):
                m.d.sync += [n0.eq(un), m0.eq(m0 + R)]    # the unit's next tile row
            with m.Elif(un < n_t):
                m.d.sync += [un.eq(un + T), n0.eq(un + T), m0.eq(um)]   # the next unit
            with m.Elif(um < m_t):
                m.d.sync += [un.eq(0), n0.eq(0), um.eq(um + T), m0.eq(um + T)]
            with m.Else():
                m.d.sync += run.eq(0)
        return ~run

    # ---- a tile -> a read command a row inside the matrix ---------------------------------

    def _commands(self, m, tq, rq):
        R, C, AW = self.rows, self.cols, self.addr_width
        F = self.data_width // 32                     # float32 words a bus word
        lf = F.bit_length() - 1
        d, cmd = self._held, self.rd_cmd
        tile = data.View(write_job_layout(), tq.r_data)
        row = data.View(_row_layout(C, self.words), rq.w_data)
        m0 = Signal(17, reset_less=True)
        r = Signal(range(R))
        lanes = Signal(range(C + 1), reset_less=True)
        rows_in = Signal(range(R + 1), reset_less=True)
        prod = Signal(AW + 17, reset_less=True)
        n_bytes = Signal(19, reset_less=True)
        addr = Signal(AW, reset_less=True)
        words_m1 = Signal(range(max(2, self.words)), reset_less=True)
        u = self._unfold_regs(m) if self.unfold else None
        with m.FSM(name="commands") as fsm:
            with m.State("TILE"):
                m.d.comb += tq.r_en.eq(1)
                with m.If(tq.r_rdy):
                    rem_m, rem_n = Signal(18), Signal(18)
                    m.d.comb += [rem_m.eq(d.m[:17] - tile.m0), rem_n.eq(d.n[:17] - tile.n0)]
                    m.d.sync += [m0.eq(tile.m0), n_bytes.eq(tile.n0 << 2), r.eq(0),
                                 lanes.eq(Mux(rem_n >= C, C, rem_n)),
                                 rows_in.eq(Mux(rem_m >= R, R, rem_m))]
                    if u is not None:
                        with m.If(d.unfold):
                            self._unfold_tile(m, u, tile, m0)
                    m.next = "PRODUCT"
                if u is not None:
                    with m.If(self.start & self.desc.unfold):
                        m.next = "SETUP"
            if u is not None:
                with m.State("SETUP"):               # the unfold's steps, from the geometry
                    with m.If(u.setup_done):
                        m.next = "TILE"
            with m.State("PRODUCT"):                  # the tile's first row's address
                m.d.sync += [prod.eq(m0 * d.a_stride),
                             words_m1.eq(((lanes + F - 1) >> lf) - 1)]
                if u is not None:
                    m.d.sync += [u.hi.eq(u.hbase + u.row.dyh), u.wi.eq(u.wbase + u.row.dxw),
                                 u.first.eq(u.unit_addr + n_bytes[:TILE_BLOCK.bit_length() + 1]),
                                 u.step.eq(Mux(d.unfold, u.choose(u.row.fx, u.row.fy),
                                               d.a_stride))]
                m.next = "BASE"
            with m.State("BASE"):
                base = d.a_addr + prod + n_bytes
                m.d.sync += addr.eq(base if u is None else
                                    Mux(d.unfold, u.first + u.row.off, base))
                m.next = "ROWS"
            with m.State("ROWS"):                     # a row's command and its record
                inside = r < rows_in
                if u is not None:
                    # (an unfolded row reads nothing where its kernel offset is in padding)
                    inside = inside & (~d.unfold | u.in_image)
                m.d.comb += [cmd.payload.addr.eq(addr), cmd.payload.beats.eq(words_m1 + 1),
                             row.inside.eq(inside), row.words_m1.eq(words_m1),
                             row.lanes.eq(lanes),
                             cmd.valid.eq(inside & rq.w_rdy)]
                go = rq.w_rdy & (cmd.ready | ~inside)
                m.d.comb += rq.w_en.eq(go)
                with m.If(go):
                    step = d.a_stride if u is None else u.step
                    m.d.sync += [r.eq(r + 1), addr.eq(addr + step)]
                    if u is not None:
                        with m.If(d.unfold):
                            self._unfold_row_step(m, u)
                    with m.If(r == R - 1):
                        m.next = "TILE"
        return fsm.ongoing("TILE")

    # ---- unfolding a convolution's input ------------------------------------------------

    def _unfold_regs(self, m):
        """The unfold's registers and its set-up: steps derived from the held geometry in
        registered stages (``setup_done`` once they have settled)."""
        AW, T = self.addr_width, TILE_BLOCK
        g, d = self._held.geometry, self._held

        def reg(width, name):
            return Signal(width, name=f"uf_{name}", reset_less=True)

        u = SimpleNamespace()
        # a row's place in the unfolded matrix: kernel column and row, whether each is the
        # kernel's last, their dilated offsets, and its address less the unit's (the input
        # channel's row and offset)
        row_layout = data.StructLayout({"dx": 4, "dy": 4, "fx": 1, "fy": 1, "dxw": 8,
                                        "dyh": 8, "off": unsigned(AW)})
        u.row, u.tile_row, u.unit_row = (Signal(row_layout, name=f"uf_{n}", reset_less=True)
                                         for n in ("row", "tile_row", "unit_row"))
        u.prev_m0 = reg(17, "prev_m0")
        # the unit's image position: its top-left input pixel (padding less), its first
        # image, its address, and that of its output row's first unit
        u.hbase, u.wbase = reg(signed(18), "hbase"), reg(signed(18), "wbase")
        u.nb = reg(16, "nb")
        u.unit = reg(17 - (T.bit_length() - 1), "unit")
        u.unit_addr, u.line_addr = reg(AW, "unit_addr"), reg(AW, "line_addr")
        u.first = reg(AW, "first")
        u.hi, u.wi = reg(signed(18), "hi"), reg(signed(18), "wi")
        # the kernel's last column and row, the ones before them, and whether it has one
        kw_m1, kh_m1 = reg(4, "kw_m1"), reg(4, "kh_m1")
        u.kw_m2, u.kh_m2 = reg(4, "kw_m2"), reg(4, "kh_m2")
        u.kw1, u.kh1 = reg(1, "kw1"), reg(1, "kh1")
        # steps, from the geometry: a kernel column (step_j), row (step_i) and input
        # channel (step_c) on in the rows; an image, position and output row on in the units
        nb4 = reg(22, "nb4")                     # 4 N: an image position's bytes
        nb4_less = reg(23, "nb4_less")           # 4 N - 4 T
        line = reg(AW, "line")                   # 4 N W: an image row's
        sw = reg(AW, "sw")                       # 4 N stride_w
        u.step_j, u.step_i, u.step_c = reg(AW, "step_j"), reg(AW, "step_i"), reg(AW, "step_c")
        u.step_w, u.step_h = reg(AW, "step_w"), reg(AW, "step_h")
        u.origin = reg(AW, "origin")
        u.wlim = reg(signed(18), "wlim")
        wl0, dkw = reg(signed(18), "wl0"), reg(12, "dkw")
        back_j, back_i, full_i = reg(AW, "back_j"), reg(AW, "back_i"), reg(AW, "full_i")
        ph, pw = reg(AW, "ph"), reg(AW, "pw")
        origin_w, step_c0 = reg(AW, "origin_w"), reg(AW, "step_c0")
        stage = Signal(range(6), name="uf_stage")
        u.setup_done = stage == 5
        with m.If(self.start & ~self.walking):
            m.d.sync += stage.eq(0)
        with m.Elif(~u.setup_done):
            m.d.sync += stage.eq(stage + 1)
        # (one operation a register, a product or a sum: each settles in a cycle; the
        # longest chain, nb4 -> line -> full_i -> back_i -> step_c, in 5)
        m.d.sync += [
            kw_m1.eq(g.kernel_w - 1), kh_m1.eq(g.kernel_h - 1),
            u.kw_m2.eq(g.kernel_w - 2), u.kh_m2.eq(g.kernel_h - 2),
            u.kw1.eq(g.kernel_w == 1), u.kh1.eq(g.kernel_h == 1),
            nb4.eq(g.batch << 2),
            wl0.eq(g.width - 1 + g.pad_w),
            nb4_less.eq(nb4 - 4 * T),
            dkw.eq(g.dilation_w * kw_m1),
            line.eq(nb4 * g.width),
            u.step_j.eq(nb4 * g.dilation_w),
            sw.eq(nb4 * g.stride_w),
            pw.eq(nb4 * g.pad_w),
            full_i.eq(line * g.dilation_h),
            back_j.eq(u.step_j * kw_m1),
            u.step_w.eq(sw - nb4_less),
            u.step_h.eq(line * g.stride_h),
            ph.eq(line * g.pad_h),
            origin_w.eq(d.a_addr - pw),
            u.wlim.eq(wl0 - dkw),
            back_i.eq(full_i * kh_m1),
            u.step_i.eq(full_i - back_j),
            step_c0.eq(d.a_stride - back_j),
            u.origin.eq(origin_w - ph),
            u.step_c.eq(step_c0 - back_i),
        ]
        # a row inside the image: its input pixel is not padding
        u.in_image = (u.hi >= 0) & (u.hi < g.height) & (u.wi >= 0) & (u.wi < g.width)
        # the row step's address increment, registered with the row (``choose``: the
        # increment out of a row with these flags)
        u.step = reg(AW, "step")
        u.choose = lambda fx, fy: Mux(~fx, u.step_j, Mux(~fy, u.step_i, u.step_c))
        return u

    def _unfold_tile(self, m, u, tile, m0):
        """At a tile: its rows' kernel offsets and channel (from 0 at the matrix's first
        row; again the tile before's at the same rows; on from the tile before's last row;
        else, a unit's first tile, the unit row's first), and its unit's image position
        (from the image's origin at column 0; one unit on at a new unit)."""
        T, R = TILE_BLOCK, self.rows
        g = self._held.geometry
        lt = T.bit_length() - 1
        m.d.sync += u.prev_m0.eq(tile.m0)
        with m.If(tile.m0 == 0):
            for r in (u.row, u.tile_row, u.unit_row):
                m.d.sync += [r.eq(0), r.fx.eq(u.kw1), r.fy.eq(u.kh1)]
        with m.Elif(tile.m0 == u.prev_m0):
            m.d.sync += u.row.eq(u.tile_row)
        with m.Elif(tile.m0 == u.prev_m0 + R):
            m.d.sync += u.tile_row.eq(u.row)
            with m.If(tile.m0[:lt] == 0):
                m.d.sync += u.unit_row.eq(u.row)
        with m.Else():
            m.d.sync += [u.row.eq(u.unit_row), u.tile_row.eq(u.unit_row)]
        un = tile.n0[lt:17]
        with m.If(tile.n0 == 0):
            m.d.sync += [u.unit.eq(0), u.nb.eq(0), u.hbase.eq(-g.pad_h), u.wbase.eq(-g.pad_w),
                         u.unit_addr.eq(u.origin), u.line_addr.eq(u.origin)]
        with m.Elif(un != u.unit):
            m.d.sync += u.unit.eq(un)
            with m.If(u.nb + T != g.batch):           # the next images, same position
                m.d.sync += [u.nb.eq(u.nb + T), u.unit_addr.eq(u.unit_addr + 4 * T)]
            with m.Elif(u.wbase + g.stride_w <= u.wlim):   # the next output column
                m.d.sync += [u.nb.eq(0), u.wbase.eq(u.wbase + g.stride_w),
                             u.unit_addr.eq(u.unit_addr + u.step_w)]
            with m.Else():                                 # the next output row
                m.d.sync += [u.nb.eq(0), u.wbase.eq(-g.pad_w), u.hbase.eq(u.hbase + g.stride_h),
                             u.unit_addr.eq(u.line_addr + u.step_h),
                             u.line_addr.eq(u.line_addr + u.step_h)]

    def _unfold_row_step(self, m, u):
        """A row on: the next kernel column, else the next kernel row, else the next input
        channel; the pixel it reads moves with it, and the next row's flags and increment
        are set from its kernel offsets (no comparison in front of the address sum)."""
        g = self._held.geometry
        r = u.row
        fx, fy = Signal(name="uf_next_fx"), Signal(name="uf_next_fy")
        m.d.sync += [r.off.eq(r.off + u.step), r.fx.eq(fx), r.fy.eq(fy),
                     u.step.eq(u.choose(fx, fy))]
        with m.If(~r.fx):
            m.d.comb += [fx.eq(r.dx == u.kw_m2), fy.eq(r.fy)]
            m.d.sync += [r.dx.eq(r.dx + 1), r.dxw.eq(r.dxw + g.dilation_w),
                         u.wi.eq(u.wi + g.dilation_w)]
        with m.Else():
            m.d.comb += fx.eq(u.kw1)
            m.d.sync += [r.dx.eq(0), r.dxw.eq(0), u.wi.eq(u.wbase)]
            with m.If(~r.fy):
                m.d.comb += fy.eq(r.dy == u.kh_m2)
                m.d.sync += [r.dy.eq(r.dy + 1), r.dyh.eq(r.dyh + g.dilation_h),
                             u.hi.eq(u.hi + g.dilation_h)]
            with m.Else():
                m.d.comb += fy.eq(u.kh1)
                m.d.sync += [r.dy.eq(0), r.dyh.eq(0), u.hi.eq(u.hbase)]

    # ---- words -> a beat a row ------------------------------------------------------------

    def _words(self, m, rq):
        R, C, W = self.rows, self.cols, self.words
        F = self.data_width // 32                      # float32 words a bus word
        DW = self.data_width
        head = data.View(_row_layout(C, W), rq.r_data)
        w, o = self.rd_words, self.o_stream
        # A row is W slots, each a bus word: read (inside the matrix, up to its last word)
        # or zero (beyond N or M). The slots before the last shift into ``sh``; the last
        # one and ``sh`` make the beat. No wide multiplexer: a slot's elements beyond N are
        # zeroed as it comes in.
        wi = Signal(range(max(2, W)))                  # the row's slot
        beat_r = Signal(range(R))                      # the beat's row in its tile
        out_free = ~o.valid | o.ready
        # (a row beyond M is one slot: its beat is zeros, and nothing is read for it)
        last_slot = (wi == W - 1) | ~head.inside
        real = head.inside & (wi <= head.words_m1)
        keep = [(wi * F + f) < head.lanes for f in range(F)]
        slot = Cat(*(Mux(real & keep[f], w.payload.data[32 * f:32 * (f + 1)], 0)
                     for f in range(F)))
        sh = Signal((W - 1) * DW, reset_less=True) if W > 1 else None
        go = Signal()                                  # the slot passes this cycle
        m.d.comb += [go.eq(rq.r_rdy & (w.valid | ~real) & (~last_slot | out_free)),
                     w.ready.eq(rq.r_rdy & real & (~last_slot | out_free))]
        with m.If(o.valid & o.ready):
            m.d.sync += [o.valid.eq(0), beat_r.eq(beat_r + 1)]
        with m.If(go):
            with m.If(last_slot):
                m.d.comb += rq.r_en.eq(1)
                # (a zero row's beat: the slots of the row before may still be in ``sh``;
                # a register's synchronous reset, not a multiplexer in front of it)
                m.d.sync += [wi.eq(0), o.valid.eq(1),
                             o.payload.data.eq(Mux(head.inside, Cat(sh, slot), 0)
                                               if W > 1 else slot),
                             o.payload.last.eq(beat_r + (o.valid & o.ready) == R - 1)]
            with m.Else():
                m.d.sync += wi.eq(wi + 1)
                if W > 1:
                    m.d.sync += sh.eq(Cat(sh[DW:], slot) if W > 2 else slot)
        return ~o.valid & (wi == 0)
