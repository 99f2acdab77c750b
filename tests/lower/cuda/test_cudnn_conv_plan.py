"""How ``blu.lower.cuda.convolution`` reads ``conv_general_dilated`` equations as cuDNN
problems (``fprop``/``dgrad``/``wgrad`` on strided views of the operands), checked on the CPU:
for the forward and both transposes of ``blu.grad`` over layouts, strides, dilations, padding and
feature groups, the recovered problem evaluated by an independent float64 reference (one-hot
"which input does this output and tap read" matrices, the gradients as the adjoint and the
partial of that definition) on the operands' memory must equal the primitive's impl.

The last tests run a jitted forward and gradient with the library node planned: on the
simulated GPU (``BLU_FAKE_GPU=1``: the lowering's numpy form of cuDNN) or on a real GPU with
cuDNN (marked ``gpu``).
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import FAKE, bf16, f32, make_device, on_gpu, plan_nodes, put
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
from blu.cuda import cudnn_conv
from blu.lax.convolution import conv_general_dilated_p as conv_p
from blu.lower.cuda import convolution as cv
from blu.lower.plan.nodes import NodeKind

LAYOUTS = {
    "nchw": None,
    "nhwc": ("NHWC", "HWIO", "NHWC"),
    "mixed": ("NHWC", "OIHW", "NCHW"),
}
LAYOUTS_1D = {"ncw": None, "nwc": ("NWC", "WIO", "NWC")}


# ---- the independent reference ----------------------------------------------------------------


def _taps(n: int, m: int, k: int, pre: int, s: int, d: int) -> np.ndarray:
    """``P[o, t, i] = 1`` when output ``o``'s tap ``t`` reads input ``i`` (``o*s + t*d - pre``;
    positions in the padding read nothing)."""
    p = np.zeros((m, k, n))
    for o in range(m):
        for t in range(k):
            i = o * s + t * d - pre
            if 0 <= i < n:
                p[o, t, i] = 1.0
    return p


def ref(spec: cudnn_conv.ConvSpec, x, w, y) -> np.ndarray:
    """What ``spec`` writes, in float64, from its two inputs (cuDNN's dims)."""
    sp = len(spec.x) - 2
    ins, outs, taps = "pqr"[:sp], "xyz"[:sp], "tuv"[:sp]
    g, (n, c), k = spec.groups, spec.x[:2], spec.w[0]
    mats = [_taps(*a) for a in zip(spec.x[2:], spec.y[2:], spec.w[2:], spec.pre, spec.stride,
                                   spec.dilation)]  # fmt: skip
    subs = [o + t + i for o, t, i in zip(outs, taps, ins)]
    if w is not None:
        w = np.asarray(w, np.float64).reshape(g, k // g, c // g, *spec.w[2:])
        if spec.flip:  # cuDNN's CONVOLUTION mode
            w = w[(Ellipsis, *[slice(None, None, -1)] * sp)]
    if x is not None:
        x = np.asarray(x, np.float64).reshape(n, g, c // g, *spec.x[2:])
    if y is not None:
        y = np.asarray(y, np.float64).reshape(n, g, k // g, *spec.y[2:])
    if spec.kind == "fprop":
        r = np.einsum(",".join(["ngc" + ins, "gkc" + taps, *subs]) + "->ngk" + outs, x, w, *mats)
        return r.reshape(spec.y)
    if spec.kind == "dgrad":
        r = np.einsum(",".join(["ngk" + outs, "gkc" + taps, *subs]) + "->ngc" + ins, y, w, *mats)
        return r.reshape(spec.x)
    r = np.einsum(",".join(["ngc" + ins, "ngk" + outs, *subs]) + "->gkc" + taps, x, y, *mats)
    if spec.flip:
        r = r[(Ellipsis, *[slice(None, None, -1)] * sp)]
    return r.reshape(spec.w)


def _view(a: np.ndarray, dims, strides) -> np.ndarray:
    a = np.ascontiguousarray(a).reshape(-1)
    return np.lib.stride_tricks.as_strided(a, dims, [s * a.itemsize for s in strides])


def check_problem(eqn, rng) -> str | None:
    """The kind of cuDNN problem the lowering prefers in ``eqn`` (None: none), after checking
    that each of its readings (``cv.specs``) reproduces the equation's impl on random float64
    operands."""
    avals = [v.aval for v in eqn.invars]
    found = cv.specs(avals, eqn.params)
    if not found:
        return None
    a, b = (rng.normal(size=v.shape) for v in avals)
    want = np.asarray(conv_p.impl(a, b, **eqn.params), np.float64)
    for spec in found:
        roles = {"fprop": "xwy", "dgrad": "ywx", "wgrad": "xyw"}[spec.kind]
        dims = {r: (getattr(spec, r), getattr(spec, r + "_strides")) for r in "xwy"}
        got = {roles[0]: _view(a, *dims[roles[0]]), roles[1]: _view(b, *dims[roles[1]]),
               roles[2]: None}  # fmt: skip
        out = ref(spec, got["x"], got["w"], got["y"])
        assert out.size == want.size, (spec, want.shape)  # the written view covers the output
        np.testing.assert_allclose(out, _view(want, *dims[roles[2]]), rtol=1e-12, atol=1e-12)
    return found[0].kind


def _conv_eqns(jaxpr) -> list:
    found = []
    for e in jaxpr.eqns:
        if e.primitive is conv_p:
            found.append(e)
        for v in e.params.values():
            inner = getattr(v, "jaxpr", v)
            if hasattr(inner, "eqns"):
                found += _conv_eqns(inner)
    return found


def _grad_eqns(xs, ws, strides, pads, rd, dn, fg, dtype=f32) -> list:
    """The forward, lhs-transpose and rhs-transpose equations of ``grad`` of a convolution."""
    x, w = np.zeros(xs, dtype), np.zeros(ws, dtype)
    f = lambda x, w: lax.conv_general_dilated(x, w, strides, pads, None, rd, dn, fg).sum()  # noqa: E731
    jaxpr = blu.make_jaxpr(blu.grad(f, argnums=(0, 1)))(x, w).jaxpr
    eqns = _conv_eqns(jaxpr)
    assert len(eqns) == 3, eqns
    vx, vw = jaxpr.invars
    fwd = [e for e in eqns if e.invars[0] is vx and e.invars[1] is vw]
    drhs = [e for e in eqns if e.invars[0] is vx and e not in fwd]
    dlhs = [e for e in eqns if e.invars[0] is not vx]
    assert len(fwd) == len(drhs) == len(dlhs) == 1, eqns
    return fwd + dlhs + drhs


def _shapes(layout: str, n, c, o, sp, win, fg) -> tuple[tuple, tuple]:
    dn = LAYOUTS.get(layout) or LAYOUTS_1D.get(layout)
    if dn is None:
        return (n, c, *sp), (o, c // fg, *win)
    lhs, rhs, _ = dn
    size = {"N": n, "C": c, "O": o, "I": c // fg}
    lx = tuple(size.get(ch) or sp[lhs.replace("N", "").replace("C", "").index(ch)] for ch in lhs)
    spatial = rhs.replace("O", "").replace("I", "")
    lw = tuple(size.get(ch) or win[spatial.index(ch)] for ch in rhs)
    return lx, lw


# ---- the classification ------------------------------------------------------------------------


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "strides,pads,rd",
    [((1, 1), "SAME", (1, 1)), ((2, 2), "SAME", (1, 1)), ((2, 3), "VALID", (1, 1)),
     ((2, 1), ((1, 0), (2, 1)), (1, 2)), ((3, 2), ((0, -1), (1, 3)), (2, 1))],
)  # fmt: skip
def test_grad_equations_read_as_fprop_dgrad_wgrad(layout, strides, pads, rd):
    rng = np.random.default_rng(0)
    xs, ws = _shapes(layout, 2, 4, 6, (9, 8), (3, 2), 1)
    fwd, dlhs, drhs = _grad_eqns(xs, ws, strides, pads, rd, LAYOUTS[layout], 1)
    assert check_problem(fwd, rng) == "fprop"
    assert check_problem(dlhs, rng) == ("dgrad" if max(strides) > 1 else "fprop")
    assert check_problem(drhs, rng) == "wgrad"


@pytest.mark.parametrize("layout", list(LAYOUTS_1D))
def test_one_dimensional_convolutions(layout):
    rng = np.random.default_rng(1)
    xs, ws = _shapes(layout, 2, 3, 5, (11,), (3,), 1)
    kinds = [check_problem(e, rng) for e in
             _grad_eqns(xs, ws, (2,), "SAME", (2,), LAYOUTS_1D[layout], 1)]  # fmt: skip
    assert kinds == ["fprop", "dgrad", "wgrad"]


def test_feature_groups():
    """Grouped convolutions: the forward and the kernel gradient always; the input gradient
    where the swapped kernel's out features are one stride (depthwise: one output per group)."""
    rng = np.random.default_rng(2)
    cases = [("nhwc", 4, 4, 4, True), ("nchw", 4, 4, 4, True), ("nchw", 4, 6, 2, False),
             ("nhwc", 6, 6, 3, False)]  # fmt: skip
    for layout, c, o, fg, dgrad in cases:
        xs, ws = _shapes(layout, 2, c, o, (7, 6), (3, 3), fg)
        fwd, dlhs, drhs = _grad_eqns(xs, ws, (2, 2), "SAME", (1, 1), LAYOUTS[layout], fg)
        assert check_problem(fwd, rng) == "fprop"
        assert check_problem(dlhs, rng) == ("dgrad" if dgrad else None), (layout, c, o, fg)
        assert check_problem(drhs, rng) == "wgrad"


@settings(max_examples=80, deadline=None)
@given(
    layout=st.sampled_from(list(LAYOUTS)),
    n=st.integers(1, 2),
    cg=st.integers(1, 3),
    og=st.integers(1, 3),
    fg=st.sampled_from([1, 1, 2]),
    sp=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    win=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    strides=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    rd=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    pads=st.one_of(st.sampled_from(["SAME", "VALID"]),
                   st.tuples(*[st.tuples(st.integers(-1, 2), st.integers(-2, 2))] * 2)),
    seed=st.integers(0, 2**16),
)  # fmt: skip
def test_recovered_problems_match_the_impl(layout, n, cg, og, fg, sp, win, strides, rd, pads,
                                           seed):  # fmt: skip
    """Whatever the lowering reads reproduces the equation; and the plain cases are read."""
    eff = [(k - 1) * d + 1 for k, d in zip(win, rd)]
    if isinstance(pads, str):
        padded = sp if pads == "VALID" else [s + k for s, k in zip(sp, eff)]
    else:
        padded = [s + lo + hi for s, (lo, hi) in zip(sp, pads)]
    if any(p < k for p, k in zip(padded, eff)):
        return  # an empty output: no cuDNN problem
    rng = np.random.default_rng(seed)
    xs, ws = _shapes(layout, n, cg * fg, og * fg, sp, win, fg)
    fwd, dlhs, drhs = _grad_eqns(xs, ws, strides, pads, rd, LAYOUTS[layout], fg)
    kinds = [check_problem(e, rng) for e in (fwd, dlhs, drhs)]
    low_crop = not isinstance(pads, str) and min(lo for lo, _ in pads) < 0
    if not low_crop:
        # without groups either reading holds for a window as large as the output
        either = ("fprop", "wgrad")
        assert kinds[0] in (either if fg == 1 else ("fprop",)), kinds
        assert kinds[2] in (either if fg == 1 else ("wgrad",)), kinds


def test_not_taken():
    """float64, an input dilation with strides (no cuDNN problem), and an empty output."""
    f64 = np.zeros((1, 2, 5, 5)), np.zeros((3, 2, 3, 3))
    e = _conv_eqns(blu.make_jaxpr(lambda x, w: lax.conv(x, w, (1, 1), "SAME"))(*f64).jaxpr)[0]
    assert cv.read([v.aval for v in e.invars], e.params) is None
    x, w = np.zeros((1, 2, 5, 5), f32), np.zeros((3, 2, 3, 3), f32)
    both = lambda x, w: lax.conv_general_dilated(x, w, (2, 2), "SAME", (2, 2))  # noqa: E731
    e = _conv_eqns(blu.make_jaxpr(both)(x, w).jaxpr)[0]
    assert cv.read([v.aval for v in e.invars], e.params) is None
    assert "float64" in cudnn_conv.unsupported(
        cudnn_conv.ConvSpec("fprop", (1, 2, 5, 5), (50, 25, 5, 1), (3, 2, 3, 3), (18, 9, 3, 1),
                            (1, 3, 3, 3), (27, 9, 3, 1), (0, 0), (0, 0), (1, 1), (1, 1),
                            "float64", "float64")
    )  # fmt: skip


def test_the_executables_precision_picks_the_engine_and_its_workspace(monkeypatch):
    """A float32 convolution runs on TF32 engines under a TF32 precision only, the executable's
    (``problem``'s ``precision``; the call gets it as ``_precision``), and the plan's workspace is
    that engine's alone: the plan is made under the executable's precision
    (``CudaBackend.prepare``), whatever the configuration says then. (Sized for both settings,
    a strict engine's workspace was planned into every TF32 ResNet-50 step: 2.3 GiB on an H100.)
    cuDNN's workspace query is a stand-in here (no GPU): 1 KiB for TF32 engines, 5 KiB else."""
    from blu.core.config import config
    from blu.lower.backend import backend_for
    from blu.lower.cuda.options import CudaOptions

    x, w = np.zeros((2, 9, 9, 8), f32), np.zeros((16, 3, 3, 8), f32)  # channels-last: native

    def f(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "OHWI", "NHWC"))  # fmt: skip

    jaxpr = blu.make_jaxpr(f)(x, w).jaxpr
    e = _conv_eqns(jaxpr)[0]
    avals = [v.aval for v in e.invars]
    assert cv.problem(avals, e.params, "tf32").tf32
    assert not cv.problem(avals, e.params, "float32").tf32
    monkeypatch.setattr(cv, "fake_gpu", lambda: False)
    monkeypatch.setattr(cudnn_conv, "available", lambda: True)
    monkeypatch.setattr(cudnn_conv, "workspace_size", lambda sp: 1024 if sp.tf32 else 5120)
    backend = backend_for((), "cuda:sm_90")
    for precision, want in [("tf32", 1024), ("float32", 5120)]:
        other = "float32" if precision == "tf32" else "tf32"
        with config.override(default_matmul_precision=other, cudnn_conv=True):
            plan = backend.prepare(jaxpr, (False, False), CudaOptions.from_config(precision)).plan
        (node,) = [n for n in plan.nodes if n.kind == NodeKind.LIBRARY]
        assert node.workspace == want, precision


# ---- jit on the (simulated) GPU ----------------------------------------------------------------


@on_gpu
@pytest.mark.parametrize("dt", [f32, bf16], ids=["f32", "bf16"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_jit_forward_and_gradients_run_as_cudnn(layout, dt, set_flag):
    if not FAKE and not cudnn_conv.available():
        pytest.skip("needs cudnn-frontend on a real GPU")
    set_flag("cudnn_conv", True)  # (the default; BLU_CUDNN_CONV=0 may have turned it off)
    dev = make_device()
    rng = np.random.default_rng(3)
    xs, ws = _shapes(layout, 2, 8, 16, (10, 9), (3, 3), 1)
    dn = LAYOUTS[layout]
    x, w = rng.normal(size=xs).astype(dt), rng.normal(size=ws).astype(dt)
    probe = lax.conv_general_dilated(np.zeros(xs, f32), np.zeros(ws, f32), (2, 2), "SAME",
                                     dimension_numbers=dn)  # fmt: skip
    ct = rng.normal(size=np.shape(probe)).astype(dt)

    def f(x, w, ct):
        y = lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=dn)
        return (y.astype(f32) * ct.astype(f32)).sum(), y

    g = lambda x, w, ct: (blu.grad(lambda a, b: f(a, b, ct)[0], argnums=(0, 1))(x, w),  # noqa: E731
                          f(x, w, ct)[1])  # fmt: skip
    libs = [n for n in plan_nodes(g, x, w, ct) if n.kind == NodeKind.LIBRARY]
    assert len(libs) >= 3, libs  # the forward and both gradients
    (dx, dw), y = blu.jit(g)(*put(dev, x, w, ct))
    eqns = _grad_eqns(xs, ws, (2, 2), "SAME", (1, 1), dn, 1, dt)
    spec = cv.read([v.aval for v in eqns[0].invars], eqns[0].params)
    flat = lambda a, r: _view(a, getattr(spec, r), getattr(spec, r + "_strides"))  # noqa: E731
    X, Wt, C = flat(x.astype(np.float64), "x"), flat(w.astype(np.float64), "w"), \
        flat(ct.astype(np.float64), "y")  # fmt: skip
    tol = 2e-2 if dt == bf16 else 1e-4
    for got, kind, args, role in ((y, "fprop", (X, Wt, None), "y"),
                                  (dx, "dgrad", (None, Wt, C), "x"),
                                  (dw, "wgrad", (X, None, C), "w")):  # fmt: skip
        want = ref(cudnn_conv.ConvSpec(**{**spec.__dict__, "kind": kind}), *args)
        got = flat(np.asarray(got).astype(np.float64), role)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_no_spatial_axes():
    """A rank-2 convolution (a product) gets unit spatial axes."""
    rng = np.random.default_rng(4)
    kinds = [check_problem(e, rng) for e in _grad_eqns((3, 4), (5, 4), (), "VALID", (), None, 1)]
    assert kinds[0] == "fprop" and None not in kinds, kinds


@pytest.mark.parametrize("dn", [None, ("NDHWC", "DHWIO", "NDHWC")], ids=["ncdhw", "ndhwc"])
def test_three_dimensional_convolutions(dn):
    rng = np.random.default_rng(5)
    if dn is None:
        xs, ws = (2, 3, 5, 6, 4), (4, 3, 2, 3, 2)
    else:
        xs, ws = (2, 5, 6, 4, 3), (2, 3, 2, 3, 4)
    eqns = _grad_eqns(xs, ws, (2, 1, 2), "SAME", (1, 2, 1), dn, 1)
    assert [check_problem(e, rng) for e in eqns] == ["fprop", "dgrad", "wgrad"]
