"""Counter-based random bits in hardware: a pipelined Threefry-2x32-20 and the
stochastic-rounding bits of a row of lanes, bit-exact with :mod:`sim.models.prng`."""

from amaranth import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Threefry2x32", "RandomLanes", "threefry_input_layout", "threefry_output_layout",
           "random_input_layout", "random_output_layout"]

#: Rotation constants of Threefry-2x32, one per round modulo 8 (as
#: :data:`sim.models.prng.ROTATIONS`).
ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
KS_PARITY = 0x1BD11BDA
ROUNDS = 20
#: The pipeline's stages in order: ``("inject", s)`` adds the key schedule's words (``s = 0``
#: the key itself), ``("round", r)`` is one mix round. One 32-bit add (and, in a round, a
#: rotation and an xor after it) per stage.
STAGES = tuple([("inject", 0)] + [
    op for r in range(ROUNDS)
    for op in ([("round", r)] + ([("inject", r // 4 + 1)] if r % 4 == 3 else []))])


def threefry_input_layout() -> data.StructLayout:
    """Payload of :attr:`Threefry2x32.i_stream`: the key and the counter, two words each."""
    return data.StructLayout({"key": data.ArrayLayout(32, 2), "ctr": data.ArrayLayout(32, 2)})


def threefry_output_layout() -> data.StructLayout:
    """Payload of :attr:`Threefry2x32.o_stream`: the two output words."""
    return data.StructLayout({"x": data.ArrayLayout(32, 2)})


def random_input_layout() -> data.StructLayout:
    """Payload of :attr:`RandomLanes.i_stream`: the 64-bit seed, the row ``m`` and the first
    column ``n0`` (a multiple of 4: its two low bits are ignored)."""
    return data.StructLayout({"seed": 64, "m": 32, "n0": 34})


def random_output_layout(lanes: int) -> data.StructLayout:
    """Payload of :attr:`RandomLanes.o_stream`: 16 random bits per lane."""
    return data.StructLayout({"r": data.ArrayLayout(unsigned(16), lanes)})


def _key_pipeline(m: Module, advance, k0, k1, name: str) -> list:
    """The key schedule, registered once per stage of :data:`STAGES`: element ``t`` is the
    tuple ``(ks0, ks1, ks2, inc)`` of registers that stage ``t + 1`` reads, where ``inc`` is
    ``ks[(s + 1) % 3] + s`` for the next injection ``s`` (so that the injection's add on the
    second word is a single add). Data only: no reset."""
    def regs(t):
        return tuple(Signal(32, name=f"{name}_t{t}_{n}", reset_less=True)
                     for n in ("ks0", "ks1", "ks2", "inc"))

    stages = []
    prev = (k0, k1, k0 ^ k1 ^ KS_PARITY)
    for t in range(len(STAGES)):
        cur = regs(t)
        # the injection the registers of stage t serve: the first after stage t
        nxt = next((s for kind, s in STAGES[t + 1:] if kind == "inject"), None)
        with m.If(advance):
            m.d.sync += [cur[i].eq(prev[i]) for i in range(3)]
            if nxt is not None:
                m.d.sync += cur[3].eq(prev[(nxt + 1) % 3] + nxt)
        stages.append(cur)
        prev = cur[:3]
    return stages


def _data_pipeline(m: Module, advance, keys: list, k0, k1, c0, c1, name: str):
    """The two data words through :data:`STAGES`, reading the key schedule ``keys`` of
    :func:`_key_pipeline` (``k0``, ``k1`` at stage 0). Returns the last stage's registers."""
    x0 = x1 = None
    for t, (kind, s) in enumerate(STAGES):
        n0 = Signal(32, name=f"{name}_t{t}_x0", reset_less=True)
        n1 = Signal(32, name=f"{name}_t{t}_x1", reset_less=True)
        if t == 0:
            v0, v1 = c0 + k0, c1 + k1
        elif kind == "inject":
            ks = keys[t - 1]
            v0, v1 = x0 + ks[s % 3], x1 + ks[3]
        else:
            sum0 = Signal(32, name=f"{name}_t{t}_sum")
            m.d.comb += sum0.eq(x0 + x1)
            v0, v1 = sum0, x1.rotate_left(ROTATIONS[s % 8]) ^ sum0
        with m.If(advance):
            m.d.sync += [n0.eq(v0), n1.eq(v1)]
        x0, x1 = n0, n1
    return x0, x1


def _valid_pipeline(m: Module, advance, valid_in, depth: int) -> Signal:
    valid = [Signal(name=f"valid{t}") for t in range(depth)]
    with m.If(advance):
        m.d.sync += valid[0].eq(valid_in)
        m.d.sync += [valid[t].eq(valid[t - 1]) for t in range(1, depth)]
    return valid[-1]


class Threefry2x32(wiring.Component):
    """Pipelined Threefry-2x32-20: one (key, counter) in and one (x0, x1) out per cycle.

    Bit-exact with :func:`sim.models.prng.threefry2x32`. Every round and every key injection
    has its own register stage, so no path is longer than one 32-bit add followed by an xor.
    The key schedule is registered along with the data (it may change every beat); its
    registers shift unchanged through most stages, with a common enable and no reset, so
    Vivado can pack them into shift-register LUTs.

    Attributes
    ----------
    i_stream : In(stream.Signature(threefry_input_layout()))
    o_stream : Out(stream.Signature(threefry_output_layout()))

    Latency
    -------
    :attr:`LATENCY` (26) cycles from an accepted input to a valid output: the key added to
    the counter, the 20 rounds and the 5 key injections after every fourth round.

    Throughput
    ----------
    One beat per cycle. The pipeline stalls as a whole while ``o_stream.ready`` is low.
    """

    LATENCY = len(STAGES)

    def __init__(self):
        super().__init__({
            "i_stream": In(stream.Signature(threefry_input_layout())),
            "o_stream": Out(stream.Signature(threefry_output_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        advance = Signal()
        m.d.comb += [advance.eq(~self.o_stream.valid | self.o_stream.ready),
                     self.i_stream.ready.eq(advance)]
        p = self.i_stream.payload
        keys = _key_pipeline(m, advance, p.key[0], p.key[1], "key")
        x0, x1 = _data_pipeline(m, advance, keys, p.key[0], p.key[1], p.ctr[0], p.ctr[1],
                                "tf")
        m.d.comb += [
            self.o_stream.valid.eq(_valid_pipeline(m, advance, self.i_stream.valid,
                                                   self.LATENCY)),
            self.o_stream.payload.x[0].eq(x0),
            self.o_stream.payload.x[1].eq(x1),
        ]
        return m


class RandomLanes(wiring.Component):
    """The 16 random bits of columns ``n0 .. n0 + lanes - 1`` of row ``m``, one row of lanes
    per cycle.

    Lane ``i`` gets :func:`sim.models.prng.random_bits` ``(seed, m, n0 + i)``. One Threefry
    pipeline per 4 lanes (counter ``(m, n0 // 4 + j)``, its 64-bit output split into four
    16-bit lanes); the key schedule's registers are shared by all of them.

    Parameters
    ----------
    lanes : int
        Number of lanes, a positive multiple of 4.
    out_fifo : int
        0, or the entries of an output FIFO (more than :attr:`LATENCY` for full rate): see
        Throughput.

    Attributes
    ----------
    i_stream : In(stream.Signature(random_input_layout()))
        ``n0`` must be a multiple of 4 (its two low bits are ignored).
    o_stream : Out(stream.Signature(random_output_layout(lanes)))

    Latency
    -------
    :attr:`LATENCY` cycles from an accepted input to a valid output: the counters registered
    (``n0 // 4 + j``), then the Threefry pipeline (:attr:`Threefry2x32.LATENCY`).

    Throughput
    ----------
    One beat (``lanes`` values) per cycle. Without ``out_fifo`` the pipeline stalls as a
    whole while ``o_stream.ready`` is low (one enable reaches every register); with it the
    pipeline never stalls, its beats land in the FIFO, and a request is taken only while
    the FIFO has room for every beat in flight (credits), which costs two cycles of latency
    more (the FIFO's) and no enable fans out.
    """

    LATENCY = Threefry2x32.LATENCY + 1

    def __init__(self, lanes: int, *, out_fifo: int = 0):
        if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 4 or lanes % 4:
            raise ValueError(f"lanes must be a positive multiple of 4, not {lanes!r}")
        if not isinstance(out_fifo, int) or isinstance(out_fifo, bool) or out_fifo < 0 \
                or 0 < out_fifo < 4:
            raise ValueError(f"out_fifo must be 0 or at least 4, not {out_fifo!r}")
        self.lanes, self.out_fifo = lanes, out_fifo
        super().__init__({
            "i_stream": In(stream.Signature(random_input_layout())),
            "o_stream": Out(stream.Signature(random_output_layout(lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        advance = Signal()
        out = self.o_stream
        if self.out_fifo:
            # free-running: every request taken has a place in the FIFO when it comes out
            from .fifo import Fifo
            m.submodules.out = fifo = Fifo(width=16 * self.lanes, depth=self.out_fifo)
            out = stream.Signature(random_output_layout(self.lanes)).flip().create()
            m.d.comb += [fifo.w_data.eq(out.payload), fifo.w_en.eq(out.valid),
                         self.o_stream.payload.eq(fifo.r_data),
                         self.o_stream.valid.eq(fifo.r_rdy), fifo.r_en.eq(self.o_stream.ready)]
            # beats owed: requests taken and not yet read out of the FIFO
            owed = Signal(range(self.out_fifo + 1))
            take = self.i_stream.valid & self.i_stream.ready
            m.d.sync += owed.eq(owed + take - (fifo.r_en & fifo.r_rdy))
            room = Signal()
            m.d.sync += room.eq(owed + take < self.out_fifo)
            m.d.comb += [advance.eq(1), self.i_stream.ready.eq(room)]
        else:
            m.d.comb += [advance.eq(~out.valid | out.ready), self.i_stream.ready.eq(advance)]
        p = self.i_stream.payload
        blocks = self.lanes // 4
        # stage "c": the key, the row and each pipeline's column block, registered
        k0 = Signal(32, name="c_k0", reset_less=True)
        k1 = Signal(32, name="c_k1", reset_less=True)
        row = Signal(32, name="c_m", reset_less=True)
        cols = [Signal(32, name=f"c_n{j}", reset_less=True) for j in range(blocks)]
        with m.If(advance):
            m.d.sync += [k0.eq(p.seed[:32]), k1.eq(p.seed[32:]), row.eq(p.m)]
            m.d.sync += [cols[j].eq(p.n0[2:] + j) for j in range(blocks)]
        keys = _key_pipeline(m, advance, k0, k1, "key")
        for j in range(blocks):
            x0, x1 = _data_pipeline(m, advance, keys, k0, k1, row, cols[j], f"b{j}")
            for i, word in enumerate((x0[:16], x0[16:], x1[:16], x1[16:])):
                m.d.comb += out.payload.r[4 * j + i].eq(word)
        m.d.comb += out.valid.eq(
            _valid_pipeline(m, advance, self.i_stream.valid & self.i_stream.ready,
                            self.LATENCY))
        return m
