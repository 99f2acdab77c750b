"""optax's RMSProp, Adagrad and Lion in blu.optim against float64 numpy loops of optax's update
equations (``optax/_src/alias.py`` and ``transform.py``: the chain's order included, e.g.
RMSProp's momentum after the learning rate), over fixed gradients, shapes from hypothesis
(size-0 and size-1 dims too), schedules, jit and traced learning rates."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import blu
from blu import optim
from blu.core import pytree
from blu.core.errors import BluTypeError, BluValueError
from tests.optim._helpers import assert_close, leaves64, normal_grads, run_steps


def _params(rng, dtype=np.float32):
    def n(*shape):
        return rng.normal(size=shape).astype(dtype)

    return {"w": n(3, 4), "b": n(4), "blocks": [{"k": n(2, 1, 3)}, {"s": n()}]}


def _rate(lr, step):
    return lr(step) if callable(lr) else lr


# ---- RMSProp -----------------------------------------------------------------------------------


def _rmsprop64(params, grads, lr, decay=0.9, eps=1e-8, initial_scale=0.0, eps_in_sqrt=True,
               centered=False, momentum=None, nesterov=False, bias_correction=False):  # fmt: skip
    """optax.rmsprop: scale_by_rms / scale_by_stddev, then -lr, then trace(momentum)."""
    p = leaves64(params)
    nu = [np.full_like(x, initial_scale) for x in p]
    mu = [np.zeros_like(x) for x in p]
    tr = [np.zeros_like(x) for x in p]
    for step, gs in enumerate(grads):
        count = step + 1
        for i, g in enumerate(leaves64(gs)):
            nu[i] = decay * nu[i] + (1 - decay) * g * g
            mu[i] = decay * mu[i] + (1 - decay) * g
            bc = 1 - decay**count if bias_correction else 1.0
            var = nu[i] / bc - (mu[i] / bc) ** 2 if centered else nu[i] / bc
            u = g / np.sqrt(var + eps) if eps_in_sqrt else g / (np.sqrt(var) + eps)
            u = -_rate(lr, step) * u
            if momentum is not None:
                tr[i] = u + momentum * tr[i]
                u = u + momentum * tr[i] if nesterov else tr[i]
            p[i] = p[i] + u
    return p


# centered with bias correction: nu_hat - mu_hat^2 is 0 at the first step (float32 cancellation
# there is ~1e-7 * g^2), so a larger eps keeps the comparison well-conditioned
RMS_CONFIGS = [
    {},
    {"eps": 1e-2, "eps_in_sqrt": False},
    {"initial_scale": 1.0, "decay": 0.8, "eps": 1e-3},
    {"centered": True, "eps": 1e-3},
    {"centered": True, "eps": 0.3, "bias_correction": True},
    {"bias_correction": True, "eps": 1e-3},
    {"momentum": 0.9, "eps": 1e-3},
    {"momentum": 0.5, "nesterov": True, "centered": True, "eps": 1e-2, "eps_in_sqrt": False},
]


@pytest.mark.parametrize("config", RMS_CONFIGS)
def test_rmsprop_matches_optax_equations(config):
    rng = np.random.default_rng(0)
    params = _params(rng)
    grads = normal_grads(rng, params, 5)
    got, state = run_steps(optim.rmsprop(0.05, **config), params, grads)
    assert_close(got, _rmsprop64(params, grads, 0.05, **config))
    want_state = optim.ScaleByRStdDevState if config.get("centered") else optim.ScaleByRmsState
    if config.get("bias_correction"):
        want_state = (
            optim.ScaleByRStdDevWithCountState
            if config.get("centered")
            else optim.ScaleByRmsWithCountState
        )
        assert int(state[0].count) == 5
    assert isinstance(state[0], want_state)
    assert isinstance(state[2], optim.TraceState if "momentum" in config else optim.EmptyState)


def test_rmsprop_schedule_is_read_before_the_count_moves_and_scales_before_momentum():
    rng = np.random.default_rng(1)
    params = _params(rng)
    grads = normal_grads(rng, params, 4)
    sched = optim.linear_schedule(0.1, 0.01, 3)
    got, _ = run_steps(optim.rmsprop(sched, momentum=0.9, eps=1e-3), params, grads)
    lr = lambda s: 0.1 + (0.01 - 0.1) * min(s, 3) / 3  # noqa: E731
    assert_close(got, _rmsprop64(params, grads, lr, momentum=0.9, eps=1e-3))


@given(
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
    centered=st.booleans(),
    momentum=st.sampled_from([None, 0.7]),
    eps_in_sqrt=st.booleans(),
)
def test_rmsprop_shapes(shape, centered, momentum, eps_in_sqrt):
    rng = np.random.default_rng(2)
    params = {"a": rng.normal(size=shape).astype(np.float32), "b": np.float32(0.5)}
    grads = normal_grads(rng, params, 3)
    kw = dict(eps=1e-3, centered=centered, momentum=momentum, eps_in_sqrt=eps_in_sqrt)
    got, _ = run_steps(optim.rmsprop(0.1, **kw), params, grads)
    assert_close(got, _rmsprop64(params, grads, 0.1, **kw))


def test_rmsprop_under_jit_and_with_a_traced_learning_rate():
    rng = np.random.default_rng(3)
    params = _params(rng)
    grads = normal_grads(rng, params, 4)
    kw = dict(centered=True, momentum=0.9, nesterov=True, eps=1e-3)
    got, _ = run_steps(optim.rmsprop(0.05, **kw), params, grads, jit=True)
    assert_close(got, _rmsprop64(params, grads, 0.05, **kw))

    def run(lr):
        return run_steps(optim.rmsprop(lr, **kw), params, grads)[0]

    traced = blu.jit(run)(np.float64(0.05))
    assert all(np.asarray(x).dtype == np.float32 for x in pytree.tree_leaves(traced))
    assert_close(traced, _rmsprop64(params, grads, 0.05, **kw))


def test_rmsprop_bfloat16_params_get_float32_statistics():
    rng = np.random.default_rng(4)
    params = {"w": rng.normal(size=(2, 3)).astype(ml_dtypes.bfloat16)}
    grads = normal_grads(rng, params, 2, ml_dtypes.bfloat16)
    opt = optim.rmsprop(0.01, eps=1e-3)
    state = opt.init(params)
    updates, state = opt.update(grads[0], state, params)
    assert np.asarray(state[0].nu["w"]).dtype == np.float32
    assert np.asarray(updates["w"]).dtype == np.float32
    new, _ = opt.step(grads[0], opt.init(params), params)
    assert np.asarray(new["w"]).dtype == ml_dtypes.bfloat16
    (want,) = _rmsprop64(params, grads[:1], 0.01, eps=1e-3)
    assert_close(updates, [want - np.asarray(params["w"], np.float64)], rtol=1e-5)


def test_rmsprop_bad_arguments():
    with pytest.raises(BluValueError, match="momentum"):
        optim.rmsprop(0.1, momentum=-0.5)
    with pytest.raises(BluTypeError, match="rmsprop.*int"):
        optim.rmsprop(0.1).init({"n": np.arange(3)})
    opt = optim.rmsprop(0.1)
    params = {"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)}
    with pytest.raises(BluValueError, match="structure"):
        opt.update({"a": np.zeros(2, np.float32)}, opt.init(params), params)


# ---- Adagrad -----------------------------------------------------------------------------------


def _adagrad64(params, grads, lr, initial_accumulator_value=0.1, eps=1e-7):
    """optax.adagrad: scale_by_rss (0 where the sum is 0), then -lr."""
    p = leaves64(params)
    s = [np.full_like(x, initial_accumulator_value) for x in p]
    for step, gs in enumerate(grads):
        for i, g in enumerate(leaves64(gs)):
            s[i] = s[i] + g * g
            with np.errstate(divide="ignore"):
                inv = np.where(s[i] > 0, 1 / np.sqrt(s[i] + eps), 0.0)
            p[i] = p[i] - _rate(lr, step) * inv * g
    return p, s


@pytest.mark.parametrize(
    "kw", [{}, {"initial_accumulator_value": 0.5, "eps": 1e-2}, {"initial_accumulator_value": 0.0}]
)
def test_adagrad_matches_optax_equations(kw):
    rng = np.random.default_rng(10)
    params = _params(rng)
    grads = normal_grads(rng, params, 5)
    got, state = run_steps(optim.adagrad(0.1, **kw), params, grads)
    want_p, want_s = _adagrad64(params, grads, 0.1, **kw)
    assert_close(got, want_p)
    assert isinstance(state[0], optim.ScaleByRssState)
    assert_close(state[0].sum_of_squares, want_s)


def test_adagrad_zero_sum_gives_a_zero_update():
    # a zero accumulator and zero gradients: optax's where(s > 0, rsqrt(s + eps), 0) keeps
    # the update 0 (eps = 0 would make it 0 * inf = NaN otherwise)
    params = {"w": np.array([1.0, -2.0, 3.0], np.float32)}
    grads = [{"w": np.array([0.0, 0.5, 0.0], np.float32)}] * 2
    got, _ = run_steps(optim.adagrad(0.1, initial_accumulator_value=0.0, eps=0.0), params, grads)
    want, _ = _adagrad64(params, grads, 0.1, initial_accumulator_value=0.0, eps=0.0)
    assert np.isfinite(np.asarray(got["w"])).all()
    assert_close(got, want)


@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
def test_adagrad_shapes_and_schedule(shape):
    rng = np.random.default_rng(11)
    params = {"a": rng.normal(size=shape).astype(np.float32), "b": np.float32(0.5)}
    grads = normal_grads(rng, params, 3)
    sched = optim.exponential_decay(0.2, 1, 0.5)
    got, _ = run_steps(optim.adagrad(sched, eps=1e-3), params, grads)
    assert_close(got, _adagrad64(params, grads, lambda s: 0.2 * 0.5**s, eps=1e-3)[0])


def test_adagrad_under_jit_and_with_a_traced_learning_rate():
    rng = np.random.default_rng(12)
    params = _params(rng)
    grads = normal_grads(rng, params, 4)
    got, _ = run_steps(optim.adagrad(0.1), params, grads, jit=True)
    assert_close(got, _adagrad64(params, grads, 0.1)[0])
    traced = blu.jit(lambda lr: run_steps(optim.adagrad(lr), params, grads)[0])(np.float64(0.1))
    assert all(np.asarray(x).dtype == np.float32 for x in pytree.tree_leaves(traced))
    assert_close(traced, _adagrad64(params, grads, 0.1)[0])


def test_adagrad_bad_arguments():
    with pytest.raises(BluValueError, match="initial_accumulator_value"):
        optim.adagrad(0.1, initial_accumulator_value=-1.0)
    with pytest.raises(BluTypeError, match="adagrad.*int"):
        optim.adagrad(0.1).init({"n": np.arange(3)})


# ---- Lion --------------------------------------------------------------------------------------


def _lion64(params, grads, lr, b1=0.9, b2=0.99, weight_decay=1e-3, mask=None):
    """optax.lion: scale_by_lion, add_decayed_weights(weight_decay, mask), then -lr."""
    p = leaves64(params)
    mu = [np.zeros_like(x) for x in p]
    flags = [True] * len(p) if mask is None else pytree.tree_leaves(mask)
    for step, gs in enumerate(grads):
        for i, g in enumerate(leaves64(gs)):
            u = np.sign((1 - b1) * g + b1 * mu[i])
            mu[i] = b2 * mu[i] + (1 - b2) * g
            if flags[i]:
                u = u + weight_decay * p[i]
            p[i] = p[i] - _rate(lr, step) * u
    return p, mu


LION_MASK = {"w": True, "b": False, "blocks": [{"k": True}, {"s": False}]}


@pytest.mark.parametrize(
    "kw",
    [{}, {"b1": 0.5, "b2": 0.9, "weight_decay": 0.1, "mask": LION_MASK}, {"weight_decay": 0.0}],
)
def test_lion_matches_optax_equations(kw):
    rng = np.random.default_rng(20)
    params = _params(rng)
    grads = normal_grads(rng, params, 6)
    got, state = run_steps(optim.lion(0.01, **kw), params, grads)
    want_p, want_mu = _lion64(params, grads, 0.01, **kw)
    assert_close(got, want_p)
    assert isinstance(state[0], optim.ScaleByLionState) and int(state[0].count) == 6
    assert_close(state[0].mu, want_mu)


def test_lion_mask_callable_schedule_and_bfloat16_momentum():
    rng = np.random.default_rng(21)
    params = _params(rng)
    grads = normal_grads(rng, params, 4)
    sched = optim.piecewise_constant_schedule(0.02, {2: 0.5})
    opt = optim.lion(sched, mu_dtype="bfloat16", weight_decay=0.2, mask=optim.decay_mask_matrices)
    got, state = run_steps(opt, params, grads)
    assert np.asarray(state[0].mu["w"]).dtype == ml_dtypes.bfloat16
    mask = {"w": True, "b": False, "blocks": [{"k": True}, {"s": False}]}
    want_p, want_mu = _lion64(
        params, grads, lambda s: 0.02 if s < 2 else 0.01, 0.9, 0.99, 0.2, mask
    )
    assert_close(got, want_p)
    assert_close(state[0].mu, want_mu, rtol=1e-2, atol=1e-3)  # rounded to bfloat16 at each step


@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
def test_lion_shapes(shape):
    rng = np.random.default_rng(22)
    params = {"a": rng.normal(size=shape).astype(np.float32), "b": np.float32(0.5)}
    grads = normal_grads(rng, params, 3)
    got, _ = run_steps(optim.lion(0.03, weight_decay=0.1), params, grads)
    assert_close(got, _lion64(params, grads, 0.03, weight_decay=0.1)[0])


def test_lion_under_jit_and_with_a_traced_learning_rate():
    rng = np.random.default_rng(23)
    params = _params(rng)
    grads = normal_grads(rng, params, 4)
    got, _ = run_steps(optim.lion(0.01, weight_decay=0.1), params, grads, jit=True)
    assert_close(got, _lion64(params, grads, 0.01, weight_decay=0.1)[0])
    run = lambda lr: run_steps(optim.lion(lr, weight_decay=0.1), params, grads)[0]  # noqa: E731
    traced = blu.jit(run)(np.float64(0.01))
    assert all(np.asarray(x).dtype == np.float32 for x in pytree.tree_leaves(traced))
    assert_close(traced, _lion64(params, grads, 0.01, weight_decay=0.1)[0])


def test_lion_bad_arguments():
    with pytest.raises(BluValueError, match="b1, b2"):
        optim.lion(0.1, b1=1.5)
    with pytest.raises(BluValueError, match="b1, b2"):
        optim.scale_by_lion(b2=-0.1)
    with pytest.raises(BluTypeError, match="lion.*int"):
        optim.lion(0.1).init({"n": np.arange(3)})
    opt = optim.lion(0.1)
    params = {"a": np.zeros(2, np.float32)}
    with pytest.raises(BluValueError, match="params"):
        opt.update(params, opt.init(params))
