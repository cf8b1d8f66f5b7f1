"""Benchmarks of the accelerator: resources (Yosys) and cycle counts (simulation).

``python -m sim.bench resources``
    Yosys ``synth_xilinx`` of the systolic array for xc7 and xcup: LUT, FF, DSP, BRAM, and
    each per MAC.
``python -m sim.bench cycles``
    Tile GEMMs on the datapath in the Amaranth simulator, single and back to back, against
    the ideal cycle count.
``python -m sim.bench utilization``
    PE utilisation of whole GEMMs on the native Verilator model behind each board's memory
    port preset, beside each GEMM's roofline bound: square GEMMs in every transpose form and
    the three GEMMs of a training step of fully connected and convolution-shaped layers. A
    board too large to simulate runs as a smaller array with the same operand-to-bus ratio
    (``--default``: the boards' own defaults, slow to compile).
``python -m sim.bench model``
    The performance model against the RTL on random GEMMs.
``python -m sim.bench trace``
    One GEMM's bus words read and written per interval of its run.
``python -m sim.bench sweep``
    Every schedule the driver can give a GEMM, run and predicted: the driver's choice
    against the fastest.
``python -m sim.bench host``
    The host's share of a training step (its own options).

Each prints a Markdown table and writes JSON (``--out``).
"""

from firmware.spec.ports import DRAM_EFFICIENCY as DRAM_EFFICIENCY

from .bounds import dram_bound, roofline
from .bus_trace import trace, trace_table
from .cases import BENCH_CONFIGS, BENCH_SCALE, LAYERS
from .cli import ROOT as ROOT
from .cli import main
from .datapath import cycles, cycles_table, resources, resources_table
from .pe_utilization import (
    AT_90,
    board_summary,
    board_table,
    utilization,
    utilization_table,
)
from .perfmodel_check import MODEL_PORTS, model_check, model_check_table
from .schedules import sweep, sweep_table

__all__ = ["resources", "resources_table", "cycles", "cycles_table", "utilization",
           "utilization_table", "board_table", "board_summary", "roofline", "dram_bound",
           "model_check", "model_check_table", "trace", "trace_table", "sweep", "sweep_table",
           "main", "BENCH_CONFIGS", "BENCH_SCALE", "LAYERS", "MODEL_PORTS", "AT_90"]

# Helpers the tests use, kept importable from the package.
from .cases import _bench_cases as _bench_cases  # noqa: E402
from .schedules import _driver_schedule as _driver_schedule  # noqa: E402
from .schedules import _sides as _sides  # noqa: E402
