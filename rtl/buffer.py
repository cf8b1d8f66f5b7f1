"""Transposable operand buffer: written row-major, read as the tile or as its transpose."""

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ._util import delay
from .xilinx import lane_copies, lut_copies, select

__all__ = ["LANES_PER_ROTATION", "TransposableBuffer", "buffer_command_layout"]

#: Lanes whose rotation (both sides) and write offsets one copy of the rotation amount
#: drives: a copy's bit then selects in about ``16 * 8`` 2:1 multiplexer bits a stage,
#: however many lanes the buffer has.
LANES_PER_ROTATION = 16


def buffer_command_layout(depth: int, slots: int = 2) -> data.StructLayout:
    """Payload of :attr:`TransposableBuffer.w_cmd`: where and how the next tiles are written.

    ``1 + extra`` tiles (k-major only; ``extra = 0`` otherwise) go to slots
    ``slot .. slot + extra``. ``first_last`` says that the first beat is the last
    (:meth:`TransposableBuffer.first_is_last` of the other fields): the sender computes it a
    stage ahead, so that no compare of ``k`` lies between the command and the buffer's
    ``last`` register.
    """
    return data.StructLayout({
        "slot":    range(slots),
        "extra":   range(slots),
        "k":       range(depth + 1),
        "k_major": 1,
        "first_last": 1,
    })


class TransposableBuffer(wiring.Component):
    """Double-buffered on-chip operand store with run-time transposition.

    The buffer holds operand tiles for the systolic array. The array reads one vector of
    ``lanes`` int8 values per reduction step ``k``. A tile arrives row-major, ``lanes`` values a
    beat, in either of two forms, chosen per tile by ``w_cmd.k_major``:

    * ``k_major = 1``: the stored tile is ``k x lanes``; each beat is the vector for one step
      (A stored transposed, as for ``transpose_a``; B as stored, K x N). With ``extra = S - 1 > 0``
      the beats of ``S`` neighbouring tiles arrive interleaved as they lie in memory — beat
      ``i`` is step ``i // S`` of the tile in slot ``slot + i % S`` — so the engine reads the
      rows of a block of k-major tiles in single long bursts.
    * ``k_major = 0``: the stored tile is ``lanes x k``; each beat holds ``lanes`` consecutive
      steps of one lane, rows padded to a multiple of ``lanes`` (A as stored, M x K; B stored
      transposed, as for ``transpose_b``). This is the transposing case.

    Both forms are written at one beat per cycle with no conflicts: element ``(lane, k)`` lives
    in bank ``(lane + k) mod lanes`` at address ``k``, so a step's vector, and a run of ``lanes``
    steps of one lane, each touch every bank once. A rotation on each side undoes the skew.
    The buffer has ``slots`` tile slots: the next tile is written while the array reads
    another, and a tile can stay in its slot to be read by several commands (operand reuse).

    The numpy model is :func:`sim.models.datapath.operand_beats` (what is written) and
    :func:`sim.models.datapath.buffer_read` (what is read).

    The rotation amounts of both sides are registers in a copy per
    :data:`LANES_PER_ROTATION` lanes (``FDRE`` instances with ``primitive``), so that no
    one net selects in every lane.

    Parameters
    ----------
    lanes : int
        Vector width (array rows for the A buffer, columns for the B buffer).
    depth : int
        Largest ``k`` of a tile.
    slots : int
        Tile slots (at least 2). Each bank holds ``slots`` times ``depth`` rounded up to a
        multiple of ``lanes`` and then to a power of two: one BRAM18 per bank for 2 slots of
        1024.

    Attributes
    ----------
    w_cmd : In(stream.Signature(buffer_command_layout(depth)))
        Accepted when no tile is being written, or in the cycle of its last beat. ``k = 0``
        writes nothing. ``extra`` must be 0 unless ``k_major``, and ``slot + extra < slots``.
    w_stream : In(stream.Signature(data.ArrayLayout(signed(8), lanes)))
    w_done : Out(1)
        High in the cycle the last beat of a tile is accepted (the cycle after, for ``k = 0``).
    r_en, r_slot, r_k : In
        Read step ``r_k`` of the tile in ``r_slot``. The steps of one tile must be read in
        order 0, 1, 2, ... (idle cycles in between are allowed).
    r_valid, r_data : Out
        The vector read :attr:`READ_LATENCY` cycles after ``r_en``: the block RAM, its
        output register, the rotation into a register.

    Latency
    -------
    A vector is read :attr:`READ_LATENCY` cycles after ``r_en``.

    Throughput
    ----------
    One beat written and one vector read per cycle, in either form.
    """

    READ_LATENCY = 3

    def __init__(self, lanes: int, depth: int, slots: int = 2, *, primitive: bool = False):
        if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
        if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= 65535:
            raise ValueError(f"depth must be an integer in [1, 65535], not {depth!r}")
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 2:
            raise ValueError(f"slots must be an integer >= 2, not {slots!r}")
        self.lanes = lanes
        self.depth = depth
        self.slots = slots
        self.primitive = bool(primitive)
        padded = -(-depth // lanes) * lanes
        self.slot_depth = 1 << (padded - 1).bit_length()   # slot base = slot << log2(depth)
        vector = data.ArrayLayout(signed(8), lanes)
        super().__init__({
            "w_cmd": In(stream.Signature(buffer_command_layout(depth, slots))),
            "w_stream": In(stream.Signature(vector)),
            "w_done": Out(1),
            "r_en": In(1),
            "r_slot": In(range(slots)),
            "r_k": In(range(depth)),
            "r_valid": Out(1),
            "r_data": Out(vector),
        })

    @staticmethod
    def first_is_last(k, k_major, extra, lanes):
        """Whether a command's first beat is its tile's last (``w_cmd.first_last``): k-major,
        one step of one tile; else one lane of at most one step. Python ints or Amaranth
        values."""
        one_step = (k == 1) & (extra == 0)
        if isinstance(k, int) and isinstance(k_major, int):
            return int(bool(one_step if k_major else lanes == 1 and k <= 1))
        return Mux(k_major, one_step, (k <= 1) if lanes == 1 else 0)

    def elaborate(self, platform):
        m = Module()
        L, D = self.lanes, self.slot_depth

        banks = []
        for b in range(L):
            bank = memory.Memory(shape=signed(8), depth=self.slots * D, init=[])
            m.submodules[f"bank{b}"] = bank
            banks.append((bank.write_port(), bank.read_port()))

        # ---- write side -------------------------------------------------------------------
        busy = Signal()
        slot = Signal(range(self.slots))
        extra = Signal(range(self.slots))
        sub = Signal(range(self.slots))   # tile of the span this beat goes to
        k_major = Signal()
        pos = Signal(range(D + L))    # step of this beat (k-major) or of its first value
        rot = Signal(range(L))        # beat value x goes to bank (x + rot) mod L

        # k - 1, k - 2, k - L, k - 2L, k <= L and the span's extra tiles - 1, registered with
        # the command, so that the end tests compare a position with a register.
        k_m1 = Signal(range(self.depth + 1))
        k_m2 = Signal(range(-1, self.depth + 1))
        k_mL = Signal(range(-L, self.depth + 1))
        k_m2L = Signal(range(-2 * L, self.depth + 1))
        short = Signal()
        extra_m1 = Signal(range(-1, self.slots))    # the span's tiles - 2

        def beat_of(bz, v):
            """A beat is written: the tile is being written and the stream has a beat."""
            return bz & v
        beat = Signal()
        last = Signal()               # the next beat is the tile's last (a register)
        finished = Signal()           # this beat is the tile's last
        m.d.comb += [
            beat.eq(beat_of(busy, self.w_stream.valid)),
            finished.eq(beat & last),
            self.w_stream.ready.eq(busy),
            # The next command is taken in the cycle of the last beat: no gap between tiles.
            self.w_cmd.ready.eq(~busy | finished),
        ]
        # The position after this beat; `last` follows it, so that `finished` (and through
        # w_done the datapath's loader) is one gate from registers. `last_n` is
        # "the beat at (pos_n, sub_n, rot_n) is the tile's last" -- k-major: pos_n == k - 1 and
        # sub_n == extra; else pos_n + L >= k and rot_n == L - 1 -- written in terms of this
        # beat's position, so that it compares registers rather than the sums.
        pos_n = Signal.like(pos)
        sub_n = Signal.like(sub)
        rot_n = Signal.like(rot)
        last_n = Signal()
        rot_next = Mux(rot == L - 1, 0, rot + 1)
        wraps_to_last = (rot == L - 2) if L >= 2 else 1     # rot_next == L - 1
        m.d.comb += [pos_n.eq(pos), sub_n.eq(sub), rot_n.eq(rot)]
        with m.If(k_major):
            with m.If(sub == extra):
                m.d.comb += [sub_n.eq(0), pos_n.eq(pos + 1), rot_n.eq(rot_next),
                             last_n.eq((pos == k_m2) & (extra == 0))]
            with m.Else():
                m.d.comb += [sub_n.eq(sub + 1), last_n.eq((pos == k_m1) & (sub == extra_m1))]
        with m.Else():
            with m.If(pos >= k_mL):        # last beat of this lane's row (pos + L >= k)
                m.d.comb += [pos_n.eq(0), rot_n.eq(rot_next), last_n.eq(short & wraps_to_last)]
            with m.Else():
                m.d.comb += [pos_n.eq(pos + L), last_n.eq((pos >= k_m2L) & (rot == L - 1))]
        with m.If(beat):
            m.d.sync += [pos.eq(pos_n), sub.eq(sub_n), last.eq(last_n)]
        with m.If(finished):
            m.d.sync += busy.eq(0)

        cmd = self.w_cmd.payload
        take = Signal()
        empty_done = Signal()         # a k = 0 command, reported a cycle later
        m.d.comb += [
            take.eq(self.w_cmd.valid & self.w_cmd.ready),
            self.w_done.eq(finished | empty_done),
        ]
        m.d.sync += empty_done.eq(take & (cmd.k == 0))
        cmd_k_m1, cmd_k_mL = cmd.k - 1, cmd.k - L
        cmd_extra = Mux(cmd.k_major, cmd.extra, 0)
        with m.If(take):
            m.d.sync += [slot.eq(cmd.slot), k_major.eq(cmd.k_major),
                         extra.eq(cmd_extra), extra_m1.eq(cmd_extra - 1), sub.eq(0),
                         pos.eq(0), busy.eq(cmd.k != 0),
                         k_m1.eq(cmd_k_m1), k_mL.eq(cmd_k_mL), k_m2.eq(cmd.k - 2),
                         k_m2L.eq(cmd.k - 2 * L), short.eq(cmd.k <= L),
                         # the first beat (0, 0, 0) is the last: the sender's flag
                         last.eq(cmd.first_last)]

        # The write address is slot base + step + offset, with no carry out of the step and
        # offset: D is a power of two at least the padded depth, above every address in a
        # slot. Where an offset is added (lane-major beats) pos is a multiple of L and the
        # offset below L, so for L a power of two step and offset share no bit either. The
        # parts are then ORed, not added: no adder chain from the rotation's registers into
        # every bank's address pins.
        slot_base = (slot + sub) * D  # a shift
        pow2 = L & (L - 1) == 0
        # `rot` (0 for a new command, else the next beat's) and its copies, one per
        # LANES_PER_ROTATION banks, from the one update (the copies have no reset: after
        # one, no beat comes before a command's `take`)
        rot_d, rot_en = Mux(take, 0, rot_n), beat | take
        with m.If(rot_en):
            m.d.sync += rot.eq(rot_d)
        w_rots = lane_copies(m, rot_d, L, LANES_PER_ROTATION,
                             primitive=self.primitive, name="w_rot_copy", enable=rot_en)
        # bank b takes beat value (b - rot) mod L
        values = _rotate(m, [self.w_stream.payload[i] for i in range(L)], w_rots, -1, "w_rot",
                         primitive=self.primitive)
        # `beat` again, a LUT per LANES_PER_ROTATION banks: each bank's block RAM has eight
        # write-enable pins, too many loads for one LUT on a wide buffer
        beats = lut_copies(m, beat_of, [busy, self.w_stream.valid], L,
                           LANES_PER_ROTATION, primitive=self.primitive, name="beat_copy")
        for b, (wp, _) in enumerate(banks):
            offset = Signal(range(L), name=f"w_offset{b}")   # (b - rot) mod L
            with m.Switch(w_rots[b]):
                for v in range(L):
                    with m.Case(v):
                        m.d.comb += offset.eq((b - v) % L)
            lane_off = Mux(k_major, 0, offset)
            m.d.comb += [
                wp.en.eq(beats[b]),
                wp.addr.eq(slot_base | (pos | lane_off if pow2 else pos + lane_off)),
                wp.data.eq(values[b]),
            ]

        # ---- read side --------------------------------------------------------------------
        r_rot = Signal(range(L))      # rotation of the step after the last one read
        rot_now = Signal(range(L))
        m.d.comb += rot_now.eq(Mux(self.r_k == 0, 0, r_rot))
        with m.If(self.r_en):
            m.d.sync += r_rot.eq(Mux(rot_now == L - 1, 0, rot_now + 1))
        # The banks' block RAM read, then its output register (the primitive's own: a
        # block RAM's clock-to-out without it is several LUT levels), then the rotation.
        rot_d = lane_copies(m, delay(m, rot_now, 1, "rot", reset_less=True), L,
                            LANES_PER_ROTATION, primitive=self.primitive, name="r_rot_copy")
        en_d = delay(m, self.r_en, 2, "en")
        m.d.sync += self.r_valid.eq(en_d)
        r_base = self.r_slot * D
        for _, rp in banks:
            m.d.comb += rp.addr.eq(r_base + self.r_k)
        bank_q = [Signal(signed(8), name=f"bank{b}_q", reset_less=True)
                  for b in range(len(banks))]
        m.d.sync += [q.eq(rp.data) for q, (_, rp) in zip(bank_q, banks, strict=True)]
        # lane i of step k is in bank (i + k) mod L
        lanes = _rotate(m, bank_q, rot_d, +1, "r_rot", primitive=self.primitive)
        # (data registers, read under r_valid: no reset, so the domain's reset does not
        # fan out to them)
        r_data = Signal(self.r_data.shape(), name="r_data_q", reset_less=True)
        for i in range(L):
            m.d.sync += r_data[i].eq(lanes[i])
        m.d.comb += self.r_data.eq(r_data)
        return m


def _rotate(m, values, amounts, direction: int, name: str, *, primitive: bool = False):
    """``values`` rotated: element ``i`` of the result is ``values[(i + direction * amount)
    mod L]``, as ``log2(L)`` stages of 2:1 multiplexers (stage ``s`` rotates by ``2**s mod
    L`` when bit ``s`` of ``amount`` is set; ``amount < L``). Area ``L log L`` and depth
    ``log L`` rather than an ``L``-way multiplexer per element (``L**2``). ``amounts`` has
    one entry per element, all equal in value (copies): element ``i`` of each stage is
    selected by ``amounts[i]``.

    With ``primitive``, two stages at a time are one LUT6 per bit, a 4:1 multiplexer
    (:func:`rtl.xilinx.select`): ``ceil(log2(L) / 2)`` levels, about half as many as
    Yosys' own mapping of the 2:1 stages."""
    L = len(values)
    stages = max(0, (L - 1).bit_length())
    s = 0
    while s < stages:
        width = 2 if primitive and s + 1 < stages else 1
        steps = [(direction * ((b0 << s) + (b1 << (s + 1)))) % L
                 for b1 in range(width) for b0 in range(2)]
        stage = []
        for i in range(L):
            choices = [values[(i + step) % L] for step in steps]
            sel = amounts[i][s:s + width]
            if width == 2:
                stage.append(select(m, choices, sel, primitive=True, name=f"{name}{s}_{i}"))
            else:
                out = Signal(signed(8), name=f"{name}{s}_{i}")
                m.d.comb += out.eq(Mux(sel, choices[1], choices[0]))
                stage.append(out)
        values = stage
        s += width
    return values
