"""VU9P: the VCU118 board (xcvu9p-flga2104-2L-e), host over PCIe.

The host reaches the accelerator through Xilinx XDMA (PCIe Gen3 x16): its AXI4-Lite master
(BAR) drives the control port, and the host moves operands to and from the on-board DDR4 with
XDMA's H2C/C2H channels; the accelerator's DMA works on that DDR4 (512-bit, through the MIG).
Two int8 MACs per DSP48E2; the default 64x128 array is 8192 MACs/cycle on 4096 DSP slices
(60 % of 6840).

The VU9P is three super logic regions (SLRs) of 2280 DSP slices each, so the array cannot sit
in one: its columns are split into two groups (``slr_groups``, :class:`rtl.systolic.
SystolicArray`'s ``slr_cols``), 64 columns (2048 DSP slices) each, with registers at every
crossing. Group 0 and the rest of the accelerator go to SLR1, where the PCIe block the XDMA
uses sits (clock regions X4Y5-X5Y8 on the VCU118, as Corundum's VCU118 placement has it);
group 1 to SLR0. Which SLR the DDR4 C1 banks are in is not verified: with the device view
open, change :data:`BOARD`'s ``slrs`` if group 1 belongs in SLR2.
"""

from firmware.spec.boards import BOARDS

from .base import Board

_H = BOARDS["vu9p"]

BOARD = Board(
    name="vu9p", title="VCU118 (Virtex UltraScale+ VU9P)",
    part="xcvu9p-flga2104-2L-e", board_part="xilinx.com:vcu118:part0:2.4",
    family="xcup",
    capacity={"LUT": 1182240, "FF": 2364480, "DSP": 6840, "BRAM36": 2160, "URAM": 960},
    data_width=_H.data_width, addr_width=_H.addr_width, clock_mhz=_H.clock_mhz,
    host="x86 over PCIe (XDMA)",
    control_port="XDMA M_AXI_LITE (BAR0)", memory_port="DDR4 C0 through the MIG (512-bit)",
    default=dict(_H.default), base_addr=_H.base_addr,
    program="vivado", slrs=("SLR1", "SLR0"),
)
