"""ZCU104: Zynq UltraScale+ xczu7ev-ffvc1156-2-e on the PS8.

Control on M_AXI_HPM0_FPD, DMA on S_AXI_HP0_FPD (128-bit), clock pl_clk0, interrupt
pl_ps_irq0. Two int8 MACs per DSP48E2; the default 32x64 array is 2048 MACs/cycle on 1024
DSP slices (59 % of 1728), with operand buffers 256 deep per slot (K chunks of 256).
"""

from .base import Board

BOARD = Board(
    name="zcu104", title="ZCU104 (Zynq UltraScale+ ZU7EV)",
    part="xczu7ev-ffvc1156-2-e", board_part="xilinx.com:zcu104:part0:1.1",
    family="xcup",
    capacity={"LUT": 230400, "FF": 460800, "DSP": 1728, "BRAM36": 312, "URAM": 96},
    data_width=128, addr_width=40, clock_mhz=200.0,
    host="ARM Cortex-A53 (PYNQ) through the PS8",
    control_port="M_AXI_HPM0_FPD", memory_port="S_AXI_HP0_FPD (128-bit)",
    default={"rows": 32, "cols": 64, "depth": 256, "block": 4},
    program="pynq",
)
