"""A convolution's implicit-GEMM addresses: the column of B each tile of C reads."""

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from firmware.spec.regmap import TILE_BLOCK

from ._util import carry_select_add

__all__ = ["ConvCursor", "conv_geometry_layout", "PosOp", "OffOp"]


def _Reg(*args, **kwargs):
    """A register with no reset: the set-up, or the first tile and offset, sets it."""
    return Signal(*args, reset_less=True, **kwargs)


def conv_geometry_layout() -> data.StructLayout:
    """A convolution's geometry as ``DESC_CONV``, ``DESC_CONV_IMAGE`` and ``DESC_CONV_BATCH``
    give it: ``mode`` 1 (forward), 2 (backward-data) or 3 (weight gradient: the forward's
    index map, a tile of ``TILE_BLOCK`` positions a K run), the kernel, stride, padding and
    dilation of each axis (``_h`` vertical, ``_w`` horizontal), the input image and the
    batch; and a forward convolution's pooling windows over its output (``pool_h`` x
    ``pool_w``, their stride the same; 0 or 1: none)."""
    return data.StructLayout({
        "mode": unsigned(2), "kernel_h": unsigned(4), "kernel_w": unsigned(4),
        "stride_h": unsigned(3), "stride_w": unsigned(3), "pad_h": unsigned(4),
        "pad_w": unsigned(4), "dilation_h": unsigned(3), "dilation_w": unsigned(3),
        "height": unsigned(16), "width": unsigned(16), "batch": unsigned(16),
        "pool_h": unsigned(4), "pool_w": unsigned(4),
    })


class PosOp:
    """:attr:`ConvCursor.pos_op`: how the tile of C's columns moves."""
    HOLD = 0
    #: The next tile: ``cols`` columns on.
    NEXT = 1
    #: Back to the marked tile (a block's first: the next row of its tiles, or its next
    #: K chunk).
    BACK = 2
    #: The next tile, marked (the next block's first, from the block's last tile).
    ADVANCE = 3
    #: The first tile, marked.
    ZERO = 4


class OffOp:
    """:attr:`ConvCursor.off_op`: how the kernel offset (and the pooling phase) moves."""
    HOLD = 0
    #: The next offset in K order.
    NEXT = 1
    #: The first offset in K order.
    ZERO = 2
    #: The next pooling phase (after the last, the first again), at its first offset;
    #: without pooling the same as :data:`ZERO`.
    PHASE = 3


class ConvCursor(wiring.Component):
    """Where a tile of an implicit GEMM's C columns reads B at a kernel offset.

    The activations are ``C x (H * W * N)`` matrices, column ``(h * W + w) * N + n`` (the
    ``CHWN`` layout of :mod:`sim.models.conv`). With the batch ``N`` a multiple of ``cols``,
    a tile of ``cols`` columns of C is one image position's images, so at a kernel offset it
    reads ``cols`` consecutive columns of B, or none. The cursor follows a tile and an
    offset, moved by :attr:`pos_op` and :attr:`off_op`, and gives B's first column and
    whether the tile reads B at all, with no division or multiplication after its set-up:
    every term of the address is a register stepped by a constant.

    * forward (``mode`` 1): C's columns are the output positions ``(oh, ow, n)``, offsets in
      row-major order; B's column is ``(h * W + w) * N + n`` with ``h = oh * sy + dy * ry -
      py`` (and so for ``w``), inside when ``0 <= h < H`` and ``0 <= w < W``.
    * backward-data (``mode`` 2): C's columns are the input positions ``(h, w, n)``, offsets
      in the rotated kernel's row-major order (the forward order reversed); B (the deltas)
      is read at ``(oh * OW + ow) * N + n`` with ``oh * sy = h + py - dy * ry`` where that is
      a multiple of ``sy`` and ``0 <= oh < OH`` (and so for ``w``), else not at all. Each of
      ``h + py`` and ``dy * ry`` is kept as a quotient and remainder by ``sy``.

    * forward with pooling (``pool_h`` x ``pool_w`` windows, their stride the same): C's
      columns are the pool's output positions ``(poh, pow, n)``, each walked once per
      *phase* ``(a, b)`` of the window (:data:`OffOp.PHASE`), a phase reading the
      convolution's output position ``(poh * pool_h + a, pow * pool_w + b)`` as above, whose
      column of the convolution's C (the pool's input) is :attr:`c_column`.

    Set-up (:attr:`start`, then :attr:`ready`): ten small divisions, two at a time
    (restoring, a bit a cycle: ``OH - 1``, ``py``, ``(kh - 1) * ry`` and ``ry`` by ``sy``,
    ``OH`` by ``pool_h``, and so for the width), then the products of the steps, in
    registered stages. It ends with the first tile, offset and phase (the tile marked). The
    numpy models are :func:`sim.models.conv.tile_columns` and
    :func:`sim.models.conv.pool_tile_columns`.

    Parameters
    ----------
    cols : int
        Columns of a tile (the array's), a power of two; the batch must be a multiple of it
        (in mode 3 a tile is ``TILE_BLOCK`` output positions, a K run of the weight
        gradient's, and the batch a multiple of that).

    Attributes
    ----------
    geometry : In(conv_geometry_layout())
        Read when :attr:`start` is asserted.
    start : In(1)
        Starts the set-up (a pulse while :attr:`ready`, or at any time: it restarts).
    ready : Out(1)
        The set-up is done; the ops act.
    pos_op : In(3)
        A :class:`PosOp`, acting at the clock edge.
    off_op : In(2)
        An :class:`OffOp`.
    column : Out(32)
        B's column read by the tile's first lane at the offset (modulo ``2**32``; valid when
        :attr:`inside`).
    inside : Out(1)
        The tile reads B at the offset (else its operand is zeros).
    offset : Out(8)
        The offset's matrix in the weight stack (``dy * kw + dx``).
    last_offset : Out(1)
        The offset is the last in K order.
    positions : Out(48)
        C's columns: ``OH * OW * N`` (forward; pooled, ``(OH / pool_h) * (OW / pool_w) *
        N``) or ``H * W * N`` (backward-data), valid with :attr:`ready`.
    out_positions : Out(48)
        The output positions ``OH * OW * N`` (in either mode), valid with :attr:`ready`.
    pool_exact : Out(1)
        The pooling windows tile the output exactly (``pool_h`` divides ``OH`` and
        ``pool_w`` ``OW``), valid with :attr:`ready`.
    phase : Out(8)
        The pooling phase ``a * pool_w + b`` (0 without pooling).
    last_phase : Out(1)
        The phase is the last.
    c_column : Out(32)
        Forward: the column of the convolution's C that the tile's first lane is at the
        phase (without pooling, the tile's first column; modulo ``2**32``).

    Latency
    -------
    :attr:`column`, :attr:`inside`, :attr:`offset`, :attr:`last_offset`, :attr:`phase`,
    :attr:`last_phase` and :attr:`c_column` follow an op :data:`LATENCY` cycles later (the op
    acts at the edge, then three registered stages).
    :attr:`ready` rises :data:`SETUP_CYCLES` cycles after :attr:`start`.

    Throughput
    ----------
    An op a cycle.
    """

    #: Cycles from an op to the outputs that follow it.
    LATENCY = 4
    #: Bits of a division's numerator: ``H + 2 * py - span`` (17 bits) and the small ones.
    _DIV_BITS = 17
    #: Divisions per axis.
    _DIVS = 5
    #: Cycles after the divisions for the products' stages to settle: the sizes, W N and
    #: OW N, the unit terms, seven stages of shift-and-add, the negation, a spare one.
    _SETTLE = 13
    #: Cycles from :attr:`start` to :attr:`ready`: the small products, the first
    #: numerators, the divisions (a bit a cycle, and a cycle to keep each), the products and
    #: the first tile and offset.
    SETUP_CYCLES = 2 + _DIVS * (_DIV_BITS + 1) + _SETTLE + 2

    def __init__(self, cols: int):
        if not isinstance(cols, int) or cols < 1 or cols & (cols - 1):
            raise ValueError(f"cols must be a power of two, not {cols!r}")
        self.cols = cols
        super().__init__({
            "geometry": In(conv_geometry_layout()),
            "start": In(1), "ready": Out(1),
            "pos_op": In(3), "off_op": In(2),
            "column": Out(32), "inside": Out(1), "offset": Out(8), "last_offset": Out(1),
            "positions": Out(48), "out_positions": Out(48), "c_positions": Out(48),
            "pool_exact": Out(1),
            "phase": Out(8), "last_phase": Out(1), "c_column": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        g = _Reg(conv_geometry_layout())          # the geometry, latched at start
        bwd = _Reg()
        # a tile's columns: cols, or with mode 3 (a weight gradient's K runs) TILE_BLOCK
        C = _Reg(range(max(self.cols, TILE_BLOCK) + 1))
        n = g.batch
        axes = {"h": (g.height, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h),
                "w": (g.width, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w)}
        pool = {"h": g.pool_h, "w": g.pool_w}

        # ---- set-up ----------------------------------------------------------------------
        step = Signal(range(self.SETUP_CYCLES + 1))
        busy = Signal()
        with m.If(self.start):
            m.d.sync += [g.eq(self.geometry), bwd.eq(self.geometry.mode == 2), step.eq(0),
                         g.pool_h.eq(Mux(self.geometry.pool_h == 0, 1, self.geometry.pool_h)),
                         g.pool_w.eq(Mux(self.geometry.pool_w == 0, 1, self.geometry.pool_w)),
                         busy.eq(1), self.ready.eq(0),
                         C.eq(Mux(self.geometry.mode == 3, TILE_BLOCK, self.cols))]
        with m.Elif(busy):
            m.d.sync += step.eq(step + 1)
        span_m1 = {a: _Reg(7, name=f"span_m1_{a}") for a in axes}   # (k - 1) * r
        with m.If(busy & (step == 0)):
            m.d.sync += [span_m1[a].eq((k - 1) * r) for a, (_, k, _, _, r) in axes.items()]

        # the divisions, a restoring divider per axis: ``num`` by the axis's stride (the last
        # by its pooling window)
        DB, ND = self._DIV_BITS, self._DIVS
        quot = {a: [_Reg(DB, name=f"q{i}_{a}") for i in range(ND)] for a in axes}
        rem = {a: [_Reg(4, name=f"r{i}_{a}") for i in range(ND)] for a in axes}
        div_i = Signal(range(ND + 1))
        div_bit = Signal(range(DB + 1))
        dividing = Signal()
        for a, (size, _k, s, p, r) in axes.items():
            nums = [size + 2 * p - span_m1[a] - 1, p, span_m1[a], r, quot[a][0] + 1]
            shift = _Reg(DB, name=f"div_num_{a}")
            acc = _Reg(4, name=f"div_rem_{a}")
            q = _Reg(DB, name=f"div_q_{a}")
            t = Cat(shift[-1], acc)                  # the remainder so far, the next bit in
            by = Mux(div_i == ND - 1, pool[a], s)
            ge = t >= by
            with m.If(busy & (step == 1)):
                m.d.sync += [shift.eq(nums[0]), acc.eq(0)]
            with m.Elif(dividing):
                with m.If(div_bit == DB):            # a division done: keep it, load the next
                    m.d.sync += acc.eq(0)
                    with m.Switch(div_i):
                        for i in range(ND):
                            with m.Case(i):
                                m.d.sync += [quot[a][i].eq(q), rem[a][i].eq(acc)]
                                if i + 1 < ND:
                                    m.d.sync += shift.eq(nums[i + 1])
                with m.Else():
                    m.d.sync += [shift.eq(shift << 1), q.eq(Cat(ge, q)),
                                 acc.eq(Mux(ge, t - by, t))]
        m.d.comb += dividing.eq(busy & (step >= 2) & (div_i < ND))
        with m.If(busy & (step == 1)):
            m.d.sync += [div_i.eq(0), div_bit.eq(0)]
        with m.Elif(dividing):
            with m.If(div_bit == DB):
                m.d.sync += [div_i.eq(div_i + 1), div_bit.eq(0)]
            with m.Else():
                m.d.sync += div_bit.eq(div_bit + 1)

        # The products, in free-running registered stages behind the quotients (which hold
        # once the divisions end): the sizes out; W N and OW N (a DSP each); the unit term of
        # each axis; its products with the small factors, shift-and-add a bit a stage (no
        # multiplier wider than a DSP's); the negated first terms. C's columns from two
        # 16 x 16 halves and their sum.
        div_end = 2 + ND * (DB + 1)
        first_step = div_end + self._SETTLE
        W32 = 32
        out = {a: _Reg(17, name=f"out_{a}") for a in axes}      # OH, OW
        m.d.sync += [out[a].eq(quot[a][0] + 1) for a in axes]
        pout = {a: quot[a][ND - 1] for a in axes}               # OH / pool_h, OW / pool_w
        m.d.sync += self.pool_exact.eq((rem["h"][ND - 1] == 0) & (rem["w"][ND - 1] == 0))
        n_last = _Reg(16)                    # N - cols: the last tile's image
        n_before = _Reg(16)                  # N - 2 cols: the one before it
        n_one = _Reg()                       # one tile a position: N == cols
        m.d.sync += [n_last.eq(n - C), n_before.eq(n - 2 * C), n_one.eq(n_last == 0)]
        wn = _Reg(W32)                       # W * N
        own = _Reg(W32)                      # OW * N
        pown = _Reg(W32)                     # (OW / pool_w) * N
        m.d.sync += [wn.eq(g.width * n), own.eq(out["w"][:16] * n),
                     pown.eq(pout["w"][:16] * n)]

        def times(name, small, big, bits):
            """``small * big`` (``small`` of ``bits`` bits) modulo 2**32, ``bits`` stages."""
            acc = Const(0, W32)
            for i in range(bits):
                nxt = _Reg(W32, name=f"{name}_{i}")
                m.d.sync += nxt.eq(carry_select_add(acc, Mux(small[i], big << i, 0), W32))
                acc = nxt
            return acc

        # backward-data under a pool's backward pass: C is written at the pool's input,
        # pool_h H x pool_w W positions: a row of them pool_w W N columns, and in all
        # (H pool_h) (pool_w W N), saturated to 48 bits
        pwn = times("pwn", g.pool_w, wn, 4)
        hph = _Reg(20)
        m.d.sync += hph.eq(g.height * g.pool_h)
        c_lo, c_hi = _Reg(38), _Reg(38)
        c_all = _Reg(57)
        m.d.sync += [c_lo.eq(hph * pwn[:18]), c_hi.eq(hph * pwn[18:]),
                     c_all.eq(c_lo + (c_hi << 18)),
                     self.c_positions.eq(Mux(bwd, Mux(c_all[48:].any(), (1 << 48) - 1,
                                                      c_all[:48]), self.out_positions))]

        # per axis: the position's step (forward: stride, backward: 1 on the remainder's
        # wrap), its term's step, its first value and term, its limit; the offset's step,
        # its term's step (and on a borrow), its first value and term
        ax = {}
        for a, (size, k, s, p, r) in axes.items():
            x = dict(
                pos_inc=_Reg(signed(18), name=f"pos_inc_{a}"),
                pos_first=_Reg(signed(18), name=f"pos_first_{a}"),
                pos_mod=_Reg(3, name=f"pos_mod_{a}"),          # the remainder's modulus
                pos_wrap=_Reg(3, name=f"pos_wrap_{a}"),        # ... less one
                pos_first_rem=_Reg(3, name=f"pos_first_rem_{a}"),
                limit=_Reg(17, name=f"limit_{a}"),              # H, or OH
                off_inc=_Reg(signed(18), name=f"off_inc_{a}"),
                off_first=_Reg(signed(18), name=f"off_first_{a}"),
                off_first_rem=_Reg(3, name=f"off_first_rem_{a}"),
                off_rem_step=_Reg(3, name=f"off_rem_step_{a}"),
                count=_Reg(16, name=f"count_{a}"),              # positions along the axis - 1
                sp=_Reg(7, name=f"sp_{a}"),                     # stride * pooling window
                kmax=_Reg(4, name=f"kmax_{a}"),                 # kernel - 1
                off_bterm=_Reg(W32, name=f"off_bterm_{a}"),
                pos_first_term=_Reg(W32, name=f"pos_first_term_{a}"),
                off_first_term=_Reg(W32, name=f"off_first_term_{a}"),
                first_wrap=_Reg(name=f"first_wrap_{a}"),          # the first remainder's
                one=_Reg(name=f"one_{a}"),                        # one position on the axis
            )
            ax[a] = x
            pd, pm = quot[a][1], rem[a][1]
            kd, km = quot[a][2], rem[a][2]
            rd, rm = quot[a][3], rem[a][3]
            m.d.sync += [
                x["kmax"].eq(k - 1),
                x["count"].eq(Mux(bwd, size - 1, pout[a] - 1)),
                x["limit"].eq(Mux(bwd, out[a], size)),
                x["sp"].eq(s * pool[a]),
                x["pos_inc"].eq(Mux(bwd, 1, x["sp"])),
                x["pos_first"].eq(Mux(bwd, pd, -p)),
                x["pos_mod"].eq(Mux(bwd, s, 1)),
                x["pos_wrap"].eq(Mux(bwd, s - 1, 0)),
                x["pos_first_rem"].eq(Mux(bwd, pm, 0)),
                x["off_inc"].eq(Mux(bwd, rd, r)),
                x["off_first"].eq(Mux(bwd, -kd, 0)),
                x["off_first_rem"].eq(Mux(bwd, km, 0)),
                x["off_rem_step"].eq(Mux(bwd, rm, 0)),
                x["first_wrap"].eq(x["pos_first_rem"] == x["pos_wrap"]),
                x["one"].eq(x["count"] == 0),
            ]
            # the term of one step along the axis: N (w) or W N, OW N (h)
            unit = _Reg(W32, name=f"unit_{a}")
            m.d.sync += unit.eq(Mux(bwd, own, wn) if a == "h" else n)
            x["pos_term"] = times(f"pos_term_{a}", Mux(bwd, 1, x["sp"]), unit, 7)
            # a pooling phase's steps: the window's first row by sy (and its term), C's
            # column by OW N (h) or N (w); a pooled position's step of C's column
            x["ph_term"] = times(f"ph_term_{a}", s, unit, 3)
            cunit = _Reg(W32, name=f"cunit_{a}")
            m.d.sync += cunit.eq(Mux(bwd, pwn, own) if a == "h" else n)
            x["cunit"] = cunit
            x["ct_step"] = times(f"ct_step_{a}", pool[a], cunit, 4)
            first_term = times(f"first_term_{a}", Mux(bwd, pd[:4], p), unit, 4)
            x["off_term"] = times(f"off_term_{a}", Mux(bwd, rd[:3], r), unit, 3)
            kd_term = times(f"kd_term_{a}", kd[:7], unit, 7)
            m.d.sync += [
                x["off_bterm"].eq(carry_select_add(x["off_term"], unit, W32)),
                x["pos_first_term"].eq(Mux(bwd, first_term,
                                           carry_select_add(~first_term, 1, W32))),
                x["off_first_term"].eq(Mux(bwd, carry_select_add(~kd_term, 1, W32), 0)),
            ]
        kk = _Reg(8)
        big = _Reg(W32)
        small = _Reg(16)
        halves = _Reg(33), _Reg(33)
        m.d.sync += [kk.eq(g.kernel_h * g.kernel_w),
                     big.eq(Mux(bwd, wn, pown)), small.eq(Mux(bwd, g.height, pout["h"][:16])),
                     halves[0].eq(small * big[:16]), halves[1].eq(small * big[16:]),
                     self.positions.eq(carry_select_add(halves[0], halves[1] << 16, 48))]
        o_halves = _Reg(33), _Reg(33)
        m.d.sync += [o_halves[0].eq(out["h"][:16] * own[:16]),
                     o_halves[1].eq(out["h"][:16] * own[16:]),
                     self.out_positions.eq(carry_select_add(o_halves[0], o_halves[1] << 16,
                                                            48))]
        first = Signal()                       # the last set-up cycle: the first tile
        m.d.comb += first.eq(busy & (step == first_step))
        with m.If(first):
            m.d.sync += [busy.eq(0), self.ready.eq(1)]

        # ---- the tile (position) and the offset ---------------------------------------------
        # A position: the image (n, a multiple of cols), and per axis its value (forward: the
        # window's top row h0 = oh * sy - py; backward: the quotient of h + py by sy), the
        # remainder (backward), the column term and the positions left along the axis.
        # (and, as registers beside them, whether the image is the last, the remainder
        # the last before the quotient steps, the position the axis's last)
        def pos_state(name):
            st = {"n": _Reg(16, name=f"{name}_n"), "n_end": _Reg(name=f"{name}_n_end")}
            for a in axes:
                st[a] = dict(v=_Reg(signed(18), name=f"{name}_{a}_v"),
                             rem=_Reg(3, name=f"{name}_{a}_rem"),
                             term=_Reg(W32, name=f"{name}_{a}_term"),
                             ct=_Reg(W32, name=f"{name}_{a}_ct"),
                             left=_Reg(16, name=f"{name}_{a}_left"),
                             wrap=_Reg(name=f"{name}_{a}_wrap"),
                             end=_Reg(name=f"{name}_{a}_end"))
            return st

        def flat(st):
            return [st["n"], st["n_end"]] + [x for a in axes for x in st[a].values()]

        pos, mark = pos_state("pos"), pos_state("mark")

        def first_pos():
            st = {"n": Const(0, 16), "n_end": n_one}
            for a in axes:
                x = ax[a]
                st[a] = dict(v=x["pos_first"], rem=x["pos_first_rem"],
                             term=x["pos_first_term"], ct=Const(0, W32), left=x["count"],
                             wrap=x["first_wrap"], end=x["one"])
            return st

        def step_axis(cur, a):
            """The axis's next position (forward: ``h0 + sy``; backward: ``h + 1``)."""
            x = ax[a]
            wrap = cur["wrap"]
            return dict(v=cur["v"] + Mux(wrap, x["pos_inc"], 0),
                        rem=Mux(wrap, 0, cur["rem"] + 1),
                        term=carry_select_add(cur["term"], Mux(wrap, x["pos_term"], 0), W32),
                        ct=carry_select_add(cur["ct"], x["ct_step"], W32),
                        left=cur["left"] - 1,
                        wrap=Mux(wrap, x["pos_wrap"] == 0, cur["rem"] + 1 == x["pos_wrap"]),
                        end=cur["left"] == 1)

        def next_pos(cur):
            nn_wrap = cur["n_end"]
            w_wrap = cur["w"]["end"]
            fp = first_pos()
            nxt = {"n": Mux(nn_wrap, 0, cur["n"] + C),
                   "n_end": Mux(nn_wrap, n_one, cur["n"] == n_before)}
            sw, sh = step_axis(cur["w"], "w"), step_axis(cur["h"], "h")
            nxt["w"] = {f: Mux(nn_wrap, Mux(w_wrap, fp["w"][f], sw[f]), cur["w"][f])
                        for f in cur["w"]}
            nxt["h"] = {f: Mux(nn_wrap & w_wrap, sh[f], cur["h"][f]) for f in cur["h"]}
            return nxt

        def assign(dst, src):
            return [d.eq(s) for d, s in zip(flat(dst), flat(src), strict=True)]

        nxt = next_pos(pos)
        with m.If(first):
            m.d.sync += assign(pos, first_pos()) + assign(mark, first_pos())
        with m.Elif(self.ready):
            with m.Switch(self.pos_op):
                with m.Case(PosOp.NEXT):
                    m.d.sync += assign(pos, nxt)
                with m.Case(PosOp.BACK):
                    m.d.sync += assign(pos, mark)
                with m.Case(PosOp.ADVANCE):
                    m.d.sync += assign(pos, nxt) + assign(mark, nxt)
                with m.Case(PosOp.ZERO):
                    m.d.sync += assign(pos, first_pos()) + assign(mark, first_pos())

        # The offset: per axis its value (forward: dy * ry; backward: minus the quotient of
        # dy * ry by sy), the remainder (backward), the column term and the steps left in the
        # kernel's row (w) or the kernel (h); the stack's matrix and whether it is the last.
        # (and, beside the remainder, whether the next step borrows: no comparison in front
        # of the term's sum)
        off = {a: dict(v=_Reg(signed(18), name=f"off_{a}_v"),
                       rem=_Reg(3, name=f"off_{a}_rem"),
                       borrow=_Reg(name=f"off_{a}_borrow"),
                       term=_Reg(W32, name=f"off_{a}_term"),
                       left=_Reg(4, name=f"off_{a}_left")) for a in axes}
        index = _Reg(8)
        left = _Reg(8)                       # offsets after this one
        # The pooling phase: per axis the first offset's value and term at the phase (the
        # window's row a: a * sy on, and its term), the phase's C column term (a * OW N, or
        # b * N) and the phases left along the axis; the phase's index and those after it.
        ph = {a: dict(v=_Reg(signed(18), name=f"ph_{a}_v"), term=_Reg(W32, name=f"ph_{a}_term"),
                      ct=_Reg(W32, name=f"ph_{a}_ct"), left=_Reg(4, name=f"ph_{a}_left"))
              for a in axes}
        ph_index = _Reg(8)
        ph_after = _Reg(8)
        ph_count = _Reg(8)                   # phases - 1
        m.d.sync += ph_count.eq(g.pool_h * g.pool_w - 1)

        def first_ph(a):
            x = ax[a]
            return dict(v=x["off_first"], term=x["off_first_term"], ct=Const(0, W32),
                        left=pool[a] - 1)

        def step_ph(a):
            x, cur = ax[a], ph[a]
            return dict(v=cur["v"] + Mux(bwd, 0, axes[a][2]),
                        term=carry_select_add(cur["term"], Mux(bwd, 0, x["ph_term"]), W32),
                        ct=carry_select_add(cur["ct"], x["cunit"], W32), left=cur["left"] - 1)

        def first_off(a, at=None):
            at = ph[a] if at is None else at
            x = ax[a]
            return dict(v=at["v"], rem=x["off_first_rem"],
                        borrow=x["off_first_rem"] < x["off_rem_step"], term=at["term"],
                        left=x["kmax"])

        def step_off(a):
            """Forward: ``dy * ry`` up by ``ry``; backward: ``dy`` down by one, ``dy * ry``
            down by ``ry``, whose remainder by ``sy`` may borrow."""
            x, cur = ax[a], off[a]
            borrow = cur["borrow"]
            rem = (Mux(borrow, cur["rem"] + x["pos_mod"], cur["rem"]) - x["off_rem_step"])[:3]
            return dict(v=cur["v"] + x["off_inc"] + borrow, rem=rem,
                        borrow=rem < x["off_rem_step"],
                        term=carry_select_add(cur["term"], Mux(borrow, x["off_bterm"],
                                                               x["off_term"]), W32),
                        left=cur["left"] - 1)

        def assign_off(a, src):
            return [off[a][f].eq(src[f]) for f in off[a]]

        def assign_ph(a, src):
            return [ph[a][f].eq(src[f]) for f in ph[a]]

        with m.If(first | (self.ready & (self.off_op == OffOp.PHASE))):
            # the next phase (from the last, or at the set-up, the first), at its first
            # offset
            wrap = first | (ph_after == 0)
            w_wrap = wrap | (ph["w"]["left"] == 0)
            nph = {"h": {f: Mux(wrap, first_ph("h")[f], Mux(w_wrap, step_ph("h")[f],
                                                               ph["h"][f]))
                         for f in ph["h"]},
                   "w": {f: Mux(w_wrap, first_ph("w")[f], step_ph("w")[f]) for f in ph["w"]}}
            m.d.sync += assign_ph("h", nph["h"]) + assign_ph("w", nph["w"])
            m.d.sync += assign_off("h", first_off("h", nph["h"]))
            m.d.sync += assign_off("w", first_off("w", nph["w"]))
            m.d.sync += [index.eq(Mux(bwd, kk - 1, 0)), left.eq(kk - 1),
                         ph_index.eq(Mux(wrap, 0, ph_index + 1)),
                         ph_after.eq(Mux(wrap, ph_count, ph_after - 1))]
        with m.Elif(self.ready & (self.off_op == OffOp.ZERO)):
            m.d.sync += assign_off("h", first_off("h")) + assign_off("w", first_off("w"))
            m.d.sync += [index.eq(Mux(bwd, kk - 1, 0)), left.eq(kk - 1)]
        with m.Elif(self.ready & (self.off_op == OffOp.NEXT)):
            m.d.sync += [index.eq(Mux(bwd, index - 1, index + 1)), left.eq(left - 1)]
            with m.If(off["w"]["left"] == 0):
                m.d.sync += assign_off("w", first_off("w")) + assign_off("h", step_off("h"))
            with m.Else():
                m.d.sync += assign_off("w", step_off("w"))

        # ---- the outputs: three registered stages ---------------------------------------------
        s1_h, s1_w = _Reg(signed(19)), _Reg(signed(19))      # oh or h, ow or w
        s1_mods = _Reg()
        s1_th, s1_tw, s1_n = _Reg(W32), _Reg(W32), _Reg(16)
        s1_index, s1_last = _Reg(8), _Reg()
        m.d.sync += [s1_h.eq(pos["h"]["v"] + off["h"]["v"]), s1_w.eq(pos["w"]["v"] + off["w"]["v"]),
                     s1_mods.eq((pos["h"]["rem"] == off["h"]["rem"])
                                & (pos["w"]["rem"] == off["w"]["rem"])),
                     s1_th.eq(carry_select_add(pos["h"]["term"], off["h"]["term"], W32)),
                     s1_tw.eq(carry_select_add(pos["w"]["term"], off["w"]["term"], W32)),
                     s1_n.eq(pos["n"]),
                     s1_index.eq(index), s1_last.eq(left == 0)]
        s2_in = _Reg(4)
        s2_mods, s2_index, s2_last = _Reg(), _Reg(8), _Reg()
        s2_sum, s2_n = _Reg(W32), _Reg(16)
        m.d.sync += [s2_in.eq(Cat(s1_h >= 0, s1_h < ax["h"]["limit"], s1_w >= 0,
                                  s1_w < ax["w"]["limit"])),
                     s2_mods.eq(s1_mods), s2_sum.eq(carry_select_add(s1_th, s1_tw, W32)),
                     s2_n.eq(s1_n), s2_index.eq(s1_index), s2_last.eq(s1_last)]
        m.d.sync += [self.inside.eq(s2_in.all() & s2_mods),
                     self.column.eq(carry_select_add(s2_sum, s2_n, W32)),
                     self.offset.eq(s2_index), self.last_offset.eq(s2_last)]
        s1_ct, s1_pct = _Reg(W32), _Reg(W32)
        s1_phase, s1_plast = _Reg(8), _Reg()
        m.d.sync += [s1_ct.eq(carry_select_add(pos["h"]["ct"], pos["w"]["ct"], W32)),
                     s1_pct.eq(carry_select_add(ph["h"]["ct"], ph["w"]["ct"], W32)),
                     s1_phase.eq(ph_index), s1_plast.eq(ph_after == 0)]
        s2_ct, s2_phase, s2_plast = _Reg(W32), _Reg(8), _Reg()
        m.d.sync += [s2_ct.eq(carry_select_add(s1_ct, s1_pct, W32)), s2_phase.eq(s1_phase),
                     s2_plast.eq(s1_plast)]
        m.d.sync += [self.c_column.eq(carry_select_add(s2_ct, s2_n, W32)),
                     self.phase.eq(s2_phase), self.last_phase.eq(s2_plast)]
        return m
