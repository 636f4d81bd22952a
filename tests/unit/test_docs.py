"""The documentation against the code it describes, and the README kept short.

The README's CLI reference lists exactly the typer app's commands, docs/configuration.md's
settings table every `Config` field with the code's default, and every relative link of
the README and docs/ names a file (and a heading) that exists. The README fits a
five-minute read and leaves measured figures to docs/benchmarks.md.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from commands import registered_commands

from warehouse.config import Config

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """Markdown without its fenced code blocks."""
    return _FENCE.sub("", text)


def _section(text: str, title: str) -> str:
    """The body of the level-2 section ``title``, up to the next level-2 heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README has no section '## {title}'"
    return match.group(1)


def _first_table(text: str) -> list[list[str]]:
    """The cells of each body row of the first Markdown table in ``text``."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    assert len(rows) > 2, "no table found"
    return rows[2:]  # past the header and the |---| line


# -- (a) the CLI reference --------------------------------------------------------------


def _documented_commands() -> list[str]:
    commands = []
    for cells in _first_table(_section(README.read_text(), "CLI reference")):
        match = re.fullmatch(r"`llmwh ([a-z][a-z0-9-]*(?: [a-z][a-z0-9-]*)*)[^`]*`", cells[0])
        assert match, f"CLI reference: {cells[0]!r} is not `llmwh COMMAND ...`"
        commands.append(match.group(1))
    return commands


def test_the_readme_cli_reference_lists_exactly_the_commands_of_the_app():
    documented, registered = _documented_commands(), registered_commands()
    twice = sorted({c for c in documented if documented.count(c) > 1})
    assert not twice, f"listed twice in the README's CLI reference: {twice}"
    assert set(documented) == registered, (
        f"only in the README's CLI reference: {sorted(set(documented) - registered)}; "
        f"only in the typer app: {sorted(registered - set(documented))}"
    )


# -- (b) the settings table -----------------------------------------------------------


def _documented_default(cell: str) -> object:
    """A default as the table writes it: unset, true/false, 1,024, `text`; a
    parenthetical remark after it, `(32 MiB)`, is prose."""
    value = re.sub(r"\s*\([^)]*\)$", "", cell)
    if value == "unset":
        return None
    if value in ("true", "false"):
        return value == "true"
    if re.fullmatch(r"\d[\d,]*", value):
        return int(value.replace(",", ""))
    quoted = re.fullmatch(r"`([^`]*)`", value)
    assert quoted, f"cannot read the default {cell!r}: write unset, true, false, 10 or `text`"
    return quoted.group(1)


def test_the_configuration_page_documents_every_setting_with_the_default_of_the_code():
    documented = {}
    for cells in _first_table(CONFIGURATION.read_text()):
        name = cells[0].strip("`")
        documented[name] = _documented_default(cells[1])
    defaults = {field.name: field.default for field in fields(Config)}
    # bool is an int in Python: compare types too, so `1` never passes for `true`.
    wrong = {
        name: (documented[name], defaults[name])
        for name in documented.keys() & defaults.keys()
        if (type(documented[name]), documented[name]) != (type(defaults[name]), defaults[name])
    }
    assert not wrong, "docs/configuration.md default != Config default: " + "; ".join(
        f"{name}: {page!r} != {code!r}" for name, (page, code) in sorted(wrong.items())
    )
    assert documented.keys() == defaults.keys(), (
        f"only in docs/configuration.md: {sorted(documented.keys() - defaults.keys())}; "
        f"only in Config: {sorted(defaults.keys() - documented.keys())}"
    )


# -- (b') the README: a five-minute read, its figures measured elsewhere -------------

README_MAX_LINES = 300

# A measured figure, written as docs/benchmarks.md writes them: a ratio (6.7x, 1.6-1.9x),
# a rate (239-244k/s, 79k requests/s), a time with decimals or as a range (33.6 ms,
# 32-46 s), a size (0.8 GB, 48.9 B/request) or a share with decimals (15.4%). Whole
# numbers with a unit (a 200 ms threshold, port 9201) are settings, not measurements.
_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUMBER}(?:\s*[-\u2013]\s*{_NUMBER})?"
_FIGURE = re.compile(
    rf"\b{_RANGE}x\b"
    rf"|\b{_RANGE}\s*k?(?:\s*[a-z]+)?/s\b"
    rf"|\b(?:{_NUMBER}\s*[-\u2013]\s*{_NUMBER}|\d[\d,]*\.\d+)\s*(?:ms|s|%)(?!\w)"
    rf"|\b{_RANGE}\s*(?:[KMGT]i?B|B/request)\b"
)


def _without_section(text: str, title: str) -> str:
    body = _section(text, title)
    return text.replace(f"## {title}\n{body}", "")


def test_the_readme_is_a_five_minute_read():
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, at most {README_MAX_LINES}: move detail to docs/"
    )


def test_the_readme_leaves_measured_figures_to_the_benchmarks_page():
    """The demo's own figures stay in "Try it"; everything measured lives in
    docs/benchmarks.md, which one line of the README points to."""
    text = README.read_text()
    figures = [
        f"{line.strip()!r}: {match.group(0)!r}"
        for line in _without_section(text, "Try it").splitlines()
        for match in _FIGURE.finditer(line)
    ]
    assert not figures, "measured figures in README.md; move them to docs/benchmarks.md:\n" + (
        "\n".join(figures)
    )
    pointers = [line for line in text.splitlines() if "benchmarks.md" in line]
    assert len(pointers) <= 1, f"more than one line points to docs/benchmarks.md: {pointers}"


def test_the_readme_says_how_to_activate_the_venv_before_its_first_bare_llmwh():
    text = README.read_text()
    assert ".venv/bin/llmwh" not in text, "say once how to activate .venv, then write llmwh"
    activate = text.find(". .venv/bin/activate")
    first = re.search(r"^llmwh ", text, re.M)
    assert activate >= 0 and first and activate < first.start(), (
        "README.md runs llmwh before it says to activate .venv (. .venv/bin/activate)"
    )


def test_the_figure_pattern_finds_what_the_benchmarks_write():
    for figure in (
        "6.7x",
        "1.6-1.9x",
        "239-244k/s",
        "79k requests/s",
        "33.6-36.8 ms",
        "32-46 s",
        "15.4%",
        "0.8 GB",
        "48.9 B/request",
        "(114-115x)",
    ):
        assert _FIGURE.search(figure), figure
    for setting in ("within 200 ms", "127.0.0.1:9201", "p95_ttft_ms", "--since 6h", "v1"):
        assert not _FIGURE.search(setting), setting


# -- (c) links ------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, '-' for ' '."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for _, heading in _HEADING.findall(_prose(path.read_text())):
        slug = _slug(heading)
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_every_relative_link_of_the_readme_and_docs_names_what_exists():
    broken = []
    for document in DOCUMENTS:
        for link in _LINK.findall(_prose(document.read_text())):
            if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # https:, mailto: ...
                continue
            target, _, anchor = link.partition("#")
            path = (document.parent / target).resolve() if target else document
            where = f"{document.relative_to(ROOT)}: ({link})"
            if not path.exists():
                broken.append(f"{where} names a file that does not exist")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{where} names a heading {path.name} does not have")
    assert not broken, "\n".join(broken)


def test_the_docs_index_names_every_page_once():
    index = ROOT / "docs" / "README.md"
    named = [link for link in _LINK.findall(_prose(index.read_text())) if "/" not in link]
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p != index)
    assert sorted(named) == pages, f"docs/README.md names {sorted(named)}, docs/ holds {pages}"


def test_no_file_cites_a_design_note_outside_the_repository():
    note = "DESIGN" + ".md"  # spelled apart, so that this file does not cite it
    roots = ["warehouse", "migrations", "tests", "docs", "exporters", "benchmarks", "fuzz"]
    files = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    files += [p for root in roots for p in (ROOT / root).rglob("*") if p.is_file()]
    citing = [
        str(p.relative_to(ROOT))
        for p in files
        if p.suffix not in (".so", ".pyc") and note in p.read_text(errors="replace")
    ]
    assert not citing, f"{note} is not in the repository; cite docs/ instead: {citing}"
