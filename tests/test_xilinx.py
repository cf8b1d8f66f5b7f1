"""rtl.xilinx helpers that build copies of one net: what they instantiate, and bad input.

The primitive netlists themselves are simulated with Yosys' models of the Xilinx cells in
``tests/test_cocotb.py`` (``primitive=True``: the datapath with its LUT and FDRE copies)."""

import pytest
from amaranth import Module, Signal
from amaranth.hdl import Instance

from rtl.xilinx import lut_copies, register_copies


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
