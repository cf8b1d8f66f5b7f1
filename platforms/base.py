"""What every board module states: the device, its capacity, the memory bus, the clock, the
default accelerator configuration, and how the accelerator is hooked to the host.

The facts the host driver needs too (bus, clock, default configuration, register base address)
are stated in :mod:`firmware.spec.boards` (plain Python, importable on the board) and taken from
there."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Board", "RESOURCES"]

#: The resources a report counts, in this order.
RESOURCES = ("LUT", "FF", "DSP", "BRAM36", "URAM")


@dataclass(frozen=True)
class Board:
    """One board: the device, its capacity, the memory bus, the clock and the default.

    Attributes
    ----------
    name : str
        Command-line name (``build.py --platform``).
    title : str
        Human-readable name.
    part : str
        Vivado part.
    board_part : str or None
        Vivado board part (board files), if the flow uses one.
    family : str
        Yosys ``synth_xilinx`` family: ``"xc7"`` or ``"xcup"``.
    capacity : dict
        :data:`RESOURCES` -> count on the device.
    data_width, addr_width : int
        The accelerator's AXI memory bus.
    clock_mhz : float
        Target clock.
    host, control_port, memory_port : str
        How the host reaches the accelerator, where AXI4-Lite control comes from and where
        the DMA's AXI4 masters go (report text).
    default : dict
        The default accelerator parameters.
    program : str
        How the bitstream is loaded: ``"jtag"`` (openFPGALoader), ``"pynq"`` (copied over
        ssh) or ``"vivado"`` (Vivado's hardware manager).
    base_addr : int
        The registers' address on the control port (:mod:`firmware.spec.boards`).
    slrs : tuple of str
        Stacked-silicon devices: the SLR of each of the array's column groups (the default's
        ``slr_groups``), group 0 first, which the rest of the accelerator shares; the
        constraints put each in a pblock (:func:`platforms.vivado.xdc`). Empty: no pblocks.
    """

    name: str                 # command-line name
    title: str
    part: str                 # Vivado part
    board_part: str | None    # Vivado board part (board files), if the flow uses one
    family: str               # Yosys synth_xilinx family: "xc7" or "xcup"
    capacity: dict            # RESOURCES -> count
    data_width: int           # the accelerator's AXI memory bus
    addr_width: int
    clock_mhz: float          # target clock
    host: str                 # how the host reaches the accelerator (README/report text)
    control_port: str         # where AXI4-Lite control comes from
    memory_port: str          # where the DMA's AXI4 master goes
    default: dict = field(default_factory=dict)   # accelerator parameters
    program: str = "jtag"     # "jtag" (openFPGALoader), "pynq" (ssh copy), "vivado"
    base_addr: int = 0        # the registers' address on the control port (firmware.spec.boards)
    # Stacked-silicon devices: the SLR of each of the array's column groups (the default's
    # ``slr_groups``), group 0 first, which the rest of the accelerator shares; the
    # constraints put each in a pblock (:func:`platforms.vivado.xdc`). Empty: no pblocks.
    slrs: tuple = ()

    @property
    def packing(self) -> int:
        """MACs per DSP slice of the default (:attr:`firmware.spec.boards.BoardInfo.packing`)."""
        from firmware.spec.boards import board
        return board(self.name).packing

    def config(self, **overrides) -> dict:
        """The accelerator parameters: the board's default with ``overrides`` (not None)
        applied — :meth:`firmware.spec.boards.BoardInfo.config`, where they are stated once."""
        from firmware.spec.boards import board
        return board(self.name).config(**overrides)
