"""Single-location regression as a task: parameters, flow, Jacobian, risk, map, state space and SGD chain.

The state is the five overlaps (kappa, nu, theta, eta, rho) = `(<k,k*>, <v,v*>, <v,k*>, <k,v*>, <k,v>)`
(docs/science.md section 3); every equation comes from `_generated` (derivations/slr.py).
"""

import math
import types
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from flowsim._checks import NOISE, SCALE, Allowed, InvalidInput, check_choice, concrete, python_scalar
from flowsim._compile import compiled_method
from flowsim._task import AbstractTask, Parameter
from flowsim.quadrature import GaussianRule, default_rule
from flowsim.rosenbrock import Rodas5
from flowsim.schedules import AbstractSchedule
from flowsim.tasks.slr import _generated as generated
from flowsim.tasks.slr._approach import RATE_FLOOR, TOLERANCE, edge_leads_to_sink
from flowsim.tasks.slr._attention import ATTENTION_MAPS, ERF, AttentionMap, as_attention_map, check_scores
from flowsim.tasks.slr._init import INITIALISATIONS, initial_overlaps
from flowsim.tasks.slr._maps import check_rule, rule_flow, rule_gradient, rule_jacobian, rule_risk
from flowsim.tasks.slr._overlap_sgd import draw_step_noise, frame, renormalised_step, sgd_step
from flowsim.tasks.slr._overlaps import OVERLAP_NAMES, unrealizable

__all__ = [
    "LARGEST_LAM",
    "ORACLE",
    "PARAMETERS",
    "SCORE_SPREAD",
    "SYMBOLS",
    "Problem",
    "ProblemOnManifold",
    "distance_to_manifold",
]

#: The oracle's overlaps; (k, v) -> (-k, -v) gives the same predictor.
ORACLE = np.array([1.0, 1.0, 0.0, 0.0, 0.0])

#: Axis labels of the overlaps, in mathtext.
SYMBOLS = {
    "kappa": r"$\kappa = \langle k, k^*\rangle$",
    "nu": r"$\nu = \langle v, v^*\rangle$",
    "theta": r"$\theta = \langle v, k^*\rangle$",
    "eta": r"$\eta = \langle k, v^*\rangle$",
    "rho": r"$\rho = \langle k, v\rangle$",
}
_SHORT = {"kappa": r"\kappa", "nu": r"\nu", "theta": r"\theta", "eta": r"\eta", "rho": r"\rho"}


def distance_to_manifold(m) -> np.ndarray:
    """The distance sqrt(theta^2 + eta^2 + rho^2) of overlaps (..., 5) to M = {theta = eta = rho = 0}."""
    return np.linalg.norm(np.asarray(m)[..., 2:], axis=-1)


#: Overlap points evaluated at once by a rule (`Problem._by_rule`).
_RULE_CHUNK = 256

#: d enters the programs as an int64 and as float64 (d / 2, sqrt(d / 2)): every integer up to 2^53 is exact in both.
DIMENSION = Allowed("an integer in [2, 2**53]", lambda d: 2 <= d <= 2**53, integer=True)
#: The generated flow computes L^2 in int64: L below 2^31 keeps it exact.
TOKENS = Allowed("an integer in [1, 2**31 - 1]", lambda L: 1 <= L <= 2**31 - 1, integer=True)

#: The parameters with their allowed values (the command line's options reuse them). lam, gamma and eps enter the
#: risk squared and to the fourth power (Python's float ** raises on overflow): bounded by 1e50.
PARAMETERS = (
    Parameter("d", int, "token dimension d", DIMENSION, "$d$"),
    Parameter("L", int, "number of tokens L", TOKENS, "$L$"),
    Parameter(
        "lam",
        float,
        "inverse temperature lambda of the attention (linear attention: at most 1e12)",
        SCALE,
        "$\\lambda$",
    ),
    Parameter(
        "gamma",
        float,
        "standard deviation gamma of the informative token (sqrt(1/2): same expected norm as the others)",
        SCALE,
    ),
    Parameter("eps", float, "standard deviation eps of the label noise", NOISE),
)


#: The largest lam a built-in map takes, where it is below lam's bound of 1e50. Linear attention's weights 1 + lam x
#: mix a constant with a term of size lam; its risk and field stay finite to lam = 1e50 (size lam^2), but its flow's
#: solver rejects more and more steps as lam grows: at d = 20, L = 3, 8 starts flowed to t = 100 take 94-114 steps at
#: lam = 1e10, 276-1135 at 1e12, and 2 of them spend 8192 steps at 1e13 (at 1e14, one of 2 starts spends 2048 steps
#: before t = 1): the command line's budget of 2e6 steps (about 8 s per 2048 steps) would run for about two hours.
LARGEST_LAM = types.MappingProxyType({ATTENTION_MAPS["linear"]: 1e12})
#: Standard deviations of a standardised score that `check_scores` covers beyond the rule's points: a Gaussian
#: sample beyond 8 has probability 1e-15.
SCORE_SPREAD = 8.0


class _Parameters(AbstractTask):
    """The parameters shared by the 5-D flow and its restriction to M, validated."""

    # d is a leaf: the engine's programs trace it (`flowsim.integrate.traced` makes it an array), so a flow, a risk
    # or a chain at another d reuses the compiled program; what is shaped by d takes its size from arrays (the
    # hidden vectors). A Python int d is the user's (checked); an array d, the engine's.
    d: int = eqx.field(converter=python_scalar)
    L: int = eqx.field(static=True, converter=python_scalar)
    lam: float | AbstractSchedule
    gamma: float = math.sqrt(0.5)
    eps: float = 0.0
    attention: AttentionMap = eqx.field(static=True, default="erf")
    rule: GaussianRule | None = None

    parameters: ClassVar = PARAMETERS
    scheduled: ClassVar = "lam"
    targets: ClassVar = ORACLE[None]
    state_labels: ClassVar = SYMBOLS
    state_symbols: ClassVar = _SHORT

    def __post_init__(self):
        # A built-in map's name becomes the map: the field always holds an `AttentionMap`.
        self.attention = as_attention_map(self.attention, "Problem.attention")
        # Every map but erf takes its risk by a rule; the default one is made here, once, so that it
        # is a leaf of the task (traced by jitted functions, not folded into them as a constant).
        if self.rule is None and self.attention != ERF and isinstance(self.L, int) and self.L >= 1:
            self.rule = default_rule(self.L)

    def __check_init__(self):
        for parameter in PARAMETERS:
            value = getattr(self, parameter.name)
            # A traced value (a problem rebuilt inside a compiled program) was checked when its problem was made.
            if isinstance(value, AbstractSchedule):
                # A schedule's start, within the parameter's bounds (InverseTimeDecay's largest value).
                start = value(0.0)
                if concrete(start):
                    parameter.allowed.check(f"Problem.{parameter.name} at t = 0 (its schedule's start)", float(start))
            elif concrete(value):
                parameter.allowed.check(f"Problem.{parameter.name}", value)
        if self.rule is not None:
            check_rule(self.rule, self.L)
        self._check_scores()

    def _check_scores(self):
        """lam within the map's own bound (`LARGEST_LAM`), and a researcher's map finite on the scores the problem's
        risk, flow and SGD meet (`check_scores`): up to lam (s + max(1, gamma) U) in size, U the largest of the rule's
        standardised points and `SCORE_SPREAD` (lam at t = 0 for a schedule: its largest value)."""
        lam = self.lam(0.0) if isinstance(self.lam, AbstractSchedule) else self.lam
        if not all(concrete(value) for value in (lam, self.d, self.gamma)):
            return
        lam = float(lam)
        largest = LARGEST_LAM.get(self.attention)
        if largest is not None and lam > largest:
            raise InvalidInput(
                f"lam must be at most {largest:g} for {self.attention.name} attention (its flow cannot be solved "
                f"beyond: slr.LARGEST_LAM), got {lam:g}"
            )
        if any(self.attention is built_in for built_in in ATTENTION_MAPS.values()):
            return  # finite at every score (tests/test_edges_numerics.py)
        points = SCORE_SPREAD if self.rule is None else np.abs(np.asarray(self.rule.points)).max()
        bound = lam * (math.sqrt(float(self.d) / 2) + max(1.0, float(self.gamma)) * max(SCORE_SPREAD, points))
        meets = f"at lam = {lam:g}, d = {float(self.d):g}, gamma = {float(self.gamma):g} the scores reach {bound:.3g}"
        check_scores(self.attention, bound, meets)

    @property
    def odd(self) -> bool:
        """Whether (k, v) -> (-k, -v) leaves the predictor unchanged: when the map's weights are odd
        (`AttentionMap.odd`: erf's); for the other maps (k*, v*) and (-k*, -v*) differ."""
        return self.attention.odd

    @property
    def symmetries(self) -> np.ndarray:
        """The identity and, for erf, (k, v) -> (-k, -v): the signs of kappa, nu, theta and eta flip."""
        flip = np.ones((1, self.dimension)) * np.where(np.arange(self.dimension) < 4, -1.0, 1.0)
        identity = np.ones((1, self.dimension))
        return np.concatenate([identity, flip]) if self.odd else identity

    @property
    def target_label(self) -> str:
        return "+-(k*, v*)" if self.odd else "(k*, v*)"

    @property
    def closed_form(self) -> bool:
        """Whether the risk and flow are the closed forms of docs/science.md section 3 (erf), not a rule's."""
        return self.attention == ERF and self.rule is None

    def describe(self, *, math_text: bool = False) -> str:
        described = super().describe(math_text=math_text)
        return described if self.attention == ERF else f"{self.attention.name} attention, {described}"

    @property
    def s(self) -> float:
        """The informative token's mean along k*: sqrt(d/2) (an array where d is traced)."""
        return math.sqrt(self.d / 2) if isinstance(self.d, int) else jnp.sqrt(self.d / 2)

    def lam_at(self, t):
        """lam at flow time t (the schedule's value, or the fixed lam)."""
        return self.lam(t) if isinstance(self.lam, AbstractSchedule) else jnp.asarray(self.lam, dtype=float)

    def _call(self, function, t, y, **extra):
        """A generated function at states y (..., n) and these parameters, lam taken at time t: the one place
        they are unpacked."""
        return function(*jnp.moveaxis(y, -1, 0), self.d, self.L, self.lam_at(t), self.gamma, self.eps, **extra)

    def risk_floor(self) -> float:
        return float(self.eps) ** 2

    def flow_solver(self) -> dict:
        """erf: the engine's defaults. The other maps: the linearly implicit Rodas5 at rtol 1e-5, atol 1e-7.
        Their flows are stiff off M too (curvature ~ d along theta), and at these tolerances the saved states
        are within 1e-6 of a 1e-8 solve (softmax, d = 400, L = 10, lam = 1), below the rule's own error
        (docs/science.md section 7), in ~64 steps where Tsit5 takes ~14 000; each step needs one Jacobian, which
        the rule gives at about two evaluations' cost (`rule_jacobian`). Rosenbrock4 took 236 steps there, 1.57x
        the time (BENCHMARKS.md, "Rule-based flows")."""
        return {} if self.closed_form else {"solver": Rodas5(), "rtol": 1e-5, "atol": 1e-7}

    def flow_max_steps(self) -> int:
        # Explicit steps are stability-limited: about 35 d of them per unit-100 of time at d >= 400
        # (BENCHMARKS.md), so the default budget grows with d. The budget is static in a compiled solve:
        # rounded up to a power of two, nearby d share one (d up to 262, then each doubling of d).
        return 1 << (max(100_000, 500 * self.d) - 1).bit_length()


class Problem(_Parameters):
    """Single-location regression at dimension d with L tokens (docs/science.md section 1), as a task.

    An immutable pytree: `L` fixes array shapes and is static; `d`, `lam`, `gamma` and `eps` are leaves,
    so the engine's compiled programs (flows, risks, Jacobians, fixed points, the SGD chain) serve every
    value of them (d enters them as a number; the arrays of R^d take their size from the hidden vectors). `lam` may
    be a schedule of the flow time t (`flowsim.schedules`): it then drives the flow, the map and SGD.

    **Arguments:**

    - `d`: token dimension, an integer in [2, 2^53].
    - `L`: number of tokens, an integer in [1, 2^31 - 1].
    - `lam`: inverse temperature of the attention nonlinearity, in [1e-50, 1e50] (linear attention: at most 1e12,
      `LARGEST_LAM`), or a schedule (starting there). A researcher's map must be finite, with its derivative, on
      the scores the problem meets, up to lam (sqrt(d/2) + 8 max(1, gamma)) in size (`SCORE_SPREAD`: checked).
    - `gamma`: standard deviation of the informative token, in [1e-50, 1e50]
      (default sqrt(1/2): the informative token then has the same expected norm).
    - `eps`: standard deviation of the label noise, in [0, 1e50] (default 0).
    - `attention`: the weight map (docs/science.md section 7): an `AttentionMap`, a researcher's own or a
      built-in one, or a built-in one's name (`ATTENTION_MAPS`): "erf" (default, the paper's, closed forms),
      "softmax", "linear", "softplus", "sigmoid" or "relu" (risk and flow by a rule over the L scores). The
      map is static: jitted functions compile once per map.
    - `rule`: the `flowsim.quadrature.GaussianRule` of dimension L that takes the risk's expectation
      (default for every map but erf: `flowsim.quadrature.default_rule(L)`; given for erf, the closed form
      is replaced by the rule, to measure its error).
    """

    state_names: ClassVar = OVERLAP_NAMES
    initialisations: ClassVar = INITIALISATIONS
    tolerance: ClassVar = TOLERANCE
    approach_text: ClassVar = (
        "near M, |nu| ~ 1 (nu ~ 1 without erf's sign symmetry), sign(kappa) = sign(nu), |kappa| rising, on an edge "
        f"that leads to the sink (erf: proven; other maps: rates > {RATE_FLOOR:g} on a grid)"
    )
    name: ClassVar = "single-location regression"
    title: ClassVar = "Single-location regression"
    observables: ClassVar = {
        "distance to M": (r"distance to M  $\sqrt{\theta^2 + \eta^2 + \rho^2}$", distance_to_manifold, "log")
    }
    panels: ClassVar = ("kappa", "nu", "distance to M")
    projection_pairs: ClassVar = (("kappa", "nu"), ("theta", "eta"), ("kappa", "rho"))

    @compiled_method
    def vector_field(self, t, y):
        """d/dt of the five overlaps under the projected gradient flow (docs/science.md section 5)."""
        y = self._as_states(y)
        if self.closed_form:
            return self._call(generated.flow, t, y)
        return self._by_rule(rule_flow, t, y)

    @compiled_method
    def risk(self, t, y):
        """The full population risk E[(Y - T)^2] at overlaps y."""
        y = self._as_states(y)
        if self.closed_form:
            return self._call(generated.risk, t, y)
        return self._by_rule(rule_risk, t, y)

    def _by_rule(self, function, t, y):
        """`rule_flow`, `rule_risk`, `rule_gradient` or `rule_jacobian` at overlaps y of any leading shape.

        Many points at once (a portrait's grid) go in chunks of `_RULE_CHUNK`: each point holds arrays
        of the rule's size, and a 400 x 400 grid at 2^14 points would need tens of GB at once.
        """

        def at(point):
            return function(self, point, self.rule, t)

        if y.ndim == 1:
            return at(y)
        values = jax.lax.map(at, y.reshape(-1, 5), batch_size=_RULE_CHUNK)
        return values.reshape(*y.shape[:-1], *values.shape[1:])

    @compiled_method
    def jacobian(self, t, y):
        y = self._as_states(y)
        if self.closed_form:
            return self._call(generated.jacobian, t, y)
        return self._by_rule(rule_jacobian, t, y)

    @compiled_method
    def discrete_map(self, t, y, alpha):
        """One step of projected gradient descent with renormalisation, exact on the overlaps.

        The population gradient lies in span(k*, v*, k, v): grad_k R = R_kappa k* + R_eta v* + R_rho v and
        grad_v R = R_theta k* + R_nu v* + R_rho k, so the step is the overlap chain's renormalised step
        without noise; for erf, the generated closed form of the same step.
        """
        y = self._as_states(y)
        if self.closed_form:
            return self._call(generated.pgd_map, t, y, alpha=alpha)
        return jnp.vectorize(lambda point: self._pgd_step(t, point, alpha), signature="(5)->(5)")(y)

    @compiled_method
    def risk_gradient(self, t, y):
        """The risk's partial derivatives (R_kappa, R_nu, R_theta, R_eta, R_rho) at overlaps y (..., 5)."""
        return self._gradient(t, self._as_states(y))

    def _gradient(self, t, y):
        if self.closed_form:
            return jnp.vectorize(jax.grad(lambda point: self.risk(t, point)), signature="(5)->(5)")(y)
        return self._by_rule(rule_gradient, t, y)

    def _pgd_step(self, t, point, alpha):
        r_kappa, r_nu, r_theta, r_eta, r_rho = self._gradient(t, point)
        k, v = frame(point)
        e1, e2 = jnp.eye(4)[:2]
        g_k = r_kappa * e1 + r_eta * e2 + r_rho * v
        g_v = r_theta * e1 + r_nu * e2 + r_rho * k
        return renormalised_step(k, v, g_k, g_v, jnp.zeros(3), alpha)

    def initial_states(self, key, n, kind):
        return initial_overlaps(key, self.d, n, kind)

    def unrealizable(self, ys, *, atol=1e-10):
        return unrealizable(ys, atol=atol)

    def approaching(self, ys, velocity, tol, t=0.0):
        """Near M (to tol) on its edge |nu| >= 1 - tol, with sign(kappa) = sign(nu) (nu > 0 where (k*, v*) is the
        only target) and |kappa| rising, where the edge leads to the sink. For erf it does: docs/science.md,
        section 5. For another map it is checked: the flow's rates on M are positive on a grid between the point
        and the sink (`_approach.edge_leads_to_sink`, with the field at time t). `tol` is in (0, 1)."""
        tol = self.tolerance.check("tol", tol)
        sign = np.where(ys[:, 1] < 0, -1.0, 1.0) if self.odd else np.ones(len(ys))
        kappa, nu = sign * ys[:, 0], sign * ys[:, 1]
        edge = (distance_to_manifold(ys) <= tol) & (nu >= 1 - tol) & (kappa > 0) & (sign * velocity[:, 0] > 0)
        if self.attention == ERF or not edge.any():
            return edge
        return edge & edge_leads_to_sink(self, np.stack([kappa, nu], axis=-1), t, tol)

    def restriction(self) -> "ProblemOnManifold":
        """The flow on the invariant manifold M = {theta = eta = rho = 0}, in (kappa, nu)."""
        return ProblemOnManifold(self.d, self.L, self.lam, self.gamma, self.eps, self.attention, self.rule)

    def sgd_noise(self, key, batch):
        # Checked where d is the user's number: `flowsim.sgd.run_sgd` sizes a step's noise before it traces the problem.
        if isinstance(self.d, int) and self.d < 5:
            raise InvalidInput(f"the SGD chain on the overlaps needs d >= 5, got d = {self.d}")
        return draw_step_noise(key, batch, self.L, self.d)

    def sgd_step(self, t, y, lr, noise, batch):
        """One online SGD step on a fresh mini-batch, exact in law, on the overlaps (`_overlap_sgd`)."""
        return sgd_step(self, y, self.lam_at(t), lr, noise, batch)


class ProblemOnManifold(_Parameters):
    """The flow of single-location regression restricted to M = {theta = eta = rho = 0}, in (kappa, nu).

    Same parameters as `Problem`; the state is (kappa, nu) in [-1, 1]^2.
    """

    state_names: ClassVar = OVERLAP_NAMES[:2]
    initialisations: ClassVar = ("manifold",)
    targets: ClassVar = ORACLE[None, :2]
    name: ClassVar = "flow on M"
    title: ClassVar = "Flow on M ($\\theta = \\eta = \\rho = 0$)"
    panels: ClassVar = ("kappa", "nu")
    projection_pairs: ClassVar = (("kappa", "nu"),)

    def lift(self, ys):
        """(kappa, nu) as the overlaps (kappa, nu, 0, 0, 0)."""
        ys = np.asarray(ys, dtype=float)
        return np.concatenate([ys, np.zeros((*ys.shape[:-1], 3))], axis=-1)

    def _full(self) -> Problem:
        return Problem(self.d, self.L, self.lam, self.gamma, self.eps, self.attention, self.rule)

    def _lifted(self, y):
        return jnp.concatenate([y, jnp.zeros((*y.shape[:-1], 3), y.dtype)], axis=-1)

    @compiled_method
    def vector_field(self, t, y):
        y = self._as_states(y)
        if self.closed_form:
            return self._call(generated.flow_on_manifold, t, y)
        # M is invariant under every map's flow (measured: tests/test_maps.py), so its first two components are it.
        return self._full().vector_field(t, self._lifted(y))[..., :2]

    @compiled_method
    def risk(self, t, y):
        y = self._as_states(y)
        return self._full().risk(t, self._lifted(y))

    @compiled_method
    def jacobian(self, t, y):
        y = self._as_states(y)
        if self.closed_form:
            return self._call(generated.jacobian_on_manifold, t, y)
        return super().jacobian(t, y)

    def initial_states(self, key, n, kind):
        check_choice("kind", kind, self.initialisations)
        return initial_overlaps(key, self.d, n, kind)[:, :2]

    def unrealizable(self, ys, *, atol=1e-10):
        return unrealizable(self.lift(ys), atol=atol)
