"""The descriptor engine: one whole GEMM per descriptor, tiled over the datapath, through DMA."""

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.regmap import ErrorCode

from .datapath import GemmDatapath
from .dma import dma_command_layout, dma_write_layout
from .gearbox import Gearbox

__all__ = ["GemmEngine", "descriptor_layout"]


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


def _log2(x):
    return x.bit_length() - 1


class GemmEngine(wiring.Component):
    """Runs one GEMM descriptor at a time: checks it, tiles it, moves it, computes it.

    ``C[M x N] = rescale(op(A) op(B), row_exp, col_exp)`` with A, B int8 and C float32 (or raw
    int32) in memory, row-major with byte strides. The engine

    1. checks the descriptor before touching memory (dimensions, alignment to the bus width,
       strides, the ``[window_base, window_limit)`` address window) and reports the first
       failing :class:`firmware.regmap.ErrorCode` on :attr:`fail` / :attr:`code`;
    2. walks blocks of ``block x block`` C tiles; for each K chunk of at most ``depth`` it
       loads the block's ``block`` A tiles and ``block`` B tiles once (A and B read as stored,
       transposed or not: the datapath's buffers transpose) and runs the ``block**2`` tile
       GEMMs, keeping partial sums on chip; chunks alternate between two sets of buffer slots,
       so the next chunk loads while this one computes;
    3. fetches exponent vectors per block; rescales; writes C rows with byte strobes that leave
       everything beyond column N untouched.

    Rows and columns of a tile beyond the matrix edge are zeros (never read); C rows beyond M
    are dropped. Memory is read through :attr:`rd_cmd` / :attr:`rd_data` (a
    :class:`rtl.dma.DmaReader`) and written through :attr:`wr_cmd` / :attr:`wr_data` /
    :attr:`wr_done` (a :class:`rtl.dma.DmaWriter`).

    Parameters
    ----------
    rows, cols : int
        Array shape; powers of two.
    depth : int
        K chunk (operand buffer depth per slot); a power of two >= the bus width in bytes.
    data_width, addr_width : int
        AXI bus.
    block : int
        C tiles per block side (buffer slots ``2 * block``, accumulation slots ``block**2``).
    packing, primitive, dsp_rows :
        Passed to :class:`rtl.datapath.GemmDatapath`.

    Members
    -------
    start : In(1)
        Pulse: run :attr:`desc` (sampled in that cycle). Only when :attr:`busy` is low.
    desc : In(descriptor_layout())
    window_base, window_limit : In(64)
    busy : Out(1)
    done : Out(1)
        Pulses when every C row of the descriptor is in memory.
    fail : Out(1)
        The descriptor was rejected (nothing touched); :attr:`code` says why. Stays set until
        reset.
    code : Out(8)
    macs : Out(48)
        ``M * N * K`` of the running descriptor (valid from the cycle after ``start`` + 2).
    step, wait_dma : Out(1)
        The array does useful MACs this cycle; the datapath waits for operand data.
    """

    def __init__(self, rows: int = 8, cols: int = 8, *, depth: int = 512,
                 data_width: int = 128, addr_width: int = 32, block: int = 4,
                 packing: int = 1, primitive: bool = False, dsp_rows: int | None = None):
        for name, v in (("rows", rows), ("cols", cols)):
            if not isinstance(v, int) or v < 2 or v & (v - 1) or v > 256:
                raise ValueError(f"{name} must be a power of two in 2..256, not {v!r}")
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        if addr_width not in (32, 40, 64):
            raise ValueError(f"addr_width must be 32, 40 or 64, not {addr_width!r}")
        if (not isinstance(depth, int) or depth & (depth - 1) or depth < data_width // 8
                or depth < max(rows, cols) or depth > 32768):
            raise ValueError(f"depth must be a power of two from max(rows, cols, bus bytes) "
                             f"to 32768, not {depth!r}")
        if not isinstance(block, int) or block < 1 or block & (block - 1) or block > 16:
            raise ValueError(f"block must be a power of two in 1..16, not {block!r}")
        self.rows, self.cols, self.depth, self.block = rows, cols, depth, block
        self.data_width, self.addr_width = data_width, addr_width
        self.datapath = GemmDatapath(rows, cols, depth, slots=max(2, 2 * block),
                                     acc_slots=block * block, lookahead=block * block + 2,
                                     packing=packing,
                                     primitive=primitive, dsp_rows=dsp_rows)
        super().__init__({
            "start": In(1),
            "desc": In(descriptor_layout()),
            "window_base": In(64),
            "window_limit": In(64),
            "busy": Out(1), "done": Out(1), "fail": Out(1), "code": Out(8),
            "macs": Out(48), "step": Out(1), "wait_dma": Out(1),
            "rd_cmd": Out(stream.Signature(dma_command_layout(addr_width))),
            "rd_data": In(stream.Signature(data.StructLayout({"data": data_width,
                                                              "last": 1}))),
            "wr_cmd": Out(stream.Signature(dma_command_layout(addr_width))),
            "wr_data": Out(stream.Signature(dma_write_layout(data_width))),
            "wr_done": In(1),
        })

    # ------------------------------------------------------------------------------------------
    def elaborate(self, platform):
        m = Module()
        R, C, D, BL = self.rows, self.cols, self.depth, self.block
        bpw = self.data_width // 8
        wlog = _log2(bpw)
        m.submodules.datapath = dp = self.datapath
        tag_width = 1 + max(1, _log2(BL))
        m.submodules.gb_a = gb_a = Gearbox(self.data_width, R, tag_width)
        m.submodules.gb_b = gb_b = Gearbox(self.data_width, C, tag_width)

        d = Signal(descriptor_layout())          # the running descriptor
        m.d.comb += [self.step.eq(dp.step),
                     self.wait_dma.eq((dp.a_stream.ready & ~dp.a_stream.valid)
                                      | (dp.b_stream.ready & ~dp.b_stream.valid))]

        # ---- exponent registers -----------------------------------------------------------
        rexp = [Signal(data.ArrayLayout(signed(8), R), name=f"rexp{i}") for i in range(BL)]
        cexp = [Signal(data.ArrayLayout(signed(8), C), name=f"cexp{j}") for j in range(BL)]
        exp_pending = Signal(range(2 * BL + 1))

        # ---- read routing: reader words -> gearbox of the tile's operand ------------------
        route_layout = data.StructLayout({"path": 1, "rows": unsigned(16)})
        m.submodules.route = route = fifo.SyncFIFOBuffered(width=route_layout.size, depth=8)
        rhead = data.View(route_layout, route.r_data)
        lasts = Signal(16)
        word_in = self.rd_data
        to_a = route.r_rdy & (rhead.path == 0)
        to_b = route.r_rdy & (rhead.path == 1)
        m.d.comb += [
            gb_a.i_stream.payload.eq(word_in.payload.data),
            gb_b.i_stream.payload.eq(word_in.payload.data),
            gb_a.i_stream.valid.eq(word_in.valid & to_a),
            gb_b.i_stream.valid.eq(word_in.valid & to_b),
            word_in.ready.eq((to_a & gb_a.i_stream.ready) | (to_b & gb_b.i_stream.ready)),
        ]
        with m.If(word_in.valid & word_in.ready & word_in.payload.last):
            with m.If(lasts == rhead.rows - 1):
                m.d.comb += route.r_en.eq(1)
                m.d.sync += lasts.eq(0)
            with m.Else():
                m.d.sync += lasts.eq(lasts + 1)

        # gearbox outputs: operand vectors -> datapath, exponent vectors -> registers
        exp_written = Signal(range(3))
        for gb, port, regs in ((gb_a, dp.a_stream, rexp), (gb_b, dp.b_stream, cexp)):
            is_exp = gb.o_stream.payload.tag[0]
            m.d.comb += [port.payload.eq(gb.o_stream.payload.data),
                         port.valid.eq(gb.o_stream.valid & ~is_exp),
                         gb.o_stream.ready.eq(Mux(is_exp, 1, port.ready))]
            with m.If(gb.o_stream.valid & is_exp):
                m.d.sync += Array(regs)[gb.o_stream.payload.tag[1:]].eq(gb.o_stream.payload.data)
        m.d.comb += exp_written.eq((gb_a.o_stream.valid & gb_a.o_stream.payload.tag[0])
                                   + (gb_b.o_stream.valid & gb_b.o_stream.payload.tag[0]))

        # ---- datapath commands ------------------------------------------------------------
        cmd_layout = data.StructLayout({
            "k": unsigned(16), "a_slot": range(max(2, 2 * BL)), "b_slot": range(max(2, 2 * BL)),
            "load_a": 1, "load_b": 1, "a_extra": range(max(2, 2 * BL)),
            "b_extra": range(max(2, 2 * BL)), "emit": 1, "store": 1, "add": 1,
            "acc_slot": range(BL * BL), "i": range(BL), "j": range(BL)})
        m.submodules.cmdq = cmdq = fifo.SyncFIFOBuffered(width=cmd_layout.size,
                                                         depth=max(4, BL * BL))
        chead = data.View(cmd_layout, cmdq.r_data)
        dcmd = dp.cmd.payload
        m.d.comb += [
            dp.cmd.valid.eq(cmdq.r_rdy & (exp_pending == 0)),
            cmdq.r_en.eq(dp.cmd.ready & (exp_pending == 0)),
            dcmd.k.eq(chead.k), dcmd.a_slot.eq(chead.a_slot), dcmd.b_slot.eq(chead.b_slot),
            dcmd.load_a.eq(chead.load_a), dcmd.load_b.eq(chead.load_b),
            dcmd.a_extra.eq(chead.a_extra), dcmd.b_extra.eq(chead.b_extra),
            dcmd.transpose_a.eq(d.transpose_a), dcmd.transpose_b.eq(d.transpose_b),
            dcmd.clear.eq(1), dcmd.emit.eq(chead.emit), dcmd.store.eq(chead.store),
            dcmd.add.eq(chead.add), dcmd.acc_slot.eq(chead.acc_slot), dcmd.raw.eq(d.raw),
        ]
        rsel = Array(rexp)[chead.i]
        csel = Array(cexp)[chead.j]
        for r in range(R):
            m.d.comb += dcmd.row_exp[r].eq(Mux(d.row_vec, rsel[r], d.row_exp))
        for c in range(C):
            m.d.comb += dcmd.col_exp[c].eq(Mux(d.col_vec, csel[c], d.col_exp))

        # ---- write-back: C rows -> bus words with strobes ---------------------------------
        wjob_layout = data.StructLayout({"m0": unsigned(17), "n0": unsigned(17)})
        m.submodules.wq_cmd = wq_cmd = fifo.SyncFIFOBuffered(width=wjob_layout.size,
                                                             depth=max(4, BL * BL))
        m.submodules.wq_data = wq_data = fifo.SyncFIFOBuffered(width=wjob_layout.size,
                                                               depth=max(4, BL * BL))
        row_bytes = 4 * C
        words_per_row = max(1, row_bytes // bpw)

        def row_words(n0):
            """Bus words of a C row holding columns of the matrix: none beyond them."""
            if row_bytes <= bpw:
                return 1
            left = d.n - n0
            cols_in = Mux(left < C, left, C)
            return ((cols_in << 2) + bpw - 1) >> wlog
        writes_issued = Signal(32)
        writes_done = Signal(32)

        # command side: one DMA write per C row inside the matrix
        wc = data.View(wjob_layout, wq_cmd.r_data)
        wc_row = Signal(range(R))
        wc_addr = Signal(64)
        wc_setup = Signal()           # wc_addr holds the tile's first row address
        with m.If(wq_cmd.r_rdy & ~wc_setup):
            col_byte = Cat(Const(0, 2), wc.n0)          # n0 * 4
            m.d.sync += [wc_addr.eq(d.c_addr + wc.m0 * d.c_stride
                                    + (col_byte >> wlog << wlog)),
                         wc_setup.eq(1), wc_row.eq(0)]
        row_in = (wc.m0 + wc_row) < d.m
        m.d.comb += [self.wr_cmd.payload.addr.eq(wc_addr),
                     self.wr_cmd.payload.beats.eq(row_words(wc.n0)),
                     self.wr_cmd.valid.eq(wc_setup & row_in)]
        with m.If(wc_setup & (~row_in | self.wr_cmd.ready)):
            m.d.sync += [wc_row.eq(wc_row + 1), wc_addr.eq(wc_addr + d.c_stride)]
            with m.If(wc_row == R - 1):
                m.d.comb += wq_cmd.r_en.eq(1)
                m.d.sync += wc_setup.eq(0)
        m.d.sync += [writes_issued.eq(writes_issued + (self.wr_cmd.valid & self.wr_cmd.ready)),
                     writes_done.eq(writes_done + self.wr_done)]

        # data side: the datapath's C rows, cut into words
        wd = data.View(wjob_layout, wq_data.r_data)
        wd_row = Signal(range(R))
        wd_word = Signal(range(max(2, words_per_row)))
        orow = dp.o_stream.payload
        row_bits = Signal(32 * C)
        m.d.comb += row_bits.eq(orow.data.as_value())
        n_valid = Signal(18)            # columns of this tile inside the matrix
        left = d.n - wd.n0
        m.d.comb += n_valid.eq(Mux(left < C, left, C))
        wdata = self.wr_data.payload
        if row_bytes >= bpw:
            chunks = [row_bits[8 * bpw * w:8 * bpw * (w + 1)] for w in range(words_per_row)]
            m.d.comb += wdata.data.eq(Array(chunks)[wd_word])
            for t in range(bpw):
                m.d.comb += wdata.strb[t].eq(
                    ((Cat(Const(t, wlog), wd_word) if wlog else wd_word) >> 2) < n_valid)
        else:
            off = Signal(range(bpw))
            m.d.comb += off.eq(Cat(Const(0, 2), wd.n0)[:wlog])   # (n0 * 4) mod bus bytes
            m.d.comb += wdata.data.eq(row_bits << (off * 8))
            row_strb = Cat(*[(c < n_valid).replicate(4) for c in range(C)])
            m.d.comb += wdata.strb.eq(row_strb << off)
        wd_in = (wd.m0 + wd_row) < d.m
        row_end = wd_word == row_words(wd.n0) - 1
        m.d.comb += [
            self.wr_data.valid.eq(wq_data.r_rdy & dp.o_stream.valid & wd_in),
            dp.o_stream.ready.eq(wq_data.r_rdy & (~wd_in | (self.wr_data.ready & row_end))),
        ]
        with m.If(self.wr_data.valid & self.wr_data.ready):
            m.d.sync += wd_word.eq(Mux(row_end, 0, wd_word + 1))
        with m.If(dp.o_stream.valid & dp.o_stream.ready):
            m.d.sync += wd_row.eq(wd_row + 1)
            with m.If(wd_row == R - 1):
                m.d.comb += wq_data.r_en.eq(1)
                m.d.sync += wd_row.eq(0)

        # ---- walker -----------------------------------------------------------------------
        mul_a = Signal(32)
        mul_b = Signal(32)
        product = Signal(64)
        m.d.sync += product.eq(mul_a * mul_b)

        m_blk = Signal(17)       # first row / column of the block
        n_blk = Signal(17)
        k0 = Signal(17)
        ti = Signal(range(BL))
        tj = Signal(range(BL))
        bm = Signal(range(BL + 1))
        bn = Signal(range(BL + 1))
        parity = Signal()
        kc = Signal(17)
        last_chunk = Signal()
        m.d.comb += [kc.eq(Mux(d.k - k0 < D, d.k - k0, D)), last_chunk.eq(k0 + D >= d.k)]
        m0 = Signal(17)
        n0 = Signal(17)
        m.d.comb += [m0.eq(m_blk + (ti << _log2(R))), n0.eq(n_blk + (tj << _log2(C)))]
        ei = Signal(range(2 * BL + 1))       # exponent vector being fetched
        ex_m0 = Signal(17)
        ex_n0 = Signal(17)
        m.d.comb += [ex_m0.eq(m_blk + (ei[:max(1, _log2(BL))] << _log2(R)) if BL > 1 else m_blk),
                     ex_n0.eq(n_blk + (ei[:max(1, _log2(BL))] << _log2(C)) if BL > 1 else n_blk)]

        # the load being issued: DMA rows, and the gearbox job that turns them into vectors
        ld = {name: Signal(width, name=f"ld_{name}") for name, width in (
            ("base", 64), ("stride", 32), ("row0", 17), ("col", 64), ("rows", 17),
            ("nzero", 17), ("nwords", 16), ("nbeats", 16), ("valid", 17), ("sel", 8),
            ("tag", tag_width), ("path", 1), ("addr", 64), ("count", 17))}
        ld_exp = Signal()       # the load fetches an exponent vector (return to EXP)

        def lanes_valid(name, lanes, limit, x0):
            v = Signal(18, name=name)
            m.d.comb += v.eq(Mux(limit - x0 < lanes, limit - x0, lanes))
            return v

        v_a = lanes_valid("v_a", R, d.m, m0)
        v_b = lanes_valid("v_b", C, d.n, n0)
        v_as = lanes_valid("v_as", BL * R, d.m, m_blk)     # a span of k-major A tiles
        v_bs = lanes_valid("v_bs", BL * C, d.n, n_blk)
        v_re = lanes_valid("v_re", R, d.m, ex_m0)
        v_ce = lanes_valid("v_ce", C, d.n, ex_n0)

        def setup_load(path, lanes, lane_run, v, x0, base, stride, tag=0, exp=False,
                       span=1, v_span=None):
            """Registers the load of one operand tile, a span of k-major tiles, or an
            exponent vector.

            k-major loads read, per step, the ``span`` neighbouring tiles' bytes of the row
            (``v_span`` of them inside the matrix) as one run of bus words: one burst per row
            instead of one per row and tile.
            """
            v_k = v if v_span is None else v_span
            sel = (x0 & (bpw - 1)) >> _log2(lanes) if lanes <= bpw else 0
            kmaj_words = (((x0 & (bpw - 1)) if lanes <= bpw else 0) + v_k + bpw - 1) >> wlog
            m.d.sync += [ld["base"].eq(base), ld["stride"].eq(stride), ld["path"].eq(path),
                         ld["tag"].eq(tag), ld_exp.eq(exp)]
            kmaj = [ld["row0"].eq(0 if exp else k0), ld["col"].eq(x0 >> wlog << wlog),
                    ld["rows"].eq(1 if exp else kc), ld["nzero"].eq(0),
                    ld["nwords"].eq(kmaj_words), ld["nbeats"].eq(span), ld["valid"].eq(v_k),
                    ld["sel"].eq(sel)]
            run = [ld["row0"].eq(x0), ld["col"].eq(k0), ld["rows"].eq(v),
                   ld["nzero"].eq(lanes - v), ld["nwords"].eq((kc + bpw - 1) >> wlog),
                   ld["nbeats"].eq((kc + lanes - 1) >> _log2(lanes)), ld["valid"].eq(kc),
                   ld["sel"].eq(0)]
            if exp:
                m.d.sync += kmaj
            else:
                with m.If(lane_run):
                    m.d.sync += run
                with m.Else():
                    m.d.sync += kmaj

        for gb in (gb_a, gb_b):
            m.d.comb += [gb.jobs.payload.nrows.eq(ld["rows"]),
                         gb.jobs.payload.nzero.eq(ld["nzero"]),
                         gb.jobs.payload.nwords.eq(ld["nwords"]),
                         gb.jobs.payload.nbeats.eq(ld["nbeats"]),
                         gb.jobs.payload.valid.eq(ld["valid"]),
                         gb.jobs.payload.sel.eq(ld["sel"]),
                         gb.jobs.payload.tag.eq(ld["tag"])]
        job_ready = Mux(ld["path"], gb_b.jobs.ready, gb_a.jobs.ready)
        route_in = data.View(route_layout, route.w_data)
        m.d.comb += [route_in.path.eq(ld["path"]), route_in.rows.eq(ld["rows"]),
                     self.rd_cmd.payload.addr.eq(ld["addr"]),
                     self.rd_cmd.payload.beats.eq(ld["nwords"])]
        exp_job = Signal()
        m.d.sync += exp_pending.eq(exp_pending + exp_job - exp_written)

        phase = Signal(2)        # CMD: 0 issue, 1 load A, 2 load B, 3 next
        cmd_in = data.View(cmd_layout, cmdq.w_data)
        wjob_in = [data.View(wjob_layout, q.w_data) for q in (wq_cmd, wq_data)]
        # k-major operands (A transposed, B as stored) load the block's tiles as one span
        # with its first command; the others load each tile with the first command using it.
        first_cmd = (ti == 0) & (tj == 0)
        load_a = Signal()
        load_b = Signal()
        m.d.comb += [load_a.eq(Mux(d.transpose_a, first_cmd, tj == 0)),
                     load_b.eq(Mux(d.transpose_b, ti == 0, first_cmd))]
        m.d.comb += [cmd_in.k.eq(kc), cmd_in.a_slot.eq(Cat(ti, parity) if BL > 1 else parity),
                     cmd_in.b_slot.eq(Cat(tj, parity) if BL > 1 else parity),
                     cmd_in.load_a.eq(load_a), cmd_in.load_b.eq(load_b),
                     cmd_in.a_extra.eq(Mux(d.transpose_a, bm - 1, 0)),
                     cmd_in.b_extra.eq(Mux(d.transpose_b, 0, bn - 1)),
                     cmd_in.emit.eq(last_chunk), cmd_in.store.eq(~last_chunk),
                     cmd_in.add.eq(k0 != 0), cmd_in.acc_slot.eq(ti * BL + tj),
                     cmd_in.i.eq(ti), cmd_in.j.eq(tj)]
        for w in wjob_in:
            m.d.comb += [w.m0.eq(m0), w.n0.eq(n0)]

        # ---- check ------------------------------------------------------------------------
        region = Signal(range(6))
        bad_align = Signal()
        bad_stride = Signal()
        bad_window = Signal()
        rg_base = Signal(64)
        rg_rows = Signal(33)
        rg_stride = Signal(32)
        rg_bytes = Signal(35)
        rg_on = Signal()
        regions = [
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

        def fail(c):
            m.d.sync += [self.fail.eq(1), self.code.eq(int(c))]
            m.next = "FAIL"

        with m.FSM(name="engine") as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [d.eq(self.desc), bad_align.eq(0), bad_stride.eq(0),
                                 bad_window.eq(0), region.eq(0)]
                    m.next = "DIMS"
            with m.State("DIMS"):
                m.d.sync += self.macs.eq(d.m[:16] * d.n[:16] * d.k[:16])
                with m.If((d.m == 0) | (d.n == 0) | (d.k == 0)):
                    fail(ErrorCode.ZERO_DIMENSION)
                with m.Elif((d.m > 65535) | (d.n > 65535)):
                    fail(ErrorCode.DIMENSION_TOO_LARGE)
                with m.Elif(d.k > 65535):
                    fail(ErrorCode.K_TOO_LARGE)
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
                with m.If(bad_align):
                    fail(ErrorCode.MISALIGNED)
                with m.Elif(bad_stride):
                    fail(ErrorCode.BAD_STRIDE)
                with m.Elif(bad_window):
                    fail(ErrorCode.OUT_OF_WINDOW)
                with m.Else():
                    m.d.sync += [m_blk.eq(0), n_blk.eq(0), k0.eq(0), writes_issued.eq(0),
                                 writes_done.eq(0)]
                    m.next = "BLOCK"
            with m.State("FAIL"):
                pass

            with m.State("BLOCK"):
                tiles_m = (d.m - m_blk + R - 1) >> _log2(R)
                tiles_n = (d.n - n_blk + C - 1) >> _log2(C)
                m.d.sync += [bm.eq(Mux(tiles_m < BL, tiles_m, BL)),
                             bn.eq(Mux(tiles_n < BL, tiles_n, BL)),
                             ti.eq(0), tj.eq(0), k0.eq(0), phase.eq(0), ei.eq(0)]
                with m.If(d.row_vec | d.col_vec):
                    m.next = "EXP_WAIT"
                with m.Else():
                    m.next = "CMD"
            with m.State("EXP_WAIT"):      # the previous block's commands have taken theirs
                with m.If((cmdq.level == 0) & (exp_pending == 0)):
                    m.next = "EXP"
            with m.State("EXP"):
                with m.If(ei == 2 * BL):
                    m.next = "CMD"
                with m.Elif(ei < BL):
                    m.d.sync += ei.eq(ei + 1)
                    with m.If(d.row_vec & (ei < bm)):
                        setup_load(0, R, 0, v_re, ex_m0, d.row_exp_addr, 0,
                                   tag=Cat(Const(1, 1), ei[:tag_width - 1]), exp=True)
                        m.next = "LD_MUL"
                with m.Else():
                    m.d.sync += ei.eq(ei + 1)
                    with m.If(d.col_vec & (ei - BL < bn)):
                        setup_load(1, C, 0, v_ce, ex_n0, d.col_exp_addr, 0,
                                   tag=Cat(Const(1, 1), (ei - BL)[:tag_width - 1]), exp=True)
                        m.next = "LD_MUL"
            with m.State("CMD"):
                # The command goes first: the datapath can then take its operands as they
                # arrive, so the DMA never waits for a command stuck behind its own loads.
                with m.If(phase == 0):
                    room = cmdq.w_rdy & (~last_chunk | (wq_cmd.w_rdy & wq_data.w_rdy))
                    with m.If(room):
                        m.d.comb += [cmdq.w_en.eq(1), wq_cmd.w_en.eq(last_chunk),
                                     wq_data.w_en.eq(last_chunk)]
                        m.d.sync += phase.eq(1)
                with m.Elif(phase == 1):
                    m.d.sync += phase.eq(2)
                    with m.If(load_a):
                        setup_load(0, R, ~d.transpose_a, v_a, m0, d.a_addr, d.a_stride,
                                   span=bm, v_span=v_as)
                        m.next = "LD_MUL"
                with m.Elif(phase == 2):
                    m.d.sync += phase.eq(3)
                    with m.If(load_b):
                        setup_load(1, C, d.transpose_b, v_b, n0, d.b_addr, d.b_stride,
                                   span=bn, v_span=v_bs)
                        m.next = "LD_MUL"
                with m.Else():
                    m.d.sync += phase.eq(0)
                    m.next = "NEXT"
            with m.State("NEXT"):
                with m.If(tj + 1 < bn):
                    m.d.sync += tj.eq(tj + 1)
                    m.next = "CMD"
                with m.Elif(ti + 1 < bm):
                    m.d.sync += [tj.eq(0), ti.eq(ti + 1)]
                    m.next = "CMD"
                with m.Elif(~last_chunk):
                    m.d.sync += [tj.eq(0), ti.eq(0), k0.eq(k0 + D), parity.eq(~parity)]
                    m.next = "CMD"
                with m.Else():
                    m.d.sync += parity.eq(~parity)
                    with m.If(n_blk + BL * C < d.n):
                        m.d.sync += n_blk.eq(n_blk + BL * C)
                        m.next = "BLOCK"
                    with m.Elif(m_blk + BL * R < d.m):
                        m.d.sync += [n_blk.eq(0), m_blk.eq(m_blk + BL * R)]
                        m.next = "BLOCK"
                    with m.Else():
                        m.next = "DRAIN"

            with m.State("LD_MUL"):
                m.d.comb += [mul_a.eq(ld["row0"]), mul_b.eq(ld["stride"])]
                m.next = "LD_ADDR"
            with m.State("LD_ADDR"):
                m.d.comb += [mul_a.eq(ld["row0"]), mul_b.eq(ld["stride"])]
                with m.If(job_ready & (route.w_rdy | (ld["rows"] == 0))):
                    m.d.comb += [gb_a.jobs.valid.eq(ld["path"] == 0),
                                 gb_b.jobs.valid.eq(ld["path"] == 1),
                                 route.w_en.eq(ld["rows"] != 0),
                                 exp_job.eq(ld_exp)]
                    m.d.sync += [ld["addr"].eq(ld["base"] + product + ld["col"]),
                                 ld["count"].eq(0)]
                    m.next = "LD_ROWS"
            with m.State("LD_ROWS"):
                done_rows = ld["count"] >= ld["rows"]
                m.d.comb += self.rd_cmd.valid.eq(~done_rows)
                with m.If(self.rd_cmd.ready & ~done_rows):
                    m.d.sync += [ld["addr"].eq(ld["addr"] + ld["stride"]),
                                 ld["count"].eq(ld["count"] + 1)]
                with m.If(done_rows | (self.rd_cmd.ready & (ld["count"] == ld["rows"] - 1))):
                    m.next = "LD_RET"
            with m.State("LD_RET"):
                with m.If(ld_exp):
                    m.next = "EXP"
                with m.Else():
                    m.next = "CMD"

            with m.State("DRAIN"):
                with m.If((cmdq.level == 0) & (wq_cmd.level == 0) & (wq_data.level == 0)
                          & ~wc_setup & (writes_issued == writes_done) & ~dp.busy):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE") & ~fsm.ongoing("FAIL"))
        return m
