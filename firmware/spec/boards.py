"""What the host needs to know about each board, in plain Python (no Amaranth).

The board-side code (``firmware.runtime.pynq_backend`` on the ARM) and the build
(``platforms/*.py``, ``build.py``) both read these facts, so each is stated once:

* ``base_addr``: where the accelerator's AXI4-Lite registers sit in the host's address map.
  The generated Vivado script (:func:`platforms.vivado.build_tcl`) assigns exactly this
  address; ``build.py`` records it in ``report.json``'s ``"host"`` section.
  Zynq-7000 (Pynq-Z1): the first 64 KB of M_AXI_GP0's range, 0x43C0_0000 (the address
  Vivado's address editor gives the first PL slave on GP0). Zynq UltraScale+ (ZCU104): the
  first 64 KB of M_AXI_HPM0_FPD, 0xA000_0000. VCU118: offset 0 of XDMA's AXI4-Lite master
  (the host sees the registers at offset 0 of the PCIe BAR that XDMA maps to M_AXI_LITE; the
  address is on XDMA's AXI side, not a host physical address).
* ``clock_mhz``: the accelerator's clock (FCLK_CLK0 / pl_clk0 / XDMA's axi_aclk).
* ``stem``: the bitstream's file stem (``<stem>.bit`` with ``<stem>.hwh`` beside it).
* ``default``: the default accelerator configuration (:func:`config`); its DMA bursts are as
  long as the board's memory port takes (:func:`firmware.spec.ports.burst_beats` of its
  :data:`firmware.spec.ports.BOARD_PORTS` preset).
* ``ip_name``: the accelerator's instance in the block design (the key of ``pynq.Overlay``'s
  ``ip_dict`` and the ``INSTANCE`` of its ``MEMRANGE`` in the ``.hwh``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from firmware.spec.hw import DMA_BURST
from firmware.spec.ports import BOARD_PORTS, burst_beats

__all__ = ["BoardInfo", "BOARDS", "board", "config", "host_section", "IP_NAME",
           "REGISTER_RANGE"]

#: The accelerator's instance name in every generated block design.
IP_NAME = "accel"
#: Bytes of address space given to the register block (the map uses less than 1 KB).
REGISTER_RANGE = 0x1_0000


@dataclass(frozen=True)
class BoardInfo:
    name: str                 # command-line name
    family: str               # "xc7" (DSP48E1 slices) or "xcup" (DSP48E2)
    base_addr: int            # the register block's address (see the module documentation)
    address_space: str        # the block design's master address space holding it
    clock_mhz: float
    data_width: int           # the accelerator's AXI memory bus
    addr_width: int
    default: dict = field(default_factory=dict)
    host: str = "pynq"        # "pynq" (the ARM runs PYNQ) or "xdma" (x86 over PCIe)

    @property
    def stem(self) -> str:
        return f"bfp_{self.name.replace('-', '_')}"

    @property
    def bitfile(self) -> str:
        return f"{self.stem}.bit"

    @property
    def clock_hz(self) -> float:
        return self.clock_mhz * 1e6

    @property
    def packing(self) -> int:
        """MACs per DSP slice of the default (where it does not say: two per DSP48E2, one
        per DSP48E1, as ``rtl.export.FAMILY_PACKING``)."""
        return self.default.get("packing", 2 if self.family == "xcup" else 1)

    @property
    def dsp_slice(self) -> str:
        return "DSP48E2" if self.family == "xcup" else "DSP48E1"

    @property
    def port(self) -> str:
        """The board's memory port preset (:data:`firmware.spec.ports.BOARD_PORTS`)."""
        return BOARD_PORTS[self.name]

    def config(self, **overrides) -> dict:
        """The accelerator parameters: the default, with ``overrides`` (not None) applied.
        ``dsp_slice`` is the family's (what the simulators model with ``packing=2``).
        ``burst_beats`` follows the board's port (:func:`firmware.spec.ports.burst_beats`);
        it is in the dict only where it differs from :data:`firmware.spec.hw.DMA_BURST`, the
        accelerator's default. Raises ValueError for a ``burst_beats`` longer than the port
        takes, naming both lengths."""
        cfg = {"rows": 8, "cols": 8, "depth": 512, "block": 4, "queue": 4,
               "data_width": self.data_width, "addr_width": self.addr_width,
               "packing": self.packing, "dsp_slice": self.dsp_slice, **self.default}
        cfg.update({k: v for k, v in overrides.items() if v is not None})
        cfg["burst_beats"] = burst_beats(self.port, cfg.get("burst_beats"))
        if cfg["burst_beats"] == DMA_BURST:
            del cfg["burst_beats"]
        return cfg


BOARDS: dict[str, BoardInfo] = {b.name: b for b in (
    BoardInfo("pynq-z1", "xc7", base_addr=0x43C0_0000, address_space="ps/Data",
              clock_mhz=100.0, data_width=64, addr_width=32,
              default={"rows": 16, "cols": 16, "depth": 256, "block": 8, "packing": 2,
                       "write_ports": 4, "read_ports": 3}),
    BoardInfo("zcu104", "xcup", base_addr=0xA000_0000, address_space="ps/Data",
              clock_mhz=200.0, data_width=128, addr_width=40,
              default={"rows": 32, "cols": 64, "depth": 256, "block": 8,
                       "acc_ram": "ultra", "write_ports": 6, "read_ports": 5}),
    BoardInfo("vu9p", "xcup", base_addr=0x0000_0000, address_space="xdma/M_AXI_LITE",
              clock_mhz=250.0, data_width=512, addr_width=64,
              default={"rows": 64, "cols": 128, "depth": 512, "block": 8, "acc_ram": "ultra",
                       "slr_groups": 2},
              host="xdma"),
)}


def board(name: str) -> BoardInfo:
    """The board called ``name`` (a :data:`BOARDS` key); ValueError naming the choices."""
    try:
        return BOARDS[name]
    except KeyError:
        raise ValueError(f"unknown board {name!r}: one of {', '.join(sorted(BOARDS))}") \
            from None


def config(name: str, **overrides) -> dict:
    """The board's default accelerator configuration, with ``overrides`` applied."""
    return board(name).config(**overrides)


def host_section(name: str, cfg: dict) -> dict:
    """``report.json``'s ``"host"`` section: what the host driver needs of a build."""
    b = board(name)
    return {"board": b.name, "base_addr": f"0x{b.base_addr:08X}",
            "addr_range": f"{REGISTER_RANGE:#x}", "ip_name": IP_NAME,
            "clock_mhz": b.clock_mhz, "bitfile": b.bitfile, "hwh": f"{b.stem}.hwh",
            "rows": cfg["rows"], "cols": cfg["cols"], "data_width": cfg["data_width"],
            "burst_beats": cfg.get("burst_beats", DMA_BURST)}
