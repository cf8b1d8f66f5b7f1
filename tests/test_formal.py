"""Formal proofs of the AXI interfaces (SymbiYosys), and that the checkers catch broken managers.

Proofs flagged ``slow`` in :data:`sim.formal.proofs.PROOFS` run with ``pytest -m slow``.
"""

import ast
from pathlib import Path

import pytest

from sim.formal import proofs
from sim.formal.axi import AXI4ReadChecker, AXI4WriteChecker, axsize

#: Proven by k-induction (unbounded), not only checked to a depth.
UNBOUNDED = {"csr", "csr_live", "dma_reader", "dma_reader_window", "dma_reader_stream",
             "dma_reader_ends", "dma_writer", "dma_writer_3", "dma_writer_window",
             "dma_writer_order", "dma_reader_ledger", "dma_reader_live", "dma_writer_live"}

#: Each broken harness or seeded design bug, and (part of) the property that must catch it.
CAUGHT_BY = {
    "flaw_drop_valid": "VALID held until READY",
    "flaw_cross_4k": "no 4 KB boundary crossed",
    "mutant_tiling": "the burst starts where its command's words go on",
    "mutant_burst_encoding": "INCR",
    "mutant_resp_encoding": "SLVERR otherwise",
    "mutant_waits_bready": "accepted at once when no write is outstanding",
    "mutant_w1p_readback": "a w1p register reads as 0",
    "mutant_latch": "reads HI as latched",
    "mutant_ar_waits_ready": "a handshake within",
    "mutant_burst_waits_bvalid": "a handshake within",
}


def _param(name):
    return pytest.param(name, marks=pytest.mark.slow) if proofs.PROOFS[name].slow else name


@pytest.mark.parametrize("name", [_param(n) for n in proofs.PROOFS])
def test_proof(name):
    result = proofs.run(proofs.PROOFS[name])
    assert result.passed, f"{result.line()}\n{proofs._failure_summary(result.log)}"


def test_unbounded_proofs_use_k_induction():
    for name in UNBOUNDED:
        assert proofs.PROOFS[name].mode == "prove", name


def test_each_induction_has_a_deeper_bounded_check():
    for name in UNBOUNDED:
        bmc = proofs.PROOFS[f"{name}_bmc"]
        assert bmc.mode == "bmc" and bmc.depth > proofs.PROOFS[name].depth, name


def test_checkers_share_only_bus_signatures_with_the_design():
    """The checkers import nothing of ``rtl`` but signatures (so no encoding constant); the
    harnesses only the designs under test."""
    allowed = {"axi.py": lambda n: n.endswith("Signature"),
               "proofs.py": lambda n: n in {"RegisterBlock", "DmaReader", "DmaWriter"}}
    for file, ok in allowed.items():
        tree = ast.parse((Path(proofs.__file__).parent / file).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rtl"):
                assert all(ok(a.name) for a in node.names), (file, [a.name for a in node.names])


def test_every_flaw_is_named():
    assert set(CAUGHT_BY) == set(proofs.FLAWED)


@pytest.mark.parametrize("name", list(CAUGHT_BY))
def test_proofs_catch_a_broken_design(name):
    result = proofs.run(proofs.FLAWED[name])
    assert not result.passed, result.line()
    failed = proofs.failed_properties(result.log)
    assert any(CAUGHT_BY[name] in text for text in failed), failed


def test_mutation_text_must_occur_once():
    build = proofs._mutated("rtl.csr", "no such text", "", proofs.csr_harness)
    with pytest.raises(ValueError, match="occurs 0 times"):
        build()


def test_command_line(capsys):
    assert proofs.main(["--list"]) == 0
    assert "dma_writer" in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        proofs.main(["no_such_proof"])
    assert bad.value.code == 2


def test_checker_arguments():
    with pytest.raises(ValueError, match="dut must be"):
        AXI4ReadChecker(64, 32, dut="memory")
    with pytest.raises(ValueError, match="max_burst must be in 1..256, not 0"):
        AXI4ReadChecker(64, 32, max_burst=0)
    with pytest.raises(ValueError, match="max_w_ahead"):
        AXI4WriteChecker(64, 32, max_w_ahead=0)
    assert [axsize(w) for w in (8, 32, 64, 128, 1024)] == [0, 2, 3, 4, 7]
    with pytest.raises(ValueError, match="data_width"):
        axsize(24)
