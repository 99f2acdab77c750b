"""blu.nn.batch_norm and group_norm against float64 numpy references written here: train and
eval modes, the running-statistics update (PyTorch's unbiased variance, flax's momentum),
finite-difference gradients, bfloat16 statistics in float32, and bad input."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu import nn
from blu.core.errors import BluShapeError, BluValueError
from tests.helpers import arrays, check_grads, rng_for


def ref_batch_norm(x, scale, bias, rm, rv, train, momentum=0.9, eps=1e-5, axis=-1):
    x = np.asarray(x, np.float64)
    ax = axis % x.ndim
    red = tuple(i for i in range(x.ndim) if i != ax)
    shp = [1] * x.ndim
    shp[ax] = x.shape[ax]
    if train:
        n = x.size // x.shape[ax]
        mu = x.mean(axis=red)
        var = ((x - mu.reshape(shp)) ** 2).mean(axis=red)
        new = (
            momentum * rm + (1 - momentum) * mu,
            momentum * rv + (1 - momentum) * var * n / (n - 1),
        )
    else:
        mu, var, new = rm, rv, (rm, rv)
    y = (x - mu.reshape(shp)) / np.sqrt(var.reshape(shp) + eps)
    return y * scale.reshape(shp) + bias.reshape(shp), new


def ref_group_norm(x, g, scale, bias, eps=1e-5):
    x = np.asarray(x, np.float64)
    n, c = x.shape[0], x.shape[-1]
    xg = x.reshape(n, -1, g, c // g)
    mu = xg.mean(axis=(1, 3), keepdims=True)
    var = xg.var(axis=(1, 3), keepdims=True)
    y = ((xg - mu) / np.sqrt(var + eps)).reshape(x.shape)
    return y * scale + bias


def _params(rng, c):
    return (
        rng.normal(size=c) + 1.0,
        rng.normal(size=c),
        rng.normal(size=c),
        rng.uniform(0.5, 2.0, size=c),
    )


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=2, max_size=4), st.data())
def test_batch_norm_train_and_eval_match_numpy(shape, data):
    ax = data.draw(st.integers(-len(shape), len(shape) - 1))
    c = shape[ax]
    if np.prod(shape) // c < 2:
        shape = [2, *shape]  # train mode needs two values per feature
        ax = ax if ax < 0 else ax + 1
    x = data.draw(arrays(tuple(shape), -3, 3))
    rng = rng_for(x)
    scale, bias, rm, rv = _params(rng, c)
    for train in (True, False):
        y, (m, v) = nn.batch_norm(x, scale, bias, rm, rv, train=train, momentum=0.8, axis=ax)
        ry, (rm2, rv2) = ref_batch_norm(x, scale, bias, rm, rv, train, momentum=0.8, axis=ax)
        np.testing.assert_allclose(np.asarray(y), ry, rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(np.asarray(m), rm2, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(v), rv2, rtol=1e-12, atol=1e-12)


def test_batch_norm_running_update_is_torchs_unbiased_variance():
    # two values per feature: biased variance 1, unbiased 2 (PyTorch's running update)
    x = np.array([[0.0, 10.0], [2.0, 10.0]])
    ones, zeros = np.ones(2), np.zeros(2)
    _, (m, v) = nn.batch_norm(x, ones, zeros, zeros, ones, train=True, momentum=0.9)
    np.testing.assert_allclose(np.asarray(m), [0.1 * 1.0, 0.1 * 10.0])
    np.testing.assert_allclose(np.asarray(v), [0.9 + 0.1 * 2.0, 0.9 + 0.0])


def test_batch_norm_eval_returns_the_statistics_unchanged():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 2, 2, 5)).astype(np.float32)
    scale, bias, rm, rv = (p.astype(np.float32) for p in _params(rng, 5))
    _, (m, v) = nn.batch_norm(x, scale, bias, rm, rv, train=False)
    np.testing.assert_array_equal(np.asarray(m), rm)
    np.testing.assert_array_equal(np.asarray(v), rv)


def test_batch_norm_grads():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 3, 3))
    scale, bias, rm, rv = _params(rng, 3)
    for train in (True, False):

        def f(x, s, b, train=train):
            return nn.batch_norm(x, s, b, rm, rv, train=train)[0]

        check_grads(f, [x, scale, bias], order=1, atol=1e-6, rtol=1e-6)

    # the new running statistics carry no gradient (stop_gradient on the batch statistics)
    g = blu.grad(lambda x: nn.batch_norm(x, scale, bias, rm, rv, train=True)[1][0].sum())(x)
    np.testing.assert_array_equal(np.asarray(g), np.zeros_like(x))


def test_batch_norm_second_order_grads():
    # the custom JVP rule is itself differentiated: the derivatives of its tangent (a
    # Hessian-vector product) against finite differences of the JVP
    rng = np.random.default_rng(4)
    x = rng.normal(size=(5, 2, 3))
    scale, bias, rm, rv = _params(rng, 3)

    def f(x, s, b):
        return nn.batch_norm(x, s, b, rm, rv, train=True)[0]

    check_grads(f, [x, scale, bias], order=2, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("offset, outlier", [(0.0, None), (3e3, None), (-3e3, None),
                                             (0.0, 1e3), (0.0, -1e4)])  # fmt: skip
def test_batch_norm_statistics_of_a_large_mean_in_float32(offset, outlier):
    # E[x^2] - E[x]^2 in float32 would lose the variance of 1 under a mean of 3e3 (x^2 ~ 1e7,
    # float32's spacing there ~ 1); so would sums shifted by a feature's first value when that
    # value is an outlier (1e3 among N(0, 1)); the mean of squared deviations keeps it
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(64, 7, 3)) * rng.uniform(0.5, 2.0, size=3) + offset).astype(np.float32)
    if outlier is not None:
        x[0, 0, 0] = outlier
    scale, bias, rm, rv = (p.astype(np.float32) for p in _params(rng, 3))
    y, (m, v) = nn.batch_norm(x, scale, bias, rm, rv, train=True, momentum=0.0)
    ry, (rm2, rv2) = ref_batch_norm(x, scale, bias, rm, rv, True, momentum=0.0)
    np.testing.assert_allclose(np.asarray(m), rm2, rtol=1e-5, atol=1e-6 * np.abs(x).max())
    np.testing.assert_allclose(np.asarray(v), rv2, rtol=1e-4)
    # y's error is the float32 mean's rounding (its spacing at the offset) over the std (>= 0.5)
    tol = 1e-3 + 4 * float(np.spacing(np.float32(abs(offset))))
    np.testing.assert_allclose(np.asarray(y), ry, rtol=1e-3, atol=tol)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=4), st.data())
def test_batch_norm_shift_sample_holds_a_64th_of_each_feature(shape, data):
    # the variance's error bound rests on the shift's sample holding >= 1/64 of the values
    from blu.nn.normalization import _shift_sample

    ax = data.draw(st.integers(0, len(shape) - 1))
    red = tuple(i for i in range(len(shape)) if i != ax)
    x = np.broadcast_to(np.float32(0), shape)  # (the sample's shape is all that is read)
    sample = np.asarray(_shift_sample(x, red))
    n = np.prod([shape[i] for i in red], dtype=np.int64)
    m = np.prod([sample.shape[i] for i in red], dtype=np.int64)
    assert sample.shape[ax] == shape[ax]
    assert 64 * m >= n or m == n
    # the block is the leading entries: (2, 3) values a feature, the first of 6 kept
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(np.asarray(_shift_sample(x, (0, 1))), x[:1, :1])


@pytest.mark.parametrize("block", [1e4, -3e4, 1e6])
def test_batch_norm_variance_when_the_shift_sample_is_far_from_the_mean(block):
    # the shift is the mean of the first 1/64 of each feature's values; make that block the
    # data's extreme (every value of the first example far off, the rest N(0, 1)): the sums
    # shifted by it still keep the variance (the sample's own deviation bounds the shift's)
    rng = np.random.default_rng(8)
    x = rng.normal(size=(64, 9, 2)).astype(np.float32)
    x[0] += np.float32(block)
    scale, bias, rm, rv = (p.astype(np.float32) for p in _params(rng, 2))
    _, (m, v) = nn.batch_norm(x, scale, bias, rm, rv, train=True, momentum=0.0)
    _, (rm2, rv2) = ref_batch_norm(x, scale, bias, rm, rv, True, momentum=0.0)
    # the mean within float32 sums' rounding of the deviations from the shift (<= 8 std)
    np.testing.assert_allclose(np.asarray(m), rm2, rtol=1e-5, atol=1e-5 * np.sqrt(rv2).max())
    # the sums' float32 rounding (~1e-5 here) grows by at most 1 + 64 in the subtraction: the
    # worst case, which this block makes (a data's whole spread in its first 1/64), stays 1e-3
    np.testing.assert_allclose(np.asarray(v), rv2, rtol=1e-3)
    # and the variance of the rest alone, with the far block moved to the middle of the batch
    x2 = np.roll(x, 32, axis=0)
    _, (m2, v2) = nn.batch_norm(x2, scale, bias, rm, rv, train=True, momentum=0.0)
    np.testing.assert_allclose(np.asarray(v2), rv2, rtol=1e-3)


def test_batch_norm_gradient_reads_the_activation_in_two_rounds():
    # the forward's shifted sums (both statistics in one pass; the shift from a 1/64 sample),
    # then the backward's two sums (sum(g), sum(g * xhat)) read together: no reduction over a
    # full-size value waits for another's result beyond that (the mean, then the mean of
    # squared deviations made three; differentiating the statistics' formulas chained four)
    x = np.random.default_rng(6).normal(size=(8, 5, 5, 16)).astype(np.float32)
    c = x.shape[-1]
    s, b, rm, rv = (np.ones(c, np.float32), np.zeros(c, np.float32), np.zeros(c, np.float32),
                    np.ones(c, np.float32))  # fmt: skip

    def loss(x, s, b):
        y, _ = nn.batch_norm(x, s, b, rm, rv, train=True)
        return blu.numpy.sum(nn.relu(y) * blu.numpy.cos(y))

    jaxpr = blu.jit(blu.grad(loss, argnums=(0, 1, 2))).lower(x, s, b, target="cpu")._program.jaxpr
    rounds: dict = {}
    deepest = 0
    for e in jaxpr.eqns:  # the prepared program: remat and custom rules inlined
        r = max((rounds.get(v, 0) for v in e.invars if not hasattr(v, "val")), default=0)
        if e.primitive.name.startswith("reduce") and e.invars[0].aval.size == x.size:
            r += 1
        rounds.update((v, r) for v in e.outvars)
        deepest = max(deepest, r)
    assert deepest == 2


def test_batch_norm_under_jit_threads_the_state():
    rng = np.random.default_rng(2)
    xs = rng.normal(size=(3, 8, 4)).astype(np.float32)
    scale, bias = np.ones(4, np.float32), np.zeros(4, np.float32)
    step = blu.jit(lambda x, s: nn.batch_norm(x, scale, bias, *s, train=True))
    state = (np.zeros(4, np.float32), np.ones(4, np.float32))
    ref = (np.zeros(4), np.ones(4))
    for x in xs:
        _, state = step(x, state)
        _, ref = ref_batch_norm(x, scale, bias, *ref, train=True)
    np.testing.assert_allclose(np.asarray(state[0]), ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(state[1]), ref[1], rtol=1e-5, atol=1e-6)


def test_batch_norm_bfloat16_statistics_in_float32():
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(64, 4)) * 0.01 + 300.0).astype(ml_dtypes.bfloat16)
    scale, bias, rm, rv = (p.astype(np.float32) for p in _params(rng, 4))
    y, (m, v) = nn.batch_norm(x, scale, bias, rm, rv, train=True)
    assert np.asarray(y).dtype == ml_dtypes.bfloat16 and np.asarray(m).dtype == np.float32
    ry, (rm2, _) = ref_batch_norm(np.asarray(x, np.float64), scale, bias, rm, rv, True)
    np.testing.assert_allclose(np.asarray(y, np.float64), ry, rtol=2e-2, atol=5e-2)
    np.testing.assert_allclose(np.asarray(m), rm2, rtol=1e-5)


def test_batch_norm_bad_input():
    x = np.zeros((2, 3), np.float32)
    c3, c2 = np.ones(3, np.float32), np.ones(2, np.float32)
    with pytest.raises(BluShapeError, match=r"scale .*\(3,\)"):
        nn.batch_norm(x, c2, c3, c3, c3, train=False)
    with pytest.raises(BluValueError, match="more than one value"):
        nn.batch_norm(np.zeros((1, 3)), c3, c3, c3, c3, train=True)
    with pytest.raises(BluValueError, match="out of range"):
        nn.batch_norm(x, c3, c3, c3, c3, train=False, axis=2)
    with pytest.raises(TypeError):
        nn.batch_norm(x, c3, c3, c3, c3)  # train is required


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 3),
    st.lists(st.integers(1, 3), min_size=0, max_size=2),
    st.sampled_from([(1, 1), (1, 4), (2, 2), (2, 6), (3, 3), (4, 4)]),
    st.data(),
)
def test_group_norm_matches_numpy(n, spatial, gc, data):
    g, c = gc
    x = data.draw(arrays((n, *spatial, c), -3, 3))
    rng = rng_for(x)
    scale, bias = rng.normal(size=c), rng.normal(size=c)
    y = nn.group_norm(x, g, scale, bias)
    np.testing.assert_allclose(np.asarray(y), ref_group_norm(x, g, scale, bias), atol=1e-6)


def test_group_norm_scale_is_per_channel_when_a_spatial_size_equals_the_groups():
    # x (N, 2, 2): spatial size 2 = groups 2 (the scale's (G, C/G) = the normalized axes' shape)
    rng = np.random.default_rng(5)
    x, s, b = rng.normal(size=(3, 2, 2)), np.array([1.0, 3.0]), np.array([0.5, -1.0])
    np.testing.assert_allclose(np.asarray(nn.group_norm(x, 2, s, b)), ref_group_norm(x, 2, s, b),
                               atol=1e-6)  # fmt: skip


def test_group_norm_grads_and_errors():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 3, 3, 4))
    s, b = rng.normal(size=4), rng.normal(size=4)
    check_grads(lambda x, s, b: nn.group_norm(x, 2, s, b), [x, s, b], atol=1e-6, rtol=1e-6)
    with pytest.raises(BluValueError, match="must divide"):
        nn.group_norm(x, 3, s, b)
    with pytest.raises(BluShapeError, match="rank >= 2"):
        nn.group_norm(np.zeros(4), 2)
    with pytest.raises(BluShapeError, match=r"bias .*\(4,\)"):
        nn.group_norm(x, 2, s, np.ones(3))


def test_group_norm_bfloat16_statistics_in_float32():
    rng = np.random.default_rng(6)
    x64 = rng.normal(size=(2, 4, 4, 6)) * 0.01 + 200.0  # a large mean: float32 statistics needed
    x = x64.astype(ml_dtypes.bfloat16)
    s, b = rng.normal(size=6), rng.normal(size=6)
    y = np.asarray(nn.group_norm(x, 3, s.astype(np.float32), b.astype(np.float32)))
    assert y.dtype == ml_dtypes.bfloat16
    ref = ref_group_norm(np.asarray(x, np.float64), 3, s, b)
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-2, atol=5e-2)
