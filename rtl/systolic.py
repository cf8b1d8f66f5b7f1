"""Output-stationary systolic int8 GEMM array with exact int32 accumulation."""

from amaranth import Array, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ProcessingElement", "SystolicArray", "array_input_layout", "array_output_layout"]


def array_input_layout(rows: int, cols: int) -> data.StructLayout:
    """One reduction step: a column of op(A) (``rows`` values) and a row of op(B)."""
    return data.StructLayout({
        "a":     data.ArrayLayout(signed(8), rows),
        "b":     data.ArrayLayout(signed(8), cols),
        "first": 1,   # this step starts a new accumulation (the accumulators are cleared)
        "last":  1,   # this step ends the tile: capture the sums and stream them out
    })


def array_output_layout(rows: int, cols: int) -> data.StructLayout:
    """One row of the C tile."""
    return data.StructLayout({
        "data": data.ArrayLayout(signed(32), cols),
        "row":  range(rows),
        "last": 1,    # the tile's last row
    })


class ProcessingElement(wiring.Component):
    """One multiply-accumulate cell: ``acc = (first ? 0 : acc) + a * b``.

    ``a`` (with the ``first``/``last`` flags) passes to the right and ``b`` passes down, one
    register each. The product and the accumulator are registered, so the cell maps onto one
    DSP48 slice with its M and P registers and the clear done by the DSP's Z multiplexer; no
    fabric adder is needed (checked by :mod:`sim.estimate`). When ``last`` reaches the
    accumulator the final sum is copied into :attr:`result`, freeing the accumulator for the
    next tile the very next cycle.

    Members
    -------
    a_i, first_i, last_i, b_i : In
        Operands and flags from the left / top neighbour.
    a_o, first_o, last_o, b_o : Out
        The same, one cycle later, for the right / bottom neighbour.
    result : Out(signed(32))
        The last captured sum; valid 3 cycles after ``last_i`` and held until the next capture.
    """

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
        clear = Signal()
        capture = Signal()
        capture_d = Signal()
        m.d.sync += [
            a.eq(self.a_i), b.eq(self.b_i),
            self.first_o.eq(self.first_i), self.last_o.eq(self.last_i),
            prod.eq(a * b),
            clear.eq(self.first_o), capture.eq(self.last_o),
            acc.eq(Mux(clear, 0, acc) + prod),
            capture_d.eq(capture),
        ]
        with m.If(capture_d):
            m.d.sync += result.eq(acc)
        m.d.comb += [self.a_o.eq(a), self.b_o.eq(b), self.result.eq(result)]
        return m


class SystolicArray(wiring.Component):
    """``rows`` x ``cols`` output-stationary systolic array of int8 MACs.

    Each cycle the array takes one reduction step of a tile GEMM ``C += op(A)[:, k] op(B)[k, :]``
    (a column of ``rows`` int8 values and a row of ``cols`` int8 values). Inputs are skewed
    internally (row ``i`` is delayed ``i`` cycles, column ``j`` by ``j``) so PE ``(i, j)`` sees
    step ``k`` at cycle ``k + i + j``. Every signal is registered between PEs, so no path is
    longer than one PE, whatever the array size. A cycle without ``i_stream.valid`` is a bubble:
    it adds zero.

    A step with ``first`` clears the accumulators; a step with ``last`` ends the tile: the
    sums are captured and streamed out of :attr:`o_stream` one row per cycle, while the next
    tile already accumulates. The next ``last`` must come at least :attr:`min_emit_interval`
    cycles later, which :class:`rtl.datapath.GemmDatapath` guarantees.

    Parameters
    ----------
    rows, cols : int
        Array shape (any >= 1, not necessarily square).

    Members
    -------
    i_stream : In(stream.Signature(array_input_layout(rows, cols), always_ready=True))
    o_stream : Out(stream.Signature(array_output_layout(rows, cols), always_ready=True))

    Latency and throughput
    ----------------------
    One MAC per PE per cycle in steady state. Row 0 of a tile leaves :attr:`o_stream`
    :attr:`latency` = ``rows + cols + 3`` cycles after the step with ``last`` was accepted; row
    ``r`` follows ``r`` cycles later.
    """

    def __init__(self, rows: int, cols: int):
        for name, v in (("rows", rows), ("cols", cols)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, not {v!r}")
        self.rows, self.cols = rows, cols
        super().__init__({
            "i_stream": In(stream.Signature(array_input_layout(rows, cols), always_ready=True)),
            "o_stream": Out(stream.Signature(array_output_layout(rows, cols),
                                             always_ready=True)),
        })

    @property
    def latency(self) -> int:
        """Cycles from accepting a ``last`` step to row 0 of the tile on :attr:`o_stream`."""
        return self.rows + self.cols + 3

    @property
    def min_emit_interval(self) -> int:
        """Least number of cycles between two steps with ``last``.

        Row ``r`` of the result registers is read ``rows + cols + 2 + r`` cycles after its
        ``last`` step and overwritten ``3 + r + j`` cycles after the next one.
        """
        return self.rows + self.cols - 1

    def elaborate(self, platform):
        m = Module()
        R, C = self.rows, self.cols
        inp = self.i_stream.payload
        valid = self.i_stream.valid

        # Skew the inputs: row i (and its flags) waits i cycles, column j waits j cycles.
        def delayed(sig, n, name):
            for s in range(n):
                r = Signal.like(sig, name=f"{name}_skew{s}")
                m.d.sync += r.eq(sig)
                sig = r
            return sig

        a_edge = [delayed(Mux(valid, inp.a[i], 0), i, f"a{i}") for i in range(R)]
        first_edge = [delayed(valid & inp.first, i, f"first{i}") for i in range(R)]
        last_edge = [delayed(valid & inp.last, i, f"last{i}") for i in range(R)]
        b_edge = [delayed(Mux(valid, inp.b[j], 0), j, f"b{j}") for j in range(C)]

        pes = [[ProcessingElement() for _ in range(C)] for _ in range(R)]
        for i in range(R):
            for j in range(C):
                pe = pes[i][j]
                m.submodules[f"pe_{i}_{j}"] = pe
                if j == 0:
                    m.d.comb += [pe.a_i.eq(a_edge[i]), pe.first_i.eq(first_edge[i]),
                                 pe.last_i.eq(last_edge[i])]
                else:
                    left = pes[i][j - 1]
                    m.d.comb += [pe.a_i.eq(left.a_o), pe.first_i.eq(left.first_o),
                                 pe.last_i.eq(left.last_o)]
                m.d.comb += pe.b_i.eq(b_edge[j] if i == 0 else pes[i - 1][j].b_o)

        # Read-out: once PE (R-1, C-1) has captured, read one row per cycle for R cycles.
        start = delayed(valid & inp.last, R + C + 2, "readout")
        row = Signal(range(R))
        reading = Signal()
        with m.If(start):
            if R > 1:
                m.d.sync += [reading.eq(1), row.eq(1)]
        with m.Elif(reading):
            m.d.sync += row.eq(row + 1)
            with m.If(row == R - 1):
                m.d.sync += reading.eq(0)
        sel = Signal(range(R))
        m.d.comb += sel.eq(Mux(start, 0, row))
        out = self.o_stream.payload
        m.d.sync += [
            self.o_stream.valid.eq(start | reading),
            out.row.eq(sel),
            out.last.eq(sel == R - 1),
        ]
        for j in range(C):
            column = Array(pes[i][j].result for i in range(R))
            m.d.sync += out.data[j].eq(column[sel])
        return m
