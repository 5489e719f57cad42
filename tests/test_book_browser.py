"""The built book, opened page by page in headless Chromium with no network.

On every page: math is typeset by MathJax (the copy shipped with the book: the browser can reach nothing
but the local server), with no error node and no raw TeX left; every image has loaded; no cell output is an
error; every internal link resolves (page and anchor); the sidebar lists every chapter. Search finds a
chapter by a word. A screenshot of each page goes to ``_build/screenshots/`` for a person to look at.

Needs the Debian packages ``chromium`` and ``chromium-driver`` and a built book: ``$BNSYM_BOOK_HTML``
(``make test`` points it at its test-scale build), else ``_build/html``. Skips, saying which is missing.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from conftest import HANG_SECONDS

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("BNSYM_BOOK_HTML", ROOT / "_build" / "html")).resolve()
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = next((p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium") or "") if p and
                 Path(p).is_file()), None)
CHROMEDRIVER = shutil.which("chromedriver")
SEARCH_WORD, SEARCH_PAGE = "Gegenbauer", "notebooks/04_gegenbauer.html"

if not (HTML / "index.html").is_file():
    pytest.skip(f"no built book at {HTML} (make book, or make test)", allow_module_level=True)
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip("no Chromium: apt-get install chromium chromium-driver", allow_module_level=True)

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra)")

PAGES = sorted(str(p.relative_to(HTML)) for p in HTML.rglob("*.html")
               if not any(part.startswith("_") for part in p.relative_to(HTML).parts))


def _toc_pages() -> set[str]:
    """Every page the table of contents lists below its root, as its HTML path."""
    def files(node) -> list[str]:
        if isinstance(node, dict):
            return ([node["file"]] if "file" in node else []) + [f for v in node.values() for f in files(v)]
        return [f for v in node for f in files(v)] if isinstance(node, list) else []
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return {f"{name}.html" for name in files(toc.get("parts", toc.get("chapters", [])))}


@pytest.fixture(scope="module")
def site():
    """The book served on 127.0.0.1 (the only host the browser can reach)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                 # offline: no name resolves, and every connection but loopback goes to a closed port
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--proxy-server=http://127.0.0.1:9"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_script_timeout(HANG_SECONDS)
    yield driver
    driver.quit()


# Waits for MathJax's typesetting and for every image, then reports what the page shows.
INSPECT = r"""
const done = arguments[arguments.length - 1];
// A page (or the front page's redirect) may still be loading, with MathJax's deferred script not yet run: wait
// until the document is complete and, where it holds math, until MathJax exists (at most 300 s: only a page that
// never loads it waits that long; the checks below then say so), then inspect.
const start = Date.now();
const ready = () => document.readyState === "complete" &&
  (!document.querySelector("main .math") || (window.MathJax && MathJax.startup));
const settled = new Promise((resolve) => {
  const poll = () => (ready() || Date.now() - start > 300000 ? resolve() : setTimeout(poll, 50));
  poll();
});
settled.then(() => {
const images = Array.from(document.images);
images.forEach((img) => { img.loading = "eager"; });
const typeset = window.MathJax && MathJax.startup ? MathJax.startup.promise : Promise.resolve();
Promise.all([typeset, ...images.map((img) => img.decode().catch(() => null))]).then(() => {
  const raw = [];
  const walker = document.createTreeWalker(document.querySelector("main") || document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (node.parentElement.closest("pre, code, script, style, mjx-container, .highlight")) continue;
    const match = node.textContent.match(/\$\$|\\begin|\\\(|\\\[/);
    if (match) raw.push(node.textContent.trim().slice(0, 80));
  }
  done({
    mathjax: window.MathJax ? MathJax.version || "" : null,
    mathjaxSrc: Array.from(document.scripts).map((s) => s.src).filter((s) => /mathjax/i.test(s)),
    mathNodes: document.querySelectorAll("main .math, main span.math, main div.math").length,
    typeset: document.querySelectorAll("mjx-container").length,
    mathErrors: document.querySelectorAll("mjx-merror, .MathJax_Error").length,
    raw: raw,
    badImages: images.filter((img) => !(img.complete && img.naturalWidth > 0)).map((img) => img.src),
    errors: Array.from(document.querySelectorAll("div.output.traceback, div.output.error")).map(
      (e) => e.textContent.trim().slice(0, 200)),
    links: Array.from(document.querySelectorAll("a[href]")).map((a) => a.href),
    sidebar: Array.from(document.querySelectorAll(".bd-sidebar-primary a[href]")).map((a) => a.href),
  });
});
});
"""


@functools.cache
def _ids(page: Path) -> frozenset[str]:
    return frozenset(re.findall(r'\sid="([^"]+)"', page.read_text(errors="replace")))


def _broken(links: list[str], origin: str) -> list[str]:
    broken = []
    for link in links:
        if not link.startswith(origin):
            continue  # external: not followed
        parts = urlsplit(link)
        target = HTML / unquote(parts.path).lstrip("/")
        target = target / "index.html" if target.is_dir() else target
        if not target.is_file():
            broken.append(link)
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _ids(target):
            broken.append(link)
    return broken


@pytest.mark.parametrize("page", PAGES)
def test_page(browser, site, page):
    browser.get(site + page)
    if page == "index.html":  # the front door redirects to the front page: inspect that one, once it is there
        from selenium.webdriver.support.ui import WebDriverWait  # selenium is there: the browser fixture needs it

        WebDriverWait(browser, HANG_SECONDS).until(lambda driver: "intro" in driver.current_url)
    seen = browser.execute_async_script(INSPECT)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(SCREENSHOTS / (page.replace("/", "__").removesuffix(".html") + ".png")))

    if seen["mathNodes"]:
        assert seen["mathjax"] and seen["mathjax"].startswith("3"), "MathJax did not load"
        assert all(src.startswith(site) for src in seen["mathjaxSrc"]), seen["mathjaxSrc"]
        assert seen["typeset"] > 0, "math on the page, but MathJax typeset none of it"
    assert seen["mathErrors"] == 0, f"{seen['mathErrors']} MathJax error nodes"
    assert not seen["raw"], f"raw TeX left in the text: {seen['raw'][:5]}"
    assert not seen["badImages"], f"images that did not load: {seen['badImages']}"
    assert not seen["errors"], f"error outputs: {seen['errors']}"
    assert not _broken(seen["links"], site), f"broken internal links: {_broken(seen['links'], site)}"
    listed = {link[len(site):].split("#")[0] for link in seen["sidebar"] if link.startswith(site)}
    missing = _toc_pages() - listed
    assert not missing, f"the sidebar lacks {sorted(missing)}"


def test_search_finds_a_chapter(browser, site):
    browser.get(f"{site}search.html?q={SEARCH_WORD}")
    found = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const start = Date.now();
        (function poll() {
          const hits = Array.from(document.querySelectorAll("#search-results li a")).map((a) => a.href);
          if (hits.length || Date.now() - start > 300000) done(hits); else setTimeout(poll, 200);
        })();""")
    assert any(hit.split("#")[0].split("?")[0].endswith(SEARCH_PAGE) for hit in found), f"search results after "\
        f"waiting up to 300 s: {found}"


REGISTRY = yaml.safe_load((ROOT / "book" / "registry.yml").read_text())
STATUSES = ("derived", "checked against simulation", "substituted", "not reproducible", "missing")
VERDICTS = ("holds", "does not hold", "not resolved")

# The rows of a generated table (by its class) as lists of cell texts (Sphinx's curly apostrophes made
# straight again), and the links of each row.
TABLE_ROWS = r"""
const table = document.querySelector(`table.${arguments[0]}`);
if (!table) return null;
return Array.from(table.tBodies[0].rows).map((row) => ({
  cells: Array.from(row.cells).map((cell) => cell.textContent.trim().replace(/\u2019/g, "'")),  // smartquotes
  links: Array.from(row.querySelectorAll("a[href]")).map((a) => a.href),
}));
"""


def test_status_page_counts_match_the_registry(browser, site):
    """Every registry item is a row, in order; the counts per paper (statuses, verdicts) are those of the rows;
    evidence links resolve; no item holds or fails on fewer than 8 networks per arm."""
    browser.get(site + "book/status.html")
    counts = browser.execute_script(TABLE_ROWS, "bnsym-status-counts")
    rows = browser.execute_script(TABLE_ROWS, "bnsym-status")
    assert counts is not None and rows is not None, "the status page has no counts or no item table"
    entries = [(paper, entry) for paper, items in REGISTRY.items() for entry in items]
    assert len(rows) == len(entries), f"{len(rows)} rows for {len(entries)} registry items"
    for row, (paper, entry) in zip(rows, entries):
        _, item, title, status, verdict, networks, evidence, why = row["cells"]
        resolved = [v for v in ("holds", "does not hold") if verdict.startswith(v)]
        assert not resolved or all(int(n) >= 8 for n in networks.split("; ")), (paper, item, verdict, networks)
        assert (item, title) == (entry["item"], entry["title"]), (paper, entry["item"], item)
        assert status in STATUSES
        if "missing" in entry:
            assert status == "missing" and why == entry["missing"], (paper, item)
        else:
            assert status != "missing" and row["links"], f"{paper} {item}: recorded, but no evidence link"
        assert not _broken(row["links"], site), f"{paper} {item}: broken evidence {_broken(row['links'], site)}"
    assert len(counts) == len(REGISTRY)
    start = 0
    for count, (paper, items) in zip(counts, REGISTRY.items()):
        shown = [rows[start + i]["cells"][3] for i in range(len(items))]
        start += len(items)
        assert int(count["cells"][1]) == len(items), paper
        assert [int(n) for n in count["cells"][2:2 + len(STATUSES)]] == [shown.count(s) for s in STATUSES], paper
        verdicts = "; ".join(rows[start - len(items) + i]["cells"][4] for i in range(len(items)))
        assert [int(n) for n in count["cells"][2 + len(STATUSES):]] == [
            verdicts.count(f"{v} (") for v in VERDICTS], paper


def test_dashboard_shows_the_calibration(browser, site):
    """The per-chapter summary is on top, and the calibration figure (an inline PNG) has loaded."""
    browser.get(site + "book/dashboard.html")
    summary = browser.execute_script(TABLE_ROWS, "bnsym-chapter-summary")
    checks = browser.execute_script(TABLE_ROWS, "bnsym-dashboard")
    assert summary and checks, "no per-chapter summary or no checks"
    assert sum(int(row["cells"][1]) for row in summary) == len(checks)
    assert sum(int(row["cells"][2]) for row in summary) == sum(row["cells"][7] == "pass" for row in checks)
    figure = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const img = document.querySelector("figure.bnsym-calibration img");
        if (!img) { done(null); return; }
        img.decode().catch(() => null).then(() => done({width: img.naturalWidth,
            caption: document.querySelector("figure.bnsym-calibration figcaption").textContent}));""")
    assert figure and figure["width"] > 0, "the calibration figure did not load"
    assert "Kolmogorov-Smirnov D =" in figure["caption"]
