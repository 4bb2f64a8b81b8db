"""The site as readers meet it: every page of the book opened in headless Chromium at desktop (1400 px) and
phone (390 px) width, served from 127.0.0.1, with no Chinese system font visible to the browser. On every page:

- no horizontal overflow (the page is never wider than the window; wide tables and formulas scroll inside
  their own box, and no box clips content without scrolling);
- every figure fits its column; at desktop width none is shown at less than 1/1.5 of its natural width (nor its
  text smaller than the small print); on a phone each is scaled to the screen and is a link to its full-size image;
- no JavaScript error (uncaught exceptions, failed loads of scripts, styles or fonts, console.error);
- every Chinese character on the site is in the web font the site serves, and the page loaded that font;
- every formula typeset by MathJax, without TeX errors or TeX commands shown as text (`\\text{max\\_norm}`);
- at desktop width, no display equation wider than its column (long ones are split across lines).

Each rule is also shown to fail on a small page made to break it (the `test_probe_catches_*` tests).

The build checked is `$COURSE_BUILD_DIR/_build/html` (default: the repository's own `_build`); the session
fixture `built_book` (conftest.py) builds it strictly first."""

import base64
import fcntl
import functools
import http.server
import json
import os
import re
import select
import shutil
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
from fontTools.ttLib import TTFont
from PIL import Image

from conftest import BUILD_DIR, CLASS_HTML, ROOT
from test_book import toc_files
from course.figures import MAX_SHRINK, MIN_TEXT_KEY

HTML = BUILD_DIR / "_build" / "html"
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium (`make test` installs it as root)")
PROBE = (Path(__file__).parent / "site_probe.js").read_text(encoding="utf-8")
WIDTHS = {"desktop": (1400, 900), "phone": (390, 844)}
FIXTURES_DIR: Path | None = None  # where /fixtures/ is served from (set by the `site` fixture)
# What counts as a Chinese character: CJK symbols and punctuation, the unified ideographs (and extension A),
# compatibility ideographs and forms, fullwidth forms. The same ranges as the web font's unicode-range.
CJK = re.compile("[\u2e80-\u2fdf\u3000-\u303f\u3100-\u312f\u3200-\u33ff\u3400-\u4dbf\u4e00-\u9fff"
                 "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]")
FONT_FAMILY = "Course CJK"
FONT = HTML / "_static" / "fonts" / "course-cjk.woff2"


class Site:
    """The build served on 127.0.0.1 (port chosen by the OS), and test fixtures under /fixtures/."""

    def __init__(self, html_dir: Path, fixtures: Path):
        class Handler(http.server.SimpleHTTPRequestHandler):
            def translate_path(self, path):
                if path.startswith("/fixtures/"):
                    return str(fixtures / path.split("?")[0][len("/fixtures/"):])
                return super().translate_path(path)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(html_dir)))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def fontconfig_without_cjk(folder: Path) -> Path:
    """A fontconfig that shows the browser only Latin system fonts: the Chinese must come from the site."""
    dirs = [d for d in ("/usr/share/fonts/truetype/dejavu", "/usr/share/fonts/truetype/liberation") if Path(d).is_dir()]
    conf = folder / "fonts.conf"
    conf.write_text('<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>\n'
                    + "".join(f"  <dir>{d}</dir>\n" for d in dirs)
                    + f"  <cachedir>{folder / 'fc-cache'}</cachedir>\n</fontconfig>\n")
    return conf


class Browser:
    """Headless Chromium driven through the DevTools protocol on a pipe (no port, no extra package).

    Every wait is bounded: a command's answer, the load event and the probe's report each have a deadline."""

    def __init__(self, profile: Path, fonts_conf: Path | None = None):
        to_browser, self._out = os.pipe()
        self._in, from_browser = os.pipe()

        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(profile)}
        if fonts_conf:
            env["FONTCONFIG_FILE"] = str(fonts_conf)
        args = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--hide-scrollbars", "--no-first-run", f"--user-data-dir={profile / 'chromium'}",
                "--remote-debugging-pipe", "about:blank"]
        # The protocol pipe is fd 3 (commands in) and fd 4 (answers out) in Chromium; bash puts them there, from
        # copies numbered 10 and up (so that moving one cannot overwrite the other).
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser, from_browser)]
        for fd in (to_browser, from_browser):
            os.close(fd)
        to_browser, from_browser = high
        self.proc = subprocess.Popen(
            ["bash", "-c", f'exec "$@" 3<&{to_browser} 4>&{from_browser}', "bash", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(profile / "chromium.log", "wb"),
            pass_fds=(to_browser, from_browser), env=env)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call("Page.addScriptToEvaluateOnNewDocument", session=True, source=PROBE)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._in], [], [], left)[0]:
                raise TimeoutError("no answer from Chromium in time")
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the protocol pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: bool = False, timeout: float = 60, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def open(self, url: str, width: str, timeout: float = 60) -> tuple[dict, list[str]]:
        """Load url at the given width; return the probe's report ({} if the page never got ready) and the
        JavaScript errors (uncaught exceptions, console.error, failed loads) seen while loading it."""
        w, h = WIDTHS[width]
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=w, height=h, deviceScaleFactor=1,
                  mobile=width == "phone")
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        try:
            result = self.call("Runtime.evaluate", session=True, timeout=timeout, expression="window.__siteProbe",
                               awaitPromise=True, returnByValue=True)
            report = result.get("result", {}).get("value") or {}
        except TimeoutError:
            report = {}
        return report, self.errors()

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                d = params["exceptionDetails"]
                found.append((d.get("exception", {}).get("description") or d.get("text", "")).split("\n")[0]
                             + f" ({d.get('url', '')}:{d.get('lineNumber', 0) + 1})")
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append("console.error: " + " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(f"{params['entry']['text']} {params['entry'].get('url', '')}".strip())
        return found

    def screenshot(self, path: Path, url: str, width: str):
        self.open(url, width)
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._in)
        os.close(self._out)


def font_chars(font: Path) -> set[str]:
    return {chr(c) for c in TTFont(font).getBestCmap()}


def smallest_text_px(url: str) -> float | None:
    """The height of a figure's smallest text, in the PNG's pixels, as the course's figure style recorded it in
    the PNG (course/figures.py); None for an image without that record."""
    path = urllib.parse.urlparse(url).path
    local = (FIXTURES_DIR / path[len("/fixtures/"):]) if path.startswith("/fixtures/") and FIXTURES_DIR else HTML / path.lstrip("/")
    if not local.is_file() or local.suffix != ".png":
        return None
    with Image.open(local) as image:
        value = image.text.get(MIN_TEXT_KEY)
    return float(value) if value else None


def problems(report: dict, errors: list[str], served: set[str]) -> dict[str, list[str]]:
    """The rules a page breaks, by rule: overflow, image, javascript, chinese, formula (or ready)."""
    found: dict[str, list[str]] = {}
    for error in errors:
        found.setdefault("javascript", []).append(error)
    if not report:
        found.setdefault("ready", []).append("the page did not get ready in time (no probe report)")
        return found
    ov = report["overflow"]
    if ov["page"] > ov["viewport"] + 1:
        found.setdefault("overflow", []).append(f"page is {ov['page']}px wide in a {ov['viewport']}px window: {ov['culprits']}")
    for clip in ov["clipped"]:
        found.setdefault("overflow", []).append(f"clipped without a scrollbar: {clip}")
    desktop = report["width"] == WIDTHS["desktop"][0]
    for img in report["images"]:
        if img["shown"] > img["column"] + 1 or img["right"] > report["width"] + 1:
            found.setdefault("image", []).append(
                f"{img['src']} is shown {img['shown']}px wide in a {img['column']}px column (right edge at "
                f"{img['right']}px of {report['width']}px): it does not fit, it scrolls or is cut")
        if not desktop and not img["fullSize"]:  # a phone: the figure fits the screen, the full size is a tap away
            found.setdefault("image", []).append(f"{img['src']} is not a link to its full-size image")
        if desktop:  # at the book's content width: figures readable as they are
            if img["natural"] > MAX_SHRINK * img["shown"] + 1:
                found.setdefault("image", []).append(
                    f"{img['src']} is {img['natural']}px wide, shown at {img['shown']}px ({img['natural'] / img['shown']:.2f}x smaller)")
            text_px = smallest_text_px(img["url"])
            if text_px is not None and text_px * img["shown"] / img["natural"] < report["smallPrint"] - 0.25:
                found.setdefault("image", []).append(
                    f"{img['src']}: its smallest text is {text_px * img['shown'] / img['natural']:.1f}px as shown "
                    f"({text_px:.1f}px in the PNG, shown at {img['shown'] / img['natural']:.2f}x), smaller than the "
                    f"body's small print ({report['smallPrint']:.1f}px)")
    chinese = set(CJK.findall(report["text"]))
    missing = sorted(chinese - served)
    if missing:
        found.setdefault("chinese", []).append(f"not in the served font: {''.join(missing)}")
    if chinese:
        status = [f["status"] for f in report["fonts"] if f["family"] == FONT_FAMILY]
        if "loaded" not in status:
            found.setdefault("chinese", []).append(f"the page did not load the web font {FONT_FAMILY!r} ({status})")
    if report["untypeset"]:
        found.setdefault("formula", []).append(
            f"{len(report['untypeset'])} of {report['formulas']} formulas not typeset, e.g. {report['untypeset'][:3]}")
    if report["texErrors"]:
        found.setdefault("formula", []).append(f"TeX errors: {report['texErrors'][:3]}")
    if report["rawTex"]:
        found.setdefault("formula", []).append(f"TeX commands shown as text: {report['rawTex'][:3]}")
    if desktop:  # on a phone a long equation scrolls inside its own box; at desktop width it must fit
        for eq in report["wideEquations"]:
            found.setdefault("equation", []).append(
                f"display equation {eq['width']}px wide in a {eq['column']}px column: {eq['tex']}")
    return found


@pytest.fixture(scope="module")
def site(built_book, tmp_path_factory):
    global FIXTURES_DIR
    fixtures = FIXTURES_DIR = tmp_path_factory.mktemp("fixtures")
    served = Site(HTML, fixtures)
    yield served, fixtures
    served.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    folder = tmp_path_factory.mktemp("browser")
    chromium = Browser(folder, fontconfig_without_cjk(folder))
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def served_chars(built_book):
    assert FONT.is_file(), f"the site serves no Chinese web font ({FONT})"
    return font_chars(FONT)


def check(browser, url: str, served: set[str]) -> dict[str, dict[str, list[str]]]:
    """The problems of one page at each width."""
    return {width: problems(*browser.open(url, width), served) for width in WIDTHS}


@needs_browser
def test_every_page_as_readers_meet_it(site, browser, served_chars):
    server, _ = site
    pages = [f"{f}.html" for f in toc_files()] + ["search.html"]
    found = []
    for page in pages:
        for width, rules in check(browser, server.url + page, served_chars).items():
            found += [f"{page} @ {width}: [{rule}] {m}" for rule, messages in rules.items() for m in messages]
    assert not found, "\n".join(found)


@needs_browser
def test_the_class_edition_as_readers_meet_it(class_book, browser, served_chars, tmp_path_factory):
    """The class edition (tests/test_class_edition.py) is the full site but for what it says about running pages
    and its archive: every page whose HTML differs from the full edition's, and its search page, is opened under
    the same rules (the others are the full edition's pages, checked above)."""
    pages = [f"{f}.html" for f in toc_files()]

    def page(html_dir: Path, name: str) -> str:
        """A page less the ?v= checksums Sphinx adds to the links of static files that existed when it wrote it."""
        return re.sub(r"\?v=[0-9a-f]+", "", (html_dir / name).read_text(encoding="utf-8"))

    differing = [p for p in pages if page(CLASS_HTML, p) != page(HTML, p)]
    chapters = [p for p in pages if re.fullmatch(r"chapters/\d\d-[^/]+/index\.html", p)]
    assert set(chapters) | {"intro.html"} <= set(differing), differing  # their run notes and the introduction
    served = Site(CLASS_HTML, tmp_path_factory.mktemp("class-fixtures"))
    try:
        found = []
        for page in differing + ["search.html"]:
            for width, rules in check(browser, served.url + page, served_chars).items():
                found += [f"{page} @ {width}: [{rule}] {m}" for rule, messages in rules.items() for m in messages]
    finally:
        served.close()
    assert not found, "\n".join(found)


def test_the_web_font_is_small_and_covers_the_site(built_book, served_chars):
    size = FONT.stat().st_size
    assert 5_000 < size < 150_000, f"the served font is {size} bytes: a subset should be tens of KB"
    for page in HTML.rglob("*.html"):
        missing = set(CJK.findall(page.read_text(encoding="utf-8"))) - served_chars
        assert not missing, f"{page.relative_to(HTML)}: {''.join(sorted(missing))} not in the served font"


# ---- each rule fails on a page made to break it ----------------------------------------------------------------

FIXTURE_HEAD = """<!DOCTYPE html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/_static/course.css"><style>body { font-family: "Course CJK", sans-serif; }</style>
<script>window.MathJax = {"options": {"processHtmlClass": "math"}}</script>
<script defer src="/_static/mathjax/tex-chtml.js"></script>
<link rel="icon" href="/_static/favicon.svg"><title>probe fixture</title></head><body class="tex2jax_ignore"><article>"""
FIXTURE_OK = '<p>Attention 注意力: <span class="math notranslate nohighlight">\\(\\sqrt{d_k}\\)</span></p>'
FIXTURES = {
    "overflow": '<pre style="white-space: pre; overflow: visible">' + "x" * 400 + "</pre>",
    "overflow-clipped": '<div style="overflow: hidden; width: 200px"><div style="width: 600px">cut off</div></div>',
    # a figure shrunk 4x at desktop width (a link to its full size, so on a phone it is fine)
    "image": '<div style="width: 300px"><a href="/fixtures/wide.png"><img src="/fixtures/wide.png" style="width: 100%"></a></div>',
    # a figure whose smallest text (9 px, recorded in the PNG as the figure style does) is shown at full size:
    # smaller than the small print at the book's content width (checked at desktop width)
    "image-text": '<a href="/fixtures/small-text.png"><img src="/fixtures/small-text.png"></a>',
    # a figure wider than the content column: it is not shrunk, but it has to scroll
    "image-column": '<div style="width: 300px; overflow-x: auto"><img src="/fixtures/small-text.png" style="min-width: 360px"></div>',
    # the site's old phone layout: a figure kept at 2/3 of its natural width, scrolling inside its box on a phone
    # (at desktop width it fits, at 1.5x smaller)
    "image-phone": '<div style="overflow-x: auto"><a href="/fixtures/wide.png"><img src="/fixtures/wide.png" '
                   'style="min-width: 800px; max-width: 100%"></a></div>',
    # a figure that fits the phone's screen but cannot be opened at full size
    "image-phone-nolink": '<img src="/fixtures/wide.png" style="max-width: 100%">',
    "javascript": "<script>const THEBE_JS_URL = 1;</script><script>const THEBE_JS_URL = 2;</script>",
    "javascript-load": '<script src="/_static/no-such-script.js"></script>',
    "chinese": "<p>一个不在字体里的字：鑫</p>",
    # the characters are in the font, but the page's own style keeps the browser from using (and loading) it
    "chinese-unloaded": "<style>body { font-family: serif !important; }</style>",
    "formula": '<p><span class="math notranslate nohighlight">\\(\\frac{1}\\)</span></p>',
    # a formula that reached the page without its TeX delimiters, so MathJax never sees it
    "formula-untypeset": '<p><span class="math notranslate nohighlight">x + y</span></p>',
    # `\\_` is not a command inside \\text{}: MathJax shows the backslash
    "formula-rawtex": '<p><span class="math notranslate nohighlight">\\(\\text{max\\_norm}\\)</span></p>',
    # a display equation (in Sphinx's markup) about 700 px wide in a 400 px column: it scrolls sideways
    "equation": '<div style="max-width: 400px"><div class="math notranslate nohighlight">\\['
                + " + ".join(f"x_{{{i}}}" for i in range(1, 31)) + "\\]</div></div>",
}


# Where a rule applies: figure size and text size and the width of display equations are the desktop layout's
# rules; a figure that fits the phone's screen and opens at full size is the phone's.
FIXTURE_WIDTHS = {"image": ["desktop"], "image-text": ["desktop"], "image-phone": ["phone"],
                  "image-phone-nolink": ["phone"], "equation": ["desktop"]}


def write_fixture(folder: Path, name: str) -> str:
    if name.startswith("image"):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig = plt.figure(figsize=(12, 1), dpi=100)  # 1200 px wide, shown at 300 px: 4x smaller
        fig.savefig(folder / "wide.png")
        plt.close(fig)
        fig = plt.figure(figsize=(3.6, 1), dpi=100)  # 360 px wide
        fig.text(0.1, 0.5, "small", fontsize=6.5)
        fig.savefig(folder / "small-text.png", metadata={MIN_TEXT_KEY: "9.00"})
        plt.close(fig)
    (folder / f"{name}.html").write_text(FIXTURE_HEAD + FIXTURE_OK + FIXTURES.get(name, "") + "</article></body></html>",
                                         encoding="utf-8")
    return f"fixtures/{name}.html"


@needs_browser
def test_probe_passes_a_clean_fixture(site, browser, served_chars):
    server, folder = site
    url = server.url + write_fixture(folder, "clean")
    assert check(browser, url, served_chars) == {width: {} for width in WIDTHS}
    report, _ = browser.open(url, "phone")
    assert report["formulas"] == 1 and "注" in report["text"] and report["width"] == WIDTHS["phone"][0]


@needs_browser
@pytest.mark.parametrize("name", list(FIXTURES))
def test_probe_catches_a_page_that_breaks_a_rule(site, browser, served_chars, name):
    server, folder = site
    rule = name.split("-")[0]
    for width, found in check(browser, server.url + write_fixture(folder, name), served_chars).items():
        expected = [rule] if width in FIXTURE_WIDTHS.get(name, WIDTHS) else []
        assert list(found) == expected, f"{name} @ {width}: expected {expected}, got {found}"


ERRATA_IDS = """(() => [...document.querySelectorAll('td a[href*="#errata-"]')]
  .map((a) => ({ id: a.textContent, lines: a.getClientRects().length })))()"""


def errata_ids(browser, url: str, width: str) -> list[dict]:
    """The errata ids linked from table cells on the page, with the number of lines each is drawn on."""
    browser.open(url, width)
    return browser.call("Runtime.evaluate", session=True, returnByValue=True, expression=ERRATA_IDS)["result"]["value"]


@needs_browser
def test_errata_ids_stay_on_one_line(site, browser):
    """The errata table's first column is narrow: without course.css's nowrap an id broke at its hyphen ("000-" /
    "1"). Shown on a table without that rule (a fixture), then on the errata page at both widths."""
    server, folder = site
    (folder / "errata-wrap.html").write_text(
        FIXTURE_HEAD + '<table><tr><td style="width: 1px"><p><a class="reference internal" href="#errata-000-1">'
        '<span class="std std-ref">000-1</span></a></p></td><td>' + "words " * 40 + "</td></tr></table></article></body></html>",
        encoding="utf-8")
    assert [i["lines"] for i in errata_ids(browser, server.url + "fixtures/errata-wrap.html", "phone")] == [2]
    for width in WIDTHS:
        ids = errata_ids(browser, server.url + "chapters/errata.html", width)
        assert len(ids) >= 10, ids
        wrapped = [i["id"] for i in ids if i["lines"] != 1]
        assert not wrapped, f"errata ids drawn on more than one line at {width}: {wrapped}"


@needs_browser
def test_search_snippets_show_formulas_as_text(site, browser):
    """Sphinx's search snippets are cut from the page text, where a formula is its TeX source; the site's
    course.js turns each formula into readable text first."""
    server, _ = site
    browser.open(server.url + "search.html", "desktop")
    cases = {r"\(\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V\)": "softmax(QKᵀ/√d_k) V",
             r"\(\sqrt{d_k}\)": "√d_k",
             r"\(\sum_j a_{ij} v_j\)": "Σ_j a_ij v_j",
             r"\(X \in \mathbb{R}^{n \times d}\)": "X ∈ ℝ^n × d",
             r"\(\sqrt{\mathtt{head\_dim}}\)": "√head_dim"}
    for tex, text in cases.items():
        got = browser.call("Runtime.evaluate", session=True, returnByValue=True,
                           expression=f"window.courseTexToText({json.dumps(tex)})")["result"]["value"]
        assert got == text, (tex, got)


@needs_browser
def test_search_results_show_no_raw_tex(site, browser):
    """A real search: the result titles and snippets of pages full of formulas contain no TeX source. Sphinx adds the
    results one at a time (5 ms apart) and fetches each snippet on its own, so the wait is for its status line saying
    the search finished and then for every result's snippet (a slow machine once had the first result's snippet
    before the second result was listed)."""
    server, _ = site
    browser.open(server.url + "search.html?q=vanishing+gradients", "desktop")
    results = browser.call("Runtime.evaluate", session=True, returnByValue=True, awaitPromise=True, timeout=60,
                           expression="""new Promise((resolve) => {
        const done = () => {
          const status = document.querySelector(".search-summary");
          const finished = status && /Search finished|did not match/.test(status.textContent);
          const items = [...document.querySelectorAll("ul.search li")];
          if (finished && !items.length) {
            resolve([]);
            return true;
          }
          if (finished && items.every((li) => li.querySelector(".context"))) {
            resolve(items.map((li) => li.textContent));
            return true;
          }
          return false;
        };
        if (!done()) new MutationObserver((_, observer) => { if (done()) observer.disconnect(); })
          .observe(document.body, { childList: true, subtree: true, characterData: true });
      })""")["result"]["value"]
    assert len(results) >= 3, results
    raw = [r for r in results if re.search(r"\\[()\[\]]|\\(sqrt|frac|mathrm|text|top)\b", r)]
    assert not raw, raw
    assert any("√d_k" in r for r in results), results


def test_every_chapter_offers_its_notebook(built_book):
    """The download menu of each chapter page offers the executed notebook (.ipynb), and the page says how to run it
    and where to get the course (the archive: tests/test_downloads.py checks that it installs)."""
    for chapter in sorted(p.parent.name for p in (ROOT / "chapters").glob("[0-9][0-9]-*/index.md")):
        page = (HTML / "chapters" / chapter / "index.html").read_text(encoding="utf-8")
        assert f"_sources/chapters/{chapter}/index.ipynb" in page, f"{chapter}: no .ipynb in the download menu"
        assert (HTML / "_sources" / "chapters" / chapter / "index.ipynb").is_file()
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page))
        assert "Run this page yourself" in text and "pip install -c constraints.txt -e ." in text, f"{chapter}: the page does not say how to run it"
        assert "transformer-course.tar.gz" in text and "make book" in text, f"{chapter}: the page does not say where to get the course"


def test_a_downloaded_page_runs_after_installing_the_course(built_book, tmp_path):
    """The .ipynb a reader downloads runs outside the repository, with no PYTHONPATH: the course is installed
    (pip install -e ., which `make book` does), so `solutions` and the figure style import."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(HTML / "_sources" / "chapters" / "02-qkv-attention" / "index.ipynb", as_version=4)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MPLBACKEND"] = "Agg"
    client = NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)  # the kernel's environment: no PYTHONPATH, working directory outside the repository
    images = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 2
