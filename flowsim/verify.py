"""Checking convergence claims by integrating a task's flow from many starts."""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from flowsim._checks import SHARE, InvalidInput, as_key, check_count, check_positive
from flowsim._task import distance_to_targets
from flowsim.fixedpoints import Attractor
from flowsim.integrate import solve_flow
from flowsim.outcomes import classify_end_points

__all__ = ["Setting", "VerifyReport", "VerifyRow", "format_report", "verify_convergence"]


class Setting(eqx.Module):
    """A named task (its scheduled parameter may hold a schedule)."""

    name: str
    task: object


class VerifyRow(eqx.Module):
    """The outcome of n starts of one kind under one setting.

    **Fields:** `converged` (reached a target within tol), `slow` (shown to be on the way to a
    target: `AbstractTask.approaching`), `others` (other attractors reached), `unassigned` (ended
    away from every fixed point), `failed` (solver failures), `median_time` (to reach a target
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
    def target_share(self) -> float:
        return (self.converged + self.slow) / self.n


class VerifyReport(eqx.Module):
    """All rows, and whether the claim held: at least `min_share` of the starts of the kinds in
    `claim_inits` reach (or are shown to be on their way to) a target, in every setting."""

    rows: list[VerifyRow]
    min_share: float
    t_max: float
    tol: float
    target_label: str
    claim: str
    claim_inits: tuple[str, ...]

    @property
    def claim_holds(self) -> bool:
        return all(row.target_share >= self.min_share for row in self.rows if row.init in self.claim_inits)


def _row(setting: Setting, init: str, y0, t_max: float, n_saves: int, tol: float, options) -> VerifyRow:
    task = setting.task
    ts = jnp.linspace(0.0, t_max, n_saves)
    solution = solve_flow(task, y0, ts, **options)
    ys = np.asarray(solution.ys)
    close = distance_to_targets(task, ys) <= tol
    first_hit = np.where(close.any(axis=1), np.asarray(ts)[np.argmax(close, axis=1)], np.nan)
    outcomes = classify_end_points(task, ys[:, -1], t=t_max, tol=tol, ok=np.asarray(solution.ok))
    converged = outcomes.reached
    return VerifyRow(
        setting.name,
        init,
        len(y0),
        int(converged.sum()),
        int(outcomes.approaching.sum()),
        outcomes.others,
        outcomes.unassigned,
        outcomes.failed,
        float(np.nanmedian(first_hit[converged])) if converged.any() else float("nan"),
    )


def verify_convergence(
    settings: list[Setting],
    *,
    inits: tuple[str, ...],
    claim_inits: tuple[str, ...],
    claim: str,
    key=None,
    n: int = 64,
    t_max: float = 1000.0,
    n_saves: int = 401,
    tol: float = 1e-3,
    min_share: float = 0.99,
    progress: bool = False,
    max_steps: int = 2_000_000,
    unit: Callable | None = None,
) -> VerifyReport:
    """Integrate the flow from n starts of each kind in `inits` for each setting, and check a claim.

    **Arguments:**

    - `settings`: named tasks (of one kind of task).
    - `inits`: the laws of the starts (names of `task.initialisations`).
    - `claim_inits`, `claim`: the claim holds if at least `min_share` of the starts of these
      kinds reach (or are shown to be on their way to) a target in every setting; `claim` says it in words.
    - `key`: a JAX PRNG key or an integer seed (default `jax.random.key(0)`).
    - `n`: starts per kind.
    - `t_max`, `n_saves`: the horizon and the number of saved times (resolution of the time to converge).
    - `tol`: max-norm distance to a target (up to the symmetries) counted as converged; each setting's task
      bounds it (`tolerance`: the attention task's is below 1).
    - `progress`, `max_steps`: passed to `solve_flow`.
    - `unit`: a store of finished work, `unit(name, compute) -> result` (`flowsim.results.RunRecord.unit`):
      each (setting, init) row is one unit (named by the setting's place and the init), read back where the
      store holds it. Default: computed.

    **Returns:** a `VerifyReport`; `format_report` prints it.
    """
    if not settings:
        raise InvalidInput("settings must hold at least one Setting")
    n = check_count("n", n, 1)
    n_saves = check_count("n_saves", n_saves, 2)
    t_max = check_positive("t_max", t_max)
    for setting in settings:
        tol = setting.task.tolerance.check("tol", tol)
    min_share = SHARE.check("min_share", min_share)
    key = jax.random.key(0) if key is None else as_key(key)
    options = {"progress": progress, "max_steps": max_steps}
    rows = []
    for number, (setting, setting_key) in enumerate(zip(settings, jax.random.split(key, len(settings)), strict=True)):
        for init, init_key in zip(inits, jax.random.split(setting_key, len(inits)), strict=True):

            def row(setting=setting, init=init, init_key=init_key):
                y0 = setting.task.initial_states(init_key, n, init)
                return _row(setting, init, y0, t_max, n_saves, tol, options)

            rows.append(row() if unit is None else unit(f"setting-{number}-{init}", row))
    label = settings[0].task.target_label
    return VerifyReport(rows, min_share, t_max, tol, label, claim, tuple(claim_inits))


def format_report(report: VerifyReport) -> str:
    """The report as a table, one block per setting and initialisation."""
    target = report.target_label
    lines = [
        f"Convergence to {target} within {report.tol:g} (max norm) by t = {report.t_max:g}",
        f"{'setting':<40} {'init':<9} {'n':>4} {'-> ' + target:>13} {'slowly':>7} {'median t':>9} "
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
    lines.append(f"Claim '{report.claim}' (share >= {report.min_share:.0%}): {verdict}")
    return "\n".join(lines)
