"""The tile GEMM datapath: operand buffers -> systolic array -> rescaler, between streams."""

from types import SimpleNamespace

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ._util import FIFO_SLICE_BITS, delay, own_reset
from .buffer import TransposableBuffer
from .fifo import Fifo
from .fp32 import Fp32Add
from .rescale import Rescaler, rescale_output_layout
from .systolic import SystolicArray
from .xilinx import lane_copies, lut_copies

__all__ = ["ACC_RAMS", "GemmDatapath", "command_layout", "slr_cols"]


def command_layout(rows: int, cols: int, slots: int = 2,
                   acc_slots: int = 2, k_blocks: bool = False) -> data.StructLayout:
    """Payload of :attr:`GemmDatapath.cmd`: one tile GEMM (with ``k_blocks``, two last fields:
    ``kblock``, the command is one K block, and ``read_rows``, the rows of a stored K-block
    tile read out; see :class:`GemmDatapath`)."""
    return data.StructLayout({
        "k":           unsigned(16),   # reduction length of this tile, 1..depth
        "a_slot":      range(slots),   # A buffer slot the tile is read from
        "b_slot":      range(slots),   # B buffer slot
        "load_a":      1,              # the A tile arrives on a_stream (else: reuse the slot)
        "load_b":      1,              # the B tile arrives on b_stream
        "a_extra":     range(slots),   # k-major A: further tiles loaded into a_slot + 1 ...
        "b_extra":     range(slots),   # k-major B: further tiles loaded into b_slot + 1 ...
        "transpose_a": 1,              # A arrives as k x rows (else rows x k)
        "transpose_b": 1,              # B arrives as cols x k (else k x cols)
        "clear":       1,              # start a new accumulation (else add to the last one)
        "emit":        1,              # send the C tile out after this command
        "store":       1,              # keep the C tile in accumulation slot acc_slot
        "add":         1,              # add accumulation slot acc_slot to the C tile first
        "acc_slot":    range(acc_slots),
        "raw":         1,              # send int32 sums instead of rescaled float32
        "row_exp":     data.ArrayLayout(signed(8), rows),
        "col_exp":     data.ArrayLayout(signed(8), cols),
        **({"kblock": 1,                # rescale this tile, then add in float32
            # a K-block tile stored, not emitted: only its rows 0 .. read_rows - 1 (0: all)
            "read_rows": range(rows + 1)} if k_blocks else {}),
    })


#: Columns one copy of the accumulation's ``add`` flag reaches (32 adder LUTs a column).
LANES_PER_ADD = 8

#: Lanes of exponents (8 flip-flops each) one copy of a command stage's enable reaches.
LANES_PER_EXP = 16

#: What :class:`GemmDatapath`'s accumulation slots can be built of (``acc_ram``).
ACC_RAMS = ("auto", "ultra")


def slr_cols(cols: int, groups: int) -> tuple:
    """The first column of each SLR group after the first, ``cols`` split evenly into
    ``groups`` (the :class:`rtl.systolic.SystolicArray` argument)."""
    if not isinstance(groups, int) or isinstance(groups, bool) or not 1 <= groups <= cols:
        raise ValueError(f"slr_groups must be an integer in 1..cols ({cols}), not {groups!r}")
    return tuple(cols * g // groups for g in range(1, groups))


class GemmDatapath(wiring.Component):
    """One tile GEMM per command: ``C = op(A) op(B)`` (+ the previous sums), from streams.

    A command on :attr:`cmd` names a tile of reduction length ``k``, the buffer slots of its
    operands and whether each arrives with it (``load_a`` / ``load_b``) or is reused from its
    slot. Its A tile then arrives on :attr:`a_stream` and its B tile on :attr:`b_stream`, each
    row-major as stored (:class:`rtl.buffer.TransposableBuffer` transposes). A command with
    ``emit`` sends the C tile out of :attr:`o_stream`, one row per beat: float32 bits of
    ``C * 2**(row_exp[m] + col_exp[n])`` as :func:`sim.models.golden.rescale`, or raw int32;
    one with ``store`` keeps it in an accumulation slot, one with ``add`` adds that slot first.
    A command with ``k = 0`` or ``k > depth`` is dropped and sets :attr:`error` (sticky). The
    numpy model is :func:`sim.models.datapath.datapath`; the structure is described in the
    architecture page of the documentation.

    Parameters
    ----------
    rows, cols : int
        Systolic array shape.
    depth : int
        Largest ``k`` of one command (operand buffer depth per slot).
    slots : int
        Tile slots per operand buffer (at least 2).
    acc_slots : int
        C tiles the accumulation buffer holds (``acc_slots * rows`` rows of ``cols`` int32).
    packing, primitive, dsp_rows, dsp_slice :
        Passed to :class:`rtl.systolic.SystolicArray`: 2 packs two MACs per ``dsp_slice``
        (``"DSP48E2"``, UltraScale+, or ``"DSP48E1"``, 7-series); ``primitive`` instantiates
        the slices for synthesis; rows from ``dsp_rows`` on multiply in LUTs.
    slr_groups : int
        The array's columns split evenly into this many groups, one per super logic region
        of a stacked-silicon device (``SystolicArray(slr_cols=...)``, :func:`slr_cols`); at
        most ``cols``. 1: no crossing registers.
    acc_ram : {"auto", "ultra"}
        What the accumulation slots are built of: what synthesis chooses (block RAM, or LUTs
        when small), or UltraRAM (``ram_style = "ultra"``; Zynq and Virtex UltraScale+
        only): a 4096 x 72 URAM288 holds what eight 512 x 72 BRAM36 do, so a large block's
        slots do not crowd out the operand buffers' block RAM. The same read latency (one
        cycle) either way.
    lookahead : int
        Loaded commands that may wait for the array (at least 2): the loader runs this far
        ahead of the compute, so span loads at a block's first command overlap the block
        before.
    out_rows : int
        Depth of the output FIFO in C rows (at least ``rows``; by default ``4 * rows``, so the
        C write-back can trail the array by a tile and more without stalling it). Tiles
        reserve their rows in it before they start, so a stalled :attr:`o_stream` never loses
        data.
    part_resets : bool
        Give :attr:`part_resets`: one reset input per :data:`RESET_SUBPARTS` entry, each that
        part's only reset (:func:`rtl._util.own_reset`), instead of the domain's. The engine
        drives them with registered copies of its soft reset, taken on the same edge as the
        datapath's own, so that the reset is the same cycle everywhere but no one net
        reaches every flip-flop (the FIFOs grow with the columns).
    k_blocks : bool
        Build the K-block mode: a command with ``kblock`` (a last field of
        :func:`command_layout`) is one K block of a GEMM whose exponents change along K. Its
        own int32 tile (the array's sums since its ``clear``) is rescaled once with its
        exponents (``raw`` is ignored) and added in float32 (:class:`rtl.fp32.Fp32Add`, round
        to nearest even) to accumulation slot ``acc_slot``'s float32 with ``add``, or to +0.0
        without; the sum is stored in the slot (``store``, as float32 bits) and/or emitted
        (``emit``), not rescaled again. This is :func:`sim.models.bfp.gemm_kruns`, one K run
        per command in order. Without it (the default) the datapath has neither the field nor
        the adder. A K-block command that stores and does not emit may also read out only
        its first ``read_rows`` rows (1 to ``rows``; 0: all): the slot's other rows keep
        what they hold, and the next tile read out may come :meth:`kb_interval_after`
        ``(read_rows)`` cycles later (``SystolicArray(partial=True)``) — sooner where few of
        a tile's rows lie inside C.

    Attributes
    ----------
    cmd : In(stream.Signature(command_layout(rows, cols)))
    a_stream : In(stream.Signature(data.ArrayLayout(signed(8), rows)))
    b_stream : In(stream.Signature(data.ArrayLayout(signed(8), cols)))
    o_stream : Out(stream.Signature(rescale_output_layout(cols)))
    error : Out(1)
    busy : Out(1)
        A command is loading, computing or has results not yet out.
    step : Out(1)
        The array takes a reduction step this cycle (``rows * cols`` useful MACs).
    part_resets : In(len(RESET_SUBPARTS))
        With ``part_resets``: the resets of the parts named in :data:`RESET_SUBPARTS`.

    Latency
    -------
    The first C row of a tile leaves :attr:`fill_latency` cycles after its last step starts
    (``TransposableBuffer.READ_LATENCY + array.latency + ACCUMULATE_STAGES +
    Rescaler.LATENCY + OUT_FIFO_LATENCY``), of a K-block tile :attr:`kb_fill_latency`
    (``Fp32Add.LATENCY`` more); a command passes :data:`COMMAND_STAGES` registers before its
    loads start.

    Throughput
    ----------
    ``rows * cols`` MACs a cycle in steady state: a tile of ``k`` steps occupies the array for
    ``k`` cycles, plus idle cycles only when an emitting tile follows another within the
    array's :attr:`~rtl.systolic.SystolicArray.min_emit_interval`, or the output FIFO is full.
    The next command's operands load while the array computes. K-block tiles read out at
    least :attr:`kb_interval` cycles apart (the float32 read-modify-write of a slot's row must
    land before the row is read for the next K block), and a tile after a K-block tile at
    least :attr:`kb_switch_interval` cycles after it (its RAM and FIFO accesses come earlier
    in the pipeline).

    Notes
    -----
    The K-block read-modify-write of a slot's row cannot overlap itself: the row is read
    :data:`KB_READ_AHEAD` cycles before its rescaled value leaves the rescaler and written
    ``Fp32Add.LATENCY`` cycles after, and the next read of the same row belongs to a later
    readout, at least :attr:`kb_interval` = ``max(interval, Fp32Add.LATENCY + KB_READ_AHEAD
    + 1)`` cycles later (asserted in simulation by the tests of ``tests/test_datapath.py``
    that run K blocks back to back on one slot).
    """

    def __init__(self, rows: int, cols: int, depth: int = 512, out_rows: int | None = None,
                 *, slots: int = 2, acc_slots: int = 2, lookahead: int = 2, packing: int = 1,
                 primitive: bool = False, dsp_rows: int | None = None,
                 acc_ram: str = "auto", slr_groups: int = 1, dsp_slice: str = "DSP48E2",
                 part_resets: bool = False, k_blocks: bool = False):
        if acc_ram not in ACC_RAMS:
            raise ValueError(f"acc_ram must be one of {ACC_RAMS}, not {acc_ram!r}")
        self.acc_ram = acc_ram
        # validates rows, cols, packing, dsp_rows
        self.array = SystolicArray(rows, cols, packing=packing, primitive=primitive,
                                   dsp_rows=dsp_rows, slr_cols=slr_cols(cols, slr_groups),
                                   dsp_slice=dsp_slice, partial=k_blocks)
        self.a_buf = TransposableBuffer(rows, depth, slots,   # validates depth and slots
                                        primitive=primitive)
        self.b_buf = TransposableBuffer(cols, depth, slots, primitive=primitive)
        self.rescaler = Rescaler(cols, primitive=primitive)
        self.primitive = bool(primitive)
        out_rows = 4 * rows if out_rows is None else out_rows
        if not isinstance(out_rows, int) or out_rows < rows:
            raise ValueError(f"out_rows must be an integer >= rows ({rows}), not {out_rows!r}")
        self.rows, self.cols, self.depth, self.out_rows = rows, cols, depth, out_rows
        if not isinstance(acc_slots, int) or isinstance(acc_slots, bool) or acc_slots < 1:
            raise ValueError(f"acc_slots must be a positive integer, not {acc_slots!r}")
        if not isinstance(lookahead, int) or isinstance(lookahead, bool) or lookahead < 2:
            raise ValueError(f"lookahead must be an integer >= 2, not {lookahead!r}")
        self.slots, self.acc_slots, self.lookahead = slots, acc_slots, lookahead
        self.has_part_resets = bool(part_resets)
        self.k_blocks = bool(k_blocks)
        self.kb_adder = Fp32Add(cols) if self.k_blocks else None
        super().__init__({
            "cmd": In(stream.Signature(command_layout(rows, cols, slots, acc_slots,
                                                      self.k_blocks))),
            "a_stream": In(stream.Signature(data.ArrayLayout(signed(8), rows))),
            "b_stream": In(stream.Signature(data.ArrayLayout(signed(8), cols))),
            "o_stream": Out(stream.Signature(rescale_output_layout(cols))),
            "error": Out(1),
            "busy": Out(1),
            "step": Out(1),
            **({"part_resets": In(len(self.RESET_SUBPARTS))} if part_resets else {}),
        })

    #: The submodules reset through :attr:`part_resets` (with ``part_resets``), in its order.
    RESET_SUBPARTS = ("a_buf", "b_buf", "info_fifo", "out_fifo", "jobs")

    #: Registers on the command path: the first computes a command's checks, in the second
    #: it waits for its loads to be allowed.
    COMMAND_STAGES = 2
    #: Registers from the array's output to the rescaler's input: the ``x`` stage, while the
    #: row's partial sums are read from the accumulation buffer, and the ``y`` stage, where
    #: they meet (the buffer's read data registered first: the block RAM's or UltraRAM's
    #: output register, so no carry chain follows a RAM's clock-to-out).
    ACCUMULATE_STAGES = 2
    #: Cycles from writing the output FIFO (:class:`rtl.fifo.Fifo`) to the entry being readable.
    OUT_FIFO_LATENCY = 2

    #: K-block mode: cycles a row's accumulation slot is read before its rescaled value
    #: leaves the rescaler (the RAM's read, then its output register).
    KB_READ_AHEAD = 2

    @property
    def interval(self) -> int:
        """Least cycles between the last steps of two tiles read out of the array (emitted or
        stored): the array's ``min_emit_interval``, and at least ``ACCUMULATE_STAGES + 1``
        so that a slot's row is written before it is read again."""
        return max(self.array.min_emit_interval, self.ACCUMULATE_STAGES + 1)

    @property
    def kb_interval(self) -> int:
        """K-block mode: least cycles between the last steps of two K-block tiles read out: a
        slot row's float32 read-modify-write (read ``KB_READ_AHEAD`` cycles before the
        rescaler's output, written ``Fp32Add.LATENCY`` cycles after it) lands before the next
        tile's read of that row: :meth:`kb_interval_after` a tile of all its rows."""
        return self.kb_interval_after(self.rows)

    def kb_interval_after(self, read_rows: int) -> int:
        """K-block mode: least cycles from the last step of a K-block tile that read out
        ``read_rows`` rows (1 to ``rows``) to the next K-block tile's: :attr:`kb_interval`
        with the array's ``emit_interval(read_rows)`` for its ``min_emit_interval``
        (:attr:`kb_interval` for ``rows``)."""
        return max(self.array.emit_interval(read_rows), self.ACCUMULATE_STAGES + 1,
                   Fp32Add.LATENCY + self.KB_READ_AHEAD + 1)

    @property
    def info_depth(self) -> int:
        """Depth of the FIFO of the tiles' exponents and flags, one entry a tile from its
        start to its last row out of the array: 4, and in K-block mode as many as tiles of
        ``k`` steps reading out ``r`` rows can have in flight at their least spacing,
        ``max(k, kb_interval_after(r))``, whatever ``k`` and ``r`` — so that the FIFO never
        holds a tile back."""
        if not self.k_blocks:
            return 4
        span = TransposableBuffer.READ_LATENCY + self.array.latency + 1
        return max(4, max(-(-(k + span + r) // max(k, self.kb_interval_after(r))) + 1
                          for r in range(1, self.rows + 1)
                          for k in range(1, 2 * self.kb_interval + 1)))

    @property
    def kb_switch_interval(self) -> int:
        """K-block mode: least cycles from a K-block tile's last step to the next tile's, when
        that one is not a K-block tile: its rows read and write the accumulation RAM and
        enter the output FIFO ``Rescaler.LATENCY + Fp32Add.LATENCY`` cycles earlier in the
        pipeline, and must come after all of the K-block tile's (a read-out takes
        ``readout_cycles``)."""
        return max(self.interval,
                   Rescaler.LATENCY + Fp32Add.LATENCY + self.readout_cycles)

    @property
    def readout_cycles(self) -> int:
        """Cycles from a tile's first row on the array's output to the cycle after its last."""
        return self.array._read_cycles * self.array._cell_rows

    @property
    def kb_fill_latency(self) -> int:
        """K-block mode: cycles from issuing a K-block tile's last step to its first C row
        (:attr:`fill_latency` and the float32 add)."""
        return self.fill_latency + Fp32Add.LATENCY

    @property
    def fill_latency(self) -> int:
        """Cycles from issuing a tile's last step to its first C row on :attr:`o_stream`: the
        operand buffers' read, the array, the accumulation stage, the rescaler and the output
        FIFO, each as the component declares it."""
        return (TransposableBuffer.READ_LATENCY + self.array.latency + self.ACCUMULATE_STAGES
                + Rescaler.LATENCY + self.OUT_FIFO_LATENCY)

    def elaborate(self, platform):
        m = Module()
        s = SimpleNamespace(m=m, R=self.rows, C=self.cols)
        self._parts(s)
        self._shared_state(s)
        self._command_stages(s)
        self._loader(s)
        self._compute(s)
        self._output(s)
        busy = (s.pre_valid | s.staged | s.job_pending | s.a_busy | s.b_busy | s.jobs.r_rdy
                | s.active | s.rows_out)
        m.d.comb += self.busy.eq(busy | s.kb_busy if self.k_blocks else busy)
        return m

    def _parts(self, s):
        """The array, the operand buffers, the rescaler, the FIFOs and the job queue, as
        submodules of ``s.m`` (each in :data:`RESET_SUBPARTS` reset by its own input if it has
        one)."""
        m, R, C = s.m, s.R, s.C
        def add(name, part):
            """``part`` as submodule ``name``, reset by its own input if it has one."""
            if self.has_part_resets and name in self.RESET_SUBPARTS:
                reset = self.part_resets[self.RESET_SUBPARTS.index(name)]
                m.submodules[name] = own_reset(m, f"rst_{name}", part, reset)
            else:
                m.submodules[name] = part
            return part
        m.submodules.array = array = self.array
        a_buf, b_buf = add("a_buf", self.a_buf), add("b_buf", self.b_buf)
        m.submodules.rescaler = rescaler = self.rescaler
        info_layout = data.StructLayout({
            "row_exp": data.ArrayLayout(signed(8), R),
            "col_exp": data.ArrayLayout(signed(8), C),
            "raw": 1,
            "emit": 1, "store": 1, "add": 1, "acc_slot": range(self.acc_slots),
            **({"kblock": 1} if self.k_blocks else {}),
        })
        info_fifo = add("info_fifo", Fifo(      # (sliced: the exponents are wide)
            width=info_layout.size, depth=self.info_depth, slice_bits=FIFO_SLICE_BITS))
        out_fifo = add("out_fifo", Fifo(
            width=rescale_output_layout(C).size, depth=self.out_rows,
            slice_bits=FIFO_SLICE_BITS))

        # ---- jobs: loaded commands waiting for, or in, the array --------------------------
        # k - 2, k == 1 and max(0, interval - k) (``gap``: a read-out job may start once more
        # than ``gap`` cycles have passed since the last one's last step) are computed when a
        # command is taken, so that the sequencer compares counters with registers only
        # (at least ACCUMULATE_STAGES + 1 cycles, or a slot's row read again for the tile's
        # next K chunk would be read before its write of this one lands: only the smallest
        # arrays, 1x1, 1x2 and 2x1, read out faster)
        # K-block mode: ``gap_k`` / ``gap_k_z`` likewise after a K-block tile's last step
        # (kb_interval before another K-block tile, kb_switch_interval before any other).
        interval = self.interval
        kb_max = max(self.kb_interval, self.kb_switch_interval) if self.k_blocks else 0
        job_layout = data.StructLayout({
            "k_m2": unsigned(16), "k_one": 1, "gap": range(interval), "gap_z": 1,
            "clear": 1, "readout": 1, "info": info_layout,
            "a_slot": range(self.slots), "b_slot": range(self.slots),
            "load_a": 1, "load_b": 1,
            **({"gap_k": range(kb_max), "gap_k_z": 1, "read_rows": range(s.R + 1)}
               if self.k_blocks else {})})
        jobs = add("jobs", (
            fifo.SyncFIFO(width=job_layout.size, depth=2) if self.lookahead == 2 else
            Fifo(width=job_layout.size, depth=self.lookahead, slice_bits=FIFO_SLICE_BITS)))
        head = data.View(job_layout, jobs.r_data)
        vars(s).update(array=array, a_buf=a_buf, b_buf=b_buf, rescaler=rescaler,
                       info_layout=info_layout, info_fifo=info_fifo, out_fifo=out_fifo,
                       interval=interval, kb_max=kb_max, job_layout=job_layout, jobs=jobs,
                       head=head)

    def _shared_state(self, s):
        """The registers the sections share: the job in the array, the readers of each slot, the
        buffers' loads and the job being queued."""
        job_layout = s.job_layout
        cur = Signal(job_layout)
        active = Signal()
        kk = Signal(unsigned(16))
        # The last step of ``cur`` is this cycle, and the first: registers, set a cycle ahead
        # (from k == 1 at the start, else from kk == k - 2), so that no counter compare feeds
        # the start decision, the slot counts or the output credits.
        finishing = Signal()
        fresh = Signal()

        # Readers of each slot, queued or running: a slot is reloaded only once they are done.
        pend_max = self.lookahead + 6
        pend_a = [Signal(range(pend_max), name=f"pend_a{s}") for s in range(self.slots)]
        pend_b = [Signal(range(pend_max), name=f"pend_b{s}") for s in range(self.slots)]
        # pend != 0, kept as registers beside the counts (the loader's hazard check reads them)
        pend_a_nz = Signal(self.slots)
        pend_b_nz = Signal(self.slots)
        # pend == 1, and the running job's and the staged command's slots one-hot, likewise
        # registers, so that the hazard below is one gate per slot from registers
        pend_a_one = Signal(self.slots)
        pend_b_one = Signal(self.slots)
        cur_a1h = Signal(self.slots)
        cur_b1h = Signal(self.slots)
        cmd_a1h = Signal(self.slots)
        cmd_b1h = Signal(self.slots)

        # ---- loader: command -> buffers ---------------------------------------------------
        # Each buffer takes its loads in command order, independently of the other's: a
        # command whose loads' buffers are free is taken (and its job queued) even while the
        # other buffer still takes an earlier command's tile. A job starts once its loads are
        # in: each buffer's finished loads are counted (``a_in`` / ``b_in``) and a job that
        # loaded that operand takes one as it starts (loads finish, and jobs start, in
        # command order).
        a_busy = Signal()                # a tile is being written into the buffer
        b_busy = Signal()
        job = Signal(job_layout, reset_less=True)         # read under job_pending
        job_pending = Signal()           # ``job`` is queued this cycle
        vars(s).update(cur=cur, active=active, kk=kk, finishing=finishing, fresh=fresh,
                       pend_a=pend_a, pend_b=pend_b, pend_a_nz=pend_a_nz, pend_b_nz=pend_b_nz,
                       pend_a_one=pend_a_one, pend_b_one=pend_b_one, cur_a1h=cur_a1h,
                       cur_b1h=cur_b1h, cmd_a1h=cmd_a1h, cmd_b1h=cmd_b1h, a_busy=a_busy,
                       b_busy=b_busy, job=job, job_pending=job_pending)

    def _command_stages(self, s):
        """The command stages (:data:`COMMAND_STAGES`): :attr:`cmd` -> ``pre`` -> ``cmd``, each
        command registered beside its checks, slot masks and the buffers' flags."""
        m, R, C, job, cmd_a1h, cmd_b1h = s.m, s.R, s.C, s.job, s.cmd_a1h, s.cmd_b1h
        # ---- command stages: the command registered beside what its checks need ----------
        # (k out of range; the slots a load writes, as masks and one-hot), so that the loader
        # decides from registers and a few gates. Two stages (COMMAND_STAGES): ``pre`` takes
        # the command from :attr:`cmd` and computes its masks; ``cmd`` holds it until its
        # loads are allowed. Each takes a command in the cycle the one before leaves.
        pre = Signal(self.cmd.payload.shape(), reset_less=True)      # read under pre_valid
        pre_valid = Signal()
        pre_bad = Signal()
        pre_a_span = Signal(self.slots)
        pre_b_span = Signal(self.slots)
        pre_a1h = Signal(self.slots)
        pre_b1h = Signal(self.slots)
        pre_a_fl = Signal()              # the buffers' first_last flags, a stage ahead
        pre_b_fl = Signal()
        a_fl = Signal()
        b_fl = Signal()
        cmd = Signal(self.cmd.payload.shape(), reset_less=True)      # read under staged
        staged = Signal()
        bad = Signal()
        a_span = Signal(self.slots)
        b_span = Signal(self.slots)
        take = Signal()                  # the staged command leaves (loaded or dropped)
        move = Signal()                  # the pre-staged command moves up

        # The slots ``first .. first + extra`` as a mask, a table of every (first, extra):
        # a function of 2 log2(slots) bits per slot, with no adder or compare chain.
        slot_bits = max(1, (self.slots - 1).bit_length())
        span_table = Array(
            Const(sum(1 << s_ for s_ in range(first, min(first + extra + 1, self.slots))),
                  self.slots)
            for extra in range(1 << slot_bits) for first in range(1 << slot_bits))

        def span(load, first, extra):
            """The slots ``first .. first + extra`` if ``load``, as a mask."""
            return Mux(load, span_table[Cat(first[:slot_bits], extra[:slot_bits])], 0)
        p = self.cmd.payload

        # The two stages' handshakes, written once: used for the control signals below and
        # as the functions of the enables' LUT copies.
        def moves_up(pv, st, tk):
            """The pre-staged command moves up (``move``)."""
            return pv & (~st | tk)

        def ready(pv, st, tk):
            """The pre stage takes a command (``cmd.ready``)."""
            return ~pv | moves_up(pv, st, tk)

        def enters(v, pv, st, tk):
            """A command enters the pre stage (``cmd.valid & cmd.ready``)."""
            return v & ready(pv, st, tk)

        def accepted(tk, bd):
            """The staged command leaves for the buffers and the job queue (``accept``)."""
            return tk & ~bd
        m.d.comb += [move.eq(moves_up(pre_valid, staged, take)),
                     self.cmd.ready.eq(ready(pre_valid, staged, take))]
        # The exponents (8 bits a lane of A and of B) pass through ``pre``, ``cmd`` and
        # ``job`` under copies of those stages' enables, one per LANES_PER_EXP lanes (LUT
        # instances in primitive builds): one enable for all of them would drive 8 (R + C)
        # loads.
        exp_lanes = R + C

        def exps(v):
            return [v.row_exp[r] for r in range(R)] + [v.col_exp[c] for c in range(C)]

        def rest(dst, src):
            return [getattr(dst, f).eq(getattr(src, f)) for f in self.cmd.payload.shape().members
                    if f not in ("row_exp", "col_exp")]

        def exp_copies(fn, inputs, name):
            return lut_copies(m, fn, inputs, exp_lanes, LANES_PER_EXP,
                              primitive=self.primitive, name=name)
        pre_takes = exp_copies(enters, [self.cmd.valid, pre_valid, staged, take], "pre_take")
        moves = exp_copies(moves_up, [pre_valid, staged, take], "move_copy")
        accepts = exp_copies(accepted, [take, bad], "accept_copy")
        for lane, (pre_e, p_e, cmd_e, job_e) in enumerate(zip(
                exps(pre), exps(p), exps(cmd), exps(job.info), strict=True)):
            with m.If(pre_takes[lane]):
                m.d.sync += pre_e.eq(p_e)
            with m.If(moves[lane]):
                m.d.sync += cmd_e.eq(pre_e)
            with m.If(accepts[lane]):
                m.d.sync += job_e.eq(cmd_e)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [*rest(pre, p), pre_valid.eq(1),
                         pre_bad.eq((p.k == 0) | (p.k > self.depth)),
                         pre_a1h.eq(1 << p.a_slot), pre_b1h.eq(1 << p.b_slot),
                         pre_a_span.eq(span(p.load_a, p.a_slot, p.a_extra)),
                         pre_b_span.eq(span(p.load_b, p.b_slot, p.b_extra)),
                         pre_a_fl.eq(TransposableBuffer.first_is_last(
                             p.k, p.transpose_a, p.a_extra, R)),
                         pre_b_fl.eq(TransposableBuffer.first_is_last(
                             p.k, ~p.transpose_b, p.b_extra, C))]
        with m.Elif(move):
            m.d.sync += pre_valid.eq(0)
        with m.If(move):
            m.d.sync += [*rest(cmd, pre), staged.eq(1), bad.eq(pre_bad),
                         cmd_a1h.eq(pre_a1h), cmd_b1h.eq(pre_b1h),
                         a_span.eq(pre_a_span), b_span.eq(pre_b_span),
                         a_fl.eq(pre_a_fl), b_fl.eq(pre_b_fl)]
        with m.Elif(take):
            m.d.sync += staged.eq(0)
        vars(s).update(pre_valid=pre_valid, pre_a_span=pre_a_span, pre_b_span=pre_b_span, a_fl=a_fl,
                       b_fl=b_fl, cmd=cmd, staged=staged, bad=bad, a_span=a_span, b_span=b_span,
                       take=take, accepted=accepted)

    def _loader(self, s):
        """The loader: the staged command's loads into the buffers once its slots have no readers
        left, its job into the queue; the readers of each slot counted."""
        m, pend_a, pend_b, pend_a_nz, cur_a1h = s.m, s.pend_a, s.pend_b, s.pend_a_nz, s.cur_a1h
        pend_a_one, finishing, pend_b_nz = s.pend_a_one, s.finishing, s.pend_b_nz
        cur_b1h, pend_b_one, cmd_a1h, staged = s.cur_b1h, s.pend_b_one, s.cmd_a1h, s.staged
        cmd_b1h, pre_a_span, pre_b_span, a_span = s.cmd_b1h, s.pre_a_span, s.pre_b_span, s.a_span
        b_span, take, a_buf, b_buf, cmd, a_fl = s.b_span, s.take, s.a_buf, s.b_buf, s.cmd, s.a_fl
        b_fl, jobs, job_pending, job, accepted = s.b_fl, s.jobs, s.job_pending, s.job, s.accepted
        bad, a_busy, b_busy, interval, cur = s.bad, s.a_busy, s.b_busy, s.interval, s.cur
        if self.k_blocks:
            # kb_interval_after of each read_rows (0: all rows), and its value for the last
            # tile taken that reads out
            after_table = Array(Const(self.kb_interval_after(r or s.R), range(s.kb_max + 1))
                                for r in range(s.R + 1))
            kb_after = Signal(range(s.kb_max + 1), init=self.kb_interval)
        # A load's slots still have readers: from registers, set for the command staged next
        # cycle from the readers left after this cycle's last steps (registers only), and,
        # for a command moving up, the staged one's slots (it leaves as the other moves:
        # accepted, or rejected with an error), so that the loader's decision has no
        # 2 * slots-input OR before it and the hazard only masks and ORs registers.
        hazard = Signal()
        left_a = pend_a_nz & ~(cur_a1h & pend_a_one & finishing.replicate(self.slots))
        left_b = pend_b_nz & ~(cur_b1h & pend_b_one & finishing.replicate(self.slots))
        staged_a = cmd_a1h & staged.replicate(self.slots)
        staged_b = cmd_b1h & staged.replicate(self.slots)
        # (the command staged next cycle is the one staged now if it stays, else the
        # pre-staged one -- if there is none, the value is not read -- so the select is not
        # the pre stage's valid). Both candidates are registers, and whether the command
        # stayed: the select (from ``take``) comes after them, not before.
        hz_stay = Signal()
        hz_move = Signal()
        stayed = Signal()
        m.d.sync += [
            hz_move.eq((pre_a_span & (left_a | staged_a)).any()
                       | (pre_b_span & (left_b | staged_b)).any()),
            hz_stay.eq((a_span & left_a).any() | (b_span & left_b).any()),
            stayed.eq(staged & ~take),
        ]
        m.d.comb += hazard.eq(Mux(stayed, hz_stay, hz_move))
        wiring.connect(m, wiring.flipped(self.a_stream), a_buf.w_stream)
        wiring.connect(m, wiring.flipped(self.b_stream), b_buf.w_stream)
        m.d.comb += [
            a_buf.w_cmd.payload.slot.eq(cmd.a_slot),
            a_buf.w_cmd.payload.k.eq(cmd.k),
            a_buf.w_cmd.payload.k_major.eq(cmd.transpose_a),
            a_buf.w_cmd.payload.extra.eq(cmd.a_extra),
            a_buf.w_cmd.payload.first_last.eq(a_fl),
            b_buf.w_cmd.payload.slot.eq(cmd.b_slot),
            b_buf.w_cmd.payload.k.eq(cmd.k),
            b_buf.w_cmd.payload.k_major.eq(~cmd.transpose_b),
            b_buf.w_cmd.payload.extra.eq(cmd.b_extra),
            b_buf.w_cmd.payload.first_last.eq(b_fl),
        ]
        accept = Signal()
        m.d.comb += [jobs.w_en.eq(job_pending), jobs.w_data.eq(job), accept.eq(accepted(take, bad))]
        with m.If(job_pending & jobs.w_rdy):
            m.d.sync += job_pending.eq(0)
        with m.If(a_buf.w_done):
            m.d.sync += a_busy.eq(0)
        with m.If(b_buf.w_done):
            m.d.sync += b_busy.eq(0)
        # A command is taken once the buffers it loads are free: the cycle after an earlier
        # tile's last beat arrives (a cycle per tile load, hidden behind the compute, so that
        # the operand streams' last beat is not followed by the command stages' enables and
        # the issue queue), and once the job before it is queued.
        free = ((~a_busy | ~cmd.load_a) & (~b_busy | ~cmd.load_b)
                & (~job_pending | jobs.w_rdy))
        with m.If(staged & free & (bad | ~hazard)):
            m.d.comb += take.eq(1)
            with m.If(bad):
                m.d.sync += self.error.eq(1)
            with m.Else():
                m.d.comb += [a_buf.w_cmd.valid.eq(cmd.load_a),
                             b_buf.w_cmd.valid.eq(cmd.load_b)]
                with m.If(cmd.load_a):        # (a buffer still loading stays busy)
                    m.d.sync += a_busy.eq(1)
                with m.If(cmd.load_b):
                    m.d.sync += b_busy.eq(1)
                m.d.sync += [
                    job_pending.eq(1),
                    job.load_a.eq(cmd.load_a), job.load_b.eq(cmd.load_b),
                    job.k_m2.eq(cmd.k - 2), job.k_one.eq(cmd.k == 1),
                    job.gap.eq(Mux(cmd.k >= interval, 0, interval - cmd.k)),
                    job.gap_z.eq(cmd.k >= interval),
                    job.clear.eq(cmd.clear),
                    job.readout.eq(cmd.emit | cmd.store),
                    job.info.emit.eq(cmd.emit), job.info.store.eq(cmd.store),
                    job.info.add.eq(cmd.add), job.info.acc_slot.eq(cmd.acc_slot),
                    job.a_slot.eq(cmd.a_slot), job.b_slot.eq(cmd.b_slot),
                    job.info.raw.eq(cmd.raw),
                ]
                if self.k_blocks:
                    # after a K-block tile, a K-block tile keeps that tile's interval (its
                    # rows read out: ``kb_after``, set as each tile that reads out is
                    # taken), any other tile kb_switch_interval
                    need = Mux(cmd.kblock, kb_after, self.kb_switch_interval)
                    partial = cmd.kblock & cmd.store & ~cmd.emit
                    read = Mux(partial, cmd.read_rows, 0)
                    m.d.sync += [job.info.kblock.eq(cmd.kblock),
                                 job.gap_k.eq(Mux(cmd.k >= need, 0, need - cmd.k)),
                                 job.gap_k_z.eq(cmd.k >= need),
                                 job.read_rows.eq(read)]
                    with m.If(cmd.emit | cmd.store):
                        m.d.sync += kb_after.eq(after_table[read])
        for s_ in range(self.slots):
            for q, nz, one, slot_in, slot_out in (
                    (pend_a[s_], pend_a_nz[s_], pend_a_one[s_], cmd.a_slot, cur.a_slot),
                    (pend_b[s_], pend_b_nz[s_], pend_b_one[s_], cmd.b_slot, cur.b_slot)):
                inc = accept & (slot_in == s_)
                dec = finishing & (slot_out == s_)
                m.d.sync += q.eq(q + inc - dec)
                with m.If(inc & ~dec):
                    m.d.sync += [nz.eq(1), one.eq(q == 0)]
                with m.Elif(dec & ~inc):
                    m.d.sync += one.eq(q == 2)
                    with m.If(q == 1):
                        m.d.sync += nz.eq(0)

    def _compute(self, s):
        """The compute sequencer: starts the queued jobs on the array, keeping the read-out
        interval and the output FIFO's room, and reads their operands from the buffers."""
        m, R, interval, finishing, cur, head = s.m, s.R, s.interval, s.finishing, s.cur, s.head
        a_buf, b_buf, jobs, info_fifo, active = s.a_buf, s.b_buf, s.jobs, s.info_fifo, s.active
        fresh, kk, cur_a1h, cur_b1h, array = s.fresh, s.kk, s.cur_a1h, s.cur_b1h, s.array
        # ---- compute sequencer: buffers -> array ------------------------------------------
        # Tiles read out of the array (emitted or stored) keep min_emit_interval cycles between
        # their last steps (the array's result registers are read out meanwhile); emitted
        # tiles also reserve their rows in the output FIFO.
        #
        # ``since`` counts the cycles since the last read-out step, saturating at
        # interval + 1. A job of k steps may start once its last step keeps the interval:
        # ``since_next + min(k, interval + 1) > interval``, i.e. ``since_next > gap``; with
        # since_next 1 after a last step and since + 1 otherwise (or saturated, > gap always),
        # that is ``gap == 0`` right after a last step and ``since >= gap`` otherwise.
        #
        # K-block mode: the last tile read out was a K-block tile (``kb_last``): the job's
        # ``gap_k`` applies instead of its ``gap``.
        top = max(interval, s.kb_max)
        since = Signal(range(top + 2), init=top + 1)
        emit_last = finishing & cur.readout
        m.d.sync += since.eq(Mux(emit_last, 1, Mux(since > top, since, since + 1)))
        if self.k_blocks:
            kb_last = Signal()
            with m.If(emit_last):
                m.d.sync += kb_last.eq(cur.info.kblock)
            spaced = Mux(emit_last, Mux(cur.info.kblock, head.gap_k_z, head.gap_z),
                         Mux(kb_last, since >= head.gap_k, since >= head.gap))
        else:
            spaced = Mux(emit_last, head.gap_z, since >= head.gap)

        # Output FIFO rows not yet reserved. A start's reservation is registered first
        # (``reserved``) and taken from the count the cycle after, so the start decision is
        # not followed by the count: meanwhile the rows free for the next start are
        # ``credits - R``. ``credits >= R`` and ``credits >= 2 R`` are registers, set from the
        # cases of reservation and release, each a compare of the old count with a constant;
        # the start decision only selects.
        credits = Signal(range(self.out_rows + 1), init=self.out_rows)
        ok_1r = Signal(init=self.out_rows >= R)
        ok_2r = Signal(init=self.out_rows >= 2 * R)
        reserved = Signal()
        credits_ok = Signal()
        m.d.comb += credits_ok.eq(Mux(reserved, ok_2r, ok_1r))
        released = Signal()
        m.d.comb += released.eq(self.o_stream.valid & self.o_stream.ready)

        # Loads finished and not yet taken by a starting job, per buffer, with "some" as a
        # register beside each count. A finished load counts from the second cycle after
        # its last beat (``*_in_d``), the earliest a job queued with that beat could
        # start.
        start = Signal()
        loaded = []
        for name, buf, need in (("a", a_buf, head.load_a), ("b", b_buf, head.load_b)):
            done_d = Signal(name=f"{name}_in_d")
            m.d.sync += done_d.eq(buf.w_done)
            count = Signal(range(self.lookahead + 3), name=f"{name}_in")
            some = Signal(name=f"{name}_in_nz")
            took = start & need
            m.d.sync += count.eq(count + done_d - took)
            with m.If(done_d & ~took):
                m.d.sync += some.eq(1)
            with m.Elif(took & ~done_d):
                m.d.sync += some.eq(count != 1)
            loaded.append(~need | some)
        can_start = Signal()
        m.d.comb += can_start.eq(jobs.r_rdy & loaded[0] & loaded[1] & (
            ~head.readout | (info_fifo.w_rdy & (~head.info.emit | credits_ok) & spaced)))
        m.d.comb += start.eq(can_start & (~active | finishing))

        m.d.sync += fresh.eq(start)
        with m.If(start):
            m.d.comb += jobs.r_en.eq(1)
            m.d.sync += [active.eq(1), kk.eq(0), cur.eq(head), finishing.eq(head.k_one),
                         cur_a1h.eq(1 << head.a_slot), cur_b1h.eq(1 << head.b_slot)]
        with m.Elif(finishing | ~active):
            m.d.sync += [active.eq(0), finishing.eq(0)]
        with m.Else():
            m.d.sync += [kk.eq(kk + 1), finishing.eq(kk == cur.k_m2)]

        m.d.sync += reserved.eq(start & head.readout & head.info.emit)
        # (each sum of the old count with a constant, released and reserved only selecting)
        plus1, minus_r, minus_r1 = (Signal.like(credits, name=f"credits_{n}")
                                    for n in ("plus1", "minus_r", "minus_r1"))
        m.d.comb += [plus1.eq(credits + 1), minus_r.eq(credits - R),
                     minus_r1.eq(credits - (R - 1))]

        def next_count(test, n):   # ``test(next count, n)``, as tests of the old count
            return Mux(reserved, Mux(released, test(credits, n + R - 1), test(credits, n + R)),
                       Mux(released, test(credits, n - 1), test(credits, n)))

        def at_least(n):
            return next_count(lambda c, k: c >= k, n)
        # Rows reserved and not yet taken (``credits != out_rows``), a register beside the
        # count, so that the engine's drain check (``busy``) follows no compare of it.
        rows_out = Signal()
        m.d.sync += [
            credits.eq(Mux(reserved, Mux(released, minus_r1, minus_r),
                           Mux(released, plus1, credits))),
            ok_1r.eq(at_least(R)), ok_2r.eq(at_least(2 * R)),
            rows_out.eq(next_count(lambda c, k: c != k, self.out_rows)),
        ]
        m.d.comb += [
            info_fifo.w_en.eq(start & head.readout),
            info_fifo.w_data.eq(head.info),
        ]

        m.d.comb += [
            a_buf.r_en.eq(active), a_buf.r_slot.eq(cur.a_slot), a_buf.r_k.eq(kk),
            b_buf.r_en.eq(active), b_buf.r_slot.eq(cur.b_slot), b_buf.r_k.eq(kk),
            self.step.eq(array.i_stream.valid),
        ]
        # Flags travel beside the buffer read latency.
        first = Signal()
        last = Signal()
        m.d.comb += [first.eq(fresh & cur.clear), last.eq(emit_last)]
        first = delay(m, first, TransposableBuffer.READ_LATENCY, "first")
        last = delay(m, last, TransposableBuffer.READ_LATENCY, "last")
        if self.k_blocks:
            m.d.comb += array.i_stream.payload.rows.eq(delay(
                m, cur.read_rows, TransposableBuffer.READ_LATENCY, "read_rows", reset_less=True))
        m.d.comb += [
            array.i_stream.valid.eq(a_buf.r_valid),
            array.i_stream.payload.a.eq(a_buf.r_data),
            array.i_stream.payload.b.eq(b_buf.r_data),
            array.i_stream.payload.first.eq(first),
            array.i_stream.payload.last.eq(last),
        ]
        vars(s).update(rows_out=rows_out)

    def _output(self, s):
        """The array's rows -> the accumulation RAM -> the rescaler -> the output FIFO ->
        :attr:`o_stream`."""
        m, R, C, info_layout, info_fifo, array = s.m, s.R, s.C, s.info_layout, s.info_fifo, s.array
        rescaler, out_fifo = s.rescaler, s.out_fifo
        # ---- array -> accumulation buffer -> rescaler -> output FIFO ------------------------
        # Each row read out of the array is registered (``x``) while its partial sums are read
        # from the accumulation buffer, then again (``y``) beside the registered read data;
        # there the sum is stored back and/or rescaled.
        info = data.View(info_layout, info_fifo.r_data)
        res = array.o_stream.payload
        row_layout = data.ArrayLayout(signed(32), C)
        m.submodules.acc_mem = acc_mem = memory.Memory(
            shape=row_layout, depth=self.acc_slots * R, init=[],
            attrs={"ram_style": "ultra"} if self.acc_ram == "ultra" else None)
        acc_rd = acc_mem.read_port()
        acc_wr = acc_mem.write_port()
        x_valid, y_valid = Signal(), Signal()
        x_row, y_row = Signal(range(R)), Signal(range(R))
        x_last, y_last = Signal(), Signal()
        x_data = Signal(row_layout, reset_less=True)      # data: read under x_valid / y_valid
        y_data = Signal(row_layout, reset_less=True)
        x_info = Signal(info_layout, reset_less=True)
        y_info = Signal(info_layout, reset_less=True)
        y_acc = Signal(row_layout, reset_less=True)       # the RAM's output register
        # the row's exponent, chosen from the tile's R as the row enters the y stage (an
        # R:1 multiplexer before a register, not before the exponent add, where it would
        # lengthen the path into the rescaler)
        y_rexp = Signal(signed(8), reset_less=True)
        m.d.sync += [x_valid.eq(array.o_stream.valid), x_row.eq(res.row), x_last.eq(res.last),
                     x_data.eq(res.data), x_info.eq(info),
                     y_valid.eq(x_valid), y_row.eq(x_row), y_last.eq(x_last),
                     y_data.eq(x_data), y_info.eq(x_info), y_acc.eq(acc_rd.data),
                     y_rexp.eq(Array(x_info.row_exp[i] for i in range(R))[x_row])]
        m.d.comb += [
            acc_rd.addr.eq(info.acc_slot * R + res.row),
            info_fifo.r_en.eq(array.o_stream.valid & res.last),
        ]
        # A slot's row is read again only for the tile's next K chunk, at least the emit
        # interval (>= ACCUMULATE_STAGES + 1) after its read: its write, ACCUMULATE_STAGES
        # cycles after that read, has landed.
        # y_info.add in a copy per LANES_PER_ADD columns: each drives 32 adder LUTs a column
        kb = self.k_blocks
        # (a K-block row adds nothing in int32: its own sums are rescaled)
        adds = lane_copies(m, x_info.add & ~x_info.kblock if kb else x_info.add, C,
                           LANES_PER_ADD, primitive=self.primitive, name="y_add")
        total = Signal(row_layout)
        for j in range(C):
            m.d.comb += total[j].eq(y_data[j] + Mux(adds[j], y_acc[j], 0))
        # (a K-block row is not stored in int32, is rescaled when stored too, never raw)
        y_kb = y_info.kblock if kb else None
        m.d.comb += [
            acc_wr.en.eq(y_valid & y_info.store & ~y_kb if kb else y_valid & y_info.store),
            acc_wr.addr.eq(y_info.acc_slot * R + y_row),
            acc_wr.data.eq(total),
        ]
        m.d.comb += [
            rescaler.i_stream.valid.eq(y_valid & (y_info.emit | (y_info.store & y_kb)) if kb
                                       else y_valid & y_info.emit),
            rescaler.i_stream.payload.acc.eq(total),
            rescaler.i_stream.payload.raw.eq(y_info.raw & ~y_kb if kb else y_info.raw),
            rescaler.i_stream.payload.last.eq(y_last),
        ]
        for j in range(C):
            m.d.comb += rescaler.i_stream.payload.exp[j].eq(
                y_rexp + y_info.col_exp[j].as_signed())
        # The rescaler never stalls here: the rows were reserved in the output FIFO (credits),
        # so its ready is a constant and its pipeline has no clock enable to broadcast.
        m.d.comb += [
            rescaler.o_stream.ready.eq(1),
            *([] if kb else [out_fifo.w_en.eq(rescaler.o_stream.valid),
                             out_fifo.w_data.eq(rescaler.o_stream.payload)]),
            self.o_stream.valid.eq(out_fifo.r_rdy),
            self.o_stream.payload.eq(out_fifo.r_data),
            out_fifo.r_en.eq(self.o_stream.ready),
        ]
        if not kb:
            return
        vars(s).update(acc_rd=acc_rd, acc_wr=acc_wr, y_valid=y_valid, y_row=y_row,
                       y_last=y_last, y_info=y_info)
        self._kb_output(s)

    def _kb_output(self, s):
        """K-block mode: the rescaled rows of K-block tiles -> + the slot's float32 (read
        :data:`KB_READ_AHEAD` cycles ahead) -> the slot and/or the output FIFO; the other rows
        from the rescaler to the output FIFO as without the mode."""
        m, R, C, rescaler, out_fifo = s.m, s.R, s.C, s.rescaler, s.out_fifo
        acc_rd, acc_wr, y_info = s.acc_rd, s.acc_wr, s.y_info
        m.submodules.kb_adder = adder = self.kb_adder
        # A K-block row's side band, from the y stage (beside the rescaler's input) to the
        # rescaler's output (``Rescaler.LATENCY`` registers) and on through the adder
        # (``Fp32Add.LATENCY`` more). Neither stalls: the rescaler's and the adder's ready
        # are constants (the emitted rows were reserved in the output FIFO).
        side = data.StructLayout({"valid": 1, "add": 1, "store": 1, "emit": 1, "last": 1,
                                  "addr": range(self.acc_slots * R)})
        y_side = Signal(side)
        m.d.comb += [y_side.valid.eq(s.y_valid & y_info.kblock & (y_info.emit | y_info.store)),
                     y_side.add.eq(y_info.add), y_side.store.eq(y_info.store),
                     y_side.emit.eq(y_info.emit), y_side.last.eq(s.y_last),
                     y_side.addr.eq(y_info.acc_slot * R + s.y_row)]
        stages = [y_side]
        for t in range(Rescaler.LATENCY + Fp32Add.LATENCY):
            r = Signal(side, name=f"kb_side{t}")
            m.d.sync += r.eq(stages[-1])
            stages.append(r)
        at_read = stages[Rescaler.LATENCY - self.KB_READ_AHEAD]
        at_add = stages[Rescaler.LATENCY]          # beside the rescaler's output
        at_out = stages[-1]                        # beside the adder's output
        # The slot's row: read KB_READ_AHEAD cycles before the rescaled row arrives, its
        # data registered (the RAM's output register), then into the adder beside it. The
        # read port is the x stage's otherwise: the tiles' spacing keeps them apart.
        kb_acc = Signal(data.ArrayLayout(unsigned(32), C), reset_less=True)
        m.d.sync += kb_acc.eq(acc_rd.data)
        with m.If(at_read.valid):
            m.d.comb += acc_rd.addr.eq(at_read.addr)
        m.d.comb += [
            adder.i_stream.valid.eq(at_add.valid),
            adder.o_stream.ready.eq(1),
        ]
        for j in range(C):
            m.d.comb += [adder.i_stream.payload.a[j].eq(rescaler.o_stream.payload.data[j]),
                         adder.i_stream.payload.b[j].eq(Mux(at_add.add, kb_acc[j], 0))]
        with m.If(at_out.valid & at_out.store):
            m.d.comb += [acc_wr.en.eq(1), acc_wr.addr.eq(at_out.addr),
                         acc_wr.data.eq(adder.o_stream.payload.s)]
        out_kb = at_out.valid & at_out.emit
        m.d.comb += [
            out_fifo.w_en.eq(Mux(out_kb, 1, rescaler.o_stream.valid & ~at_add.valid)),
            out_fifo.w_data.eq(Mux(out_kb, Cat(adder.o_stream.payload.s, at_out.last),
                                   rescaler.o_stream.payload)),
        ]
        kb_busy = Signal()
        m.d.sync += kb_busy.eq(Cat(st.valid for st in stages).any())
        vars(s).update(kb_busy=kb_busy)
