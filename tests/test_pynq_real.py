"""The real ``pynq`` package (3.1.2, in ``.venv-pynq``: pynq 3.x needs numpy<2) reading the
``.hwh`` files the test fixtures generate (sim.native.pynq_sim.hwh_text): both of pynq's
parsers — ``pynqmetadata``'s, which ``EmbeddedDevice`` reads a full bitstream's ``.hwh``
with, and ``pynq.pl_server.hwh_parser``'s Zynq / Zynq UltraScale+ classes — find the
accelerator's IP at the board's register address with its 64 KB range. The checks run in a
subprocess with that environment's interpreter; scripts/bootstrap.sh makes it."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYNQ_PYTHON = ROOT / ".venv-pynq" / "bin" / "python"


def check_hwh(out: str) -> None:
    """In .venv-pynq: parse each Zynq board's generated .hwh with pynq's parsers."""
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
    print(json.dumps(found))


def _run(check: str, tmp_path):
    if not PYNQ_PYTHON.is_file():
        import pytest
        pytest.skip(f"no {PYNQ_PYTHON}: scripts/bootstrap.sh makes it (pynq 3.1.2, numpy<2)")
    proc = subprocess.run([str(PYNQ_PYTHON), __file__, check, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_pynqs_parsers_read_the_generated_hwh(tmp_path):
    from firmware.spec import boards
    found = _run("hwh", tmp_path)
    assert len(found) == 4
    for key, ip in found.items():
        b = boards.BOARDS[key.split()[0]]
        assert ip["phys_addr"] == b.base_addr and ip["addr_range"] == boards.REGISTER_RANGE
        assert ip["type"] == "xilinx.com:module_ref:bfp_accel_top:1.0"
        assert ip["fclk0"] == {"enable": 1, "divisor0": round(1000 / b.clock_mhz),
                               "divisor1": 1}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    {"hwh": check_hwh}[sys.argv[1]](*sys.argv[2:])
