"""The stiff flow: the field's derivative from the generated Jacobian, the Rosenbrock solvers, the solver rule.

Independent routes: autodiff of the field (the custom JVP), a high-accuracy Tsit5 solve (the orders of
`Rosenbrock4` and `Rodas5`, and of Rodas5's dense output), scipy's LSODA given the generated Jacobian (the
solves of the stiff SLR flow).
"""

import functools

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate as scipy_integrate

from flowsim import schedules, slr
from flowsim._task import images, task_vector_field
from flowsim.integrate import (
    IMPLICIT_STEP_COST,
    Rodas5,
    Rosenbrock4,
    choose_solver,
    evaluate,
    explicit_steps,
    implicit_steps,
    traced,
)
from flowsim.tasks.slr import _generated as generated


def _test_field(t, y, args):
    """Nonlinear and non-autonomous, so that every term of the method (and f_t) is exercised."""
    return jnp.array([y[1] * jnp.cos(t), -(y[0] ** 3) + jnp.sin(2 * t) - 0.5 * y[1]])


Y0 = jnp.array([1.0, 0.3])


def _solve(solver, steps=None, t1=2.0, controller=None):
    # The step as an array: diffeqsolve keeps a Python float static, and each step size would compile again.
    return diffrax.diffeqsolve(
        diffrax.ODETerm(_test_field),
        solver,
        0.0,
        t1,
        None if steps is None else jnp.asarray(t1 / steps),
        Y0,
        stepsize_controller=controller or diffrax.ConstantStepSize(),
        max_steps=100_000,
    ).ys[-1]


@functools.cache
def _reference_end():
    """The test field's state at t = 2 by Tsit5 at rtol 1e-14: the reference of the order tests."""
    return _solve(diffrax.Tsit5(), controller=diffrax.PIDController(rtol=1e-14, atol=1e-14))


def _global_error_ratios(solver) -> np.ndarray:
    """The global error's ratios at t = 2 from one fixed step to half of it, 20 to 160 steps."""
    errors = np.array([float(jnp.max(jnp.abs(_solve(solver, n) - _reference_end()))) for n in (20, 40, 80, 160)])
    return errors[:-1] / errors[1:]


def _estimate_ratios(solver, steps) -> np.ndarray:
    """The ratio of one step's error estimate (from Y0 at t = 0) at each step size h to that at h / 2."""
    term = diffrax.ODETerm(_test_field)

    @jax.jit
    def estimate(h):  # one compiled step for every size
        state = solver.init(term, 0.0, h, Y0, None)
        return jnp.max(jnp.abs(solver.step(term, 0.0, h, Y0, None, state, False)[1]))

    return np.array([float(estimate(h)) / float(estimate(h / 2)) for h in steps])


def test_rosenbrock4_has_order_four_and_an_order_three_error_estimate():
    """Halving a fixed step divides the global error by 2^4 and the step's error estimate (the
    difference to the embedded order-3 method, a local error of order 4) by 2^4 too. Measured ratios
    16.4 to 17.3 for the global error at 10 to 160 steps (the asymptotic 16 is approached from above),
    15.5 for the estimate: the band [14, 18.5] separates order 4 from orders 3 (8) and 5 (32)."""
    ratios = _global_error_ratios(Rosenbrock4())
    assert np.all((ratios > 14) & (ratios < 18.5)), ratios
    assert 14 < _estimate_ratios(Rosenbrock4(), (0.1,))[0] < 18.5


def test_rodas5_has_order_five_and_an_order_four_error_estimate():
    """Halving a fixed step divides the global error by 2^5, and the step's error estimate (the embedded
    order-4 method's local error, of order 5) too. Measured: the global error's ratios 30.0, 31.1 and 31.6
    at 20 to 160 steps, the estimate's 27.6, 29.8 and 30.9 from h = 0.05 down; the band [26, 36] separates
    order 5 from orders 4 (16) and 6 (64). The tableau's eight stages, its c_t (the test field depends
    on t) and its stiffly accurate last stages all enter these errors."""
    ratios = _global_error_ratios(Rodas5())
    assert np.all((ratios > 26) & (ratios < 36)), ratios
    ratios = _estimate_ratios(Rodas5(), (0.05, 0.025, 0.0125))
    assert np.all((ratios > 26) & (ratios < 36)), ratios


def test_rodas5_dense_output_is_as_accurate_as_its_steps():
    """States saved between the steps (`RodasInterpolation`) with a fixed step: the error falls by 2^5 per
    halving, as at the steps (measured 30.1 and 31.2 from 20 steps), where a cubic Hermite interpolant
    (Rosenbrock4's) falls by 2^4 (measured 17.0 and 16.6), 30 to 50 times larger here at 80 steps."""
    between = jnp.array([0.3, 0.7, 1.1, 1.45, 1.9])

    def saved(solver, steps=None, controller=None):
        return diffrax.diffeqsolve(
            diffrax.ODETerm(_test_field),
            solver,
            0.0,
            2.0,
            None if steps is None else jnp.asarray(2.0 / steps),
            Y0,
            saveat=diffrax.SaveAt(ts=between),
            stepsize_controller=controller or diffrax.ConstantStepSize(),
            max_steps=100_000,
        ).ys

    reference = saved(diffrax.Tsit5(), controller=diffrax.PIDController(rtol=1e-14, atol=1e-14))
    errors = np.array([float(jnp.max(jnp.abs(saved(Rodas5(), n) - reference))) for n in (20, 40, 80)])
    ratios = errors[:-1] / errors[1:]
    assert np.all((ratios > 26) & (ratios < 36)), ratios
    hermite = float(jnp.max(jnp.abs(saved(Rosenbrock4(), 80) - reference)))
    assert hermite > 10 * errors[-1], (hermite, errors[-1])


def test_a_step_whose_stages_overflow_is_rejected_and_shrunk():
    """y' = -1e3 y^11 from y = 1, first step h = 1: Rodas5's stages (coefficients up to ~300) overflow to
    -inf with no NaN, which Diffrax's controller would turn into a NaN step size, rejected for ever (measured:
    2 000 rejections at t = 0 before the guard). The step returns a NaN candidate with an infinite error
    instead, so the step is shrunk, and the solve ends at y(10) = (1 + 1e5)^(-1/10) to 1e-8 (rtol 1e-10)."""
    term, y0 = diffrax.ODETerm(lambda t, y, args: -1e3 * y**11), jnp.array([1.0])
    solver = Rodas5()
    candidate, error = solver.step(term, 0.0, 1.0, y0, None, solver.init(term, 0.0, 1.0, y0, None), False)[:2]
    assert bool(jnp.isnan(candidate).all()) and bool(jnp.isinf(error).all())
    solution = diffrax.diffeqsolve(
        term,
        solver,
        0.0,
        10.0,
        1.0,
        y0,
        stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12),
        max_steps=2_000,
    )
    assert abs(float(solution.ys[-1, 0]) - (1 + 1e5) ** -0.1) < 1e-8


def test_rosenbrock4_inverse_pivots():
    """The stage matrices' inverse (Gauss-Jordan with partial pivoting) against numpy's, to 1e-12, on random
    5 x 5 matrices and on ones that need row exchanges (zero or tiny leading pivots)."""
    from flowsim.rosenbrock import _inverse

    rng = np.random.default_rng(0)
    matrices = rng.normal(size=(20, 5, 5))
    matrices[0, 0, 0] = 0.0
    matrices[1] = np.eye(5)[[1, 0, 3, 4, 2]] + 1e-14 * rng.normal(size=(5, 5))
    for matrix in matrices:
        np.testing.assert_allclose(np.asarray(_inverse(jnp.asarray(matrix))), np.linalg.inv(matrix), atol=1e-12)


@pytest.mark.parametrize(
    ("solver", "budgets"),
    [(Rosenbrock4(), (10_000, 50_000)), (Rodas5(), (2_000, 4_000))],
    ids=["Rosenbrock4", "Rodas5"],
)
def test_rosenbrock_solvers_solve_a_stiff_linear_problem_in_steps_set_by_accuracy(solver, budgets):
    """y' = lam (y - cos t) - sin t (solution cos t): at lam = -1e2 and -1e4 the error stays below 1e-7
    at rtol 1e-8 and the steps do not grow like |lam| (an explicit solver would need |lam| t / 3.5, 3e5
    at lam = -1e4; measured 5 885 and 31 512 steps with Rosenbrock4, 863 and 1 892 with Rodas5)."""
    for lam, most in zip((-1e2, -1e4), budgets, strict=True):

        def field(t, y, args, lam=lam):
            return lam * (y - jnp.cos(t)) - jnp.sin(t)

        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            solver,
            0.0,
            10.0,
            None,
            jnp.array([1.0]),
            saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 10.0, 7)),
            stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-10),
            max_steps=100_000,
        )
        assert float(jnp.max(jnp.abs(solution.ys[:, 0] - jnp.cos(solution.ts)))) < 1e-7
        assert int(solution.stats["num_steps"]) < most


# ---------------------------------------------------------------------------------------------
# The field's derivative: the generated Jacobian against autodiff


def _plain_field(t, y, task):
    return task.vector_field(t, y)


def _no_tangent(x):
    return np.zeros(np.shape(x), dtype=jax.dtypes.float0)


@pytest.mark.parametrize("scheduled", [False, True])
def test_field_jvp_equals_autodiff(scheduled, key):
    """The JVP of `task_vector_field` (generated Jacobian in y; autodiff in t and the parameters) equals
    forward-mode autodiff through the field's own operations, to 1e-10 relative (both are exact; they
    differ by the rounding of two different expressions of the same derivative)."""
    lam = schedules.InverseTimeDecay(0.8, 0.01, 1e-3) if scheduled else 0.8
    task = traced(slr.Problem(d=40, L=4, lam=lam, gamma=0.7, eps=0.1))
    y = jnp.array([0.3, 0.25, 0.1, -0.05, 0.2])
    t = jnp.asarray(1.5)
    dy, dt = jax.random.normal(key, (5,)), jnp.asarray(0.7)
    # Every parameter moves but d, an integer (its tangent is float0: it has none).
    dtask = jax.tree.map(lambda x: jnp.ones_like(x) if jnp.issubdtype(x.dtype, jnp.floating) else _no_tangent(x), task)

    def jvp(field):
        return jax.jvp(field, (t, y, task), (dt, dy, dtask))[1]

    custom, plain = evaluate(jvp, task_vector_field), evaluate(jvp, _plain_field)
    np.testing.assert_allclose(custom, plain, rtol=1e-10, atol=1e-12)
    # In y alone, the generated Jacobian itself.
    jacobian = evaluate(jax.jacfwd(task_vector_field, 1), t, y, task)
    np.testing.assert_allclose(jacobian, evaluate(task.jacobian, t, y), rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------
# The stiff SLR flow


def _lsoda(problem, m0, t_max):
    """scipy's LSODA given the generated Jacobian, at rtol 1e-11: the independent route."""
    parameters = (problem.d, problem.L, problem.lam, problem.gamma, problem.eps)
    field = jax.jit(lambda y: generated.flow(*y, *parameters))
    jacobian = jax.jit(lambda y: generated.jacobian(*y, *parameters))
    ends = []
    for start in np.asarray(m0):
        solution = scipy_integrate.solve_ivp(
            lambda t, y: np.asarray(field(y)),
            (0.0, t_max),
            start,
            method="LSODA",
            jac=lambda t, y: np.asarray(jacobian(y)),
            rtol=1e-11,
            atol=1e-13,
        )
        assert solution.success
        ends.append(solution.y[:, -1])
    return np.array(ends)


def test_solver_rule_takes_rodas5_where_the_flow_is_stiff(key):
    """The explicit steps estimated from the Jacobian at the starts and at (k*, v*) grow like d: about
    2 000 to t = 100 at d = 100, 12 000 at d = 400 (radius 424 at (k*, v*)), 1.2e6 at d = 40 000 (radius
    4.1e4). Rodas5's accuracy-bound steps, each costing `IMPLICIT_STEP_COST` explicit ones, cost about 7 700
    explicit steps at the engine's rtol 1e-10 and 2 450 at 1e-8: the rule keeps Tsit5 at d = 100 and takes
    Rodas5 at d = 400 and 40 000 (measured at d = 400, B = 2000: Tsit5 15 000 steps at 1e-8, Rodas5 575 at
    1e-8 and 2 176 at 1e-10, each costing 3 to 3.5 Tsit5 steps)."""
    small, middle, large = (slr.Problem(d=d, L=10, lam=0.1) for d in (100, 400, 40_000))
    starts = [slr.initial_overlaps(key, problem.d, 8, "sphere") for problem in (small, middle, large)]
    estimates = [explicit_steps(problem, m0, 100.0) for problem, m0 in zip((small, middle, large), starts, strict=True)]
    assert 10_000 < estimates[1] < 15_000 and 80 < estimates[2] / estimates[1] < 120, estimates
    loose, tight = IMPLICIT_STEP_COST * implicit_steps(100.0, 1e-8), IMPLICIT_STEP_COST * implicit_steps(100.0)
    assert estimates[0] < loose < tight < estimates[1], (estimates, loose, tight)
    assert isinstance(choose_solver(small, starts[0], 100.0)[0], diffrax.Tsit5)
    assert isinstance(choose_solver(small, starts[0], 100.0, rtol=1e-8)[0], diffrax.Tsit5)
    for problem, m0, estimate in zip((middle, large), starts[1:], estimates[1:], strict=True):
        solver, why = choose_solver(problem, m0, 100.0)
        assert isinstance(solver, Rodas5) and "stiff" in why and "Rodas5" in why
        assert f"an explicit solver needs about {estimate:.2g} steps per trajectory" in why, why
    # A span shorter than one step of either solver is said so (the rule, on rates, still chooses).
    brief = choose_solver(middle, starts[1], 1e-9)[1]
    assert brief.count("less than one step (") == 2 and "about" not in brief, brief


def test_a_decaying_schedule_makes_the_explicit_estimate_the_integral_of_the_radius(key):
    """The SGD experiment's flow (d = 80, lam = 2 / (1 + 0.1 t), 30 sphere starts, t = 200): the estimate is the
    trapezoid rule over the radii at the fixed lam of each sample time (the same Jacobians by an independent
    route, a constant-lam task; to 1e-9 relative), about a third of the estimate from t = 0 alone (8 700 against
    24 300 here; 9 800 against 39 000 from 30 other sphere starts, where the estimate at t = 0 chose Rodas5), and
    the rule takes Tsit5, which solves that flow from those starts in 12 955 steps (measured)."""
    from flowsim.integrate import _SCHEDULE_FRACTIONS, EXPLICIT_STABILITY

    task = slr.Problem(80, 10, schedules.InverseTimeDecay(2.0, 1e-4, 1e-3), eps=0.1)
    m0 = np.asarray(slr.initial_overlaps(key, 80, 30, "sphere"))
    times = 200.0 * _SCHEDULE_FRACTIONS
    constant = [slr.Problem(80, 10, float(task.lam_at(t)), eps=0.1) for t in times]
    radii = [EXPLICIT_STABILITY * explicit_steps(problem, m0, 1.0) for problem in constant]
    estimate = explicit_steps(task, m0, 200.0)
    np.testing.assert_allclose(estimate, np.trapezoid(radii, times) / EXPLICIT_STABILITY, rtol=1e-9)
    assert 8_000 < estimate < 0.4 * radii[0] * 200.0 / EXPLICIT_STABILITY, (estimate, radii[0])
    assert isinstance(choose_solver(task, m0, 200.0)[0], diffrax.Tsit5)


def test_the_explicit_estimate_is_the_largest_radius_at_every_state(key):
    """`explicit_steps` computes eigenvalues only where the bound ||J^64||_F^(1/64) of a state's spectral radius
    exceeds the largest radius found so far; its estimate equals the largest radius over every start (eigenvalues
    at each, NumPy) exactly, here with 298 starts at d = 400 and lam = 1 whose stiffest lies among the last. The bound
    holds (>= the radius, within 5 % of it at these Jacobians; measured 0.13 % at most) and is 0 where a power of J
    is 0."""
    from flowsim.integrate import _jacobians, _radius_bounds

    problem = slr.Problem(d=400, L=10, lam=1.0)
    targets = images(problem, np.asarray(problem.targets)).reshape(-1, 5)
    m0 = np.asarray(slr.initial_overlaps(key, problem.d, 300 - len(targets), "sphere"))
    # Every Jacobian by the program `explicit_steps` uses (chunks of 64 states), so that it is compiled once.
    states = np.concatenate([m0, targets, np.repeat(m0[:1], 20, axis=0)]).reshape(-1, 64, 5)
    jacobians = np.concatenate([np.asarray(evaluate(_jacobians, jnp.asarray(0.0), rows, problem)) for rows in states])
    radii = np.max(np.abs(np.linalg.eigvals(jacobians[:300])), axis=1)
    order = np.argsort(radii[: len(m0)])
    m0 = m0[order]  # the stiffest last
    bounds = _radius_bounds(jacobians[:300])
    assert np.all(bounds >= radii * (1 - 1e-12)) and np.all(bounds <= 1.05 * radii)
    assert explicit_steps(problem, m0, 100.0) == np.max(radii) * 100.0 / 3.5
    np.testing.assert_array_equal(_radius_bounds(np.zeros((2, 5, 5))), [0.0, 0.0])
    nilpotent = 3.0 * np.diag(np.ones(4), 1)[None]  # J^5 = 0: every eigenvalue is 0
    np.testing.assert_array_equal(_radius_bounds(nilpotent), [0.0])


def test_stiff_flow_steps_are_set_by_accuracy_not_by_d(key):
    """Rodas5 (the rule's choice) from 4 sphere starts to t = 100 at d = 40 000: the end points equal
    LSODA's (given the generated Jacobian, rtol 1e-11) to 1e-7 (the saved-state accuracy flowsim's tests ask
    of every solve against scipy), and the mean steps (measured 2 400 for 8 starts) are within 3x of the
    accuracy-bound count the solver rule assumes, `implicit_steps` (2 210 at rtol 1e-10, whatever d), far
    below the stability-bound count of an explicit solver (`explicit_steps`: 1.2 million, ~30 d). The starts
    are the first four of the test above (one compiled draw). The steps against d, from d = 80 to 40 000, are
    benchmarks/flow_stiffness.py's."""
    problem = slr.Problem(d=40_000, L=10, lam=0.1)
    m0 = slr.initial_overlaps(key, problem.d, 8, "sphere")[:4]
    solved = slr.solve_flow(problem, m0, np.linspace(0.0, 100.0, 3))
    assert np.asarray(solved.ok).all()
    np.testing.assert_allclose(np.asarray(solved.y_final), _lsoda(problem, m0, 100.0), rtol=0, atol=1e-7)
    steps = float(np.mean(np.asarray(solved.num_steps)))
    assert steps < 3 * implicit_steps(100.0) < explicit_steps(problem, m0, 100.0) / 20, steps
