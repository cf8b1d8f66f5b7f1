"""Pipelined IEEE binary32 addition and multiplication, bit-exact with
:func:`sim.models.fp32.fp32_add` and :func:`sim.models.fp32.fp32_mul`."""

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .rescale import _zero_combine, _zero_groups

__all__ = ["CANONICAL_NAN", "Fp32Add", "Fp32Mul", "fp32_add_input_layout",
           "fp32_add_output_layout", "fp32_mul_output_layout"]

#: The quiet NaN every NaN result becomes (as :data:`sim.models.fp32.CANONICAL_NAN`).
CANONICAL_NAN = 0x7FC00000


def fp32_add_input_layout(lanes: int) -> data.StructLayout:
    """Payload of :attr:`Fp32Add.i_stream`: two float32 bit patterns per lane."""
    return data.StructLayout({
        "a": data.ArrayLayout(unsigned(32), lanes),
        "b": data.ArrayLayout(unsigned(32), lanes),
    })


def fp32_add_output_layout(lanes: int) -> data.StructLayout:
    """Payload of :attr:`Fp32Add.o_stream`: the sum's bit pattern per lane."""
    return data.StructLayout({"s": data.ArrayLayout(unsigned(32), lanes)})


class _Fp32Unit(wiring.Component):
    """What :class:`Fp32Add` and :class:`Fp32Mul` share: ``lanes`` checked, the streams,
    and the pipeline that stalls as a whole: a valid bit a stage, every register loading
    while the output is free or taken, lane ``i`` of the output field :attr:`OUTPUT` from
    ``_lane`` on the operands ``a[i]`` and ``b[i]``."""

    def __init__(self, lanes: int):
        if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
        self.lanes = lanes
        super().__init__({
            "i_stream": In(stream.Signature(fp32_add_input_layout(lanes))),
            "o_stream": Out(stream.Signature(self._output_layout(lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        advance = Signal()
        m.d.comb += [advance.eq(~self.o_stream.valid | self.o_stream.ready),
                     self.i_stream.ready.eq(advance)]
        valid = [Signal(name=f"valid{s}") for s in range(self.LATENCY)]
        with m.If(advance):
            m.d.sync += valid[0].eq(self.i_stream.valid)
            m.d.sync += [valid[s].eq(valid[s - 1]) for s in range(1, self.LATENCY)]
        m.d.comb += self.o_stream.valid.eq(valid[-1])
        out = getattr(self.o_stream.payload, self.OUTPUT)
        for lane in range(self.lanes):
            m.d.comb += out[lane].eq(self._lane(m, advance, lane,
                                                self.i_stream.payload.a[lane],
                                                self.i_stream.payload.b[lane]))
        return m


def _stage_registers(lane: int, tag: str, sync: list):
    """A lane's register makers: ``reg(stage, name, shape)``, a data register (no reset)
    named ``l<lane>_<tag><stage>_<name>``, and ``carry(stage, src, names)``, the registers
    of stage ``stage`` for the side-band ``names`` of dict ``src``, their loads appended
    to ``sync``."""
    def reg(stage, name, shape):
        return Signal(shape, name=f"l{lane}_{tag}{stage}_{name}", reset_less=True)

    def carry(stage, src, names):
        dst = {n: reg(stage, n, src[n].shape()) for n in names}
        sync.extend(dst[n].eq(src[n]) for n in names)
        return dst

    return reg, carry


class Fp32Add(_Fp32Unit):
    """Pipelined float32 addition ``s = a + b`` per lane.

    Round to nearest, ties to even; subnormal operands and results; +-inf on overflow;
    ``-0 + -0 = -0`` and ``x + (-x) = +0``; a NaN operand or ``inf - inf`` gives the
    canonical quiet NaN ``0x7FC00000``. Bit-exact with :func:`sim.models.fp32.fp32_add` and
    following the integer algorithm of :func:`sim.models.fp32.fp32_add_bits`.

    Parameters
    ----------
    lanes : int
        Number of independent lanes.

    Attributes
    ----------
    i_stream : In(stream.Signature(fp32_add_input_layout(lanes)))
    o_stream : Out(stream.Signature(fp32_add_output_layout(lanes)))

    Latency
    -------
    :attr:`LATENCY` cycles from an accepted input to a valid output. The stages: the inputs
    registered; the magnitude comparison, the swap and the exponent difference; the
    alignment shift and the sticky bit; the 28-bit add or subtract; leading zeros per group
    of 8 bits; the zero count; the normalising shift amount and the exponent field; the
    normalising shift, the rounding bit and the special values; the rounding increment. None
    has a carry chain after another.

    Throughput
    ----------
    One beat (``lanes`` sums) per cycle. The pipeline stalls as a whole while
    ``o_stream.ready`` is low.
    """

    LATENCY = 9
    OUTPUT = "s"
    _output_layout = staticmethod(fp32_add_output_layout)

    @staticmethod
    def _lane(m: Module, advance, lane: int, a_in, b_in):
        """One lane's stages; returns its output register. Data registers have no reset."""
        sync = []   # every data register loads under ``advance``
        reg, carry = _stage_registers(lane, "s", sync)
        # Stage 0: the operands.
        a, b = reg(0, "a", 32), reg(0, "b", 32)
        sync += [a.eq(a_in), b.eq(b_in)]

        # Stage 1: classes, the larger magnitude ``A`` first, the exponent difference.
        ea, eb, fa, fb = a[23:31], b[23:31], a[:23], b[:23]
        sa, sb = a[31], b[31]
        ea_eff, eb_eff = Mux(ea == 0, 1, ea), Mux(eb == 0, 1, eb)
        ma, mb = Cat(fa, ea != 0), Cat(fb, eb != 0)
        a_nan, b_nan = (ea == 255) & (fa != 0), (eb == 255) & (fb != 0)
        a_inf, b_inf = (ea == 255) & (fa == 0), (eb == 255) & (fb == 0)
        a_ge = Signal(name=f"l{lane}_a_ge")
        da, db = Signal(8, name=f"l{lane}_da"), Signal(8, name=f"l{lane}_db")
        m.d.comb += [a_ge.eq(a[:31] >= b[:31]), da.eq(ea_eff - eb_eff),
                     db.eq(eb_eff - ea_eff)]
        s1 = {n: reg(1, n, w) for n, w in
              (("sign", 1), ("sub", 1), ("e", 8), ("mbig", 24), ("msmall", 24), ("d", 8),
               ("nan", 1), ("inf", 1), ("isign", 1))}
        sync += [
            s1["sign"].eq(Mux(a_ge, sa, sb)), s1["sub"].eq(sa ^ sb),
            s1["e"].eq(Mux(a_ge, ea_eff, eb_eff)),
            s1["mbig"].eq(Mux(a_ge, ma, mb)), s1["msmall"].eq(Mux(a_ge, mb, ma)),
            s1["d"].eq(Mux(a_ge, da, db)),
            s1["nan"].eq(a_nan | b_nan | (a_inf & b_inf & (sa ^ sb))),
            s1["inf"].eq(a_inf | b_inf), s1["isign"].eq(Mux(a_inf, sa, sb)),
        ]
        side = ("sign", "sub", "e", "nan", "inf", "isign")
        side2 = side + ("e1",)

        # Stage 2: the smaller significand shifted right by d into 26 bits (24, guard and
        # round; nothing is kept beyond d = 26), and the sticky bit: the OR of the bits
        # shifted out below them, bit j of the significand for d >= j + 3. The sticky bit
        # reads the significand and a thermometer code of d, not the shifter's output.
        d = s1["d"]
        far = d > 26
        shifted = Signal(26, name=f"l{lane}_shifted")
        m.d.comb += shifted.eq(Cat(Const(0, 2), s1["msmall"]) >> d[:5])
        beyond = Cat(*(s1["msmall"][j] & (d >= j + 3) for j in range(24)))
        s2 = carry(2, s1, side + ("mbig",))
        s2["kept"], s2["sticky"] = reg(2, "kept", 26), reg(2, "sticky", 1)
        s2["e1"] = reg(2, "e1", 9)      # e + 1, for stage 6's exponent field
        sync += [s2["kept"].eq(Mux(far, 0, shifted)), s2["sticky"].eq(beyond.any()),
                 s2["e1"].eq(s1["e"] + 1)]

        # Stage 3: the sum (bit 26 is A's hidden bit): one adder, the subtrahend inverted
        # with a carry in.
        small = Cat(s2["sticky"].any(), s2["kept"], Const(0, 1))
        big = Cat(Const(0, 3), s2["mbig"], Const(0, 1))
        total = Signal(28, name=f"l{lane}_total")
        m.d.comb += total.eq(big + Mux(s2["sub"], ~small, small) + s2["sub"])
        s3 = carry(3, s2, side2)
        s3["total"] = reg(3, "total", 28)
        sync.append(s3["total"].eq(total))

        # Stage 4: leading zeros per group of 8 bits (of the sum, four zeros below it).
        lzc, lza = _zero_groups(Cat(Const(0, 4), s3["total"]), 32, leading=True)
        s4 = carry(4, s3, side2 + ("total",))
        s4["lzc"], s4["lza"] = reg(4, "lzc", len(lzc)), reg(4, "lza", len(lza))
        sync += [s4["lzc"].eq(lzc), s4["lza"].eq(lza)]

        # Stage 5: the leading zeros, and whether the sum is zero.
        lz = Signal(range(33), name=f"l{lane}_lz")
        m.d.comb += lz.eq(_zero_combine(s4["lzc"], s4["lza"], 32))
        s5 = carry(5, s4, side2 + ("total",))
        s5["lz"], s5["zero"] = reg(5, "lz", range(33)), reg(5, "zero", 1)
        sync += [s5["lz"].eq(lz), s5["zero"].eq(~s4["lza"].any())]

        # Stage 6: the left shift min(lz, e), stopping at the subnormal range, and the
        # exponent field before rounding (0 if subnormal; 255 overflows).
        fits = s5["lz"] <= s5["e"]
        s6 = carry(6, s5, ("sign", "sub", "nan", "inf", "isign", "total", "zero"))
        s6["sh"], s6["field"] = reg(6, "sh", range(33)), reg(6, "field", 9)
        sync += [s6["sh"].eq(Mux(fits, s5["lz"], s5["e"][:6])),
                 s6["field"].eq(Mux(fits, s5["e1"] - s5["lz"], 0))]

        # Stage 7: the normalising shift (the leading one, if normal, at bit 27), the
        # rounding bit (nearest, ties to even) and, for the special values (NaN, infinity,
        # zero, overflow), their word instead of the packed exponent field and fraction.
        s7 = {}
        n = Signal(28, name=f"l{lane}_n")
        m.d.comb += n.eq(s6["total"] << s6["sh"])
        inf_word = Cat(Const(0x7F800000, 31), s6["isign"])
        ovf_word = Cat(Const(0x7F800000, 31), s6["sign"])
        zero_word = Cat(Const(0, 31), s6["sign"] & ~s6["sub"])    # +0 unless -0 + -0
        special = s6["nan"] | s6["inf"] | s6["zero"] | (s6["field"] == 255)
        word = Mux(s6["nan"], CANONICAL_NAN,
                   Mux(s6["inf"], inf_word, Mux(s6["zero"], zero_word, ovf_word)))
        s7["pre"], s7["up"] = reg(7, "pre", 32), reg(7, "up", 1)
        sync += [s7["pre"].eq(Mux(special, word, Cat(n[4:27], s6["field"][:8], s6["sign"]))),
                 s7["up"].eq(n[3] & (n[:3].any() | n[4]) & ~special)]

        # Stage 8: one increment of the packed exponent field and fraction; its carry into
        # the field is right: subnormal to normal, or the largest finite value to infinity.
        s8 = reg(8, "word", 32)
        sync.append(s8.eq(Cat((s7["pre"][:31] + s7["up"])[:31], s7["pre"][31])))
        with m.If(advance):
            m.d.sync += sync
        return s8


def fp32_mul_output_layout(lanes: int) -> data.StructLayout:
    """Payload of :attr:`Fp32Mul.o_stream`: the product's bit pattern per lane."""
    return data.StructLayout({"p": data.ArrayLayout(unsigned(32), lanes)})


class Fp32Mul(_Fp32Unit):
    """Pipelined float32 multiplication ``p = a * b`` per lane.

    Round to nearest, ties to even; subnormal operands and results; +-inf on overflow; the
    sign is the XOR of the operands' (zeros too); a NaN operand or ``0 * inf`` gives the
    canonical quiet NaN ``0x7FC00000``. Bit-exact with :func:`sim.models.fp32.fp32_mul` and
    following the integer algorithm of :func:`sim.models.fp32.fp32_mul_bits`.

    Parameters
    ----------
    lanes : int
        Number of independent lanes.

    Attributes
    ----------
    i_stream : In(stream.Signature(fp32_add_input_layout(lanes)))
        The operands ``a`` and ``b`` of each lane.
    o_stream : Out(stream.Signature(fp32_mul_output_layout(lanes)))

    Latency
    -------
    :attr:`LATENCY` cycles from an accepted input to a valid output. The stages: the inputs
    registered; the classes, the significands and the exponent; two 24 x 12 products (a DSP
    slice each); their sum; leading zeros per group of 8 bits; the zero count; the shift
    and the exponent field; the shift and its sticky bit; the rounding bit and the special
    values; the rounding increment.

    Throughput
    ----------
    One beat (``lanes`` products) per cycle. The pipeline stalls as a whole while
    ``o_stream.ready`` is low.
    """

    LATENCY = 10
    OUTPUT = "p"
    _output_layout = staticmethod(fp32_mul_output_layout)

    @staticmethod
    def _lane(m: Module, advance, lane: int, a_in, b_in):
        """One lane's stages; returns its output register. Data registers have no reset."""
        sync = []   # every data register loads under ``advance``
        reg, carry = _stage_registers(lane, "m", sync)
        # Stage 0: the operands.
        a, b = reg(0, "a", 32), reg(0, "b", 32)
        sync += [a.eq(a_in), b.eq(b_in)]

        # Stage 1: classes, significands, the exponent field e_a + e_b - 126 (signed).
        ea, eb, fa, fb = a[23:31], b[23:31], a[:23], b[:23]
        a_nan, b_nan = (ea == 255) & (fa != 0), (eb == 255) & (fb != 0)
        a_inf, b_inf = (ea == 255) & (fa == 0), (eb == 255) & (fb == 0)
        a_zero, b_zero = a[:31] == 0, b[:31] == 0
        s1 = {"sign": reg(1, "sign", 1), "nan": reg(1, "nan", 1), "inf": reg(1, "inf", 1),
              "zero": reg(1, "zero", 1), "e": reg(1, "e", signed(11)),
              "ma": reg(1, "ma", 24), "mb": reg(1, "mb", 24)}
        sync += [s1["sign"].eq(a[31] ^ b[31]),
                 s1["nan"].eq(a_nan | b_nan | (a_inf & b_zero) | (b_inf & a_zero)),
                 s1["inf"].eq(a_inf | b_inf), s1["zero"].eq(a_zero | b_zero),
                 s1["e"].eq(Mux(ea == 0, 1, ea) + Mux(eb == 0, 1, eb) - 126),
                 s1["ma"].eq(Cat(fa, ea != 0)), s1["mb"].eq(Cat(fb, eb != 0))]
        side = ("sign", "nan", "inf", "zero", "e")

        # Stage 2: two partial products, 24 x 12 each.
        s2 = carry(2, s1, side)
        s2["lo"], s2["hi"] = reg(2, "lo", 36), reg(2, "hi", 36)
        sync += [s2["lo"].eq(s1["ma"] * s1["mb"][:12]), s2["hi"].eq(s1["ma"] * s1["mb"][12:])]

        # Stage 3: the product, 48 bits; k = e - 1.
        s3 = carry(3, s2, side)
        s3["p"], s3["k"] = reg(3, "p", 48), reg(3, "k", signed(11))
        sync += [s3["p"].eq(s2["lo"] + (s2["hi"] << 12)), s3["k"].eq(s2["e"] - 1)]

        # Stage 4: leading zeros per group of 8 bits.
        lzc, lza = _zero_groups(s3["p"], 48, leading=True)
        s4 = carry(4, s3, side + ("p", "k"))
        s4["lzc"], s4["lza"] = reg(4, "lzc", len(lzc)), reg(4, "lza", len(lza))
        sync += [s4["lzc"].eq(lzc), s4["lza"].eq(lza)]

        # Stage 5: the leading zeros.
        lz = Signal(range(49), name=f"l{lane}_mlz")
        m.d.comb += lz.eq(_zero_combine(s4["lzc"], s4["lza"], 48))
        s5 = carry(5, s4, side + ("p", "k"))
        s5["lz"] = reg(5, "lz", range(49))
        sync.append(s5["lz"].eq(lz))

        # Stage 6: the shift (left by lz or by k, or right by -k, at most 49) and the
        # exponent field before rounding (0 if subnormal; 255 or more overflows).
        k, lzv = s5["k"], s5["lz"]
        normal = lzv <= k
        s6 = carry(6, s5, ("sign", "nan", "inf", "zero", "p"))
        s6["right"], s6["sh"] = reg(6, "right", 1), reg(6, "sh", range(50))
        s6["ovf"], s6["field"] = reg(6, "ovf", 1), reg(6, "field", 8)
        field = Signal(signed(12), name=f"l{lane}_mfield")
        m.d.comb += field.eq(s5["e"] - lzv)
        sync += [s6["right"].eq(k < 0),
                 s6["sh"].eq(Mux(k < 0, Mux(k < -49, 49, -k), Mux(normal, lzv, k))),
                 s6["ovf"].eq(normal & (field >= 255)),
                 s6["field"].eq(Mux(normal, field, 0))]

        # Stage 7: the shift, and the sticky bit of a right shift (the bits of P below the
        # amount, from P and a thermometer code of it).
        p, sh = s6["p"], s6["sh"]
        n = Signal(48, name=f"l{lane}_mn")
        m.d.comb += n.eq(Mux(s6["right"], p >> sh, (p << sh)[:48]))
        lost = Cat(*(p[j] & (sh > j) for j in range(48))).any() & s6["right"]
        s7 = carry(7, s6, ("sign", "nan", "inf", "zero", "ovf", "field"))
        s7["n"], s7["lost"] = reg(7, "n", 48), reg(7, "lost", 1)
        sync += [s7["n"].eq(n), s7["lost"].eq(lost)]

        # Stage 8: the rounding bit (nearest, ties to even); the special values' words.
        n = s7["n"]
        special = s7["nan"] | s7["inf"] | s7["zero"] | s7["ovf"]
        inf_word = Cat(Const(0x7F800000, 31), s7["sign"])
        zero_word = Cat(Const(0, 31), s7["sign"])
        word = Mux(s7["nan"], CANONICAL_NAN, Mux(s7["zero"], zero_word, inf_word))
        s8 = {"pre": reg(8, "pre", 32), "up": reg(8, "up", 1)}
        sync += [s8["pre"].eq(Mux(special, word, Cat(n[24:47], s7["field"], s7["sign"]))),
                 s8["up"].eq(n[23] & (n[:23].any() | s7["lost"] | n[24]) & ~special)]

        # Stage 9: one increment of the packed field and fraction.
        s9 = reg(9, "word", 32)
        sync.append(s9.eq(Cat((s8["pre"][:31] + s8["up"])[:31], s8["pre"][31])))
        with m.If(advance):
            m.d.sync += sync
        return s9
