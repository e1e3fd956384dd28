"""Several attention heads on data with several informative locations, as a task (docs/heads.md).

The state is the order parameters of H unit heads (k_h, v_h) against the S locations' targets (k*_j, v*_j) and
each other (`_heads_state`); the risk is `_heads_risk`'s (erf: closed form; any other map: a rule over the scores);
the flow is each head's projected gradient flow on its spheres, seen on the order parameters:

    dk_h/dt = -(I - k_h k_h^T) grad_{k_h} R,  dv_h/dt = -(I - v_h v_h^T) grad_{v_h} R.

With every vector of the family F = (targets, heads) written by its coefficients and G their Gram matrix: R
depends on the heads through the entries y_i = <f_a, f_b> of G, so grad_{f_a} R = sum_b Gamma_ab f_b with
Gamma_ab = Gamma_ba = dR/dy_i (i the entry (a, b)); the velocity of head vector f_a has coefficients
V_a = -(Gamma_a - <grad_{f_a} R, f_a> e_a) (the targets stand still), and dG/dt = V G + G V^T. At H = S = 1 this
is slr.Problem's flow on the five overlaps (derivations/flow.py), in matrix form.
"""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from flowsim._checks import SCALE, InvalidInput, check_choice, check_count, concrete, python_scalar
from flowsim._compile import compiled_method
from flowsim._memory import Cost
from flowsim._task import AbstractTask, Parameter
from flowsim.integrate import implicit_steps
from flowsim.quadrature import GaussianRule, default_rule
from flowsim.rosenbrock import Rodas5
from flowsim.schedules import AbstractSchedule
from flowsim.tasks.slr._attention import ERF, AttentionMap, as_attention_map
from flowsim.tasks.slr._family import DataModel, SpikedTokens
from flowsim.tasks.slr._heads_risk import closed_form_hessian, closed_form_risk, rule_risk
from flowsim.tasks.slr._heads_state import (
    HeadsLayout,
    heads_layout,
    heads_overlaps,
    injective_assignments,
    specialised_state,
    sphere_states,
)

__all__ = ["HeadsProblem", "projected_heads_flow", "projected_heads_jacobian"]

#: Seconds per (trajectory x Rodas5 step) of the erf flow at H = S = 2 (22 order parameters; one Jacobian, eight
#: stages and the time derivative) in a batch of 1 000, measured by benchmarks/heads_flow_speed.py on the 2-core CPU
#: under a load of 3-4 (66 us) and rounded up (an upper bound); other sizes scale with the order parameters squared.
STEP_SECONDS = 7e-5
#: Seconds per (trajectory x step x rule point x score) of a rule-based flow (its Jacobian: the Hessian's columns,
#: measured 1.1-1.4 us at L = 4 and 10, H = 2, 2^14 points), and the one-off compilation of either solve (erf:
#: 18 s measured, 1 000 starts; a rule's, not measured: a guess).
RULE_STEP_SECONDS = 1.6e-6
COMPILE_SECONDS = {"closed form": 25.0, "rule": 60.0}
#: The slowest trajectory of a batch against the engine's accuracy law for Rodas5 (`flowsim.integrate.implicit_steps`):
#: 336 steps against 221 (1 000 sphere starts to t = 100, rtol 1e-6).
BATCH_STEPS = 1.6

#: States a rule-based risk or field evaluates at once: each holds arrays of the rule's size (a field's reverse pass
#: at L = 10, H = 2 and 2^14 points: about 80 MB a state).
_RULE_CHUNK = 8


def projected_heads_flow(layout: HeadsLayout, y, gradient):
    """d/dt of the state under each head's projected gradient flow, from the risk's gradient in the state
    (module docstring). One state y (n,) and its gradient g (n,).

    With P = Gamma G: (V G)_ab = -[a is a head] (P_ab - P_aa G_ab), and the coordinate at (a, b) moves at
    (V G)_ab + (V G)_ba.
    """
    gram, gamma = layout.gram(y), layout.symmetric(gradient)
    moved = gamma @ gram
    a, b = layout.rows, layout.cols
    return -layout.is_head[a] * (moved[a, b] - moved[a, a] * y) - layout.is_head[b] * (moved[b, a] - moved[b, b] * y)


def projected_heads_jacobian(layout: HeadsLayout, y, gradient, hessian):
    """The Jacobian of `projected_heads_flow` in y, given the risk's gradient g and Hessian H at y: the field is
    linear in g, so J = (d field / d g) H + (d field / d y at fixed g), both from the formula of
    `projected_heads_flow` by hand: with B_j = E_pq + E_qp the coordinate j's entries, dP / dy_j = Gamma B_j and
    dP / dg_k = B_k G. Gathers with fixed indices only: the projection's part 0.9 us a state against 5.6 for
    forward-mode autodiff (1 000 states, H = S = 2)."""
    gram, gamma = layout.gram(y), layout.symmetric(gradient)
    moved = gamma @ gram
    a, b = layout.rows[:, None], layout.cols[:, None]  # the row's coordinate i: entry (a, b)
    p, q = layout.rows[None, :], layout.cols[None, :]  # the column's coordinate: entry (p, q)
    head_a, head_b = layout.is_head[a], layout.is_head[b]
    same = np.eye(len(layout.rows))
    y_i = y[:, None]

    def by_state(x, z):  # d P_xz / d y_j = Gamma_xp [z = q] + Gamma_xq [z = p]
        return gamma[x, p] * (z == q) + gamma[x, q] * (z == p)

    def by_gradient(x, z):  # d P_xz / d g_k = [x = p] G_qz + [x = q] G_pz
        return (x == p) * gram[q, z] + (x == q) * gram[p, z]

    along_state = -head_a * (by_state(a, b) - by_state(a, a) * y_i - moved[a, a] * same) - head_b * (
        by_state(b, a) - by_state(b, b) * y_i - moved[b, b] * same
    )
    along_gradient = -head_a * (by_gradient(a, b) - by_gradient(a, a) * y_i) - head_b * (
        by_gradient(b, a) - by_gradient(b, b) * y_i
    )
    return along_gradient @ hessian + along_state


def _pgd_step(layout: HeadsLayout, y, gradient, alpha):
    """One step of projected gradient descent with renormalisation, exact on the order parameters: every head
    vector f_a -> (f_a + alpha df_a/dt) / |.|, all at once, from the gradient at the current point."""
    gram, gamma = layout.gram(y), layout.symmetric(gradient)
    along = jnp.diagonal(gamma @ gram)  # <grad_{f_a} R, f_a>
    step = jnp.eye(layout.size) - alpha * layout.is_head[:, None] * (gamma - jnp.diag(along))
    moved = step @ gram @ step.T
    norms = jnp.sqrt(jnp.diagonal(moved))
    return layout.entries(moved / (norms[:, None] * norms[None, :]))


def _marion_dimension(data: DataModel) -> int | None:
    """d for Marion et al.'s tokens, whose spike is sqrt(d/2): 2 spike^2 where that is an integer (to 1e-9)."""
    spike = data.tokens.spike
    if not concrete(spike):
        return None
    d = 2 * float(spike) ** 2
    return round(d) if d >= 1 and abs(d - round(d)) <= 1e-9 * d else None


class HeadsProblem(AbstractTask):
    """H attention heads on single-location regression data with S informative locations (docs/heads.md).

    f(X) = sum_h sum_l w_l(lam <x_l, k_h>) <x_l, v_h>, every (k_h, v_h) on the unit sphere; the data: S distinct,
    uniform informative positions, token J_j ~ N(spike k*_j, spread^2 I), the others N(0, I), the 2S targets
    orthonormal, y = sum_j <x_{J_j}, v*_j> + noise xi. The state: the order parameters of the heads against the
    targets and each other (`state_names`; 22 for H = S = 2; slr.Problem's five for H = S = 1).

    **Arguments:**

    - `data`: a `slr.DataModel` with `SpikedTokens` and a fixed length L >= S: `slr.marion_slr(d, L, gamma, eps,
      locations=S)` for Marion et al.'s data (the spike sqrt(d/2), spread gamma, noise eps); S is
      `data.tokens.locations`. Each informative token has its own noise (`shared_noise`, the authors' quirk, is
      refused: the population risk is the model's).
    - `heads`: H >= 1 (default 2); static.
    - `lam`: the inverse temperature, in [1e-50, 1e50], or a schedule of the flow time (`flowsim.schedules`:
      `InverseTimeDecay(2.0, 2e-4, 1e-3, until=25_000)` is the authors' two-head schedule).
    - `attention`: "erf" (default; closed-form risk), another built-in map's name or an `AttentionMap` (risk by a
      rule over the L H scores); static.
    - `rule`: the `GaussianRule` of dimension L H of a rule-based risk (default `default_rule(L H)`; given for erf,
      it replaces the closed form, to measure the rule's error).
    - `d`: the dimension of the vectors (initial states, realizability; >= 2S + 2H). Default: Marion et al.'s d,
      2 spike^2, where that is an integer; otherwise required.
    """

    data: DataModel
    heads: int = eqx.field(static=True, default=2)
    lam: float | AbstractSchedule = 1.0
    attention: AttentionMap = eqx.field(static=True, default="erf")
    rule: GaussianRule | None = None
    # A leaf, not static: the risk and flow do not depend on d (the spike is the data's), so programs compiled at
    # one d serve every d (a sweep over d compiles once); the initial states and checks read it as a Python int.
    d: int | None = eqx.field(default=None, converter=python_scalar)
    locations: int = eqx.field(static=True, init=False)

    parameters: ClassVar = (
        Parameter("lam", float, "inverse temperature lambda of the attention", SCALE, "$\\lambda$"),
    )
    scheduled: ClassVar = "lam"
    initialisations: ClassVar = ("sphere",)
    name: ClassVar = "several heads, several informative locations"
    title: ClassVar = "Several heads, several locations"

    def __post_init__(self):
        self.attention = as_attention_map(self.attention, "HeadsProblem.attention")
        if not isinstance(self.data, DataModel) or not isinstance(self.data.tokens, SpikedTokens):
            raise InvalidInput(
                "HeadsProblem.data must be a slr.DataModel with SpikedTokens (slr.marion_slr(d, L, gamma, eps, "
                f"locations=S)), got {self.data!r}"
            )
        if getattr(self.data.tokens, "shared_noise", False):
            raise InvalidInput(
                "HeadsProblem.data: shared_noise (the authors' code's one noise vector for every informative token) "
                "makes the tokens dependent; the population risk is the model's, each token with its own noise: "
                "use SpikedTokens(..., shared_noise=False)"
            )
        self.locations = check_count("HeadsProblem.data.tokens.locations", self.data.tokens.locations, 1)
        if self.d is None:
            self.d = _marion_dimension(self.data)
        if self.rule is None and self.attention != ERF and len(self.data.lengths.values) == 1:
            self.rule = default_rule(self.L * self.heads)

    def __check_init__(self):
        check_count("HeadsProblem.heads", self.heads, 1)
        if len(self.data.lengths.values) != 1:
            raise InvalidInput(f"HeadsProblem takes a fixed sequence length, got {self.data.lengths!r}")
        if self.locations > self.L:
            raise InvalidInput(f"the informative locations S = {self.locations} must be at most L = {self.L}")
        smallest = 2 * self.locations + 2 * self.heads
        if self.d is None:
            raise InvalidInput("HeadsProblem.d is required where the data's spike is not Marion et al.'s sqrt(d/2)")
        if check_count("HeadsProblem.d", self.d, 1) < smallest:
            raise InvalidInput(
                f"HeadsProblem.d must be at least 2S + 2H = {smallest} (the targets and heads), got {self.d}"
            )
        scheduled = isinstance(self.lam, AbstractSchedule)
        lam = self.lam(0.0) if scheduled else self.lam
        if concrete(lam):
            SCALE.check("HeadsProblem.lam" + (" at t = 0" if scheduled else ""), float(lam))
        if self.rule is not None:
            if not isinstance(self.rule, GaussianRule):
                raise InvalidInput(f"HeadsProblem.rule must be a flowsim.quadrature.GaussianRule, got {self.rule!r}")
            if self.rule.dimension != self.L * self.heads:
                raise InvalidInput(
                    f"HeadsProblem.rule must have dimension L H = {self.L * self.heads} (one standard normal per "
                    f"score), got {self.rule.dimension}"
                )

    # --- the state space ----------------------------------------------------------------------

    @property
    def L(self) -> int:
        return self.data.lengths.values[0]

    @property
    def layout(self) -> HeadsLayout:
        return heads_layout(self.heads, self.locations)

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.layout.names

    @property
    def state_labels(self) -> dict:
        return self.layout.labels

    @property
    def state_symbols(self) -> dict:
        return self.layout.symbols

    @property
    def closed_form(self) -> bool:
        """Whether the risk is the generated closed form (erf, no rule given)."""
        return self.attention == ERF and self.rule is None

    @property
    def symmetries(self) -> np.ndarray:
        """The sign flips of the state that leave risk and flow unchanged, the identity first (docs/heads.md):

        - for every map, the reflection that flips every v*_j (fixing every k*_j) with every v_h -> -v_h:
          theta, eta, rho, kv, vk change sign (its fixed set: every key orthogonal to every value and v*_j);
        - for an odd map (erf), flipping one head, (k_h, v_h) -> (-k_h, -v_h), and flipping one location's
          targets (k*_j, v*_j) -> -(k*_j, v*_j) with that location's tokens, and all their products.

        Exchanging heads or locations permutes coordinates: `exchange_heads`, `exchange_locations`.
        """
        layout = self.layout
        reflection = np.ones(layout.dimension)
        for index in (layout.theta, layout.eta, layout.rho, layout.kv, layout.vk):
            reflection[np.ravel(index)] = -1
        generators = [reflection]
        if self.attention.odd:
            for h in range(layout.heads):
                flip = np.ones(layout.dimension)
                for index in (layout.kappa, layout.nu, layout.theta, layout.eta):
                    flip[index[h]] = -1
                for p, pair in enumerate(layout.pairs):
                    if h in pair:
                        flip[[layout.kk[p], layout.kv[p], layout.vk[p], layout.vv[p]]] = -1
                generators.append(flip)
            for j in range(layout.locations):
                flip = np.ones(layout.dimension)
                for index in (layout.kappa, layout.nu, layout.theta, layout.eta):
                    flip[index[:, j]] = -1
                generators.append(flip)
        group = {tuple(np.ones(layout.dimension))}
        frontier = list(group)
        while frontier:
            element = np.array(frontier.pop())
            for generator in generators:
                product = tuple(element * generator)
                if product not in group:
                    group.add(product)
                    frontier.append(product)
        identity = tuple(np.ones(layout.dimension))
        return np.array([identity, *sorted(group - {identity}, reverse=True)])

    @property
    def targets(self) -> np.ndarray:
        """The specialised oracle states: head h on (k*_pi(h), v*_pi(h)) for every injective assignment pi (for
        H > S, every head not assigned orthogonal to everything)."""
        layout = self.layout
        return np.array([specialised_state(layout, pi) for pi in injective_assignments(layout)])

    @property
    def target_label(self) -> str:
        return "specialised heads (k_h, v_h) = (k*_pi(h), v*_pi(h))"

    def describe(self, *, math_text: bool = False) -> str:
        parameters = super().describe(math_text=math_text)
        heads = f"H = {self.heads} heads, S = {self.locations} locations"
        return f"{self.attention.name} attention, {heads}, {self.data!r}, {parameters}"

    def risk_floor(self) -> float:
        return float(self.data.noise) ** 2

    def unrealizable(self, ys, *, atol=1e-10):
        return self.layout.unrealizable(ys, atol=atol)

    def initial_states(self, key, n, kind="sphere"):
        """n states of heads drawn independently and uniformly on the sphere of R^d (`kind` "sphere"), exactly, without
        d-dimensional vectors (`_heads_state.sphere_states`)."""
        check_choice("kind", kind, self.initialisations)
        return sphere_states(key, self.layout, self.d, check_count("n", n, 1))

    def states_from_vectors(self, k, v):
        """The state of explicit unit heads k, v of shape (..., H, d), with the data seam's targets
        k*_j = e_{2j-1}, v*_j = e_{2j} (j = 1..S; 0-based rows 2j - 2 and 2j - 1 of the identity)."""
        k = jnp.asarray(k, float)
        eye = jnp.eye(k.shape[-1])
        return heads_overlaps(k, v, eye[0 : 2 * self.locations : 2], eye[1 : 2 * self.locations : 2])

    def exchange_heads(self, y, permutation):
        """The state with the heads relabelled: new head h is old head permutation[h] (a symmetry of the task)."""
        layout = self.layout
        order = list(range(2 * layout.locations)) + [layout.head(h, kind) for h in permutation for kind in (0, 1)]
        return self._permuted(y, order)

    def exchange_locations(self, y, permutation):
        """The state with the locations relabelled: new location j is old location permutation[j] (a symmetry)."""
        layout = self.layout
        order = [layout.target(j, kind) for j in permutation for kind in (0, 1)]
        return self._permuted(y, order + list(range(2 * layout.locations, layout.size)))

    def _permuted(self, y, order):
        gram = self.layout.gram(jnp.asarray(y, float))
        order = jnp.asarray(order)
        return self.layout.entries(gram[..., order[:, None], order[None, :]])

    # --- the dynamics -------------------------------------------------------------------------

    def lam_at(self, t):
        """lam at flow time t (the schedule's value, or the fixed lam)."""
        return self.lam(t) if isinstance(self.lam, AbstractSchedule) else jnp.asarray(self.lam, dtype=float)

    def _risk_at(self, t, y):
        tokens = self.data.tokens
        arguments = (self.lam_at(t), tokens.spike, tokens.spread, self.data.noise, self.L)
        if self.closed_form:
            return closed_form_risk(self.layout, y, *arguments)
        return rule_risk(self.layout, y, self.attention, self.rule, *arguments)

    def _field_at(self, t, y):
        return projected_heads_flow(self.layout, y, jax.grad(lambda x: self._risk_at(t, x))(y))

    def _points(self, function, y, chunk: int = _RULE_CHUNK):
        """function(one state) over the states y (..., n): vectorised for the closed form, `chunk` states at a time
        for a rule."""
        y = self._as_states(y)
        if y.ndim == 1:
            return function(y)
        flat = y.reshape(-1, self.dimension)
        values = jax.vmap(function)(flat) if self.closed_form else jax.lax.map(function, flat, batch_size=chunk)
        return values.reshape(*y.shape[:-1], *values.shape[1:])

    @compiled_method
    def risk(self, t, y):
        """The full population risk E[(y - f)^2] at states y (..., n)."""
        return self._points(lambda x: self._risk_at(t, x), y)

    @compiled_method
    def risk_gradient(self, t, y):
        """The risk's partial derivatives in the state's coordinates, at states y (..., n)."""
        return self._points(jax.grad(lambda x: self._risk_at(t, x)), y)

    @compiled_method
    def vector_field(self, t, y):
        """d/dt of the state under each head's projected gradient flow (module docstring)."""
        return self._points(lambda x: self._field_at(t, x), y)

    @compiled_method
    def jacobian(self, t, y):
        """d field_i / d y_j, by the chain rule through the projection (`projected_heads_jacobian`) from the risk's
        gradient and Hessian: for erf through the moments (`closed_form_hessian`); for a rule, the Hessian's columns
        one at a time (forward over reverse: a rule's arrays times one tangent, not n), one state at a time."""
        tokens = self.data.tokens
        arguments = (self.lam_at(t), tokens.spike, tokens.spread, self.data.noise, self.L)
        if self.closed_form:

            def at(x):
                return projected_heads_jacobian(self.layout, x, *closed_form_hessian(self.layout, x, *arguments))

            return self._points(at, y)

        def by_rule(x):
            gradient = jax.grad(lambda z: self._risk_at(t, z))
            columns = jax.lax.map(lambda e: jax.jvp(gradient, (x,), (e,))[1], jnp.eye(self.dimension))
            return projected_heads_jacobian(self.layout, x, gradient(x), columns.T)

        return self._points(by_rule, y, chunk=1)

    @compiled_method
    def discrete_map(self, t, y, alpha):
        """One step of projected gradient descent with renormalisation (step alpha), exact on the state."""

        def step(x):
            return _pgd_step(self.layout, x, jax.grad(lambda z: self._risk_at(t, z))(x), alpha)

        return self._points(step, y)

    def flow_solver(self) -> dict:
        """The linearly implicit Rodas5: the flow is stiff (the Jacobian's spectral radius 500 to 3 000 along the
        authors' two-head flow at d = 80, where Tsit5 takes ~28 000 steps to t = 100). erf: rtol 1e-6, atol 1e-8 (about
        240 steps there; end states within 1e-4 of a 1e-9 solve: BENCHMARKS.md, "The two-head flow"); pass rtol for
        tighter. A rule's risk: rtol 1e-5, atol 1e-7, as slr.Problem's rule-based maps (the rule's error is above)."""
        if self.closed_form:
            return {"solver": Rodas5(), "rtol": 1e-6, "atol": 1e-8}
        return {"solver": Rodas5(), "rtol": 1e-5, "atol": 1e-7}

    def flow_cost(self, trajectories: int, t_span: float, advice: str = "solve fewer starts") -> Cost:
        """The estimated time of the flow from `trajectories` starts over `t_span` with `flow_solver`'s options: the
        steps of the engine's accuracy law for Rodas5 (`implicit_steps`, times `BATCH_STEPS` for a batch's slowest
        start), each at `STEP_SECONDS` (scaled by the state's size squared) or, for a rule, `RULE_STEP_SECONDS` per
        rule point and score, plus `COMPILE_SECONDS`."""
        steps = BATCH_STEPS * implicit_steps(t_span, self.flow_solver()["rtol"])
        if self.closed_form:
            per_step, once = STEP_SECONDS * (self.dimension / 22) ** 2, COMPILE_SECONDS["closed form"]
        else:
            per_step = RULE_STEP_SECONDS * self.rule.size * self.L * self.heads
            once = COMPILE_SECONDS["rule"]
        what = f"the heads' flow ({trajectories} trajectories of {self.dimension} order parameters, t = {t_span:g})"
        return Cost(what, once + per_step * steps * trajectories, advice)

    def flow_max_steps(self) -> int:
        # As slr.Problem: explicit steps are stability-limited, about 35 d per unit-100 of time at large d.
        return 1 << (max(100_000, 500 * self.d) - 1).bit_length()
