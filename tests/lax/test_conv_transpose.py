"""lax.conv_transpose against a float64 scatter loop (the definition of a transposed
convolution) and against the gradient of the forward convolution (SAME, and forward padding
pairs with use_consistent_padding)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluValueError


def scatter_ref(x, w, strides, rd):
    """out[n, y * s + j * r, a] += x[n, y, b] * w[j, a, b], NHWC / HWIO (VALID: every tap)."""
    n, *sp, _ = x.shape
    *win, a, _ = w.shape
    eff = [(k - 1) * r + 1 for k, r in zip(win, rd)]
    out = np.zeros([n, *(m * s + max(e - s, 0) for m, s, e in zip(sp, strides, eff)), a])
    for pos in itertools.product(*map(range, sp)):
        for ks in itertools.product(*map(range, win)):
            o = tuple(p * s + k * r for p, s, k, r in zip(pos, strides, ks, rd))
            out[(slice(None), *o, slice(None))] += x[(slice(None), *pos, slice(None))] @ w[ks].T
    return out


_DN = {1: ("NHC", "HIO", "NHC"), 2: ("NHWC", "HWIO", "NHWC")}


@st.composite
def cases(draw):
    s = draw(st.integers(1, 2))
    sp = [draw(st.integers(1, 4)) for _ in range(s)]
    win = [draw(st.integers(1, 3)) for _ in range(s)]
    strides = [draw(st.integers(1, 3)) for _ in range(s)]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    a, b = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    return rng.standard_normal([2, *sp, b]), rng.standard_normal([*win, a, b]), strides


@settings(max_examples=20, deadline=None)
@given(cases(), st.integers(1, 2))
def test_valid_against_scatter_loop(case, r):
    x, w, strides = case
    rd = [r] * len(strides)
    want = scatter_ref(x, w, strides, rd)
    got = lax.conv_transpose(x, w, strides, "VALID", rd, transpose_kernel=True)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10)
    # without transpose_kernel the kernel is used as given: flip and swap it by hand
    s = len(strides)
    flipped = np.swapaxes(np.flip(w, tuple(range(s))), s, s + 1)
    got2 = lax.conv_transpose(x, flipped, strides, "VALID", rd)
    np.testing.assert_allclose(np.asarray(got2), want, rtol=1e-10, atol=1e-10)


@settings(max_examples=20, deadline=None)
@given(cases(), st.sampled_from(["SAME", "pairs"]))
def test_is_the_gradient_of_the_forward_convolution(case, padding):
    y, w, strides = case  # y: the forward convolution's output cotangent
    s = len(strides)
    win = w.shape[:s]
    if padding == "SAME":
        fwd_pad, size = "SAME", [m * st_ for m, st_ in zip(y.shape[1:-1], strides)]
    else:  # symmetric forward pads, an input the forward windows cover exactly (PyTorch's case)
        fwd_pad = [(min(k - 1, st_ - 1), min(k - 1, st_ - 1)) for k, st_ in zip(win, strides)]
        size = [
            (m - 1) * st_ + k - 2 * p
            for m, st_, k, (p, _) in zip(y.shape[1:-1], strides, win, fwd_pad)
        ]
        if min(size) < 1:
            return
    x = np.zeros([2, *size, w.shape[-2]])

    def fwd(a):
        return lax.conv_general_dilated(a, w, strides, fwd_pad, dimension_numbers=_DN[s])

    assert fwd(x).shape == y.shape
    want = blu.vjp(fwd, x)[1](y)[0]
    got = lax.conv_transpose(
        y, w, strides, fwd_pad, transpose_kernel=True, use_consistent_padding=True
    )
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-10)


def test_errors():
    x, w = np.ones((1, 4, 2)), np.ones((3, 2, 2))
    with pytest.raises(BluValueError, match="padding"):
        lax.conv_transpose(x, w, (2,), "SAME_LOWER")
    with pytest.raises(BluValueError, match="rank 6"):
        lax.conv_transpose(np.ones((1,) * 6), np.ones((1,) * 6), (1,) * 4, "VALID")
