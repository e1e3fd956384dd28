"""Shared test setup: float64 (importing flowsim enables it) and common fixtures."""

import jax
import pytest

import flowsim  # noqa: F401  (enables float64)


@pytest.fixture(scope="session")
def key():
    return jax.random.key(20250122)


#: The longest test files (about a minute each on 2 cores), started first (pyproject.toml keeps
#: pytest-xdist to this order) so that neither worker ends the session running one of them alone.
LONGEST_FIRST = (
    "test_task_notebooks.py",
    "test_notebooks.py",
    "test_cli.py",
    "test_latent.py",
    "test_overlap_sgd.py",
    "test_sparse.py",
    "test_advantage.py",
    "test_maps.py",
    "test_compare.py",
    "test_plots.py",
)


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file keeps its own order
