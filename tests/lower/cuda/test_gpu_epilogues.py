"""cuBLASLt epilogues in CUDA programs (``blu.lower.cuda.epilogues``): which products the plan
fuses with their bias and tanh GELU (``GELU_AUX_BIAS``), the fused primitive's arithmetic against
float64, the library call's operand mapping through the cuBLASLt stand-in, and a jitted MLP
layer's value and gradients against the unfused program (on the GPU, or ``BLU_FAKE_GPU=1``)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import GPU_MARKS, bf16, f32, f64, make_device, put
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.cuda as bc
import blu.numpy as bnp
from blu import nn
from blu.core import pytree
from blu.cuda.cublaslt import gelu_tanh, gelu_tanh_grad
from blu.cuda.fake import FakeDevice
from blu.lower.cuda import epilogues
from blu.lower.cuda.epilogues import dot_acc_p, dot_bias_gelu_p, dot_bias_p, dot_dgelu_p

TOL = {np.dtype(f32): 2e-5, np.dtype(bf16): 2e-2}


def _mlp(dt):
    def f(x, w, b):
        h = x.astype(dt) @ w.astype(dt) + b.astype(dt)
        return nn.gelu(h, approximate=True)

    return f


def _labels(f, *args) -> list[str]:
    text = blu.jit(f).lower(*args, target="cuda:sm_90").as_text()
    return [ln.split(": ", 1)[1] for ln in text.splitlines() if ln.startswith("//   ")]


def _args(rng, m=6, k=16, n=32, lead=(2,)):
    x = rng.standard_normal((*lead, m, k)).astype(f32)
    return x, (rng.standard_normal((k, n)) * 0.3).astype(f32), rng.standard_normal(n).astype(f32)


def _read_twice(x, w, b):
    h = x @ w
    return nn.gelu(h + b, approximate=True) + h


# ---- which programs are rewritten ---------------------------------------------------------------


def test_mlp_layer_and_its_gradient_use_the_epilogue():
    dt = bf16
    args = _args(np.random.default_rng(0))
    loss = lambda x, w, b: (_mlp(dt)(x, w, b).astype(f32) ** 2).sum()  # noqa: E731
    for f in (_mlp(dt), blu.value_and_grad(loss, (0, 1, 2))):
        labels = _labels(f, *args)
        assert "library[dot_bias_gelu]" in labels, labels
    # the second layer's backward product takes the GELU's derivative as its epilogue
    loss2 = lambda x, w, b, w2: ((_mlp(dt)(x, w, b) @ w2.astype(dt)).astype(f32) ** 2).sum()  # noqa: E731
    w2 = np.ones((32, 16), f32)
    labels = _labels(blu.value_and_grad(loss2, (0, 1, 2, 3)), *args, w2)
    assert "library[dot_dgelu]" in labels, labels
    with blu.config.override(gpu_epilogues=False):
        plain = _labels(blu.value_and_grad(loss2, (0, 1, 2, 3)), *args, w2)
    assert "library[dot_dgelu]" not in plain


def test_gelu_as_a_kernel_after_a_bias_product():
    # BLU_GPU_GELU_AUX=0: the product and bias are a BIAS call, the GELU a kernel reading its
    # result, the backward's product still takes the derivative at that result (DGELU)
    args = _args(np.random.default_rng(0))
    w2 = np.ones((32, 16), f32)
    loss2 = lambda x, w, b, w2: ((_mlp(bf16)(x, w, b) @ w2.astype(bf16)).astype(f32) ** 2).sum()  # noqa: E731
    with blu.config.override(gpu_gelu_aux=False):
        labels = _labels(blu.value_and_grad(loss2, (0, 1, 2, 3)), *args, w2)
    assert "library[dot_bias_gelu]" not in labels, labels
    assert "library[dot_bias]" in labels and "library[dot_dgelu]" in labels, labels
    # the forward's bias product writes the pre-activation the GELU kernel and DGELU read
    prog = blu.jit(blu.value_and_grad(loss2, (0, 1, 2, 3))).lower(*args, w2, target="cuda:sm_90")
    assert "library[dot_bias_gelu]" in [
        ln.split(": ", 1)[1] for ln in prog.as_text().splitlines() if ln.startswith("//   ")
    ]  # (the option is read when lowering: the default program keeps the epilogue)


def _two_layers(dt):  # a linear layer whose sum only the next product reads
    def f(x, w, b, w2):
        h = x.astype(dt) @ w.astype(dt) + b.astype(dt)
        return ((h @ w2.astype(dt)).astype(f32) ** 2).sum()

    return f


@pytest.mark.parametrize("dt", [f32, bf16])
def test_bias_epilogue_where_no_kernel_reads_the_sum(dt):
    x, w, b = _args(np.random.default_rng(7))
    w2 = np.ones((32, 16), f32)
    labels = _labels(_two_layers(dt), x, w, b, w2)
    assert "library[dot_bias]" in labels, labels

    def read_by_a_kernel(x, w, b, w2):  # the sum is squared: the add stays fused there
        h = x.astype(dt) @ w.astype(dt) + b.astype(dt)
        return ((h * h) @ w2.astype(dt)).astype(f32).sum()

    assert "library[dot_bias]" not in _labels(read_by_a_kernel, x, w, b, w2)
    with blu.config.override(gpu_epilogues=False):
        assert "library[dot_bias]" not in _labels(_two_layers(dt), x, w, b, w2)


def test_derivative_epilogue_needs_a_private_product():
    args = _args(np.random.default_rng(5))
    w2 = np.ones((32, 16), f32)

    def loss(x, w, b, w2):  # the cotangent of the GELU is a product plus another term
        a = _mlp(bf16)(x, w, b)
        return ((a @ w2.astype(bf16)).astype(f32) ** 2).sum() + (a.astype(f32) ** 3).sum()

    labels = _labels(blu.value_and_grad(loss, (0, 1, 2, 3)), *args, w2)
    assert "library[dot_bias_gelu]" in labels and "library[dot_dgelu]" not in labels, labels


def test_what_is_not_rewritten():
    rng = np.random.default_rng(1)
    x, w, b = (a.astype(bf16) for a in _args(rng))
    cases = {
        "float32": (_mlp(f32), (x, w, b)),
        "exact GELU": (lambda x, w, b: nn.gelu(x @ w + b, approximate=False), (x, w, b)),
        "no bias": (lambda x, w, b: nn.gelu(x @ w, approximate=True), (x, w, b)),
        "bias on another axis": (lambda x, w, c: nn.gelu(x @ w + c, approximate=True),
                                 (x, w, rng.standard_normal((6, 1)).astype(bf16))),
        "N not a multiple of 8": (_mlp(bf16), _args(rng, n=12)),
        "product read twice": (_read_twice, (x, w, b)),
    }  # fmt: skip
    for what, (f, a) in cases.items():
        assert "library[dot_bias_gelu]" not in _labels(f, *a), what
    with blu.config.override(gpu_epilogues=False):
        assert "library[dot_bias_gelu]" not in _labels(_mlp(bf16), x, w, b)


def _chunked_weight_grad(h, z):
    # a chunked classifier's weight gradient: acc + h_i^T z_i over row chunks (float32 result of
    # bfloat16 operands); the first product is read by the sum with the second
    acc = None
    for i in range(0, h.shape[0], 4):
        d = blu.lax.dot_general(h[i : i + 4].astype(bf16), z[i : i + 4].astype(bf16),
                                (((0,), (0,)), ((), ())), preferred_element_type=f32)  # fmt: skip
        acc = d if acc is None else acc + d
    return acc


def test_products_added_to_a_value_take_it_as_c():
    rng = np.random.default_rng(9)
    h, z = rng.standard_normal((16, 16)).astype(f32), rng.standard_normal((16, 24)).astype(f32)
    labels = _labels(_chunked_weight_grad, h, z)
    # four chunks: the second, third and fourth products add the running sum in the product
    assert labels.count("library[dot_acc]") == 3, labels
    # and the third writes its sum over the second's, which nothing reads later (in place; the
    # fourth's is the program's result, a buffer of its own)
    prog = blu.jit(_chunked_weight_grad).lower(h, z, target="cuda:sm_90")._program
    accs = [n for n in prog.plan.nodes if n.label() == "library[dot_acc]"]
    place = lambda v: prog.memory.place[prog.memory.root[v]]  # noqa: E731
    assert place(accs[1].outputs[0]) == place(accs[1].eqns[0].invars[2])
    assert not any("add" in x for x in labels if x.startswith("kernel")), labels  # no sum kernel
    x, w, c = rng.standard_normal((6, 16)), rng.standard_normal((16, 8)), rng.standard_normal(8)
    cases = {
        "read twice": lambda x, w, c: (x @ w) + (x @ w) * c,
        "c broadcast (a bias)": lambda x, w, c: x @ w + c,
        "batched": lambda x, w, c: bnp.einsum("bij,bjk->bik", x, w) + c,
    }  # fmt: skip
    for what, f in cases.items():
        args = (x[None], w[None], np.ones((1, 6, 8))) if what == "batched" else (x, w, c)
        assert "library[dot_acc]" not in _labels(f, *args), what
    with blu.config.override(gpu_epilogues=False):
        assert "library[dot_acc]" not in _labels(_chunked_weight_grad, h, z)


def test_the_cpu_program_is_not_rewritten():
    text = blu.jit(_mlp(bf16)).lower(*_args(np.random.default_rng(2)), target="cpu").as_text()
    assert "dot_bias_gelu" not in text


# ---- the fused primitive's arithmetic -----------------------------------------------------------


def _reference(x, w, b):
    pre = x.astype(f64) @ w.astype(f64) + b.astype(f64)
    return gelu_tanh(pre), pre


@settings(max_examples=20, deadline=None)
@given(m=st.integers(0, 9), k=st.integers(1, 17), n8=st.integers(1, 4),
       dt=st.sampled_from([f32, bf16]), seed=st.integers(0, 2**16))  # fmt: skip
def test_primitive_against_float64(m, k, n8, dt, seed):
    rng = np.random.default_rng(seed)
    x, w, b = (a.astype(dt) for a in _args(rng, m, k, 8 * n8, lead=()))
    dn = (((1,), (0,)), ((), ()))
    a, pre = dot_bias_gelu_p.impl(x, w, b, dimension_numbers=dn, precision=None,
                                  preferred_element_type=None)  # fmt: skip
    want_a, want_pre = _reference(x, w, b)
    tol = TOL[np.dtype(dt)]
    assert a.dtype == pre.dtype == np.dtype(dt) and a.shape == (m, 8 * n8)
    np.testing.assert_allclose(pre.astype(f64), want_pre, rtol=tol, atol=tol)
    np.testing.assert_allclose(a.astype(f64), want_a, rtol=tol, atol=tol)


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 9), k=st.integers(2, 17), n8=st.integers(1, 4),
       dt=st.sampled_from([f32, bf16]), seed=st.integers(0, 2**16))  # fmt: skip
def test_derivative_primitive_against_float64(m, k, n8, dt, seed):
    rng = np.random.default_rng(seed)
    g, w = (rng.standard_normal(s).astype(dt) for s in ((m, k), (k, 8 * n8)))
    aux = (rng.standard_normal((m, 8 * n8)) * 3).astype(dt)
    aux[0, 0] = 30.0  # far in the tail: the derivative is 1 (no overflow of x^3)
    dn = (((1,), (0,)), ((), ()))
    got = dot_dgelu_p.impl(g, w, aux, dimension_numbers=dn, precision=None,
                           preferred_element_type=None)  # fmt: skip
    x = aux.astype(f64)
    u = np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)
    th = np.tanh(u)  # sech^2 = 1 - tanh^2
    d = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x**2)
    want = (g.astype(f64) @ w.astype(f64)) * d
    tol = TOL[np.dtype(dt)]
    assert got.dtype == np.dtype(dt) and got.shape == want.shape
    np.testing.assert_allclose(got.astype(f64), want, rtol=tol, atol=tol * np.abs(want).max())


@settings(max_examples=20, deadline=None)
@given(m=st.integers(0, 9), k=st.integers(1, 17), n=st.integers(1, 33),
       dt=st.sampled_from([f32, bf16]), seed=st.integers(0, 2**16))  # fmt: skip
def test_bias_primitive_against_float64(m, k, n, dt, seed):
    rng = np.random.default_rng(seed)
    x, w, b = (rng.standard_normal(s).astype(dt) for s in ((m, k), (k, n), (n,)))
    got = dot_bias_p.impl(x, w, b, dimension_numbers=(((1,), (0,)), ((), ())), precision=None,
                          preferred_element_type=None)  # fmt: skip
    want = x.astype(f64) @ w.astype(f64) + b.astype(f64)
    tol = TOL[np.dtype(dt)]
    assert got.dtype == np.dtype(dt) and got.shape == (m, n)
    np.testing.assert_allclose(got.astype(f64), want, rtol=tol, atol=tol)


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 9), k=st.integers(1, 17), n=st.integers(1, 33),
       dt=st.sampled_from([f32, bf16]), seed=st.integers(0, 2**16))  # fmt: skip
def test_acc_primitive_against_float64(m, k, n, dt, seed):
    rng = np.random.default_rng(seed)
    x, w, c = (rng.standard_normal(s).astype(dt) for s in ((m, k), (k, n), (m, n)))
    got = dot_acc_p.impl(x, w, c, dimension_numbers=(((1,), (0,)), ((), ())), precision=None,
                         preferred_element_type=None)  # fmt: skip
    want = x.astype(f64) @ w.astype(f64) + c.astype(f64)
    tol = TOL[np.dtype(dt)]
    assert got.dtype == np.dtype(dt) and got.shape == (m, n)
    np.testing.assert_allclose(got.astype(f64), want, rtol=tol, atol=tol * (1 + np.abs(want).max()))


def test_acc_call_reads_c_and_writes_another_buffer():
    dev = FakeDevice()
    rng = np.random.default_rng(10)
    x, w, c = (rng.standard_normal(s).astype(f32) for s in ((5, 7), (7, 12), (5, 12)))
    dx, dw, dc = put(dev, x, w, c)
    out = bc.DeviceArray.empty((5, 12), f32, dev)
    avals = [blu.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, w, c)]
    epilogues._acc_gpu(dev, 0, [dx.ptr, dw.ptr, dc.ptr], [out.ptr], 0, avals,
                       [blu.ShapeDtypeStruct((5, 12), f32)],
                       dimension_numbers=(((1,), (0,)), ((), ())), precision=None,
                       preferred_element_type=None)  # fmt: skip
    want = x.astype(f64) @ w.astype(f64) + c.astype(f64)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(dc), c)  # C is read, not written


def test_bias_call_maps_operands_for_cublaslt():
    dev = FakeDevice()
    rng = np.random.default_rng(8)
    x, w, b = _args(rng, m=5, k=7, n=12, lead=(3,))
    dx, dw, db = put(dev, x, w, b)
    out = bc.DeviceArray.empty((3, 5, 12), f32, dev)
    avals = [blu.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, w, b)]
    epilogues._bias_gpu(dev, 0, [dx.ptr, dw.ptr, db.ptr], [out.ptr], 0, avals,
                        [blu.ShapeDtypeStruct((3, 5, 12), f32)],
                        dimension_numbers=(((2,), (0,)), ((), ())), precision=None,
                        preferred_element_type=None)  # fmt: skip
    want = x.astype(f64) @ w.astype(f64) + b.astype(f64)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)


def test_library_call_maps_operands_for_cublaslt():
    # the GPU call through the cuBLASLt stand-in (float64 arithmetic on host memory): operands
    # swapped for the column-major library, bias per output column, the aux matrix = pre
    dev = FakeDevice()
    rng = np.random.default_rng(3)
    x, w, b = _args(rng, m=5, k=7, n=16, lead=(3,))
    dx, dw, db = put(dev, x, w, b)
    outs = [bc.DeviceArray.empty((3, 5, 16), f32, dev) for _ in range(2)]
    dn = (((2,), (0,)), ((), ()))
    avals = [blu.ShapeDtypeStruct(a.shape, a.dtype) for a in (x, w, b)]
    out_avals = [blu.ShapeDtypeStruct((3, 5, 16), f32)] * 2
    epilogues._gpu(dev, 0, [dx.ptr, dw.ptr, db.ptr], [o.ptr for o in outs], 0, avals, out_avals,
                   dimension_numbers=dn, precision=None, preferred_element_type=None)  # fmt: skip
    want_a, want_pre = _reference(x, w, b)
    np.testing.assert_allclose(np.asarray(outs[0]), want_a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(outs[1]), want_pre, rtol=1e-5, atol=1e-6)


def test_derivative_call_maps_operands_for_cublaslt():
    dev = FakeDevice()
    rng = np.random.default_rng(6)
    g, w = rng.standard_normal((3, 5, 7)).astype(f32), rng.standard_normal((16, 7)).astype(f32)
    aux = rng.standard_normal((3, 5, 16)).astype(f32)
    dg, dw, da = put(dev, g, w, aux)
    out = bc.DeviceArray.empty((3, 5, 16), f32, dev)
    dn = (((2,), (1,)), ((), ()))  # g @ w.T: the backward of a layer whose weight is (16, 7)
    avals = [blu.ShapeDtypeStruct(a.shape, a.dtype) for a in (g, w, aux)]
    epilogues._dgelu_gpu(dev, 0, [dg.ptr, dw.ptr, da.ptr], [out.ptr], 0, avals,
                         [blu.ShapeDtypeStruct((3, 5, 16), f32)], dimension_numbers=dn,
                         precision=None, preferred_element_type=None)  # fmt: skip
    x = aux.astype(f64)
    want = np.einsum("bmk,nk->bmn", g.astype(f64), w.astype(f64)) * gelu_tanh_grad(x)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)


# ---- a jitted layer on the device ---------------------------------------------------------------


@GPU_MARKS[0]
@GPU_MARKS[1]
@pytest.mark.parametrize("dt,gelu_aux", [(bf16, True), (f32, True), (bf16, False)])
def test_jitted_mlp_value_and_gradients_match_the_unfused_program(dt, gelu_aux):
    dev = make_device()
    rng = np.random.default_rng(4)
    x, w, b = _args(rng, m=64, k=48, n=96, lead=(2,))
    w2 = (rng.standard_normal((96, 24)) * 0.2).astype(f32)

    def loss(x, w, b, w2):
        return ((_mlp(dt)(x, w, b) @ w2.astype(dt)).astype(f32) ** 2).mean()

    for f in (loss, _two_layers(dt)):  # GELU_AUX_BIAS and DGELU; BIAS
        step = blu.value_and_grad(f, (0, 1, 2, 3))
        with blu.config.override(gpu_gelu_aux=gelu_aux):
            got = pytree.tree_leaves(blu.jit(step)(*put(dev, x, w, b, w2)))
        with blu.config.override(gpu_epilogues=False):
            want = pytree.tree_leaves(blu.jit(step)(*put(dev, x, w, b, w2)))
        tol = TOL[np.dtype(dt)] * (5 if dt == bf16 else 10)
        for g, r in zip(got, want):
            g, r = np.asarray(g, f64), np.asarray(r, f64)
            np.testing.assert_allclose(g, r, rtol=tol, atol=tol * np.max(np.abs(r)))


@GPU_MARKS[0]
@GPU_MARKS[1]
def test_jitted_chunked_weight_gradient_matches_float64():
    dev = make_device()
    rng = np.random.default_rng(11)
    h, z = rng.standard_normal((64, 48)).astype(f32), rng.standard_normal((64, 40)).astype(f32)
    got = np.asarray(blu.jit(_chunked_weight_grad)(*put(dev, h, z)), f64)
    hb, zb = (a.astype(bf16).astype(f64) for a in (h, z))  # the products' bfloat16 operands
    np.testing.assert_allclose(got, hb.T @ zb, rtol=1e-5, atol=1e-5 * np.abs(hb.T @ zb).max())
