"""A register slice for ``lib.stream`` interfaces: cuts the valid, payload and ready paths."""

from amaranth import Module, Mux, Shape, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ._util import bit_slices

__all__ = ["RegisterSlice"]


class RegisterSlice(wiring.Component):
    """A two-entry skid buffer: every output of it comes straight from a register.

    The stream passes unchanged (the numpy model is the identity: same payloads, same order,
    none lost, none duplicated). What changes is timing: :attr:`o_stream` ``valid`` and
    ``payload`` are registers, and :attr:`i_stream` ``ready`` is a register too, so no
    combinational path runs through the slice in either direction. A chain of components
    joined through slices has paths no longer than each component's own.

    The second entry (the skid) takes the word that arrives in the cycle the output stalls,
    since ``ready`` upstream can only fall a cycle later. Payload registers have no reset (they
    are only read under ``valid``), so synthesis is free to place them.

    Parameters
    ----------
    shape : shape-like
        The payload (a ``lib.data`` layout or a width).
    slice_bits : int or None
        Build a wide slice as side-by-side slices of at most this many payload bits, each
        with its own flags (the same on every cycle), so that no flag selects the payload of
        every bit; ``ready`` and ``valid`` are the first slice's. ``None``: one slice.

    Attributes
    ----------
    i_stream : In(stream.Signature(shape))
    o_stream : Out(stream.Signature(shape))

    Latency
    -------
    A word is on :attr:`o_stream` :data:`LATENCY` cycle after it is taken.

    Throughput
    ----------
    One word a cycle, with any pattern of ``ready``.
    """

    #: Cycles from a word taken on :attr:`i_stream` to it on :attr:`o_stream`.
    LATENCY = 1

    def __init__(self, shape, *, slice_bits: int | None = None):
        self.slices = bit_slices(Shape.cast(shape).width, slice_bits)   # validates slice_bits
        self.shape, self.slice_bits = shape, slice_bits
        super().__init__({"i_stream": In(stream.Signature(shape)),
                          "o_stream": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i_stream, self.o_stream
        if len(self.slices) > 1:
            parts = []
            for lo, hi in self.slices:
                part = m.submodules[f"slice{len(parts)}"] = RegisterSlice(hi - lo)
                m.d.comb += [part.i_stream.payload.eq(Value.cast(i.payload)[lo:hi]),
                             part.i_stream.valid.eq(i.valid), part.o_stream.ready.eq(o.ready),
                             Value.cast(o.payload)[lo:hi].eq(part.o_stream.payload)]
                parts.append(part)
            m.d.comb += [i.ready.eq(parts[0].i_stream.ready), o.valid.eq(parts[0].o_stream.valid)]
            return m
        valid = Signal()                                        # o_stream's word is held
        payload = Signal(self.shape, reset_less=True)
        skid_valid = Signal()                                   # a second word is held
        skid = Signal(self.shape, reset_less=True)
        take = Signal()
        m.d.comb += [o.valid.eq(valid), o.payload.eq(payload), i.ready.eq(~skid_valid),
                     take.eq(i.valid & ~skid_valid)]
        # The skid register loads the input whenever it is empty (its word is only read once
        # `skid_valid` is set), so its enable is a register, not the output's ready.
        with m.If(~skid_valid):
            m.d.sync += skid.eq(i.payload)
        with m.If(~valid | o.ready):
            # the output register is free this cycle: the skid word first, else the new one
            m.d.sync += [valid.eq(skid_valid | take),
                         payload.eq(Mux(skid_valid, skid, i.payload)),
                         skid_valid.eq(0)]
        with m.Elif(take):
            m.d.sync += skid_valid.eq(1)
        return m
