"""optax's Adafactor in blu.optim against a float64 numpy loop of optax's equations
(``optax/_src/factorized.py`` and the chain ``optax.adafactor`` builds): factored row/column
statistics for leaves whose two largest axes reach ``min_dim_size_to_factor`` (128 by
default), the full second moment otherwise, block-RMS clipping, the parameter-scale factor,
momentum and weight decay; shapes from hypothesis (size-0 and size-1 dims too), jit, schedules."""

from __future__ import annotations

import warnings

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


def _dims(shape, factored, min_dim):
    if not factored or len(shape) < 2:
        return None
    order = sorted(range(len(shape)), key=lambda i: (shape[i], i))  # np.argsort's ties
    if shape[order[-2]] < min_dim:
        return None
    return order[-2], order[-1]


def _rms(x):
    return np.sqrt(np.mean(x * x))


def _adafactor64(params, grads, learning_rate=None, min_dim_size_to_factor=128, decay_rate=0.8,
                 decay_offset=0, multiply_by_parameter_scale=True, clipping_threshold=1.0,
                 momentum=None, weight_decay_rate=None, eps=1e-30, factored=True,
                 weight_decay_mask=None):  # fmt: skip
    """optax.adafactor in float64 numpy; returns the params and the factored statistics."""
    p = leaves64(params)
    dims = [_dims(x.shape, factored, min_dim_size_to_factor) for x in p]
    vr = [np.zeros(np.delete(x.shape, d[1])) if d else np.zeros(1) for x, d in zip(p, dims)]
    vc = [np.zeros(np.delete(x.shape, d[0])) if d else np.zeros(1) for x, d in zip(p, dims)]
    v = [np.zeros(1) if d else np.zeros_like(x) for x, d in zip(p, dims)]
    ema = [np.zeros_like(x) for x in p]
    flags = [True] * len(p) if weight_decay_mask is None else pytree.tree_leaves(weight_decay_mask)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of a size-0 leaf
        for step, gs in enumerate(grads):
            beta = 1 - (step - decay_offset + 1.0) ** -decay_rate
            for i, g in enumerate(leaves64(gs)):
                s = g * g + eps
                if dims[i]:
                    d1, d0 = dims[i]
                    vr[i] = beta * vr[i] + (1 - beta) * s.mean(axis=d0)
                    vc[i] = beta * vc[i] + (1 - beta) * s.mean(axis=d1)
                    r = d1 - 1 if d1 > d0 else d1
                    row = (vr[i] / vr[i].mean(axis=r, keepdims=True)) ** -0.5
                    u = g * np.expand_dims(row, d0) * np.expand_dims(vc[i] ** -0.5, d1)
                else:
                    v[i] = beta * v[i] + (1 - beta) * s
                    u = g * v[i] ** -0.5
                if clipping_threshold is not None:
                    u = u / np.maximum(1.0, _rms(u) / clipping_threshold)
                if learning_rate is not None:
                    lr = learning_rate
                    u = u * (lr(step) if callable(lr) else lr)
                if multiply_by_parameter_scale:
                    u = u * np.maximum(_rms(p[i]), 1e-3)
                if momentum is not None:
                    ema[i] = (1 - momentum) * u + momentum * ema[i]
                    u = ema[i]
                if weight_decay_rate is not None and flags[i]:
                    u = u + weight_decay_rate * p[i]
                p[i] = p[i] - u
    return p, (vr, vc, v)


def _params(rng):
    def n(*shape):
        return rng.normal(size=shape).astype(np.float32)

    return {"w": n(129, 130), "k": n(2, 128, 3, 131), "e": n(5, 200), "b": n(130), "s": n()}


CONFIGS = [
    {},
    {"learning_rate": 0.01},
    {"learning_rate": 0.01, "momentum": 0.9, "weight_decay_rate": 0.1, "decay_rate": 0.6},
    {"multiply_by_parameter_scale": False, "clipping_threshold": None, "eps": 1e-3},
    {"clipping_threshold": 0.5, "decay_offset": -3, "factored": False},
    {"min_dim_size_to_factor": 4, "weight_decay_rate": 0.01,
     "weight_decay_mask": {"b": False, "e": True, "k": True, "s": False, "w": True}},
]  # fmt: skip


@pytest.mark.parametrize("config", CONFIGS)
def test_adafactor_matches_optax_equations(config):
    rng = np.random.default_rng(30)
    params = _params(rng)
    grads = normal_grads(rng, params, 4)
    got, state = run_steps(optim.adafactor(**config), params, grads)
    want, (vr, vc, v) = _adafactor64(params, grads, **config)
    assert_close(got, want)
    fs = state[0]
    assert isinstance(fs, optim.FactoredState) and int(fs.count) == 4
    assert_close(fs.v_row, vr, rtol=1e-5, atol=0)
    assert_close(fs.v_col, vc, rtol=1e-5, atol=0)
    assert_close(fs.v, v, rtol=1e-5, atol=0)


def test_adafactor_factors_by_optax_rule():
    rng = np.random.default_rng(31)
    params = _params(rng)
    state = optim.adafactor().init(params)[0]
    # (129, 130): rows over the largest axis (130) dropped, columns over the other
    assert np.shape(state.v_row["w"]) == (129,) and np.shape(state.v_col["w"]) == (130,)
    assert np.shape(state.v_row["k"]) == (2, 128, 3) and np.shape(state.v_col["k"]) == (2, 3, 131)
    # (5, 200): second-largest axis below 128; vectors and scalars: full second moments
    for name in ("e", "b", "s"):
        assert np.shape(state.v[name]) == np.shape(params[name])
        assert np.shape(state.v_row[name]) == (1,) and np.shape(state.v_col[name]) == (1,)
    assert np.shape(state.v["w"]) == (1,)


@given(
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4),
    min_dim=st.sampled_from([0, 1, 2, 3, 128]),
    momentum=st.sampled_from([None, 0.5]),
)
def test_adafactor_shapes(shape, min_dim, momentum):
    rng = np.random.default_rng(32)
    params = {"a": rng.normal(size=shape).astype(np.float32), "c": np.ones((3, 3), np.float32)}
    grads = normal_grads(rng, params, 3)
    kw = dict(learning_rate=0.1, min_dim_size_to_factor=min_dim, momentum=momentum, eps=1e-6)
    got, state = run_steps(optim.adafactor(**kw), params, grads)
    want, (vr, vc, v) = _adafactor64(params, grads, **kw)
    assert_close(got, want)
    assert_close(state[0].v_row, vr, rtol=1e-5, atol=1e-7)  # NaN where a factored axis has size 0
    assert_close(state[0].v_col, vc, rtol=1e-5, atol=1e-7)


def test_adafactor_under_jit_with_a_schedule_and_a_traced_learning_rate():
    rng = np.random.default_rng(33)
    params = _params(rng)
    grads = normal_grads(rng, params, 3)
    sched = optim.linear_schedule(0.02, 0.005, 2)
    kw = dict(momentum=0.9, weight_decay_rate=0.05)
    got, _ = run_steps(optim.adafactor(sched, **kw), params, grads, jit=True)
    lr = lambda s: 0.02 + (0.005 - 0.02) * min(s, 2) / 2  # noqa: E731
    assert_close(got, _adafactor64(params, grads, lr, **kw)[0])
    run = lambda rate: run_steps(optim.adafactor(rate, **kw), params, grads)[0]  # noqa: E731
    traced = blu.jit(run)(np.float64(0.02))
    assert all(np.asarray(x).dtype == np.float32 for x in pytree.tree_leaves(traced))
    assert_close(traced, _adafactor64(params, grads, 0.02, **kw)[0])


def test_adafactor_building_blocks():
    rng = np.random.default_rng(34)
    u = {"a": (3 * rng.normal(size=(4, 5))).astype(np.float32), "b": np.float32(0.1)}
    clipped, _ = optim.clip_by_block_rms(0.5).update(u, optim.EmptyState())
    for got, x in zip(leaves64(clipped), leaves64(u)):
        np.testing.assert_allclose(got, x / max(1.0, _rms(x) / 0.5), rtol=1e-6)
    p = {"a": np.full((4, 5), 1e-5, np.float32), "b": np.float32(2.0)}
    scaled, _ = optim.scale_by_param_block_rms().update(u, optim.EmptyState(), p)
    want = [leaves64(u)[0] * 1e-3, leaves64(u)[1] * 2.0]  # min_scale floors the tiny block
    assert_close(scaled, want, rtol=1e-6, atol=0)
    tx = optim.ema(0.9, debias=True)
    s = tx.init(u)
    out, s = tx.update(u, s)
    out, s = tx.update(u, s)
    assert_close(out, leaves64(u), rtol=1e-6, atol=0)  # debiased average of a constant: itself
    assert_close(s.ema, [x * (1 - 0.9**2) for x in leaves64(u)], rtol=1e-6, atol=0)


def test_adafactor_bad_arguments():
    with pytest.raises(BluValueError, match="threshold"):
        optim.adafactor(clipping_threshold=0.0)
    with pytest.raises(BluTypeError, match="adafactor.*int"):
        optim.adafactor().init({"n": np.arange(3)})
    opt = optim.adafactor(0.1)
    params = {"a": np.zeros((2, 2), np.float32)}
    with pytest.raises(BluValueError, match="params"):
        opt.update(params, opt.init(params))
    with pytest.raises(BluValueError, match="params"):
        optim.scale_by_param_block_rms().update(params, optim.EmptyState())
    with pytest.raises(BluValueError, match="structure"):
        opt.update({"a": params["a"], "b": params["a"]}, opt.init(params), params)
