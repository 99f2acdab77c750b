"""blu.nn.linear_cross_entropy (the fused classifier) against a float64 numpy reference of
PyTorch's cross-entropy (ignore_index, label_smoothing, reductions), its gradients against the
unfused form (``x @ w.T`` then log-softmax, differentiated by blu) and finite differences, each
keyword changing what it should, bfloat16 inputs, labels out of range, and the memory plan of a
jitted gradient step holding one chunk of logits instead of all of them."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.numpy as bnp
from blu import nn
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.helpers import check_vjp

bf16 = ml_dtypes.bfloat16


def ref_loss(x, w, labels, ignore_index=None, eps=0.0, reduction="mean", logits_dtype=None):
    """PyTorch's F.cross_entropy(x @ w.T, labels, ...) in float64 numpy (the logits rounded to
    ``logits_dtype`` first if given, as torch.autocast's linear layer rounds them)."""
    z = np.asarray(x, np.float64) @ np.asarray(w, np.float64).T
    if logits_dtype is not None:
        z = z.astype(logits_dtype).astype(np.float64)
    m = z.max(-1, keepdims=True)
    logp = z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))
    V = w.shape[0]
    valid = np.ones(labels.shape, bool) if ignore_index is None else labels != ignore_index
    inside = (labels >= 0) & (labels < V)
    lse = (z - logp)[..., 0]
    at = np.clip(labels, 0, V - 1)[..., None]
    picked = np.where(inside, np.take_along_axis(logp, at, -1)[..., 0], -lse)  # outside: z_y = 0
    rows = (1 - eps) * -picked + eps * -logp.mean(-1)
    rows = np.where(valid, rows, 0.0)
    if reduction == "none":
        return rows
    if reduction == "sum":
        return rows.sum()
    with np.errstate(invalid="ignore"):
        return rows.sum() / valid.sum()


def unfused(x, w, labels, ignore_index=None, eps=0.0, reduction="mean"):
    """The same loss from blu's unfused operations (its gradient by blu's autodiff)."""
    logp = nn.log_softmax(x @ w.T, -1)
    hit = nn.one_hot(labels, w.shape[0], logp.dtype)
    rows = -(1 - eps) * bnp.sum(hit * logp, -1) - eps * bnp.mean(logp, -1)
    if ignore_index is not None:
        valid = labels != ignore_index
        rows = bnp.where(valid, rows, 0.0)
        count = bnp.sum(valid.astype(rows.dtype))
    else:
        count = rows.size
    if reduction == "none":
        return rows
    return bnp.sum(rows) if reduction == "sum" else bnp.sum(rows) / count


def _close(got, want, rtol=1e-10, atol=1e-10):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


def _case(seed, lead=(5,), C=3, V=7, ignore_some=None):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*lead, C))
    w = rng.standard_normal((V, C))
    labels = rng.integers(0, V, lead).astype(np.int32)
    if ignore_some is not None and labels.size:
        labels.reshape(-1)[::2] = ignore_some
    return x, w, labels


# ---- values and gradients ------------------------------------------------------------------------


@given(
    lead=st.lists(st.integers(1, 5), min_size=1, max_size=2).map(tuple),
    C=st.integers(1, 4),
    V=st.integers(1, 6),
    chunk=st.one_of(st.none(), st.integers(1, 12)),
    reduction=st.sampled_from(["mean", "sum", "none"]),
    ignore=st.sampled_from([None, -100, 0]),
    eps=st.sampled_from([0.0, 0.1, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_matches_reference_and_unfused_gradients(lead, C, V, chunk, reduction, ignore, eps, seed):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((*lead, C)), rng.standard_normal((V, C))
    labels = rng.integers(0, V, lead).astype(np.int32)
    if ignore == -100:
        labels[rng.random(lead) < 0.3] = -100
    kw = dict(ignore_index=ignore, label_smoothing=eps, reduction=reduction)
    got = nn.linear_cross_entropy(x, w, labels, chunk_size=chunk, **kw)
    want = ref_loss(x, w, labels, ignore, eps, reduction)
    assert np.shape(got) == np.shape(want)
    _close(got, want, rtol=1e-9, atol=1e-9)
    ct = rng.standard_normal(np.shape(want))  # a random cotangent (per row for "none")

    def fused_l(x, w):
        return bnp.sum(nn.linear_cross_entropy(x, w, labels, chunk_size=chunk, **kw) * ct)

    def unfused_l(x, w):
        return bnp.sum(unfused(x, w, labels, ignore, eps, reduction) * ct)

    gx, gw = blu.grad(fused_l, argnums=(0, 1))(x, w)
    rx, rw = blu.grad(unfused_l, argnums=(0, 1))(x, w)
    if reduction == "mean" and ignore is not None and not (labels != ignore).any():
        rx, rw = np.zeros_like(x), np.zeros_like(w)  # PyTorch: NaN loss, zero gradient
    _close(gx, np.asarray(rx), rtol=1e-9, atol=1e-9)
    _close(gw, np.asarray(rw), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_gradients_match_finite_differences(reduction):
    x, w, labels = _case(1, lead=(2, 3), C=3, V=5, ignore_some=4)

    def f(x, w):
        return nn.linear_cross_entropy(
            x, w, labels, ignore_index=4, label_smoothing=0.2, reduction=reduction, chunk_size=4
        )

    check_vjp(f, [x, w], np.random.default_rng(2), atol=1e-7, rtol=1e-6)


def test_jit_matches_eager_and_value_and_grad_agrees():
    x, w, labels = _case(3, lead=(4, 5), C=6, V=11)

    def f(x, w, labels):
        return nn.linear_cross_entropy(x, w, labels, label_smoothing=0.1, chunk_size=7)

    vg = blu.value_and_grad(f, argnums=(0, 1))
    (v1, (gx1, gw1)), (v2, (gx2, gw2)) = blu.jit(vg)(x, w, labels), vg(x, w, labels)
    _close(v1, float(ref_loss(x, w, labels, eps=0.1)), rtol=1e-10)
    for a, b in ((v1, v2), (gx1, gx2), (gw1, gw2)):
        _close(a, np.asarray(b, np.float64), rtol=1e-10, atol=1e-12)


def test_each_keyword_changes_the_result_when_it_should():
    x, w, labels = _case(4, lead=(12,), C=4, V=6, ignore_some=2)
    base = float(nn.linear_cross_entropy(x, w, labels))
    _close(base, ref_loss(x, w, labels))
    ign = float(nn.linear_cross_entropy(x, w, labels, ignore_index=2))
    assert abs(ign - base) > 1e-3
    _close(ign, ref_loss(x, w, labels, ignore_index=2))
    smooth = float(nn.linear_cross_entropy(x, w, labels, label_smoothing=0.3))
    assert abs(smooth - base) > 1e-3
    _close(smooth, ref_loss(x, w, labels, eps=0.3))
    total = float(nn.linear_cross_entropy(x, w, labels, reduction="sum"))
    _close(total, base * 12)
    rows = nn.linear_cross_entropy(x, w, labels, reduction="none")
    assert rows.shape == (12,)
    _close(rows, ref_loss(x, w, labels, reduction="none"))
    # chunk_size changes the program (one product per chunk), not the value
    for chunk, n_chunks in ((None, 2), (1, 12), (5, 3), (12, 1), (100, 1)):
        f = lambda x: nn.linear_cross_entropy(x, w, labels, chunk_size=chunk)  # noqa: E731
        _close(f(x), base, rtol=1e-12)
        (call,) = [e for e in blu.make_jaxpr(f)(x).jaxpr.eqns if "call_jaxpr" in e.params]
        prims = [e.primitive.name for e in call.params["call_jaxpr"].eqns]
        assert prims.count("dot_general") == n_chunks, (chunk, prims)


def test_ignored_rows_contribute_nothing():
    x, w, labels = _case(5, lead=(6,), C=3, V=4, ignore_some=-1)
    rows = nn.linear_cross_entropy(x, w, labels, ignore_index=-1, reduction="none")
    assert np.all(np.asarray(rows)[labels == -1] == 0)
    gx = blu.grad(lambda x: nn.linear_cross_entropy(x, w, labels, ignore_index=-1))(x)
    assert np.all(np.asarray(gx)[labels == -1] == 0)
    assert np.any(np.asarray(gx)[labels != -1] != 0)
    # every row ignored: the mean is 0/0 (NaN, as PyTorch) and the gradient zero
    none = np.full(6, -1, np.int32)
    assert np.isnan(float(nn.linear_cross_entropy(x, w, none, ignore_index=-1)))
    gx, gw = blu.grad(
        lambda x, w: nn.linear_cross_entropy(x, w, none, ignore_index=-1), argnums=(0, 1)
    )(x, w)
    assert not np.any(np.asarray(gx)) and not np.any(np.asarray(gw))


def test_no_rows():
    x, w = np.zeros((0, 3)), np.ones((4, 3))
    labels = np.zeros((0,), np.int32)
    assert float(nn.linear_cross_entropy(x, w, labels, reduction="sum")) == 0
    assert np.isnan(float(nn.linear_cross_entropy(x, w, labels)))
    assert nn.linear_cross_entropy(x, w, labels, reduction="none").shape == (0,)


# ---- dtypes --------------------------------------------------------------------------------------


def test_bfloat16_inputs_float32_loss_bfloat16_gradients():
    x, w, labels = _case(6, lead=(3, 8), C=16, V=40)
    xb, wb = x.astype(bf16), w.astype(bf16)
    x64, w64 = xb.astype(np.float64), wb.astype(np.float64)  # what the products see

    def f(x, w):
        return nn.linear_cross_entropy(x, w, labels, label_smoothing=0.1, chunk_size=5)

    loss = f(xb, wb)
    assert np.asarray(loss).dtype == np.float32
    # float32 accumulation of bf16 products, the logits rounded to bf16 (as torch.autocast):
    # the loss to float32 accuracy of the exact loss of those logits
    _close(loss, ref_loss(x64, w64, labels, eps=0.1, logits_dtype=bf16), rtol=1e-5)
    gx, gw = blu.grad(f, argnums=(0, 1))(xb, wb)
    assert np.asarray(gx).dtype == bf16 and np.asarray(gw).dtype == bf16
    rx, rw = blu.grad(lambda x, w: unfused(x, w, labels, eps=0.1), argnums=(0, 1))(x64, w64)
    for g, r in ((gx, rx), (gw, rw)):  # dz is rounded to bf16 before its products
        r = np.asarray(r)
        np.testing.assert_allclose(np.asarray(g, np.float64), r, atol=2e-2 * np.abs(r).max())


def test_mixed_dtypes_give_gradients_in_each_inputs_dtype():
    x, w, labels = _case(7, lead=(4,), C=3, V=5)
    x32 = x.astype(np.float32)
    wb = w.astype(bf16)
    gx, gw = blu.grad(lambda x, w: nn.linear_cross_entropy(x, w, labels), argnums=(0, 1))(x32, wb)
    assert np.asarray(gx).dtype == np.float32 and np.asarray(gw).dtype == bf16
    loss = nn.linear_cross_entropy(x32, wb, labels)
    assert np.asarray(loss).dtype == np.float32
    _close(loss, ref_loss(x32, wb.astype(np.float64), labels), rtol=1e-5)


# ---- labels out of range, errors -----------------------------------------------------------------


def test_concrete_labels_out_of_range_raise():
    x, w, labels = _case(8, lead=(4,), C=3, V=5)
    for bad in (5, -1, 99):
        lab = labels.copy()
        lab[2] = bad
        with pytest.raises(BluValueError, match=rf"label {bad} at index \(2,\)"):
            nn.linear_cross_entropy(x, w, lab)
    lab = labels.copy()
    lab[1] = -100
    nn.linear_cross_entropy(x, w, lab, ignore_index=-100)  # the ignored label is allowed


def test_traced_labels_out_of_range_give_a_consistent_loss_and_gradient():
    """Documented behaviour under jit: an out-of-range label picks no class (target logit 0)."""
    x, w, labels = _case(9, lead=(5,), C=3, V=4)
    labels[1], labels[3] = 7, -3
    jf = blu.jit(
        lambda x, w, lab: nn.linear_cross_entropy(x, w, lab, label_smoothing=0.2, chunk_size=2)
    )
    _close(jf(x, w, labels), ref_loss(x, w, labels, eps=0.2), rtol=1e-10)
    check_vjp(lambda x, w: jf(x, w, labels), [x, w], np.random.default_rng(3), atol=1e-7)


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(reduction="avg"), BluValueError, "reduction"),
        (dict(label_smoothing=1.5), BluValueError, "label_smoothing"),
        (dict(chunk_size=0), BluValueError, "chunk_size"),
        (dict(chunk_size=2.5), BluValueError, "chunk_size"),
    ],
)
def test_bad_keywords_raise(kwargs, err, match):
    x, w, labels = _case(10)
    with pytest.raises(err, match=match):
        nn.linear_cross_entropy(x, w, labels, **kwargs)


def test_bad_shapes_and_dtypes_raise():
    x, w, labels = _case(11, lead=(4,), C=3, V=5)
    with pytest.raises(BluShapeError, match="w must be"):
        nn.linear_cross_entropy(x, w.T, labels)
    with pytest.raises(BluShapeError, match="w must be"):
        nn.linear_cross_entropy(x, np.zeros((0, 3)), labels)
    with pytest.raises(BluShapeError, match="labels"):
        nn.linear_cross_entropy(x, w, labels[:3])
    with pytest.raises(BluTypeError, match="integers"):
        nn.linear_cross_entropy(x, w, labels.astype(np.float32))


# ---- memory --------------------------------------------------------------------------------------


def test_jitted_gradient_holds_one_chunk_of_logits():
    """The plan's arena holds about one chunk's logits, not all N x V of them."""
    N, C, V, chunk = 256, 8, 512, 32
    x, w, labels = _case(12, lead=(N,), C=C, V=V)
    x, w = x.astype(np.float32), w.astype(np.float32)

    def step(f):
        return blu.jit(blu.value_and_grad(f, argnums=(0, 1))).lower(x, w, labels, target="cpu")

    fused = step(lambda x, w, lab: nn.linear_cross_entropy(x, w, lab, chunk_size=chunk))
    plain = step(lambda x, w, lab: nn.cross_entropy(x @ w.T, lab))
    logits = N * V * 4
    assert plain.memory_analysis().temp_size_in_bytes >= logits
    assert fused.memory_analysis().temp_size_in_bytes < logits / 2
    assert fused.memory_analysis().peak_bytes < plain.memory_analysis().peak_bytes
