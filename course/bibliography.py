"""Sphinx extension (listed in _config.yml): the book's citations read "Xiong et al. (2020)", as in the prose.

sphinxcontrib-bibtex (Jupyter Book's citation support) cites author-year in square brackets and labels the
References page with alpha keys such as [XYT+20]. A reader of a textbook expects round brackets in the text
and the same "author, year" on the References page, so this module registers two small styles:

- formatting style `course` (`bibtex_default_style`): pybtex's `unsrt` entries, sorted by author and year,
  labelled "Xiong et al., 2020" (with a, b, ... where two labels would be the same), titles as the .bib file
  writes them (unsrt would lower-case "Big Bird" to "Big bird");
- referencing style `author_year_round` (`bibtex_reference_style`): {cite:t} gives "Xiong et al. (2020)",
  {cite:p} gives "(Xiong et al., 2020)", both read from the entry's label on the References page, so that a
  citation in the text is the label the reader finds in the list ("PyTorch contributors, 2026b", never a bare
  2026 that two entries share, nor an "and others" that the list calls "et al.").
"""

from __future__ import annotations

import dataclasses
import string
from collections import Counter

import pybtex.plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.template import field, sentence
from sphinx.application import Sphinx
from sphinxcontrib.bibtex.plugin import register_plugin
from sphinxcontrib.bibtex.style.referencing import BracketStyle, GroupReferenceStyle
from sphinxcontrib.bibtex.style.referencing.basic_author_year import (
    BasicAuthorYearParentheticalReferenceStyle,
    BasicAuthorYearTextualReferenceStyle,
)
from sphinxcontrib.bibtex.style.referencing.extra_empty import ExtraEmptyReferenceStyle
from sphinxcontrib.bibtex.style.template import entry_label, join, join2, node, post_text, pre_text, reference


def _round() -> BracketStyle:
    return BracketStyle(left="(", right=")", sep="; ")


def _label_parts(data) -> tuple[str, str]:
    """The entry's label on the References page, "Xiong et al., 2020a", as ("Xiong et al.", "2020a")."""
    author, _, year = data["formatted_entry"].label.rpartition(", ")
    return author, year


@node
def label_author(children, data) -> Text:
    """The authors part of the entry's label ("Xiong et al.")."""
    assert not children
    return Text(_label_parts(data)[0])


@node
def label_year(children, data) -> Text:
    """The year part of the entry's label, with its letter where two labels would be the same ("2026b")."""
    assert not children
    return Text(_label_parts(data)[1])


@dataclasses.dataclass
class LabelParentheticalStyle(BasicAuthorYearParentheticalReferenceStyle):
    """{cite:p}: "(Xiong et al., 2020)", the entry's label itself."""

    def inner(self, role_name: str):
        return join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[pre_text, reference[entry_label], post_text]


@dataclasses.dataclass
class LabelTextualStyle(BasicAuthorYearTextualReferenceStyle):
    """{cite:t}: "Xiong et al. (2020)", the label's two parts."""

    def inner(self, role_name: str):
        return join(sep=self.text_reference_sep)[
            label_author,
            join[self.bracket.left,
                 join2(sep1=self.pre_text_sep, sep2=self.post_text_sep)[pre_text, reference[label_year], post_text],
                 self.bracket.right],
        ]


@dataclasses.dataclass
class RoundAuthorYearReferenceStyle(GroupReferenceStyle):
    """Author-year citations in round brackets, read from the entries' labels: "Su et al. (2021)" and
    "(Su et al., 2021)"; the book uses no other citation role."""

    def __post_init__(self):
        self.styles.extend([LabelParentheticalStyle(bracket=_round()), LabelTextualStyle(bracket=_round()),
                            ExtraEmptyReferenceStyle()])
        super().__post_init__()


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

    def format_title(self, e, which_field, as_sentence=True):
        """The title as the .bib file writes it (unsrt lower-cases all but its first letter)."""
        title = field(which_field)
        return sentence[title] if as_sentence else title


def setup(app: Sphinx) -> dict:
    # Registered when the extension loads, before sphinxcontrib-bibtex looks the styles up at builder-inited.
    pybtex.plugin.register_plugin("pybtex.style.labels", "course_author_year", AuthorYearLabelStyle)
    pybtex.plugin.register_plugin("pybtex.style.formatting", "course", CourseStyle)
    register_plugin("sphinxcontrib.bibtex.style.referencing", "author_year_round", RoundAuthorYearReferenceStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
