"""The import direction and the hardware constants the runtime shares with the RTL.

The runtime (``firmware/``) and the numpy models (``sim/models/``) never import the RTL,
Amaranth or the board build (``platforms``): the latencies and sizes they need are plain
Python in :mod:`firmware.spec.hw`, held equal here to what the RTL declares.
"""

import ast
import gc
import inspect
import warnings
from pathlib import Path

import pytest
from amaranth.hdl import UnusedElaboratable

from firmware.spec import hw

ROOT = Path(__file__).resolve().parent.parent

#: Packages the runtime and the models must never import.
FORBIDDEN = ("rtl", "amaranth", "amaranth_boards", "platforms")

#: The project's packages each layer may import (beside the standard library and numpy):
#: ``firmware.spec`` <- ``sim.models`` <- ``firmware.runtime`` <- ``firmware.ml`` <-
#: ``firmware.torch``.
LAYERS = {
    "firmware/spec": ("firmware.spec",),
    "sim/models": ("firmware.spec", "sim.models"),
    "firmware/runtime": ("firmware.spec", "sim.models", "firmware.runtime"),
    "firmware/ml": ("firmware.spec", "sim.models", "firmware.runtime", "firmware.ml"),
    "firmware/torch": ("firmware.spec", "sim.models", "firmware.runtime", "firmware.ml",
                       "firmware.torch"),
    "firmware/__init__.py": ("firmware.runtime",),
}

#: Imports allowed against the layering, each by file, function and module: the ``rtl``
#: backend of :class:`firmware.Device` loads the Verilator model where it is built.
ALLOWED = {("firmware/runtime/device.py", "Device.__init__", "sim.native")}


def _imports(path: Path):
    """``(function, module, module level)`` for every import in ``path``: ``function`` the
    qualified name of the def that holds it ("" at module level)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, scope + [child.name])
                continue
            if isinstance(child, ast.Import):
                found.extend((".".join(scope), a.name) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    pytest.fail(f"{path}: relative import at line {child.lineno}")
                found.append((".".join(scope), child.module))
            visit(child, scope)

    visit(tree, [])
    return found


def _files(*roots):
    for root in roots:
        path = ROOT / root
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _violations(allowed=ALLOWED):
    bad = []
    for path in _files("firmware", "sim/models"):
        rel = _rel(path)
        layer = next(v for k, v in LAYERS.items() if rel == k or rel.startswith(k + "/"))
        for func, module in _imports(path):
            top = module.split(".")[0]
            project = top in ("firmware", "sim", "build", *FORBIDDEN)
            ok = not project or any(module == p or module.startswith(p + ".")
                                    for p in layer) or module in ("firmware", "sim")
            if top in FORBIDDEN or not ok:
                if (rel, func, module) not in allowed:
                    bad.append(f"{rel}: {func or '<module>'} imports {module}")
    return bad


def test_runtime_and_models_import_one_way():
    """No file of ``firmware/`` or ``sim/models/`` imports ``rtl``, Amaranth or
    ``platforms``, anywhere (module level or inside a function), and each layer imports only
    the layers below it, but for :data:`ALLOWED`."""
    assert _violations() == []


def test_the_one_allowed_import_is_where_it_is_documented():
    found = {(_rel(p), f, m) for p in _files("firmware") for f, m in _imports(p)}
    assert ALLOWED <= found
    device = (ROOT / "firmware/runtime/device.py").read_text()
    assert device.count("from sim.native import") == 1


def test_a_seeded_violation_is_seen(tmp_path, monkeypatch):
    """The checker itself: an rtl import inside a function of the performance model, and a
    runtime import in the models, are both reported."""
    def fake_imports(path):
        rel = _rel(path)
        if rel == "firmware/runtime/perfmodel.py":
            return [("predict", "rtl.datapath")]
        if rel == "sim/models/functional.py":
            return [("", "firmware.runtime.perfmodel")]
        return []
    monkeypatch.setitem(globals(), "_imports", fake_imports)
    assert _violations() == [
        "firmware/runtime/perfmodel.py: predict imports rtl.datapath",
        "sim/models/functional.py: <module> imports firmware.runtime.perfmodel"]


def test_native_model_loads_without_amaranth():
    """``sim.native`` imports the RTL only where it builds a model, so a model already built
    loads where Amaranth is not installed."""
    for path in _files("sim/native"):
        for func, module in _imports(path):
            if module.split(".")[0] in FORBIDDEN:
                assert func, f"{_rel(path)} imports {module} at module level"


# -- the constants ----------------------------------------------------------------------------
@pytest.fixture
def quiet():
    """Components built only to read their declared numbers: collected without Amaranth's
    warning that they were never elaborated."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        yield
        gc.collect()


def test_constants_equal_the_rtls():
    from rtl.accelerator import Accelerator
    from rtl.buffer import TransposableBuffer
    from rtl.checker import DescriptorChecker
    from rtl.datapath import GemmDatapath
    from rtl.dma import DmaWriter
    from rtl.engine import GemmEngine
    from rtl.epilogue import TileQuantizer
    from rtl.fp32 import Fp32Add
    from rtl.rescale import Rescaler
    from rtl.systolic import SystolicArray
    from rtl.walker import Walker

    defaults = {name: p.default for name, p in
                inspect.signature(Accelerator).parameters.items()}
    declared = {
        "CHECK_LATENCY": DescriptorChecker.LATENCY,
        "CUT_WAIT": Walker.CUT_WAIT,
        "BUFFER_READ_LATENCY": TransposableBuffer.READ_LATENCY,
        "ACCUMULATE_STAGES": GemmDatapath.ACCUMULATE_STAGES,
        "RESCALER_LATENCY": Rescaler.LATENCY,
        "OUT_FIFO_LATENCY": GemmDatapath.OUT_FIFO_LATENCY,
        "WORD_FIFO": GemmEngine.WORD_FIFO,
        "DMA_OUTSTANDING": defaults["outstanding"],
        "DMA_BURST": defaults["burst_beats"],
        "SLR_STAGES": SystolicArray.SLR_STAGES,
        "WALK_START_DELAY": GemmEngine.WALK_START_DELAY,
        "WRITE_FORM_LATENCY": DmaWriter.FORM_LATENCY,
        "KB_ADD_LATENCY": Fp32Add.LATENCY,
        "KB_READ_AHEAD": GemmDatapath.KB_READ_AHEAD,
        "QUANTIZER_DRAIN_LATENCY": TileQuantizer.DRAIN_LATENCY,
    }
    assert {name: getattr(hw, name) for name in declared} == declared
    constants = {name for name in hw.__all__ if name.isupper()}
    assert constants == set(declared) | {"OUT_FIFO_TILES"}     # (below)


CONFIGS = [(1, 1), (1, 2), (2, 1), (3, 5), (4, 4), (7, 9), (16, 16), (32, 64)]


@pytest.mark.parametrize("cols", [4, 8, 16, 32, 64])
def test_quantizer_fill_latency_equals_the_rtls(cols):
    from firmware.spec.regmap import TILE_BLOCK
    from rtl.epilogue import TileQuantizer
    q = TileQuantizer(cols, TILE_BLOCK)
    q._MustUse__silence = True
    assert hw.quantizer_fill_latency(cols, TILE_BLOCK) == q.fill_latency


@pytest.mark.parametrize("rows,cols", CONFIGS)
def test_latencies_equal_the_rtls(rows, cols, quiet):
    from rtl.datapath import GemmDatapath

    for packing in (1, 2):
        for groups in sorted({1, 2, 3} & set(range(1, cols + 1))):
            dut = GemmDatapath(rows, cols, packing=packing, slr_groups=groups)
            args = (rows, cols, packing, groups)
            assert hw.array_latency(*args) == dut.array.latency, args
            assert hw.min_emit_interval(*args) == dut.array.min_emit_interval, args
            assert hw.fill_latency(*args) == dut.fill_latency, args
            assert hw.accumulate_interval(*args) == max(dut.array.min_emit_interval,
                                                        GemmDatapath.ACCUMULATE_STAGES + 1)
            kb = GemmDatapath(rows, cols, packing=packing, slr_groups=groups, k_blocks=True)
            for r in sorted({1, 2, rows // 2 or 1, rows - 1 or 1, rows} & set(range(1, rows + 1))):
                assert hw.emit_interval(rows, cols, r, packing, groups) \
                    == kb.array.emit_interval(r), (args, r)
                assert hw.kblock_interval(rows, cols, r, packing, groups) \
                    == kb.kb_interval_after(r), (args, r)
            assert hw.kblock_interval(rows, cols, None, packing, groups) == kb.kb_interval
        assert GemmDatapath(rows, cols, packing=packing).out_rows == hw.OUT_FIFO_TILES * rows


def test_every_hw_name_the_runtime_uses_is_checked():
    """The names of :mod:`firmware.spec.hw` used anywhere in ``firmware/`` or
    ``sim/models/`` are all declared in it (and so compared above)."""
    used = set()
    for path in _files("firmware", "sim/models"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id == "hw":
                used.add(node.attr)
    assert used and used <= set(hw.__all__)


@pytest.mark.parametrize("args,match", [
    ((0, 4), "rows"), ((4, True), "cols"), ((4, 4, 3), "packing"), ((4, 2, 1, 3), "slr_groups"),
])
def test_bad_configuration(args, match):
    with pytest.raises(ValueError, match=match):
        hw.fill_latency(*args)


def test_perfmodel_takes_its_latencies_from_hw():
    from firmware.runtime import perfmodel

    assert perfmodel.START_LATENCY == hw.CHECK_LATENCY + 1 + hw.WALK_START_DELAY
    assert perfmodel.READ_FIFO == hw.DMA_BURST * hw.DMA_OUTSTANDING
