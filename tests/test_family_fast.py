"""The SLR family's risk through seven moments of the weights (flowsim/tasks/slr/_family_fast.py): by the rule it is
`family_risk`, and its flow and Jacobian FamilyProblem's, to rounding; from a table, within the table's stated error."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim._checks import InvalidInput
from flowsim.quadrature import gauss_hermite
from flowsim.tasks import slr
from flowsim.tasks.slr import _family_fast as fast
from flowsim.tasks.slr import _generated_family as generated
from flowsim.tasks.slr._family_risk import family_risk

#: A smooth map normalised by the length (relu's normalisation without relu's kink, which a table cannot follow).
SOFTPLUS_BY_LENGTH = slr.AttentionMap("softplus / L", jax.nn.softplus, "length", odd=False, check=False)
RIDGE = 0.05

#: (data, maps): spiked tokens at a fixed and a variable L and with a spread other than 1, max-SLR at L = 2; each of
#: the three normalisations once at least (by the scores' sum: softmax; none: linear; by the length). Each pair is a
#: program of its own to compile (about 10 s on the 2-core CPU). erf through the moments (FamilyProblem's default) is
#: checked against the gradient flow of vectors in R^6 in tests/test_family.py, and max-SLR with softplus there too.
CASES = {
    "spiked L=2": (slr.spiked_slr(2.0, 2, 0.2), ("linear", SOFTPLUS_BY_LENGTH)),
    "spiked L~U{1,2}": (slr.spiked_slr(2.0, slr.Lengths.uniform(1, 2)), ("softmax",)),
    "spiked spread 0.7": (slr.DataModel(slr.SpikedTokens(1.5, 0.7), 2, 0.1), ("softmax",)),
    "max L=2": (slr.max_slr(1.5, 2, 0.1), ("softmax",)),
}
PAIRS = [(name, attention) for name, (_, maps) in CASES.items() for attention in maps]


def _rules(data):
    """Small symmetric rules (the moments' algebra does not depend on the rule's size)."""
    return tuple(gauss_hermite(L, 6) if data.spiked else gauss_hermite(2 * L, 4) for L in data.lengths.values)


def _sevens(seed: int, n: int = 3, size: float = 0.5) -> jnp.ndarray:
    """n valid sevens: of random k, v in R^6 (k* = e_1, v* = e_2)."""
    k, v = np.random.default_rng(seed).normal(scale=size, size=(2, n, 6))
    eye = jnp.eye(6)
    return slr.seven_from_vectors(jnp.asarray(k), jnp.asarray(v), eye[0], eye[1])


def _through_tokens(data, attention, rules, seven):
    """The risk, free-norm field and Jacobian (ridge RIDGE) through every token's moments: FamilyProblem's path when
    this was written (`family_risk`, its gradient by reverse mode into `free_flow`, `jax.jacfwd` of that)."""

    def field(point):
        gradient = jax.grad(lambda s: family_risk(data, attention, s, rules))(point)
        return generated.free_flow(*point, *gradient, RIDGE)

    return family_risk(data, attention, seven, rules), field(seven), jax.jacfwd(field)(seven)


def _from_moments(moments, seven):
    return (
        fast.fast_risk(moments, seven),
        fast.fast_field(moments, seven, RIDGE),
        fast.fast_jacobian(moments, seven, RIDGE),
    )


@eqx.filter_jit
def _both(moments, sevens):
    reference = jax.vmap(lambda s: _through_tokens(moments.data, moments.attention, moments.rules, s))(sevens)
    return reference, jax.vmap(lambda s: _from_moments(moments, s))(sevens)


@pytest.mark.parametrize(("name", "attention"), PAIRS, ids=[f"{n}, {getattr(a, 'name', a)}" for n, a in PAIRS])
def test_rule_moments_are_family_risk_to_rounding(name, attention):
    """Risk, field and Jacobian through the seven moments equal those through every token's moments, at 3 random
    valid points: 1e-10 relative to the largest entry (both sum the same rule; they differ by rounding)."""
    data = CASES[name][0]
    moments = fast.RuleMoments(data, attention, _rules(data))
    reference, mine = _both(moments, _sevens(len(name)))
    for what, expected, got in zip(("risk", "field", "Jacobian"), reference, mine, strict=True):
        scale = max(1.0, float(jnp.abs(expected).max()))
        assert float(jnp.abs(got - expected).max()) <= 1e-10 * scale, (name, what)


#: Tables: (data, map, rules, box) small enough to build in a few seconds.
TABLES = {
    "spiked L=3 softmax": (slr.spiked_slr(3.0, 3), "softmax", (gauss_hermite(3, 8),), (2.0, 4.0)),
    "max L=2 softplus": (slr.max_slr(1.5, 2, 0.1), "softplus", (gauss_hermite(4, 4),), None),
}
TOLERANCE = 1e-9


@pytest.fixture(scope="module", params=list(TABLES))
def table(request):
    data, attention, rules, box = TABLES[request.param]
    return fast.tabulate(data, attention, rules, box=box, tolerance=TOLERANCE), fast.RuleMoments(data, attention, rules)


@eqx.filter_jit
def _table_and_rule(table, moments, sevens):
    return (
        jax.vmap(lambda s: _from_moments(table, s))(sevens),
        jax.vmap(lambda s: _from_moments(moments, s))(sevens),
        jax.vmap(lambda s: fast.error_bounds(table, s))(sevens),
    )


def test_table_is_within_its_stated_error(table):
    """The table's risk, field and Jacobian lie within `error_bounds` of the rule's at 6 random points of its box.

    The bounds come from the largest errors on the check grid; between its points the interpolation error may exceed
    them by a small factor (most for derivatives near an edge): the test allows 3x (the largest ratio measured at
    random points was 1.1, for a Jacobian entry). The errors themselves are at the tolerance asked for (values),
    and the bounds small (risk below 1e-8): the test is not vacuous."""
    table, moments = table
    sevens = _sevens(5, n=12, size=0.4)
    sevens = sevens[np.asarray(table.covers(sevens))][:6]
    assert len(sevens) >= 4
    scale = float(jnp.abs(moments(0.5, 0.5 * table.box[1])).max())
    assert float(table.errors[0].max()) <= 2 * TOLERANCE * max(1.0, 2 * scale)
    from_table, from_rule, bounds = _table_and_rule(table, moments, sevens)
    assert float(bounds[0].max()) < 1e-8
    for what, got, expected, bound in zip(("risk", "field", "Jacobian"), from_table, from_rule, bounds, strict=True):
        assert bool(jnp.all(jnp.abs(got - expected) <= 3 * bound + 1e-14)), (what, got - expected, bound)


@pytest.mark.parametrize("table", ["max L=2 softplus"], indirect=True)
def test_table_derivatives_and_box(table):
    """The table called as a function differentiates to its `taylor` rows (the basis' custom derivative), and
    outside its box gives NaN with NaN derivatives (a solve that leaves the box fails instead of reading garbage)."""
    table, _ = table
    x, y = 0.3 * table.box[0], 0.4 * table.box[1]

    @jax.jit
    def both(table):
        first = jax.jacfwd(table, argnums=(0, 1))(x, y)
        second = jax.jacfwd(jax.jacfwd(table, argnums=(0, 1)), argnums=(0, 1))(x, y)
        return table.taylor(x, y, 2), jnp.stack([table(x, y), *first, second[0][0], second[0][1], second[1][1]])

    rows, got = both(table)
    assert float(jnp.abs(got - rows).max()) <= 1e-12 * max(1.0, float(jnp.abs(rows).max()))
    outside = jnp.array([2 * table.box[0], 0.0, 0.0, 1.0, 5 * table.box[0] ** 2 + table.box[1], 1.0, 0.0])
    assert not bool(table.covers(outside))
    risk, field = jax.jit(lambda t, s: (fast.fast_risk(t, s), fast.fast_field(t, s)))(table, outside)
    assert np.isnan(float(risk)) and np.isnan(np.asarray(field)).all()


def test_tabulate_refuses_what_it_cannot_tabulate():
    """A kinked map (relu: kinks where a rule point's score crosses 0) never reaches the tolerance; a bad box or
    tolerance is named."""
    data = slr.spiked_slr(1.0, 2)
    rules = (gauss_hermite(2, 4),)
    with pytest.raises(InvalidInput, match="not smooth enough"):
        fast.tabulate(data, "relu", rules, box=(1.0, 1.0))
    with pytest.raises(InvalidInput, match="box"):
        fast.tabulate(data, "softmax", rules, box=(1.0,))
    with pytest.raises(InvalidInput, match="box y_max"):
        fast.tabulate(data, "softmax", rules, box=(1.0, -1.0))
    with pytest.raises(InvalidInput, match="tolerance"):
        fast.tabulate(data, "softmax", rules, tolerance=0.0)
