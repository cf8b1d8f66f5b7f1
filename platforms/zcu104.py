"""ZCU104: Zynq UltraScale+ xczu7ev-ffvc1156-2-e on the PS8.

Control on M_AXI_HPM0_FPD, DMA on S_AXI_HP0_FPD .. S_AXI_HP3_FPD and S_AXI_HPC0_FPD,
S_AXI_HPC1_FPD (128-bit; A read through HP0; B's rows 0, 1 and 2 mod 3 read through HP1,
HP2 and HP3; C's rows 0 .. 5 mod 6 of each tile written through HP0 .. HP3, HPC0 and HPC1:
the HPC ports' write channels used without coherence, through the CCI, for C's 4 bytes an
output), clock pl_clk0, interrupt pl_ps_irq0. Two int8 MACs per DSP48E2; the default 32x64
array is 2048 MACs/cycle on 1024 DSP slices (59 % of 1728), with operand buffers 256 deep
per slot (K chunks of 256).
"""

from firmware.spec.boards import BOARDS

from .base import Board

_H = BOARDS["zcu104"]

BOARD = Board(
    name="zcu104", title="ZCU104 (Zynq UltraScale+ ZU7EV)",
    part="xczu7ev-ffvc1156-2-e", board_part="xilinx.com:zcu104:part0:1.1",
    family="xcup",
    capacity={"LUT": 230400, "FF": 460800, "DSP": 1728, "BRAM36": 312, "URAM": 96},
    data_width=_H.data_width, addr_width=_H.addr_width, clock_mhz=_H.clock_mhz,
    host="ARM Cortex-A53 (PYNQ) through the PS8",
    control_port="M_AXI_HPM0_FPD",
    memory_port="S_AXI_HP0..3_FPD and S_AXI_HPC0..1_FPD (128-bit; reads on HP0..3, writes "
                "on all six)",
    default=dict(_H.default), base_addr=_H.base_addr,
    program="pynq",
)
