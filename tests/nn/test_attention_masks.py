"""nn.dot_product_attention's JAX masks beyond ``mask``/``is_causal``: ``query_seq_lengths``,
``key_value_seq_lengths`` and ``local_window_size``, against a float64 numpy loop over queries
and keys (the allowed set written out per pair), finite-difference gradients, jit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
from blu import nn
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from tests.helpers import check_grads


def ref_loop(q, k, v, causal, q_len, kv_len, window, scale=None, mask=None):
    """Attention per batch entry, head, query: softmax over the keys that query may see."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    b_, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    scale = 1 / np.sqrt(h) if scale is None else scale
    out = np.zeros((b_, t, n, v.shape[-1]))
    left, right = (window, window) if isinstance(window, int) else (window or (None, None))
    for b in range(b_):
        for head in range(n):
            kvh = head // (n // kh)
            for i in range(t):
                seen = []
                for j in range(s):
                    ok = (not causal or j <= i) and (q_len is None or i < q_len[b])
                    ok = ok and (kv_len is None or j < kv_len[b])
                    ok = ok and (left is None or i - left <= j <= i + right)
                    ok = ok and (mask is None or mask[i, j])
                    if ok:
                        seen.append(j)
                if not seen:
                    continue  # nothing to attend: zeros
                logits = np.array([q[b, i, head] @ k[b, j, kvh] * scale for j in seen])
                w = np.exp(logits - logits.max())
                out[b, i, head] = (w / w.sum()) @ v[b, seen, kvh]
    return out


@given(
    st.integers(1, 6),
    st.integers(1, 6),
    st.booleans(),
    st.data(),
)
def test_lengths_and_window_match_loop(t, s, causal, data):
    rng = np.random.default_rng(t * 7 + s)
    b = 2
    q = rng.standard_normal((b, t, 4, 3))
    k = rng.standard_normal((b, s, 2, 3))
    v = rng.standard_normal((b, s, 2, 5))
    q_len = data.draw(st.none() | st.lists(st.integers(0, t), min_size=b, max_size=b))
    kv_len = data.draw(st.none() | st.lists(st.integers(0, s), min_size=b, max_size=b))
    window = data.draw(
        st.none() | st.integers(0, 3) | st.tuples(st.integers(0, 3), st.integers(0, 3))
    )
    impl = data.draw(st.sampled_from([None, "reference", "blu"]))
    got = nn.dot_product_attention(
        q,
        k,
        v,
        is_causal=causal,
        query_seq_lengths=None if q_len is None else np.array(q_len, np.int32),
        key_value_seq_lengths=None if kv_len is None else np.array(kv_len, np.int32),
        local_window_size=window,
        implementation=impl,
    )
    want = ref_loop(q, k, v, causal, q_len, kv_len, window)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "q_len, kv_len, window",
    [([2, 0], None, None), (None, [3, 1], None), (None, None, 1), (None, None, (0, 2)),
     ([1, 3], [2, 4], None), ([3, 2], None, (1, 0)), (None, [4, 2], 2)],
)  # fmt: skip
def test_each_argument_alone_and_in_pairs(q_len, kv_len, window):
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 3, 2, 4))
    k = rng.standard_normal((2, 4, 2, 4))
    v = rng.standard_normal((2, 4, 2, 3))
    for causal in (False, True):
        got = nn.dot_product_attention(
            q, k, v, is_causal=causal,
            query_seq_lengths=None if q_len is None else np.array(q_len),
            key_value_seq_lengths=None if kv_len is None else np.array(kv_len),
            local_window_size=window,
        )  # fmt: skip
        want = ref_loop(q, k, v, causal, q_len, kv_len, window)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)


def test_vmap_over_lengths():
    rng = np.random.default_rng(6)
    q = rng.standard_normal((1, 3, 2, 4))
    k = rng.standard_normal((1, 5, 2, 4))
    v = rng.standard_normal((1, 5, 2, 4))
    lens = np.array([[1], [3]], np.int32)

    def f(n):
        return nn.dot_product_attention(q, k, v, query_seq_lengths=n, key_value_seq_lengths=n + 1)

    got = np.asarray(blu.vmap(f)(lens))
    for i, n in enumerate(lens[:, 0]):
        np.testing.assert_allclose(got[i], ref_loop(q, k, v, False, [n], [n + 1], None), rtol=1e-10)


def test_with_a_mask_several_batch_axes_and_jit():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 3, 5, 2, 4))
    k = rng.standard_normal((2, 3, 6, 2, 4))
    v = rng.standard_normal((2, 3, 6, 2, 4))
    mask = rng.random((5, 6)) < 0.8
    q_len = np.array([[5, 2, 0], [4, 5, 1]])
    kv_len = np.array([[6, 3, 6], [1, 6, 2]])

    def f(q, k, v, q_len, kv_len):
        return nn.dot_product_attention(
            q, k, v, mask=mask, query_seq_lengths=q_len, key_value_seq_lengths=kv_len,
            local_window_size=(2, 1), scale=0.5,
        )  # fmt: skip

    got = blu.jit(f)(q, k, v, q_len, kv_len.reshape(6))  # (B,) with B the batch axes' product
    flat = [a.reshape((6,) + a.shape[2:]) for a in (q, k, v)]
    want = ref_loop(*flat, False, q_len.reshape(6), kv_len.reshape(6), (2, 1), 0.5, mask)
    np.testing.assert_allclose(np.asarray(got), want.reshape(2, 3, 5, 2, 4), rtol=1e-10)


@pytest.mark.parametrize("impl", [None, "reference"])
def test_gradients_finite_differences(impl):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 4, 2, 3))
    k = rng.standard_normal((2, 5, 1, 3))
    v = rng.standard_normal((2, 5, 1, 2))
    q_len, kv_len = np.array([3, 4], np.int32), np.array([5, 2], np.int32)

    def f(q, k, v):
        return nn.dot_product_attention(
            q, k, v, query_seq_lengths=q_len, key_value_seq_lengths=kv_len,
            local_window_size=1, implementation=impl,
        )  # fmt: skip

    check_grads(f, [q, k, v], order=1, atol=1e-6, rtol=1e-6)
    g = blu.grad(lambda q: (f(q, k, v) ** 2).sum())(q)
    assert np.all(np.asarray(g)[0, 3:] == 0)  # padded queries: no gradient


def test_bad_lengths_and_windows():
    q = k = v = np.zeros((2, 3, 1, 4), np.float32)
    with pytest.raises(BluTypeError, match="query_seq_lengths"):
        nn.dot_product_attention(q, k, v, query_seq_lengths=np.array([1.0, 2.0]))
    with pytest.raises(BluShapeError, match="key_value_seq_lengths"):
        nn.dot_product_attention(q, k, v, key_value_seq_lengths=np.array([1, 2, 3]))
    for bad in [-1, (1, -2), (1, 2, 3), 1.5, "2"]:
        with pytest.raises(BluValueError, match="local_window_size"):
            nn.dot_product_attention(q, k, v, local_window_size=bad)


def test_jax_implementation_name_xla():
    # JAX's name for its non-cuDNN implementation (blu refused it): blu's own kernels
    rng = np.random.default_rng(8)
    q = rng.standard_normal((2, 3, 4, 3))
    k = rng.standard_normal((2, 5, 2, 3))
    v = rng.standard_normal((2, 5, 2, 2))
    got = nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla")
    want = ref_loop(q, k, v, True, None, None, None)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)
    with pytest.raises(BluValueError, match="implementation"):
        nn.dot_product_attention(q, k, v, implementation="XLA")
