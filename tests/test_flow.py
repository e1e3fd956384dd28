"""The flow and the discrete map on the overlaps against independent computations in R^d, and the solvers.

Compile time dominates on a small machine, so the tests share compiled functions: the generated
equations are jitted once with their parameters traced, the R^d references are jitted once per
(d, L), and every Diffrax solve of the 5-D flow at constant lam uses the same problem, batch size
(3) and number of saved times (11), so that they all hit one compiled solve (the solves under a
schedule and with a steady-state stop compile once each).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate as scipy_integrate
from scipy import stats

from flowsim import Status, schedules, slr
from flowsim.tasks.slr import _generated as generated
from tests.reference import random_realizable_overlaps
from tests.shared import compiles_nothing

#: Parameter sets of the R^d comparisons: L, lam, gamma and eps vary, d = 7 and d = 40 (L is static in a
#: jitted function of a Problem, and d shapes the R^d vectors here: two (d, L) pairs, two compilations).
RD_PROBLEMS = [
    slr.Problem(7, 3, 0.6, 0.5**0.5, 0.1),
    slr.Problem(7, 3, 1.5, 1.2, 0.0),
    slr.Problem(40, 10, 0.3, 0.7, 0.5),
]

#: The problem of every Diffrax solve at constant lam (one compiled solve for all of them).
PROBLEM = slr.Problem(40, 4, 0.5, 0.7, 0.2)
#: Three realizable initial conditions off M, with sizeable overlaps of both signs.
M0 = np.array(
    [
        [0.30, 0.25, 0.10, -0.05, 0.20],
        [-0.20, 0.40, 0.30, 0.10, -0.10],
        [0.05, -0.10, -0.20, 0.15, 0.30],
    ]
)
TS = np.linspace(0.0, 100.0, 11)


def _parameters(problem):
    return jnp.array([problem.d, problem.L, problem.lam, problem.gamma, problem.eps], dtype=float)


def _unit(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


# ---------------------------------------------------------------------------------------------
# Independent references in R^d


@jax.jit
def _rd_reference(problem, truth, k, v, alpha):
    """Batched over rows of k, v: the overlap velocities of the Riemannian flow and the overlaps
    after one projected GD step of size alpha, both computed in R^d by jax.grad of the R^d risk."""
    k_star, v_star = truth

    def one(k, v):
        def risk(k, v):
            return slr.population_risk(problem, slr.overlaps(k, v, truth))

        grad_k, grad_v = jax.grad(risk, argnums=(0, 1))(k, v)
        dk = -(grad_k - (k @ grad_k) * k)
        dv = -(grad_v - (v @ grad_v) * v)
        velocity = jnp.stack([dk @ k_star, dv @ v_star, dv @ k_star, dk @ v_star, dk @ v + k @ dv])
        k_new, v_new = _unit(k + alpha * dk), _unit(v + alpha * dv)
        return velocity, slr.overlaps(k_new, v_new, truth)

    return jax.vmap(one)(k, v)


def _random_pairs(key, truth, n):
    """n pairs of unit (k, v) in R^d, each a random mix of k*, v* and a random unit direction."""
    key_weights, key_noise = jax.random.split(key)
    d = truth.k_star.shape[0]
    weights = jax.random.uniform(key_weights, (n, 2, 3), minval=-1.0, maxval=1.0)
    noise = _unit(jax.random.normal(key_noise, (n, 2, d)))
    basis = jnp.stack([truth.k_star, truth.v_star])
    kv = _unit(weights[..., :2] @ basis + weights[..., 2:] * noise)
    return kv[:, 0], kv[:, 1]


def _rd_setup(key, problem, n=12):
    key_truth, key_points = jax.random.split(key)
    truth = slr.ground_truth(key_truth, problem.d)
    k, v = _random_pairs(key_points, truth, n)
    m = slr.overlaps(k, v, truth)
    # Realizable by construction, with sizeable overlaps, and off M.
    slr.check_overlaps(m)
    assert float(jnp.min(jnp.max(jnp.abs(m), axis=-1))) > 0.1
    assert float(jnp.min(jnp.linalg.norm(m[:, 2:], axis=-1))) > 0.01
    return truth, k, v, m


# ---------------------------------------------------------------------------------------------
# Jitted generated equations (parameters traced: one compilation each)


@jax.jit
def _flow(m, p):
    return generated.flow(*jnp.moveaxis(m, -1, 0), *p)


@jax.jit
def _jacobians(m, p):
    """(generated jacobian, jacfwd of generated flow) at points m (batch, 5)."""
    jac = generated.jacobian(*jnp.moveaxis(m, -1, 0), *p)
    auto = jax.vmap(jax.jacfwd(lambda x: generated.flow(*x, *p)))(m)
    return jac, auto


@jax.jit
def _manifold(kn, p):
    """At points (kappa, nu) of M: the 2-D flow, its generated Jacobian and jacfwd, and the 5-D flow."""
    kappa, nu = jnp.moveaxis(kn, -1, 0)
    zeros = jnp.zeros_like(kappa)
    flow2 = generated.flow_on_manifold(kappa, nu, *p)
    jac2 = generated.jacobian_on_manifold(kappa, nu, *p)
    auto2 = jax.vmap(jax.jacfwd(lambda x: generated.flow_on_manifold(*x, *p)))(kn)
    flow5 = generated.flow(kappa, nu, zeros, zeros, zeros, *p)
    return flow2, jac2, auto2, flow5


_pgd_map = jax.jit(generated.pgd_map)


# ---------------------------------------------------------------------------------------------
# 1. The 5-D flow against R^d


@pytest.mark.parametrize("problem", RD_PROBLEMS, ids=str)
def test_flow_equals_riemannian_gradient_flow_in_Rd(problem, key):
    """At 12 realizable off-M points, the generated flow equals the overlap derivatives of
    dk/dt = -(I - kk^T) grad_k f, dv/dt = -(I - vv^T) grad_v f with f the R^d risk (jax.grad).

    Tolerance 1e-9 absolute (flows here are O(1-60)): both sides are float64 evaluations of the same
    derivative by different routes (SymPy chain rule on the Gram matrix vs autodiff in R^d), so they
    agree to roundoff (<= 3e-14 observed); any error in the derivation would be O(1)."""
    truth, k, v, m = _rd_setup(key, problem)
    ours = _flow(m, _parameters(problem))
    reference, _ = _rd_reference(problem, truth, k, v, 0.0)
    assert ours.shape == (12, 5)
    assert float(jnp.max(jnp.abs(reference))) > 0.1  # a non-trivial flow
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# 2. Jacobians against autodiff


@pytest.mark.parametrize("problem", [RD_PROBLEMS[0], RD_PROBLEMS[2]], ids=str)
def test_jacobian_equals_jacfwd_of_flow(problem):
    """generated.jacobian vs jax.jacfwd(generated.flow) at 6 realizable points, and
    jacobian_on_manifold vs jacfwd(flow_on_manifold) at 6 points of M.

    Tolerance 1e-10 relative to the largest entry of each Jacobian (entries O(1-100)): the same
    derivatives evaluated through different expression trees, equal up to float64 roundoff."""
    p = _parameters(problem)
    points = jnp.asarray(random_realizable_overlaps(np.random.default_rng(3), 6))
    jac, auto = _jacobians(points, p)
    assert jac.shape == (6, 5, 5)
    scale = float(jnp.max(jnp.abs(auto)))
    assert scale > 0.1
    np.testing.assert_allclose(jac, auto, rtol=0, atol=1e-10 * scale)

    kn = jnp.asarray(np.random.default_rng(4).uniform(-1, 1, (6, 2)))
    _, jac2, auto2, _ = _manifold(kn, p)
    assert jac2.shape == (6, 2, 2)
    scale2 = float(jnp.max(jnp.abs(auto2)))
    assert scale2 > 0.1
    np.testing.assert_allclose(jac2, auto2, rtol=0, atol=1e-10 * scale2)


# ---------------------------------------------------------------------------------------------
# 3. The invariant manifold M = {theta = eta = rho = 0}


@pytest.mark.parametrize("problem", [RD_PROBLEMS[1], PROBLEM], ids=str)
def test_flow_on_manifold_is_restriction_of_5d_flow(problem):
    """At 20 points of M: flow_on_manifold equals the (kappa, nu) part of the 5-D flow and the 5-D
    flow's (theta, eta, rho) part vanishes, both to 1e-14 absolute (the vanishing terms carry a
    factor theta, eta or rho and are exactly zero; the (kappa, nu) parts are O(1) values computed by
    two expression trees, equal to a few ulps)."""
    kn = jnp.asarray(np.random.default_rng(5).uniform(-1, 1, (20, 2)))
    flow2, _, _, flow5 = _manifold(kn, _parameters(problem))
    assert float(jnp.max(jnp.abs(flow2))) > 0.1
    np.testing.assert_allclose(flow5[:, :2], flow2, rtol=0, atol=1e-14)
    np.testing.assert_array_less(jnp.abs(flow5[:, 2:]), 1e-14)


def test_solve_flow_from_M_stays_on_M(key):
    """The 5-D solve from three initial overlaps drawn on M keeps |(theta, eta, rho)| <= 1e-12 on
    [0, 50] (the field's off-M components vanish on M, so the solver never leaves it), while
    (kappa, nu) move by O(1)."""
    # The first three of 4000 draws: the draw's compiled program is the law test's below (n is static, d is not).
    m0 = np.asarray(slr.initial_overlaps(key, PROBLEM.d, 4000, "manifold"))[:3]
    solution = slr.solve_flow(PROBLEM, m0, np.linspace(0.0, 50.0, 11))
    assert (np.asarray(solution.status) == Status.SUCCESS).all()
    ys = np.asarray(solution.ys)
    assert np.isfinite(ys).all()
    assert np.max(np.linalg.norm(ys[:, :, 2:], axis=-1)) <= 1e-12
    assert np.max(np.abs(ys[:, -1, :2] - ys[:, 0, :2])) > 0.1


# ---------------------------------------------------------------------------------------------
# 4. The discrete map against projected GD in R^d


@pytest.mark.parametrize("alpha", [1e-3, 0.1])
@pytest.mark.parametrize("problem", [RD_PROBLEMS[0], RD_PROBLEMS[2]], ids=str)
def test_pgd_map_equals_projected_gd_step_in_Rd(problem, alpha, key):
    """pgd_map equals the overlaps of k' = (k + alpha dk/dt)/|.|, v' = (v + alpha dv/dt)/|.| computed
    in R^d (jax.grad, explicit renormalisation) at 12 realizable points, to 1e-12 absolute
    (overlaps are O(1), both sides float64; the step itself moves them by 1e-2 (alpha = 1e-3) to 1)."""
    truth, k, v, m = _rd_setup(key, problem)
    ours = _pgd_map(*jnp.moveaxis(m, -1, 0), problem.d, problem.L, problem.lam, problem.gamma, problem.eps, alpha)
    _, reference = _rd_reference(problem, truth, k, v, alpha)
    assert float(jnp.max(jnp.abs(reference - m))) > 1e-4  # the step moved the overlaps
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# 5. solve_flow against scipy


@pytest.fixture(scope="module")
def constant_solve():
    """The 5-D solve from M0 at constant lam, saved at TS (shared by several tests)."""
    return slr.solve_flow(PROBLEM, M0, TS)


def test_a_flow_at_another_d_runs_the_compiled_programs(constant_solve, caplog):
    """d is a number the engine traces: a solve at another d (the same shapes: starts, times, L, step budget)
    compiles nothing (no XLA compilation logged: the solve, the solver choice's Jacobians, the risk along the
    way), and its flow is another one."""
    other = slr.Problem(60, PROBLEM.L, PROBLEM.lam, PROBLEM.gamma, PROBLEM.eps)
    assert other.flow_max_steps() == PROBLEM.flow_max_steps()
    with compiles_nothing(caplog):
        solved = jax.block_until_ready(slr.solve_flow(other, M0, TS))
    assert not solved.failures()
    assert np.max(np.abs(np.asarray(solved.ys) - np.asarray(constant_solve.ys))) > 1e-3


def _scipy_solve(problem, y0, ts, lam):
    """DOP853 on the generated field (jitted, called with NumPy inputs) for a batch y0 (batch, 5),
    integrated as one system (one field call per stage for the whole batch); lam(t) returns, in
    NumPy, the inverse temperature of each trajectory at time t."""
    batch = len(y0)
    base = np.array([problem.d, problem.L, problem.lam, problem.gamma, problem.eps], dtype=float)
    p = np.repeat(base[:, None], batch, axis=1)

    def rhs(t, y):
        p[2] = lam(t)
        return np.asarray(_flow(y.reshape(batch, 5), p)).ravel()

    solution = scipy_integrate.solve_ivp(
        rhs, (ts[0], ts[-1]), np.ravel(y0), method="DOP853", rtol=1e-12, atol=1e-14, t_eval=ts
    )
    assert solution.success, solution.message
    return solution.y.T.reshape(len(ts), batch, 5).swapaxes(0, 1)


def test_solve_flow_agrees_with_scipy(constant_solve):
    """The three trajectories of M0 at constant lam and again under the paper's schedule
    InverseTimeDecay(lam0=1, rate=1e-4, step_size=4e-3), i.e. lam(t) = 1 / (1 + t / 40), agree with
    scipy DOP853 (rtol 1e-12, atol 1e-14) to 1e-7 at every saved time on [0, 100]. The Diffrax
    solve runs at rtol 1e-10, atol 1e-12 and the flows contract towards fixed points, so the
    global error stays far below 1e-7; a wrong field or schedule clock would be O(1e-2) or worse.
    The six trajectories go to scipy as one 30-dimensional system: d = 40 makes the flow mildly
    stiff (Jacobian eigenvalues up to ~70), which bounds DOP853's step, so one system costs the
    field calls of one trajectory."""
    schedule = schedules.InverseTimeDecay(lam0=1.0, rate=1e-4, step_size=4e-3)
    scheduled = slr.solve_flow(PROBLEM.with_schedule(schedule), M0, TS)
    assert (np.asarray(constant_solve.status) == Status.SUCCESS).all()
    assert (np.asarray(scheduled.status) == Status.SUCCESS).all()
    ours = np.concatenate([np.asarray(constant_solve.ys), np.asarray(scheduled.ys)])
    reference = _scipy_solve(
        PROBLEM,
        np.concatenate([M0, M0]),
        TS,
        lambda t: np.repeat([PROBLEM.lam, 1.0 / (1.0 + 1e-4 * t / 4e-3)], 3),
    )
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-7)
    assert np.max(np.abs(ours[:, -1] - ours[:, 0])) > 0.5  # the trajectories travel
    # The schedule matters: the trajectories differ from those at constant lam = problem.lam.
    assert np.max(np.abs(ours[3:] - ours[:3])) > 1e-2


# ---------------------------------------------------------------------------------------------
# 6. The map converges to the flow as alpha -> 0


def test_map_converges_to_flow_linearly():
    """From M0, iterate_map with step alpha for T / alpha steps vs the flow at T = 2 (Diffrax,
    rtol 1e-10: error ~5e-12 against scipy, far below the map's 1e-4 - 1e-2 error). Projected GD is a
    first-order scheme, error C alpha + O(alpha^2), so the fitted log-log slope of each trajectory's
    error lies in [0.8, 1.2] (alpha = 0.02 is still pre-asymptotic for trajectory 1, hence alphas
    from 0.01 down to 0.00125).

    At constant lam the map is autonomous, so the T / alpha steps run as calls of `block` steps each
    started from the last iterate: one compiled scan (the scan length is static) serves every alpha."""
    T, block, alphas = 2.0, 200, np.array([0.01, 0.005, 0.0025, 0.00125])
    flow = slr.solve_flow(PROBLEM, M0, np.linspace(0.0, T, 11))
    assert (np.asarray(flow.status) == Status.SUCCESS).all()
    target = np.asarray(flow.ys[:, -1])
    assert np.max(np.abs(target - M0)) > 0.1  # the flow moves over [0, T]
    errors = []
    for alpha in alphas:
        m = M0
        for _ in range(round(T / alpha) // block):
            iterates = slr.iterate_map(PROBLEM, m, float(alpha), block, log_every=block)
            assert list(iterates.steps) == [0, block]
            m = np.asarray(iterates.ys[:, -1])
        errors.append(np.max(np.abs(m - target), axis=-1))
    errors = np.array(errors)  # (alphas, trajectories)
    assert (np.diff(errors, axis=0) < 0).all()
    for j in range(len(M0)):
        slope = np.polyfit(np.log(alphas), np.log(errors[:, j]), 1)[0]
        assert 0.8 <= slope <= 1.2, (j, slope, errors[:, j])


# ---------------------------------------------------------------------------------------------
# 7-8. Status reports


def test_invalid_initial_condition_is_reported(constant_solve):
    """Row 1 replaced by the unrealizable [0.9, 0, 0, 0.9, 0] (|k|^2 >= 0.9^2 + 0.9^2 > 1): it is
    reported, its values are NaN, and rows 0 and 2 equal those of the solve of M0 to 1e-14 (0 observed):
    an invalid row leaves the others untouched. The solve "without it" keeps the batch shape, with
    the valid M0[1] in place of the invalid row, so that it reuses the compiled solve."""
    m0 = M0.copy()
    m0[1] = [0.9, 0.0, 0.0, 0.9, 0.0]
    solution = slr.solve_flow(PROBLEM, m0, TS)
    status = np.asarray(solution.status)
    assert status[1] == Status.INVALID_INITIAL_CONDITION
    assert status[0] == status[2] == Status.SUCCESS
    (failure,) = solution.failures()
    assert failure.index == 1 and failure.status == Status.INVALID_INITIAL_CONDITION
    assert failure.time == TS[0]
    assert "y0[1]" in failure.reason and "not realizable" in failure.reason
    assert np.isnan(np.asarray(solution.ys[1])).all()
    assert np.isnan(np.asarray(solution.y_final[1])).all()
    assert np.isnan(np.asarray(solution.observed[1])).all()
    for i in (0, 2):
        np.testing.assert_allclose(solution.ys[i], constant_solve.ys[i], rtol=0, atol=1e-14)
        np.testing.assert_allclose(solution.observed[i], constant_solve.observed[i], rtol=0, atol=1e-14)


def test_steady_state_stop(constant_solve):
    """With steady_state_tol = 1e-6, trajectory 2 of M0 (which converges fast) stops early with
    status STEADY_STATE: its saved values after t_final equal y_final exactly and the field there is
    below the tolerance. Trajectories 0 and 1, whose field is still above the tolerance at t = 100,
    run to the end (SUCCESS). Before the stop every saved value equals the solve without the stop to
    1e-12 (the event only watches the field; the steps are the same)."""
    tol = 1e-6
    p = _parameters(PROBLEM)
    solution = slr.solve_flow(PROBLEM, M0, TS, steady_state_tol=tol)
    assert list(np.asarray(solution.status)) == [Status.SUCCESS, Status.SUCCESS, Status.STEADY_STATE]
    assert solution.failures() == []
    unstopped_field = np.linalg.norm(np.asarray(_flow(constant_solve.ys[:, -1], p)), axis=-1)
    assert (unstopped_field[:2] > tol).all()  # 0 and 1 really have not converged by t = 100
    t_final, ys, y_final = (np.asarray(x) for x in (solution.t_final, solution.ys, solution.y_final))
    np.testing.assert_array_equal(t_final[:2], TS[-1])
    assert np.linalg.norm(np.asarray(_flow(y_final[2], p))) < tol
    after = TS > t_final[2]
    assert after.any() and not after.all()
    np.testing.assert_array_equal(ys[2, after], np.broadcast_to(y_final[2], ys[2, after].shape))
    np.testing.assert_allclose(ys[:2], constant_solve.ys[:2], rtol=0, atol=1e-12)
    np.testing.assert_allclose(ys[2, ~after], constant_solve.ys[2, ~after], rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# 9. Input validation


def test_bad_inputs_are_rejected():
    """ValueError before any solve or compilation: alpha <= 0 or NaN, steps < 1, log_every not
    dividing steps, an unrealizable y0 for iterate_map; a wrong y0 shape for solve_flow."""
    good = M0[0]
    for alpha in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            slr.iterate_map(PROBLEM, good, alpha, 10)
    for steps in (0, -3):
        with pytest.raises(ValueError, match="steps"):
            slr.iterate_map(PROBLEM, good, 0.01, steps)
    with pytest.raises(ValueError, match="log_every"):
        slr.iterate_map(PROBLEM, good, 0.01, 10, log_every=3)
    with pytest.raises(ValueError, match="not realizable"):
        slr.iterate_map(PROBLEM, [good, [0.9, 0.0, 0.0, 0.9, 0.0]], 0.01, 10)
    for shape in ((4,), (3, 4), (2, 3, 5), ()):
        with pytest.raises(ValueError, match="y0 must have shape"):
            slr.solve_flow(PROBLEM, np.zeros(shape), TS)
    with pytest.raises(ValueError, match="y0 must have shape"):
        slr.solve_flow(PROBLEM.restriction(), M0, TS)


# ---------------------------------------------------------------------------------------------
# 10. Initial overlaps


def _explicit_overlaps(rng, d, n, kind):
    """Overlaps of (k, v) built in R^d, with a random orthonormal (k*, v*)."""
    k_star, v_star = np.linalg.qr(rng.normal(size=(d, 2)))[0].T
    g, h = rng.normal(size=(2, n, d))
    if kind == "sphere":
        k, v = g, h
    else:
        k = g - (g @ v_star)[:, None] * v_star
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        # Gram-Schmidt of h against k* then against the part of k orthogonal to k*.
        k_perp = k - (k @ k_star)[:, None] * k_star
        k_perp /= np.linalg.norm(k_perp, axis=-1, keepdims=True)
        v = h - (h @ k_star)[:, None] * k_star
        v -= np.sum(v * k_perp, axis=-1, keepdims=True) * k_perp
    k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    v = v / np.linalg.norm(v, axis=-1, keepdims=True)
    return np.stack([k @ k_star, v @ v_star, v @ k_star, k @ v_star, np.sum(k * v, axis=-1)], axis=-1)


@pytest.mark.parametrize("kind", ["sphere", "manifold"])
def test_initial_overlaps_have_the_law_of_Rd_initialisation(kind):
    """initial_overlaps vs overlaps of vectors built in R^d (d = 10, n = 4000 each, fixed seeds):
    the two-sample KS test does not reject at level 1e-3 for any overlap. On M, theta, eta, rho are
    exactly 0 for initial_overlaps and below 1e-12 (roundoff) for the explicit construction, so they
    are compared directly instead (KS would see the roundoff)."""
    d, n = 10, 4000
    ours = np.asarray(slr.initial_overlaps(jax.random.key(7), d, n, kind))
    explicit = _explicit_overlaps(np.random.default_rng(8), d, n, kind)
    assert ours.shape == explicit.shape == (n, 5)
    tested = range(5) if kind == "sphere" else range(2)
    for j in tested:
        result = stats.ks_2samp(ours[:, j], explicit[:, j])
        assert result.pvalue > 1e-3, (slr.OVERLAP_NAMES[j], result)
    if kind == "manifold":
        assert (ours[:, 2:] == 0).all()
        assert np.max(np.abs(explicit[:, 2:])) < 1e-12
