"""Fixed-to-float rescaler: int32 accumulators to float32, scaled by a power of two."""

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .xilinx import lane_copies

__all__ = ["Rescaler", "rescale_input_layout", "rescale_output_layout"]

#: Width of a lane's exponent: the sum of two int8 block exponents, in [-256, 254].
EXP_WIDTH = 9


def rescale_input_layout(lanes: int) -> data.StructLayout:
    """Payload of :attr:`Rescaler.i_stream`: one int32 and one exponent per lane."""
    return data.StructLayout({
        "acc":  data.ArrayLayout(signed(32), lanes),
        "exp":  data.ArrayLayout(signed(EXP_WIDTH), lanes),
        "raw":  1,   # pass ``acc`` through unchanged (int32 output mode)
        "last": 1,   # carried through; marks the last beat of a tile
    })


def rescale_output_layout(lanes: int) -> data.StructLayout:
    """Payload of :attr:`Rescaler.o_stream`: one 32-bit word (float32 or int32) per lane."""
    return data.StructLayout({
        "data": data.ArrayLayout(unsigned(32), lanes),
        "last": 1,
    })


def _zero_groups(value, width: int, leading: bool, group: int = 8):
    """The first of the two priority levels of :func:`_zero_combine`: per group of ``group``
    bits of ``value`` (counted from its top for leading zeros, from bit 0 for trailing zeros),
    the zeros before its first one (``group`` if none) and whether it has a one. Returns
    ``(counts, any_)``: ``Cat`` of the groups' counts (``group.bit_length()`` bits each) and of
    their flags. Each bit is a function of ``group`` inputs (two LUT levels at 8).
    ``width`` is a multiple of ``group``."""
    def first_one(bits, n):
        # zeros before the first one of ``bits`` (counted from bit 0), ``n`` if none
        count = Const(n, range(n + 1))
        for i in reversed(range(len(bits))):
            count = Mux(bits[i], i, count)
        return count
    order = list(reversed(range(width))) if leading else list(range(width))
    bits = [value[i] for i in order]          # bit 0 of the order is counted first
    groups = [Cat(*bits[g:g + group]) for g in range(0, width, group)]
    return Cat(*(first_one(grp, group) for grp in groups)), Cat(*(grp.any() for grp in groups))


def _zero_combine(counts, any_, width: int, group: int = 8):
    """The second level: the zeros before the first group with a one, plus that group's
    count (``width`` if no group has one). Each bit is a function of about ``2 * width /
    group`` inputs (two LUT levels at 32 / 8)."""
    cw = group.bit_length()
    count = Const(width, range(width + 1))
    for g in reversed(range(width // group)):
        count = Mux(any_[g], g * group + counts[g * cw:(g + 1) * cw], count)
    return count


def _infinity(sign):
    """The float32 infinity of ``sign`` (bit 31)."""
    return Cat(Const(0x7F800000, 31), sign)


class Rescaler(wiring.Component):
    """Pipelined int32 -> float32 conversion with a power-of-two scale per lane.

    Each lane computes the float32 nearest to ``acc * 2**exp`` (round to nearest, ties to
    even; subnormals; +-inf on overflow), bit-exact with :func:`sim.models.golden.rescale` and
    following the integer algorithm written down in :func:`sim.models.golden.rescale_bits`.
    With ``raw`` set the int32 passes through unchanged.

    Parameters
    ----------
    lanes : int
        Number of independent lanes (the systolic array's column count in the datapath).
    primitive : bool
        The copies of ``raw`` that reach the lanes (one per :data:`LANES_PER_COPY`) as
        ``FDRE`` instances, so that synthesis keeps them apart (:func:`rtl.xilinx.
        register_copies`).

    Attributes
    ----------
    i_stream : In(stream.Signature(rescale_input_layout(lanes)))
    o_stream : Out(stream.Signature(rescale_output_layout(lanes)))

    Latency
    -------
    :attr:`LATENCY` cycles from an accepted input to a valid output. The stages: the input
    registered; sign and magnitude; leading and trailing zeros per group of 8 bits; the zero
    counts; the normalised significand and exponent; the alignment shift (with the exponent
    field's three candidates); the rounding and the output word. None has a carry chain after
    another.

    Throughput
    ----------
    One beat (``lanes`` results) per cycle. The pipeline stalls as a whole while
    ``o_stream.ready`` is low.
    """

    LATENCY = 7
    #: Lanes one copy of a stage's ``raw`` flag reaches (33 loads a lane).
    LANES_PER_COPY = 8

    def __init__(self, lanes: int, *, primitive: bool = False):
        if not isinstance(lanes, int) or lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
        self.lanes = lanes
        self.primitive = bool(primitive)
        super().__init__({
            "i_stream": In(stream.Signature(rescale_input_layout(lanes))),
            "o_stream": Out(stream.Signature(rescale_output_layout(lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        advance = Signal()
        m.d.comb += [
            advance.eq(~self.o_stream.valid | self.o_stream.ready),
            self.i_stream.ready.eq(advance),
        ]

        # Shared control flow: a valid bit and the side-band flags per stage.
        S = self.LATENCY
        valid = [Signal(name=f"valid{s}") for s in range(S)]
        raw = [Signal(name=f"raw{s}") for s in range(S)]
        last = [Signal(name=f"last{s}") for s in range(S)]
        with m.If(advance):
            m.d.sync += [
                valid[0].eq(self.i_stream.valid),
                raw[0].eq(self.i_stream.payload.raw),
                last[0].eq(self.i_stream.payload.last),
            ]
            for s in range(1, S):
                m.d.sync += [valid[s].eq(valid[s - 1]), raw[s].eq(raw[s - 1]),
                             last[s].eq(last[s - 1])]
        m.d.comb += [
            self.o_stream.valid.eq(valid[S - 1]),
            self.o_stream.payload.last.eq(last[S - 1]),
        ]
        # raw as the lanes' output-word stage reads it (raw[S - 3]), in copies: not one net
        # into the output multiplexer of every bit of every lane
        raw_out = lane_copies(m, raw[S - 4], self.lanes, self.LANES_PER_COPY,
                              primitive=self.primitive, name="raw_lanes", enable=advance)

        # The lanes' registers hold data, read only under their stage's valid bit: no reset,
        # so that the domain's reset reaches the few control flags alone.
        for lane in range(self.lanes):
            raw_l = raw_out[lane]
            # Stage 0: the input, registered (the datapath sums it just before).
            acc_in = Signal(signed(32), name=f"l{lane}_s0_acc", reset_less=True)
            exp_in = Signal(signed(EXP_WIDTH), name=f"l{lane}_s0_exp", reset_less=True)

            # Stage 1: sign and magnitude.
            s1_acc = Signal(signed(32), name=f"l{lane}_s1_acc", reset_less=True)
            s1_sign = Signal(name=f"l{lane}_s1_sign", reset_less=True)
            s1_mag = Signal(unsigned(32), name=f"l{lane}_s1_mag", reset_less=True)
            s1_exp = Signal(signed(EXP_WIDTH), name=f"l{lane}_s1_exp", reset_less=True)
            # Stage 2a: the zero counts per group of 8 bits.
            sg_acc = Signal(signed(32), name=f"l{lane}_sg_acc", reset_less=True)
            sg_sign = Signal(name=f"l{lane}_sg_sign", reset_less=True)
            sg_mag = Signal(unsigned(32), name=f"l{lane}_sg_mag", reset_less=True)
            sg_exp = Signal(signed(EXP_WIDTH), name=f"l{lane}_sg_exp", reset_less=True)
            # (as wide as :func:`_zero_groups` makes them: a count and a flag per group)
            lz_groups = _zero_groups(s1_mag, 32, leading=True)
            tz_groups = _zero_groups(s1_mag, 32, leading=False)
            sg_lzc, sg_tzc = (Signal(len(lz_groups[0]), name=f"l{lane}_sg_{n}zc",
                                     reset_less=True) for n in "lt")
            sg_lza, sg_tza = (Signal(len(lz_groups[1]), name=f"l{lane}_sg_{n}za",
                                     reset_less=True) for n in "lt")
            # Stage 2: leading and trailing zero counts.
            s2_acc = Signal(signed(32), name=f"l{lane}_s2_acc", reset_less=True)
            s2_sign = Signal(name=f"l{lane}_s2_sign", reset_less=True)
            s2_mag = Signal(unsigned(32), name=f"l{lane}_s2_mag", reset_less=True)
            s2_exp = Signal(signed(EXP_WIDTH), name=f"l{lane}_s2_exp", reset_less=True)
            s2_neg = Signal(signed(12), name=f"l{lane}_s2_neg", reset_less=True)  # -exp - 149
            s2_lz = Signal(range(33), name=f"l{lane}_s2_lz", reset_less=True)
            s2_tz = Signal(range(33), name=f"l{lane}_s2_tz", reset_less=True)
            # Stage 3: normalised significand and unbiased exponent.
            s3_acc = Signal(signed(32), name=f"l{lane}_s3_acc", reset_less=True)
            s3_sign = Signal(name=f"l{lane}_s3_sign", reset_less=True)
            s3_zero = Signal(name=f"l{lane}_s3_zero", reset_less=True)
            s3_mant = Signal(unsigned(32), name=f"l{lane}_s3_mant", reset_less=True)
            s3_e = Signal(signed(11), name=f"l{lane}_s3_e", reset_less=True)
            s3_zeros = Signal(range(65), name=f"l{lane}_s3_zeros", reset_less=True)  # lz + tz
            # Stage 4: alignment shift, guard and sticky bits.
            s4_sign = Signal(name=f"l{lane}_s4_sign", reset_less=True)
            s4_q = Signal(unsigned(24), name=f"l{lane}_s4_q", reset_less=True)
            s4_guard = Signal(name=f"l{lane}_s4_guard", reset_less=True)
            s4_sticky = Signal(name=f"l{lane}_s4_sticky", reset_less=True)
            # the exponent field before rounding, E + 126 (0 if subnormal), plus 0, 1 and 2
            # (the significand's bit 23 and the rounding carry add to it); and E == 127
            s4_base = [Signal(unsigned(8), name=f"l{lane}_s4_base{i}", reset_less=True)
                       for i in range(3)]
            s4_top = Signal(name=f"l{lane}_s4_top", reset_less=True)
            # raw, zero or too large: the output word is known before rounding
            s4_special = Signal(name=f"l{lane}_s4_special", reset_less=True)
            # q[:23] all ones (the round bit would carry into the exponent field): q[j] is
            # mant[j + sh], so only sh = 8 or 9 (the normal range) can give 23 ones
            s4_ones = Signal(name=f"l{lane}_s4_ones", reset_less=True)
            s4_word = Signal(unsigned(32), name=f"l{lane}_s4_word", reset_less=True)
            # Stage 5: the output word.
            s5_word = Signal(unsigned(32), name=f"l{lane}_s5_word", reset_less=True)

            lz, tz = Signal(range(33)), Signal(range(33))
            m.d.comb += [lz.eq(_zero_combine(sg_lzc, sg_lza, 32)),
                         tz.eq(_zero_combine(sg_tzc, sg_tza, 32))]

            e_comb = Signal(signed(11))
            m.d.comb += e_comb.eq(31 - s2_lz + s2_exp)

            # sh = max(8, -E - 118), clamped at 33 (everything, guard included, shifted out),
            # computed in stage 3 from E = 31 - lz + exp and registered, so that stage 4 is
            # the shift alone.
            sh = Signal(range(34))
            neg = Signal(signed(12))
            m.d.comb += neg.eq(s2_lz + s2_neg)
            with m.If(neg <= 8):
                m.d.comb += sh.eq(8)
            with m.Elif(neg >= 33):
                m.d.comb += sh.eq(33)
            with m.Else():
                m.d.comb += sh.eq(neg)
            s3_sh = Signal(range(34), name=f"l{lane}_s3_sh", reset_less=True)
            wide = Signal(unsigned(33))
            m.d.comb += wide.eq(Cat(Const(0, 1), s3_mant) >> s3_sh)  # bit 0 is the guard bit

            # Stage 5 rounds: (base << 23) + q + round bit, as the low 23 bits plus the round
            # bit (their carry out is the round bit and stage 4's all-ones flag, not the
            # adder's) and the exponent field base + q[23] + that carry, picked from stage 4's
            # three candidates; it overflows (255, the infinity) only from base 253
            # (E == 127) plus 2.
            rbit = s4_guard & (s4_sticky | s4_q[0])
            carry = Signal()
            m.d.comb += carry.eq(rbit & s4_ones)
            low = Signal(23)
            m.d.comb += low.eq(s4_q[:23] + rbit)
            field = Signal(8)
            m.d.comb += field.eq(Mux(carry, Mux(s4_q[23], s4_base[2], s4_base[1]),
                                     Mux(s4_q[23], s4_base[1], s4_base[0])))
            overflow = carry & s4_q[23] & s4_top
            rounded = Cat(low, field)

            with m.If(advance):
                m.d.sync += [
                    acc_in.eq(self.i_stream.payload.acc[lane]),
                    exp_in.eq(self.i_stream.payload.exp[lane]),

                    s1_acc.eq(acc_in),
                    s1_sign.eq(acc_in < 0),
                    s1_mag.eq(Mux(acc_in < 0, -acc_in, acc_in)),
                    s1_exp.eq(exp_in),

                    sg_acc.eq(s1_acc), sg_sign.eq(s1_sign), sg_mag.eq(s1_mag),
                    sg_exp.eq(s1_exp), sg_lzc.eq(lz_groups[0]), sg_lza.eq(lz_groups[1]),
                    sg_tzc.eq(tz_groups[0]), sg_tza.eq(tz_groups[1]),

                    s2_acc.eq(sg_acc), s2_sign.eq(sg_sign), s2_mag.eq(sg_mag),
                    s2_exp.eq(sg_exp), s2_lz.eq(lz), s2_tz.eq(tz), s2_neg.eq(-sg_exp - 149),

                    s3_acc.eq(s2_acc), s3_sign.eq(s2_sign), s3_zero.eq(s2_mag == 0),
                    s3_mant.eq(s2_mag << s2_lz), s3_e.eq(e_comb), s3_sh.eq(sh),
                    s3_zeros.eq(s2_lz + s2_tz),

                    s4_sign.eq(s3_sign),
                    s4_q.eq(wide[1:]), s4_guard.eq(wide[0]),
                    s4_sticky.eq(s3_zeros < s3_sh - 1),
                    *(s4_base[i].eq(Mux(s3_e >= -126, s3_e + 126 + i, i)) for i in range(3)),
                    s4_top.eq(s3_e == 127),
                    s4_ones.eq(((s3_sh == 8) & s3_mant[8:31].all())
                               | ((s3_sh == 9) & s3_mant[9:32].all())),
                    s4_special.eq(raw_l | s3_zero | (s3_e > 127)),
                    s4_word.eq(Mux(raw_l, s3_acc, Mux(s3_zero, 0, _infinity(s3_sign)))),
                ]
                with m.If(s4_special):
                    m.d.sync += s5_word.eq(s4_word)
                with m.Elif(overflow):
                    m.d.sync += s5_word.eq(_infinity(s4_sign))
                with m.Else():
                    m.d.sync += s5_word.eq(Cat(rounded[:31], s4_sign))
            m.d.comb += self.o_stream.payload.data[lane].eq(s5_word)
        return m
