"""The SLR family's risk through seven moments of the weights: by the rule, or from a table (docs/follow-up-models.md).

`family_risk` takes the rule's mean of the conditional risk, a quadratic in the weights w(s) whose coefficients
are the tokens' conditional moments (flowsim/tasks/slr/_generated_family.py). Those coefficients are closed forms
in the seven, and the weights depend on the seven through two numbers only:

- spiked tokens: s_l = mu_l a + gamma_l r u_l (r = sqrt(Q_k); the relevant token first, mu_1 = spike,
  gamma_1 = spread, mu_l = 0 and gamma_l = 1 for the others): the weights depend on (x, y) = (a, Q_k);
- max-SLR: s_l = a p_l + sigma h_l, sigma^2 = Q_k - a^2, the location's law softmax(nu p) depending on p alone:
  (x, y) = (a, Q_k - a^2).

Taking the expectation of the conditional risk term by term leaves the risk a polynomial in the seven whose
coefficients are seven moments M(x, y) of the weights (`risk_from_moments`). Spiked tokens, with
B = sum_l gamma_l u_l w_l:

    R = Delta^2 + gamma^2 + gamma^2 (b^2 / Q_k)(E u_1^2 - 1) - 2 gamma^2 e M_1 + c^2 mu^2 M_2 + Q_v M_3
        + 2 gamma b Q_kv M_5 + Q_kv^2 M_7 - 2 gamma mu b c M_4 + 2 mu c Q_kv M_6,
    M = (E w_1, E w_1^2, E sum_l gamma_l^2 w_l^2, E[u_1 w_1] / r, (gamma E w_1 - E[u_1 B]) / r^2,
         E[w_1 B] / r, (E B^2 - E sum_l gamma_l^2 w_l^2) / r^2);

max-SLR, with P = sum_l w_l p_l, H = sum_l w_l h_l, pi = softmax(nu p) and t = Q_kv - a c:

    R = Delta^2 + 1 + (b^2 / sigma^2)(E sum_l pi_l h_l^2 - 1) - 2 e M_1 + c^2 M_2 + Q_v M_3 + 2 b t M_4
        - 2 b c M_5 + 2 c t M_6 + t^2 M_7,
    M = (E sum_l pi_l w_l, E P^2 - E sum_l w_l^2, E sum_l w_l^2, (M_1 - E[sum_l pi_l h_l H]) / sigma^2,
         E[sum_l pi_l h_l P] / sigma, E[P H] / sigma, (E H^2 - E sum_l w_l^2) / sigma^2).

The moments are the rule's means, the same sums `family_risk` takes, so the two agree to rounding (the rule's
E u_1^2 and E sum pi h^2 are 1 up to its error and kept as they are). With a rule symmetric under u -> -u (a
Gauss-Hermite product) each moment is an analytic function of (x, y) up to y = 0, where the divisions by r and
r^2 (sigma, sigma^2) cancel a factor the numerator has (Stein's lemma: E[u g(r u)] = r E[g'(r u)]).

Two sources of the moments, both called as `moments(x, y)` and as `moments.taylor(x, y, order)`:

- `RuleMoments`: the rule, at every call (one pass over its points; derivatives by forward mode in (x, y) alone,
  `local_risk`): `family_risk` to rounding. Measured at spiked-SLR L = 3 (4096 points), 2 shared cores: a field
  1.0 ms a state, a Jacobian 4.2 ms, against 2.3 ms and 19 ms through every token (2x and 4.5x).
- `MomentTable` (`tabulate`): a two-dimensional Chebyshev interpolant of the rule's moments on a box
  |x| <= x_max, 0 <= y <= y_max, built once per data model, map and rules (7 s there, 48 x 57 coefficients at the
  default 1e-10), with its error measured against the rule (`MomentTable.errors`, turned into bounds on the risk,
  field and Jacobian by `error_bounds`); NaN outside the box. A field 2.6 us a state, a Jacobian about 5 us, in
  batches of 10^3 (10^4 at once: 26 us, the batch's intermediates no longer in the CPU's caches).

`fast_risk`, `fast_field` and `fast_jacobian` are the risk, the free-norm flow (ridge r) and its Jacobian from
either source; `local_risk` is the closed form whose derivatives at a point are the risk's (as
`flowsim.tasks.slr._maps` does for `slr.Problem`), from which another geometry's flow is made by the chain rule.
benchmarks/family_flow_speed.py times the flow of 10^4 starts with a table against the path through every token.
"""

from collections.abc import Callable
from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.fft
from jaxtyping import Array, Float

from flowsim._checks import POSITIVE, InvalidInput
from flowsim.tasks.slr import _generated_family as generated
from flowsim.tasks.slr._attention import AttentionMap, as_attention_map
from flowsim.tasks.slr._family import DataModel
from flowsim.tasks.slr._family_risk import check_rules

__all__ = [
    "DERIVATIVES",
    "MomentTable",
    "RuleMoments",
    "default_box",
    "error_bounds",
    "fast_field",
    "fast_jacobian",
    "fast_risk",
    "local_risk",
    "moment_variables",
    "risk_from_moments",
    "tabulate",
]

#: The derivatives of the moments in (x, y) whose table errors `MomentTable.errors` holds, in its order.
DERIVATIVES = ("value", "d/dx", "d/dy", "d2/dx2", "d2/dxdy", "d2/dy2")

#: How far below y = 0 a table still answers, as a share of y_max, with its polynomial's continuation (|T_60| <= 22
#: there: the coefficients' tail grows at most so). No vectors have y < 0 (y is Q_k, or sigma^2 = Q_k - a^2), but a
#: solver's stage may step there near k || k* (max-SLR's Bayes point has sigma = 0), and NaN would reject the step.
BELOW = 1e-3

#: Chebyshev nodes per axis `tabulate` starts from, and the most it takes before it gives up.
FIRST_NODES, MOST_NODES = 32, 256

#: The check grid of `tabulate`: in x, Chebyshev extreme points (the edges included); in y, Chebyshev points of the
#: first kind and y_max (not y = 0, where the rule's divisions by y leave no digits: the nearest at y_max / 470).
CHECK_NODES = 17


def _safe_root(y):
    """(sqrt(y) where y > 0 else 0, y where y > 0 else 1, sqrt of that): `family_risk`'s convention at y <= 0."""
    positive = y > 0
    divisor = jnp.where(positive, y, 1.0)
    root = jnp.sqrt(divisor)
    return jnp.where(positive, root, 0.0), divisor, root


def moment_variables(data: DataModel, seven) -> tuple[Array, Array]:
    """The two numbers the weights depend on: (a, Q_k) for spiked tokens, (a, Q_k - a^2) for max-SLR."""
    a, q_k = seven[0], seven[4]
    return (a, q_k) if data.spiked else (a, q_k - a**2)


def _weights(attention: AttentionMap, scores):
    """`attention.weights(scores)`, a map normalised over the tokens by `jax.nn.softmax` of log f: the same values
    to rounding, with derivatives of every order that do not hang on two roundings of the largest log f being
    equal. (`AttentionMap.weights` pins the largest term's shift by such an equality: compiled inside `lax.map`,
    XLA rounded the scores differently in the two places and the moments' second derivatives came out wrong by
    up to 1e3.) The scores here stay moderate (|s| < 100 on a table's box), where the pinning is not needed."""
    if attention.normalised:
        return jax.nn.softmax(attention.log_per_token(scores), axis=-1)
    return attention.weights(scores)


def _rule_mean(rule):
    return lambda values: rule.weights @ values


def _spiked_moments(data: DataModel, attention: AttentionMap, rule, L: int, a, q) -> Float[Array, "7"]:
    spike, spread = data.tokens.spike, data.tokens.spread
    mu = jnp.zeros(L).at[0].set(spike)
    gamma = jnp.ones(L).at[0].set(spread)
    r, q_safe, r_safe = _safe_root(q)
    u = rule.points
    w = _weights(attention, mu * a + gamma * r * u)
    w1, u1 = w[:, 0], u[:, 0]
    spread_sum = jnp.sum(gamma * u * w, axis=-1)  # B
    squares = jnp.sum(gamma**2 * w**2, axis=-1)
    mean = _rule_mean(rule)
    m1, m3 = mean(w1), mean(squares)
    return jnp.stack(
        [
            m1,
            mean(w1**2),
            m3,
            mean(u1 * w1) / r_safe,
            (spread * m1 - mean(u1 * spread_sum)) / q_safe,
            mean(w1 * spread_sum) / r_safe,
            (mean(spread_sum**2) - m3) / q_safe,
        ]
    )


def _max_moments(data: DataModel, attention: AttentionMap, rule, L: int, a, sigma2) -> Float[Array, "7"]:
    sigma, sigma2_safe, sigma_safe = _safe_root(sigma2)
    p, h = rule.points[:, :L], rule.points[:, L:]
    w = _weights(attention, a * p + sigma * h)
    law = jax.nn.softmax(data.tokens.nu * p, axis=-1)  # the location's law, `location_law`
    along, off = jnp.sum(w * p, axis=-1), jnp.sum(w * h, axis=-1)  # P, H
    law_h = jnp.sum(law * h, axis=-1)
    mean = _rule_mean(rule)
    m1, squares = mean(jnp.sum(law * w, axis=-1)), mean(jnp.sum(w**2, axis=-1))
    return jnp.stack(
        [
            m1,
            mean(along**2) - squares,
            squares,
            (m1 - mean(law_h * off)) / sigma2_safe,
            mean(law_h * along) / sigma_safe,
            mean(along * off) / sigma_safe,
            (mean(off**2) - squares) / sigma2_safe,
        ]
    )


def _rule_constant(data: DataModel, rule, L: int) -> Array:
    """The rule's E u_1^2 (spiked) or E sum_l pi_l h_l^2 (max-SLR): 1 up to the rule's error."""
    if data.spiked:
        return rule.weights @ rule.points[:, 0] ** 2
    law = jax.nn.softmax(data.tokens.nu * rule.points[:, :L], axis=-1)
    return rule.weights @ jnp.sum(law * rule.points[:, L:] ** 2, axis=-1)


class RuleMoments(eqx.Module):
    """The seven moments by the rule at each call: `family_risk`'s sums, regrouped.

    **Arguments:** the `DataModel`; the attention map (or a built-in map's name); one rule per length of the length
    law (None: `default_rules`).

    Called as `moments(x, y)` (`moment_variables`): the length law's mixture of the rules' moments, shape (7,).
    """

    data: DataModel
    attention: AttentionMap = eqx.field(static=True)
    rules: tuple

    def __init__(self, data: DataModel, attention="softmax", rules=None):
        if not isinstance(data, DataModel):
            raise InvalidInput(f"RuleMoments.data must be a slr.DataModel, got {type(data).__name__}")
        self.data = data
        self.attention = as_attention_map(attention, "RuleMoments.attention")
        self.rules = check_rules(data, rules)

    def _mixture(self, each):
        lengths = self.data.lengths
        return sum(
            probability * each(rule, L)
            for L, probability, rule in zip(lengths.values, lengths.probabilities, self.rules, strict=True)
        )

    def __call__(self, x, y) -> Float[Array, "7"]:
        moments = _spiked_moments if self.data.spiked else _max_moments
        return self._mixture(lambda rule, L: moments(self.data, self.attention, rule, L, x, y))

    @property
    def constant(self) -> Array:
        """The mixture of the rules' E u_1^2 (spiked) or E sum_l pi_l h_l^2 (max-SLR)."""
        return self._mixture(lambda rule, L: _rule_constant(self.data, rule, L))

    def taylor(self, x, y, order: int) -> Float[Array, "derivatives 7"]:
        """The moments and their derivatives in (x, y) up to `order` (1 or 2), in the order of `DERIVATIVES` (3 or 6
        rows): one pass over the rule with forward-mode tangents."""
        return _forward_taylor(self, x, y, order)


def risk_from_moments(data: DataModel, seven, moments, constant) -> Float[Array, ""]:
    """The population risk from the seven and the weights' moments at `moment_variables(data, seven)`.

    **Arguments:** the data model; the seven (a, b, c, e, Q_k, Q_v, Q_kv); the seven moments; the rule's
    `RuleMoments.constant`.

    **Returns:** the risk (the module's docstring gives the polynomial).
    """
    a, b, c, e, q_k, q_v, q_kv = seven
    m1, m2, m3, m4, m5, m6, m7 = moments
    noise = data.noise**2
    if data.spiked:
        mu, gamma = data.tokens.spike, data.tokens.spread
        _, q_safe, _ = _safe_root(q_k)
        defect = jnp.where(q_k > 0, b**2 / q_safe, 0.0) * (constant - 1)
        return (
            noise
            + gamma**2 * (1 + defect - 2 * e * m1)
            + (c * mu) ** 2 * m2
            + q_v * m3
            + 2 * gamma * b * q_kv * m5
            + q_kv**2 * m7
            - 2 * gamma * mu * b * c * m4
            + 2 * mu * c * q_kv * m6
        )
    off = q_kv - a * c
    sigma2 = q_k - a**2
    _, sigma2_safe, _ = _safe_root(sigma2)
    defect = jnp.where(sigma2 > 0, b**2 / sigma2_safe, 0.0) * (constant - 1)
    return (
        noise
        + 1
        + defect
        - 2 * e * m1
        + c**2 * m2
        + q_v * m3
        + 2 * b * off * m4
        - 2 * b * c * m5
        + 2 * c * off * m6
        + off**2 * m7
    )


# --- the table -----------------------------------------------------------------------------------------------


def _chebyshev_all(x, n: int, order: int):
    """(d/dx)^m (T_0(x), ..., T_{n-1}(x)) for m = 0..order: shape (order + 1, *x.shape, n), by the three-term
    recurrence D^m T_{k+1} = 2 m D^{m-1} T_k + 2 x D^m T_k - D^m T_{k-1} (a scan: a small program to compile)."""
    x = jnp.asarray(x)
    m = jnp.arange(order + 1, dtype=x.dtype).reshape(-1, *([1] * x.ndim))
    first = jnp.stack([jnp.ones_like(x), *([jnp.zeros_like(x)] * order)])  # D^m T_0
    second = jnp.stack([x, *([jnp.ones_like(x)] * min(order, 1)), *([jnp.zeros_like(x)] * (order - 1))])  # D^m T_1

    def step(carry, _):
        previous, current = carry
        lower = jnp.concatenate([jnp.zeros_like(current[:1]), current[:-1]])  # D^{m-1} T_k
        following = 2 * m * lower + 2 * x * current - previous
        return (current, following), following

    _, rest = jax.lax.scan(step, (first, second), length=max(n - 2, 0))
    return jnp.moveaxis(jnp.concatenate([first[None], second[None], rest])[:n], 0, -1)


@partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _chebyshev(x, n: int, order: int):
    """(d/dx)^order (T_0(x), ..., T_{n-1}(x)), differentiable to every order."""
    return _chebyshev_all(x, n, order)[order]


@_chebyshev.defjvp
def _chebyshev_jvp(n, order, primals, tangents):
    (x,), (dx,) = primals, tangents
    both = _chebyshev_all(x, n, order + 1)
    return both[order], both[order + 1] * jnp.expand_dims(dx, -1)


class MomentTable(eqx.Module):
    """The seven moments as a Chebyshev interpolant on a box |x| <= x_max, 0 <= y <= y_max (made by `tabulate`).

    Called as `moments(x, y)` or `moments.taylor(x, y, order)` like `RuleMoments`, differentiable to every order;
    NaN (with NaN derivatives) outside the box (a solve's `check_finite` then refuses a start or target there, and a
    trajectory that leaves it fails rather than read a wrong value). Below y = 0 it answers down to -`BELOW` y_max.

    **Fields:** `data`; `coefficients` (7, nx, ny): of T_i(x / x_max) T_j(2 y / y_max - 1); `box` (x_max, y_max);
    `constant` (`RuleMoments.constant`); `errors` (6, 7): the largest difference to the rule's moments on the
    check grid, for the value and each derivative of `DERIVATIVES`; `rules`: the rules' names.
    """

    data: DataModel
    coefficients: Float[Array, "7 nx ny"]
    box: tuple[float, float] = eqx.field(static=True)
    constant: Float[Array, ""]
    errors: Float[Array, "6 7"]
    rules: tuple[str, ...] = eqx.field(static=True)

    def covers(self, seven) -> Array:
        """Whether the states (..., 7) lie in the box (their `moment_variables`)."""
        x, y = moment_variables(self.data, jnp.moveaxis(jnp.asarray(seven), -1, 0))
        return _inside(self.box, x, y)

    def _unit(self, x, y):
        """(x, y) mapped onto [-1, 1]^2, NaN outside the box: a NaN argument makes every derivative NaN too (a
        jnp.where on the value would leave derivatives of 0)."""
        inside = _inside(self.box, x, y)
        x_max, y_max = self.box
        return jnp.where(inside, x / x_max, jnp.nan), jnp.where(inside, 2 * y / y_max - 1, jnp.nan)

    def __call__(self, x, y) -> Float[Array, "7"]:
        u, v = self._unit(x, y)
        nx, ny = self.coefficients.shape[1:]
        along_y = jnp.tensordot(self.coefficients, _chebyshev(v, ny, 0), axes=(2, 0))  # (7, nx)
        return along_y @ _chebyshev(u, nx, 0)

    def taylor(self, x, y, order: int) -> Float[Array, "derivatives 7"]:
        """The moments and their derivatives in (x, y) up to `order` (1 or 2) at one point, in the order of
        `DERIVATIVES` (3 or 6 rows), from the basis' derivatives: one product with the coefficients."""
        u, v = self._unit(x, y)
        x_max, y_max = self.box
        nx, ny = self.coefficients.shape[1:]
        in_x = _chebyshev_all(u, nx, order) * (1 / x_max) ** jnp.arange(order + 1)[:, None]
        in_y = _chebyshev_all(v, ny, order) * (2 / y_max) ** jnp.arange(order + 1)[:, None]
        # One matrix product over the states (vmapped), then products summed along x (fused, no batched matvec).
        along_y = (in_y @ self.coefficients.reshape(-1, ny).T).reshape(order + 1, 7, nx)
        pairs = ((0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (2, 0))[: 3 if order == 1 else 6]  # (y, x) orders
        return jnp.stack([jnp.sum(along_y[k] * in_x[m], axis=-1) for k, m in pairs])

    @property
    def degrees(self) -> tuple[int, int]:
        return self.coefficients.shape[1], self.coefficients.shape[2]


def _inside(box, x, y):
    """|x| <= x_max and -BELOW y_max <= y <= y_max."""
    x_max, y_max = box
    return (jnp.abs(x) <= x_max) & (y >= -BELOW * y_max) & (y <= y_max)


def default_box(data: DataModel) -> tuple[float, float]:
    """(x_max, y_max) = (s, s^2) with s = 1.5 max(1, a at softmax's Bayes point): spike (spiked), nu (max-SLR).

    The flow from small starts stays within |k| <= 1.5 |k_Bayes| in the measured cases (`FamilyProblem.bounds`
    uses the same margin); a run that leaves it meets NaN and is reported failed.
    """
    scale = 1.5 * max(1.0, float(data.tokens.spike if data.spiked else data.tokens.nu))
    return scale, scale**2


def _first_kind(n: int) -> np.ndarray:
    """Chebyshev points of the first kind, cos(pi (j + 1/2) / n), j = 0..n-1 (none at the ends)."""
    return np.cos(np.pi * (np.arange(n) + 0.5) / n)


def _coefficients(values: np.ndarray, axis: int) -> np.ndarray:
    """Chebyshev coefficients along `axis` of values at `_first_kind` points (a type-II DCT)."""
    n = values.shape[axis]
    coefficients = scipy.fft.dct(values, type=2, axis=axis) / n
    first = [slice(None)] * values.ndim
    first[axis] = 0
    coefficients[tuple(first)] /= 2
    return coefficients


@eqx.filter_jit
def _moments_on_grid(moments: RuleMoments, x, y):
    """moments(x_i, y_j) for every pair, (7, len(x), len(y)): a row of y at a time (a rule's arrays per point)."""
    return jnp.moveaxis(jax.lax.map(lambda xi: jax.vmap(lambda yj: moments(xi, yj))(y), x), -1, 0)


@eqx.filter_jit
def _check_errors(table: MomentTable, moments: RuleMoments, x, y):
    """The largest |table - rule| over the points (x, y), per derivative of `DERIVATIVES` and moment: (6, 7)."""

    def both(xi, yi):
        return jnp.abs(table.taylor(xi, yi, 2) - moments.taylor(xi, yi, 2))

    return jnp.max(jax.lax.map(lambda point: both(*point), (x, y)), axis=0)


def _forward_taylor(function, x, y, order: int):
    """function(x, y) (7,) and its derivatives up to `order` (1 or 2) in the order of `DERIVATIVES`, by forward
    mode (tangents vmapped: the primal pass is shared)."""
    directions = jnp.eye(2, dtype=jnp.result_type(x, float))

    def gradient(x, y):
        value, slopes = jax.vmap(lambda d: jax.jvp(function, (x, y), (d[0], d[1])), out_axes=(None, 0))(directions)
        return value, slopes

    if order == 1:
        value, slopes = gradient(x, y)
        return jnp.concatenate([value[None], slopes])
    (value, slopes), (_, curvature) = jax.vmap(
        lambda d: jax.jvp(gradient, (x, y), (d[0], d[1])), out_axes=((None, None), 0)
    )(directions)
    # curvature[i, j]: d/d(i) of d/d(j), symmetric; DERIVATIVES orders xx, xy, yy.
    return jnp.concatenate([value[None], slopes, curvature[0, 0][None], curvature[0, 1][None], curvature[1, 1][None]])


def _needed(coefficients: np.ndarray, axis: int, allowed: float) -> int:
    """The fewest coefficients along `axis` (1: x, 2: y) such that, for every moment, the dropped ones sum in |.| to
    at most `allowed` (a bound on what cutting there changes anywhere on the box, |T_k| <= 1)."""
    sizes = np.abs(np.moveaxis(coefficients, axis, 1)).sum(axis=2)  # (7, n): summed over the other axis
    tail = np.cumsum(sizes[:, ::-1], axis=1)[:, ::-1].max(axis=0)  # tail[k]: sum over i >= k, largest moment
    return int(np.argmax(np.append(tail, 0.0) <= allowed))


def tabulate(
    data: DataModel,
    attention="softmax",
    rules=None,
    *,
    box: tuple[float, float] | None = None,
    tolerance: float = 1e-10,
) -> MomentTable:
    """The rule's seven moments as a Chebyshev interpolant on a box, to a tolerance, with its measured error.

    The moments are taken at n x n Chebyshev points (from `FIRST_NODES`, doubled along an axis whose last
    quarter of coefficients is not below the tolerance, up to `MOST_NODES`), and the coefficients are cut where
    the dropped ones sum to tolerance / 2. The result is then compared with the rule (value and derivatives to
    second order) on a grid of other Chebyshev points (`CHECK_NODES`): `MomentTable.errors`; `error_bounds` turns
    them into bounds on the risk, the field and the Jacobian at a point.

    **Arguments:**

    - `data`, `attention`, `rules`: as `RuleMoments` (a rule symmetric under a sign change of each coordinate,
      such as the default Gauss-Hermite products, makes the moments analytic up to y = 0; a Sobol' set does not).
    - `box`: (x_max, y_max): |a| <= x_max and 0 <= y <= y_max, y = Q_k (spiked) or Q_k - a^2 (max-SLR); default
      `default_box(data)`.
    - `tolerance`: on the moments, relative to their largest magnitude on the box (at least 1).

    **Returns:** a `MomentTable`.

    **Raises:** `InvalidInput` for a box that is not two positive numbers, or when `MOST_NODES` points an axis do
    not reach the tolerance (moments not smooth enough on the box: a kinked map, a Sobol' rule, a box too large).
    """
    moments = RuleMoments(data, attention, rules)
    box = default_box(data) if box is None else box
    if not (isinstance(box, tuple | list) and len(box) == 2):
        raise InvalidInput(f"box must be (x_max, y_max), got {box!r}")
    box = (POSITIVE.check("box x_max", box[0]), POSITIVE.check("box y_max", box[1]))
    tolerance = POSITIVE.check("tolerance", tolerance)
    x_max, y_max = (float(v) for v in box)
    nodes = [FIRST_NODES, FIRST_NODES]
    while True:
        x = x_max * _first_kind(nodes[0])
        y = y_max * (_first_kind(nodes[1]) + 1) / 2
        values = np.asarray(_moments_on_grid(moments, jnp.asarray(x), jnp.asarray(y)))
        if not np.isfinite(values).all():
            raise InvalidInput(f"tabulate: the rule's moments are not finite on the box {box} ({moments.attention!r})")
        coefficients = _coefficients(_coefficients(values, 1), 2)
        allowed = tolerance * max(1.0, float(np.abs(values).max()))
        short = [_needed(coefficients, axis, allowed / 2) > 3 * nodes[axis - 1] // 4 for axis in (1, 2)]
        if not any(short):
            break
        if any(nodes[i] >= MOST_NODES for i in (0, 1) if short[i]):
            raise InvalidInput(
                f"tabulate: {MOST_NODES} Chebyshev points an axis do not reach the tolerance {tolerance:g} for "
                f"{moments.attention.name} attention on the box {box} (the moments are not smooth enough there: a "
                "kinked map, a rule not symmetric under sign changes, or a box too large); use RuleMoments"
            )
        nodes = [2 * n if s else n for n, s in zip(nodes, short, strict=True)]
    nx, ny = _needed(coefficients, 1, allowed / 2), _needed(coefficients, 2, allowed / 2)
    table = MomentTable(
        data,
        jnp.asarray(coefficients[:, : max(nx, 2), : max(ny, 2)]),
        (x_max, y_max),
        jnp.asarray(moments.constant),
        jnp.zeros((len(DERIVATIVES), 7)),
        tuple(rule.name for rule in moments.rules),
    )
    extreme = np.cos(np.pi * np.arange(CHECK_NODES) / (CHECK_NODES - 1))  # the x edges included
    inner = np.append(_first_kind(CHECK_NODES), -1.0)  # the top y edge included, not y = 0
    cx, cy = np.meshgrid(x_max * extreme, y_max * (1 - inner) / 2, indexing="ij")
    errors = _check_errors(table, moments, jnp.asarray(cx.ravel()), jnp.asarray(cy.ravel()))
    return eqx.tree_at(lambda t: t.errors, table, errors)


# --- the risk, its flow and Jacobian from either source --------------------------------------------------------


def fast_risk(moments: RuleMoments | MomentTable, seven: Float[Array, "7"]) -> Float[Array, ""]:
    """The population risk at one point of the seven from a source of moments (traceable, unchecked)."""
    return risk_from_moments(moments.data, seven, moments(*moment_variables(moments.data, seven)), moments.constant)


def local_risk(moments: RuleMoments | MomentTable, seven: Float[Array, "7"], order: int) -> Callable:
    """A closed-form function of the seven whose derivatives up to `order` (1 or 2) at `seven` are `fast_risk`'s.

    The risk is `risk_from_moments` of moments that depend on (x, y) alone: with the moments replaced by their
    Taylor polynomial in (x, y) about the point (the source's `taylor`), the rest is closed form. So the source gives
    two derivatives (order 1) or five (order 2), however many of the seven the gradient or Jacobian asks for; another
    geometry's flow is the chain rule through its seven, e.g. `jax.grad(lambda y: risk(seven(y)))`.
    """
    data = moments.data
    x0, y0 = moment_variables(data, seven)
    taylor = moments.taylor(x0, y0, order)
    constant = moments.constant

    def risk(point):
        x, y = moment_variables(data, point)
        sx, sy = x - x0, y - y0
        polynomial = taylor[0] + sx * taylor[1] + sy * taylor[2]
        if order == 2:
            polynomial = polynomial + 0.5 * sx**2 * taylor[3] + sx * sy * taylor[4] + 0.5 * sy**2 * taylor[5]
        return risk_from_moments(data, point, polynomial, constant)

    return risk


def fast_field(moments: RuleMoments | MomentTable, seven: Float[Array, "7"], ridge=0.0) -> Float[Array, "7"]:
    """d/dt of the seven under the gradient flow of R + (ridge / 2)(|k|^2 + |v|^2) (`free_flow` of the gradient)."""
    gradient = jax.grad(local_risk(moments, seven, order=1))(seven)
    return generated.free_flow(*seven, *gradient, ridge)


def fast_jacobian(moments: RuleMoments | MomentTable, seven: Float[Array, "7"], ridge=0.0) -> Float[Array, "7 7"]:
    """The Jacobian of `fast_field` at one point of the seven, [i, j] = d field_i / d seven_j."""
    risk = local_risk(moments, seven, order=2)
    return jax.jacfwd(lambda point: generated.free_flow(*point, *jax.grad(risk)(point), ridge))(seven)


def error_bounds(table: MomentTable, seven: Float[Array, "7"]) -> tuple[Array, Array, Array]:
    """Bounds on how far `fast_risk`, `fast_field` and `fast_jacobian` from the table lie from the rule's, at a point.

    The risk is affine in the moments, so the table's errors enter the risk, the field and the Jacobian linearly:
    each bound is the sum over the Taylor terms of the moments (`DERIVATIVES`) of |its coefficient| times
    `table.errors` (the largest differences on the check grid: between its points they may be exceeded by a small
    factor, most for derivatives near an edge of the box). They hold for any ridge (it enters exactly).

    **Returns:** (risk bound, field bound (7,), Jacobian bound (7, 7)).
    """
    data = table.data
    x0, y0 = moment_variables(data, seven)
    zero = jnp.zeros(7)

    def change(point, deviation):  # what errors `deviation` (6, 7) in the Taylor terms do to the risk near the point
        x, y = moment_variables(data, point)
        sx, sy = x - x0, y - y0
        factors = jnp.stack([jnp.ones_like(sx), sx, sy, sx**2 / 2, sx * sy, sy**2 / 2])
        moments = factors @ deviation
        return risk_from_moments(data, point, moments, table.constant) - risk_from_moments(
            data, point, zero, table.constant
        )

    def field(point, deviation):  # free_flow is linear in the gradient at ridge 0
        return generated.free_flow(*point, *jax.grad(change)(point, deviation), 0.0)

    def bound(function):
        sensitivity = jax.jacfwd(function, argnums=1)(seven, jnp.zeros_like(table.errors))
        return jnp.sum(jnp.abs(sensitivity) * table.errors, axis=(-2, -1))

    return (
        bound(change),
        bound(field),
        bound(lambda point, deviation: jax.jacfwd(field)(point, deviation)),
    )
