"""The documentation: the Sphinx site builds without warnings, every generated table equals
what its JSON gives, and the project's text carries no development history."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

import tables  # noqa: E402  (docs/tables.py)


def test_sphinx_builds_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    run = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(ROOT / "docs"), str(tmp_path / "html")],
        capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-5000:]


def test_tables_equal_their_json(capsys):
    assert tables.main(["--check"]) == 0, capsys.readouterr().out[-5000:]


def _copy_pages(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    for page in (ROOT / "docs").glob("*.md"):
        shutil.copy(page, tmp_path / "docs" / page.name)
    return tmp_path


def test_tables_check_fails_on_an_edited_table(tmp_path, capsys):
    root = _copy_pages(tmp_path)
    page = root / "docs" / "regmap.md"
    text = page.read_text()
    assert "<!-- table: regmap -->" in text
    page.write_text(text.replace("| `0x000` | `ID` |", "| `0x000` | `IDENT` |", 1))
    assert tables.main(["--check", "--root", str(root)]) == 1
    assert "IDENT" in capsys.readouterr().out
    assert tables.main(["--root", str(root)]) == 0          # rewrites it
    assert page.read_text() == text
    assert tables.main(["--check", "--root", str(root)]) == 0


def test_tables_unknown_name_or_missing_marker_exit_2(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("<!-- table: no-such-table -->\n<!-- end table -->\n")
    assert tables.main(["--check", "--root", str(tmp_path)]) == 2
    assert "no-such-table" in capsys.readouterr().err
    (tmp_path / "README.md").write_text("<!-- table: regmap -->\nno end\n")
    assert tables.main(["--check", "--root", str(tmp_path)]) == 2


def test_tables_missing_json_exit_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("<!-- table: host-profile -->\n<!-- end table -->\n")
    assert tables.main(["--check", "--root", str(root)]) == 2
    assert "host_profile.json" in capsys.readouterr().err


# Development history: numbered rounds of work or tracker items, commit hashes, and relative
# time that no longer says when. A hash is 7-40 lowercase hex digits (at least one a-f) in
# backticks or after "at"/"since"; hex constants such as 0x43C0_0000 do not match.
_HASH = r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}"
HISTORY = [
    re.compile(r"\bsessions?\s+\d+", re.I),
    re.compile(r"\bissues?\s+#?\d+", re.I),
    re.compile(rf"`{_HASH}`"),
    re.compile(rf"\b(?:at|since)\s+`?{_HASH}\b"),
    re.compile(r"\bthis (?:round|session)\b", re.I),
    re.compile(r"\bround before\b", re.I),
    re.compile(r"\bbefore (?:this|the) change\b", re.I),
    re.compile(r"\bprevious" + r"ly\b", re.I),
]


def history_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "build.py"]
    files += [p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts]
    for top in ("rtl", "sim", "firmware", "platforms", "tests", "examples", "scripts"):
        files += sorted((ROOT / top).rglob("*.py"))
    return [p for p in files if p.exists()]


def history_hits() -> list[str]:
    hits = []
    for path in history_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if any(p.search(line) for p in HISTORY):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    return hits


#: One sample per kind of history the patterns find, each split in two so that this file
#: passes its own scan.
HISTORY_SAMPLES = ["sess" "ion 45", "iss" "ue #10", "at `16a" "114f`", "since 9ceb" "38a",
                   "this ro" "und", "the round be" "fore", "before this ch" "ange",
                   "previous" "ly"]


def test_history_patterns():
    for sample in HISTORY_SAMPLES:
        assert any(p.search(sample) for p in HISTORY), sample
    for pattern in HISTORY:
        assert any(pattern.search(s) for s in HISTORY_SAMPLES), pattern.pattern
    for clean in ("base 0x43C0_0000", "MAGIC = 0x42465038", "at 1000000 cycles",
                  "at abcdefg", "the issue queue", "`deadbeef_`"):
        assert not any(p.search(clean) for p in HISTORY), clean


def test_no_development_history():
    hits = history_hits()
    assert not hits, f"{len(hits)} lines with development history:\n" + "\n".join(hits)


def test_getting_started_device_example_prints_what_the_page_says():
    """The Device example of docs/getting-started.md runs and prints what the page shows
    (the cycle figures, elided there, aside)."""
    text = (ROOT / "docs" / "getting-started.md").read_text()
    section = text[text.index("## The Device"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"prints[^\n]*\n\n```text\n(.*?)```", section, re.S).group(1)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    got, want = run.stdout.splitlines(), shown.splitlines()
    assert got[:2] == want[:2]
    prefix = want[2].split("'cycles'")[0]
    assert got[2].startswith(prefix), (got[2], prefix)
