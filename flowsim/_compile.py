"""`filter_jit` with the XLA options that suit the engine's solves and Newton iterations, and
`compiled_when_eager`, which compiles a task's methods when a user calls them outside any trace.

XLA's CPU compiler emits fused loops by its MLIR fusion emitters unless told otherwise; for the programs that
evaluate a task's generated equations (thousands of scalar operations) inside solver loops, its older LLVM
emitters compile about 1.4x faster and run about 1.2-1.3x faster (BENCHMARKS.md, "XLA's fusion emitters").
The SGD chains, the trainings and the samplers gain nothing from them (measured) and keep XLA's defaults, as
does a user's own code: the options are given to those programs, not to the process (XLA_FLAGS). The option
only concerns the CPU compiler: a GPU's ignores it.

The options are settled at the first compilation, not at import: testing that this XLA knows them compiles
a program, which starts JAX's backends, and the command line must be able to split the host CPU into
devices before that (`flowsim.devices.use_host_cores`). JAX takes compiler options only for a program of
its own: called inside another jitted function (whose program it joins), a function is jitted without them.
"""

import functools
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax._src import core as _jax_core

#: The options flowsim prefers, where the installed XLA knows them (an XLA that does not know an option
#: refuses to compile with it; one that predates the fusion emitters has only the LLVM ones).
PREFERRED_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


@functools.cache
def compiler_options() -> dict[str, object]:
    """The preferred options this XLA knows (each tried once, on a one-operation program).

    **Returns:** a dict of XLA debug options for `jax.jit(compiler_options=...)`.
    """
    known = {}
    for name, value in PREFERRED_OPTIONS.items():
        try:
            jax.jit(lambda x: x + 1, compiler_options={name: value}).lower(1.0).compile()
        except jax.errors.JaxRuntimeError as error:
            if "No such compile option" not in str(error):
                raise
        else:
            known[name] = value
    return known


def _at_top_level() -> bool:
    """Whether a jitted call now compiles a program of its own (no enclosing jit, vmap or grad is tracing).

    JAX has no public test of it; where its private one is missing, the answer is no (XLA's defaults)."""
    trace_state_clean = getattr(_jax_core, "trace_state_clean", None)
    return trace_state_clean is not None and trace_state_clean()


class _Compiled:
    """`fun` jitted by `make`: with `compiler_options()` at the top level, without them inside a trace."""

    def __init__(self, make: Callable, fun: Callable, kwargs: dict):
        functools.update_wrapper(self, fun)
        self._make, self._fun, self._kwargs = make, fun, kwargs
        self._top_level = self._nested = None

    def _get(self):
        if not _at_top_level():
            if self._nested is None:
                self._nested = self._make(self._fun, **self._kwargs)
            return self._nested
        if self._top_level is None:
            self._top_level = self._make(self._fun, compiler_options=compiler_options(), **self._kwargs)
        return self._top_level

    def __call__(self, *args, **kwargs):
        return self._get()(*args, **kwargs)


def filter_jit(fun: Callable, **kwargs):
    """`equinox.filter_jit(fun, **kwargs)` with `compiler_options()`; usable as `@filter_jit`."""
    return _Compiled(eqx.filter_jit, fun, kwargs)


def traced(tree):
    """`tree` with its Python numbers as JAX arrays.

    `eqx.filter_jit` treats Python floats as static, so a parameter such as lam
    would recompile every jitted function for each new value; arrays are traced.
    """
    return jax.tree.map(lambda x: jnp.asarray(x) if isinstance(x, int | float) and not isinstance(x, bool) else x, tree)


@filter_jit
def compiled_call(function: Callable, arguments: tuple, keywords: dict):
    """function(*arguments, **keywords) as one compiled program (per function, shapes and static values)."""
    return function(*arguments, **keywords)


def compiled_when_eager(function: Callable) -> Callable:
    """`function` run as one compiled program when called outside any trace; traced as it is inside one.

    For a task's methods that evaluate generated equations (thousands of operations): run eagerly, JAX
    would dispatch, and compile, each operation on its own. Compiled once per function, shapes and static
    arguments; Python numbers are traced (`traced`), so a new value of t or lam compiles nothing.
    """

    @functools.wraps(function)
    def wrapper(*arguments, **keywords):
        if not _at_top_level():
            return function(*arguments, **keywords)
        return compiled_call(function, traced(arguments), traced(keywords))

    return wrapper
