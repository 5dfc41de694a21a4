"""The documentation: mkdocs builds it strictly and without warnings, the README stays a short
entry page whose links resolve, and no page points outside the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from layout import LAYERS, source_modules

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# A Markdown link or image: [text](target) or ![alt](target); the target up to a space or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_mkdocs_build_is_strict_and_clean(tmp_path: Path) -> None:
    """``mkdocs build --strict`` (mkdocs and mkdocs-material come with the dev extra) succeeds and
    logs no warning: every page is in the nav and every link between pages resolves."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build failed (is the dev extra installed?):\n{output}"
    warnings = [line for line in output.splitlines() if re.match(r"\s*(WARNING|ERROR)\b", line)]
    assert not warnings, "\n".join(warnings)
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "adaptive" / "index.html").is_file()


def test_every_docs_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if f" {p.relative_to(DOCS).as_posix()}" not in nav]
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 160, f"README.md has {len(lines)} lines; move detail into docs/"
    assert "make profile" in text
    assert "make test" in text


def test_no_page_points_at_the_shared_folder() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in _pages()
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "shared/spec" in line or "../shared" in line
    ]
    assert not bad, f"the docs must stand alone; these lines cite the shared folder: {bad}"


def test_readme_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    targets = LINK.findall(text)
    assert any(t.startswith("docs/") for t in targets), "the README links into docs/"
    broken = []
    for target in targets:
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or an anchor on the same page
        path = target.split("#", 1)[0]
        if not (README.parent / path).exists():
            broken.append(target)
    assert not broken, f"README.md links to missing files: {broken}"


ARCHITECTURE = DOCS / "architecture.md"
PACKAGE = ROOT / "pipeline"


def _modules_section(text: str) -> str:
    return text.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]


def architecture_layers(text: str) -> tuple[list[str], list[str]]:
    """The layers ``docs/architecture.md`` names under "Modules": the chain drawn in its code block
    (``errors → paths → ...``), and the first path of each table row (``pipeline/grade/`` -> ``grade``)."""
    section = _modules_section(text)
    drawn = "".join(line for line in section.splitlines() if line.startswith("    "))
    chain = [name.strip() for name in drawn.split("→")]
    rows = re.findall(r"^\| `(?:pipeline/)?(\w+)(?:\.py|/)`", section, flags=re.M)
    return chain, rows


def missing_modules(text: str) -> list[str]:
    """Every file the page names (``pipeline/x/``, ``tests/x.py``, ``x.py``) that does not exist. A bare
    ``x.py`` in a table row is looked for in that row's package, elsewhere anywhere in ``pipeline/``."""
    everywhere = {p.name for p in source_modules().values()}
    missing = []
    for line in text.splitlines():
        row = re.match(r"\| `((?:pipeline/)?[\w]+)/` ", line)
        for name in re.findall(r"`((?:pipeline|tests|flows|reports|sql)/[\w/.]*|[\w/]+\.py)`", line):
            if name.startswith(("pipeline/", "tests/", "flows/", "reports/", "sql/")):
                found = (ROOT / name).exists()
            elif row:
                found = (ROOT / row.group(1) / name).exists()
            else:
                found = name in everywhere or (PACKAGE / name).exists()
            if not found:
                missing.append(name)
    return missing


def test_architecture_lists_every_layer_in_the_tested_order() -> None:
    """The page a new reader starts from draws the order ``tests/test_layers.py`` enforces and has
    one row per layer, in that order; every module it names exists."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    chain, rows = architecture_layers(text)
    assert chain == list(LAYERS), f"the drawn order differs from LAYERS in tests/layout.py: {chain}"
    assert rows == list(LAYERS), f"the table's rows differ from LAYERS in tests/layout.py: {rows}"
    assert missing_modules(text) == []


def test_the_architecture_check_sees_a_wrong_order_and_a_gone_module() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    swapped = text.replace("grade → datasets → sample", "datasets → sample → grade")
    assert architecture_layers(swapped)[0] != list(LAYERS)
    dropped = "\n".join(line for line in text.splitlines() if not line.startswith("| `pipeline/prior.py`"))
    assert "prior" not in architecture_layers(dropped)[1]
    assert missing_modules(text.replace("`shards.py`", "`jobs.py`")) == ["jobs.py"]
    assert missing_modules("The library (`run.py`) sits apart.") == ["run.py"]
    assert missing_modules("| `pipeline/store/` | `fs.py`, `extract.py` |") == ["extract.py"]


def test_the_module_table_is_said_once() -> None:
    """CONTRIBUTING.md points to the architecture page instead of keeping a second table or drawing."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    layers = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    assert "docs/architecture.md" in layers
    assert "| module |" not in text and "→" not in layers
