"""Formal proofs of the AXI interfaces (SymbiYosys), and that the checkers catch broken managers.

Proofs flagged ``slow`` in :data:`sim.formal.proofs.PROOFS` run with ``pytest -m slow``.
"""

import pytest

from sim.formal import proofs
from sim.formal.axi import AXI4ReadChecker, AXI4WriteChecker

#: Proven by k-induction (unbounded), not only checked to a depth.
UNBOUNDED = {"csr", "dma_reader", "dma_reader_window", "dma_reader_stream", "dma_reader_ends",
             "dma_writer", "dma_writer_3", "dma_writer_window", "dma_writer_order"}


def _param(name):
    return pytest.param(name, marks=pytest.mark.slow) if proofs.PROOFS[name].slow else name


@pytest.mark.parametrize("name", [_param(n) for n in proofs.PROOFS])
def test_proof(name):
    result = proofs.run(proofs.PROOFS[name])
    assert result.passed, f"{result.line()}\n{proofs._failure_summary(result.log)}"


def test_unbounded_proofs_use_k_induction():
    for name in UNBOUNDED:
        assert proofs.PROOFS[name].mode == "prove", name


@pytest.mark.parametrize("name, property", [
    ("flaw_drop_valid", "VALID held until READY"),
    ("flaw_cross_4k", "no 4 KB boundary crossed"),
])
def test_checkers_catch_a_broken_manager(name, property):
    result = proofs.run(proofs.FLAWED[name])
    assert not result.passed
    failed = proofs.failed_properties(result.log)
    assert any(property in text for text in failed), failed


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
