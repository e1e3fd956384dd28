"""Shared test setup: float64 (importing flowsim enables it), a shared compilation cache, common fixtures."""

import os
import tempfile
from pathlib import Path

# JAX's persistent compilation cache, shared by the two pytest-xdist workers and the notebooks' kernels
# (they inherit the environment; set before JAX starts): a program compiled by one is loaded by the others,
# and by the next run on this machine. Keyed by the program and JAX's version, so never stale.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(tempfile.gettempdir()) / "flowsim-tests-jax-cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import jax
import pytest

import flowsim  # noqa: F401  (enables float64)

# In case a plugin imported JAX before this file: its configuration, not only the environment.
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update(
    "jax_persistent_cache_min_compile_time_secs", float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"])
)


@pytest.fixture(scope="session")
def key():
    return jax.random.key(20250122)


#: The longest test files (half a minute to two minutes each on 2 cores), started first (pyproject.toml keeps
#: pytest-xdist to this order) so that neither worker ends the session running one of them alone.
LONGEST_FIRST = (
    "test_cli.py",
    "test_family.py",
    "test_maps.py",
    "test_devices.py",
    "test_sparse.py",
    "test_default_devices.py",
    "test_family_fast.py",
    "test_latent.py",
    "test_runs.py",
    "test_heads_sgd.py",
    "test_heads_flow.py",
    "test_overlap_sgd.py",
    "test_advantage.py",
    "test_notebooks.py",
)


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file keeps its own order
