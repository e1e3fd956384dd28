"""The documentation site (mkdocs.yml) builds without a warning, and its API reference covers the public API.

`mkdocs build --strict` fails on any warning: a broken link or anchor between pages, a page left out
of the navigation, an API identifier that does not resolve. The API pages are rendered by
mkdocstrings from the docstrings (static analysis of the source tree: nothing is imported). The
notebooks are rendered as stored here (FLOWSIM_DOCS_EXECUTE=false): tests/test_notebooks.py builds
the site again with the notebooks it executed.

The site is then loaded, page by page, in headless Chromium with the network off (tests/browser.py), as a lecturer
would project it: no script error, nothing asked of another host, every formula typeset, no raw TeX left in the
text (the notebooks' executed pages are checked so in tests/test_notebooks.py).

Every `flowsim ...` command line that README.md, the pages and the notebooks quote is parsed as the executable parses
it: the command has those options, and they take those values.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import flowsim
from flowsim import slr
from flowsim.tasks import latent, sparse
from tests.browser import Browser, PageReport, find_chromium, serve
from tests.shared import check_command_line

REPOSITORY = Path(__file__).resolve().parents[1]

#: Public names whose module has the same name (flowsim.integrate, flowsim.compare): documented by full path.
_FULL_PATHS = {"compare": "flowsim.compare.compare", "integrate": "flowsim.integrate.integrate"}
#: Public names that are no API object: the version, the task registry and the task package itself.
_NOT_OBJECTS = {"__version__", "TASKS", "slr"}


def _anchor(name: str) -> str:
    return _FULL_PATHS.get(name, f"flowsim.{name}")


def build_site(site: Path, **environment: str) -> Path:
    """`mkdocs build --strict` of the repository's mkdocs.yml into the folder `site`, the notebooks rendered
    as stored (FLOWSIM_DOCS_EXECUTE=false) unless `environment` says otherwise; fails with mkdocs' output.

    **Arguments:** `site`, an absolute path (relative ones in mkdocs.yml are the repository's); `environment`,
    variables added to the build's environment (e.g. FLOWSIM_DOCS_DIR, another docs folder).

    **Returns:** `site`.
    """
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPOSITORY / "mkdocs.yml")]
    result = subprocess.run(
        [*command, "--site-dir", str(site)],
        cwd=site.parent,
        env=os.environ | {"FLOWSIM_DOCS_EXECUTE": "false", **environment},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return site


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build_site(tmp_path_factory.mktemp("site") / "site")


def test_the_site_builds_with_every_page(site):
    for page in (
        "index.html",
        "science",
        "architecture",
        "results",
        "equations",
        "api/engine",
        "api/slr",
        "api/sparse",
        "api/latent",
        "equations-latent",
        "notebooks",
        "notebooks/01_task",
        "notebooks/07_latent_posterior_attention",
    ):
        path = site / page if page.endswith(".html") else site / page / "index.html"
        assert path.is_file(), f"{page} was not built"


def test_the_engine_page_documents_every_public_name(site):
    engine = (site / "api" / "engine" / "index.html").read_text()
    for name in ("solve_flow", "AbstractTask", "run_sgd"):
        assert f'id="flowsim.{name}"' in engine
    missing = [name for name in flowsim.__all__ if name not in _NOT_OBJECTS and f'id="{_anchor(name)}"' not in engine]
    assert not missing, f"public names of flowsim missing from docs/api/engine.md: {missing}"
    # The docstrings' Markdown is rendered as written (bold **Arguments:**), and k*, v* stay literal.
    assert "<strong>Arguments:</strong>" in engine and "<strong>Returns:</strong>" in engine
    assert "+-(k*, v*)" in engine


def test_the_slr_page_documents_or_links_every_public_name(site):
    page = (site / "api" / "slr" / "index.html").read_text()
    assert 'id="flowsim.slr.Problem"' in page and 'id="flowsim.slr.run_sgd"' in page
    missing = [
        name
        for name in slr.__all__
        if f'id="flowsim.slr.{name}"' not in page and f'href="../engine/#{_anchor(name)}"' not in page
    ]
    assert not missing, f"public names of flowsim.slr missing from docs/api/slr.md: {missing}"


def test_the_sparse_page_documents_every_public_name(site):
    page = (site / "api" / "sparse" / "index.html").read_text()
    missing = [name for name in sparse.__all__ if f'id="flowsim.tasks.sparse.{name}"' not in page]
    assert not missing, f"public names of flowsim.tasks.sparse missing from docs/api/sparse.md: {missing}"


def test_the_latent_page_documents_every_public_name(site):
    page = (site / "api" / "latent" / "index.html").read_text()
    missing = [name for name in latent.__all__ if f'id="flowsim.tasks.latent.{name}"' not in page]
    assert not missing, f"public names of flowsim.tasks.latent missing from docs/api/latent.md: {missing}"


#: A reference to a script, a stylesheet or a font on another host (the site must work with no network).
_REMOTE_ASSET = re.compile(r'<(?:script|link|img)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]*"')
#: An HTML tag whose name is followed by a comma or an asterisk: text such as <k, v*> that was swallowed as a tag.
_SWALLOWED = re.compile(r"<[A-Za-z][\w-]*[,*][^>]*>")


def site_pages(site: Path) -> list[str]:
    """Every page of a built site, as its URL path relative to the site ("" for the home page, "science/", ...)."""
    return sorted(
        f"{path.parent.relative_to(site).as_posix()}/" if path.parent != site else ""
        for path in site.rglob("index.html")
    )


def test_every_page_is_served_by_the_site_itself(site):
    pages = [site / page / "index.html" for page in site_pages(site)]
    assert len(pages) >= 20
    remote = {page.parent.name: _REMOTE_ASSET.findall(page.read_text()) for page in pages}
    assert not any(remote.values()), f"pages that load a script, style or image from another host: {remote}"
    # MathJax, vendored with its licence, and its fonts are part of the site (docs/assets/mathjax/README.txt).
    mathjax = site / "assets" / "mathjax"
    assert (mathjax / "tex-chtml-full.js").is_file() and (mathjax / "LICENSE").is_file()
    assert len(list((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))) == 23


def test_no_text_is_taken_for_an_html_tag_and_no_heading_id_starts_with_a_digit(site):
    for page in site_pages(site):
        html = (site / page / "index.html").read_text()
        assert not _SWALLOWED.findall(html), f"{page or 'home'}: text swallowed as tags {_SWALLOWED.findall(html)}"
        assert not re.findall(r' id="\d', html), f"{page or 'home'}: a heading id starts with a digit"
    # Plain-text math in docstrings survives (docs/hooks.py), and ids are prefixed (the theme selects them by #id).
    assert "chi_l = &lt;X_l, k&gt;" in (site / "api" / "slr" / "index.html").read_text()
    assert 'id="section-1-single-location-regression"' in (site / "science" / "index.html").read_text()


CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian: apt-get install chromium, which .ci/run does where it can): "
    "the site is not checked in a browser",
)


def check_in_browser(report: PageReport, math: bool) -> list[str]:
    """What is wrong with a page as a reader sees it offline: script or network errors, requests to other hosts,
    MathJax errors, TeX left as text; and, where the page has `math`, no formula typeset at all."""
    problems = [f"script or network error: {error}" for error in report.errors]
    problems += [f"asked another host for {url}" for url in report.external]
    problems += [f"MathJax error: {error}" for error in report.math_errors]
    problems += [f"raw TeX: ...{text}..." for text in report.raw_tex()[:5]]
    if math and report.typeset == 0:
        problems.append("no formula typeset")
    return problems


@pytest.fixture(scope="module")
def browser_reports(site) -> dict[str, PageReport]:
    """Every page but the notebooks' (tests/test_notebooks.py loads those, executed, with their outputs)."""
    pages = [page for page in site_pages(site) if not page.startswith("notebooks/0")]
    with serve(site) as origin, Browser(CHROMIUM, origin) as browser:
        return {page: browser.load(f"{origin}/{page}") for page in pages}


#: Pages whose text has formulas: each must have typeset some.
MATH_PAGES = ("science/", "equations/", "equations-latent/")


@needs_chromium
def test_every_page_renders_offline_without_error_or_raw_tex(browser_reports):
    assert {"", "science/", "equations/", "api/engine/", "api/latent/", "notebooks/"} <= set(browser_reports)
    problems = {
        page or "home": found
        for page, report in browser_reports.items()
        if (found := check_in_browser(report, math=page in MATH_PAGES))
    }
    assert not problems, f"pages as a reader sees them offline: {problems}"


@needs_chromium
def test_the_navigation_shows_the_notebooks_under_plain_titles(browser_reports):
    # The navigation is in every page's text (checked for raw TeX above); the tabs' titles: tests/test_notebooks.py.
    for title in ("3. Phase portraits", "4. ODE against SGD", "7. Latent-posterior attention"):
        assert title in browser_reports[""].text


@needs_chromium
def test_the_browser_check_fails_a_page_that_needs_the_network_or_throws(site, tmp_path):
    """The check is not blind: a page that loads MathJax from a CDN shows its TeX raw and asks another host, a script
    error is caught, and so is the theme's failure on a heading id that starts with a digit (why they are prefixed)."""
    (tmp_path / "cdn").mkdir()
    (tmp_path / "cdn" / "index.html").write_text(
        '<html><head><script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js"></script></head>'
        "<body><p>The flow of $\\lambda$.</p><script>throw new Error('a broken script')</script></body></html>"
    )
    shutil.copytree(site / "science", tmp_path / "digit")
    science = (tmp_path / "digit" / "index.html").read_text()
    (tmp_path / "digit" / "index.html").write_text(science.replace("section-1-single", "1-single"))
    for folder in ("assets", "css", "js", "webfonts"):
        (tmp_path / folder).symlink_to(site / folder)
    with serve(tmp_path) as origin, Browser(CHROMIUM, origin) as browser:
        cdn, digit = browser.load(f"{origin}/cdn/"), browser.load(f"{origin}/digit/")
    assert cdn.external == ("https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js",)
    assert any("a broken script" in error for error in cdn.errors) and cdn.raw_tex() and cdn.typeset == 0
    assert any("is not a valid selector" in error for error in digit.errors)


#: The pages whose `flowsim ...` lines are meant to parse, the notebooks included (docs/bad-inputs.md lists refusals
#: on purpose).
_PAGES = [
    "README.md",
    *(f"docs/{page.name}" for page in sorted((REPOSITORY / "docs").glob("*.md")) if page.name != "bad-inputs.md"),
    *(f"notebooks/{notebook.name}" for notebook in sorted((REPOSITORY / "notebooks").glob("*.ipynb"))),
]


def _quoted_commands(text: str) -> list[str]:
    """The `flowsim ...` command lines of a page: in code blocks (after what sets its environment or starts it, such
    as `VAR=value` or `srun ...`; up to a comment, a pipe or a `&`) and in inline code."""
    found, in_block = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_block = not in_block
        elif in_block and (
            command := re.match(r"\s*(?:\$ )?(?:\w+=\S*\s+)*(?:srun(?:\s+-\S+)*\s+)?(flowsim\s.*)", line)
        ):
            found.append(re.split(r" #|\||&", command.group(1))[0].strip())
        found += [match.group(1).split("|")[0].strip() for match in re.finditer(r"`(flowsim [^`]+)`", line)]
    return found


def _placeholder(token: str) -> bool:
    """COMMAND, [TASK], DIR, T, FILE.py:NAME, MODULE:NAME: words the reader replaces."""
    return bool(re.fullmatch(r"\[?[A-Z][A-Z_]*\]?(\.py)?(:[A-Z]+)?", token)) or "FILE.py" in token


@pytest.mark.parametrize("page", _PAGES)
def test_every_command_line_a_page_quotes_is_accepted(page, tmp_path, monkeypatch, capsys):
    """Each `flowsim ...` line the README and the docs quote names a command that has those options, with values they
    take (parsed and checked as the executable does, nothing run): a renamed option, or a page that gives a command
    an option it lacks, fails here. Lines with placeholders (COMMAND, DIR, FILE.py:NAME) are skipped; a researcher's
    map file the page names (mymaps.py) is made in an empty working folder."""
    from flowsim.cli import _parser

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mymaps.py").write_text("")
    text = (REPOSITORY / page).read_text()
    if page.endswith(".ipynb"):  # its cells' text, markdown and code
        text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
    parser, checked = _parser(), 0
    for line in _quoted_commands(text):
        arguments = line.split()[1:]
        if not arguments or any(_placeholder(argument) for argument in arguments) or "--help" in arguments:
            continue
        check_command_line(parser, arguments, f"{page}: `{line}`", capsys)
        checked += 1
    assert checked or page != "README.md"
