"""`filter_jit` with the XLA options that suit each kind of flowsim program, and `compiled_method`, which
makes each of a task's methods one program: compiled when a user calls it outside any trace, a nested call
traced once inside one.

Two kinds of programs take options (`OPTIONS`), each measured against XLA's defaults (BENCHMARKS.md):

- "solves", the programs that evaluate a task's generated equations (thousands of scalar operations) inside
  solver loops, and the Newton iterations: XLA's CPU compiler emits fused loops by its MLIR fusion emitters
  unless told otherwise; its older LLVM emitters compile them about 1.4x faster and run them about 1.2-1.3x
  faster ("XLA's fusion emitters"). jaxlib 0.12 (what pip installs on Python >= 3.12 today) no longer has
  the older emitters nor the option, so there the solves compile with XLA's defaults.
- "training", the compiled segments of the SGD chain on the overlaps and of the latent read-out's training
  (`flowsim.sgd.logged_programs`): LLVM's optimisation level 1 instead of 2 compiles them about 1.3x faster
  and runs them as fast ("the trainings' segments at LLVM's level 1"). SGD in R^d ran about 10 % slower so, and the
  solves compiled no faster: they keep level 2.

A user's own code keeps XLA's defaults: the options are given to those programs, not to the process
(XLA_FLAGS). They concern the CPU compiler only, and are given only where JAX's default backend is the CPU.

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

#: The options flowsim prefers for each kind of program, where the installed XLA knows them (an XLA that does
#: not know an option refuses to compile with it; one that predates the fusion emitters has only the LLVM ones).
OPTIONS = {
    "solves": {"xla_cpu_use_fusion_emitters": False},
    "training": {"xla_backend_optimization_level": 1},
}


@functools.cache
def compiler_options(kind: str = "solves") -> dict[str, object]:
    """The options of `OPTIONS[kind]` this XLA knows (each tried once, on a one-operation program); none where
    JAX's default backend is not the CPU.

    **Returns:** a dict of XLA debug options for `jax.jit(compiler_options=...)`.
    """
    if jax.default_backend() != "cpu":
        return {}
    known = {}
    for name, value in OPTIONS[kind].items():
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
    """`fun` jitted by `make`: with `compiler_options(kind)` at the top level, without them inside a trace."""

    def __init__(self, make: Callable, fun: Callable, kind: str, kwargs: dict):
        functools.update_wrapper(self, fun)
        self._make, self._fun, self._kind, self._kwargs = make, fun, kind, kwargs
        self._top_level = self._nested = None

    def _get(self):
        if not _at_top_level():
            if self._nested is None:
                self._nested = self._make(self._fun, **self._kwargs)
            return self._nested
        if self._top_level is None:
            self._top_level = self._make(self._fun, compiler_options=compiler_options(self._kind), **self._kwargs)
        return self._top_level

    def __call__(self, *args, **kwargs):
        return self._get()(*args, **kwargs)


def filter_jit(fun: Callable, *, kind: str = "solves", **kwargs):
    """`equinox.filter_jit(fun, **kwargs)` with `compiler_options(kind)`; usable as `@filter_jit`."""
    return _Compiled(eqx.filter_jit, fun, kind, kwargs)


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


def compiled_method(function: Callable) -> Callable:
    """`function` as one program of its own, per function, shapes and static arguments.

    For a task's methods that evaluate generated equations (thousands of operations). Called outside any
    trace, it is compiled (`compiled_call`): run eagerly, JAX would dispatch, and compile, each operation on
    its own. Called inside a trace (jax.jit, jax.vmap, jax.grad, a solver's loop), it joins the caller's
    program as a nested call, traced once however many times the caller calls it: a Rosenbrock step evaluates
    the field at its start, its stages and its end, and its solve is traced, batched and lowered with one
    copy of the equations, not one a call (XLA then inlines the calls: the same computation). Python numbers
    are traced (`traced`), so a new value of t or lam compiles nothing.
    """

    @functools.wraps(function)
    def wrapper(*arguments, **keywords):
        return compiled_call(function, traced(arguments), traced(keywords))

    return wrapper
