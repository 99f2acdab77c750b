"""``blu.lower.cuda.conv_layouts``: convolutions in layouts cuDNN's engines take.

On an H200, cuDNN gave wrong values (no error) for an ``NHWC`` image with a JAX-style ``HWIO``
filter, so ``convolution.problem`` refuses layouts other than all channels-last or all
channels-first, and the CUDA target's early pass transposes the operands of such equations. Checked
here on the CPU: after the pass every convolution of a gradient program is one cuDNN takes
(``problem`` reads it), only small arrays move, and the rewritten jaxpr computes the original's
values (float32, evaluated by the primitives' impls).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
from blu.core.jaxpr import eval_jaxpr
from blu.lax.convolution import conv_general_dilated_p as conv_p
from blu.lax.shapes import transpose_p
from blu.lower.cuda import convolution as cv
from blu.lower.cuda.conv_layouts import native_conv_layouts

# every role order JAX users write (flax's NHWC/HWIO first), and mixed ones
SPECS = [("NHWC", "HWIO", "NHWC"), ("NCHW", "OIHW", "NCHW"), ("NHWC", "OHWI", "NHWC"),
         ("NCHW", "HWIO", "NCHW"), ("NHWC", "OIHW", "NCHW"), ("HWNC", "IOHW", "NHWC"),
         ("NWHC", "WHIO", "CHWN")]  # fmt: skip


def _program(dn, strides, pad, rd, fg, n=2, c=4, o=6, sp=(7, 6), win=(3, 2)):
    lhs, rhs, _ = dn
    size = {"N": n, "C": c, "O": o, "I": c // fg, "H": sp[0], "W": sp[1]}
    xs = tuple(size[ch] for ch in lhs)
    ws = tuple({**size, "H": win[0], "W": win[1]}[ch] for ch in rhs)
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=xs), rng.normal(size=ws)

    def f(x, w):
        y = lax.conv_general_dilated(x, w, strides, pad, None, rd, dn, fg)
        return (y * y).sum()

    f32 = np.float32
    return blu.make_jaxpr(blu.grad(f, argnums=(0, 1)))(x.astype(f32), w.astype(f32)).jaxpr, (x, w)


def _transposes(jaxpr) -> Counter:
    return Counter((e.params["permutation"], e.invars[0].aval.size)
                   for e in jaxpr.eqns if e.primitive is transpose_p)  # fmt: skip


def _convs(jaxpr):
    return [e for e in jaxpr.eqns if e.primitive is conv_p]


@pytest.fixture(autouse=True)
def _cudnn_on(set_flag):
    set_flag("cudnn_conv", True)


@settings(max_examples=40, deadline=None)
@given(
    dn=st.sampled_from(SPECS),
    strides=st.sampled_from([(1, 1), (2, 1), (2, 2)]),
    pad=st.sampled_from(["SAME", "VALID", ((1, 0), (2, 1))]),
    rd=st.sampled_from([(1, 1), (1, 2)]),
    fg=st.sampled_from([1, 2]),
)
def test_every_convolution_of_a_gradient_becomes_native(dn, strides, pad, rd, fg):
    jaxpr, args = _program(dn, strides, pad, rd, fg)
    before = [cv.read([v.aval for v in e.invars], e.params) for e in _convs(jaxpr)]
    out = native_conv_layouts(jaxpr)
    after = _convs(out)
    assert len(after) == len(before) == 3
    assert any(spec is not None for spec in before)  # float32: cuDNN reads some of them
    for e, spec in zip(after, before, strict=True):
        got = cv.problem([v.aval for v in e.invars], e.params)
        assert (got is not None) == (spec is not None), (e.params, spec)  # read: now taken
        if got is not None:
            assert cv.native(got)
    moved = _transposes(out) - _transposes(jaxpr)  # the ones the pass added
    if dn[0] == dn[2] and dn[0] in ("NHWC", "NCHW"):  # only filters (and their gradients) move
        assert all(size <= args[1].size for _, size in moved), moved
    args = [a.astype(np.float32) for a in args]
    want = eval_jaxpr(jaxpr, [], *args)
    got = eval_jaxpr(out, [], *args)
    for g, w in zip(got, want, strict=True):  # the same sums, maybe in another order
        np.testing.assert_allclose(
            np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-5 * np.abs(np.asarray(w)).max()
        )


def test_native_layouts_are_left_alone():
    jaxpr, _ = _program(("NHWC", "OHWI", "NHWC"), (1, 1), "SAME", (1, 1), 1)
    fwd = _convs(jaxpr)[0]
    assert cv.native(cv.read([v.aval for v in fwd.invars], fwd.params))
    out = native_conv_layouts(jaxpr)
    assert _convs(out)[0].params == fwd.params


def test_off_without_cudnn(set_flag):
    set_flag("cudnn_conv", False)
    jaxpr, _ = _program(("NHWC", "HWIO", "NHWC"), (1, 1), "SAME", (1, 1), 1)
    assert native_conv_layouts(jaxpr) is jaxpr


@pytest.mark.parametrize(
    "dims,strides,last,want",
    [((2, 3, 4, 5), (60, 1, 15, 3), True, True),  # NHWC
     ((2, 3, 4, 5), (60, 20, 5, 1), False, True),  # NCHW
     ((2, 3, 4, 5), (60, 20, 5, 1), True, False),
     ((6, 4, 3, 2), (1, 6, 48, 24), True, False),  # HWIO as KRSC: K innermost
     ((2, 3, 4, 5), (90, 1, 18, 3), True, True),  # a cropped NHWC view (H, W read short)
     ((1, 3, 1, 1), (7, 1, 9, 9), False, True)],  # size-1 axes: any stride
)  # fmt: skip
def test_ordered(dims, strides, last, want):
    assert cv.ordered(dims, strides, last) is want
