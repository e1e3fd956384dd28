"""The compacted solve (`flowsim.integrate(..., compacted=True)`): rounds of steps over the trajectories still
running, each resumed where its last round ended, give the numbers of one call to the end.

The batch mixes what a solve can meet: rows that decay fast (stiff for the explicit solver, which spends its step
budget on them), slow ones, rows that reach a steady state (with `steady_state_tol`), and rows that blow up in
finite time (a failure). The resumed rounds carry each row's solver state (first same as last), controller state
and proposed step, so the steps are the same operations on the same numbers: the comparison is exact, a
difference of one rounding would be amplified into a different step count and caught.
"""

import diffrax
import jax.numpy as jnp
import numpy as np
import pytest

import flowsim
from flowsim.integrate import ROUND_STEPS, Rodas5


def _mixed(t, y, args):
    """dx/dt = -k x + c x^2 + f sin(t), with k, c and f constants of the row."""
    x, k, c, f = y
    return jnp.stack([-k * x + c * x**2 + f * jnp.sin(t), 0 * k, 0 * c, 0 * f])


def _starts() -> np.ndarray:
    """160 rows (chunks of 64: two full, one padded): rates 0.5 to 2000, a third forced, every tenth blowing up."""
    rows = np.arange(160)
    k = 0.5 * 4000.0 ** (rows % 16 / 15)
    c = np.where(rows % 10 == 3, 1.0, 0.0)
    return np.stack([np.where(c > 0, 2.0, 1.0), np.where(c > 0, 0.0, k), c, (rows % 3 == 0) * 1.0], axis=1)


TS = np.linspace(0.0, 10.0, 21)
#: Not a multiple of ROUND_STEPS: the last round is shorter, and the budget is spent exactly.
MAX_STEPS = 4 * ROUND_STEPS + 44


@pytest.mark.parametrize(
    ("solver", "steady_state_tol"), [(diffrax.Tsit5(), 1e-6), (Rodas5(), None)], ids=["Tsit5-steady", "Rodas5"]
)
def test_a_compacted_solve_gives_the_numbers_of_one_call(solver, steady_state_tol):
    options = dict(solver=solver, rtol=1e-8, atol=1e-10, max_steps=MAX_STEPS, steady_state_tol=steady_state_tol)
    one = flowsim.integrate(_mixed, _starts(), TS, interruptible=False, compacted=False, **options)
    statuses = set(np.asarray(one.status).tolist())
    assert flowsim.Status.SUCCESS in statuses and len(statuses) >= 2  # the mixture the test is about
    if steady_state_tol is not None:
        assert flowsim.Status.STEADY_STATE in statuses
    if isinstance(solver, diffrax.Tsit5):
        assert flowsim.Status.MAX_STEPS in statuses  # the stiff rows spend the explicit solver's budget
    assert np.asarray(one.num_steps).max() > 2 * ROUND_STEPS  # several rounds
    for interruptible in (False, True):
        rounds = flowsim.integrate(_mixed, _starts(), TS, interruptible=interruptible, compacted=True, **options)
        np.testing.assert_array_equal(rounds.status, one.status)
        np.testing.assert_array_equal(rounds.num_steps, one.num_steps)
        np.testing.assert_array_equal(rounds.t_final, one.t_final)
        np.testing.assert_array_equal(rounds.y_final, one.y_final)
        np.testing.assert_array_equal(rounds.ys, one.ys)  # NaN where not computed, in the same places
        assert rounds.reasons == one.reasons


def test_a_compacted_solve_keeps_the_step_budget_exactly():
    """A row that needs more than max_steps stops at max_steps steps, as one call does, and says why."""
    stiff = np.array([[1.0, 2000.0, 0.0, 0.0]] * 3)
    solved = flowsim.integrate(_mixed, stiff, TS, max_steps=MAX_STEPS, interruptible=False, compacted=True)
    assert (np.asarray(solved.num_steps) == MAX_STEPS).all()
    assert (np.asarray(solved.status) == flowsim.Status.MAX_STEPS).all()
    assert solved.failures()[0].reason == f"the maximum number of steps (max_steps = {MAX_STEPS})"
