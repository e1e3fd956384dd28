"""Estimates at the edges (issue 54): the portrait's memory, the solver at a huge horizon, a solve far out."""

import diffrax
import numpy as np
import pytest

import flowsim
from flowsim.cli import _parser
from flowsim.integrate import Rodas5, choose_solver
from flowsim.tasks.slr import Problem, _estimates
from tests.test_engine_generic import TASK


def _portrait_bytes(grid: int) -> int:
    args = _parser().parse_args(["portrait", "--grid", str(grid), "--trajectories", "0"])
    needs, _ = _estimates.COMMANDS["portrait"](args)
    return sum(need.nbytes for need in needs)


def test_the_portrait_estimate_grows_by_twenty_values_per_grid_point():
    """No compilation. The streamline grid's 20 float64 values per point (peak / estimate 1.17, 1.01, 1.02 at grids
    2500, 4000, 6000: benchmarks/portrait_memory.py); the other parts do not depend on the grid, so the difference is
    exact in integers."""
    assert _estimates.STREAMLINE_VALUES == 20
    assert _portrait_bytes(2000) - _portrait_bytes(1000) == 20 * 8 * (2000**2 - 1000**2)
    # --grid 17000 on a 23 GiB machine (issue 54, finding 7): now about 43 GiB, refused there.
    assert _portrait_bytes(17000) > 43 * 2**30


def test_a_horizon_near_the_float64_maximum_chooses_as_a_long_one_and_says_no_inf():
    """One Jacobian compiled (about 2 s). At t = 1e308 both step counts overflowed and inf > inf chose Tsit5, whose
    stability-bound steps spent the whole budget; the rule compares rates, the same at any span."""
    problem = Problem(d=400, L=10, lam=0.1)
    starts = np.array([[0.1, 0.1, 0.0, 0.0, 0.0]])
    far, why = choose_solver(problem, starts, 1e308)
    assert type(far) is type(choose_solver(problem, starts, 1e6)[0])
    assert "inf" not in why and "more than 1.8e+308 steps" in why


def test_a_long_horizon_takes_the_solver_whose_steps_fit_its_budget():
    """One Jacobian of a small problem (d = 20; about 1 s). Tsit5's steps are stability-bound, in proportion to the
    horizon: to t = 1e12 far beyond a budget of 2 million, where it failed after minutes (issue 54, finding 7)."""
    problem = Problem(d=20, L=4, lam=0.1)
    starts = np.array([[0.1, 0.1, 0.0, 0.0, 0.0]])
    assert isinstance(choose_solver(problem, starts, 1e12)[0], diffrax.Tsit5)
    solver, why = choose_solver(problem, starts, 1e12, max_steps=2_000_000)
    assert isinstance(solver, Rodas5) and "step budget of 2000000" in why


@pytest.mark.parametrize("t0", [0.0, 6.5e48])
def test_a_solve_from_a_settled_state_far_out_moves(t0):
    """The engine's test task (a Rayleigh flow on the sphere, compiled in a second) from an eigenvector, a fixed
    point: Diffrax's first step there is 1e-6, below the floats' spacing at t = 6.5e48, and the solve stood still for
    its whole budget (the second window of `flow --t-max 1e50`). 20 steps: the step grows tenfold a step to t0."""
    solved = flowsim.solve_flow(TASK, np.array([[0.0, 0.0, 1.0]]), np.linspace(t0, t0 + 1e49, 3), max_steps=1000)
    assert int(solved.status[0]) == flowsim.Status.SUCCESS
    assert int(solved.num_steps[0]) <= 100
