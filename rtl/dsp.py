"""The DSP-slice subset used to pack two int8 MACs into one Xilinx DSP slice.

:class:`PackedMac` computes, one step per cycle,

    P <- (clear ? 0 : P) + (hi * 2**S + lo) * b          (48-bit, wrapping)

for int8 ``hi``, ``lo`` and ``b``: two products sharing the operand ``b``, the low one in
``P[S-1:0]`` and the high one above it, as in Xilinx WP486. The pre-adder forms
``hi * 2**S + lo``, the multiplier the packed product, and the post-adder accumulates with the
clear done by the Z multiplexer (OPMODE), so nothing but the slice is used. Separating the two
sums again, for any number of steps, is :class:`rtl.systolic.PackedPair`'s job. Two slices:

* ``"DSP48E2"`` (UltraScale+, UG579): 27-bit pre-adder, 27x18 multiplier, ``S = 18``.
* ``"DSP48E1"`` (7-series, UG479): 25-bit pre-adder, 25x18 multiplier, ``S = 16``:
  ``hi * 2**16 + lo`` lies in ``[-2**23 - 128, 2**23 - 2**16 + 127]``, inside 25 bits for
  every int8 pair (``S = 17`` would not be: ``-128 * 2**17 - 128`` needs 26). The low field,
  16 bits, holds one product (``|lo * b| <= 2**14``): a quarter of its range, which
  :class:`rtl.systolic.PackedPair`'s wrap detection needs.

With ``primitive=True`` the component instantiates the slice (for synthesis); otherwise it is
a cycle-accurate model of the same configuration, which is what the simulators run. The model
follows the user guide for the configuration below; the ``DSP48E2`` instance can only be
simulated with Xilinx's UNISIM library, which is not available here; the ``DSP48E1`` instance
is checked against the model with Yosys' own simulation model of the cell
(``tests/test_dsp.py``).

Configuration: ``AREG=1, DREG=1, ADREG=1, BREG=2, BCASCREG=1, MREG=1, PREG=1,
OPMODEREG=1``, the pre-adder on (``AMULTSEL="AD"`` on the DSP48E2, ``USE_DPORT="TRUE"`` on
the DSP48E1), ``INMODE=0b00100`` (``AD = D + A2``), ``ALUMODE=0``, OPMODE ``Z=P, Y=M, X=M``
(accumulate) or ``Z=0, Y=M, X=M`` (load); ``B_INPUT="DIRECT"`` (``B1`` takes ``B``) or, with
``cascade``, ``"CASCADE"`` (``B1`` takes ``BCIN``, the slice below's ``BCOUT``). ``BCOUT`` is
``B1`` (``BCASCREG=1``), so a column of slices passes ``b`` down one register a slice on the
dedicated cascade wires, with no fabric register or route.

Latency: ``P`` reflects a step 4 cycles after its operands are presented; ``clear`` is
presented 2 cycles after them (it goes to the registered OPMODE).
"""

from amaranth import ClockSignal, Const, Instance, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["PackedMac", "SLICES", "SHIFT", "slice_shift", "OPMODE_ACCUMULATE", "OPMODE_LOAD"]

#: Each slice's widths: the high product's position in ``P`` (``shift``), the pre-adder's
#: (``ad``) and the ``A``, ``D`` and ``OPMODE`` ports'.
SLICES = {
    "DSP48E2": {"shift": 18, "ad": 27, "a": 30, "d": 27, "opmode": 9},
    "DSP48E1": {"shift": 16, "ad": 25, "a": 30, "d": 25, "opmode": 7},
}


def slice_shift(dsp_slice) -> int:
    """The high product's position in ``P`` on ``dsp_slice``; ``ValueError`` naming
    ``dsp_slice`` if it is not a key of :data:`SLICES`."""
    if dsp_slice not in SLICES:
        raise ValueError(f"dsp_slice must be one of {sorted(SLICES)}, not {dsp_slice!r}")
    return SLICES[dsp_slice]["shift"]


#: Position of the high product in ``P`` on the DSP48E2.
SHIFT = SLICES["DSP48E2"]["shift"]
#: (W=0,) Z=P, Y=M, X=M: P + M (the DSP48E1 has no W: the low 7 bits).
OPMODE_ACCUMULATE = 0b00_010_01_01
#: (W=0,) Z=0, Y=M, X=M: M.
OPMODE_LOAD = 0b00_000_01_01


class PackedMac(wiring.Component):
    """Two int8 multiply-accumulates sharing one operand, in one DSP slice (see module doc).

    Parameters
    ----------
    primitive : bool
        Instantiate the Xilinx primitive instead of the behavioural model.
    dsp_slice : {"DSP48E2", "DSP48E1"}
        The slice, and so :attr:`shift` (18 or 16).
    cascade : bool
        ``b`` comes from :attr:`bcin` (the previous slice's :attr:`bcout`) instead of
        :attr:`b`.

    Attributes
    ----------
    hi, lo, b : In(signed(8))
        Operands of one step (``b`` unused with ``cascade``).
    bcin : In(signed(18))
        With ``cascade``: ``b``, in the same cycle as :attr:`hi` and :attr:`lo`.
    bcout : Out(signed(18))
        ``b`` as registered in ``B1``: :attr:`b` (or :attr:`bcin`) one cycle later.
    clear : In(1)
        Load instead of accumulate; presented :data:`CLEAR_DELAY` cycles after the step's
        operands.
    p : Out(signed(48))
        The accumulator, :data:`LATENCY` cycles after the step's operands.

    Latency
    -------
    ``p`` reflects a step :data:`LATENCY` cycles after its operands are presented.

    Throughput
    ----------
    One step a cycle.
    """

    hi: In(signed(8))
    lo: In(signed(8))
    b: In(signed(8))
    bcin: In(signed(18))
    clear: In(1)
    p: Out(signed(48))
    bcout: Out(signed(18))

    LATENCY = 4
    CLEAR_DELAY = 2

    def __init__(self, *, primitive: bool = False, cascade: bool = False,
                 dsp_slice: str = "DSP48E2"):
        #: Position of the high product in ``P``.
        self.shift = slice_shift(dsp_slice)
        self.primitive = bool(primitive)
        self.cascade = bool(cascade)
        self.dsp_slice = dsp_slice
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        w = SLICES[self.dsp_slice]
        a_port = Signal(signed(w["a"]))
        d_port = Signal(signed(w["d"]))
        b_port = Signal(signed(18))
        opmode = Signal(w["opmode"])
        m.d.comb += [
            a_port.eq(self.hi << self.shift),
            d_port.eq(self.lo),
            b_port.eq(self.b),
            opmode.eq(Mux(self.clear, OPMODE_LOAD, OPMODE_ACCUMULATE)),
        ]
        if self.primitive:
            # the pre-adder on: AD = D + A2 into the multiplier
            pre_adder = ({"p_USE_DPORT": "TRUE"} if self.dsp_slice == "DSP48E1" else
                         {"p_AMULTSEL": "AD", "p_BMULTSEL": "B", "p_PREADDINSEL": "A"})
            m.submodules.dsp = Instance(
                self.dsp_slice, **pre_adder,
                p_USE_MULT="MULTIPLY", p_USE_SIMD="ONE48", p_USE_PATTERN_DETECT="NO_PATDET",
                p_A_INPUT="DIRECT", p_B_INPUT="CASCADE" if self.cascade else "DIRECT",
                p_AREG=1, p_ACASCREG=1, p_BREG=2, p_BCASCREG=1, p_DREG=1, p_ADREG=1,
                p_MREG=1, p_PREG=1, p_CREG=0, p_OPMODEREG=1, p_ALUMODEREG=0,
                p_INMODEREG=0, p_CARRYINREG=0, p_CARRYINSELREG=0,
                i_CLK=ClockSignal("sync"), i_A=a_port, i_B=b_port, i_D=d_port,
                i_C=Const(0, 48), i_INMODE=Const(0b00100, 5), i_OPMODE=opmode,
                i_ALUMODE=Const(0, 4), i_CARRYIN=0, i_CARRYINSEL=Const(0, 3),
                i_CEA1=0, i_CEA2=1, i_CEB1=1, i_CEB2=1, i_CED=1, i_CEAD=1, i_CEM=1, i_CEP=1,
                i_CEC=0, i_CECTRL=1, i_CEINMODE=0, i_CEALUMODE=0, i_CECARRYIN=0,
                i_RSTA=0, i_RSTB=0, i_RSTC=0, i_RSTD=0, i_RSTM=0, i_RSTP=0, i_RSTCTRL=0,
                i_RSTINMODE=0, i_RSTALUMODE=0, i_RSTALLCARRYIN=0,
                i_ACIN=Const(0, 30), i_BCIN=self.bcin, i_PCIN=Const(0, 48),
                i_CARRYCASCIN=0, i_MULTSIGNIN=0,
                o_P=self.p, o_BCOUT=self.bcout,
            )
            return m

        # Behavioural model of the configuration above. Data registers have no reset, like
        # the slice's (RST* tied low).
        a2 = Signal(signed(w["a"]), reset_less=True)
        d = Signal(signed(w["d"]), reset_less=True)
        b1 = Signal(signed(18), reset_less=True)
        b2 = Signal(signed(18), reset_less=True)
        ad = Signal(signed(w["ad"]), reset_less=True)
        mreg = Signal(signed(w["ad"] + 18), reset_less=True)
        opmode_r = Signal(w["opmode"], reset_less=True)
        preg = Signal(signed(48), reset_less=True)
        z = Mux(opmode_r[4:7] == 0b010, preg, 0)
        m.d.sync += [
            a2.eq(a_port), d.eq(d_port), b1.eq(self.bcin if self.cascade else b_port),
            b2.eq(b1), ad.eq(a2[:w["ad"]].as_signed() + d),
            mreg.eq(ad * b2),
            opmode_r.eq(opmode),
            preg.eq(z + mreg),
        ]
        m.d.comb += [self.p.eq(preg), self.bcout.eq(b1)]
        return m


