"""Checking the paper's convergence claims by integrating the flow from many starts."""

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from flowsim.schedules import Constant, InverseTimeDecay
from flowsim.tasks.slr._dynamics import solve_flow
from flowsim.tasks.slr._fixedpoints import Attractor
from flowsim.tasks.slr._init import initial_overlaps
from flowsim.tasks.slr._outcomes import classify_end_points, distance_to_oracle
from flowsim.tasks.slr._problem import Problem

__all__ = ["Setting", "VerifyReport", "VerifyRow", "default_settings", "format_report", "verify_convergence"]


@dataclass(frozen=True)
class Setting:
    """A named problem with an optional lam schedule (which overrides problem.lam)."""

    name: str
    problem: Problem
    schedule: object = None


def default_settings(d: int = 400, L: int = 10) -> list[Setting]:
    """The paper's population settings: lam = 0.1, lam = 0.9 and lam = 1 / (1 + 1e-4 step) at step 4e-3."""
    return [
        Setting("lam = 0.1", Problem(d, L, 0.1)),
        Setting("lam = 0.9", Problem(d, L, 0.9)),
        Setting("lam = 1/(1 + 1e-4 step), alpha = 4e-3", Problem(d, L, 1.0), InverseTimeDecay(1.0, 1e-4, 4e-3)),
    ]


@dataclass(frozen=True)
class VerifyRow:
    """The outcome of n starts of one kind under one setting.

    **Fields:** `converged` (reached +-(k*, v*) within tol), `slow` (on the way to +-(k*, v*):
    |nu| = 1 and kappa still moving towards +-1 with the sign of nu, as on M where this
    implies convergence), `others` (other attractors reached), `unassigned` (ended away from
    every fixed point), `failed` (solver failures), `median_time` (to reach +-(k*, v*)
    within tol, over the converged starts).
    """

    setting: str
    init: str
    n: int
    converged: int
    slow: int
    others: list[Attractor]
    unassigned: int
    failed: int
    median_time: float

    @property
    def oracle_share(self) -> float:
        return (self.converged + self.slow) / self.n


@dataclass
class VerifyReport:
    """All rows, and whether "almost every start on M converges to +-(k*, v*)" held."""

    rows: list[VerifyRow]
    min_share: float
    t_max: float
    tol: float
    claim_holds: bool = field(init=False)

    def __post_init__(self):
        self.claim_holds = all(row.oracle_share >= self.min_share for row in self.rows if row.init == "manifold")


def _row(setting: Setting, init: str, m0, t_max: float, n_saves: int, tol: float, progress: bool) -> VerifyRow:
    ts = jnp.linspace(0.0, t_max, n_saves)
    solution = solve_flow(setting.problem, m0, ts, schedule=setting.schedule, progress=progress, max_steps=2_000_000)
    ys = np.asarray(solution.ys)
    ok = np.asarray(solution.ok)
    final = ys[:, -1]
    close = distance_to_oracle(ys) <= tol
    first_hit = np.where(close.any(axis=1), np.asarray(ts)[np.argmax(close, axis=1)], np.nan)
    schedule = setting.schedule if setting.schedule is not None else Constant(setting.problem.lam)
    outcomes = classify_end_points(setting.problem, final, lam=float(schedule(t_max)), tol=tol, ok=ok)
    converged = outcomes.reached
    n = len(m0)
    return VerifyRow(
        setting.name,
        init,
        n,
        int(converged.sum()),
        int(outcomes.approaching.sum()),
        outcomes.others,
        outcomes.unassigned,
        outcomes.failed,
        float(np.nanmedian(first_hit[converged])) if converged.any() else float("nan"),
    )


def verify_convergence(
    settings: list[Setting] | None = None,
    *,
    key=None,
    n: int = 64,
    t_max: float = 1000.0,
    n_saves: int = 401,
    tol: float = 1e-3,
    min_share: float = 0.99,
    progress: bool = False,
) -> VerifyReport:
    """Integrate the flow from n starts on M and n on the sphere for each setting.

    **Arguments:**

    - `settings`: problems and schedules (default: `default_settings()`).
    - `key`: a JAX PRNG key (default `jax.random.key(0)`).
    - `n`: starts per kind ("manifold" and "sphere").
    - `t_max`, `n_saves`: the horizon and the number of saved times (resolution of the
      time to converge).
    - `tol`: max-norm distance to +-(k*, v*) counted as converged.
    - `min_share`: the claim holds if at least this share of starts on M reach
      (or are provably on their way to) +-(k*, v*) in every setting.

    **Returns:** a `VerifyReport`; `format_report` prints it.
    """
    settings = default_settings() if settings is None else settings
    key = jax.random.key(0) if key is None else key
    rows = []
    for setting, setting_key in zip(settings, jax.random.split(key, len(settings)), strict=True):
        for init, init_key in zip(("manifold", "sphere"), jax.random.split(setting_key), strict=True):
            m0 = initial_overlaps(init_key, setting.problem.d, n, init)
            rows.append(_row(setting, init, m0, t_max, n_saves, tol, progress))
    return VerifyReport(rows, min_share, t_max, tol)


def format_report(report: VerifyReport) -> str:
    """The report as a table, one block per setting and initialisation."""
    lines = [
        f"Convergence to +-(k*, v*) within {report.tol:g} (max norm) by t = {report.t_max:g}",
        f"{'setting':<40} {'init':<9} {'n':>4} {'-> +-(k*,v*)':>13} {'slowly':>7} {'median t':>9} "
        f"{'other':>6} {'stalled':>8} {'failed':>7}",
    ]
    for row in report.rows:
        lines.append(
            f"{row.setting:<40} {row.init:<9} {row.n:>4} {row.converged / row.n:>13.1%} "
            f"{row.slow / row.n:>7.1%} {row.median_time:>9.4g} {sum(a.count for a in row.others) / row.n:>6.1%} "
            f"{row.unassigned / row.n:>8.1%} {row.failed / row.n:>7.1%}"
        )
        for attractor in row.others:
            point = ", ".join(f"{x:+.4f}" for x in attractor.point)
            lines.append(
                f"    other attractor ({point}): share {attractor.share:.1%}, risk {attractor.risk:.6g}, "
                f"{attractor.kind}"
            )
    verdict = "HOLDS" if report.claim_holds else "FAILS"
    claim = "almost every start on M converges to +-(k*, v*)"
    lines.append(f"Claim '{claim}' (share >= {report.min_share:.0%}): {verdict}")
    return "\n".join(lines)
