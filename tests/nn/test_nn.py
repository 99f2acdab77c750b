"""blu.nn against float64 numpy references written here, finite-difference gradients
(check_grads), vmap against loops (check_vmap), numerical stability (huge logits, -inf entries,
bfloat16), dropout statistics, causality of the attention mask, and the initializers."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.random as random
from blu import nn
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.helpers import arrays, check_grads, check_jit, check_vmap, rng_for, shapes

bf16 = ml_dtypes.bfloat16

# ---- float64 references -------------------------------------------------------------------------


def ref_gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))


def ref_logsumexp(x, axis=None, keepdims=False):
    x = np.asarray(x, np.float64)
    m = np.max(x, axis=axis, keepdims=True) if x.size else np.zeros([1] * x.ndim)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def ref_softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ref_layer_norm(x, g, b, eps=1e-5, axis=-1):
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of an empty axis is NaN
        mu = x.mean(axis=axis, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=axis, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * g + b if g is not None else y


def ref_cross_entropy(logits, labels):
    lse = ref_logsumexp(logits, axis=-1)
    picked = np.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return lse - picked


def ref_attention(q, k, v, causal=False, mask=None, scale=None):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("...qhd,...khd->...hqk", q, k) * scale
    tq, tk = q.shape[-3], k.shape[-3]
    allowed = np.ones(s.shape, bool)
    if causal:
        allowed &= np.arange(tk)[None, :] <= np.arange(tq)[:, None]  # top-left, as JAX
    if mask is not None:
        allowed &= mask
    s = np.where(allowed, s, -1e300)
    p = ref_softmax(s) * allowed.any(-1, keepdims=True)  # nothing to attend: zeros
    return np.einsum("...hqk,...khd->...qhd", p, v)


def _close(got, want, rtol=1e-10, atol=1e-12):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


# ---- activations ------------------------------------------------------------------------------


@given(shapes(), st.data())
def test_activations_match_numpy(shape, data):
    x = data.draw(arrays(shape, -6, 6))
    _close(nn.relu(x), np.maximum(x, 0))
    _close(nn.sigmoid(x), 1 / (1 + np.exp(-x)))
    _close(nn.silu(x), x / (1 + np.exp(-x)))
    _close(nn.gelu(x), ref_gelu(x, True))
    _close(nn.gelu(x, approximate=False), ref_gelu(x, False), rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("approximate", [True, False])
def test_gelu_grads(approximate):
    x = np.linspace(-4, 4, 13)
    check_grads(lambda x: nn.gelu(x, approximate), [x], order=2)


def test_activation_grads_and_relu_at_zero():
    x = np.array([-2.0, -0.3, 0.4, 3.0])
    check_grads(nn.silu, [x], order=2)
    check_grads(nn.sigmoid, [x])
    check_grads(nn.relu, [x])
    np.testing.assert_array_equal(np.asarray(blu.grad(lambda x: nn.relu(x).sum())(np.zeros(3))), 0)


def test_activations_keep_low_precision_dtypes():
    x = np.linspace(-3, 3, 7).astype(bf16)
    for f in (nn.relu, nn.gelu, nn.silu, nn.sigmoid):
        y = f(x)
        assert y.dtype == bf16
    _close(nn.gelu(x), ref_gelu(x.astype(np.float64), True), rtol=2e-2, atol=2e-2)
    assert nn.silu(np.arange(3)).dtype == np.float32  # integers compute in float32


# ---- softmax family --------------------------------------------------------------------------


@given(shapes(min_dims=1), st.data())
def test_softmax_log_softmax_logsumexp_match_numpy(shape, data):
    x = data.draw(arrays(shape, -30, 30))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    if x.size:
        _close(nn.softmax(x, axis), ref_softmax(x, axis))
        _close(nn.log_softmax(x, axis), np.log(ref_softmax(x, axis)), rtol=1e-9, atol=1e-9)
    assert nn.softmax(x, axis).shape == shape
    for keepdims in (False, True):
        got = nn.logsumexp(x, axis, keepdims=keepdims)
        _close(got, ref_logsumexp(x, axis, keepdims))
    _close(nn.logsumexp(x), ref_logsumexp(x))


def test_softmax_family_grads():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5)) * 3
    check_grads(lambda x: nn.softmax(x, -1), [x], order=2)
    check_grads(lambda x: nn.softmax(x, 0), [x])
    check_grads(lambda x: nn.log_softmax(x, -1), [x], order=2)
    check_grads(lambda x: nn.logsumexp(x, 1), [x], order=2)
    check_grads(lambda x: nn.logsumexp(x, (0, 1), keepdims=True), [x])
    check_grads(nn.logsumexp, [x])


def test_logsumexp_with_minus_inf_entries():
    x = np.array([[0.5, -np.inf, 2.0], [-np.inf, -np.inf, -np.inf], [1e4, -np.inf, 1e4]])
    got = np.asarray(nn.logsumexp(x, axis=1))
    _close(got[0], np.log(np.exp(0.5) + np.exp(2.0)))
    assert got[1] == -np.inf
    _close(got[2], 1e4 + np.log(2))
    g = np.asarray(blu.grad(lambda x: nn.logsumexp(x[np.array([0, 2])], axis=1).sum())(x))
    assert np.all(np.isfinite(g))
    _close(
        g[0], [np.exp(0.5) / (np.exp(0.5) + np.exp(2)), 0, np.exp(2) / (np.exp(0.5) + np.exp(2))]
    )
    _close(g[2], [0.5, 0, 0.5])
    s = np.asarray(nn.softmax(x[0]))
    _close(s, [np.exp(0.5) / (np.exp(0.5) + np.exp(2)), 0, np.exp(2) / (np.exp(0.5) + np.exp(2))])
    assert np.asarray(nn.log_softmax(x[0]))[1] == -np.inf
    assert nn.logsumexp(np.zeros((2, 0)), axis=1).tolist() == [-np.inf, -np.inf]


def test_softmax_family_in_bfloat16_uses_float32_statistics():
    x = (np.linspace(-1, 1, 64).reshape(4, 16) * 300 + 1000).astype(bf16)  # sum overflows bf16? no,
    x64 = x.astype(np.float64)  # but exp(x - max) summed in bf16 would lose 2-3 digits
    for f, ref in [(nn.softmax, ref_softmax), (nn.log_softmax, lambda a: np.log(ref_softmax(a)))]:
        y = f(x)
        assert y.dtype == bf16
        _close(y, ref(x64), rtol=1e-2, atol=1e-2)
    lse = nn.logsumexp(x, axis=-1)
    assert lse.dtype == bf16
    _close(lse, ref_logsumexp(x64, -1), rtol=1e-2)
    # float16 would overflow exp in a naive implementation
    h = np.array([60000.0, 60000.0], np.float16)
    _close(nn.logsumexp(h), 60000 + np.log(2), rtol=1e-3)


TOL = {np.float16: 5e-3, bf16: 3e-2, np.float32: 1e-5, np.float64: 1e-12}


@pytest.mark.parametrize("dtype", list(TOL), ids=lambda d: np.dtype(d).name)
def test_dtypes_are_kept_and_results_accurate(dtype):
    rng = np.random.default_rng(20)
    x = (rng.normal(size=(3, 7)) * 3).astype(dtype)
    x64 = x.astype(np.float64)
    tol = TOL[dtype]
    g, b = rng.normal(size=7).astype(dtype), rng.normal(size=7).astype(dtype)
    cases = [
        (nn.softmax(x), ref_softmax(x64)),
        (nn.log_softmax(x), np.log(ref_softmax(x64))),
        (nn.logsumexp(x, axis=1), ref_logsumexp(x64, 1)),
        (nn.layer_norm(x, g, b), ref_layer_norm(x64, g.astype(np.float64), b.astype(np.float64))),
        (nn.gelu(x), ref_gelu(x64, True)),
        (nn.gelu(x, approximate=False), ref_gelu(x64, False)),
        (nn.silu(x), x64 / (1 + np.exp(-x64))),
    ]
    for got, want in cases:
        assert got.dtype == dtype
        # one rounding of the result (plus float32 internals for the low-precision types)
        _close(got, want, rtol=4 * tol, atol=4 * tol * max(1.0, np.abs(want).max()))
    labels = np.array([0, 6, 3], np.int32)
    loss = nn.cross_entropy(x, labels, "none")
    assert loss.dtype == (np.float64 if dtype == np.float64 else np.float32)
    _close(loss, ref_cross_entropy(x64, labels), rtol=1e-5 if dtype != np.float64 else 1e-12)
    assert nn.softmax(np.arange(4)).dtype == np.float32  # integers compute in float32


# ---- layer norm --------------------------------------------------------------------------------


@given(shapes(min_dims=1), st.data())
def test_layer_norm_matches_numpy(shape, data):
    x = data.draw(arrays(shape, -5, 5))
    g = data.draw(arrays(shape[-1:], -2, 2))
    b = data.draw(arrays(shape[-1:], -2, 2))
    _close(nn.layer_norm(x, g, b), ref_layer_norm(x, g, b), rtol=1e-9, atol=1e-9)
    _close(nn.layer_norm(x), ref_layer_norm(x, None, None), rtol=1e-9, atol=1e-9)


def test_layer_norm_other_axes_and_grads():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 4))
    g, b = rng.normal(size=(3,)), rng.normal(size=(3,))
    got = nn.layer_norm(x, g, b, eps=1e-3, axis=1)
    _close(got, ref_layer_norm(x, g[:, None], b[:, None], 1e-3, axis=1), rtol=1e-9)
    g2 = rng.normal(size=(3, 4))
    want = ref_layer_norm(x, None, None, 1e-5, axis=(1, 2)) * g2
    _close(nn.layer_norm(x, g2, None, axis=(1, 2)), want, rtol=1e-9)
    gl, bl = rng.normal(size=(4,)), rng.normal(size=(4,))
    check_grads(lambda x, g, b: nn.layer_norm(x, g, b), [x, gl, bl], order=2, atol=1e-4, rtol=1e-4)
    check_grads(lambda x: nn.layer_norm(x, g, b, axis=1), [x])
    with pytest.raises(BluShapeError):
        nn.layer_norm(x, np.ones(5), None)


def test_layer_norm_vmap():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 4, 5))
    g, b = rng.normal(size=(5,)), rng.normal(size=(5,))
    check_vmap(nn.layer_norm, [x, g, b], [0, None, None])
    check_vmap(nn.layer_norm, [np.swapaxes(x, 1, 2), g, b], [2, None, None])
    check_vmap(nn.layer_norm, [x, np.tile(g, (4, 1)), b], [1, 0, None])


def test_layer_norm_bfloat16():
    rng = np.random.default_rng(3)
    # a large common offset: float32 statistics keep the small deviations
    x = (rng.normal(size=(4, 32)) + 50).astype(bf16)
    g, b = np.ones(32, bf16), np.zeros(32, bf16)
    y = nn.layer_norm(x, g, b)
    assert y.dtype == bf16
    _close(y, ref_layer_norm(x.astype(np.float64), 1.0, 0.0), rtol=3e-2, atol=3e-2)


def test_rms_norm():
    rng = np.random.default_rng(4)
    x, g = rng.normal(size=(3, 6)), rng.normal(size=(6,))
    want = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * g
    _close(nn.rms_norm(x, g), want, rtol=1e-9)
    check_grads(lambda x: nn.rms_norm(x, g), [x])


# ---- layers ------------------------------------------------------------------------------------


def test_linear_embedding_one_hot():
    rng = np.random.default_rng(5)
    x, w, b = rng.normal(size=(2, 3, 4)), rng.normal(size=(4, 5)), rng.normal(size=(5,))
    _close(nn.linear(x, w, b), x @ w + b)
    _close(nn.linear(x, w), x @ w)
    check_grads(nn.linear, [x, w, b])
    table = rng.normal(size=(7, 3))
    ids = np.array([[0, 6, 2], [2, 2, 5]], np.int32)
    _close(nn.embedding(table, ids), table[ids])
    g = np.asarray(blu.grad(lambda t: (nn.embedding(t, ids) * np.arange(3.0)).sum())(table))
    want = np.zeros_like(table)
    np.add.at(want, ids.ravel(), np.arange(3.0))
    _close(g, want)
    oh = nn.one_hot(np.array([0, 3, 1, 7, -1]), 4)
    assert oh.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(oh), np.eye(5, 4)[[0, 3, 1, 4, 4]])
    assert nn.one_hot(ids, 7, bf16).dtype == bf16 and nn.one_hot(ids, 7).shape == (2, 3, 7)
    with pytest.raises(BluShapeError):
        nn.linear(x, w.T)
    with pytest.raises(BluShapeError):
        nn.linear(x, w, np.zeros(4))
    with pytest.raises(BluTypeError):
        nn.embedding(table, ids.astype(np.float32))


def test_one_hot_num_classes_checked():
    # JAX's operator.index: 2.5 was truncated to 2 classes, None was Python's TypeError
    np.testing.assert_array_equal(np.asarray(nn.one_hot(np.array([1]), np.int64(3))), [[0, 1, 0]])
    # a 1-element array of shape (1,) is no scalar index either (it was taken as its element)
    for bad in [2.5, None, "3", np.array([3]), np.array([[3]])]:
        with pytest.raises(BluTypeError, match="num_classes"):
            nn.one_hot(np.array([0, 1]), bad)
    with pytest.raises(BluValueError, match="num_classes"):
        nn.one_hot(np.array([0, 1]), -1)


# ---- cross-entropy -----------------------------------------------------------------------------


@given(shapes(min_dims=1, min_side=1), st.data())
def test_cross_entropy_matches_numpy(shape, data):
    logits = data.draw(arrays(shape, -20, 20))
    rng = rng_for(logits)
    labels = rng.integers(0, shape[-1], size=shape[:-1]).astype(np.int32)
    per = ref_cross_entropy(logits, labels)
    _close(nn.cross_entropy(logits, labels, "none"), per, rtol=1e-9, atol=1e-9)
    _close(nn.cross_entropy(logits, labels, "sum"), per.sum(), rtol=1e-9, atol=1e-9)
    if per.size:
        _close(nn.cross_entropy(logits, labels), per.mean(), rtol=1e-9, atol=1e-9)


def test_cross_entropy_grads():
    rng = np.random.default_rng(6)
    logits = rng.normal(size=(4, 6)) * 2
    labels = np.array([0, 5, 2, 2], np.int32)
    check_grads(lambda z: nn.cross_entropy(z, labels), [logits], order=2)
    g = np.asarray(blu.grad(lambda z: nn.cross_entropy(z, labels, "sum"))(logits))
    _close(g, ref_softmax(logits) - np.eye(6)[labels], rtol=1e-9, atol=1e-12)


def test_cross_entropy_with_huge_logits_is_finite_and_correct():
    logits = np.array([[1e4, 0.0, -1e4], [1e4, 1e4 - 2.0, -1e4], [-1e4, 1e4, 0.0]], np.float32)
    labels = np.array([0, 1, 0], np.int32)
    loss = np.asarray(nn.cross_entropy(logits, labels, "none"))
    assert np.all(np.isfinite(loss))
    want = ref_cross_entropy(logits.astype(np.float64), labels)
    np.testing.assert_allclose(loss, want, rtol=1e-6, atol=1e-6)  # [~0, 2 + log(1+e^-2), 2e4]
    g = np.asarray(blu.grad(lambda z: nn.cross_entropy(z, labels, "sum"))(logits))
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, ref_softmax(logits.astype(np.float64)) - np.eye(3)[labels],
                               atol=1e-6)  # fmt: skip


def test_cross_entropy_bfloat16_logits_give_float32_loss():
    rng = np.random.default_rng(7)
    logits = (rng.normal(size=(8, 50)) * 4).astype(bf16)
    labels = rng.integers(0, 50, size=8).astype(np.int32)
    loss = nn.cross_entropy(logits, labels)
    assert loss.dtype == np.float32
    _close(loss, ref_cross_entropy(logits.astype(np.float64), labels).mean(), rtol=1e-5)
    with pytest.raises(BluShapeError):
        nn.cross_entropy(logits, labels[:4])
    with pytest.raises(BluValueError):
        nn.cross_entropy(logits, labels, "avg")


# ---- dropout -----------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.8])
def test_dropout_statistics_and_scaling(rate):
    n = 200_000
    x = np.full((n,), 2.0, np.float32)
    y = np.asarray(nn.dropout(random.key(0), x, rate))
    assert y.dtype == np.float32
    dropped = y == 0
    assert abs(dropped.mean() - rate) < 5 * math.sqrt(rate * (1 - rate) / n)
    np.testing.assert_allclose(y[~dropped], 2.0 / (1 - rate), rtol=1e-6)
    sd = 2.0 * math.sqrt(rate / (1 - rate))  # std of the kept-and-scaled value
    assert abs(y.mean() - 2.0) < 5 * sd / math.sqrt(n)


def test_dropout_modes_grads_and_jit():
    k = random.key(1)
    x = np.arange(1.0, 13.0).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(nn.dropout(k, x, 0.5, deterministic=True)), x)
    np.testing.assert_array_equal(np.asarray(nn.dropout(k, x, 0.0)), x)
    np.testing.assert_array_equal(np.asarray(nn.dropout(k, x, 1.0)), 0)
    y = np.asarray(nn.dropout(k, x, 0.25))
    np.testing.assert_array_equal(np.asarray(nn.dropout(k, x, 0.25)), y)  # deterministic in key
    g = np.asarray(blu.grad(lambda x: nn.dropout(k, x, 0.25).sum())(x))
    _close(g, (y != 0) / 0.75)
    check_jit(lambda k, x: nn.dropout(k, x, 0.25), [k, x])
    keys = random.split(k, 3)
    check_vmap(lambda k, x: nn.dropout(k, x, 0.5), [keys, x], [0, None], atol=0, rtol=0)
    with pytest.raises(BluValueError):
        nn.dropout(k, x, 1.5)


# ---- attention ---------------------------------------------------------------------------------


def _qkv(rng, b=2, tq=5, tk=5, h=3, d=4, dv=4):
    return (rng.normal(size=(b, tq, h, d)), rng.normal(size=(b, tk, h, d)),
            rng.normal(size=(b, tk, h, dv)))  # fmt: skip


@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_numpy(causal):
    rng = np.random.default_rng(8)
    q, k, v = _qkv(rng)
    _close(nn.dot_product_attention(q, k, v, is_causal=causal), ref_attention(q, k, v, causal))
    _close(
        nn.dot_product_attention(q, k, v, is_causal=causal, scale=0.3),
        ref_attention(q, k, v, causal, scale=0.3),
    )
    q2, k2, v2 = _qkv(rng, b=1, tq=2, tk=6, dv=3)  # causal: query i sees keys j <= i
    _close(
        nn.dot_product_attention(q2, k2, v2, is_causal=causal), ref_attention(q2, k2, v2, causal)
    )
    q3, k3, v3 = (a[0] for a in _qkv(rng))  # no batch dims
    _close(
        nn.dot_product_attention(q3, k3, v3, is_causal=causal), ref_attention(q3, k3, v3, causal)
    )


def test_attention_with_mask():
    rng = np.random.default_rng(9)
    q, k, v = _qkv(rng)
    mask = rng.random(size=(2, 1, 5, 5)) < 0.6
    mask[..., 0] = True
    _close(nn.dot_product_attention(q, k, v, mask=mask), ref_attention(q, k, v, mask=mask))
    _close(
        nn.dot_product_attention(q, k, v, mask=mask, is_causal=True),
        ref_attention(q, k, v, True, mask),
    )
    none = np.zeros((5, 5), bool)  # every key masked: zeros
    _close(nn.dot_product_attention(q, k, v, mask=none), np.zeros(q.shape[:-1] + v.shape[-1:]))
    with pytest.raises(BluShapeError):
        nn.dot_product_attention(q, k, v, mask=np.ones((4, 5), bool))
    with pytest.raises(BluShapeError):
        nn.dot_product_attention(q, k[..., :3], v)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_grads(causal):
    rng = np.random.default_rng(10)
    q, k, v = _qkv(rng, b=1, tq=3, tk=3, h=2, d=2, dv=3)
    check_grads(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=causal), [q, k, v],
                atol=1e-5, rtol=1e-5)  # fmt: skip


def test_causal_mask_output_at_t_depends_only_on_earlier_positions():
    rng = np.random.default_rng(11)
    q, k, v = _qkv(rng, b=2, tq=6, tk=6)
    for t in range(6):
        ct = rng.normal(size=(2, 3, 4))

        def out_t(q, k, v, t=t, ct=ct):
            return (nn.dot_product_attention(q, k, v, is_causal=True)[:, t] * ct).sum()

        gq, gk, gv = (np.asarray(a) for a in blu.grad(out_t, argnums=(0, 1, 2))(q, k, v))
        assert np.all(gk[:, t + 1 :] == 0) and np.all(gv[:, t + 1 :] == 0)
        assert np.all(np.abs(gv[:, : t + 1]).sum(axis=(2, 3)) > 0)
        if t > 0:
            assert np.all(np.abs(gk[:, : t + 1]).sum(axis=(2, 3)) > 0)
        assert np.all(gq[:, np.arange(6) != t] == 0)


def test_attention_vmap():
    rng = np.random.default_rng(12)
    q, k, v = _qkv(rng, b=3)
    check_vmap(
        lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True), [q, k, v], [0, 0, 0]
    )
    check_vmap(lambda q, k, v: nn.dot_product_attention(q, k, v), [q, k[0], v], [0, None, 0])
    qt = np.moveaxis(q, 0, 2)  # batch on axis 2
    check_vmap(
        lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True), [qt, k, v], [2, 0, 0]
    )


def test_attention_bfloat16():
    rng = np.random.default_rng(13)
    q, k, v = (a.astype(bf16) for a in _qkv(rng))
    out = nn.dot_product_attention(q, k, v, is_causal=True)
    assert out.dtype == bf16
    want = ref_attention(*(a.astype(np.float64) for a in (q, k, v)), causal=True)
    _close(out, want, rtol=5e-2, atol=5e-2)


def test_causal_self_attention_is_gpt2_block():
    rng = np.random.default_rng(14)
    b, t, c, h = 2, 5, 8, 2
    x = rng.normal(size=(b, t, c))
    w_qkv, b_qkv = rng.normal(size=(c, 3 * c)) * 0.3, rng.normal(size=(3 * c,))
    w_proj, b_proj = rng.normal(size=(c, c)) * 0.3, rng.normal(size=(c,))
    qkv = x @ w_qkv + b_qkv
    q, k, v = (a.reshape(b, t, h, c // h) for a in np.split(qkv, 3, axis=-1))
    want = ref_attention(q, k, v, causal=True).reshape(b, t, c) @ w_proj + b_proj
    got = nn.causal_self_attention(x, w_qkv, b_qkv, w_proj, b_proj, h)
    _close(got, want, rtol=1e-9, atol=1e-9)
    check_grads(lambda x, w: nn.causal_self_attention(x, w, b_qkv, w_proj, b_proj, h),
                [x[:1, :3], w_qkv], atol=1e-4, rtol=1e-4)  # fmt: skip
    check_jit(lambda x: nn.causal_self_attention(x, w_qkv, b_qkv, w_proj, b_proj, h), [x])
    with pytest.raises(BluShapeError):
        nn.causal_self_attention(x, w_qkv, b_qkv, w_proj, b_proj, 3)


# ---- initializers ------------------------------------------------------------------------------


def test_initializers_shapes_dtypes_and_statistics():
    init = nn.initializers
    k = random.key(0)
    np.testing.assert_array_equal(np.asarray(init.zeros(k, (2, 3))), np.zeros((2, 3)))
    np.testing.assert_array_equal(np.asarray(init.ones(k, (4,), bf16)), np.ones(4))
    assert init.ones(k, (4,), bf16).dtype == bf16
    assert np.all(np.asarray(init.constant(0.5)(k, (3,))) == 0.5)
    x = np.asarray(init.normal(0.02)(k, (400, 250)), np.float64)
    assert x.dtype == np.float64 and abs(x.std() - 0.02) < 5 * 0.02 / math.sqrt(2 * x.size)
    assert abs(x.mean()) < 5 * 0.02 / math.sqrt(x.size)
    u = np.asarray(init.uniform(0.1)(k, (100_000,)))
    assert u.min() >= 0 and u.max() < 0.1 and abs(u.mean() - 0.05) < 5 * 0.1 / math.sqrt(12e5)
    fan_in, fan_out = 300, 200
    xu = np.asarray(init.xavier_uniform()(k, (fan_in, fan_out)), np.float64)
    lim = math.sqrt(6 / (fan_in + fan_out))
    assert xu.min() >= -lim and xu.max() < lim
    var = 2 / (fan_in + fan_out)
    assert abs(xu.var() - var) < 5 * var * math.sqrt(0.8 / xu.size)
    ln = np.asarray(init.lecun_normal()(k, (3, fan_in, 100)), np.float64)  # fan_in = 3 * 300
    std = math.sqrt(1 / (3 * fan_in))
    assert abs(ln.std() - std) < 0.02 * std
    assert np.abs(ln).max() <= 2 * std / 0.87962566103423978 + 1e-6
    tn = np.asarray(init.truncated_normal(1.0, lower=-1.0, upper=1.0)(k, (1000,)))
    assert np.abs(tn).max() <= 1.0
    assert init.normal(1.0)(k, (3,), np.float16).dtype == np.float16
    with pytest.raises(BluShapeError):
        init.xavier_uniform()(k, (5,))
