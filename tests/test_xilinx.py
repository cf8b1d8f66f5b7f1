"""rtl.xilinx helpers that build copies of one net: what they instantiate, and bad input.

The primitive netlists themselves are simulated with Yosys' models of the Xilinx cells in
``tests/test_cocotb.py`` (``primitive=True``: the datapath with its LUT and FDRE copies); the
primitive byte shifter is proven equal to the plain one here, with the same models."""

import pytest
from amaranth import Module, Signal
from amaranth.back import verilog
from amaranth.hdl import Instance
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from platforms.estimate import _run_yosys
from rtl.xilinx import LUT6_MUX4_INIT, byte_shift, lut_copies, register_copies


def _instances(m):
    subs = {name: m.submodules[name] for name in m._named_submodules}
    return {name: sub for name, sub in subs.items() if isinstance(sub, Instance)}


def test_lut_copies_one_lut_per_group_with_the_function_as_init():
    """``take & ~bad`` over 40 lanes, 16 a copy: three LUT2 instances whose INIT is the
    truth table (I0 the low index bit), lane ``i`` reading copy ``i // 16``; without
    ``primitive`` one signal for every lane and no instance."""
    m = Module()
    take, bad = Signal(), Signal()
    lanes = lut_copies(m, lambda t, b: t & ~b, [take, bad], 40, 16, primitive=True,
                       name="acc")
    insts = _instances(m)
    assert sorted(insts) == ["acc0_lut", "acc1_lut", "acc2_lut"]
    for inst in insts.values():
        assert inst.type == "LUT2"
        assert inst.parameters["INIT"].value == 0b0010      # only take=1, bad=0
    assert len(lanes) == 40 and len(set(map(id, lanes))) == 3
    assert lanes[15] is lanes[0] and lanes[16] is not lanes[15] and lanes[39] is lanes[32]
    m2 = Module()
    plain = lut_copies(m2, lambda t, b: t & ~b, [take, bad], 40, 16, primitive=False,
                       name="acc")
    assert not _instances(m2) and len(set(map(id, plain))) == 1


def test_lut_copies_rejects_what_one_lut_cannot_compute():
    m = Module()
    with pytest.raises(ValueError, match="inputs"):
        lut_copies(m, lambda *x: x[0], [Signal() for _ in range(7)], 4, 2, primitive=True,
                   name="x")
    with pytest.raises(ValueError, match="inputs"):
        lut_copies(m, lambda x: x, [Signal(2)], 4, 2, primitive=True, name="x")


def test_register_copies_are_fdre_instances_apart():
    """With ``primitive`` each copy's bits are FDRE instances of their own (so synthesis
    does not merge them back into one register), with the enable on CE."""
    m = Module()
    value, en = Signal(3), Signal()
    copies = register_copies(m, value, 2, primitive=True, name="c", enable=en)
    insts = _instances(m)
    assert len(copies) == 2 and len(insts) == 6
    assert all(i.type == "FDRE" for i in insts.values())


class _Shift(wiring.Component):
    def __init__(self, window_bytes, offset_bits, n_bytes, primitive):
        self.n_bytes, self.primitive = n_bytes, primitive
        super().__init__({"window": In(8 * window_bytes), "offset": In(offset_bits),
                          "out": Out(8 * n_bytes)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.out.eq(byte_shift(m, self.window, self.offset, self.n_bytes,
                                           primitive=self.primitive, name="sh"))
        return m


@pytest.mark.parametrize("window_bytes,offset_bits,n_bytes", [(67, 6, 4), (31, 4, 16),
                                                              (17, 3, 10), (39, 5, 8)])
def test_byte_shift_primitives_equal_the_plain_shifter(tmp_path, window_bytes, offset_bits,
                                                       n_bytes):
    """The LUT6 / MUXF7 / MUXF8 byte shifter is the plain one: proven equal for every window
    and offset by Yosys' SAT solver, with Yosys' models of the primitives, at every offset
    width the gearboxes use (3 to 6 bits: 64- to 512-bit buses; the 512-bit realigner's
    parts are 79 bytes to 16, here 4 bytes out of 67 to keep the proof short)."""
    from sim.testbenches.runner import xilinx_cell_models

    for primitive in (False, True):
        (tmp_path / f"{'prim' if primitive else 'plain'}.v").write_text(verilog.convert(
            _Shift(window_bytes, offset_bits, n_bytes, primitive),
            name="prim" if primitive else "plain", emit_src=False))
    prim = (tmp_path / "prim.v").read_text()
    assert prim.count("LUT6 ") >= 8 * (n_bytes + (1 << offset_bits) - 4)
    (tmp_path / "cells_sim.v").write_text(xilinx_cell_models().read_text())
    (tmp_path / "top.v").write_text(
        f"module top(input [{8 * window_bytes - 1}:0] window, input [{offset_bits - 1}:0] "
        f"offset, output ok);\n  wire [{8 * n_bytes - 1}:0] o1, o2;\n"
        "  plain p(.window(window), .offset(offset), .out(o1));\n"
        "  prim q(.window(window), .offset(offset), .out(o2));\n"
        "  assign ok = o1 == o2;\nendmodule\n")

    def proven(gate: str) -> bool:
        (tmp_path / "gate.v").write_text(gate)
        (tmp_path / "sat.log").unlink(missing_ok=True)
        _run_yosys("read_verilog cells_sim.v; read_verilog gate.v plain.v top.v; "
                   "hierarchy -top top; flatten; opt_clean; sat -prove ok 1 top",
                   tmp_path / "sat.log")
        log = (tmp_path / "sat.log").read_text()
        assert "SAT proof finished" in log, log[-3000:]
        return "no model found: SUCCESS!" in log

    assert proven(prim)
    # the proof can fail: one LUT of the first stage made to pick its first input always
    assert not proven(prim.replace(f"64'h{LUT6_MUX4_INIT:016x}", "64'haaaaaaaaaaaaaaaa", 1))


def test_byte_shift_needs_a_window_long_enough():
    with pytest.raises(ValueError, match="window must hold 79 bytes"):
        byte_shift(Module(), Signal(78 * 8), Signal(6), 16, primitive=True, name="x")
