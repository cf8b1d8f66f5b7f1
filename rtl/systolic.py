"""Output-stationary systolic int8 GEMM array with exact int32 accumulation."""

from amaranth import Cat, ClockSignal, Instance, Module, Mux, ResetSignal, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ._util import delay
from .dsp import PackedMac, slice_shift
from .xilinx import lane_copies, register_copies, select

__all__ = ["ProcessingElement", "PackedPair", "SystolicArray", "array_input_layout",
           "array_output_layout", "unpack_pair"]

#: Operand lanes (of ``a`` or ``b``) one copy of the array's input ``valid`` zeroes on a
#: bubble: each copy drives ``8 * LANES_PER_VALID`` LUT inputs.
LANES_PER_VALID = 8

def pair_result_layout(dsp_slice: str = "DSP48E2") -> data.StructLayout:
    """What a :class:`PackedPair` on ``dsp_slice`` captures at the end of a tile: ``P``,
    ``w_lo = S_lo[31:S]`` (``32 - S`` bits, ``S`` the slice's shift) and ``w_top``, the
    ``S - 16`` bits of ``S_hi`` above ``P`` (2 on a DSP48E2; on a DSP48E1, whose
    ``P[47:16]`` holds all 32 bits of ``S_hi``'s share, no such field)."""
    shift = slice_shift(dsp_slice)
    fields = {"p": signed(48), "w_lo": 32 - shift}
    if shift > 16:
        fields["w_top"] = shift - 16
    return data.StructLayout(fields)


#: What a :class:`PackedPair` on a DSP48E2 captures.
PAIR_RESULT = pair_result_layout("DSP48E2")


def array_input_layout(rows: int, cols: int, partial: bool = False) -> data.StructLayout:
    """One reduction step: a column of op(A) (``rows`` values) and a row of op(B); with
    ``partial``, a last field ``rows``: with ``last``, the tile's rows read out (see
    :class:`SystolicArray`)."""
    return data.StructLayout({
        "a":     data.ArrayLayout(signed(8), rows),
        "b":     data.ArrayLayout(signed(8), cols),
        "first": 1,   # this step starts a new accumulation (the accumulators are cleared)
        "last":  1,   # this step ends the tile: capture the sums and stream them out
        # rows 0 .. rows - 1 of the tile read out (0: all of them)
        **({"rows": range(rows + 1)} if partial else {}),
    })


def array_output_layout(rows: int, cols: int) -> data.StructLayout:
    """One row of the C tile."""
    return data.StructLayout({
        "data": data.ArrayLayout(signed(32), cols),
        "row":  range(rows),
        "last": 1,    # the tile's last row
    })


def _shift_add_product(a, b):
    """``a * b`` for signed 8-bit ``a``, ``b`` as partial products: bit 7 of ``b`` weighs -128."""
    terms = [Mux(b[i], a.as_signed() << i, 0) for i in range(7)]
    total = -Mux(b[7], a.as_signed() << 7, 0)
    for t in terms:
        total = total + t
    return total


class ProcessingElement(wiring.Component):
    """One multiply-accumulate cell: ``acc = (first ? 0 : acc) + a * b``.

    ``a`` (with the ``first``/``last`` flags) passes to the right and ``b`` passes down, one
    register each. The product and the accumulator are registered, so the cell maps onto one
    DSP48 slice with its M and P registers and the clear done by the DSP's Z multiplexer; no
    fabric adder is needed (checked by :mod:`platforms.estimate`). When ``last`` reaches the
    accumulator the final sum is copied into :attr:`result`, freeing the accumulator for the
    next tile the very next cycle.

    With ``fabric=True`` the product is a sum of shifted partial products instead of a
    multiplication, so synthesis builds it from LUTs and carry chains rather than a DSP slice
    (for arrays with more PEs than the device has DSP slices). Same behaviour, same timing.

    Attributes
    ----------
    a_i, first_i, last_i, b_i : In
        Operands and flags from the left / top neighbour.
    a_o, first_o, last_o, b_o : Out
        The same, one cycle later, for the right / bottom neighbour.
    result : Out(signed(32))
        The last captured sum, from :attr:`RESULT_LATENCY` cycles after the cycle ``last_i``
        is high until the next capture (:attr:`OVERWRITE_LATENCY` cycles after the next
        ``last_i``).

    Latency
    -------
    ``a``, ``b`` and the flags pass on one cycle later; the sum is on :attr:`result`
    :data:`RESULT_LATENCY` cycles after ``last_i``.

    Throughput
    ----------
    One MAC a cycle.
    """

    #: Cycles from ``last_i`` to :attr:`result` holding the sum: the flag register, the
    #: ``capture`` and ``capture_d`` registers (the accumulator takes the last product
    #: meanwhile), the result register.
    RESULT_LATENCY = 4
    #: Cycles from ``last_i`` to :attr:`result` changing (the whole result at once).
    OVERWRITE_LATENCY = RESULT_LATENCY

    def __init__(self, *, fabric: bool = False):
        self.fabric = bool(fabric)
        super().__init__()

    a_i: In(signed(8))
    b_i: In(signed(8))
    first_i: In(1)
    last_i: In(1)
    a_o: Out(signed(8))
    b_o: Out(signed(8))
    first_o: Out(1)
    last_o: Out(1)
    result: Out(signed(32))

    def elaborate(self, platform):
        m = Module()
        # Data registers have no reset (only the flags do): a reset would keep the operand,
        # product and accumulator registers out of the DSP slice.
        a = Signal(signed(8), reset_less=True)
        b = Signal(signed(8), reset_less=True)
        prod = Signal(signed(16), reset_less=True)
        acc = Signal(signed(32), reset_less=True)
        result = Signal(signed(32), reset_less=True)
        # the flags are reset-less too (see SystolicArray: stale flags after a reset are
        # harmless, and a reset would keep the chains out of SRLs)
        first = Signal(reset_less=True)
        last = Signal(reset_less=True)
        clear = Signal(reset_less=True)
        capture = Signal(reset_less=True)
        capture_d = Signal(reset_less=True)
        m.d.comb += [self.first_o.eq(first), self.last_o.eq(last)]
        m.d.sync += [
            a.eq(self.a_i), b.eq(self.b_i),
            first.eq(self.first_i), last.eq(self.last_i),
            prod.eq(_shift_add_product(a, b) if self.fabric else a * b),
            clear.eq(self.first_o), capture.eq(self.last_o),
            acc.eq(Mux(clear, 0, acc) + prod),
            capture_d.eq(capture),
        ]
        with m.If(capture_d):
            m.d.sync += result.eq(acc)
        m.d.comb += [self.a_o.eq(a), self.b_o.eq(b), self.result.eq(result)]
        return m


class PackedPair(wiring.Component):
    """Two vertically adjacent MAC cells in one DSP slice (:class:`rtl.dsp.PackedMac`).

    Rows ``2q`` (``hi``) and ``2q + 1`` (``lo``) of a column share the operand ``b``. The slice
    holds ``P = S_hi * 2**S + S_lo`` in 48 bits (``S`` = 18 on a DSP48E2, 16 on a DSP48E1),
    which alone cannot tell the two sums apart once ``|S_lo|`` reaches ``2**(S-1)`` (eight
    steps at worst on a DSP48E2, two on a DSP48E1). So the fabric keeps the bits the slice
    lacks: ``w_lo = S_lo[31:S]`` and, where ``P[47:S]`` is narrower than 32 bits, ``w_top =
    P_true[47+S-16:48]`` (two bits on a DSP48E2, none on a DSP48E1). A sum moves by at most
    ``2**14`` (resp. ``2**33``) a step — at most a quarter of the field ``2**S``, even at
    ``S = 16`` — so it crosses a multiple of ``2**S`` (resp. ``2**48``) exactly when the
    field's top two bits go ``11 -> 00`` (up, +1) or ``00 -> 11`` (down, -1); a load counts
    as a move from zero. With both captured beside ``P``, :func:`unpack_pair`
    recovers the two int32 sums exactly for any ``K <= MAX_K`` with one subtraction.

    ``b`` passes down the column in the slices themselves: the first pair row registers
    ``b_i`` in the fabric and feeds the slice's ``B`` input; every later one (``cascade``)
    takes it from the slice above over the dedicated ``BCOUT`` -> ``BCIN`` wires into its own
    ``B1`` register — the same one cycle per pair row as a fabric register, with neither the
    register nor its route in the fabric.

    Attributes
    ----------
    hi_i, lo_i, first_i, last_i, b_i : In
    hi_o, lo_o, first_o, last_o : Out
        Operands and flags, passed on one cycle later as in :class:`ProcessingElement`
        (``b_i`` unused with ``cascade``).
    bc_i : In(signed(18))
        With ``cascade``: ``b`` from the pair above's :attr:`bc_o`.
    bc_o : Out(signed(18))
        ``b`` for the pair below (the slice's ``BCOUT``), one cycle after this pair's.
    result : Out(pair_result_layout(dsp_slice))
        The captured ``P`` and high bits, from :attr:`RESULT_LATENCY` cycles after the cycle
        ``last_i`` is high until the next capture (``P`` changes :attr:`OVERWRITE_LATENCY`
        cycles after the next ``last_i``, the counts one cycle later).

    Latency
    -------
    Operands and flags pass on one cycle later; the two sums are on :attr:`result`
    :data:`RESULT_LATENCY` cycles after ``last_i``.

    Throughput
    ----------
    Two MACs a cycle.
    """

    #: Cycles from ``last_i`` to :attr:`result` holding the sums: the operand register, the
    #: slice's :attr:`rtl.dsp.PackedMac.LATENCY`, ``P`` captured, the wrap counts captured one
    #: cycle after ``P``.
    RESULT_LATENCY = 1 + PackedMac.LATENCY + 2
    #: Cycles from ``last_i`` to :attr:`result` first changing (``P``, one cycle before the
    #: counts).
    OVERWRITE_LATENCY = RESULT_LATENCY - 1

    def __init__(self, *, primitive: bool = False, cascade: bool = False,
                 dsp_slice: str = "DSP48E2"):
        self.primitive = primitive
        self.cascade = bool(cascade)
        self.dsp_slice = dsp_slice
        self.shift = slice_shift(dsp_slice)
        super().__init__({
            "hi_i": In(signed(8)), "lo_i": In(signed(8)), "b_i": In(signed(8)),
            "bc_i": In(signed(18)), "first_i": In(1), "last_i": In(1),
            "hi_o": Out(signed(8)), "lo_o": Out(signed(8)), "bc_o": Out(signed(18)),
            "first_o": Out(1), "last_o": Out(1),
            "result": Out(pair_result_layout(dsp_slice)),
        })

    def elaborate(self, platform):
        m = Module()
        hi = Signal(signed(8), reset_less=True)
        lo = Signal(signed(8), reset_less=True)
        first = Signal(reset_less=True)       # flags: reset-less, as in ProcessingElement
        last = Signal(reset_less=True)
        m.d.sync += [hi.eq(self.hi_i), lo.eq(self.lo_i),
                     first.eq(self.first_i), last.eq(self.last_i)]
        m.d.comb += [self.hi_o.eq(hi), self.lo_o.eq(lo),
                     self.first_o.eq(first), self.last_o.eq(last)]

        m.submodules.mac = mac = PackedMac(primitive=self.primitive, cascade=self.cascade,
                                           dsp_slice=self.dsp_slice)
        shift = self.shift
        m.d.comb += [mac.hi.eq(hi), mac.lo.eq(lo), mac.bcin.eq(self.bc_i),
                     self.bc_o.eq(mac.bcout)]
        if not self.cascade:
            b = Signal(signed(8), reset_less=True)
            m.d.sync += b.eq(self.b_i)
            m.d.comb += mac.b.eq(b)

        m.d.comb += mac.clear.eq(delay(m, first, PackedMac.CLEAR_DELAY, "clear",
                                       reset_less=True))
        # P was a load; P is the tile's sum
        loaded = delay(m, first, PackedMac.LATENCY, "loaded", reset_less=True)
        # The capture enables are a register of each pair's own (FDRE instances in board
        # builds, which synthesis cannot merge): every pair on one anti-diagonal of the array
        # sees the same flag, and merged into one flip-flop it would drive the result enables
        # of all of them.
        final, = register_copies(m, delay(m, last, PackedMac.LATENCY - 1, "final_pre",
                                          reset_less=True), 1,
                                 primitive=self.primitive, name="final")

        p = mac.p

        def crossing(prev, now):
            return Mux((prev == 0b11) & (now == 0b00), 1,
                       Mux((prev == 0b00) & (now == 0b11), -1, 0))

        # One wrap count per field the result layout has beside P: S_lo's bits above P's low
        # field (w_lo, from its top two bits P[S-1:S-2]) and, on a DSP48E2, S_hi's above P
        # (w_top, from P[47:46]). The crossings are registered before they are counted, so
        # each counter bit is one LUT in front of the carry chain; a load resets the counts
        # and counts as a move from zero. P is captured on the tile's last cycle, the counts,
        # which lag by one cycle, on the next.
        layout = pair_result_layout(self.dsp_slice)
        tops = {"w_lo": p[shift - 2:shift], "w_top": p[46:48]}
        final_d, = register_copies(m, final, 1, primitive=self.primitive, name="final_d")
        result = Signal(layout, reset_less=True)
        with m.If(final):
            m.d.sync += result.p.eq(p)
        for field, member in layout:
            if field == "p":
                continue
            field_shape = member.shape
            bits = tops[field]
            prev = Signal(2, name=f"{field}_prev", reset_less=True)
            d = Signal(2, name=f"{field}_cross", reset_less=True)
            w = Signal(field_shape, name=field, reset_less=True)
            step = Signal(field_shape, name=f"{field}_step")
            m.d.sync += [prev.eq(bits), d.eq(crossing(Mux(loaded, 0, prev), bits)),
                         w.eq(Mux(loaded, 0, step))]
            m.d.comb += step.eq(w + d.as_signed())
            with m.If(final_d):
                m.d.sync += getattr(result, field).eq(step)
        m.d.comb += self.result.eq(result)
        return m


def unpack_pair(m, result, low, *, name="unpack"):
    """Combinational logic: one of the two int32 sums of a captured pair result.

    ``S_lo = {w_lo, P[S-1:0]}`` and, since ``P_true = S_hi * 2**S + S_lo`` with ``P_true[49:0]
    = {w_top, P}`` and the low ``S`` bits of both terms equal, ``S_hi = {w_top, P[47:S]} -
    sext(w_lo)`` (``S`` the slice's shift, ``32 - len(w_lo)``; all modulo ``2**32``; exact,
    since both sums fit in int32). Both go through one subtractor whose operands ``low``
    selects: the result is ``S_lo`` when ``low`` is set, else ``S_hi``.
    """
    p = result.p
    shift = 32 - len(result.w_lo)
    top = result.w_top if shift > 16 else Cat()       # bits of S_hi above P, if any
    x = Signal(32, name=f"{name}_x")
    y = Signal(signed(32), name=f"{name}_y")
    value = Signal(signed(32), name=name)
    m.d.comb += [
        x.eq(Mux(low, Cat(p[:shift], result.w_lo), Cat(p[shift:], top))),
        y.eq(Mux(low, 0, result.w_lo.as_signed())),
        value.eq(x - y),
    ]
    return value


class SystolicArray(wiring.Component):
    """``rows`` x ``cols`` output-stationary systolic array of int8 MACs.

    Each cycle the array takes one reduction step of a tile GEMM ``C += op(A)[:, k] op(B)[k, :]``
    (a column of ``rows`` int8 values and a row of ``cols`` int8 values). Inputs are skewed
    internally so PE ``(i, j)`` sees step ``k`` at cycle ``k + i + j`` (``k + i // 2 + j`` when
    packed). Every signal is registered between PEs, so no path is longer than one PE, whatever
    the array size. A cycle without ``i_stream.valid`` is a bubble: it adds zero.

    A step with ``first`` clears the accumulators; a step with ``last`` ends the tile: the
    sums are captured and streamed out of :attr:`o_stream` one row per cycle, while the next
    tile already accumulates. Each cell is read as soon as it has captured (the read-out runs
    diagonally, like the skew), and the columns wait for the last one in a delay line each,
    so the next ``last`` may come :attr:`min_emit_interval` cycles later (``rows``: a
    row's read-out a cycle), which :class:`rtl.datapath.GemmDatapath` guarantees.

    With ``partial``, a ``last`` step also says how many of the tile's rows to read out
    (``rows``, 1 to ``rows``; 0: all): rows 0 to ``rows - 1`` leave, the tile's last row
    marked, and the next ``last`` may come :meth:`emit_interval` ``(rows)`` cycles later.

    Parameters
    ----------
    rows, cols : int
        Array shape (any >= 1, not necessarily square).
    packing : 1 or 2
        MACs per DSP slice. 1: one :class:`ProcessingElement` per MAC (Yosys packs it into a
        DSP48E1 with the accumulator). 2: rows are paired into :class:`PackedPair` cells, two
        MACs per ``dsp_slice``; an odd last row is paired with zeros.
    dsp_slice : {"DSP48E2", "DSP48E1"}
        With ``packing=2``: the slice the pairs are built for (UltraScale+ or 7-series; it
        sets the pair's shift, :data:`rtl.dsp.SLICES`), modelled or instantiated.
    primitive : bool
        Instantiate Xilinx primitives (for synthesis) instead of plain RTL (for simulation):
        the read-out multiplexers as LUT6/MUXF7/MUXF8 (:mod:`rtl.xilinx`) and, with
        ``packing=2``, the DSP slices.
    partial : bool
        Build the partial read-out: the ``rows`` field of :func:`array_input_layout`.
    slr_cols : tuple of int
        Columns that begin a new super logic region (SLR) of a stacked-silicon device, in
        increasing order (empty: one region). The columns from one such index to the next
        form a group, a submodule ``slr{g}`` (group 0 is the array itself, where the rest of
        the accelerator is placed) that a placement constraint can put in its own SLR
        (:func:`platforms.vivado.xdc`). Every signal that crosses from one group to the next
        (the rows' operands and flags, the read-out's select) or between group 0 and group
        ``g`` (``b``, the read-out data) passes :attr:`SLR_STAGES` registers per crossing,
        with no logic between them and marked for Laguna sites: a transmit register in the
        region it leaves, a receive register in the region it enters. Column ``j`` of group
        ``g`` sees step ``k`` ``SLR_STAGES * g`` cycles later than without groups, and the
        read-out leaves ``2 * SLR_STAGES * (groups - 1)`` cycles later (:attr:`latency`);
        the results are the same.

    Attributes
    ----------
    i_stream : In(stream.Signature(array_input_layout(rows, cols, partial), always_ready=True))
    o_stream : Out(stream.Signature(array_output_layout(rows, cols), always_ready=True))

    Latency
    -------
    Row 0 of a tile leaves :attr:`o_stream` :attr:`latency` cycles after the step with
    ``last`` is accepted (``readout_delay``, the read-out registers and the wait for the
    last column: ``cols + 5``; ``cols + 9`` packed; ``2 * SLR_STAGES * (groups - 1)`` more
    with SLR groups); row ``r`` follows ``r`` cycles later.

    Throughput
    ----------
    One MAC per PE per cycle in steady state; steps with ``last`` at least
    :attr:`min_emit_interval` cycles apart.
    """

    #: Registers between :attr:`i_stream` and the skew chains: the step's operands and
    #: flags, and ``valid`` in one copy per :data:`LANES_PER_VALID` lanes, which zeroes a
    #: bubble's operands (so no one net gates every lane of ``a`` and ``b``).
    INPUT_STAGES = 1

    #: Registers per SLR crossing: transmit (in the region left) and receive (in the region
    #: entered), as Vivado's Laguna flip-flops pair them (UG949, "SLR crossing").
    SLR_STAGES = 2
    #: Attributes of the crossing registers (named ``*_slr_tx*`` and ``*_slr_rx*``): never
    #: packed into SRLs (Vivado's ``SHREG_EXTRACT``); the constraints give them
    #: ``USER_SLL_REG`` (UG912: place in a Laguna site).
    SLR_ATTRS = {"shreg_extract": "no"}

    def __init__(self, rows: int, cols: int, *, packing: int = 1, primitive: bool = False,
                 dsp_rows: int | None = None, slr_cols=(), dsp_slice: str = "DSP48E2",
                 partial: bool = False):
        for name, v in (("rows", rows), ("cols", cols)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, not {v!r}")
        if packing not in (1, 2):
            raise ValueError(f"packing must be 1 or 2, not {packing!r}")
        slice_shift(dsp_slice)                  # validates dsp_slice
        self.rows, self.cols = rows, cols
        self.packing, self.primitive, self.dsp_slice = packing, bool(primitive), dsp_slice
        if dsp_rows is not None and (packing != 1 or not isinstance(dsp_rows, int)
                                     or not 0 <= dsp_rows <= rows):
            raise ValueError(f"dsp_rows must be None or in 0..rows with packing=1, "
                             f"not {dsp_rows!r}")
        #: Rows of PEs that multiply in DSP slices; the rest multiply in LUTs.
        self.dsp_rows = rows if dsp_rows is None else dsp_rows
        slr_cols = tuple(slr_cols) if isinstance(slr_cols, (tuple, list)) else slr_cols
        if (not isinstance(slr_cols, tuple)
                or any(not isinstance(c, int) or isinstance(c, bool) for c in slr_cols)
                or list(slr_cols) != sorted(set(slr_cols))
                or any(not 1 <= c < cols for c in slr_cols)):
            raise ValueError(f"slr_cols must be increasing column indices in 1..cols-1 "
                             f"({cols - 1}), not {slr_cols!r}")
        #: First column of each SLR group after the first.
        self.slr_cols = slr_cols
        #: When a dict, cells are instantiated by module name (one Verilog module per kind of
        #: cell instead of one per cell) and registered here as ``name -> factory``; the
        #: exporter (:mod:`rtl.export`) emits each module once. ``None``: cells inline.
        self.cell_modules = None
        self.partial = bool(partial)
        super().__init__({
            "i_stream": In(stream.Signature(array_input_layout(rows, cols, self.partial),
                                            always_ready=True)),
            "o_stream": Out(stream.Signature(array_output_layout(rows, cols),
                                             always_ready=True)),
        })

    @property
    def pair_rows(self) -> int:
        return -(-self.rows // 2)

    # Every pipeline constant below derives from the cells' declared latencies, the skew and
    # the read-out's stages: adding a register to a cell or to the read-out is one change.

    @property
    def _cell_kind(self) -> type:
        return PackedPair if self.packing == 2 else ProcessingElement

    @property
    def _cell_rows(self) -> int:
        return self.pair_rows if self.packing == 2 else self.rows

    @property
    def _read_cycles(self) -> int:
        """Read-out cycles per cell row (a packed pair yields two rows of C)."""
        return 2 if self.packing == 2 else 1

    @property
    def groups(self) -> int:
        """SLR groups of columns (1 without :attr:`slr_cols`)."""
        return len(self.slr_cols) + 1

    def group_of(self, col: int) -> int:
        """The SLR group of column ``col``."""
        return sum(col >= c for c in self.slr_cols)

    def column_skew(self, col: int) -> int:
        """Cycles column ``col`` sees a step after column 0: ``col``, plus the crossings'
        registers of the groups before it."""
        return col + self.SLR_STAGES * self.group_of(col)

    @property
    def _deskew(self) -> int:
        """Cycles column 0's read-out waits for the last column's: its skew, and its data's
        crossings back to group 0."""
        return self.column_skew(self.cols - 1) + self.SLR_STAGES * (self.groups - 1)

    @property
    def _readout_stages(self) -> int:
        """Registers from column 0's selected cell results to :attr:`o_stream`: the output
        register (packed: the pair register, then the unpacking output register), then the
        wait for the last column (:attr:`_deskew`)."""
        return (2 if self.packing == 2 else 1) + self._deskew

    @property
    def readout_delay(self) -> int:
        """Cycles from accepting a ``last`` step to selecting row 0 of column 0's result
        registers: the cell's ``RESULT_LATENCY`` after the input stage. Column ``j`` selects
        ``column_skew(j)`` cycles later, as its cells capture, and cell row ``q`` ``s q``
        cycles after row 0 (``s`` read-out cycles a cell row: 1, or 2 packed)."""
        return self.INPUT_STAGES + self._cell_kind.RESULT_LATENCY

    @property
    def latency(self) -> int:
        """Cycles from accepting a ``last`` step to row 0 of the tile on :attr:`o_stream`
        (``cols + 5``; ``cols + 9`` packed; without SLR groups)."""
        return self.readout_delay + self._readout_stages

    def _cell(self, cell):
        """``cell`` itself, or an instance of its shared module (see :attr:`cell_modules`)."""
        if self.cell_modules is None:
            return cell
        if isinstance(cell, ProcessingElement):
            fabric = cell.fabric
            name = "bfp_pe_lut" if fabric else "bfp_pe"
            factory = lambda: ProcessingElement(fabric=fabric)  # noqa: E731
        else:
            primitive, cascade, dsp = cell.primitive, cell.cascade, cell.dsp_slice
            name = ("bfp_pair" + (f"_{dsp.lower()}" if primitive
                                  else "_e1" if dsp == "DSP48E1" else "")
                    + ("_casc" if cascade else ""))
            factory = lambda: PackedPair(primitive=primitive, cascade=cascade,  # noqa: E731
                                         dsp_slice=dsp)
        self.cell_modules.setdefault(name, factory)
        ports = {("i_" if member.flow == In else "o_") + pname: Value.cast(getattr(cell, pname))
                 for pname, member in cell.signature.members.items()}
        cell._MustUse__silence = True        # stands in for the module; never elaborated
        return Instance(name, i_clk=ClockSignal(), i_rst=ResetSignal(), **ports)

    @property
    def min_emit_interval(self) -> int:
        """Least number of cycles between two steps with ``last``.

        Cell ``(q, j)`` (of ``Q`` cell rows, ``s`` read-out cycles each: 1, or 2 packed) is
        read ``readout_delay + s q + column_skew(j)`` cycles after its ``last`` step and
        overwritten ``INPUT_STAGES + q + column_skew(j) + OVERWRITE_LATENCY`` cycles after
        the next one, and a read-out takes a cycle a row; so the interval is the larger of
        ``rows`` and ``readout_delay - INPUT_STAGES - OVERWRITE_LATENCY + (s - 1)(Q - 1) +
        1``: ``rows``; ``max(rows, ceil(rows / 2) + 1)`` packed; the same with SLR groups.
        The read-out, not the array's skew, sets it.
        """
        return self.emit_interval(self.rows)

    def emit_interval(self, rows: int) -> int:
        """Least number of cycles from a ``last`` step whose tile reads out ``rows`` rows (1
        to :attr:`rows`; with ``partial``) to the next ``last`` step: as
        :attr:`min_emit_interval`, over the cell rows read (``ceil(rows / s)``): the larger
        of ``rows`` and ``readout_delay - INPUT_STAGES - OVERWRITE_LATENCY + (s - 1)
        (ceil(rows / s) - 1) + 1``."""
        if not isinstance(rows, int) or isinstance(rows, bool) or not 1 <= rows <= self.rows:
            raise ValueError(f"rows must be an integer in 1..{self.rows}, not {rows!r}")
        s = self._read_cycles
        q = -(-rows // s)
        return max(rows, self.readout_delay - self.INPUT_STAGES
                   - self._cell_kind.OVERWRITE_LATENCY + (s - 1) * (q - 1) + 1)

    def _cross(self, mods, value, src: int, dst: int, name: str):
        """``value``, driven in group ``src``'s module, carried to group ``dst``'s through
        :attr:`SLR_STAGES` registers per crossing (transmit in the group left, receive in the
        group entered)."""
        assert self.SLR_STAGES == 2
        value = Value.cast(value)
        step = 1 if dst > src else -1
        for g in range(src, dst, step):
            tx = Signal(value.shape(), name=f"{name}_slr_tx{g}", reset_less=True,
                        attrs=self.SLR_ATTRS)
            rx = Signal(value.shape(), name=f"{name}_slr_rx{g + step}", reset_less=True,
                        attrs=self.SLR_ATTRS)
            mods[g].d.sync += tx.eq(value)
            mods[g + step].d.sync += rx.eq(tx)
            value = rx
        return value

    def _sequencer(self, m, start_pre, end=None):
        """The read-out's sequence in module ``m``, from ``start_pre`` (high the cycle before
        the tile's first read-out cycle): ``(start, reading, count, count_next)``, the count
        being the read-out cycle (one per row; two per pair packed). With ``end`` (the
        partial read-out: the tile's last row, set from the cycle after ``start_pre``), the
        count ends there, the row being the count in either mapping."""
        n = self.rows if self.packing == 1 else 2 * self.pair_rows
        start = delay(m, start_pre, 1, "readout_start")
        count = Signal(range(n), name="readout_count")
        count_n = Signal.like(count, name="readout_count_next")
        reading = Signal(name="reading")
        m.d.comb += count_n.eq(count)
        with m.If(start):
            if n > 1:
                m.d.comb += count_n.eq(1)
                m.d.sync += reading.eq(1 if end is None else end != 0)
        with m.Elif(reading):
            m.d.comb += count_n.eq(count + 1)
            with m.If(count == (n - 1 if end is None else end)):
                m.d.sync += reading.eq(0)
        m.d.sync += count.eq(count_n)
        return start, reading, count, count_n

    def elaborate(self, platform):
        m = Module()
        R, C = self.rows, self.cols
        G, S = self.groups, self.SLR_STAGES
        # The input stage (INPUT_STAGES): the step registered (no reset: every use is
        # qualified by ``valid``), ``valid`` registered for the flags and the read-out's start,
        # and in copies that zero a bubble's operands, LANES_PER_VALID lanes each.
        inp = Signal(self.i_stream.payload.shape(), name="in_step", reset_less=True)
        valid = Signal(name="in_valid")
        m.d.sync += [inp.eq(self.i_stream.payload), valid.eq(self.i_stream.valid)]

        gate_a, gate_b = (lane_copies(m, self.i_stream.valid, n, LANES_PER_VALID,
                                      primitive=self.primitive, name=name)
                          for n, name in ((R, "in_valid_a"), (C, "in_valid_b")))
        # One module per SLR group: group 0 is this one, group g a submodule ``slr{g}``.
        mods = [m] + [Module() for _ in range(1, G)]
        for g in range(1, G):
            m.submodules[f"slr{g}"] = mods[g]
        grp = [self.group_of(j) for j in range(C)]

        # Skew the inputs: a row of cells (and its flags) waits its index, column j waits
        # column_skew(j). The operand chains and the flag chains beside them are reset-less: no
        # reset fan-out, and synthesis may pack them into SRLs. After a reset they may hold
        # stale operands and flags for up to R + C + latency cycles, and that is harmless: a
        # stale ``first`` only clears an accumulator (a tile's first step loads it anyway), a
        # stale ``last`` only captures a cell's sum into its result register, which the next
        # tile overwrites before it is read; the read-out is started by its own chain from
        # the array's input (``readout``), which does reset.
        n_rows = R if self.packing == 1 else self.pair_rows
        a_in = [Mux(gate_a[i], inp.a[i], 0) for i in range(R)]
        b_edge = [self._cross(mods, delay(m, Mux(gate_b[j], inp.b[j], 0), j, f"b{j}",
                                          reset_less=True), 0, grp[j], f"b{j}")
                  for j in range(C)]
        first_edge = [delay(m, valid & inp.first, i, f"first{i}", reset_less=True)
                      for i in range(n_rows)]
        last_edge = [delay(m, valid & inp.last, i, f"last{i}", reset_less=True)
                     for i in range(n_rows)]
        out = self.o_stream.payload

        if self.packing == 1:
            a_edge = [delay(m, a_in[i], i, f"a{i}", reset_less=True) for i in range(R)]
            cells = [[ProcessingElement(fabric=i >= self.dsp_rows) for _ in range(C)]
                     for i in range(R)]
            rows_of = [{"a": a_edge[i]} for i in range(R)]
            ports = [("a", "a_i", "a_o")]
        else:
            hi_edge = [delay(m, a_in[2 * q], q, f"hi{q}", reset_less=True)
                       for q in range(n_rows)]
            lo_edge = [delay(m, a_in[2 * q + 1] if 2 * q + 1 < R else 0, q, f"lo{q}",
                             reset_less=True) for q in range(n_rows)]
            cells = [[PackedPair(primitive=self.primitive, cascade=q > 0,
                                 dsp_slice=self.dsp_slice) for _ in range(C)]
                     for q in range(n_rows)]
            rows_of = [{"hi": hi_edge[q], "lo": lo_edge[q]} for q in range(n_rows)]
            ports = [("hi", "hi_i", "hi_o"), ("lo", "lo_i", "lo_o")]
        ports += [("first", "first_i", "first_o"), ("last", "last_i", "last_o")]
        for i in range(n_rows):
            rows_of[i].update(first=first_edge[i], last=last_edge[i])
            for j in range(C):
                cell, mj = cells[i][j], mods[grp[j]]
                mj.submodules[f"pe_{i}_{j}"] = self._cell(cell)
                for key, port_i, port_o in ports:
                    if j == 0:
                        src = rows_of[i][key]
                    elif grp[j - 1] != grp[j]:     # the row enters the next SLR group
                        src = self._cross(mods, getattr(cells[i][j - 1], port_o),
                                          grp[j - 1], grp[j], f"{key}{i}_c{j}")
                    else:
                        src = getattr(cells[i][j - 1], port_o)
                    mj.d.comb += getattr(cell, port_i).eq(src)
                if i == 0:
                    mj.d.comb += cell.b_i.eq(b_edge[j])
                elif self.packing == 2:      # down the DSP cascade
                    mj.d.comb += cell.bc_i.eq(cells[i - 1][j].bc_o)
                else:
                    mj.d.comb += cell.b_i.eq(cells[i - 1][j].b_o)

        # The read-out, diagonal: column j reads its cells column_skew(j) cycles after column
        # 0, as its cells capture, row q q cycles (2q packed) after row 0, so a cell is read
        # as soon as it has its sum, whatever its column. One sequencer (group 0) counts the
        # rows from a chain started at the array's input; its select, computed a cycle ahead,
        # passes from column to column through a register each (and the crossings' registers
        # into the next SLR group), so no one net drives the multiplexers of every column.
        # Each column's datum comes back to group 0 and waits for the last column's (a
        # reset-less delay line per column, an SRL in the fabric), so a row leaves whole.
        # The start chain is reset-less (an SRL): for as many cycles after a reset as it is
        # long, a counter that does reset holds its output off, so a stale start never leaves
        # it.
        trigger = valid & inp.last
        longest = self.readout_delay - self.INPUT_STAGES - 1
        settle = Signal(range(longest + 1), init=longest, name="readout_settle")
        with m.If(settle != 0):
            m.d.sync += settle.eq(settle - 1)
        chain = delay(m, trigger, longest, "readout", reset_less=True)
        start_pre = chain & (settle == 0)
        end = None
        if self.partial:
            # The tile's last row read out (``rows - 1``; ``R - 1`` for 0), beside the start
            # chain, held from the cycle after its start_pre: the next tile's comes at least
            # emit_interval(rows) >= rows cycles later, after this tile's last count.
            last_row = Signal(range(R), name="readout_rows_in")
            m.d.comb += last_row.eq(Mux(inp.rows == 0, R - 1, inp.rows - 1))
            end_chain = delay(m, last_row, longest, "readout_end", reset_less=True)
            end = Signal(range(R), name="readout_end")
            with m.If(start_pre):
                m.d.sync += end.eq(end_chain)
        start, reading, count, count_n = self._sequencer(m, start_pre, end)
        ahead = Mux(start_pre, 0, count_n)

        def column_copies(value, name):
            """``value`` (computed a cycle ahead in group 0) registered into each column,
            column ``j``'s copy ``column_skew(j)`` cycles behind column 0's."""
            copies, prev = [], value
            for j in range(C):
                if j and grp[j - 1] != grp[j]:
                    prev = self._cross(mods, prev, grp[j - 1], grp[j], f"{name}{j}")
                r = Signal.like(value, name=f"{name}{j}", reset_less=True)
                mods[grp[j]].d.sync += r.eq(prev)
                copies.append(r)
                prev = r
            return copies

        ready = []             # per column: its value of the row being read, in its group
        if self.packing == 1:
            sels = column_copies(ahead, "readout_sel")
            for j in range(C):
                mg = mods[grp[j]]
                picked = select(mg, [cells[i][j].result for i in range(R)], sels[j],
                                primitive=self.primitive, name=f"readout{j}")
                q = Signal(signed(32), name=f"readout_data{j}", reset_less=True)
                mg.d.sync += q.eq(picked)
                ready.append((j, q))
            sel = Signal(range(R))
            m.d.comb += sel.eq(Mux(start, 0, count))
            valid_q = Signal(name="readout_valid")
            row_q = Signal(range(R), name="readout_row")
            last_q = Signal(name="readout_last")
            m.d.sync += [valid_q.eq(start | reading), row_q.eq(sel),
                         last_q.eq(sel == (R - 1 if end is None else end))]
        else:
            # Packed: read pair q on cycle 2q after the pair's first column captured (stage
            # A); unpack its high row on the next cycle and its low row on the one after, with
            # one subtractor per column (stage B, the output register).
            Q = n_rows
            curs = column_copies(ahead, "readout_cur")
            for j in range(C):
                mg, cur_j = mods[grp[j]], curs[j]
                column = select(mg, [cells[q][j].result for q in range(Q)], cur_j >> 1,
                                primitive=self.primitive, name=f"readout{j}")
                picked = Signal(pair_result_layout(self.dsp_slice), name=f"picked{j}",
                                reset_less=True)
                with mg.If(~cur_j[0]):   # sample each pair once, on its even slot
                    mg.d.sync += picked.eq(column)
                # the low row of the pair follows its high row: the column's own copy of the
                # phase (its slot's parity a cycle ago), not one net for every column
                low = Signal(name=f"low{j}", reset_less=True)
                mg.d.sync += low.eq(cur_j[0])
                q = Signal(signed(32), name=f"readout_data{j}", reset_less=True)
                mg.d.sync += q.eq(unpack_pair(mg, picked, low, name=f"unpack{j}"))
                ready.append((j, q))
            cur = Signal(range(2 * Q), name="readout_cur")
            m.d.comb += cur.eq(Mux(start, 0, count))
            hi_phase = Signal(name="hi_phase")
            lo_phase = Signal(name="lo_phase")
            pair = Signal(range(Q), name="readout_pair")
            with m.If((start | reading) & ~cur[0]):
                m.d.sync += pair.eq(cur >> 1)
            if end is None:
                lo_next, hi_last, lo_last = pair * 2 + 1 < R, None, None
            else:
                # whether the pair's low row is read and which of its rows is the tile's
                # last, registered with the pair (the next tile's ``end`` may follow)
                lo_ok, hi_last, lo_last = (Signal(name=f"readout_{n}")
                                           for n in ("lo_ok", "hi_last", "lo_last"))
                with m.If((start | reading) & ~cur[0]):
                    m.d.sync += [lo_ok.eq(cur != end), hi_last.eq(cur == end),
                                 lo_last.eq(cur + 1 == end)]
                lo_next = lo_ok
            m.d.sync += [hi_phase.eq((start | reading) & ~cur[0]),
                         lo_phase.eq(hi_phase & lo_next)]
            row = Mux(lo_phase, pair * 2 + 1, pair * 2)
            valid_q = Signal(name="readout_valid")
            row_q = Signal(range(R), name="readout_row")
            last_q = Signal(name="readout_last")
            m.d.sync += [valid_q.eq(hi_phase | lo_phase), row_q.eq(row),
                         last_q.eq(row == R - 1 if end is None
                                   else Mux(lo_phase, lo_last, hi_last))]

        # Each column's data back in group 0, every column waiting for the last one's.
        far = self._deskew
        for j, q in ready:
            back = self._cross(mods, q, grp[j], 0, f"readout_data{j}")
            wait = far - self.column_skew(j) - S * grp[j]
            m.d.comb += out.data[j].eq(delay(m, back, wait, f"readout_wait{j}",
                                             reset_less=True))
        m.d.comb += [
            self.o_stream.valid.eq(delay(m, valid_q, far, "readout_valid")),
            out.row.eq(delay(m, row_q, far, "readout_row", reset_less=True)),
            out.last.eq(delay(m, last_q, far, "readout_last", reset_less=True)),
        ]
        return m
