"""The SLR family as a task: any data model, any attention map, free norms or unit norms (docs/follow-up-models.md).

With free norms (`FreeNorms`, ridge r >= 0) the state is the seven order parameters (a, b, c, e, Q_k, Q_v, Q_kv)
and the flow is that of R(k, v) + (r/2)(|k|^2 + |v|^2) in R^D seen on them (generated: `free_flow`). With unit
norms (`UnitNorms`, inverse temperature lam) the state is the five overlaps (kappa, nu, theta, eta, rho) of
`slr.Problem`, the seven being (lam kappa, lam eta, theta, nu, lam^2, 1, lam rho), and the flow is the sphere
projection (generated: `projected_flow`). The risk is `family_risk` in both.
"""

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from flowsim._checks import NON_NEGATIVE, POSITIVE, SCALE, InvalidInput, as_key, check_choice, check_count
from flowsim._compile import compiled_method
from flowsim._task import AbstractTask
from flowsim.rosenbrock import Rodas5
from flowsim.tasks.slr import _generated_maps as generated_maps
from flowsim.tasks.slr._attention import AttentionMap, as_attention_map
from flowsim.tasks.slr._family import DataModel
from flowsim.tasks.slr._family_fast import MomentTable, RuleMoments, fast_field, fast_jacobian, fast_risk
from flowsim.tasks.slr._family_risk import SEVEN, check_rules
from flowsim.tasks.slr._init import initial_overlaps
from flowsim.tasks.slr._overlaps import OVERLAP_NAMES
from flowsim.tasks.slr._overlaps import unrealizable as unrealizable_overlaps

__all__ = ["FamilyOnPlane", "FamilyProblem", "FreeNorms", "UnitNorms", "bayes_point", "seven_from_vectors"]

#: Points evaluated at once by `FamilyProblem` (each holds arrays of a rule's size).
_CHUNK = 64

_LABELS = {
    "a": r"$a = \langle k, k^*\rangle$",
    "b": r"$b = \langle k, v^*\rangle$",
    "c": r"$c = \langle v, k^*\rangle$",
    "e": r"$e = \langle v, v^*\rangle$",
    "Q_k": r"$Q_k = |k|^2$",
    "Q_v": r"$Q_v = |v|^2$",
    "Q_kv": r"$Q_{kv} = \langle k, v\rangle$",
}
_SYMBOLS = {"a": "a", "b": "b", "c": "c", "e": "e", "Q_k": "Q_k", "Q_v": "Q_v", "Q_kv": "Q_{kv}"}


class FreeNorms(eqx.Module):
    """k, v free in R^D (no sphere, no temperature: |k| is one), with a ridge r >= 0 on |k|^2 + |v|^2."""

    ridge: float = 0.0

    def __check_init__(self):
        NON_NEGATIVE.check("FreeNorms.ridge", self.ridge)


class UnitNorms(eqx.Module):
    """k, v on the unit sphere, the scores multiplied by the inverse temperature lam (Marion et al.'s geometry)."""

    lam: float = 1.0

    def __check_init__(self):
        SCALE.check("UnitNorms.lam", self.lam)


def seven_from_vectors(k, v, k_star, v_star):
    """The seven (<k,k*>, <k,v*>, <v,k*>, <v,v*>, |k|^2, |v|^2, <k,v>) of vectors (..., D)."""
    return jnp.stack(
        [k @ k_star, k @ v_star, v @ k_star, v @ v_star, jnp.sum(k * k, -1), jnp.sum(v * v, -1), jnp.sum(k * v, -1)],
        axis=-1,
    )


def bayes_point(data: DataModel) -> np.ndarray:
    """The seven at which softmax attention is the Bayes predictor: k = sqrt(nu) k* (spiked-SLR: k = spike k*) or
    k = nu k* (max-SLR), v = v*. (Spiked tokens of another spread than 1 have no such point: NaN.)"""
    if data.spiked:
        scale = data.tokens.spike if data.tokens.spread == 1 else math.nan
    else:
        scale = data.tokens.nu
    return np.array([scale, 0.0, 0.0, 1.0, scale**2, 1.0, 0.0])


class FamilyProblem(AbstractTask):
    """Single-location regression of the follow-up's family (docs/follow-up-models.md), as a task.

    **Arguments:**

    - `data`: the `DataModel` (token law, length law, label noise): `slr.spiked_slr(nu)`, `slr.max_slr(nu)`, ...
    - `attention`: an `AttentionMap` or a built-in map's name (default "softmax"); static.
    - `geometry`: `FreeNorms(ridge)` (default; state: the seven) or `UnitNorms(lam)` (state: the five overlaps).
    - `D`: the dimension of the vectors of the "small" initial states and of SGD (>= 4; default 100).
    - `scale`: the standard deviation sigma of the "small" initial states, k, v ~ N(0, sigma^2 I / D) (default 0.1).
    - `rules`: one `flowsim.quadrature.GaussianRule` per length of the length law (default `default_rules`).
    - `moments`: where the seven moments of the weights the risk needs come from (docs/follow-up-models.md): the
      rule at each evaluation (default, `RuleMoments`), or a Chebyshev table of them made once by
      `slr.tabulate_moments(data, attention, rules)` (about 700x faster per flow at L = 3, within its stated error
      and box).
    """

    data: DataModel
    attention: AttentionMap = eqx.field(static=True, default="softmax")
    geometry: FreeNorms | UnitNorms = FreeNorms()
    D: int = eqx.field(static=True, default=100)
    scale: float = 0.1
    rules: tuple | None = None
    moments: RuleMoments | MomentTable | None = None

    parameters: ClassVar = ()
    scheduled: ClassVar = None
    name: ClassVar = "single-location regression (the follow-up's family)"
    title: ClassVar = "SLR family"

    def __post_init__(self):
        self.attention = as_attention_map(self.attention, "FamilyProblem.attention")
        if isinstance(self.data, DataModel) and self.data.locations > 1:
            raise InvalidInput(
                f"FamilyProblem takes one informative location, got SpikedTokens.locations = {self.data.locations}: "
                "several locations (and several heads) are slr.HeadsProblem's"
            )
        if isinstance(self.data, DataModel):
            self.rules = check_rules(self.data, self.rules)
            if self.moments is None:
                self.moments = RuleMoments(self.data, self.attention, self.rules)

    def __check_init__(self):
        if not isinstance(self.data, DataModel):
            raise InvalidInput(f"FamilyProblem.data must be a slr.DataModel, got {type(self.data).__name__}")
        if not isinstance(self.geometry, FreeNorms | UnitNorms):
            raise InvalidInput(
                f"FamilyProblem.geometry must be slr.FreeNorms or slr.UnitNorms, got {type(self.geometry).__name__}"
            )
        check_count("FamilyProblem.D", self.D, 4)
        POSITIVE.check("FamilyProblem.scale", self.scale)

    # --- the state space ----------------------------------------------------------------------

    @property
    def free(self) -> bool:
        return isinstance(self.geometry, FreeNorms)

    @property
    def state_names(self) -> tuple[str, ...]:
        return SEVEN if self.free else OVERLAP_NAMES

    @property
    def state_labels(self) -> dict:
        return _LABELS if self.free else {}

    @property
    def state_symbols(self) -> dict:
        return _SYMBOLS if self.free else {}

    @property
    def initialisations(self) -> tuple[str, ...]:
        return ("small",) if self.free else ("sphere", "manifold")

    @property
    def projection_pairs(self) -> tuple[tuple[str, str], ...]:
        """The planes trajectory figures draw: the invariant plane's (a, e), the norms, and M's transverse (b, Q_kv)."""
        if self.free:
            return (("a", "e"), ("Q_k", "Q_v"), ("b", "Q_kv"))
        return (("kappa", "nu"), ("theta", "eta"), ("kappa", "rho"))

    @property
    def symmetries(self) -> np.ndarray:
        """The identity; (b, c, Q_kv) -> -(b, c, Q_kv) for every map (the reflection along v*, with v -> -v); and for
        an odd map (k, v) -> (-k, -v) and their product. On unit norms, the same on (theta, eta, rho) and
        (kappa, nu, theta, eta)."""
        if self.free:
            reflection, odd = [1, -1, -1, 1, 1, 1, -1], [-1, -1, -1, -1, 1, 1, 1]
        else:
            reflection, odd = [1, 1, -1, -1, -1], [-1, -1, -1, -1, 1]
        group = [np.ones(self.dimension), np.array(reflection, float)]
        if self.attention.odd:
            group += [np.array(odd, float), np.array(reflection, float) * np.array(odd, float)]
        return np.stack(group)

    @property
    def targets(self) -> np.ndarray:
        """Softmax's Bayes point (`bayes_point`) with free norms; (k*, v*) with unit norms."""
        if self.free:
            return bayes_point(self.data)[None]
        return np.array([[1.0, 1.0, 0.0, 0.0, 0.0]])

    @property
    def target_label(self) -> str:
        return "softmax's Bayes point" if self.free else "(k*, v*)"

    def describe(self, *, math_text: bool = False) -> str:
        if self.free:
            geometry = f"ridge {float(self.geometry.ridge):g}"
        else:
            geometry = f"unit norms, lam {float(self.geometry.lam):g}"
        return f"{self.attention.name} attention, {self.data!r}, {geometry}"

    def risk_floor(self) -> float:
        return float(self.data.noise) ** 2

    def unrealizable(self, ys, *, atol=1e-10):
        ys = np.asarray(ys, dtype=float)
        if not self.free:
            return unrealizable_overlaps(ys, atol=atol)
        return unrealizable_seven(ys, atol=atol)

    def initial_states(self, key, n, kind):
        """ "small" (free norms): k, v ~ N(0, scale^2 I / D), drawn in R^D; "sphere", "manifold" (unit norms): as
        `slr.initial_overlaps` at d = D."""
        check_choice("kind", kind, self.initialisations)
        if not self.free:
            return initial_overlaps(key, self.D, n, kind)
        n = check_count("n", n, 1)
        k, v = self.scale / math.sqrt(self.D) * jax.random.normal(as_key(key), (2, n, self.D))
        eye = jnp.eye(self.D)
        return seven_from_vectors(k, v, eye[0], eye[1])

    # --- the dynamics -------------------------------------------------------------------------

    def seven(self, y):
        """The seven order parameters of a state (the state itself with free norms)."""
        if self.free:
            return y
        lam = self.geometry.lam
        kappa, nu, theta, eta, rho = y
        return jnp.stack([lam * kappa, lam * eta, theta, nu, lam**2 * jnp.ones_like(nu), jnp.ones_like(nu), lam * rho])

    def _full_risk(self, y):
        return fast_risk(self.moments, self.seven(y))

    def _full_field(self, y):
        if self.free:
            return fast_field(self.moments, y, self.geometry.ridge)
        return generated_maps.projected_flow(*y, *jax.grad(self._full_risk)(y))

    def _full_jacobian(self, y):
        if self.free:
            return fast_jacobian(self.moments, y, self.geometry.ridge)
        return jax.jacfwd(self._full_field)(y)

    # The functions of one state that `risk`, `vector_field` and `jacobian` map over states (a restriction's differ).
    _risk_at = _full_risk
    _field_at = _full_field
    _jacobian_at = _full_jacobian

    def _points(self, function, y):
        y = self._as_states(y)
        if y.ndim == 1:
            return function(y)
        values = jax.lax.map(function, y.reshape(-1, self.dimension), batch_size=_CHUNK)
        return values.reshape(*y.shape[:-1], *values.shape[1:])

    @compiled_method
    def risk(self, t, y):
        """The population risk at states y (..., n) (`family_risk`; without the ridge term)."""
        return self._points(self._risk_at, y)

    @compiled_method
    def vector_field(self, t, y):
        """d/dt of the state under the gradient flow (free norms: of the risk plus the ridge; unit norms: projected)."""
        return self._points(self._field_at, y)

    @compiled_method
    def jacobian(self, t, y):
        return self._points(self._jacobian_at, y)

    def flow_solver(self) -> dict:
        """The linearly implicit Rodas5 at rtol 1e-6, atol 1e-8: the flow by a rule is stiff where |k| is large."""
        return {"solver": Rodas5(), "rtol": 1e-6, "atol": 1e-8}

    # --- the invariant plane ------------------------------------------------------------------

    @property
    def bounds(self):
        scale = max(1.0, float(abs(bayes_point(self.data)[0]))) if self.free else 1.0
        return ((-1.5 * scale, 1.5 * scale), (-1.5, 1.5)) if self.free else ((-1.0, 1.0), (-1.0, 1.0))

    def restriction(self) -> "FamilyOnPlane":
        """The flow on the invariant plane k in span(k*), v in span(v*): free norms, state (a, e)."""
        if not self.free:
            raise NotImplementedError("with unit norms, the invariant plane is slr.Problem's M: use slr.Problem")
        return FamilyOnPlane(self.data, self.attention, self.geometry, self.D, self.scale, self.rules, self.moments)


def unrealizable_seven(ys: np.ndarray, *, atol: float = 1e-10) -> dict[int, str]:
    """Which rows of ys (n, 7) no vectors realise: the Gram matrix of (k*, v*, k, v) not PSD (to atol), and why."""
    ys = np.asarray(ys, dtype=float)
    finite = np.isfinite(ys).all(axis=-1)
    problems = {int(i): "has a non-finite entry" for i in np.flatnonzero(~finite)}
    if finite.any():
        a, b, c, e, q_k, q_v, q_kv = ys[finite].T
        one, zero = np.ones_like(a), np.zeros_like(a)
        gram = np.stack(
            [
                np.stack([one, zero, a, c], -1),
                np.stack([zero, one, b, e], -1),
                np.stack([a, b, q_k, q_kv], -1),
                np.stack([c, e, q_kv, q_v], -1),
            ],
            -2,
        )
        smallest = np.linalg.eigvalsh(gram)[:, 0]
        for i, value in zip(np.flatnonzero(finite), smallest, strict=True):
            if value < -atol * max(1.0, float(np.abs(ys[i]).max())):
                problems[int(i)] = (
                    f"is not realizable: the Gram matrix of (k*, v*, k, v) has eigenvalue {value:.3g} < 0 "
                    "(it must be positive semidefinite)"
                )
    return problems


class FamilyOnPlane(FamilyProblem):
    """The free-norm flow on its invariant plane {k = a k*, v = e v*} (b = c = Q_kv = 0, Q_k = a^2, Q_v = e^2)."""

    title: ClassVar = "SLR family on the plane $k \\parallel k^*$, $v \\parallel v^*$"

    @property
    def state_names(self):
        return ("a", "e")

    @property
    def initialisations(self):
        return ("small",)

    @property
    def projection_pairs(self):
        return (("a", "e"),)

    @property
    def symmetries(self):
        group = [np.ones(2)]
        if self.attention.odd:
            group.append(-np.ones(2))
        return np.stack(group)

    @property
    def targets(self):
        return bayes_point(self.data)[None, [0, 3]]

    def lift(self, ys):
        ys = np.asarray(ys, dtype=float)
        a, e = ys[..., 0], ys[..., 1]
        zero = np.zeros_like(a)
        return np.stack([a, zero, zero, e, a**2, e**2, zero], axis=-1)

    def _lifted(self, y):
        a, e = y[..., 0], y[..., 1]
        zero = jnp.zeros_like(a)
        return jnp.stack([a, zero, zero, e, a**2, e**2, zero], axis=-1)

    def _risk_at(self, y):
        return self._full_risk(self._lifted(y))

    def _field_at(self, y):
        return self._full_field(self._lifted(y))[jnp.array([0, 3])]

    def _jacobian_at(self, y):
        return jax.jacfwd(self._field_at)(y)

    def initial_states(self, key, n, kind):
        return super().initial_states(key, n, kind)[:, [0, 3]]

    def unrealizable(self, ys, *, atol=1e-10):
        ys = np.asarray(ys, dtype=float)
        return {int(i): "has a non-finite entry" for i in np.flatnonzero(~np.isfinite(ys).all(axis=-1))}

    def restriction(self):
        raise NotImplementedError("FamilyOnPlane is already planar")
