"""The bibliography: every source the pages rely on is cited with a link, and a wrong key stops the build.

Two kinds of test. A tiny fixture book (one page, no code) shows that the strict build (`--warningiserror`, what
CI runs) fails on a citation key missing from the .bib file, and passes with a known key. Static checks over the
book's sources show that every cited key is in chapters/references.bib, every entry there is cited and has a
link (`url` or `doi`), and that no paragraph names "X et al." without a citation role; each check is first shown
to fail on a fixture that breaks it.
"""

import re
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from pybtex.database import parse_file, parse_string

from conftest import BUILD_DIR, ROOT, run_python

BIB = ROOT / "chapters" / "references.bib"
# The pages of the book: every Markdown source listed in _toc.yml lives in these places.
PAGE_GLOBS = ["intro.md", "chapters/*.md", "chapters/*/index.md", "chapters/*/exercises-guide.md", "guides/*.md"]
CITE_ROLE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]*)`")
FENCE = re.compile(r"^(`{3,}|~{3,}|:{3,})")


def page_sources() -> dict[str, str]:
    pages = {}
    for pattern in PAGE_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            pages[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return pages


def cited_keys(text: str) -> set[str]:
    """The keys of every {cite}, {cite:t}, {cite:p}, ... role; one role may cite several keys, comma-separated."""
    return {key.strip() for keys in CITE_ROLE.findall(text) for key in keys.split(",") if key.strip()}


def prose_paragraphs(text: str) -> list[str]:
    """The Markdown paragraphs of a page (blank-line separated), leaving out code: code is not prose.

    A fence opens code when it is plain or names a language or {code-cell}; a directive fence ({admonition},
    {note}, ...) holds prose and is only a paragraph break. The fences of open directives are kept on a stack,
    so that a bare closing fence closes the directive, not opens code.
    """
    paragraphs, current, directives, code_fence = [], [], [], None

    def flush():
        if current:
            paragraphs.append("\n".join(current))
            current.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if code_fence:
            if stripped == code_fence:
                code_fence = None
            continue
        fence = FENCE.match(stripped)
        if fence:
            flush()
            marks = stripped[: len(stripped) - len(stripped.lstrip(stripped[0]))]
            info = stripped[len(marks):].strip()
            if not info and directives and directives[-1] == marks:
                directives.pop()
            elif info.startswith("{") and not info.startswith(("{code-cell}", "{code-block}", "{code}")):
                directives.append(marks)
            else:
                code_fence = marks
            continue
        if stripped:
            current.append(line)
        else:
            flush()
    flush()
    return paragraphs


def uncited_mentions(text: str) -> list[str]:
    """Paragraphs that name a work "X et al." but carry no citation role: the reader gets no link."""
    return [p for p in prose_paragraphs(text) if re.search(r"\bet al\b", p) and not CITE_ROLE.search(p)]


def unlinked_entries(bib) -> list[str]:
    return [key for key, entry in bib.entries.items() if not (entry.fields.get("url") or entry.fields.get("doi"))]


# ---------------------------------------------------------------------------------------------------------------
# Static checks, each shown to fail on a fixture first.

def test_uncited_et_al_is_caught_on_a_fixture():
    page = textwrap.dedent("""\
        Some text.

        Xiong et al. (2020) showed that Post-LN needs a warm-up.

        ```{code-cell} ipython3
        # Xiong et al. in a comment is code, not prose
        ```

        ```{admonition} A note
        Voita et al. 2019 found specialised heads.
        ```

        {cite:t}`xiong2020layer` showed it too; as did Press et al.
        """)
    assert uncited_mentions(page) == ["Xiong et al. (2020) showed that Post-LN needs a warm-up.",
                                      "Voita et al. 2019 found specialised heads."]
    assert uncited_mentions(page.replace("(2020)", "{cite:p}`xiong2020layer`")) == [
        "Voita et al. 2019 found specialised heads."]


def test_unknown_and_unlinked_keys_are_caught_on_a_fixture():
    bib = parse_string(textwrap.dedent("""\
        @misc{linked, title = {A}, author = {Doe, Jane}, year = {2020}, url = {https://arxiv.org/abs/0000.00000}}
        @misc{unlinked, title = {B}, author = {Roe, Rick}, year = {2021}}
        """), "bibtex")
    page = "As {cite:t}`linked` and {cite:p}`linked,missing2099` show."
    assert cited_keys(page) == {"linked", "missing2099"}
    assert cited_keys(page) - set(bib.entries) == {"missing2099"}
    assert set(bib.entries) - cited_keys(page) == {"unlinked"}
    assert unlinked_entries(bib) == ["unlinked"]


def test_every_cited_key_is_in_the_bibliography_and_every_entry_is_cited():
    bib = parse_file(str(BIB))
    pages = page_sources()
    assert "chapters/references.md" in pages and "{bibliography}" in pages["chapters/references.md"]
    cited = set().union(*(cited_keys(text) for text in pages.values()))
    assert not cited - set(bib.entries), f"cited but not in {BIB.name}: {sorted(cited - set(bib.entries))}"
    assert not set(bib.entries) - cited, f"in {BIB.name} but cited nowhere: {sorted(set(bib.entries) - cited)}"
    # Most of the entries are cited on a chapter page, not only on the References page's own example.
    in_chapters = set().union(*(cited_keys(t) for p, t in pages.items() if p != "chapters/references.md"))
    assert in_chapters == set(bib.entries)


def test_every_entry_has_a_link():
    bib = parse_file(str(BIB))
    assert not unlinked_entries(bib), f"entries without url or doi: {unlinked_entries(bib)}"
    for key, entry in bib.entries.items():
        url = entry.fields.get("url", "")
        assert not url or url.startswith("https://"), f"{key}: {url}"
        if "arxiv.org" in url:
            assert re.fullmatch(r"https://arxiv\.org/abs/\d{4}\.\d{4,5}", url), f"{key}: not an arXiv abstract page: {url}"


def test_no_page_names_a_work_by_et_al_without_citing_it():
    bad = {path: found for path, text in page_sources().items() if (found := uncited_mentions(text))}
    assert not bad, f"'et al.' without a citation role in the same paragraph: {bad}"


# ---------------------------------------------------------------------------------------------------------------
# The strict build fails on an unknown key: a one-page book, no code cells, so it builds in seconds.

FIXTURE_CONFIG = """\
title: Citation fixture
only_build_toc_files: true
execute:
  execute_notebooks: "off"
bibtex_bibfiles: ["refs.bib"]
sphinx:
  extra_extensions: [course.bibliography]
  config:
    bibtex_reference_style: author_year_round
    bibtex_default_style: course
"""
FIXTURE_TOC = """\
format: jb-book
root: index
chapters:
  - file: references
"""
FIXTURE_BIB = """\
@misc{known2020,
  author = {Doe, Jane and Roe, Rick and Poe, Pat},
  title  = {A Known Paper},
  year   = {2020},
  url    = {https://arxiv.org/abs/1706.03762},
}
"""


def build_fixture(tmp_path: Path, key: str, bib: str = FIXTURE_BIB, text: str | None = None):
    book = tmp_path / "book"
    book.mkdir()
    (book / "_config.yml").write_text(FIXTURE_CONFIG)
    (book / "_toc.yml").write_text(FIXTURE_TOC)
    (book / "refs.bib").write_text(bib)
    (book / "index.md").write_text(text or f"# Fixture\n\nAs {{cite:t}}`{key}` showed, citations link.\n")
    (book / "references.md").write_text("# References\n\n```{bibliography}\n```\n")
    jb = shutil.which("jupyter-book", path=str(Path(sys.executable).parent)) or shutil.which("jupyter-book")
    assert jb, "jupyter-book is not on PATH"
    result = run_python(jb, "build", str(book), "--warningiserror", cwd=tmp_path, timeout=300)
    return result, book


def test_strict_build_fails_on_an_unknown_citation_key(tmp_path):
    result, _ = build_fixture(tmp_path, "unknown2099")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "unknown2099" in output, output[-3000:]


def test_strict_build_passes_with_a_known_key_and_cites_author_year(tmp_path):
    result, book = build_fixture(tmp_path, "known2020")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    page = (book / "_build" / "html" / "index.html").read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", page)
    assert "Doe et al. (2020)" in text       # course.bibliography: round brackets, as the prose reads
    refs = re.sub(r"<[^>]+>", "", (book / "_build" / "html" / "references.html").read_text(encoding="utf-8"))
    assert "Doe et al., 2020" in refs and "https://arxiv.org/abs/1706.03762" in refs


def test_the_site_lists_every_entry_with_its_link(built_book):
    """On the built site, the References page has one entry per .bib entry, each with its link."""
    bib = parse_file(str(BIB))
    html = (BUILD_DIR / "_build" / "html" / "chapters" / "references.html").read_text(encoding="utf-8")
    for key, entry in bib.entries.items():
        link = entry.fields.get("url") or "https://doi.org/" + entry.fields["doi"]
        assert f'href="{link}"' in html, f"{key}: {link} is not linked on the References page"


# ---------------------------------------------------------------------------------------------------------------
# Citation labels: what the text says is what the list says.

LABEL_BIB = FIXTURE_BIB + """
@misc{docs_a, author = {{PyTorch contributors}}, title = {torch.nn.MultiheadAttention}, year = {2026},
  url = {https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html}}
@misc{docs_b, author = {{PyTorch contributors}}, title = {torch.nn.LayerNorm}, year = {2026},
  url = {https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html}}
@misc{two_and_others, author = {Vaswani, Ashish and others}, title = {Big Bird and {Tensor2Tensor}}, year = {2018},
  url = {https://arxiv.org/abs/1803.07416}}
"""
LABEL_PAGE = """# Fixture

Parenthetical {cite:p}`docs_a,docs_b`, textual {cite:t}`docs_b`, {cite:t}`two_and_others` and
{cite:p}`two_and_others`, {cite:p}`known2020`.
"""


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def citations(html: str) -> list[str]:
    """The citations in a page's text, one per cited entry, as the reader sees them: "(A, 2026a; B, 2020)"
    gives "A, 2026a" and "B, 2020", a textual "A (2026a)" gives itself."""
    found = []
    for span in re.findall(r'<span class="bibtex-citation"[^>]*>(.*?)</span>', html, re.S):
        text = text_of(span).strip()
        found += text[1:-1].split("; ") if text.startswith("(") and text.endswith(")") else [text]
    return found


def list_labels(references_html: str) -> list[str]:
    """The labels of the References page's entries."""
    return [text_of(t) for t in re.findall(r'<span class="label"><span class="fn-bracket">\[</span>(.*?)'
                                           r'<span class="fn-bracket">\]</span></span>', references_html, re.S)]


def labels_not_in_list(cited: list[str], labels: list[str]) -> list[str]:
    """In-text citations that are not a label of the list: parenthetical ones are the label, textual ones
    "authors (year)" with the label's two parts."""
    as_labels = [re.sub(r"^(.*) \((.*)\)$", r"\1, \2", c) for c in cited]
    return [c for c, label in zip(cited, as_labels) if label not in labels]


def test_citations_in_the_text_are_the_labels_of_the_list(tmp_path):
    """Two entries with the same authors and year are 2026a and 2026b in the text too; "Vaswani and others"
    reads "Vaswani et al." as in the list; titles keep their capitals ("Big Bird", "MultiheadAttention").
    sphinxcontrib-bibtex's own author-year style (author and year read apart) fails the same check."""
    result, book = build_fixture(tmp_path, "", bib=LABEL_BIB, text=LABEL_PAGE)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    html = book / "_build" / "html"
    references = (html / "references.html").read_text(encoding="utf-8")
    cited, labels = citations((html / "index.html").read_text(encoding="utf-8")), list_labels(references)
    # sorted by author, year and title: LayerNorm (docs_b) before MultiheadAttention (docs_a)
    assert sorted(labels) == ["Doe et al., 2020", "PyTorch contributors, 2026a", "PyTorch contributors, 2026b",
                              "Vaswani et al., 2018"]
    assert cited == ["PyTorch contributors, 2026a", "PyTorch contributors, 2026b", "PyTorch contributors (2026a)",
                     "Vaswani et al. (2018)", "Vaswani et al., 2018", "Doe et al., 2020"]
    assert not labels_not_in_list(cited, labels)
    assert "torch.nn.MultiheadAttention" in text_of(references) and "Big Bird and Tensor2Tensor" in text_of(references)
    # what sphinxcontrib-bibtex's author-year style wrote in the text, against the same list
    old = ["PyTorch contributors, 2026", "PyTorch contributors, 2026", "PyTorch contributors (2026)",
           "Vaswani and others (2018)", "Vaswani and others, 2018", "Doe et al., 2020"]
    assert labels_not_in_list(old, labels) == old[:5]


def test_every_citation_on_the_site_is_a_label_of_the_references_page(built_book):
    html = BUILD_DIR / "_build" / "html"
    references = (html / "chapters" / "references.html").read_text(encoding="utf-8")
    labels = list_labels(references)
    assert len(labels) == len(set(labels)) == len(parse_file(str(BIB)).entries)
    assert "Big Bird" in text_of(references) and "Torch.nn" not in text_of(references)
    wrong, count = {}, 0
    for page in sorted(html.rglob("*.html")):
        cited = citations(page.read_text(encoding="utf-8"))
        count += len(cited)
        if found := labels_not_in_list(cited, labels):
            wrong[str(page.relative_to(html))] = found
    assert count > 50 and not wrong
