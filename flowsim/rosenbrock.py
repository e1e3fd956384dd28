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

`Rodas5` is Di Marzo's eight-stage, stiffly accurate method of order 5 with an embedded method of order 4
and a dense output of order 4 (G. Di Marzo, "RODAS5(4)", Universite de Geneve, 1993; Hairer and Wanner's
form): at the tolerances of flowsim's solves it takes 4 to 7 times fewer steps than `Rosenbrock4`, each
of eight field evaluations. The engine solves stiff flows with it (`flowsim.integrate.choose_solver`).
Both are one step (`_Rosenbrock`) driven by their tableau.
"""

from collections.abc import Callable
from typing import ClassVar, NamedTuple

import diffrax
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

__all__ = ["Rodas5", "RodasInterpolation", "Rosenbrock4"]

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

# Rodas5 (G. Di Marzo, "RODAS5(4): methodes de Rosenbrock d'ordre 5(4) adaptees aux problemes
# differentiels-algebriques", Universite de Geneve, 1993; in Hairer and Wanner's form), as gamma, A, C, alpha,
# c_t, b, e. Stiffly accurate: stages 6 to 8 are taken at t0 + h from the solution's partial sums, so the
# solution is stage 6's point plus g6 + g7 + g8 and the error estimate is g8.
_R5_A6 = (-14.09640773051259, 6.925207756232704, -41.47510893210728, 2.343771018586405, 24.13215229196062)
_RODAS5 = (
    0.19,
    (
        (),
        (2.0,),
        (3.040894194418781, 1.041747909077569),
        (2.576417536461461, 1.622083060776640, -0.9089668560264532),
        (2.760842080225597, 1.446624659844071, -0.3036980084553738, 0.2877498600325443),
        _R5_A6,
        (*_R5_A6, 1.0),
        (*_R5_A6, 1.0, 1.0),
    ),
    (
        (),
        (-10.31323885133993,),
        (-21.04823117650003, -7.234992135176716),
        (32.22751541853323, -4.943732386540191, 19.44922031041879),
        (-20.69865579590063, -8.816374604402768, 1.260436877740897, -0.7495647613787146),
        (-46.22004352711257, -17.49534862857472, -289.6389582892057, 93.60855400400906, 318.3822534212147),
        (
            34.20013733472935,
            -14.15535402717690,
            57.82335640988400,
            25.83362985412365,
            1.408950972071624,
            -6.551835421242162,
        ),
        (
            42.57076742291101,
            -13.80770672017997,
            93.98938432427124,
            18.77919633714503,
            -31.58359187223370,
            -6.685968952921985,
            -5.810979938412932,
        ),
    ),
    (0.0, 0.38, 0.3878509998321533, 0.4839718937873840, 0.4570477008819580, 1.0, 1.0, 1.0),
    (0.19, -0.1823079225333714636, -0.319231832186874912, 0.3449828624725343, -0.377417564392089818, 0.0, 0.0, 0.0),
    (*_R5_A6, 1.0, 1.0, 1.0),
    (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0),
    # The dense output's D1, D2, D3 (`RodasInterpolation`), as weights of the eight stages.
    (
        (
            27.354592673333357,
            -6.925207756232857,
            26.40037733258859,
            0.5635230501052979,
            -4.699151156849391,
            -1.6008677469422725,
            -1.5306074446748028,
            -1.3929872940716344,
        ),
        (
            44.19024239501722,
            1.3677947663381929e-13,
            202.93261852171622,
            -35.5669339789154,
            -181.91095152160645,
            3.4116351403665033,
            2.5793540257308067,
            2.2435122582734066,
        ),
        (
            -44.0988150021747,
            -5.755396159656812e-13,
            -181.26175034586677,
            56.99302194811676,
            183.21182741427398,
            -7.480257918273637,
            -5.792426076169686,
            -5.32503859794143,
        ),
    ),
)


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


class _Tableau(NamedTuple):
    """A Rosenbrock method in the Kaps-Rentrop form: stage i solves
    (I / (gamma h) - J) g_i = f(t0 + alpha_i h, y0 + sum_j A[i][j] g_j) + h c_t[i] f_t + sum_j C[i][j] g_j / h;
    the solution is y0 + sum_i b_i g_i, the error estimate sum_i e_i g_i. A stage whose A row and alpha equal
    the previous stage's reuses its field evaluation. `dense`: the weights of the stages in the method's own
    dense output (`RodasInterpolation`; none: cubic Hermite). `loop`: the stages in a compiled loop (the field
    traced once: a smaller program to compile, a slightly slower step) rather than unrolled."""

    order: int
    gamma: float
    A: tuple
    C: tuple
    alpha: tuple
    c_t: tuple
    b: tuple
    e: tuple
    dense: tuple = ()
    loop: bool = False


class RodasInterpolation(diffrax.AbstractLocalInterpolation):
    """The dense output of the Rodas methods (Hairer and Wanner's form): with s = (t - t0) / (t1 - t0),
    y(s) = (1 - s) y0 + s (y1 + (1 - s) (D1 + s (D2 + s D3))), each D a combination of the step's stages."""

    t0: float
    t1: float
    coeffs: object  # per leaf: the quartic's coefficients in s, highest first

    def __init__(self, *, t0, t1, y0, y1, stage_terms):
        def quartic(y0, y1, d1, d2, d3):
            return jnp.stack([-d3, d3 - d2, d2 - d1, y1 - y0 + d1, y0])

        self.t0, self.t1 = t0, t1
        self.coeffs = jax.tree.map(quartic, y0, y1, *stage_terms)

    def evaluate(self, t0, t1=None, left=True):
        del left
        if t1 is not None:
            return self.evaluate(t1) - self.evaluate(t0)
        s = (t0 - self.t0) / (self.t1 - self.t0)
        return jax.tree.map(lambda coeffs: jnp.polyval(coeffs, s), self.coeffs)


class _Rosenbrock(diffrax.AbstractAdaptiveSolver):
    """A Rosenbrock method given by its `tableau`: one Jacobian and one inverse per step, a linear solve a stage.

    The Jacobian of the vector field in y is taken by forward-mode autodiff (`jax.jacfwd`) once per step,
    and its derivative in t by one JVP (zero at no cost for an autonomous field); a field with a custom
    JVP (flowsim's tasks with a generated Jacobian) supplies it directly. Suited to small states: the
    linear solves go through the inverse of a dense matrix. First same as last: the field at the step's end
    starts the next step.
    """

    term_structure: ClassVar = diffrax.ODETerm
    interpolation_cls: ClassVar[Callable[..., diffrax.ThirdOrderHermitePolynomialInterpolation]] = (
        diffrax.ThirdOrderHermitePolynomialInterpolation
    )
    tableau: ClassVar[_Tableau]

    def order(self, terms):
        return self.tableau.order

    def init(self, terms, t0, t1, y0, args):
        return terms.vf(t0, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        tableau = self.tableau
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
        inverse = _inverse(jnp.eye(flat_y0.size, dtype=jacobian.dtype) / (tableau.gamma * h) - jacobian)
        f0_flat = ravel_pytree(f0)[0]
        if tableau.loop:
            stages = self._looped_stages(field, t0, h, flat_y0, f0_flat, f_t, inverse)
        else:
            stages = self._unrolled_stages(field, t0, h, flat_y0, f0_flat, f_t, inverse)
        flat_y1 = flat_y0 + sum(b * g for b, g in zip(tableau.b, stages, strict=True) if b)
        error = sum(e * g for e, g in zip(tableau.e, stages, strict=True) if e)
        # A step too long for a nonlinear field can take a stage where it overflows. Diffrax's controller turns
        # an infinite candidate into a NaN error, and a NaN step size for ever; a NaN candidate with an infinite
        # error is rejected and the step shrunk instead.
        finite = jnp.all(jnp.isfinite(flat_y1)) & jnp.all(jnp.isfinite(error))
        flat_y1, error = jnp.where(finite, flat_y1, jnp.nan), jnp.where(finite, error, jnp.inf)
        y1 = unravel(flat_y1)
        f1 = terms.vf(t1, y1, args)
        if tableau.dense:  # the method's own dense output, from its stages
            terms_of = [unravel(sum(w * g for w, g in zip(row, stages, strict=True) if w)) for row in tableau.dense]
            dense_info = {"y0": y0, "y1": y1, "stage_terms": terms_of}
        else:
            increments = [jax.tree.map(lambda f: h * f, f) for f in (f0, f1)]  # the Hermite interpolant's k0, k1
            dense_info = {"y0": y0, "y1": y1, "k0": increments[0], "k1": increments[1]}
        return y1, unravel(error), dense_info, f1, diffrax.RESULTS.successful

    def _unrolled_stages(self, field, t0, h, flat_y0, f0, f_t, inverse):
        tableau, stages, f_stage = self.tableau, [], f0
        rows = zip(tableau.A, tableau.C, tableau.alpha, tableau.c_t, strict=True)
        for i, (a_row, c_row, alpha, c_t) in enumerate(rows):
            if i and (a_row, alpha) != (tableau.A[i - 1], tableau.alpha[i - 1]):
                y_stage = flat_y0 + sum(a * g for a, g in zip(a_row, stages, strict=False) if a)
                f_stage = field(t0 + alpha * h, y_stage)
            rhs = f_stage + h * c_t * f_t + sum(c * g for c, g in zip(c_row, stages, strict=False) if c) / h
            stages.append(inverse @ rhs)
        return stages

    def _looped_stages(self, field, t0, h, flat_y0, f0, f_t, inverse):
        # One traced field evaluation for all stages (a compiled loop): a smaller program to compile.
        tableau = self.tableau
        count = len(tableau.alpha)
        A = jnp.array([list(row) + [0.0] * (count - len(row)) for row in tableau.A])
        C = jnp.array([list(row) + [0.0] * (count - len(row)) for row in tableau.C])
        alpha, c_t = jnp.array(tableau.alpha), jnp.array(tableau.c_t)
        first = inverse @ (f0 + h * c_t[0] * f_t)
        stages = jnp.zeros((count, flat_y0.size), flat_y0.dtype).at[0].set(first)

        def stage(i, stages):
            f_stage = field(t0 + alpha[i] * h, flat_y0 + A[i] @ stages)
            return stages.at[i].set(inverse @ (f_stage + h * c_t[i] * f_t + (C[i] @ stages) / h))

        stages = jax.lax.fori_loop(1, count, stage, stages)
        return list(stages)

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)


class Rosenbrock4(_Rosenbrock):
    """Shampine's 4-stage Rosenbrock method of order 4 (embedded order 3), for stiff ODEs.

    Use it as any Diffrax solver, with an adaptive step-size controller. Three field evaluations per
    step (stages 3 and 4 share one) and one for the dense output, one Jacobian and one 5 x 5 inverse.
    """

    tableau: ClassVar = _Tableau(4, _GAMMA, _A, _C, _ALPHA, _C_T, _B, _E)


class Rodas5(_Rosenbrock):
    """Di Marzo's 8-stage Rosenbrock method Rodas5 of order 5 (embedded order 4), stiffly accurate, for stiff ODEs.

    Use it as any Diffrax solver, with an adaptive step-size controller. Fewer steps than `Rosenbrock4` at
    tight tolerances (order 5), each of eight field evaluations, one Jacobian and one inverse.
    """

    interpolation_cls: ClassVar = RodasInterpolation
    tableau: ClassVar = _Tableau(5, *_RODAS5, loop=True)
