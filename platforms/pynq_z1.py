"""Pynq-Z1: Zynq-7020 (xc7z020clg400-1, the Arty Z7-20's chip and package).

The accelerator sits on the Zynq PS7: AXI4-Lite control from M_AXI_GP0, its DMA on all four
64-bit high-performance ports, S_AXI_HP0-HP3 (A read on HP0, B's rows striped over HP1 and
HP2 — a GEMM with a small N runs as its transpose, its long operand read as B is; C's rows
written through all four, row r on HP(r mod 4)), clock FCLK_CLK0, interrupt on IRQ_F2P. The host is
the ARM running PYNQ; the ``pynq`` backend drives it with ``pynq.Overlay`` + the ``.hwh``.

The default array is 16x16 (256 MACs/cycle) with two MACs per DSP48E1 (``packing=2``: each
slice computes ``P += (a_hi * 2**16 + a_lo) * b`` for two rows sharing ``b``, the fabric
keeping the bits the slice lacks; ``rtl.dsp``, ``rtl.systolic.PackedPair``): 128 slices for
the array, the rest of the 220 for the engine's own multipliers (the load sequencers' and
write-backs' address products). With one MAC per slice (``--packing 1 --dsp-rows N``) the
array does not fit the DSP slices: N rows of PEs use them and the others multiply in LUTs.
"""

from amaranth_boards.arty_z7 import ArtyZ720Platform

from firmware.spec.boards import BOARDS

from .base import Board

_H = BOARDS["pynq-z1"]

_P = ArtyZ720Platform

BOARD = Board(
    name="pynq-z1", title="Pynq-Z1 (Zynq-7020)",
    part=f"{_P.device}{_P.package}-{_P.speed}",
    board_part=None,
    family="xc7",
    capacity={"LUT": 53200, "FF": 106400, "DSP": 220, "BRAM36": 140, "URAM": 0},
    data_width=_H.data_width, addr_width=_H.addr_width, clock_mhz=_H.clock_mhz,
    host="ARM Cortex-A9 (PYNQ) through the PS7",
    control_port="M_AXI_GP0", memory_port="S_AXI_HP0-HP3 (64-bit each)",
    default=dict(_H.default), base_addr=_H.base_addr,
    program="pynq",
)
