"""The documentation site (mkdocs.yml) builds without a warning, and its API reference covers the public API.

`mkdocs build --strict` fails on any warning: a broken link or anchor between pages, a page left out
of the navigation, an API identifier that does not resolve. The API pages are rendered by
mkdocstrings from the docstrings (static analysis of the source tree: nothing is imported). The
notebooks are rendered as stored here (FLOWSIM_DOCS_EXECUTE=false): tests/test_notebooks.py builds
the site again with the notebooks it executed.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import flowsim
from flowsim import slr
from flowsim.tasks import latent, sparse

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
