"""The solves' jit: top-level programs compiled with flowsim's XLA options, nested calls without them, same numbers;
a task's methods compiled when called eagerly, traced as they are inside a trace; JAX's Threefry hash lowered
without its loop, its bits unchanged."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim import _compile


def _xla_accepts(name: str, value) -> bool:
    """Whether this XLA compiles a program given the option (asked directly, not through flowsim)."""
    try:
        jax.jit(lambda x: 2 * x, compiler_options={name: value}).lower(jnp.ones(2)).compile()
    except jax.errors.JaxRuntimeError as error:
        assert "No such compile option" in str(error)
        return False
    return True


@pytest.mark.parametrize("kind", ["solves", "training"])
def test_the_preferred_options_this_xla_knows_are_kept_and_an_unknown_one_dropped(monkeypatch, kind):
    """Each of a kind's options is kept exactly where this XLA takes it: jaxlib 0.10 takes them all; jaxlib 0.12
    (what pip installs on Python >= 3.12) no longer has `xla_cpu_use_fusion_emitters`, and the solves compile
    with XLA's defaults there."""
    known = _compile.compiler_options(kind)
    assert known == {name: value for name, value in _compile.OPTIONS[kind].items() if _xla_accepts(name, value)}
    monkeypatch.setitem(_compile.OPTIONS, kind, {"xla_no_such_option_of_flowsim": True, **known})
    _compile.compiler_options.cache_clear()
    try:
        assert _compile.compiler_options(kind) == known
    finally:
        _compile.compiler_options.cache_clear()


def test_every_xla_so_far_takes_the_trainings_option():
    """The "training" kind's option is in jaxlib 0.10 and 0.12 alike: were it dropped, the chain would compile at
    LLVM's level 2 unnoticed."""
    assert "xla_backend_optimization_level" in _compile.compiler_options("training")


def test_a_top_level_call_compiles_with_the_options_and_a_nested_one_without(monkeypatch):
    """An option XLA refuses shows which calls pass the options: the top-level call does (and fails), the
    same function inside jax.jit, jax.vmap or jax.grad joins the enclosing program without them."""
    monkeypatch.setattr(_compile, "compiler_options", lambda kind: {"xla_no_such_option_of_flowsim": True})

    @_compile.filter_jit
    def square(x):
        return x * x

    x = jnp.arange(3.0)
    np.testing.assert_array_equal(jax.jit(square)(x), [0.0, 1.0, 4.0])
    np.testing.assert_array_equal(jax.vmap(square)(x), [0.0, 1.0, 4.0])
    assert float(jax.grad(square)(3.0)) == 6.0
    with pytest.raises(jax.errors.JaxRuntimeError, match="xla_no_such_option_of_flowsim"):
        square(x)


def test_filter_jit_takes_static_python_values_and_gives_numpys_numbers():
    @_compile.filter_jit
    def scaled_sine(x, power):
        return jnp.sin(x) ** power

    x = jnp.linspace(0.0, 3.0, 7)
    # XLA's two emitters may round differently: a few units in the last place.
    np.testing.assert_allclose(scaled_sine(x, 3), np.sin(np.asarray(x)) ** 3, rtol=1e-14, atol=1e-15)
    assert scaled_sine.__name__ == "scaled_sine"


class _Decay:
    """A task-like object whose method counts its traces (its Python body runs once per trace)."""

    def __init__(self):
        self.traces = 0

    @_compile.compiled_method
    def field(self, t, y, rate):
        self.traces += 1
        return -rate * jnp.exp(-t) * y**3


def test_a_method_called_eagerly_is_compiled_once_for_every_value_of_its_numbers():
    """At the top level: one trace for two values of the Python numbers t and rate (traced, not static), the
    numbers numpy's to roundoff; the same shapes reuse the program, a new shape compiles another."""
    decay, y = _Decay(), np.linspace(-1.0, 1.0, 5)
    for t, rate in ((0.0, 2.0), (0.5, 3.0)):
        expected = -rate * np.exp(-t) * y**3
        np.testing.assert_allclose(decay.field(t, y, rate=rate), expected, rtol=1e-15, atol=1e-16)
    assert decay.traces == 1
    decay.field(0.0, np.ones(3), rate=1.0)
    assert decay.traces == 2


def test_a_method_called_inside_a_trace_is_traced_once_and_joins_it():
    """Inside jax.jit, jax.vmap and jax.grad the method joins the caller's program as one nested call, traced
    once per shapes however many times the caller calls it (three calls: one trace, one inner program)."""
    decay, y = _Decay(), jnp.linspace(-1.0, 1.0, 5)

    def thrice(y):
        return decay.field(0.0, y, 2.0) + decay.field(0.5, y, 2.0) + decay.field(1.0, 2 * y, 3.0)

    expected = -2.0 * y**3 - 2.0 * np.exp(-0.5) * y**3 - 3.0 * np.exp(-1.0) * (2 * y) ** 3
    np.testing.assert_allclose(jax.jit(thrice)(y), expected, rtol=1e-15)
    assert decay.traces == 1
    calls = [eqn for eqn in jax.make_jaxpr(thrice)(y).eqns if "jaxpr" in eqn.params]
    assert len(calls) == 3 and len({id(eqn.params["jaxpr"].jaxpr) for eqn in calls}) == 1
    np.testing.assert_allclose(jax.vmap(lambda y: decay.field(0.0, y, 2.0))(y), -2.0 * y**3, rtol=1e-15)
    assert float(jax.grad(lambda y: decay.field(0.0, y, 2.0))(y[3])) == pytest.approx(-6.0 * 0.25, rel=1e-15)
    assert decay.traces == 2  # vmap's rows and grad's point, both of shape (): a second trace, shared
    assert _Decay.field.__name__ == "field"


def test_a_trainings_segments_compile_with_the_options_of_its_kind(monkeypatch):
    """A training's segments take the options of the kind it names (the SGD chain's: "training"): an option XLA
    refuses, given to that kind alone, fails such a training's first segment; one with XLA's defaults runs.
    (Without the persistent compilation cache, whose key leaves this option out: it would serve the program.)"""
    from flowsim import sgd

    def halving(shared, seed, config):
        return sgd.LoggedSteps(seed, lambda state, n: state / 2, lambda state, n: [state])

    def run(kind):
        return sgd.run_logged(sgd.logged_programs(halving, kind), (), jnp.ones((2, 3)), None, logs=2, log_every=1)

    monkeypatch.setattr(_compile, "compiler_options", lambda kind: {"xla_no_such_option_of_flowsim": True})
    enabled = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        with pytest.raises(jax.errors.JaxRuntimeError, match="xla_no_such_option_of_flowsim"):
            run("training")
        logged, first_bad, stopped_at = run(None)
    finally:
        jax.config.update("jax_enable_compilation_cache", enabled)
    np.testing.assert_array_equal(logged[0, :, 0], [1.0, 0.5, 0.25])
    np.testing.assert_array_equal(first_bad, [-1, -1])
    np.testing.assert_array_equal(stopped_at, [-1, -1])
    with pytest.raises(ValueError, match=r"kind must be one of \(None, 'solves', 'training'\), got 'fast'"):
        sgd.logged_programs(halving, "fast")


@pytest.mark.parametrize("drawn", [False, True], ids=["steps", "steps with bulk draws"])
def test_a_training_logged_at_another_cadence_reuses_its_segment(drawn):
    """The logging cadence and the run's length are traced: two runs logging every 1 and every 3 steps (two
    blocks a segment each) trace the segment once and log each its own steps. With draws in bulk, the
    cadences 4 and 12 share their chunk of 4 steps."""
    from flowsim import sgd

    traces = []

    def step(state, n, noise=0.0):
        traces.append(n)
        return state / 2 + noise

    def halving(shared, seed, config):
        draw = (lambda n: jnp.zeros(())) if drawn else None
        return sgd.LoggedSteps(seed, step, lambda state, n: [state, n], draw)

    programs, cadences = sgd.logged_programs(halving), ((4, 12) if drawn else (1, 3))
    for log_every in cadences:
        logged, steps, first_bad, _ = sgd.run_logged(
            programs, (), jnp.ones((2, 3)), None, logs=2, log_every=log_every, largest_chunk=4
        )
        np.testing.assert_array_equal(steps[0], [0, log_every, 2 * log_every])
        np.testing.assert_array_equal(logged[1, :, 2], 0.5 ** np.array([0, log_every, 2 * log_every]))
        np.testing.assert_array_equal(first_bad, [-1, -1])
    assert len(traces) == 1


# Threefry-2x32 with 20 rounds: the known-answer vectors of its authors (Salmon et al., "Parallel random numbers:
# as easy as 1, 2, 3", SC 2011; Random123's kat_vectors), as (key, counter, output) pairs.
THREEFRY_KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize(("key", "counter", "expected"), THREEFRY_KNOWN_ANSWERS)
def test_threefry_lowered_without_its_loop_gives_the_published_outputs(key, counter, expected):
    """`flowsim._config` lowers JAX's Threefry hash on the CPU without its loop on the jaxlib releases it was
    measured on (CI's, jaxlib 0.10): the program then holds no loop, and the hash, compiled, gives its authors'
    outputs bit for bit (elsewhere, with JAX's loop, the same outputs)."""
    import jaxlib
    from jax.extend.random import threefry_2x32

    from flowsim import _config

    assert _config.THREEFRY_UNROLLED == (_config.release(jaxlib.__version__) in _config.UNROLLED_RELEASES)
    hash_ = jax.jit(threefry_2x32)
    keypair, count = np.array(key, dtype=np.uint32), np.array(counter, dtype=np.uint32)
    assert ("while" not in hash_.lower(keypair, count).as_text()) == _config.THREEFRY_UNROLLED
    np.testing.assert_array_equal(hash_(keypair, count), np.array(expected, dtype=np.uint32))


@pytest.mark.parametrize(
    ("version", "unrolled"),
    [
        ("0.10.2", True),
        ("0.10.0", True),
        ("0.10.3.dev20261201", True),
        ("0.11.2", False),
        ("0.12.0.1", False),
        ("0.9.2", False),
        ("1.0rc1", False),
    ],
)
def test_the_hash_is_written_out_only_on_the_releases_it_was_measured_on(version, unrolled):
    """jaxlib 0.11 and 0.12's LLVM hang compiling some programs that hold the written-out hash (the sparse
    task's initialisation); releases not measured keep JAX's loop too. Asked for another release, nothing is
    registered."""
    from flowsim import _config

    assert (_config.release(version) in _config.UNROLLED_RELEASES) == unrolled
    if not unrolled:
        assert _config._threefry_unrolled_on_cpu(version) is False


def _draws(key):
    """Normals, gamma variates (a rejection loop of draws) and split keys, as floats."""
    return (
        jax.random.normal(key, (7, 5)),
        jax.random.gamma(jax.random.fold_in(key, 3), 4.5, (6,)),
        jax.random.key_data(jax.random.split(key, 4)).astype(float),
    )


def test_draws_splits_and_folds_are_jaxs_own_bit_for_bit():
    """The same draws in a process without flowsim, where JAX lowers Threefry with its loop: the same bits."""
    import inspect
    import json
    import subprocess
    import sys

    program = "\n".join(
        [
            "import json, jax, numpy as np",
            'jax.config.update("jax_enable_x64", True)',
            inspect.getsource(_draws),
            "print(json.dumps([np.asarray(x).tolist() for x in jax.jit(_draws)(jax.random.key(20250122))]))",
        ]
    )
    without_flowsim = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    with_flowsim = [np.asarray(x).tolist() for x in jax.jit(_draws)(jax.random.key(20250122))]
    assert json.loads(without_flowsim.stdout) == with_flowsim
