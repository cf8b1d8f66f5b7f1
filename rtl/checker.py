"""The GEMM descriptor and its checks: dimensions, alignment, strides, the address window."""

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from firmware.spec.regmap import TILE_BLOCK, ErrorCode

from ._util import delay
from .convcursor import conv_geometry_layout

__all__ = ["DescriptorChecker", "descriptor_layout", "verdict_layout"]


def descriptor_layout(k_blocks: bool = False, epilogue: bool = False,
                      conv: bool = False) -> data.StructLayout:
    """One GEMM as the host describes it (the ``DESC_*`` registers). With ``k_blocks``, a
    field ``tiles``: A's and B's exponents are their tile grids at ``row_exp_addr`` /
    ``col_exp_addr`` (``DESC_EPILOGUE.A_TILES`` and ``B_TILES``). With ``epilogue``, the
    fields of a BFP8 output (``DESC_EPILOGUE.BFP8`` and ``STOCHASTIC``, ``DESC_C_EXP_ADDR``,
    ``DESC_SEED``), of its ReLU (``DESC_EPILOGUE.RELU``, ``DESC_MASK_ADDR``,
    ``DESC_MASK_STRIDE``), its bias (``DESC_EPILOGUE.BIAS``, ``DESC_BIAS_ADDR``) and its
    stored mask (``DESC_EPILOGUE.MASK_IN``, at ``DESC_MASK_ADDR``), and ``quantize_only``
    (``DESC_EPILOGUE.QUANTIZE_ONLY``: no GEMM, the M x N float32 matrix at ``a_addr`` with
    ``a_stride`` goes through the epilogue; K, B and the exponent vectors unused), and
    ``sgd`` with ``lr`` and ``decay`` (``DESC_EPILOGUE.SGD``, ``DESC_LR``, ``DESC_DECAY``:
    the stored BFP8 weights at C stepped by this GEMM's result). With ``conv`` (its fields
    before the epilogue's, so that the walker's layout is a prefix of the engine's), a
    convolution (``conv``; ``DESC_CONV`` and its geometry, ``cin``, ``cout``) and what the
    engine derives from it before the checks (:class:`rtl.engine.GemmEngine`): M, N and K of
    its implicit GEMM (and ``transpose_a`` for backward-data, ``transpose_b`` for a weight
    gradient), the weight stack's rows ``a_rows`` and its exponent grid's ``a_grid_rows`` (a
    weight gradient's: the deltas'), A's row bytes ``a_bytes`` (Cin, or a weight gradient's
    output positions), B's rows ``b_rows`` (the input's channels, or the deltas') and
    columns ``b_cols``, and where the first kernel offset's matrix in K order lies in the
    stack and its grid (``a_first``, ``a_grid_first``, bytes) and the steps to the next
    (``a_step``, ``a_grid_step``, modulo 2**64 and 2**32: backward-data walks the stack
    backwards); and a max pool on the write path (``pool``; ``DESC_POOL``, its windows in
    ``geometry``): a forward convolution's, or with ``unpool`` its backward pass on a
    backward-data convolution's (C written at the pool's input); the ReLU mask's columns
    ``mask_n`` (the pool's input's, else N) and the argmax (``DESC_ARGMAX_ADDR``,
    ``DESC_ARGMAX_STRIDE``: a byte per element of the pool's output, the GEMM's C)."""
    return data.StructLayout({
        "m": unsigned(32), "n": unsigned(32), "k": unsigned(32),
        "transpose_a": 1, "transpose_b": 1, "raw": 1, "row_vec": 1, "col_vec": 1,
        "row_exp": signed(8), "col_exp": signed(8), "block": unsigned(5),
        "a_addr": unsigned(64), "a_stride": unsigned(32),
        "b_addr": unsigned(64), "b_stride": unsigned(32),
        "c_addr": unsigned(64), "c_stride": unsigned(32),
        "row_exp_addr": unsigned(64), "col_exp_addr": unsigned(64),
        "overlap": 1, "chunk": unsigned(2),
        **({"tiles": 1} if k_blocks else {}),
        **({"conv": 1, "geometry": conv_geometry_layout(), "cin": unsigned(16),
            "cout": unsigned(16), "a_rows": unsigned(32), "a_grid_rows": unsigned(32),
            "a_bytes": unsigned(32), "b_rows": unsigned(16), "b_cols": unsigned(48),
            "a_first": unsigned(64),
            "a_step": unsigned(64), "a_grid_first": unsigned(32), "a_grid_step": unsigned(32),
            "pool": 1, "unpool": 1, "mask_n": unsigned(32), "argmax_addr": unsigned(64),
            "argmax_stride": unsigned(32)}
           if conv else {}),
        **({"bfp8": 1, "stochastic": 1, "c_exp_addr": unsigned(64), "seed": unsigned(64),
            "relu": 1, "mask_addr": unsigned(64), "mask_stride": unsigned(32),
            "bias": 2, "bias_addr": unsigned(64), "mask_in": 1, "quantize_only": 1,
            "sgd": 1, "lr": unsigned(32), "decay": unsigned(32)}
           if epilogue else {}),
    })


def verdict_layout() -> data.StructLayout:
    """Payload of :attr:`DescriptorChecker.o_stream`: 0, or the first failing error code."""
    return data.StructLayout({"code": unsigned(8)})


class DescriptorChecker(wiring.Component):
    """Checks a descriptor before anything touches memory; one verdict per descriptor.

    In order, the first failing check decides the :class:`firmware.spec.regmap.ErrorCode`:
    ``ZERO_DIMENSION`` (M, N or K is 0), ``DIMENSION_TOO_LARGE`` (M or N > 65535),
    ``K_TOO_LARGE`` (K > 65535), then, over the five regions (A, B, C, and the row / column
    exponent vectors when used; eight with ``epilogue``): ``MISALIGNED`` (a base not a
    multiple of the bus width, or a stride neither a multiple of it nor, for A and B,
    smaller: rows of fewer bytes than a bus word may be stored packed, see
    :class:`rtl.loader.LoadSequencer`), ``BAD_STRIDE``
    (rows of a region overlap), ``OUT_OF_WINDOW`` (a region's last byte, rounded up to a bus
    word, beyond ``window_limit`` or ``2**addr_width``, or its base below ``window_base``).
    The numpy model is :func:`sim.models.engine.check`.

    The regions go through a pipeline of :data:`REGION_STAGES` registered stages, one region a
    cycle, with no more logic per stage than a 32-bit carry chain (timing by construction,
    whatever the clock): select the region; ``rows - 1``, the row bytes plus a bus word less
    one, the alignment and stride checks; ``(rows - 1) * stride`` as two 16 x 16 products
    (one DSP slice each, inputs and outputs registered); their sum; ``+`` those row bytes,
    rounded down to a bus word (so the sum is the last byte's offset rounded up), then ``+``
    the base, each in two 32-bit halves; the window comparisons in 32-bit halves; their
    combination into the sticky flags. The sizes that are sums of the payload's fields (the
    tile grids' ``ceil(x / T)``, the mask's bytes a row) are registered from the payload,
    which is held until the verdict, before the first region is selected.

    The descriptor on :attr:`i_stream` stays there (not ready) while it is checked; it is
    taken in the cycle its verdict is taken from :attr:`o_stream`.

    Parameters
    ----------
    data_width, addr_width : int
        AXI bus (alignment unit) and address width (the end of the address space).
    k_blocks : bool
        Descriptors have ``tiles`` (:func:`descriptor_layout`): with it, the row and column
        exponent regions are A's and B's tile grids, ``ceil(M / T) x ceil(K / T)`` and
        ``ceil(K / T) x ceil(N / T)`` bytes (``T`` = :data:`firmware.spec.regmap.TILE_BLOCK`)
        stored without padding, whatever the transposes (their rows may be any number of
        bytes apart).
    epilogue : bool
        Descriptors have the BFP8 output's fields: with ``bfp8``, C's rows are ``N`` bytes
        (int8 mantissas) and a sixth region, C's tile grid at ``c_exp_addr`` (``ceil(M / T)
        x ceil(N / T)`` bytes without padding), is checked too; with ``relu`` or ``mask_in``
        a seventh, the mask: ``M`` rows of ``ceil(N / 8)`` bytes at ``mask_addr``,
        ``mask_stride`` apart (base and stride multiples of the bus width, as C's); with
        ``bias`` an eighth, the bias: one row of ``4 M`` (``bias`` 1) or ``4 N`` bytes at
        ``bias_addr``. With ``quantize_only``, K is not checked, A is ``M`` rows of ``4 N``
        bytes (base and stride multiples of the bus width, as C's) and neither B nor an
        exponent vector is checked.
    conv : bool
        With ``k_blocks``: descriptors may have ``conv`` (a convolution, its M, N, K and
        extents derived by the engine): A is then ``a_rows`` rows of ``a_bytes`` bytes (the
        weight stack, or a weight gradient's deltas), B ``b_rows`` rows of ``b_cols`` bytes
        (the input, or the deltas), A's tile grid ``a_grid_rows x ceil(a_bytes / T)`` bytes
        and B's ``ceil(b_rows / T) x ceil(b_cols / T)``; ``a_rows``, ``a_bytes`` or
        ``b_cols`` over 65535 is ``DIMENSION_TOO_LARGE``. With ``epilogue`` too,
        the mask's rows are ``ceil(mask_n / 8)`` bytes, and with ``pool`` a ninth region,
        the argmax: ``M`` rows of ``N`` bytes at ``argmax_addr``, ``argmax_stride`` apart
        (base and stride multiples of the bus width, as C's).
    unfold : bool
        With ``conv`` and ``epilogue``: a ``quantize_only`` descriptor with ``conv`` (an
        input unfolded) has A ``a_rows`` rows of ``4 b_cols`` bytes.

    Attributes
    ----------
    i_stream : In(stream.Signature(descriptor_layout(k_blocks, epilogue)))
    window_base, window_limit : In(64)
        ``[window_base, window_limit)``: the addresses a descriptor may touch; held while a
        descriptor is checked.
    o_stream : Out(stream.Signature(verdict_layout()))

    Latency
    -------
    The verdict is valid :data:`LATENCY` (``DIMENSION_LATENCY + REGIONS + REGION_STAGES``)
    cycles after the descriptor, :data:`DIMENSION_LATENCY` for a bad dimension (the dimension
    checks are registered).

    Throughput
    ----------
    One descriptor at a time.
    """

    #: Regions checked per descriptor (A, B, C, row and column exponent vectors).
    REGIONS = 5
    #: Registered stages a region passes, from its selection to the sticky flags.
    REGION_STAGES = 9
    #: Cycles from a descriptor on :attr:`i_stream` to the verdict on a bad dimension.
    DIMENSION_LATENCY = 2
    #: Cycles from a descriptor on :attr:`i_stream` with good dimensions to its verdict: the
    #: dimension checks (registered, then decided), then the regions enter one a cycle, the
    #: last one passes every stage and the verdict follows its flags.
    LATENCY = DIMENSION_LATENCY + REGIONS + REGION_STAGES

    def __init__(self, data_width: int = 128, addr_width: int = 32, *, k_blocks: bool = False,
                 epilogue: bool = False, conv: bool = False, unfold: bool = False):
        if data_width not in (64, 128, 256, 512):
            raise ValueError(f"data_width must be 64, 128, 256 or 512, not {data_width!r}")
        if addr_width not in (32, 40, 64):
            raise ValueError(f"addr_width must be 32, 40 or 64, not {addr_width!r}")
        self.data_width, self.addr_width = data_width, addr_width
        self.k_blocks, self.epilogue, self.conv = bool(k_blocks), bool(epilogue), bool(conv)
        self.unfold = self.conv and self.epilogue and bool(unfold)
        if self.conv and not self.k_blocks:
            raise ValueError("conv needs k_blocks: a convolution's operands have tile exponents")
        if self.epilogue:                 # (C's tile grid, the mask, the bias)
            self.REGIONS = type(self).REGIONS + 3 + (1 if self.conv else 0)   # (the argmax)
            self.LATENCY = self.DIMENSION_LATENCY + self.REGIONS + self.REGION_STAGES
        super().__init__({
            "i_stream": In(stream.Signature(descriptor_layout(self.k_blocks, self.epilogue,
                                                              self.conv))),
            "window_base": In(64),
            "window_limit": In(64),
            "o_stream": Out(stream.Signature(verdict_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        bpw = self.data_width // 8
        wlog = bpw.bit_length() - 1
        aw = self.addr_width
        d = self.i_stream.payload
        wb, wl = self.window_base, self.window_limit

        def stage(name, shape):
            return Signal(shape, name=name, reset_less=True)

        def early(value, name):
            """``value`` of the payload, registered: the regions are fed from the third
            cycle of a descriptor on (after IDLE and DIMS), and the payload is held until
            the verdict, so a sum of its fields need not be in the regions' path."""
            r = Signal(value.shape(), name=name, reset_less=True)
            m.d.sync += r.eq(value)
            return r

        # ---- dimensions, then the regions one a cycle --------------------------------------
        # After the dimension check every M, N, K is in 1..65535: a region's rows fit 16 bits
        # and its row bytes (at most 4 N) 18.
        regions = [   # base, stored rows, stride, bytes a row, used, may be packed
            (d.a_addr, Mux(d.transpose_a, d.k, d.m), d.a_stride, Mux(d.transpose_a, d.m, d.k),
             1, 1),
            (d.b_addr, Mux(d.transpose_b, d.n, d.k), d.b_stride, Mux(d.transpose_b, d.k, d.n),
             1, 1),
            (d.c_addr, d.m, d.c_stride, Mux(d.bfp8, d.n, d.n << 2) if self.epilogue
             else d.n << 2, 1, 0),
            (d.row_exp_addr, 1, 0, d.m, d.row_vec, 0),
            (d.col_exp_addr, 1, 0, d.n, d.col_vec, 0),
        ]
        if self.epilogue:
            # quantise-only: A is the M x N float32 matrix (rows aligned as C's), and neither
            # B nor an exponent vector is read
            qo = d.quantize_only
            a = regions[0]
            regions[0] = (a[0], Mux(qo, d.m, a[1]), a[2], Mux(qo, d.n << 2, a[3]), 1, ~qo)
            regions[1] = (*regions[1][:4], ~qo, 1)
            regions[3:5] = [(*r[:4], r[4] & ~qo, r[5]) for r in regions[3:5]]
        if self.conv:
            # a convolution: A the weight stack or the deltas (a_rows of a_bytes), B the
            # input or the deltas (b_rows of b_cols bytes)
            cv = d.conv
            a, b = regions[0], regions[1]
            # (quantise-only: the input unfolded, b_cols float32 a row)
            a_bytes = (Mux(d.quantize_only, Cat(Const(0, 2), d.b_cols[:16]), d.a_bytes[:18])
                       if self.unfold else d.a_bytes[:18])
            regions[0] = (a[0], Mux(cv, d.a_rows[:16], a[1]), a[2],
                          Mux(cv, a_bytes, a[3]), *a[4:])
            regions[1] = (b[0], Mux(cv, d.b_rows, b[1]), b[2], Mux(cv, d.b_cols[:18], b[3]),
                          *b[4:])
        if self.conv and self.epilogue:
            # (a pool's backward pass writes C at the pool's input: mask_n columns)
            c = regions[2]
            regions[2] = (c[0], c[1], c[2], Mux(d.unpool, Mux(d.bfp8, d.mask_n, d.mask_n << 2),
                                                c[3]), *c[4:])
        if self.k_blocks:
            # the tile grids: ceil(M / T) rows of ceil(K / T) bytes, ceil(K / T) of
            # ceil(N / T), each row right after the one before (``free``: no stride alignment)
            lg = TILE_BLOCK.bit_length() - 1
            gm, gn, gk = (early((x + TILE_BLOCK - 1) >> lg, f"g{f}")
                          for f, x in (("m", d.m), ("n", d.n), ("k", d.k)))
            if self.conv:
                # (each kernel offset's matrix its own grid rows; the input's columns)
                gm = Mux(d.conv, d.a_grid_rows, gm)
                gk_a = Mux(d.conv, early((d.a_bytes[:18] + TILE_BLOCK - 1) >> lg, "gk_a"), gk)
                gk = Mux(d.conv, early((d.b_rows + TILE_BLOCK - 1) >> lg, "gk_b"), gk)
                gn = Mux(d.conv, early((d.b_cols[:18] + TILE_BLOCK - 1) >> lg, "gn_b"), gn)
                grids = [(d.row_exp_addr, gm, gk_a, gk_a), (d.col_exp_addr, gk, gn, gn)]
            else:
                grids = [(d.row_exp_addr, gm, gk, gk), (d.col_exp_addr, gk, gn, gn)]
            regions = [(*r, 0) for r in regions[:3]] + [
                (Mux(d.tiles, g[0], r[0]), Mux(d.tiles, g[1], r[1]), Mux(d.tiles, g[2], r[2]),
                 Mux(d.tiles, g[3], r[3]), r[4] | d.tiles, r[5], d.tiles)
                for g, r in zip(grids, regions[3:], strict=True)]
        if self.epilogue:
            lg = TILE_BLOCK.bit_length() - 1
            c_n = Mux(d.unpool, d.mask_n, d.n) if self.conv else d.n
            gm, gn = (early((x + TILE_BLOCK - 1) >> lg, f"c_g{f}")
                      for f, x in (("m", d.m), ("n", c_n)))
            if not self.k_blocks:
                regions = [(*r, 0) for r in regions]
            regions.append((d.c_exp_addr, gm, gn, gn, d.bfp8, 0, 1))
            # (the mask's columns: a pool's input's, where C is the pool's output)
            mask_n = d.mask_n if self.conv else d.n
            regions.append((d.mask_addr, d.m, d.mask_stride, early((mask_n + 7) >> 3, "mask_b"),
                            d.relu | d.mask_in, 0, 0))
            regions.append((d.bias_addr, 1, 0, Mux(d.bias == 1, d.m << 2, d.n << 2),
                            d.bias != 0, 0, 0))
            if self.conv:                 # a max pool's argmax: a byte per element of C
                regions.append((d.argmax_addr, d.m, d.argmax_stride, d.n, d.pool, 0, 0))
        assert len(regions) == self.REGIONS
        dims_code = Signal(8)
        region = Signal(range(self.REGIONS + 1))
        feeding = Signal()            # a region enters the pipeline this cycle
        flush = Signal()              # a new descriptor: clear the sticky flags
        v = [Signal(name=f"v{i}") for i in range(self.REGION_STAGES)]   # stage i holds a region

        # stage 0: the selected region
        s0_base, s0_rows = stage("s0_base", 64), stage("s0_rows", 16)
        s0_stride, s0_bytes, s0_on = stage("s0_stride", 32), stage("s0_bytes", 18), Signal()
        s0_pk = Signal()
        free_regions = self.k_blocks or self.epilogue
        s0_free = Signal() if free_regions else None
        with m.Switch(region):
            for idx, (base, rows, stride, nbytes, on, pk, *free) in enumerate(regions):
                with m.Case(idx):
                    m.d.sync += [s0_base.eq(base), s0_rows.eq(rows), s0_stride.eq(stride),
                                 s0_bytes.eq(nbytes), s0_on.eq(on), s0_pk.eq(pk)]
                    if free:
                        m.d.sync += s0_free.eq(free[0])
        # (a stride neither a multiple of the bus width nor a packed one's: misaligned)
        odd_stride = (s0_stride[:wlog] != 0) & ~(s0_pk & (s0_stride[wlog:] == 0))
        if free_regions:
            odd_stride = odd_stride & ~s0_free
        # stage 1: rows - 1, the bytes plus a word less one, alignment and overlap
        s1_m1, s1_stride, s1_round = stage("s1_m1", 16), stage("s1_stride", 32), stage(
            "s1_round", 19)
        s1_flags = Signal(3)          # used, misaligned, overlapping: to the last stage as is
        m.d.sync += [
            s1_m1.eq(s0_rows - 1), s1_stride.eq(s0_stride),
            s1_round.eq(s0_bytes + bpw - 1),
            s1_flags.eq(Cat(s0_on,
                            (s0_base[:wlog] != 0)
                            | odd_stride,
                            (s0_rows > 1) & (s0_stride[18:] == 0)
                            & (s0_stride[:18] < s0_bytes))),
        ]
        # the base and the rounded bytes wait, in registers, for the stages that add them
        s5_base = delay(m, s0_base, 5, "base", reset_less=True)
        s3_round = delay(m, s1_round, 2, "round", reset_less=True)
        # stage 2: (rows - 1) * stride as two 16 x 16 products
        s2_plo, s2_phi = stage("s2_plo", 32), stage("s2_phi", 32)
        m.d.sync += [s2_plo.eq(s1_m1 * s1_stride[:16]), s2_phi.eq(s1_m1 * s1_stride[16:])]
        # stage 3: the product (48 bits), its upper 32 bits one add
        s3_prod = stage("s3_prod", 48)
        m.d.sync += s3_prod.eq(Cat(s2_plo[:16], s2_plo[16:] + s2_phi))
        # stages 4 and 5: offset = product + bytes + a word less one (49 bits), low half then
        # high half, rounded down to a word: the end of the region's last word
        s4_lo, s4_hi = stage("s4_lo", 33), stage("s4_hi", 16)
        m.d.sync += [s4_lo.eq(s3_prod[:32] + s3_round), s4_hi.eq(s3_prod[32:])]
        s5_off = stage("s5_off", 49)
        m.d.sync += s5_off.eq(Cat(Const(0, wlog), s4_lo[wlog:32], s4_hi + s4_lo[32]))
        # stages 6 and 7: end = base + offset (65 bits), low half then high half; the base
        # against the window's base meanwhile, in halves
        s6_base_hi, s6_off_hi = stage("s6_base_hi", 32), stage("s6_off_hi", 17)
        s6_lo = stage("s6_lo", 33)
        s6_blo_lt, s6_bhi_lt, s6_bhi_eq = Signal(), Signal(), Signal()
        m.d.sync += [s6_base_hi.eq(s5_base[32:]), s6_off_hi.eq(s5_off[32:]),
                     s6_lo.eq(s5_base[:32] + s5_off[:32]),
                     s6_blo_lt.eq(s5_base[:32] < wb[:32]), s6_bhi_lt.eq(s5_base[32:] < wb[32:]),
                     s6_bhi_eq.eq(s5_base[32:] == wb[32:])]
        s7_end = stage("s7_end", 65)
        s7_below = Signal()
        m.d.sync += [s7_end.eq(Cat(s6_lo[:32], s6_base_hi + s6_off_hi + s6_lo[32])),
                     s7_below.eq(s6_bhi_lt | (s6_bhi_eq & s6_blo_lt))]
        # stage 8: end against the window's limit (in halves) and the address space
        s8_lo_gt, s8_hi_gt, s8_hi_eq, s8_space = Signal(), Signal(), Signal(), Signal()
        s8_below = Signal()
        m.d.sync += [s8_lo_gt.eq(s7_end[:32] > wl[:32]), s8_hi_gt.eq(s7_end[32:] > wl[32:]),
                     s8_hi_eq.eq(s7_end[32:] == wl[32:]),
                     # end > 2**aw: the bits above aw are not 0, and not exactly 2**aw
                     s8_space.eq((s7_end[aw:] != 0)
                                 & ~((s7_end[aw:] == 1) & (s7_end[:aw] == 0))),
                     s8_below.eq(s7_below)]
        s8_on, s8_align, s8_overlap = delay(m, s1_flags, 7, "flags")
        # the sticky flags, from the last stage
        bad_align, bad_stride, bad_window = Signal(), Signal(), Signal()
        with m.If(flush):
            m.d.sync += [bad_align.eq(0), bad_stride.eq(0), bad_window.eq(0)]
        with m.Elif(v[-1] & s8_on):
            m.d.sync += [
                bad_align.eq(bad_align | s8_align), bad_stride.eq(bad_stride | s8_overlap),
                bad_window.eq(bad_window | s8_below | s8_hi_gt | (s8_hi_eq & s8_lo_gt)
                              | s8_space)]
        assert len(v) == self.REGION_STAGES

        m.d.sync += [v[0].eq(feeding)] + [v[i].eq(v[i - 1]) for i in range(1, len(v))]
        with m.If(feeding):
            m.d.sync += region.eq(region + 1)

        # The dimension checks: the ORs of each half of M, N and K, registered from the
        # payload every cycle (the FSM reads them a cycle after the descriptor arrives, when
        # they are its own), combined there in one LUT. (ORs of bits, not compares with 0 or
        # 65535, which would be mapped to carry chains; one 96-bit OR before the register
        # would be deeper than the logic budget at the boards' clocks.)
        lo = {f: Signal(name=f"{f}_lo_any") for f in "mnk"}
        hi = {f: Signal(name=f"{f}_hi_any") for f in "mnk"}
        m.d.sync += [lo[f].eq(d[f][:16].any()) for f in "mn"]
        m.d.sync += [hi[f].eq(d[f][16:].any()) for f in "mn"]
        if self.epilogue:     # (a quantise-only descriptor's K is not used)
            m.d.sync += [lo["k"].eq(d.k[:16].any() | d.quantize_only),
                         hi["k"].eq(d.k[16:].any() & ~d.quantize_only)]
        else:
            m.d.sync += [lo["k"].eq(d.k[:16].any()), hi["k"].eq(d.k[16:].any())]
        big = hi["m"] | hi["n"]
        if self.conv:             # (a convolution's A or B extents beyond 65535)
            conv_big = Signal()
            m.d.sync += conv_big.eq(d.conv & (d.a_rows[16:].any() | d.b_cols[16:].any()
                                              | d.a_bytes[16:].any()))
            big = big | conv_big
        zero = Signal()
        too_large = Signal()
        k_too_large = Signal()
        m.d.comb += [zero.eq(Cat(*(~(lo[f] | hi[f]) for f in "mnk")).any()),
                     too_large.eq(big),
                     k_too_large.eq(hi["k"])]

        with m.FSM(name="check"):
            with m.State("IDLE"):
                m.d.comb += flush.eq(1)
                m.d.sync += [region.eq(0), dims_code.eq(0)]
                with m.If(self.i_stream.valid):
                    m.next = "DIMS"
            with m.State("DIMS"):          # the dimension flags, registered from the payload
                with m.If(zero):
                    m.d.sync += dims_code.eq(ErrorCode.ZERO_DIMENSION)
                    m.next = "VERDICT"
                with m.Elif(too_large):
                    m.d.sync += dims_code.eq(ErrorCode.DIMENSION_TOO_LARGE)
                    m.next = "VERDICT"
                with m.Elif(k_too_large):
                    m.d.sync += dims_code.eq(ErrorCode.K_TOO_LARGE)
                    m.next = "VERDICT"
                with m.Else():
                    m.next = "REGIONS"
            with m.State("REGIONS"):       # feed the regions, then wait for the last
                m.d.comb += feeding.eq(region < self.REGIONS)
                # every region fed and none left before the last stage: the last one leaving
                with m.If((region == self.REGIONS) & ~Cat(*v[:-1]).any()):
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
                    m.next = "IDLE"
        return m
