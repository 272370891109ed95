"""README.md, docs/*.md and results/README.md: every relative link resolves, and every figure a link quotes (its text
holds a figure such as 182 ms, 0.9636 or 14.41x) appears verbatim in the file it links. README's headline tables
quote every ms/step, speedup and peak-memory figure through such a link. CPU only, no imports of the code."""
import glob
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", "results/README.md"] + sorted(os.path.relpath(p, REPO)
                                                   for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
FIGURE = re.compile(r"\d+\.\d+|\d+(?:x| ?(?:ms|s|GiB|%))(?!\w)")   # 12.6, 182 ms, 14.41x; not H200 or 2 GPUs
HEADLINE_COLUMNS = ("ms/step (median)", "speedup", "peak memory")


def _links(page):
    """(line number, text, target path) of every relative link of a page, the target resolved against its folder."""
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        lines = f.read().splitlines()
    found = []
    for number, line in enumerate(lines, 1):
        for text, target in LINK.findall(line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue                                  # http(s), mailto, anchors within the page
            path = os.path.normpath(os.path.join(os.path.dirname(page), target.split("#")[0]))
            found.append((number, text.replace("*", "").strip(), path))
    return found


def _read(path):
    with open(os.path.join(REPO, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def _headline_cells(readme):
    """(header, cell) of the figure columns of every table under a '## Headline' heading of README."""
    cells, section, header = [], "", None
    for line in readme.splitlines():
        if line.startswith("## "):
            section, header = line, None
        elif section.startswith("## Headline") and line.startswith("|"):
            row = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = row
            elif not set(line) <= set("|-: "):
                cells += [(name, cell) for name, cell in zip(header, row) if name in HEADLINE_COLUMNS]
        else:
            header = None if not line.startswith("|") else header
    return cells


def test_pages_exist_and_stay_short():
    assert "docs/speed.md" in PAGES
    for page in PAGES:
        lines = _read(page).count("\n")
        assert lines <= 300, f"{page}: {lines} lines (a page holds at most 300)"


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_resolves(page):
    missing = [f"{page}:{n}: [{text}] -> {path}" for n, text, path in _links(page)
               if not os.path.exists(os.path.join(REPO, path))]
    assert not missing, "links to nothing:\n" + "\n".join(missing)


@pytest.mark.parametrize("page", PAGES)
def test_every_linked_figure_is_in_its_record(page):
    wrong = [f"{page}:{n}: '{text}' not in {path}" for n, text, path in _links(page)
             if FIGURE.search(text) and os.path.isfile(os.path.join(REPO, path)) and text not in _read(path)]
    assert not wrong, "figures their records do not hold:\n" + "\n".join(wrong)


def test_readme_headline_figures_link_to_records_in_results():
    cells = _headline_cells(_read("README.md"))
    assert len(cells) >= 18, "README's two headline tables (blog's and upstream's workload) were not found"
    for name, cell in cells:
        links = LINK.findall(cell)
        assert links, f"headline {name} cell '{cell}' quotes no record"
        for text, target in links:
            assert target.startswith("results/"), f"headline figure '{text}' links outside results/: {target}"
            assert FIGURE.search(text.replace("*", "")), f"headline link '{text}' holds no figure"


def _index_claims(index_text, pages):
    """(folder, page) of each results/README.md index row whose last column names a page (README, docs/NAME.md)
    that holds no link into that folder; pages: {name: text}."""
    wrong = []
    for line in index_text.splitlines():
        row = re.match(r"\| \[([^\]]+/)\]\([^)]+\) \|", line)
        if row:
            cited_by = [c.strip() for c in line.strip().strip("|").split("|")[-1].split(",")]
            wrong += [(row.group(1), page) for page in cited_by
                      if page in pages and f"results/{row.group(1)}" not in pages[page]]
    return wrong


def test_the_results_index_names_only_pages_that_cite_each_folder():
    pages = {"README": _read("README.md"), **{p: _read(p) for p in PAGES if p.startswith("docs/")}}
    wrong = _index_claims(_read("results/README.md"), pages)
    assert not wrong, "results/README.md says these pages cite these folders; they do not:\n" + "\n".join(
        f"{folder}: {page}" for folder, page in wrong)
    assert _index_claims("| [a/b/](a/b/x.md) | H100 | `c` | README, docs/x.md |", {"README": "results/a/b/y",
                                                                                   "docs/x.md": ""}) == [("a/b/", "docs/x.md")]


def test_the_checks_catch_a_broken_link_and_a_drifted_figure(tmp_path, monkeypatch):
    """The checker itself: a link to a missing file and a figure its record lacks are both reported."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.md").write_text("| fast | 12.6 ms | 14.41x |\n")
    (tmp_path / "README.md").write_text("[12.6 ms](results/r.md) [12.7 ms](results/r.md) [gone](results/no.md)\n")
    monkeypatch.setattr(__import__(__name__), "REPO", str(tmp_path))
    links = _links("README.md")
    assert [p for _, _, p in links if not os.path.exists(os.path.join(str(tmp_path), p))] == ["results/no.md"]
    assert [t for _, t, p in links if FIGURE.search(t) and t not in _read(p)] == ["12.7 ms"]
