"""The fused attention primitives (``blu.lax.attention``) behind ``nn.dot_product_attention``.

References are numpy float64 on whole ``(T, S)`` score matrices (independent of the blocked
kernels): the output, the log-sum-exp, and the vector-Jacobian product from the textbook
softmax derivative. Gradients are also checked against finite differences. The kernels' block
sizes are shrunk (``small_blocks``) so that short sequences cross several blocks, with ``T``
not a multiple of the block.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu import lax, nn
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.lax import attention_numpy
from blu.lower.cpu import attention as lower_attention
from blu.lower.cpu import flash as mlir_attention
from blu.lower.plan.memory_timeline import buffers
from tests.helpers import check_grads, check_jit, check_vmap

bf16 = ml_dtypes.bfloat16
TOL = {np.float64: 1e-10, np.float32: 2e-5, np.float16: 5e-3, bf16: 3e-2}


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(attention_numpy, "BLOCK_KEYS", 4)
    monkeypatch.setattr(attention_numpy, "BLOCK_ELEMENTS", 96)


# ---- float64 references ----------------------------------------------------------------------


def ref_probs(q, k, bias=None, mask=None, scale=None, causal=False):
    """``P (B, N, T, S)``, ``lse (B, N, T)``, and the allowed entries, in float64."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    t, n, h = q.shape[1:]
    s_len, kh = k.shape[1:3]
    scale = 1 / np.sqrt(h) if scale is None else scale
    kk = np.repeat(k, n // kh, axis=2)
    s = np.einsum("btnh,bsnh->bnts", q, kk) * scale
    if bias is not None:
        s = s + np.asarray(bias, np.float64)
    ok = np.ones(s.shape, bool)
    if mask is not None:
        ok &= mask
    if causal:
        ok &= np.tri(t, s_len, dtype=bool)
    s = np.where(ok, s, -np.inf)
    m = s.max(-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    l = e.sum(-1, keepdims=True)
    p = np.where(l > 0, e / np.where(l > 0, l, 1), 0)
    lse = np.where(l > 0, m + np.log(np.where(l > 0, l, 1)), -np.inf)[..., 0]
    return p, lse, ok


def ref_attention(q, k, v, bias=None, mask=None, scale=None, causal=False):
    p, _, _ = ref_probs(q, k, bias, mask, scale, causal)
    vv = np.repeat(np.asarray(v, np.float64), q.shape[2] // k.shape[2], axis=2)
    return np.einsum("bnts,bsnh->btnh", p, vv)


def ref_vjp(q, k, v, dout, bias=None, mask=None, scale=None, causal=False):
    """``(dq, dk, dv, dbias (B, N, T, S))`` of ``ref_attention`` for the cotangent ``dout``."""
    h, n, kh = q.shape[-1], q.shape[2], k.shape[2]
    scale = 1 / np.sqrt(h) if scale is None else scale
    p, _, _ = ref_probs(q, k, bias, mask, scale, causal)
    q, k, v, do = (np.asarray(a, np.float64) for a in (q, k, v, dout))
    g = n // kh
    kk, vv = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    dvv = np.einsum("bnts,btnh->bsnh", p, do)
    dp = np.einsum("btnh,bsnh->bnts", do, vv)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    dq = np.einsum("bnts,bsnh->btnh", ds, kk) * scale
    dkk = np.einsum("bnts,btnh->bsnh", ds, q) * scale
    fold = lambda x: x.reshape(x.shape[:2] + (kh, g, x.shape[-1])).sum(3)
    return dq, fold(dkk), fold(dvv), ds


def qkv(rng, b=2, t=5, s=None, n=4, kh=None, h=8, hv=None, dtype=np.float64):
    s, kh, hv = t if s is None else s, n if kh is None else kh, h if hv is None else hv
    return tuple(
        rng.normal(size=shape).astype(dtype)
        for shape in ((b, t, n, h), (b, s, kh, h), (b, s, kh, hv))
    )


def close(got, want, dtype=np.float64, scale=1.0):
    tol = TOL[dtype]
    got = np.asarray(got, np.float64)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


# ---- values -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, bf16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("extra", ["none", "mask", "bias", "both"])
def test_values_match_float64_reference(small_blocks, dtype, causal, extra):
    rng = np.random.default_rng(1)
    q, k, v = qkv(rng, t=7, s=9, n=4, kh=2, h=8, hv=6, dtype=dtype)
    bias = rng.normal(size=(2, 1, 7, 9)).astype(dtype) if extra in ("bias", "both") else None
    mask = rng.random((1, 4, 7, 9)) < 0.7 if extra in ("mask", "both") else None
    out = nn.dot_product_attention(q, k, v, bias, mask, is_causal=causal)
    assert out.dtype == np.dtype(dtype) and out.shape == (2, 7, 4, 6)
    close(out, ref_attention(q, k, v, bias, mask, causal=causal), dtype)


@pytest.mark.parametrize("h", [32, 64, 128])
@pytest.mark.parametrize("dtype", [np.float32, bf16])
def test_head_sizes(h, dtype):
    rng = np.random.default_rng(h)
    q, k, v = qkv(rng, b=1, t=70, n=2, h=h, dtype=dtype)  # 70: not a multiple of the block
    close(nn.dot_product_attention(q, k, v, is_causal=True),
          ref_attention(q, k, v, causal=True), dtype)  # fmt: skip


def test_lse_and_batch_axes():
    rng = np.random.default_rng(2)
    q, k, v = qkv(rng, t=6, s=4)
    out, lse = lax.dot_product_attention_fwd(q, k, v, scale=0.4, is_causal=True)
    _, want, _ = ref_probs(q, k, scale=0.4, causal=True)
    assert lse.dtype == np.float64 and lse.shape == (2, 4, 6)
    np.testing.assert_allclose(np.asarray(lse), want, rtol=1e-12)
    # no batch axis, and two
    close(nn.dot_product_attention(q[0], k[0], v[0]), ref_attention(q[:1], k[:1], v[:1])[0])
    q2, k2, v2 = (np.stack([a, 2 * a]) for a in (q, k, v))
    want2 = np.stack([ref_attention(q2[i], k2[i], v2[i]) for i in range(2)])
    close(nn.dot_product_attention(q2, k2, v2), want2)
    _, lse32 = lax.dot_product_attention_fwd(*(a.astype(np.float32) for a in (q, k, v)), scale=1.0)
    assert lse32.dtype == np.float32 and lse32.shape == (2, 4, 6)


@settings(deadline=None, max_examples=25)
@given(st.integers(0, 2), st.integers(0, 6), st.integers(0, 6), st.sampled_from([(1, 1), (2, 1),
       (2, 2)]), st.booleans(), st.booleans())  # fmt: skip
def test_random_shapes(b, t, s, heads, causal, masked):
    rng = np.random.default_rng(b * 100 + t * 10 + s)
    n, kh = heads
    q, k, v = qkv(rng, b=b, t=t, s=s, n=n, kh=kh, h=3, hv=2)
    mask = rng.random((b, n, t, s)) < 0.5 if masked else None
    out = nn.dot_product_attention(q, k, v, mask=mask, is_causal=causal)
    close(out, ref_attention(q, k, v, mask=mask, causal=causal))


def test_fully_masked_rows_give_zeros_and_no_nan():
    rng = np.random.default_rng(3)
    q, k, v = qkv(rng, t=5, s=5)
    mask = np.ones((5, 5), bool)
    mask[1] = False  # query 1 attends nothing
    out = np.asarray(nn.dot_product_attention(q, k, v, mask=mask))
    assert np.all(out[:, 1] == 0) and not np.isnan(out).any()
    none = np.zeros((5, 5), bool)
    assert np.all(np.asarray(nn.dot_product_attention(q, k, v, mask=none)) == 0)
    # T > S with causal: every query sees key 0 at least; bias of -inf hides a whole row too
    bias = np.zeros((1, 1, 5, 5))
    bias[..., 3, :] = -np.inf
    out = np.asarray(nn.dot_product_attention(q, k, v, bias))
    assert np.all(out[:, 3] == 0) and not np.isnan(out).any()
    f = lambda q, k, v: (nn.dot_product_attention(q, k, v, mask=mask) ** 2).sum()
    gq, gk, gv = (np.asarray(g) for g in blu.grad(f, argnums=(0, 1, 2))(q, k, v))
    assert np.all(gq[:, 1] == 0) and not any(np.isnan(g).any() for g in (gq, gk, gv))
    _, want_k, want_v, _ = ref_vjp(q, k, v, 2 * ref_attention(q, k, v, mask=mask), mask=mask)
    close(gk, want_k)
    close(gv, want_v)


# ---- derivatives --------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("t", [1, 7])
def test_grads_finite_differences(small_blocks, causal, t):
    rng = np.random.default_rng(4)
    q, k, v = qkv(rng, b=1, t=t, n=2, kh=1, h=3)
    bias = rng.normal(size=(1, 2, t, t))
    mask = rng.random((1, 1, t, t)) < 0.8
    mask[..., 0] = True
    f = lambda q, k, v, bias: nn.dot_product_attention(q, k, v, bias, mask, is_causal=causal)
    check_grads(f, [q, k, v, bias], atol=1e-6, rtol=1e-6)


def test_second_order_and_lse_gradient(small_blocks):
    rng = np.random.default_rng(5)
    q, k, v = qkv(rng, b=1, t=5, n=2, h=2)
    check_grads(lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True), [q, k, v],
                order=2, atol=1e-5, rtol=1e-5)  # fmt: skip

    def both(q, k, v):
        out, lse = lax.dot_product_attention_fwd(q, k, v, scale=0.5, is_causal=True)
        return out.sum() + (lse * lse).sum()

    check_grads(both, [q, k, v], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, bf16])
@pytest.mark.parametrize("causal", [False, True])
def test_low_precision_grads_against_float64(small_blocks, dtype, causal):
    rng = np.random.default_rng(6)
    q, k, v = qkv(rng, b=2, t=9, n=4, kh=2, h=8, dtype=dtype)
    bias = rng.normal(size=(1, 4, 9, 9)).astype(dtype)
    dout = rng.normal(size=q.shape).astype(dtype)
    f = lambda q, k, v, bias: (nn.dot_product_attention(q, k, v, bias, is_causal=causal)
                               * dout).astype(np.float32).sum()  # fmt: skip
    got = blu.grad(f, argnums=(0, 1, 2, 3))(q, k, v, bias)
    want = ref_vjp(q, k, v, dout, bias, causal=causal)
    want = want[:3] + (want[3].sum(0, keepdims=True),)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.dtype(dtype)
        close(g, w, dtype, scale=np.abs(w).max())


def test_grad_builds_no_t_by_s_product():
    rng = np.random.default_rng(7)
    q, k, v = qkv(rng, b=1, t=40, s=48, n=2, h=4)
    f = lambda q, k, v: (nn.dot_product_attention(q, k, v, is_causal=True) ** 2).sum()
    jaxpr = blu.make_jaxpr(blu.grad(f, argnums=(0, 1, 2)))(q, k, v)
    names = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert "dot_product_attention_bwd" in names
    for e in jaxpr.jaxpr.eqns:
        for var in e.outvars:
            assert var.aval.shape[-2:] != (40, 48), (e.primitive.name, var.aval)


# ---- vmap and jit -------------------------------------------------------------------------------


def test_vmap_against_loop():
    rng = np.random.default_rng(8)
    q, k, v = qkv(rng, b=3, t=5, n=2, h=4)
    bias = rng.normal(size=(3, 2, 5, 5))
    f = lambda q, k, v: nn.dot_product_attention(q, k, v, is_causal=True)
    check_vmap(f, [q, k, v], [0, 0, 0])
    check_vmap(f, [q, k[0], v], [0, None, 0])
    check_vmap(f, [np.moveaxis(q, 0, 2), k, v], [2, 0, 0])
    g = lambda q, k, v, b: nn.dot_product_attention(q, k, v, b)
    check_vmap(g, [q, k, v, bias], [0, 0, 0, 0])
    check_vmap(g, [q, k, v, bias[0, 0]], [0, 0, 0, None])
    check_vmap(g, [q[0], k, v, bias], [None, 0, 0, 0])


def test_vmap_of_grad_with_a_shared_bias():
    rng = np.random.default_rng(9)
    q, k, v = qkv(rng, b=3, t=4, n=2, h=3)
    bias = rng.normal(size=(1, 2, 4, 4))

    def loss(q, k, v, bias):
        return (nn.dot_product_attention(q[None], k[None], v[None], bias) ** 2).sum()

    grads = blu.vmap(blu.grad(loss, argnums=(0, 1, 2, 3)), in_axes=(0, 0, 0, None))
    for got in (grads(q, k, v, bias), blu.jit(grads)(q, k, v, bias)):  # eager; the CPU kernels
        for i in range(3):
            qi, ki, vi = q[i : i + 1], k[i : i + 1], v[i : i + 1]
            want = ref_vjp(qi, ki, vi, 2 * ref_attention(qi, ki, vi, bias), bias)
            for g, w in zip(got[:3], want[:3]):
                close(np.asarray(g)[i], w[0])
            close(np.asarray(got[3])[i], want[3])


def test_jit_matches_eager():
    rng = np.random.default_rng(10)
    q, k, v = qkv(rng, t=6, n=2, h=4, dtype=np.float32)
    mask = rng.random((6, 6)) < 0.7
    f = lambda q, k, v: nn.dot_product_attention(q, k, v, mask=mask, is_causal=True)
    check_jit(f, [q, k, v])
    g = blu.grad(lambda q, k, v: (f(q, k, v) ** 2).sum(), argnums=(0, 1, 2))
    check_jit(g, [q, k, v])


def test_reference_implementation_agrees():
    rng = np.random.default_rng(11)
    q, k, v = qkv(rng, t=6, n=4, kh=2, h=4)
    bias = rng.normal(size=(6, 6))
    for causal in (False, True):
        a = nn.dot_product_attention(q, k, v, bias, is_causal=causal, implementation="reference")
        close(a, ref_attention(q, k, v, bias, causal=causal))
        close(nn.dot_product_attention(q, k, v, bias, is_causal=causal, implementation="blu"),
              np.asarray(a))  # fmt: skip


# ---- errors -------------------------------------------------------------------------------------


def test_errors():
    rng = np.random.default_rng(12)
    q, k, v = qkv(rng, t=5, n=4, h=4)
    with pytest.raises(BluShapeError, match="divide"):
        nn.dot_product_attention(q, k[:, :, :3], v[:, :, :3])
    with pytest.raises(BluShapeError):
        nn.dot_product_attention(q, k[..., :3], v)
    with pytest.raises(BluShapeError, match="mask"):
        nn.dot_product_attention(q, k, v, mask=np.ones((4, 5), bool))
    with pytest.raises(BluTypeError, match="bool"):
        nn.dot_product_attention(q, k, v, mask=np.ones((5, 5)))
    with pytest.raises(BluTypeError, match="floating"):
        nn.dot_product_attention(q.astype(np.int32), k.astype(np.int32), v.astype(np.int32))
    with pytest.raises(BluValueError, match="implementation"):
        nn.dot_product_attention(q, k, v, implementation="flash")
    with pytest.raises(BluValueError, match="cudnn"):
        nn.dot_product_attention(q, k, v, implementation="cudnn")  # float64
    with pytest.raises(BluValueError, match="CUDA device"):
        nn.dot_product_attention(q.astype(bf16), k.astype(bf16), v.astype(bf16),
                                 implementation="cudnn")  # fmt: skip
    with pytest.raises(BluShapeError, match="bias"):
        lax.dot_product_attention_fwd(q, k, v, np.zeros((2, 3, 5, 5)), scale=1.0)


# ---- the CPU's MLIR kernels (what jit runs on the CPU) -----------------------------------------


@pytest.fixture
def cpu_kernels(monkeypatch):
    """The smallest key blocks (one vector: 16 float32 or 8 float64 keys, so short rows cross
    several, the last one partial) and a record of the MLIR kernels that ran: ``kinds``
    collects ``"fwd"``/``"bwd"`` per call."""
    monkeypatch.setattr(mlir_attention, "BLOCK_KEYS", 1)
    kinds: list[str] = []
    real = lower_attention._cpu_kernel

    def spy(kind, sp):
        kinds.append(kind)
        return real(kind, sp)

    monkeypatch.setattr(lower_attention, "_cpu_kernel", spy)
    return kinds


def _jit_attention_and_grads(q, k, v, bias, mask, dout, causal):
    """jit'ed output and gradients ``(dq, dk, dv[, dbias])`` of ``sum(out * dout)``."""
    f = lambda *a: nn.dot_product_attention(*a[:3], a[3] if bias is not None else None, mask,
                                            is_causal=causal)  # fmt: skip
    args = (q, k, v) + ((bias,) if bias is not None else ())
    loss = lambda *a: (f(*a) * dout).astype(np.float32).sum()
    grads = blu.jit(blu.grad(loss, argnums=tuple(range(len(args)))))(*args)
    return blu.jit(f)(*args), grads


CPU_CASES = [  # b, t, s, n, kh, h, hv
    (2, 9, 9, 4, 2, 8, 8),  # grouped queries, one partial block of keys
    (1, 1, 1, 1, 1, 32, 32),  # T = S = 1
    (2, 7, 11, 2, 1, 20, 5),  # T != S, head sizes with a vector tail
    (1, 37, 37, 2, 1, 16, 16),  # several blocks of keys (16 or 8), the last one partial
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("extra", ["none", "both"])
def test_cpu_kernels_match_float64_reference(cpu_kernels, dtype, causal, extra):
    rng = np.random.default_rng(13)
    for b, t, s, n, kh, h, hv in CPU_CASES:
        q, k, v = qkv(rng, b=b, t=t, s=s, n=n, kh=kh, h=h, hv=hv, dtype=dtype)
        bias = mask = None
        if extra == "both":
            bias = rng.normal(size=(1, n, t, s)).astype(dtype)
            mask = rng.random((b, 1, t, s)) < 0.7
        dout = rng.normal(size=(b, t, n, hv)).astype(dtype)
        out, grads = _jit_attention_and_grads(q, k, v, bias, mask, dout, causal)
        close(out, ref_attention(q, k, v, bias, mask, causal=causal), dtype)
        want = ref_vjp(q, k, v, dout, bias, mask, causal=causal)
        want = want[:3] + (want[3].sum(0, keepdims=True),)
        for g, w in zip(grads, want):
            assert np.asarray(g).dtype == np.dtype(dtype)
            close(g, w, dtype, scale=max(1.0, np.abs(w).max()))
    assert {"fwd", "bwd"} <= set(cpu_kernels)


@settings(deadline=None, max_examples=10)
@given(st.integers(0, 2), st.integers(0, 19), st.integers(0, 19), st.sampled_from([(1, 1), (2, 1),
       (2, 2)]), st.booleans(), st.booleans())  # fmt: skip
def test_cpu_kernels_random_shapes(b, t, s, heads, causal, masked):
    rng = np.random.default_rng(b * 1000 + t * 20 + s)
    n, kh = heads
    q, k, v = qkv(rng, b=b, t=t, s=s, n=n, kh=kh, h=3, hv=2, dtype=np.float32)
    mask = rng.random((b, n, t, s)) < 0.5 if masked else None
    dout = rng.normal(size=(b, t, n, 2)).astype(np.float32)
    out, grads = _jit_attention_and_grads(q, k, v, None, mask, dout, causal)
    close(out, ref_attention(q, k, v, mask=mask, causal=causal), np.float32)
    for g, w in zip(grads, ref_vjp(q, k, v, dout, mask=mask, causal=causal)):
        close(g, w, np.float32, scale=max(1.0, np.abs(w).max(initial=0)))


@pytest.mark.parametrize("dtype", [np.float16, bf16])
def test_cpu_kernels_low_precision(cpu_kernels, dtype):
    rng = np.random.default_rng(14)
    # T = 19: a full tile of 16 queries or keys through the register transposes, then the rest
    q, k, v = qkv(rng, b=2, t=19, n=4, kh=2, h=16, hv=8, dtype=dtype)
    bias = rng.normal(size=(2, 4, 19, 19)).astype(dtype)
    dout = rng.normal(size=(2, 19, 4, 8)).astype(dtype)
    out, grads = _jit_attention_and_grads(q, k, v, bias, None, dout, True)
    assert np.asarray(out).dtype == np.dtype(dtype)
    close(out, ref_attention(q, k, v, bias, causal=True), dtype)
    for g, w in zip(grads, ref_vjp(q, k, v, dout, bias, causal=True)):
        assert np.asarray(g).dtype == np.dtype(dtype)
        close(g, w, dtype, scale=np.abs(w).max())
    assert {"fwd", "bwd"} <= set(cpu_kernels)


def test_cpu_kernels_fully_masked_rows_give_zeros(cpu_kernels):
    rng = np.random.default_rng(15)
    q, k, v = qkv(rng, t=5, s=6, n=2, h=4)
    mask = np.ones((5, 6), bool)
    mask[1] = False  # query 1 attends nothing
    bias = np.zeros((1, 1, 5, 6))
    bias[..., 3, :] = -np.inf  # nor does query 3
    dout = rng.normal(size=q.shape)
    out, (gq, gk, gv, _) = _jit_attention_and_grads(q, k, v, bias, mask, dout, False)
    out = np.asarray(out)
    assert not any(np.isnan(np.asarray(x)).any() for x in (out, gq, gk, gv))
    assert np.all(out[:, [1, 3]] == 0) and np.all(np.asarray(gq)[:, [1, 3]] == 0)
    close(out, ref_attention(q, k, v, bias, mask))
    _, want_k, want_v, _ = ref_vjp(q, k, v, dout, bias, mask)
    close(gk, want_k)
    close(gv, want_v)
    none = np.zeros((5, 6), bool)
    out = blu.jit(lambda q, k, v: nn.dot_product_attention(q, k, v, mask=none))(q, k, v)
    assert np.all(np.asarray(out) == 0)
    # no keys at all (S = 0): zeros; no queries (T = 0): empty
    for s, t in ((0, 5), (6, 0)):
        q0, k0, v0 = qkv(rng, t=t, s=s, n=2, h=4)
        out = blu.jit(lambda q, k, v: nn.dot_product_attention(q, k, v))(q0, k0, v0)
        assert np.asarray(out).shape == (2, t, 2, 4) and np.all(np.asarray(out) == 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", [  # b, t, s, n, kh, h, hv, causal
    (3, 70, 83, 4, 2, 20, 36, True),  # T, S past a 64-key block; T % 8, S % 4, h % 16 != 0
    (2, 13, 9, 2, 1, 33, 72, False),  # wide values: blocks of 3 queries (1 in float64), a tail
    (1, 83, 70, 1, 1, 16, 16, True),  # T > S: the last queries see every key
])  # fmt: skip
def test_cpu_kernels_at_their_block_sizes(dtype, case):
    """The kernels called directly at their own block sizes (64 keys and up to 8 queries forward, 4
    keys backward), with a bias gradient, a cotangent of the log-sum-exp, a mask and grouped
    heads, against the float64 references."""
    b, t, s, n, kh, h, hv, causal = case
    rng = np.random.default_rng(t * 100 + s)
    q, k, v = qkv(rng, b=b, t=t, s=s, n=n, kh=kh, h=h, hv=hv, dtype=dtype)
    bias = rng.normal(size=(1, n, t, s)).astype(dtype)
    mask = rng.random((b, 1, t, s)) < 0.8
    dout = rng.normal(size=(b, t, n, hv)).astype(dtype)
    dlse = rng.normal(size=(b, n, t)).astype(dtype)
    params = dict(scale=0.3, is_causal=causal, has_bias=True, has_mask=True, implementation=None)
    out, lse = np.empty((b, t, n, hv), dtype), np.empty((b, n, t), dtype)
    lower_attention._cpu_fwd([q, k, v, bias, mask], [out, lse], None, **params)
    p, want_lse, _ = ref_probs(q, k, bias, mask, 0.3, causal)
    close(out, ref_attention(q, k, v, bias, mask, 0.3, causal), dtype)
    close(np.where(np.isinf(want_lse), 0, lse), np.where(np.isinf(want_lse), 0, want_lse), dtype)
    grads = [np.empty_like(x) for x in (q, k, v, bias)]
    lower_attention._cpu_bwd([q, k, v, bias, mask, out, lse, dout, dlse], grads, None,
                             has_dlse=True, need_dbias=True, **params)  # fmt: skip
    # d lse_i / d s_ij = p_ij: the lse cotangent adds p * dlse to dS
    dq, dk, dv, ds = ref_vjp(q, k, v, dout, bias, mask, 0.3, causal)
    ds_l = p * np.asarray(dlse, np.float64)[..., None]
    g = n // kh
    fold = lambda x: x.reshape(x.shape[:2] + (kh, g, x.shape[-1])).sum(3)  # noqa: E731
    kk = np.repeat(np.asarray(k, np.float64), g, axis=2)
    dq = dq + np.einsum("bnts,bsnh->btnh", ds_l, kk) * 0.3
    dk = dk + fold(np.einsum("bnts,btnh->bsnh", ds_l, np.asarray(q, np.float64)) * 0.3)
    want = (dq, dk, dv, (ds + ds_l).sum(0, keepdims=True))
    for got, w in zip(grads, want):
        close(got, w, dtype, scale=max(1.0, np.abs(w).max()))


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_kernels_grads_finite_differences(cpu_kernels, causal):
    rng = np.random.default_rng(16)
    q, k, v = qkv(rng, b=1, t=7, n=2, kh=1, h=3)
    bias = rng.normal(size=(1, 2, 7, 7))
    mask = rng.random((1, 1, 7, 7)) < 0.8
    mask[..., 0] = True
    f = blu.jit(lambda q, k, v, bias: nn.dot_product_attention(q, k, v, bias, mask,
                                                               is_causal=causal))  # fmt: skip
    check_grads(f, [q, k, v, bias], atol=1e-6, rtol=1e-6)
    assert "bwd" in cpu_kernels


def test_cpu_training_step_plans_no_t_by_s_buffer():
    """The memory plan of a jit'ed training step (value_and_grad of a causal self-attention
    layer) holds no buffer, scratch included, with ``T * S`` elements per head."""
    b, t, n, h = 2, 32, 2, 4
    d = n * h
    rng = np.random.default_rng(17)
    x = rng.normal(size=(b, t, d)).astype(np.float32)
    w = [rng.normal(size=(d, d)).astype(np.float32) / 3 for _ in range(4)]

    def loss(w, x, impl):
        q, k, v = (lax.reshape(x @ wi, (b, t, n, h)) for wi in w[:3])
        o = nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
        return ((lax.reshape(o, (b, t, d)) @ w[3]) ** 2).mean()

    def largest(impl):
        step = blu.jit(blu.value_and_grad(lambda w, x: loss(w, x, impl)))
        prog = step.lower(w, x, target="cpu")._program
        sizes = [bf.nbytes // 4 for bf in buffers(prog.plan, prog.memory)]
        sizes += [nd.workspace // 4 for nd in prog.plan.nodes]
        return max(sizes), [nd.kind for nd in prog.plan.nodes]

    per_head = b * n * t * t
    big, kinds = largest(None)
    assert big < per_head and kinds.count("library") == 2, (big, kinds)
    assert largest("reference")[0] >= per_head  # the unfused form does build the scores
    step = blu.jit(blu.value_and_grad(lambda w, x: loss(w, x, None)))
    ref = blu.value_and_grad(lambda w, x: loss(w, x, "reference"))
    (val, gw), (want, gwant) = step(w, x), ref(w, x)
    close(val, float(want), np.float32)
    for g, wnt in zip(gw, gwant):
        close(g, np.asarray(wnt, np.float64), np.float32, scale=np.abs(np.asarray(wnt)).max())
