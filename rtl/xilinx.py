"""Wide multiplexers built from Xilinx LUT6 / MUXF7 / MUXF8 primitives.

A LUT6 is a 4:1 multiplexer (four data inputs, two select inputs) and a slice's MUXF7 and
MUXF8 combine two and four of them, so a 16:1 multiplexer costs 4 LUTs per bit. Vivado finds
this mapping by itself; Yosys' ABC mapping of the same RTL spends about twice as many LUTs, so
the read-out multiplexers of the systolic array, the largest LUT consumer, are instantiated
directly when the array is built for Xilinx (``primitive=True``). The simulators run the
plain-RTL version (``primitive=False``); the primitive netlist is checked against it with
Icarus and Yosys' simulation models of LUT6/MUXF7/MUXF8 (``tests/test_xilinx.py``).
"""

from amaranth import Array, Cat, ClockSignal, Const, Instance, Module, Signal, Value

__all__ = ["LUT6_MUX4_INIT", "byte_shift", "lane_copies", "lut_copies", "register_copies",
           "select"]


def _mux4_init() -> int:
    init = 0
    for index in range(64):
        data = [(index >> b) & 1 for b in range(4)]      # I0..I3
        sel = (index >> 4) & 3                            # I4 (LSB), I5
        init |= data[sel] << index
    return init


#: LUT6 contents for ``O = (I0, I1, I2, I3)[I5:I4]``.
LUT6_MUX4_INIT = _mux4_init()


def select(m: Module, inputs, sel, *, primitive: bool, name: str) -> Signal:
    """``inputs[sel]`` as a new signal, from primitives when ``primitive``.

    ``inputs`` are values of one width; ``sel`` an unsigned value wide enough to index them.
    Beyond 16 inputs, the 16:1 primitive groups are combined by an ordinary multiplexer.
    """
    inputs = [Value.cast(v) for v in inputs]
    width = len(inputs[0])
    out = Signal(width, name=name)
    if not primitive or len(inputs) == 1:
        m.d.comb += out.eq(Array(inputs)[sel])
        return out
    sel = Value.cast(sel)
    n = len(inputs)
    size = 4 if n <= 4 else 8 if n <= 8 else 16       # inputs per primitive group
    n_groups = -(-n // size)
    padded = inputs + [Const(0, width)] * (size * n_groups - n)
    sel_bits = [sel[b] if b < len(sel) else Const(0, 1) for b in range(4)]
    group_outs = []
    for g in range(n_groups):
        group = Signal(width, name=f"{name}_g{g}")
        group_outs.append(group)
        for bit in range(width):
            prefix = f"{name}_g{g}_b{bit}"
            level = []
            for q in range(size // 4):
                o = Signal(name=f"{prefix}_lut{q}")
                data = [padded[size * g + 4 * q + i][bit] for i in range(4)]
                m.submodules[f"{prefix}_lut{q}"] = Instance(
                    "LUT6", p_INIT=Const(LUT6_MUX4_INIT, 64),
                    i_I0=data[0], i_I1=data[1], i_I2=data[2], i_I3=data[3],
                    i_I4=sel_bits[0], i_I5=sel_bits[1], o_O=o)
                level.append(o)
            for prim, s_bit in (("MUXF7", sel_bits[2]), ("MUXF8", sel_bits[3])):
                if len(level) == 1:
                    break
                nxt = []
                for h in range(len(level) // 2):
                    o = Signal(name=f"{prefix}_{prim.lower()}_{h}")
                    m.submodules[f"{prefix}_{prim.lower()}_{h}"] = Instance(
                        prim, i_I0=level[2 * h], i_I1=level[2 * h + 1], i_S=s_bit, o_O=o)
                    nxt.append(o)
                level = nxt
            m.d.comb += group[bit].eq(level[0])
    shift = size.bit_length() - 1
    if n_groups == 1:
        m.d.comb += out.eq(group_outs[0])
    else:
        m.d.comb += out.eq(Array(group_outs)[sel[shift:]])
    return out


def byte_shift(m: Module, window, offset, n_bytes: int, *, primitive: bool,
               name: str) -> Value:
    """Bytes ``offset`` .. ``offset + n_bytes - 1`` of ``window`` (a value of whole bytes,
    at least ``n_bytes + 2**len(offset) - 1`` of them): a byte shifter.

    Plain, it is a shift (``bit_select``). With ``primitive`` it is two stages: ``LUT6``
    instances as 4:1 multiplexers over the offset's two low bits, then one :func:`select` a
    byte over the rest (up to four bits: a 16:1 of LUT6, MUXF7 and MUXF8), four levels in
    all for a 6-bit offset, where ABC maps the plain shift of a 64:1 byte shifter eight
    levels deep.
    """
    window, offset = Value.cast(window), Value.cast(offset)
    if len(window) // 8 < n_bytes + (1 << len(offset)) - 1:
        raise ValueError(f"window must hold {n_bytes + (1 << len(offset)) - 1} bytes for "
                         f"{n_bytes} bytes at a {len(offset)}-bit offset, not "
                         f"{len(window) // 8}")
    if not primitive or len(offset) < 2:
        return window.bit_select(Cat(Const(0, 3), offset), 8 * n_bytes)
    b = [window[8 * i:8 * i + 8] for i in range(len(window) // 8)]
    rest = len(offset) - 2
    first = []
    for k in range(n_bytes + (1 << len(offset)) - 4):
        byte = Signal(8, name=f"{name}_s{k}")
        for bit in range(8):
            m.submodules[f"{name}_s{k}_b{bit}"] = Instance(
                "LUT6", p_INIT=Const(LUT6_MUX4_INIT, 64),
                **{f"i_I{i}": b[k + i][bit] for i in range(4)},
                i_I4=offset[0], i_I5=offset[1], o_O=byte[bit])
        first.append(byte)
    if rest == 0:
        return Cat(*first[:n_bytes])
    return Cat(*(select(m, [first[j + 4 * i] for i in range(1 << rest)], offset[2:],
                        primitive=True, name=f"{name}_o{j}") for j in range(n_bytes)))


def register_copies(m: Module, value, n: int, *, primitive: bool, name: str,
                    enable=None) -> list:
    """``n`` registers that each take ``value`` every cycle (no reset), or in the cycles
    ``enable`` is high: copies of one register, each to drive a share of its loads. With
    ``primitive`` they are ``FDRE`` instances, which neither Yosys nor Vivado merges back
    into one; otherwise plain registers (``keep``: Vivado keeps them apart, Yosys may merge
    them)."""
    value = Value.cast(value)
    copies = []
    for c in range(n):
        q = Signal(len(value), name=f"{name}{c}", reset_less=True, attrs={"keep": "true"})
        if primitive:
            for b in range(len(value)):
                m.submodules[f"{name}{c}_ff{b}"] = Instance(
                    "FDRE", p_INIT=0, i_C=ClockSignal(), i_CE=1 if enable is None else enable,
                    i_R=0, i_D=value[b], o_Q=q[b])
        elif enable is None:
            m.d.sync += q.eq(value)
        else:
            with m.If(enable):
                m.d.sync += q.eq(value)
        copies.append(q)
    return copies


def lane_copies(m: Module, value, lanes: int, per: int, *, primitive: bool, name: str,
                enable=None) -> list:
    """One register copy of ``value`` per ``per`` lanes (:func:`register_copies`), listed
    per lane: element ``i`` is the copy lane ``i`` reads, so that no one net drives the
    logic of every lane."""
    copies = register_copies(m, value, -(-lanes // per), primitive=primitive, name=name,
                             enable=enable)
    return [copies[i // per] for i in range(lanes)]


def lut_copies(m: Module, fn, inputs, lanes: int, per: int, *, primitive: bool,
               name: str) -> list:
    """``fn(*inputs)`` (at most six 1-bit inputs; ``fn`` uses ``&``, ``|``, ``^``, ``~``)
    once per ``per`` lanes, listed per lane as :func:`lane_copies` does: combinational
    copies of one enable, each to drive a share of its loads, without the register stage
    of :func:`register_copies`. With ``primitive`` each copy is a ``LUT1``..``LUT6``
    instance, which neither Yosys nor Vivado merges with its twins; otherwise one signal
    serves every lane."""
    inputs = [Value.cast(v) for v in inputs]
    if not 1 <= len(inputs) <= 6 or any(len(v) != 1 for v in inputs):
        raise ValueError(f"inputs must be one to six 1-bit values, not {inputs!r}")
    if not primitive:
        one = Signal(name=name)
        m.d.comb += one.eq(fn(*inputs))
        return [one] * lanes
    k = len(inputs)
    init = 0
    for index in range(1 << k):
        init |= (fn(*[(index >> b) & 1 for b in range(k)]) & 1) << index
    copies = []
    for c in range(-(-lanes // per)):
        o = Signal(name=f"{name}{c}")
        m.submodules[f"{name}{c}_lut"] = Instance(
            f"LUT{k}", p_INIT=Const(init, 1 << k),
            **{f"i_I{b}": v for b, v in enumerate(inputs)}, o_O=o)
        copies.append(o)
    return [copies[i // per] for i in range(lanes)]
