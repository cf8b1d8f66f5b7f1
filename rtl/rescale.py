"""Fixed-to-float rescaler: int32 accumulators to float32, scaled by a power of two."""

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

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


def _zero_count(value, width: int, leading: bool):
    """``(count, zero)``: the leading (or trailing) zeros of ``value`` (``width`` if it is
    zero) and whether it is zero, as a tree of depth ``log2(width)``: each node takes its
    upper (lower) half's count unless that half is all zeros. ``width`` is a power of two."""
    if width == 1:
        return ~value[0], ~value[0]
    half = width // 2
    first, second = (value[half:], value[:half]) if leading else (value[:half], value[half:])
    c1, z1 = _zero_count(first, half, leading)
    c2, z2 = _zero_count(second, half, leading)
    return Mux(z1, half + c2, c1), z1 & z2


def _leading_zeros(m, value, width):
    """Count of leading zeros of ``value`` (``width`` if it is zero), as a comb signal."""
    count = Signal(range(width + 1))
    m.d.comb += count.eq(_zero_count(value, width, leading=True)[0])
    return count


def _trailing_zeros(m, value, width):
    """Count of trailing zeros of ``value`` (``width`` if it is zero), as a comb signal."""
    count = Signal(range(width + 1))
    m.d.comb += count.eq(_zero_count(value, width, leading=False)[0])
    return count


class Rescaler(wiring.Component):
    """Pipelined int32 -> float32 conversion with a power-of-two scale per lane.

    Each lane computes the float32 nearest to ``acc * 2**exp`` (round to nearest, ties to even;
    subnormals; +-inf on overflow), bit-exact with :func:`sim.golden.rescale` and following the
    integer algorithm written down in :func:`sim.golden.rescale_bits`. With ``raw`` set the
    int32 passes through unchanged.

    Parameters
    ----------
    lanes : int
        Number of independent lanes (the systolic array's column count in the datapath).

    Members
    -------
    i_stream : In(stream.Signature(rescale_input_layout(lanes)))
    o_stream : Out(stream.Signature(rescale_output_layout(lanes)))

    Latency and throughput
    ----------------------
    :attr:`LATENCY` (5) cycles from an accepted input to a valid output; one beat (``lanes``
    results) per cycle. The pipeline stalls as a whole while ``o_stream.ready`` is low.
    """

    LATENCY = 5

    def __init__(self, lanes: int):
        if not isinstance(lanes, int) or lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
        self.lanes = lanes
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
        valid = [Signal(name=f"valid{s}") for s in range(1, 6)]
        raw = [Signal(name=f"raw{s}") for s in range(1, 6)]
        last = [Signal(name=f"last{s}") for s in range(1, 6)]
        with m.If(advance):
            m.d.sync += [
                valid[0].eq(self.i_stream.valid),
                raw[0].eq(self.i_stream.payload.raw),
                last[0].eq(self.i_stream.payload.last),
            ]
            for s in range(1, 5):
                m.d.sync += [valid[s].eq(valid[s - 1]), raw[s].eq(raw[s - 1]),
                             last[s].eq(last[s - 1])]
        m.d.comb += [
            self.o_stream.valid.eq(valid[4]),
            self.o_stream.payload.last.eq(last[4]),
        ]

        # The lanes' registers hold data, read only under their stage's valid bit: no reset,
        # so that the domain's reset reaches the few control flags alone.
        for lane in range(self.lanes):
            acc_in = self.i_stream.payload.acc[lane]
            exp_in = self.i_stream.payload.exp[lane]

            # Stage 1: sign and magnitude.
            s1_acc = Signal(signed(32), name=f"l{lane}_s1_acc", reset_less=True)
            s1_sign = Signal(name=f"l{lane}_s1_sign", reset_less=True)
            s1_mag = Signal(unsigned(32), name=f"l{lane}_s1_mag", reset_less=True)
            s1_exp = Signal(signed(EXP_WIDTH), name=f"l{lane}_s1_exp", reset_less=True)
            # Stage 2: leading and trailing zero counts.
            s2_acc = Signal(signed(32), name=f"l{lane}_s2_acc", reset_less=True)
            s2_sign = Signal(name=f"l{lane}_s2_sign", reset_less=True)
            s2_mag = Signal(unsigned(32), name=f"l{lane}_s2_mag", reset_less=True)
            s2_exp = Signal(signed(EXP_WIDTH), name=f"l{lane}_s2_exp", reset_less=True)
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
            s4_acc = Signal(signed(32), name=f"l{lane}_s4_acc", reset_less=True)
            s4_sign = Signal(name=f"l{lane}_s4_sign", reset_less=True)
            s4_zero = Signal(name=f"l{lane}_s4_zero", reset_less=True)
            s4_q = Signal(unsigned(24), name=f"l{lane}_s4_q", reset_less=True)
            s4_guard = Signal(name=f"l{lane}_s4_guard", reset_less=True)
            s4_sticky = Signal(name=f"l{lane}_s4_sticky", reset_less=True)
            # E + 126, or 0 if subnormal
            s4_base = Signal(unsigned(8), name=f"l{lane}_s4_base", reset_less=True)
            s4_huge = Signal(name=f"l{lane}_s4_huge", reset_less=True)
            # Stage 5: the output word.
            s5_word = Signal(unsigned(32), name=f"l{lane}_s5_word", reset_less=True)

            lz = _leading_zeros(m, s1_mag, 32)
            tz = _trailing_zeros(m, s1_mag, 32)

            e_comb = Signal(signed(11))
            m.d.comb += e_comb.eq(31 - s2_lz + s2_exp)

            # sh = max(8, -E - 118), clamped at 33 (everything, guard included, shifted out),
            # computed in stage 3 from E = 31 - lz + exp and registered, so that stage 4 is
            # the shift alone.
            sh = Signal(range(34))
            neg = Signal(signed(12))
            m.d.comb += neg.eq(s2_lz - s2_exp - 149)
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
            # bit (their carry out is an AND of all ones, not the adder's) and the exponent
            # field base + q[23] plus that carry, both candidates and their overflow (>= 255,
            # the infinity) computed beside the low bits' adder.
            rbit = s4_guard & (s4_sticky | s4_q[0])
            carry = Signal()
            m.d.comb += carry.eq(rbit & (s4_q[:23] == (1 << 23) - 1))
            low = Signal(23)
            m.d.comb += low.eq(s4_q[:23] + rbit)
            field = Signal(range(256))
            m.d.comb += field.eq(s4_base + s4_q[23])        # base <= 253
            overflow = Mux(carry, field >= 254, field >= 255)
            rounded = Cat(low, Mux(carry, field + 1, field)[:8])

            with m.If(advance):
                m.d.sync += [
                    s1_acc.eq(acc_in),
                    s1_sign.eq(acc_in < 0),
                    s1_mag.eq(Mux(acc_in < 0, -acc_in, acc_in)),
                    s1_exp.eq(exp_in),

                    s2_acc.eq(s1_acc), s2_sign.eq(s1_sign), s2_mag.eq(s1_mag),
                    s2_exp.eq(s1_exp), s2_lz.eq(lz), s2_tz.eq(tz),

                    s3_acc.eq(s2_acc), s3_sign.eq(s2_sign), s3_zero.eq(s2_mag == 0),
                    s3_mant.eq(s2_mag << s2_lz), s3_e.eq(e_comb), s3_sh.eq(sh),
                    s3_zeros.eq(s2_lz + s2_tz),

                    s4_acc.eq(s3_acc), s4_sign.eq(s3_sign), s4_zero.eq(s3_zero),
                    s4_q.eq(wide[1:]), s4_guard.eq(wide[0]),
                    s4_sticky.eq(s3_zeros < s3_sh - 1),
                    s4_base.eq(Mux(s3_e >= -126, s3_e + 126, 0)),
                    s4_huge.eq(s3_e > 127),
                ]
                with m.If(raw[3]):
                    m.d.sync += s5_word.eq(s4_acc)
                with m.Elif(s4_zero):
                    m.d.sync += s5_word.eq(0)
                with m.Elif(s4_huge | overflow):
                    m.d.sync += s5_word.eq(Cat(Const(0x7F800000, 31), s4_sign))
                with m.Else():
                    m.d.sync += s5_word.eq(Cat(rounded[:31], s4_sign))
            m.d.comb += self.o_stream.payload.data[lane].eq(s5_word)
        return m
