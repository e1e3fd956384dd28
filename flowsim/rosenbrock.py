"""A Rosenbrock (linearly implicit) solver for Diffrax: stiff flows at the cost of an explicit step.

Diffrax's implicit solvers (Kvaerno, KenCarp) solve a nonlinear system at every stage by Newton
iterations. A Rosenbrock method instead takes one Jacobian and one matrix factorisation per step and
solves a linear system per stage, with no iteration: for a small state whose Jacobian is known in
closed form (the generated one, through `flowsim._task.task_vector_field`'s JVP) a step then costs
a few field evaluations, and the step size is set by accuracy, not by the stiff directions.

`Rosenbrock4` is the four-stage method of order 4 with an embedded method of order 3 and
gamma = 1/2, in the parameters of Shampine (L. F. Shampine, "Implementation of Rosenbrock methods",
ACM Trans. Math. Softw. 8 (1982) 93-113; the form of Kaps and Rentrop, Numer. Math. 33 (1979) 55-68,
also in Hairer and Wanner, "Solving Ordinary Differential Equations II", section IV.7). It is
A-stable; three field evaluations per step (stages 3 and 4 share one) and one more for the dense
output (a cubic Hermite interpolant, first same as last).
"""

from collections.abc import Callable
from typing import ClassVar

import diffrax
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

__all__ = ["Rosenbrock4"]

# The method's parameters (Shampine 1982), in the Kaps-Rentrop form: stage i solves
# (I / (gamma h) - J) g_i = f(t0 + alpha_i h, y0 + sum_j A[i, j] g_j) + h c_t[i] f_t + sum_j C[i, j] g_j / h.
_GAMMA = 0.5
_A = ((0.0, 0.0, 0.0), (2.0, 0.0, 0.0), (48 / 25, 6 / 25, 0.0), (48 / 25, 6 / 25, 0.0))
_C = ((0.0, 0.0, 0.0), (-8.0, 0.0, 0.0), (372 / 25, 12 / 5, 0.0), (-112 / 125, -54 / 125, -2 / 5))
_ALPHA = (0.0, 1.0, 3 / 5, 3 / 5)
_C_T = (1 / 2, -3 / 2, 121 / 50, 29 / 250)
#: Weights of the solution (order 4) and of the error estimate (solution minus the order-3 method).
_B = (19 / 9, 1 / 2, 25 / 108, 125 / 108)
_E = (17 / 54, 7 / 36, 0.0, 125 / 108)


def _inverse(matrix):
    """The inverse of a small square matrix by Gauss-Jordan elimination with partial pivoting.

    In elementwise operations, unrolled over the columns: vmapped over a batch they stay elementwise.
    LAPACK's batched factorisation (`jax.scipy.linalg.lu_factor`, lineax's LU) stalls the batched loop
    under `jax.shard_map` on several CPU devices at large batches (measured: B = 10^4 on two devices
    never finished), and lineax also rejects right-hand sides typed by the device mesh.
    """
    n = matrix.shape[0]
    rows = jnp.arange(n)
    augmented = jnp.concatenate([matrix, jnp.eye(n, dtype=matrix.dtype)], axis=1)
    for column in range(n):
        pivot = column + jnp.argmax(jnp.abs(augmented[column:, column]))
        swap = jnp.where(rows == column, pivot, jnp.where(rows == pivot, column, rows))
        augmented = augmented[swap]
        augmented = augmented.at[column].divide(augmented[column, column])
        factors = augmented[:, column].at[column].set(0.0)
        augmented = augmented - factors[:, None] * augmented[column][None, :]
    return augmented[:, n:]


class Rosenbrock4(diffrax.AbstractAdaptiveSolver):
    """Shampine's 4-stage Rosenbrock method of order 4 (embedded order 3), for stiff ODEs.

    Use it as any Diffrax solver, with an adaptive step-size controller. The Jacobian of the vector
    field in y is taken by forward-mode autodiff (`jax.jacfwd`) once per step, and its derivative in
    t by one JVP (zero at no cost for an autonomous field); a field with a custom JVP (flowsim's tasks
    with a generated Jacobian) supplies it directly. Suited to small states: the linear solves go through
    the inverse of a dense matrix. Dense output: cubic Hermite.
    """

    term_structure: ClassVar = diffrax.ODETerm
    interpolation_cls: ClassVar[Callable[..., diffrax.ThirdOrderHermitePolynomialInterpolation]] = (
        diffrax.ThirdOrderHermitePolynomialInterpolation
    )

    def order(self, terms):
        return 4

    def init(self, terms, t0, t1, y0, args):
        return terms.vf(t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        # First same as last; Diffrax passes made_jump as a Python False where no jump can occur.
        if made_jump is False:
            f0 = solver_state
        else:
            f0 = jax.lax.cond(made_jump, lambda: terms.vf(t0, y0, args), lambda: solver_state)
        flat_y0, unravel = ravel_pytree(y0)
        h = t1 - t0

        def field(t, flat_y):
            return ravel_pytree(terms.vf(t, unravel(flat_y), args))[0]

        jacobian = jax.jacfwd(lambda flat_y: field(t0, flat_y))(flat_y0)
        f_t = jax.jvp(lambda t: field(t, flat_y0), (t0,), (jnp.ones_like(t0),))[1]
        inverse = _inverse(jnp.eye(flat_y0.size, dtype=jacobian.dtype) / (_GAMMA * h) - jacobian)
        stages = []
        f_stage = ravel_pytree(f0)[0]
        for i in range(4):
            if i in (1, 2):  # stage 4 reuses stage 3's evaluation
                y_stage = flat_y0 + sum(a * g for a, g in zip(_A[i], stages, strict=False) if a)
                f_stage = field(t0 + _ALPHA[i] * h, y_stage)
            rhs = f_stage + h * _C_T[i] * f_t + sum(c * g for c, g in zip(_C[i], stages, strict=False) if c) / h
            stages.append(inverse @ rhs)
        flat_y1 = flat_y0 + sum(b * g for b, g in zip(_B, stages, strict=True))
        error = sum(e * g for e, g in zip(_E, stages, strict=True) if e)
        y1 = unravel(flat_y1)
        f1 = terms.vf(t1, y1, args)
        increments = [jax.tree.map(lambda f: h * f, f) for f in (f0, f1)]  # the Hermite interpolant's k0, k1
        dense_info = {"y0": y0, "y1": y1, "k0": increments[0], "k1": increments[1]}
        return y1, unravel(error), dense_info, f1, diffrax.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)
