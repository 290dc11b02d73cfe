"""The README and docs/ speak to users: short, every relative link resolves, no work history in any
prose or comment of the tree, and no performance figure outside a section rendered from results."""

from __future__ import annotations

import re

import pytest

from k3gen.review import figures

from support import ROOT

# What `k3gen test` selects this module by (k3gen.review.impact): the paths it reads besides k3gen/ and tests/.
READS = ("README.md", "docs/**", "bench/**")

MAX_README_LINES = 350
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# Work-history phrases: the git log is the history, the tree speaks of itself (built from parts so
# that this file does not contain them).
STOP = "st" + "op"
HISTORY = re.compile(
    rf"\b(this {STOP}|last {STOP}|{STOP} before|the {STOP}\b|{STOP}s ago|next {STOP}|work sessions?|"
    rf"this session|last session|earlier {STOP}s)",
    re.I,
)
# Prose and comments: the docs, every source and template, the specs, the bench scripts and results.
SCANNED = ("README.md", "docs", "k3gen", "templates", "tests", "bench", "specs", "generated", ".ci", "pyproject.toml")
TEXT_SUFFIXES = {
    ".md",
    ".py",
    ".j2",
    ".yaml",
    ".yml",
    ".json",
    ".jsonl",
    ".log",
    ".txt",
    ".h",
    ".cuh",
    ".cu",
    ".hip",
    ".sh",
    ".toml",
    ".cpp",
    "",
}
# A performance figure: a number with a time, a bandwidth or a ratio to a reference.
FIGURE = re.compile(r"\d(?:[\d.,]*)\s*(?:µs|us\b|ms\b|GB/s|% (?:of )?copy|× ?(?:compile|torch))")


def prose_files() -> list[str]:
    return figures.figure_files(ROOT)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[`*_]", lambda m: m.group(0) if m.group(0) == "_" else "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", FENCE.sub("", text), re.M)}


def links(text: str) -> list[str]:
    return [a or b for a, b in LINK.findall(FENCE.sub("", text))]


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < MAX_README_LINES, (
        f"README.md has {lines} lines; keep it under {MAX_README_LINES}, depth goes to docs/"
    )


@pytest.mark.parametrize("rel", [*prose_files(), figures.SUMMARY, "bench/trials/README.md"])
def test_every_relative_link_resolves(rel):
    text = (ROOT / rel).read_text(encoding="utf-8")
    for target in links(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (ROOT / rel).parent / path if path else ROOT / rel
        assert dest.exists(), f"{rel}: link to {target}: no such file"
        if anchor:
            assert dest.suffix == ".md", f"{rel}: anchor {target} into a file that is not Markdown"
            assert anchor in anchors(dest.read_text(encoding="utf-8")), (
                f"{rel}: no heading for #{anchor} in {path or rel}"
            )


def test_the_slug_is_githubs():
    assert slug("## 3. route_topk: top-K routing, every router a spec".lstrip("# ")) == (
        "3-route_topk-top-k-routing-every-router-a-spec"
    )
    assert slug("Host cost per eager call (M = 1)") == "host-cost-per-eager-call-m--1"
    assert slug("`k3gen build` and `k3gen check`") == "k3gen-build-and-k3gen-check"


def test_no_work_history_in_the_tree():
    found = []
    for top in SCANNED:
        base = ROOT / top
        paths = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in paths:
            if path.suffix not in TEXT_SUFFIXES or path == ROOT / "tests/test_docs_links.py":
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            for m in HISTORY.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}")
    assert not found, "work history belongs in the git log:\n" + "\n".join(found)


@pytest.mark.parametrize("rel", prose_files())
def test_every_performance_figure_is_rendered_from_a_results_file(rel):
    text = (ROOT / rel).read_text(encoding="utf-8")
    outside = figures.SECTION.sub("", text)
    stray = [line for line in outside.splitlines() if FIGURE.search(line)]
    assert not stray, (
        f"{rel}: figures outside a `k3gen:figures` section (render them from bench/results):\n" + "\n".join(stray)
    )


def test_the_cli_page_has_every_command():
    from k3gen.cli import COMMANDS

    page = (ROOT / "docs/cli.md").read_text(encoding="utf-8")
    for name in COMMANDS:
        assert f"`k3gen {name}" in page, f"docs/cli.md does not describe `k3gen {name}`"
