"""The ``pynq`` backend through the real ``pynq`` package (3.1.2, in ``.venv-pynq``: pynq 3.x
needs numpy<2), on a software board registered in pynq as its active device
(:func:`sim.native.pynq_sim.pynq_device`): ``pynq.Overlay`` loads the build's bitstream and
sets the PL clocks, ``pynq.MMIO`` reaches the accelerator's registers, ``pynq.allocate``
hands out ``PynqBuffer``\\ s from the board's CMA and their ``flush`` / ``invalidate`` move
the bytes; a full CMA fails with pynq's own ``RuntimeError("BO allocation failed: ...")``.
Also: pynq's two ``.hwh`` parsers read the files the test fixtures generate
(:func:`sim.native.pynq_sim.hwh_text`).

The checks run in a subprocess with that environment's interpreter (scripts/bootstrap.sh
makes it); the native model is built (or found in the cache) here, where Amaranth is, and
handed to the subprocess.
"""

import functools
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYNQ_PYTHON = ROOT / ".venv-pynq" / "bin" / "python"
BOARD = "pynq-z1"


# -- the checks, run in .venv-pynq -----------------------------------------------------------
def check_hwh(out: str) -> dict:
    """Parse each Zynq board's generated .hwh with pynq's parsers."""
    from pynq.metadata.runtime_metadata_parser import RuntimeMetadataParser
    from pynq.pl_server.hwh_parser import _HWHUltrascale, _HWHZynq
    from pynqmetadata.frontends import Metadata

    from sim.native.pynq_sim import write_hwh
    found = {}
    for board, family in (("pynq-z1", _HWHZynq), ("zcu104", _HWHUltrascale)):
        path = write_hwh(Path(out) / f"{board}.hwh", board)
        for name, parser in (("pynqmetadata", RuntimeMetadataParser(Metadata(input=path))),
                             ("hwh_parser", family(str(path)))):
            ip = parser.ip_dict["accel"]
            found[f"{board} {name}"] = {"phys_addr": ip["phys_addr"],
                                        "addr_range": ip["addr_range"], "type": ip["type"],
                                        "fclk0": parser.clock_dict[0]}
    return found


def _setup(out: str):
    """A board build's directory under ``out``, with no overlay directory, repository build
    or ``/proc/meminfo`` looked at (the CMA size is PYNQ's kernel default)."""
    from firmware.runtime import pynq_backend
    from sim.native.pynq_sim import write_bitstream_dir

    out = Path(out)
    pynq_backend.OVERLAY_DIR = out / "no-overlays"
    pynq_backend._REPO = out / "repo"
    pynq_backend.MEMINFO = out / "meminfo"
    return write_bitstream_dir(out / "overlay", BOARD)


def _board(library: str, **options):
    """A simulated board, pynq's active device."""
    from sim.native.pynq_sim import SimBoard, pynq_device
    board = SimBoard(BOARD, library=library, **options)
    pynq_device(board)
    return board


def _i8(rng, *shape):
    import numpy as np
    return rng.integers(-128, 128, shape, dtype=np.int8)


def check_gemm(out: str, library: str) -> dict:
    """GEMMs through pynq's Overlay, MMIO and allocate, against the golden model."""
    import numpy as np
    import pynq
    from pynq.buffer import PynqBuffer

    from firmware import Device
    bit = _setup(out)
    board = _board(library)
    dev = Device("pynq", board=BOARD, bitfile=str(bit))
    golden = Device("golden", rows=dev.rows, cols=dev.cols, data_width=dev.data_width)
    rng = np.random.default_rng(5)
    exact, types = [], set()
    for m, k, n, ta, tb in ((40, 70, 30, False, False), (16, 256, 64, True, False),
                            (33, 17, 9, False, True), (128, 96, 48, True, True)):
        a = _i8(rng, *((k, m) if ta else (m, k)))
        b = _i8(rng, *((n, k) if tb else (k, n)))
        ea, eb = rng.integers(-4, 4, m, dtype=np.int8), rng.integers(-4, 4, n, dtype=np.int8)
        for kw in ({"out": "int32"}, {"row_exp": ea, "col_exp": eb}):
            got = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, **kw)
            want = golden.gemm(a, b, transpose_a=ta, transpose_b=tb, **kw)
            exact.append(bool(got.dtype == want.dtype and np.array_equal(got, want)))
            types.add(type(got).__name__)
    t = dev.gemm(a, b, transpose_a=ta, transpose_b=tb, as_tensor=True)
    types.add(type(t.numpy()).__name__)
    buffers = [type(b.buf) for b in dev.driver.memory.live]
    t.free()
    facts = {
        "pynq": pynq.__version__, "device": type(pynq.Device.active_device).__mro__[1].__name__,
        "loaded": board.loaded == [str(bit)], "fclk0_mhz": pynq.Clocks.fclk0_mhz,
        "mmio": type(dev.driver.regs.mmio) is pynq.MMIO,
        "buffers": bool(buffers) and all(issubclass(c, PynqBuffer) for c in buffers),
        "exact": exact, "types": sorted(types), "accesses": board.accesses,
        "flushes": board.flushes, "invalidates": board.invalidates}
    dev.close()
    facts.update(live=board.live, cma_used=board.cma_used)
    return facts


def check_shapes(out: str, library: str) -> dict:
    """A training-like sequence of GEMMs whose shapes change (each epoch's last batch is
    smaller), on a roomy CMA and on one 1.2 times what the largest GEMM takes alone, less
    than every shape's buffers at once."""
    import numpy as np

    from firmware import Device
    from sim.native.pynq_sim import PAGE
    bit = _setup(out)
    rng = np.random.default_rng(9)
    w = _i8(rng, 256, 128)
    seq = []
    for _ in range(2):
        for m in (64, 64, 64, 40):
            x, g = _i8(rng, m, 256), _i8(rng, m, 128)
            seq += [(x, w, False, False), (g, w, False, True), (x, g, True, False)]

    def run(calls, **board_options):
        board = _board(library, **board_options)
        dev = Device("pynq", board=BOARD, bitfile=str(bit))
        results = [dev.gemm(a, b, transpose_a=ta, transpose_b=tb, out="int32")
                   for a, b, ta, tb in calls]
        peak, trims = board.cma_peak, dev.profile.counts.get("pool_trims", 0)
        dev.close()
        return board, results, peak, trims

    need = max(run([c])[2] for c in seq[-6:])          # one GEMM of each shape, alone
    roomy, want, roomy_peak, _ = run(seq)
    # a fifth more: room for a call's buffers, taken largest first, once idle ones go back
    tight, got, tight_peak, trims = run(seq, cma=-(-need * 6 // 5 // PAGE) * PAGE)
    i32 = np.int32
    exact = all(np.array_equal(c, (x.T if ta else x).astype(i32) @ (y.T if tb else y))
                for c, (x, y, ta, tb) in zip(got, seq, strict=True))
    same = all(np.array_equal(c, r) for c, r in zip(got, want, strict=True))
    return {"exact": exact, "same": same,
            "types": sorted({type(c).__name__ for c in got}),
            "roomy_refused": roomy.refused, "refused": tight.refused, "trims": trims,
            "roomy_peak": roomy_peak, "peak": tight_peak, "cma": tight._allocator.size,
            "live": tight.live, "cma_used": tight.cma_used}


def check_train(out: str, library: str) -> dict:
    """Three int8 steps of rf-anomaly (batches of 32, 32 and 16) and its evaluation on a
    roomy CMA and on one half the roomy run's peak."""
    from firmware.ml import train
    bit = _setup(out)

    def run(**board_options):
        board = _board(library, **board_options)
        cfg = train.TrainConfig(task="rf-anomaly", precision="int8", epochs=1, batch=32,
                                train_subset=80, seed=3)
        r = train.build(cfg, "pynq", None, None, board=BOARD, bitfile=str(bit))
        loss = r.train_epoch(None)
        metric = r.metric()
        result = {"loss": loss, "metric": metric, "digest": train._digest(r.net.parameters()),
                  "peak": board.cma_peak, "refused": board.refused,
                  "trims": r.eng.device.profile.counts.get("pool_trims", 0)}
        # the engines keep the weights on the device (in use, not the pool's to give back)
        for eng in (r.eng, r.eval_eng):
            eng.close()
        r.eng.device.close()
        result.update(live=board.live, cma_used=board.cma_used)
        return result

    roomy = run()
    tight = run(cma=max(roomy["peak"] // 2 // 4096, 1) * 4096)
    return {"roomy": roomy, "tight": tight}


# -- the tests -------------------------------------------------------------------------------
# (pytest is imported inside the tests: .venv-pynq runs this file's checks without it)
@functools.cache
def _library() -> str:
    """The Pynq-Z1's native model, built (or found in the cache) with this environment's
    Amaranth, once for the module's tests."""
    from firmware.spec import boards
    from sim.native.pynq_sim import sim_library
    return str(sim_library(boards.config(BOARD)))


def _run(check: str, *args, model: bool = True):
    import pytest
    if not PYNQ_PYTHON.is_file():
        pytest.skip(f"no {PYNQ_PYTHON}: scripts/bootstrap.sh makes it (pynq 3.1.2, numpy<2)")
    if model:
        args = (*args, _library())
    proc = subprocess.run([str(PYNQ_PYTHON), __file__, check, *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_pynqs_parsers_read_the_generated_hwh(tmp_path):
    from firmware.spec import boards
    found = _run("hwh", tmp_path, model=False)
    assert len(found) == 4
    for key, ip in found.items():
        b = boards.BOARDS[key.split()[0]]
        assert ip["phys_addr"] == b.base_addr and ip["addr_range"] == boards.REGISTER_RANGE
        assert ip["type"] == "xilinx.com:module_ref:bfp_accel_top:1.0"
        assert ip["fclk0"] == {"enable": 1, "divisor0": round(1000 / b.clock_mhz),
                               "divisor1": 1}


def test_gemms_through_pynqs_classes_are_bit_exact(tmp_path):
    """Overlay loads the bitstream and sets FCLK0 to the board's clock; the driver's
    registers are a pynq.MMIO, its buffers PynqBuffers; every GEMM equals the golden model's
    and comes back as a plain ndarray; close() leaves no buffer and no CMA in use."""
    import pytest

    from firmware.spec import boards
    f = _run("gemm", tmp_path)
    assert f["pynq"].startswith("3.") and f["device"] == "XrtDevice"
    assert f["loaded"] and f["fclk0_mhz"] == pytest.approx(boards.BOARDS[BOARD].clock_mhz)
    assert f["mmio"] and f["buffers"]
    assert f["exact"] == [True] * 8
    assert f["types"] == ["ndarray"]
    assert f["accesses"] > 0 and f["flushes"] > 0 and f["invalidates"] > 0
    assert f["live"] == 0 and f["cma_used"] == 0


def test_changing_shapes_on_a_tight_cma(tmp_path):
    """Batches of 64 rows and a last one of 40, twice, on a CMA smaller than the GEMMs take
    when nothing is given back: pynq refuses allocations, the pool gives back idle buffers of
    the other shapes, and every product is exact."""
    f = _run("shapes", tmp_path)
    assert f["roomy_refused"] == 0
    assert f["refused"] > 0 and f["trims"] > 0 and f["peak"] <= f["cma"] < f["roomy_peak"]
    assert f["exact"] and f["same"] and f["types"] == ["ndarray"]
    assert f["live"] == 0 and f["cma_used"] == 0


def test_training_survives_a_tight_cma(tmp_path):
    """Training steps on a CMA half the roomy run's peak end with the roomy run's weights,
    loss and metric; after close() no buffer is left."""
    f = _run("train", tmp_path)
    roomy, tight = f["roomy"], f["tight"]
    assert roomy["refused"] == 0 and tight["refused"] > 0 and tight["trims"] > 0
    assert tight["peak"] < roomy["peak"]
    assert (tight["digest"], tight["loss"], tight["metric"]) == \
        (roomy["digest"], roomy["loss"], roomy["metric"])
    for r in (roomy, tight):
        assert r["live"] == 0 and r["cma_used"] == 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    checks = {"hwh": check_hwh, "gemm": check_gemm, "shapes": check_shapes,
              "train": check_train}
    print(json.dumps(checks[sys.argv[1]](*sys.argv[2:])))
