"""Boards: one module each, with the device, its capacity, the memory bus, a target clock and
the default accelerator configuration; :mod:`platforms.estimate` for Yosys estimates;
:mod:`platforms.vivado` for the Vivado project, constraints and programming commands."""

from .base import RESOURCES, Board
from .pynq_z1 import BOARD as PYNQ_Z1
from .vu9p import BOARD as VU9P
from .zcu104 import BOARD as ZCU104

__all__ = ["Board", "RESOURCES", "PLATFORMS"]

#: Every board, by its command-line name.
PLATFORMS = {b.name: b for b in (PYNQ_Z1, ZCU104, VU9P)}
