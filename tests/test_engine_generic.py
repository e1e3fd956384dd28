"""The engine knows no task: a toy task defined here runs through every engine function unchanged.

The toy task is the Rayleigh-quotient flow on the sphere S^2: risk R(x) = -x^T A x with A = diag(3, 2, 1),
projected flow dx/dt = 2 (I - x x^T) A x, exact solution x(t) = e^{2At} x0 / |e^{2At} x0|, fixed points
+-e_i (+-e_1 the sinks, +-e_2 saddles, +-e_3 sources), symmetry x -> -x. Its SGD replaces A by
A + noise / sqrt(batch) (a symmetric Gaussian matrix), an unbiased gradient.
"""

from types import SimpleNamespace
from typing import ClassVar

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowsim
from flowsim._checks import POSITIVE
from flowsim._diffeqsolve import advance_rows, start_rows
from flowsim._task import AbstractTask, Parameter, task_vector_field
from flowsim.integrate import _solve
from flowsim.rosenbrock import Rodas5

A = np.array([3.0, 2.0, 1.0])


class Rayleigh(AbstractTask):
    scale: float = 1.0  # multiplies A: the parameter a schedule may drive

    state_names: ClassVar = ("x1", "x2", "x3")
    parameters: ClassVar = (Parameter("scale", float, "scale of A", POSITIVE),)
    scheduled: ClassVar = "scale"
    initialisations: ClassVar = ("sphere",)
    symmetries: ClassVar = np.array([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    targets: ClassVar = np.array([[1.0, 0.0, 0.0]])
    target_label: ClassVar = "+-e1"

    def vector_field(self, t, y):
        ay = self.schedule()(t) * A * y
        return 2 * (ay - (y @ ay) * y)

    def risk(self, t, y):
        return -self.schedule()(t) * jnp.sum(A * y * y, axis=-1)

    def discrete_map(self, t, y, alpha):
        new = y + alpha * self.vector_field(t, y)
        return new / jnp.linalg.norm(new)

    def initial_states(self, key, n, kind):
        g = jax.random.normal(key, (n, 3))
        return g / jnp.linalg.norm(g, axis=-1, keepdims=True)

    def unrealizable(self, ys, *, atol=1e-10):
        norms = np.linalg.norm(np.asarray(ys, dtype=float), axis=-1)
        return {int(i): "is not a unit vector" for i in np.flatnonzero(~(np.abs(norms - 1) <= max(atol, 1e-9)))}

    def sgd_noise(self, key, batch):
        return jax.random.normal(key, (3, 3))

    def sgd_step(self, t, y, lr, noise, batch):
        matrix = self.schedule()(t) * (jnp.diag(A) + 0.1 * (noise + noise.T) / jnp.sqrt(batch))
        new = y + lr * 2 * (matrix @ y - (y @ matrix @ y) * y)
        return new / jnp.linalg.norm(new)


TASK = Rayleigh()
Y0 = np.array([[0.1, 0.7, np.sqrt(1 - 0.5)], [-0.6, 0.0, 0.8]])


def exact(y0, t, scale=1.0):
    x = np.exp(2 * scale * A * t) * y0
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_flow_matches_the_closed_form():
    """Tsit5 at rtol 1e-10, atol 1e-12: the error against e^{2At} x0 / |.| stays below 1e-8 to t = 3. (11 saved
    times, as the comparison below, which then reuses this compiled solve.)"""
    ts = np.linspace(0.0, 3.0, 11)
    solved = flowsim.solve_flow(TASK, Y0, ts)
    assert np.all(np.asarray(solved.status) == flowsim.Status.SUCCESS)
    expected = np.stack([exact(Y0, t) for t in ts], axis=1)
    np.testing.assert_allclose(solved.ys, expected, atol=1e-8)
    np.testing.assert_allclose(solved.observed, -np.sum(A * expected**2, axis=-1), atol=1e-8)


@pytest.mark.parametrize("solver", [diffrax.Tsit5(), Rodas5(), diffrax.Kvaerno5()], ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("steady_state_tol", [None, 1e-6])
def test_a_solve_holds_no_host_callback(solver, steady_state_tol):
    """JAX's persistent compilation cache keeps no program holding a host callback: a solve holding one would be
    compiled again by every process (every command, test worker and notebook kernel). Traced, not compiled."""
    ts = jnp.linspace(0.0, 1.0, 3)
    controller = diffrax.PIDController(rtol=1e-8, atol=1e-10)
    meter = diffrax.NoProgressMeter()
    options = (TASK, solver, controller, 100, steady_state_tol, meter)
    jaxpr = jax.make_jaxpr(lambda y0: _solve(task_vector_field, y0, ts, ts[::2], *options))(jnp.asarray(Y0))
    assert "callback" not in str(jaxpr)


@pytest.mark.parametrize("solver", [diffrax.Tsit5(), Rodas5()], ids=lambda s: type(s).__name__)
def test_a_compacted_solves_rounds_hold_no_host_callback(solver):
    """The same for the compacted solve's two programs (`integrate(..., compacted=True)`). Traced, not compiled."""
    ts, y0 = jnp.linspace(0.0, 1.0, 3), jnp.asarray(Y0)
    controller = diffrax.PIDController(rtol=1e-8, atol=1e-10)
    start = start_rows(task_vector_field, y0, ts[0], ts[-1], TASK, solver, controller)
    rows = (y0, jnp.zeros(len(y0)), *start)
    for program in (
        lambda: start_rows(task_vector_field, y0, ts[0], ts[-1], TASK, solver, controller),
        lambda: advance_rows(task_vector_field, rows, ts, ts[-1], TASK, solver, controller, 8, 1e-6),
    ):
        assert "callback" not in str(jax.make_jaxpr(program)())


def test_a_users_own_diffrax_checks_still_raise():
    """The NaN mode of the checks is the engine's solve's alone: after a flowsim solve traced its checks, a Diffrax
    solve of the user's whose saved times leave (t0, t1) (times of the same shape) still raises."""
    flowsim.solve_flow(TASK, Y0, np.linspace(0.0, 1.0, 3))
    term, outside = diffrax.ODETerm(lambda t, y, args: -y), diffrax.SaveAt(ts=jnp.array([0.0, 2.0, 3.0]))
    with pytest.raises(Exception, match=r"saveat\.ts must lie between t0 and t1"):
        diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 1.0, 0.1, Y0[0], saveat=outside)


def test_a_schedule_in_the_task_drives_the_flow():
    """scale = 2 (a constant schedule) is the flow at twice the speed: x(t) = exact(x0, t, 2)."""
    from flowsim.schedules import InverseTimeDecay

    fast = TASK.with_schedule(InverseTimeDecay(2.0, 0.0, 1.0))
    solved = flowsim.solve_flow(fast, Y0, np.linspace(0.0, 1.0, 3))
    np.testing.assert_allclose(solved.ys[:, -1], exact(Y0, 1.0, 2.0), atol=1e-8)


def test_fixed_points_and_attractors():
    starts = np.concatenate([np.eye(3), -np.eye(3)]) * 0.98 + 0.01
    points = flowsim.fixed_points(TASK, starts / np.linalg.norm(starts, axis=-1, keepdims=True))
    kinds = {tuple(np.round(np.abs(p.point)).astype(int)): p.kind for p in points}
    # On the sphere's chart (3 coordinates) the normal direction adds an eigenvalue -2 x^T A x.
    assert kinds == {(1, 0, 0): "sink", (0, 1, 0): "saddle", (0, 0, 1): "saddle"}
    found, labels = flowsim.attractors(TASK, exact(Y0, 20.0))
    assert len(found) == 1 and found[0].is_target and found[0].kind == "sink" and list(labels) == [0, 0]
    assert found[0].risk == -3.0


def test_map_sgd_compare_and_verify():
    mapped = flowsim.iterate_map(TASK, Y0, 1e-3, 1000, log_every=100)
    # Explicit Euler with renormalisation: a first-order scheme, error O(alpha) = 1e-3 at t = 1.
    assert np.max(np.abs(np.asarray(mapped.ys)[:, -1] - exact(Y0, 1.0))) < 2e-3 and not mapped.failures()
    run = flowsim.run_sgd(TASK, jax.random.key(0), init=Y0, lr=1e-3, steps=1000, batch=4, log_every=100, seeds=2)
    comparison = flowsim.compare(run)
    # Noise 0.1 / sqrt(4) per entry, lr = 1e-3: fluctuations of order 0.05 * sqrt(lr * t) ~ 2e-3.
    assert comparison.max_deviation.max() < 2e-2 and comparison.same_attractor.all() and not comparison.failures()
    report = flowsim.verify_convergence(
        [flowsim.Setting("A = diag(3, 2, 1)", TASK)],
        inits=("sphere",),
        claim_inits=("sphere",),
        claim="all",
        n=8,
        t_max=20.0,
        tol=1e-6,
    )
    assert report.claim_holds and report.rows[0].converged == 8


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the clock alpha * step overflows too
def test_experiment_runner_summarises_and_reports_divergences():
    """run_experiment on the toy task: the stable step reaches +-e1; a step of 1e308 overflows at once,
    seen at the first logged step (50: the map logs every 50th of its 500 steps)."""
    experiment = SimpleNamespace(name="toy", task=TASK, algorithm="population", alpha=1e-2, steps=500, init="sphere")
    result = flowsim.run_experiment(experiment, jax.random.key(0), seeds=4, log_points=10, tol=1e-3)
    assert result.summary.reached == 4 and not result.failures() and (result.status == flowsim.Status.SUCCESS).all()
    overflow = SimpleNamespace(**{**vars(experiment), "alpha": 1e308})
    result = flowsim.run_experiment(overflow, jax.random.key(0), seeds=4, log_points=10, tol=1e-3)
    failures = result.failures()
    assert result.summary.diverged == 4 and [f.index for f in failures] == [0, 1, 2, 3]
    assert all(f.status is flowsim.Status.DIVERGED and f.step == 50 for f in failures)
