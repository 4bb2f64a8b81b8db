"""The site's own Chinese font: Noto Sans CJK SC (SIL Open Font License 1.1, from Debian's `fonts-noto-cjk`),
cut down to exactly the Chinese characters that the pages use.

One subset, two containers: `_static/fonts/course-cjk.woff2` is what the site serves (web pages, tables and
MathJax's `\\text{}`), `_static/fonts/course-cjk.otf` the same glyphs for matplotlib, which cannot read WOFF2.
Both are build outputs (not in git): `make book` and every book build (the Sphinx extension `course.sphinxext`)
call `ensure_font`, which rebuilds them only when the set of characters changed.

Command line: `python scripts/build_font.py` (prints the size and the characters)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FONT_DIR = ROOT / "_static" / "fonts"
WOFF2 = FONT_DIR / "course-cjk.woff2"
OTF = FONT_DIR / "course-cjk.otf"
STAMP = FONT_DIR / "course-cjk.json"
LICENSE_FILE = FONT_DIR / "course-cjk-LICENSE.txt"
DEBIAN_COPYRIGHT = Path("/usr/share/doc/fonts-noto-cjk/copyright")
# The family name inside the subset and in the site's CSS. A name of its own, so that neither the browser nor
# matplotlib can confuse it with a full Noto Sans CJK installed on the machine (and, as the OFL asks of a
# modified version, it is not the original's name).
FAMILY = "Course CJK"
SOURCE_FAMILY = "Noto Sans CJK SC"
SOURCE_FILES = [
    Path("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc"),  # Debian/Ubuntu: fonts-noto-cjk
    Path("/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc"),  # Arch, Fedora
    Path("/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc"),
]
INSTALL_HINT = "install Debian's fonts-noto-cjk (sudo apt-get install fonts-noto-cjk; `make book` does it as root)"
LICENSE = "SIL Open Font License 1.1 (Noto Sans CJK, Copyright 2014-2021 Adobe)"
# What counts as a Chinese character: CJK symbols and punctuation, bopomofo, enclosed CJK, the unified
# ideographs and extension A, compatibility ideographs and forms, fullwidth forms. Also the CSS unicode-range.
CJK_RANGES = [(0x2E80, 0x2FDF), (0x3000, 0x303F), (0x3100, 0x312F), (0x3200, 0x33FF), (0x3400, 0x4DBF),
              (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0xFE30, 0xFE4F), (0xFF00, 0xFFEF)]
CJK = re.compile("[" + "".join(f"\\u{a:04x}-\\u{b:04x}" for a, b in CJK_RANGES) + "]")
# The files whose text reaches the site: every page, the book's configuration (title) and table of contents.
PAGE_GLOBS = ["*.md", "chapters/**/*.md", "guides/*.md", "_config.yml", "_toc.yml"]


def unicode_range() -> str:
    return ", ".join(f"U+{a:04X}-{b:04X}" for a, b in CJK_RANGES)


def site_characters(root: Path = ROOT) -> str:
    """Every Chinese character in the sources of the site's pages, sorted."""
    chars: set[str] = set()
    for pattern in PAGE_GLOBS:
        for path in root.glob(pattern):
            if any(part.startswith((".", "_build")) for part in path.relative_to(root).parts):
                continue
            chars.update(CJK.findall(path.read_text(encoding="utf-8")))
    return "".join(sorted(chars))


def find_source() -> Path:
    """The Noto Sans CJK collection on this machine, or FileNotFoundError saying how to install it."""
    for path in SOURCE_FILES:
        if path.is_file():
            return path
    if shutil.which("fc-match"):
        found = subprocess.run(["fc-match", "-f", "%{file}", f"{SOURCE_FAMILY}:style=Regular"],
                               capture_output=True, text=True).stdout.strip()
        if found.endswith("NotoSansCJK-Regular.ttc") and Path(found).is_file():
            return Path(found)
    raise FileNotFoundError(f"the site's Chinese font is cut from {SOURCE_FAMILY}, which is not installed: {INSTALL_HINT}")


def _stamp(chars: str, source: Path) -> str:
    return hashlib.sha256(f"{chars}|{source.name}|{source.stat().st_size}|v1".encode()).hexdigest()


def build_font(chars: str, source: Path, woff2: Path = WOFF2, otf: Path = OTF) -> None:
    """Cut `chars` (plus the space) out of the SC face of the collection and write both containers."""
    from fontTools import subset
    from fontTools.ttLib import TTCollection

    collection = TTCollection(str(source), lazy=True)
    font = next(f for f in collection.fonts if f["name"].getDebugName(1) == SOURCE_FAMILY)
    options = subset.Options()
    options.layout_features = []  # no vertical forms or locale variants: horizontal Simplified Chinese only
    options.hinting = False
    options.desubroutinize = True  # compresses better
    options.name_IDs = [0, 1, 2, 3, 4, 5, 6, 13, 14]  # keep the copyright and the licence
    options.name_languages = [0x409]
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=[ord(c) for c in chars + " "])
    subsetter.subset(font)
    name = font["name"]
    postscript = FAMILY.replace(" ", "")
    for record in list(name.names):
        if record.nameID in (1, 16):
            record.string = FAMILY
        elif record.nameID == 4:
            record.string = f"{FAMILY} Regular"
        elif record.nameID == 6:
            record.string = f"{postscript}-Regular"
        elif record.nameID == 3:
            record.string = f"{postscript}-Regular;subset of {SOURCE_FAMILY}"
    name.names = [r for r in name.names if r.nameID not in (16, 17)]
    font["CFF "].cff.fontNames = [f"{postscript}-Regular"]
    otf.parent.mkdir(parents=True, exist_ok=True)
    font.flavor = None
    font.save(str(otf))
    font.flavor = "woff2"
    font.save(str(woff2))
    write_license(name.getDebugName(0) or "")


def write_license(copyright_line: str) -> None:
    """The OFL travels with the font: its copyright line, what was changed, and the licence text."""
    text = ""
    if DEBIAN_COPYRIGHT.is_file():  # the licence as Debian ships it, in its copyright file
        m = re.search(r"^License: SIL-1\.1\n((?: .*\n?)+)", DEBIAN_COPYRIGHT.read_text(encoding="utf-8"), flags=re.M)
        if m:
            text = "\n".join("" if line.strip() == "." else line[1:] for line in m.group(1).splitlines())
    LICENSE_FILE.write_text(
        f"{FAMILY}: a subset of {SOURCE_FAMILY} (Noto CJK, https://github.com/notofonts/noto-cjk), cut to the\n"
        f"Chinese characters of this site and renamed, as the licence asks of a modified version.\n"
        f"Copyright: {copyright_line}\nLicence: {LICENSE}\n\n"
        + (text or "SIL Open Font License 1.1: https://openfontlicense.org\n"), encoding="utf-8")


def ensure_font(root: Path = ROOT, force: bool = False) -> dict:
    """Build the subset if the pages' characters changed since the last build; return what was served."""
    chars = site_characters(root)
    source = find_source()
    stamp = _stamp(chars, source)
    if force or not (WOFF2.is_file() and OTF.is_file() and LICENSE_FILE.is_file() and STAMP.is_file()
                     and json.loads(STAMP.read_text()).get("stamp") == stamp):
        build_font(chars, source)
        STAMP.write_text(json.dumps({"stamp": stamp, "characters": chars, "source": str(source)}, ensure_ascii=False))
    return {"characters": chars, "woff2": WOFF2, "otf": OTF, "woff2_bytes": WOFF2.stat().st_size,
            "otf_bytes": OTF.stat().st_size, "source": source}


def font_characters(path: Path) -> set[str]:
    """The characters a font file has glyphs for."""
    from fontTools.ttLib import TTFont

    return {chr(c) for c in TTFont(str(path)).getBestCmap()}
