"""The solves' jit: top-level programs compiled with flowsim's XLA options, nested calls without them, same numbers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim import _compile


def test_the_preferred_options_this_xla_knows_are_kept_and_an_unknown_one_dropped(monkeypatch):
    known = _compile.compiler_options()
    assert known.items() <= _compile.PREFERRED_OPTIONS.items()
    monkeypatch.setattr(_compile, "PREFERRED_OPTIONS", {"xla_no_such_option_of_flowsim": True, **known})
    _compile.compiler_options.cache_clear()
    try:
        assert _compile.compiler_options() == known
    finally:
        _compile.compiler_options.cache_clear()


def test_a_top_level_call_compiles_with_the_options_and_a_nested_one_without(monkeypatch):
    """An option XLA refuses shows which calls pass the options: the top-level call does (and fails), the
    same function inside jax.jit, jax.vmap or jax.grad joins the enclosing program without them."""
    monkeypatch.setattr(_compile, "compiler_options", lambda: {"xla_no_such_option_of_flowsim": True})

    @_compile.filter_jit
    def square(x):
        return x * x

    x = jnp.arange(3.0)
    np.testing.assert_array_equal(jax.jit(square)(x), [0.0, 1.0, 4.0])
    np.testing.assert_array_equal(jax.vmap(square)(x), [0.0, 1.0, 4.0])
    assert float(jax.grad(square)(3.0)) == 6.0
    with pytest.raises(jax.errors.JaxRuntimeError, match="xla_no_such_option_of_flowsim"):
        square(x)


def test_filter_jit_takes_static_python_values_and_gives_numpys_numbers():
    @_compile.filter_jit
    def scaled_sine(x, power):
        return jnp.sin(x) ** power

    x = jnp.linspace(0.0, 3.0, 7)
    # XLA's two emitters may round differently: a few units in the last place.
    np.testing.assert_allclose(scaled_sine(x, 3), np.sin(np.asarray(x)) ** 3, rtol=1e-14, atol=1e-15)
    assert scaled_sine.__name__ == "scaled_sine"
