"""Sphinx extension (listed in _config.yml): the book's citations read "Xiong et al. (2020)", as in the prose.

sphinxcontrib-bibtex (Jupyter Book's citation support) cites author-year in square brackets and labels the
References page with alpha keys such as [XYT+20]. A reader of a textbook expects round brackets in the text
and the same "author, year" on the References page, so this module registers two small styles:

- referencing style `author_year_round` (`bibtex_reference_style`): {cite:t} gives "Xiong et al. (2020)",
  {cite:p} gives "(Xiong et al., 2020)";
- formatting style `course` (`bibtex_default_style`): pybtex's `unsrt` entries, sorted by author and year,
  labelled "Xiong et al., 2020" (with a, b, ... where two labels would be the same).
"""

from __future__ import annotations

import dataclasses
import string
from collections import Counter

import pybtex.plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from sphinx.application import Sphinx
from sphinxcontrib.bibtex.plugin import register_plugin
from sphinxcontrib.bibtex.style.referencing import BracketStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle


def _round() -> BracketStyle:
    return BracketStyle(left="(", right=")", sep="; ")


@dataclasses.dataclass
class RoundAuthorYearReferenceStyle(AuthorYearReferenceStyle):
    """Author-year citations in round brackets: "Su et al. (2021)" and "(Su et al., 2021)"."""

    bracket_textual: BracketStyle = dataclasses.field(default_factory=_round)
    bracket_parenthetical: BracketStyle = dataclasses.field(default_factory=_round)
    bracket_author: BracketStyle = dataclasses.field(default_factory=_round)
    bracket_label: BracketStyle = dataclasses.field(default_factory=_round)
    bracket_year: BracketStyle = dataclasses.field(default_factory=_round)


def _authors(entry) -> str:
    """"Vaswani et al.", "Hochreiter and Schmidhuber" or "Shazeer": the names a reader looks up."""
    people = entry.persons.get("author", [])
    surnames = [" ".join(p.last_names) or " ".join(p.first_names) for p in people]
    surnames = [s.replace("{", "").replace("}", "") for s in surnames]
    if not surnames:
        return entry.fields.get("title", "Anonymous")
    if len(surnames) == 1:
        return surnames[0]
    if len(surnames) == 2 and not (len(people) == 2 and str(people[1]) == "others"):
        return f"{surnames[0]} and {surnames[1]}"
    return f"{surnames[0]} et al."


class AuthorYearLabelStyle(BaseLabelStyle):
    """Labels "Xiong et al., 2020" on the References page; equal labels get a, b, ... after the year."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        bases = [f"{_authors(e)}, {e.fields.get('year', 'n.d.')}" for e in entries]
        repeated = {base for base, count in Counter(bases).items() if count > 1}
        seen: Counter = Counter()
        for base in bases:
            if base in repeated:
                yield base + string.ascii_lowercase[seen[base]]
                seen[base] += 1
            else:
                yield base


class CourseStyle(UnsrtStyle):
    """pybtex's unsrt entries, sorted by author, year and title, with author-year labels."""

    default_label_style = "course_author_year"
    default_sorting_style = "author_year_title"


def setup(app: Sphinx) -> dict:
    # Registered when the extension loads, before sphinxcontrib-bibtex looks the styles up at builder-inited.
    pybtex.plugin.register_plugin("pybtex.style.labels", "course_author_year", AuthorYearLabelStyle)
    pybtex.plugin.register_plugin("pybtex.style.formatting", "course", CourseStyle)
    register_plugin("sphinxcontrib.bibtex.style.referencing", "author_year_round", RoundAuthorYearReferenceStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
