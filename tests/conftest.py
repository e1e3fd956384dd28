"""Shared test setup: float64 (importing flowsim enables it) and common fixtures."""

import jax
import pytest

import flowsim  # noqa: F401  (enables float64)


@pytest.fixture(scope="session")
def key():
    return jax.random.key(20250122)
