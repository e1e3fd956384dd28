"""The paper's convergence claim, checked by integrating the flow from many starts (docs/science.md section 5)."""

from flowsim.schedules import InverseTimeDecay
from flowsim.tasks.slr._attention import AttentionMap
from flowsim.tasks.slr._problem import Problem
from flowsim.verify import Setting, VerifyReport
from flowsim.verify import verify_convergence as verify_claim

__all__ = ["CLAIM", "default_settings", "verify_convergence"]


def _claim(target: str) -> str:
    return f"almost every start on M converges to {target}"


#: The claim of the paper that `verify_convergence` checks (under a map without erf's sign symmetry, its target
#: is (k*, v*) alone).
CLAIM = _claim("+-(k*, v*)")


def default_settings(d: int = 400, L: int = 10, attention: str | AttentionMap = "erf") -> list[Setting]:
    """The paper's population settings: lam = 0.1, lam = 0.9 and lam = 1 / (1 + 1e-4 step) at step 4e-3.

    **Arguments:** `d`, `L`: the problem's sizes; `attention`: its weight map (`Problem`'s `attention`: the paper's
    erf, another built-in map's name or a researcher's `AttentionMap`).

    **Returns:** the three settings, named by their lam.
    """
    schedule = InverseTimeDecay(1.0, 1e-4, 4e-3)
    return [
        Setting("lam = 0.1", Problem(d, L, 0.1, attention=attention)),
        Setting("lam = 0.9", Problem(d, L, 0.9, attention=attention)),
        Setting("lam = 1/(1 + 1e-4 step), alpha = 4e-3", Problem(d, L, schedule, attention=attention)),
    ]


def verify_convergence(settings: list[Setting] | None = None, **options) -> VerifyReport:
    """Integrate the flow from n starts on M and n on the sphere for each setting; check the paper's claim.

    **Arguments:**

    - `settings`: named problems (default: `default_settings()`).
    - `options`: `key`, `n`, `t_max`, `n_saves`, `tol` (in (0, 1)), `min_share`, `progress`, `max_steps` of
      `flowsim.verify_convergence`; the claim holds if at least `min_share` of the starts on M
      reach (or are shown to be on their way to) the map's target in every setting: +-(k*, v*) for erf and
      other odd maps (`CLAIM`), (k*, v*) for the others.

    **Returns:** a `VerifyReport`; `flowsim.format_report` prints it.
    """
    settings = default_settings() if settings is None else settings
    # The settings' target, (k*, v*) or +-(k*, v*) (both, where their maps differ in oddness).
    claim = _claim(" or ".join(sorted({setting.task.target_label for setting in settings})) or "+-(k*, v*)")
    return verify_claim(settings, inits=("manifold", "sphere"), claim_inits=("manifold",), claim=claim, **options)
