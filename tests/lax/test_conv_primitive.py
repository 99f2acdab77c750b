"""The ``conv_general_dilated`` primitive over general dimension numbers, feature and batch
groups: forward against a float64 loop, gradients against finite differences, vmap of either
operand against a loop, the CPU library node and the im2col decomposition against the loop."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gpu_helpers import make_device, on_gpu, put
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu import lax
from blu.core.errors import BluTypeError, BluValueError
from blu.lax.conv_decomp import conv_im2col
from blu.lax.convolution import conv_general_dilated_p
from blu.lower.backend import prepare
from tests.helpers import check_grads


def conv_ref(x, w, strides, pads, ld, rd, fg, bg):
    """The definition, by loops, in NCHW/OIHW: x (N, C, *sp), w (O, C/G, *win), float64;
    batch groups split N and O group-major (output batch N / B)."""
    n, c, *sp = x.shape
    o, i, *win = w.shape
    dil = np.zeros([n, c] + [(d - 1) * l + 1 if d else 0 for d, l in zip(sp, ld)])
    dil[(slice(None), slice(None), *(slice(None, None, l) for l in ld))] = x
    for ax, (lo, hi) in enumerate(pads):
        a = 2 + ax
        if lo < 0:
            dil = np.take(dil, range(-lo, dil.shape[a]), axis=a)
        if hi < 0:
            dil = np.take(dil, range(0, dil.shape[a] + hi), axis=a)
        widths = [(0, 0)] * dil.ndim
        widths[a] = (max(lo, 0), max(hi, 0))
        dil = np.pad(dil, widths)
    eff = [(k - 1) * r + 1 if k else 0 for k, r in zip(win, rd)]
    out_sp = [max((p - e) // s + 1, 0) for p, e, s in zip(dil.shape[2:], eff, strides)]
    nb = n // bg
    out = np.zeros([nb, o, *out_sp])
    for b, oc in itertools.product(range(nb), range(o)):
        g, bb = oc // (o // fg), oc // (o // bg)
        for pos in itertools.product(*(range(m) for m in out_sp)):
            acc = 0.0
            for ic, ks in itertools.product(range(i), itertools.product(*map(range, win))):
                idx = tuple(p * s + k * r for p, s, k, r in zip(pos, strides, ks, rd))
                acc += dil[(bb * nb + b, g * i + ic, *idx)] * w[(oc, ic, *ks)]
            out[(b, oc, *pos)] = acc
    return out


@st.composite
def cases(draw):
    """Canonical operands plus random layouts (a permutation per operand)."""
    s = draw(st.integers(1, 2))
    fg, bg = draw(st.sampled_from([(1, 1), (2, 1), (3, 1), (1, 2), (1, 3)]))
    nb, cg, og = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    sp = [draw(st.integers(1, 4)) for _ in range(s)]
    win = [draw(st.integers(1, 3)) for _ in range(s)]
    strides = [draw(st.integers(1, 2)) for _ in range(s)]
    ld = [draw(st.integers(1, 2)) for _ in range(s)]
    rd = [draw(st.integers(1, 2)) for _ in range(s)]
    pads = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(s)]
    # crops never take an axis below 0 (that is an error, tested apart)
    pads = [(lo, max(hi, -((d - 1) * l + 1 + lo))) for (lo, hi), d, l in zip(pads, sp, ld)]
    perms = [tuple(draw(st.permutations(range(s + 2)))) for _ in range(3)]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.standard_normal([nb * bg, fg * cg, *sp])
    w = rng.standard_normal([fg * bg * og, cg, *win])
    return x, w, strides, pads, ld, rd, fg, bg, perms


def _valid(x, pads, ld):
    return all((d - 1) * l + 1 + lo + hi >= 0 for d, (lo, hi), l in zip(x.shape[2:], pads, ld))


def _layout(canonical, spec):
    """The array whose axes ``spec`` (batch, feature, spatial...) are ``canonical``'s."""
    return np.transpose(canonical, np.argsort(spec))


def _conv(perms, strides, pads, ld, rd, fg, bg):
    dn = lax.ConvDimensionNumbers(*perms)
    return lambda a, b: lax.conv_general_dilated(
        a, b, strides, pads, ld, rd, dn, feature_group_count=fg, batch_group_count=bg
    )


@settings(max_examples=25, deadline=None)
@given(cases())
def test_forward_any_layout_and_groups_against_loop(case):
    x, w, strides, pads, ld, rd, fg, bg, perms = case
    if not _valid(x, pads, ld):
        return
    want = _layout(conv_ref(x, w, strides, pads, ld, rd, fg, bg), perms[2])
    f = _conv(perms, strides, pads, ld, rd, fg, bg)
    xl, wl = _layout(x, perms[0]), _layout(w, perms[1])
    np.testing.assert_allclose(np.asarray(f(xl, wl)), want, rtol=1e-10, atol=1e-10)
    # the CPU library node (a compiled program) and the decomposition CUDA targets inline
    np.testing.assert_allclose(np.asarray(blu.jit(f)(xl, wl)), want, rtol=1e-10, atol=1e-10)
    eqn = blu.make_jaxpr(f)(xl, wl).jaxpr.eqns[-1]
    assert eqn.primitive is conv_general_dilated_p
    got = conv_im2col(xl, wl, **eqn.params)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10)


@settings(max_examples=20, deadline=None)
@given(cases())
def test_gradients_any_layout_and_groups(case):
    x, w, strides, pads, ld, rd, fg, bg, perms = case
    if not _valid(x, pads, ld):
        return
    f = _conv(perms, strides, pads, ld, rd, fg, bg)
    check_grads(f, [_layout(x, perms[0]), _layout(w, perms[1])], order=1, atol=1e-6, rtol=1e-6)


@settings(max_examples=15, deadline=None)
@given(cases(), st.sampled_from(["lhs", "rhs", "both"]), st.integers(0, 2))
def test_vmap_of_either_operand_against_loop(case, which, axis):
    x, w, strides, pads, ld, rd, fg, bg, perms = case
    if not _valid(x, pads, ld):
        return
    f = _conv(perms, strides, pads, ld, rd, fg, bg)
    xl, wl = _layout(x, perms[0]), _layout(w, perms[1])
    rng = np.random.default_rng(0)
    xs = np.stack([xl, xl + rng.standard_normal(xl.shape)], axis) if which != "rhs" else xl
    ws = np.stack([wl, wl + rng.standard_normal(wl.shape)], axis) if which != "lhs" else wl
    in_axes = (None if which == "rhs" else axis, None if which == "lhs" else axis)
    got = np.asarray(blu.vmap(f, in_axes=in_axes)(xs, ws))
    want = np.stack(
        [
            np.asarray(
                f(
                    xs if in_axes[0] is None else np.take(xs, k, axis),
                    ws if in_axes[1] is None else np.take(ws, k, axis),
                )
            )  # fmt: skip
            for k in range(2)
        ]
    )
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_cpu_runs_a_library_node_and_cuda_the_decomposition_unless_cudnn_is_on(set_flag):
    """CUDA inlines the decomposition with ``config.cudnn_conv`` off; with it on (the default),
    float32 is cuDNN's library node and float64 (which cuDNN does not take) the decomposition.
    The plan is a setting's, the same on any machine (no probe of cuDNN)."""
    for on in (False, True):
        set_flag("cudnn_conv", on)
        for dt in (np.float64, np.float32):
            x, w = np.ones((2, 6, 6, 3), dt), np.ones((3, 3, 3, 4), dt)
            jaxpr = blu.make_jaxpr(
                lambda a, b: lax.conv_general_dilated(
                    a, b, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
                )
            )(x, w).jaxpr
            kinds = {t: [n.kind.value for n in prepare(jaxpr, (False, False), t)[1].nodes]
                     for t in ("cpu", "cuda:sm_90")}  # fmt: skip
            assert kinds["cpu"] == ["library"]
            if on and dt == np.float32:  # the HWIO filter transposed for cuDNN first
                assert kinds["cuda:sm_90"] == ["kernel", "library"], kinds
            else:
                assert "dot" in kinds["cuda:sm_90"] and "library" not in kinds["cuda:sm_90"]


def test_gradient_jaxpr_is_convolutions_and_float32_tolerance():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 7, 7, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 6)).astype(np.float32)

    def loss(a, b):
        y = lax.conv_general_dilated(a, b, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO",
                                     "NHWC"), feature_group_count=2)  # fmt: skip
        return (y * y).sum()

    jaxpr = blu.make_jaxpr(blu.grad(loss, argnums=(0, 1)))(x, w)
    names = [e.primitive.name for e in jaxpr.jaxpr.eqns]
    assert names.count("conv_general_dilated") == 3 and "dot_general" not in names
    gx, gw = blu.jit(blu.grad(loss, argnums=(0, 1)))(x, w)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    rx, rw = blu.grad(loss, argnums=(0, 1))(x64, w64)
    np.testing.assert_allclose(np.asarray(gx), np.asarray(rx), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(rw), rtol=1e-4, atol=1e-3)


def test_group_count_errors_name_the_shapes():
    x, w = np.ones((4, 6, 5)), np.ones((6, 3, 2))
    with pytest.raises(BluValueError, match=r"f64\[4,6,5\].*C=6.*feature_group_count=4"):
        lax.conv_general_dilated(x, w, (1,), "VALID", feature_group_count=4)
    with pytest.raises(BluValueError, match="batch_group_count=3 must divide.*N=4"):
        lax.conv_general_dilated(x, np.ones((6, 6, 2)), (1,), "VALID", batch_group_count=3)
    with pytest.raises(BluValueError, match="at most one"):
        lax.conv_general_dilated(x, w, (1,), "VALID", feature_group_count=2, batch_group_count=2)
    with pytest.raises(BluValueError, match="crops"):
        lax.conv_general_dilated(x, np.ones((6, 6, 2)), (1,), [(-4, -3)])


@on_gpu
def test_conv_and_pooling_on_the_cuda_target_against_float64():
    """The im2col decomposition and reduce_window's decomposition in a CUDA program (the
    simulated GPU in CI), forward and gradients, against the float64 eager values."""
    import blu.nn as bnn

    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 6, 5, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 6)).astype(np.float32)

    def loss(a, b):
        y = lax.conv_general_dilated(a, b, (1, 2), "SAME", rhs_dilation=(2, 1),
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     feature_group_count=2)  # fmt: skip
        return (bnn.max_pool(y, (2, 2), (2, 1), "SAME") ** 2).sum() + bnn.avg_pool(y, (3, 1)).sum()

    dev = make_device()
    got = blu.jit(blu.value_and_grad(loss, argnums=(0, 1)))(*put(dev, x, w))
    want = blu.value_and_grad(loss, argnums=(0, 1))(x.astype(np.float64), w.astype(np.float64))
    np.testing.assert_allclose(float(np.asarray(got[0])), float(want[0]), rtol=1e-4)
    for g, r in zip(got[1], want[1]):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=2e-3, atol=2e-3)


def test_vmap_over_a_size_zero_axis_gives_empty_results():
    x, w = np.ones((2, 3, 5)), np.ones((4, 3, 2))
    conv = lambda a, b: lax.conv_general_dilated(a, b, (1,), "SAME")  # noqa: E731
    assert blu.vmap(conv, in_axes=(0, None))(np.ones((0, 2, 3, 5)), w).shape == (0, 2, 4, 5)
    assert blu.vmap(conv, in_axes=(None, 0))(x, np.ones((0, 4, 3, 2))).shape == (0, 2, 4, 5)


@pytest.mark.parametrize(
    "call, err",
    [
        (lambda l, r: lax.conv_general_dilated(l, r, 1, "SAME"), BluTypeError),
        (lambda l, r: lax.conv_general_dilated(l, r, (1,), None), BluTypeError),
        (lambda l, r: lax.conv_general_dilated(l, r, (1,), (1,)), BluTypeError),
        (lambda l, r: lax.conv_general_dilated(l, r, (1,), [(0, 0)], rhs_dilation=2), BluTypeError),
        (lambda l, r: lax.conv_general_dilated(l, r, (1,), [("a", 0)]), BluTypeError),
        (lambda l, r: lax.reduce_window(l, 0.0, lax.add, (1, 1, 2), 1, "VALID"), BluTypeError),
        (lambda l, r: lax.reduce_window(l, 0.0, lax.add, (1, 1, 2), (1, 1, 1), None), BluTypeError),
        (
            lambda l, r: lax.reduce_window(l, 0.0, lax.add, (1, 1, 2), (1, 1, 1), (0,) * 3),
            BluTypeError,
        ),
    ],
)
def test_window_arguments_of_the_wrong_type_are_blu_errors(call, err):
    # an int for a sequence, or pairs that are not pairs of ints, raised raw TypeErrors
    lhs, rhs = np.ones((1, 2, 5), np.float32), np.ones((3, 2, 2), np.float32)
    with pytest.raises(err, match="must be"):
        call(lhs, rhs)
