"""cuBLASLt products on the CPU: ``gemm_spec`` (dot_general -> one column-major cuBLASLt call on
row-major operands, transposes folded in), plan caching, precisions and epilogues, run end to end
through ``blu.cuda.products.dot_general`` on a simulated device whose cuBLASLt stand-in
(``FakeCublasLt``) reads the descriptors and layouts as cuBLASLt does and computes in float64.
The same calls against the real library are in test_cuda_gpu.py."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.cuda as bc
from blu.core.errors import BluShapeError, BluTypeError, BluValueError
from blu.cuda import cublaslt as lt
from blu.cuda.fake import FakeDevice
from blu.cuda.products import dot_general


def ref_dot_general(lhs, rhs, dn):
    """float64 numpy dot_general: (batch, free, contract) @ (batch, contract, free)."""
    (lc, rc), (lb, rb) = dn
    lf = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    size = lambda x, ax: int(np.prod([x.shape[a] for a in ax], dtype=np.int64))  # noqa: E731
    B, M, N, K = size(lhs, lb), size(lhs, lf), size(rhs, rf), size(lhs, lc)
    l3 = np.transpose(lhs, tuple(lb) + tuple(lf) + tuple(lc)).astype(np.float64).reshape(B, M, K)
    r3 = np.transpose(rhs, tuple(rb) + tuple(rc) + tuple(rf)).astype(np.float64).reshape(B, K, N)
    shape = [lhs.shape[d] for d in lb] + [lhs.shape[d] for d in lf] + [rhs.shape[d] for d in rf]
    return (l3 @ r3).reshape(shape)


@st.composite
def dot_problems(draw):
    """Shapes and dimension numbers cuBLASLt can run without copies: leading batch dims, each
    operand's contracting dims first or last, sizes 0-3."""
    nb, nl, nr, nc = (draw(st.integers(0, 2)) for _ in range(4))
    sizes = lambda n: draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))  # noqa: E731
    bs, ls, rs, cs = sizes(nb), sizes(nl), sizes(nr), sizes(nc)
    l_cfirst, r_cfirst = draw(st.booleans()), draw(st.booleans())
    lhs_shape = bs + (cs + ls if l_cfirst else ls + cs)
    rhs_shape = bs + (cs + rs if r_cfirst else rs + cs)
    lc = tuple(range(nb, nb + nc)) if l_cfirst else tuple(range(nb + nl, nb + nl + nc))
    rc = tuple(range(nb, nb + nc)) if r_cfirst else tuple(range(nb + nr, nb + nr + nc))
    batch = tuple(range(nb))
    return tuple(lhs_shape), tuple(rhs_shape), ((lc, rc), (batch, batch))


@settings(max_examples=max(settings().max_examples, 60))  # cheap: ~5 ms an example
@given(dot_problems(), st.sampled_from(["float32", "float64", "bfloat16", "float16"]))
def test_dot_general_through_cublaslt_calls(problem, dtype):
    lhs_shape, rhs_shape, dn = problem
    spec = lt.gemm_spec(lhs_shape, rhs_shape, dn)
    assert spec is not None
    rng = np.random.default_rng(len(lhs_shape) * 7 + len(rhs_shape))
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    lhs = rng.standard_normal(lhs_shape).astype(dt)
    rhs = rng.standard_normal(rhs_shape).astype(dt)
    out_dt = np.float32 if dtype in ("bfloat16", "float16") else dt
    dev = FakeDevice()
    out = dot_general(
        bc.device_put(lhs, dev), bc.device_put(rhs, dev), dn, preferred_element_type=out_dt
    )
    ref = ref_dot_general(lhs, rhs, dn)
    got = np.asarray(out)
    assert got.shape == ref.shape and got.dtype == out_dt
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # no operand was copied: one cuBLASLt product (or none for empty outputs / empty K)
    nonempty = spec.batch * spec.m * spec.n * spec.k
    calls = [c[0] for c in dev.matmul_handle().lib.calls] if nonempty else []
    assert calls.count("matmul") == (1 if calls else 0)


@pytest.mark.parametrize(
    "lhs_shape, rhs_shape, dn",
    [
        ((3, 4), (4, 5), (((0,), (0,)), ((), ()))),  # contracting lhs dim 0 of 2 with size 3 != 4
        ((2, 3, 4), (3, 4, 5), (((2,), (1,)), ((0,), (0,)))),  # batch sizes differ
    ],
)
def test_gemm_spec_rejects_mismatched_sizes(lhs_shape, rhs_shape, dn):
    with pytest.raises(BluShapeError):
        lt.gemm_spec(lhs_shape, rhs_shape, dn)


@pytest.mark.parametrize(
    "lhs_shape, rhs_shape, dn",
    [
        ((4, 2, 3), (2, 3, 5), (((2,), (1,)), ((1,), (0,)))),  # batch dim not leading in lhs
        ((3, 2, 4), (3, 4, 5), (((0, 2), (0, 1)), ((), ()))),  # lhs contracting dims apart
        ((3, 4, 5), (4, 3, 6), (((0, 1), (1, 0)), ((), ()))),  # contracting orders disagree
        ((2, 3, 4), (2, 4, 5), (((2,), (1,)), ((), ()))),  # rhs free dims 0 and 2 apart
    ],
)
def test_gemm_spec_none_when_a_copy_is_needed(lhs_shape, rhs_shape, dn):
    assert lt.gemm_spec(lhs_shape, rhs_shape, dn) is None
    dev = FakeDevice()
    with pytest.raises(BluValueError, match="without a copy"):
        dot_general(
            bc.device_put(np.ones(lhs_shape, np.float32), dev),
            bc.device_put(np.ones(rhs_shape, np.float32), dev),
            dn,
        )


def test_gemm_spec_row_major_mapping():
    # x (M=2, K=3) @ w (K=3, N=5): cuBLAS A = w (col-major 5x3), B = x (col-major 3x2)
    s = lt.gemm_spec((2, 3), (3, 5), (((1,), (0,)), ((), ())))
    assert (s.m, s.n, s.k, s.trans_a, s.trans_b) == (5, 2, 3, False, False)
    assert (s.a_rows, s.a_cols, s.lda, s.b_rows, s.b_cols, s.ldb, s.ldd) == (5, 3, 5, 3, 2, 3, 5)
    # x @ w.T with w stored (N=5, K=3): TRANSA, no copy
    s = lt.gemm_spec((2, 3), (5, 3), (((1,), (1,)), ((), ())))
    assert (s.trans_a, s.trans_b, s.a_rows, s.a_cols, s.lda) == (True, False, 3, 5, 3)
    # x.T @ y with x stored (K=4, M=2): TRANSB; batched strides in elements
    s = lt.gemm_spec((7, 4, 2), (7, 4, 6), (((1,), (1,)), ((0,), (0,))))
    assert (s.batch, s.m, s.n, s.k, s.trans_a, s.trans_b) == (7, 6, 2, 4, False, True)
    assert (s.stride_a, s.stride_b, s.stride_d, s.out_shape) == (24, 8, 12, (7, 2, 6))


# ---- plan caching ------------------------------------------------------------------------------


def _count(lib, name):
    return sum(1 for c in lib.calls if c[0] == name)


def test_plans_are_cached_per_problem():
    dev = FakeDevice()
    x = bc.device_put(np.ones((4, 8), np.float32), dev)
    w = bc.device_put(np.ones((8, 16), np.float32), dev)
    wt = bc.device_put(np.ones((16, 8), np.float32), dev)
    dn = (((1,), (0,)), ((), ()))
    for _ in range(3):
        dot_general(x, w, dn)
    h = dev.matmul_handle()
    assert h.num_heuristic_queries == 1 and _count(h.lib, "matmul") == 3
    assert _count(h.lib, "matmul_desc_create") == 1 and _count(h.lib, "matrix_layout_create") == 4
    dot_general(x, wt, (((1,), (1,)), ((), ())))  # transposed rhs: a new plan
    dot_general(x, w, dn, precision="tf32")  # another compute type: a new plan
    assert h.num_heuristic_queries == 3 and len(h.plans) == 3
    computes = [c[1] for c in h.lib.calls if c[0] == "matmul_desc_create"]
    assert computes == [lt.COMPUTE["32F"], lt.COMPUTE["32F"], lt.COMPUTE["32F_FAST_TF32"]]
    trans = [c[3] for c in h.lib.calls if c[0] == "matmul_desc_set_attribute" and c[2] == "TRANSA"]
    assert trans == [0, 1, 0]


def test_bias_pointer_updates_without_replanning():
    dev = FakeDevice()
    x = bc.device_put(np.ones((4, 8), np.float32), dev)
    w = bc.device_put(np.ones((8, 16), np.float32), dev)
    b1 = bc.device_put(np.arange(16, dtype=np.float32), dev)
    b2 = bc.device_put(-np.arange(16, dtype=np.float32), dev)
    dn = (((1,), (0,)), ((), ()))
    o1 = dot_general(x, w, dn, epilogue="bias", bias=b1)
    o2 = dot_general(x, w, dn, epilogue="bias", bias=b2)
    h = dev.matmul_handle()
    assert h.num_heuristic_queries == 1
    sets = [
        c[3] for c in h.lib.calls if c[0] == "matmul_desc_set_attribute" and c[2] == "BIAS_POINTER"
    ]
    assert sets == [b1.ptr, b2.ptr]
    np.testing.assert_allclose(np.asarray(o1), 8 + np.arange(16)[None].repeat(4, 0))
    np.testing.assert_allclose(np.asarray(o2), 8 - np.arange(16)[None].repeat(4, 0))


def test_alignment_is_part_of_the_key():
    dev = FakeDevice()
    h = dev.matmul_handle()
    buf = bc.device_put(np.ones(4096, np.float32), dev)
    out = bc.DeviceArray.empty((64,), np.float32, dev)
    s = lt.gemm_spec((1, 8), (8, 8), (((1,), (0,)), ((), ())))
    kw = dict(in_dtype=np.float32, out_dtype=np.float32)
    h.matmul(s, buf.ptr, buf.ptr + 1024, out.ptr, **kw)
    h.matmul(s, buf.ptr + 4, buf.ptr + 1024, out.ptr, **kw)
    aligns = sorted(k.align for k in h.plans)
    assert aligns == [(4, 256, 256, 256), (256, 256, 256, 256)]


# ---- precisions, dtypes, errors ----------------------------------------------------------------


def test_compute_types():
    assert lt.compute_type("float32", "fp32") == ("32F", "float32")
    assert lt.compute_type("float32", "highest") == ("32F", "float32")
    assert lt.compute_type("float32", "tf32") == ("32F_FAST_TF32", "float32")
    assert lt.compute_type("float32", "high") == ("32F_FAST_TF32", "float32")
    assert lt.compute_type("float32", "bf16") == ("32F_FAST_16BF", "float32")
    assert lt.compute_type("bfloat16", "tf32") == ("32F", "float32")
    assert lt.compute_type("float64", "tf32") == ("64F", "float64")
    with blu.config.override(default_matmul_precision="tf32"):
        assert lt.compute_type("float32", "default")[0] == "32F_FAST_TF32"
    assert lt.compute_type("float32", "default")[0] == "32F"
    with pytest.raises(BluValueError, match="precision"):
        lt.compute_type("float32", "fast")


def test_dtype_and_argument_errors():
    dev = FakeDevice()
    dn = (((1,), (0,)), ((), ()))
    x32 = bc.device_put(np.ones((2, 3), np.float32), dev)
    x64 = bc.device_put(np.ones((3, 2), np.float64), dev)
    xi = bc.device_put(np.ones((3, 2), np.int32), dev)
    with pytest.raises(BluTypeError):
        dot_general(x32, x64, dn)
    with pytest.raises(BluTypeError, match="int32"):
        dot_general(xi, bc.device_put(np.ones((2, 3), np.int32), dev), dn)
    with pytest.raises(BluTypeError, match="unsupported dtypes"):
        dot_general(x32, x32.copy(), (((0,), (0,)), ((), ())), preferred_element_type=np.float16)
    w = bc.device_put(np.ones((3, 4), np.float32), dev)
    with pytest.raises(BluValueError, match="needs `bias`"):
        dot_general(x32, w, dn, epilogue="bias")
    with pytest.raises(BluShapeError, match="bias"):
        dot_general(x32, w, dn, epilogue="bias", bias=bc.device_put(np.ones(3, np.float32), dev))
    with pytest.raises(BluValueError, match="unknown epilogue"):
        dot_general(x32, w, dn, epilogue="swish")
    with pytest.raises(BluValueError, match="TRANSB"):
        dot_general(x32, w, dn, epilogue="bgrad_lhs")
    with pytest.raises(BluShapeError, match="out"):
        dot_general(x32, w, dn, out=bc.DeviceArray.empty((2, 5), np.float32, dev))


def test_accumulate_and_out():
    dev = FakeDevice()
    x, w = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    dx, dw = bc.device_put(x, dev), bc.device_put(w, dev)
    dn = (((1,), (0,)), ((), ()))
    out = bc.device_put(np.ones((2, 4)), dev)
    assert dot_general(dx, dw, dn, out=out, accumulate=True) is out
    np.testing.assert_allclose(np.asarray(out), 1 + x @ w)
    dot_general(dx, dw, dn, out=out)
    np.testing.assert_allclose(np.asarray(out), x @ w)


def test_empty_contraction_fills_zeros():
    dev = FakeDevice()
    out = dot_general(
        bc.device_put(np.ones((3, 0), np.float32), dev),
        bc.device_put(np.ones((0, 2), np.float32), dev),
        (((1,), (0,)), ((), ())),
    )
    assert np.array_equal(np.asarray(out), np.zeros((3, 2)))


# ---- epilogues ---------------------------------------------------------------------------------

DN = (((1,), (0,)), ((), ()))


def _linear(seed=0, M=5, K=7, N=6, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((M, K)).astype(dtype),
        rng.standard_normal((K, N)).astype(dtype),
        rng.standard_normal(N).astype(dtype),
    )


@pytest.mark.parametrize("epilogue", ["bias", "relu", "relu_bias", "gelu", "gelu_bias"])
def test_forward_epilogues(epilogue):
    x, w, b = _linear()
    dev = FakeDevice()
    args = dict(bias=bc.device_put(b, dev)) if "bias" in epilogue else {}
    out = dot_general(bc.device_put(x, dev), bc.device_put(w, dev), DN, epilogue=epilogue, **args)
    pre = x @ w + (b if "bias" in epilogue else 0)
    act = {"relu": lambda v: np.maximum(v, 0), "gelu": lt.gelu_tanh}.get(epilogue.split("_")[0])
    np.testing.assert_allclose(np.asarray(out), act(pre) if act else pre, rtol=1e-12)


@pytest.mark.parametrize("with_bias", [False, True])
def test_gelu_aux_keeps_the_gelu_input(with_bias):
    x, w, b = _linear(1, N=6)
    dev = FakeDevice()
    ep = "gelu_aux_bias" if with_bias else "gelu_aux"
    args = dict(bias=bc.device_put(b, dev)) if with_bias else {}
    out, aux = dot_general(bc.device_put(x, dev), bc.device_put(w, dev), DN, epilogue=ep, **args)
    pre = x @ w + (b if with_bias else 0)
    assert aux.shape == (5, 8)  # N = 6 rounded up to 8
    np.testing.assert_allclose(np.asarray(aux)[:, :6], pre, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(out), lt.gelu_tanh(pre), rtol=1e-12)


def test_dgelu_and_bias_gradients_of_an_mlp_layer():
    # forward: h = gelu(x @ w1 + b1); backward of the pre-activation through the next layer:
    # dpre = (dy @ w2.T) * gelu'(pre), db1 = dpre.sum(0); dw = x.T @ dpre, db = dpre.sum(0)
    rng = np.random.default_rng(3)
    T, C, H = 6, 4, 8
    x, w1, b1 = rng.standard_normal((T, C)), rng.standard_normal((C, H)), rng.standard_normal(H)
    w2, dy = rng.standard_normal((H, C)), rng.standard_normal((T, C))
    dev = FakeDevice()
    put = lambda a: bc.device_put(a, dev)  # noqa: E731
    _, aux = dot_general(put(x), put(w1), DN, epilogue="gelu_aux_bias", bias=put(b1))
    pre = x @ w1 + b1
    dn_t = (((1,), (1,)), ((), ()))  # dy @ w2.T: w2 stored (H, C) read with TRANSA
    dpre = dot_general(put(dy), put(w2), dn_t, epilogue="dgelu", aux=aux)
    want = (dy @ w2.T) * lt.gelu_tanh_grad(pre)
    np.testing.assert_allclose(np.asarray(dpre), want, rtol=1e-10)
    dpre2, db1 = dot_general(put(dy), put(w2), dn_t, epilogue="dgelu_bgrad", aux=aux)
    np.testing.assert_allclose(np.asarray(dpre2), want, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(db1), want.sum(0), rtol=1e-10)
    # dw1 = x.T @ dpre with db1 from the rhs (BGRADA)
    dn_w = (((0,), (0,)), ((), ()))
    dw, db = dot_general(put(x), put(want), dn_w, epilogue="bgrad_rhs")
    np.testing.assert_allclose(np.asarray(dw), x.T @ want, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(db), want.sum(0), rtol=1e-10)
    # dw1.T = dpre.T @ x with the gradient from the lhs (BGRADB; lhs stored (K, M))
    dwt, dbl = dot_general(put(want), put(x), dn_w, epilogue="bgrad_lhs")
    np.testing.assert_allclose(np.asarray(dwt), want.T @ x, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(dbl), want.sum(0), rtol=1e-10)


def test_batched_bias_broadcasts_over_batch():
    rng = np.random.default_rng(4)
    a, b, bias = (
        rng.standard_normal((3, 2, 4)),
        rng.standard_normal((3, 4, 5)),
        rng.standard_normal(5),
    )
    dev = FakeDevice()
    out = dot_general(
        bc.device_put(a, dev),
        bc.device_put(b, dev),
        (((2,), (1,)), ((0,), (0,))),
        epilogue="bias",
        bias=bc.device_put(bias, dev),
    )
    np.testing.assert_allclose(np.asarray(out), a @ b + bias, rtol=1e-12)


# ---- the timed algorithm search (blu.cuda.gemm_search) -----------------------------------------


def _searching_device(times, candidates=4, refused=(), capturing=False):
    """A fake device whose cuBLASLt offers ``candidates`` algorithms; a candidate's timed runs
    take ``times[number]`` ms (read from the algorithm the stand-in last ran)."""
    from blu.cuda.fake import FakeCublasLt

    lib = FakeCublasLt()
    lib.candidates, lib.refused = candidates, set(refused)

    def timer_for(stream):
        def timer(work):
            before = len(lib.algos)
            work()
            used = set(lib.algos[before:])
            assert len(used) == 1  # the timed runs are one candidate's
            return times[used.pop()]

        return timer

    dev = FakeDevice()
    dev._matmul = lt.CublasLt((0, 0), lib=lib, search=True, timer_for=timer_for,
                              capturing=lambda stream: capturing)  # fmt: skip
    return dev, lib


def _product(dev, accumulate=False, seed=0):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    out = bc.device_put(np.ones((5, 3)), dev)
    dot_general(bc.device_put(x, dev), bc.device_put(w, dev), DN, out=out, accumulate=accumulate)
    return np.asarray(out), x @ w


def test_search_keeps_the_fastest_candidate():
    dev, lib = _searching_device({0: 3.0, 1: 1.0, 2: 2.0, 3: 5.0})
    got, want = _product(dev)
    np.testing.assert_allclose(got, want, rtol=1e-12)  # the real call runs after the search
    h = dev.matmul_handle()
    assert h.num_searches == 1 and h.num_heuristic_queries == 1
    # each candidate: one untimed run and REPS timed ones; then the call itself with algo 1
    from blu.cuda import gemm_search

    per, reps = 1 + gemm_search.REPS, gemm_search.REPS
    # then the finalists (fastest first) timed again, in turns
    again = [i for _ in range(gemm_search.ROUNDS) for i in (1, 2, 0, 3) for _ in range(reps)]
    assert lib.algos == [i for i in range(4) for _ in range(per)] + again + [1]
    lib.algos.clear()
    got, want = _product(dev, seed=1)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert lib.algos == [1] and h.num_searches == 1  # no second search for the same problem


def test_search_times_the_finalists_again_and_keeps_the_least_time():
    # candidate 1's first timing is slowed (1.5 ms; then 0.5): it is a finalist and wins; the
    # slowest two are never timed again
    from blu.cuda import gemm_search
    from blu.cuda.fake import FakeCublasLt

    seq = {0: [1.0], 1: [1.5, 0.5], 2: [2.0], 3: [3.0], 4: [4.0], 5: [5.0]}
    seen: dict[int, int] = {}
    lib = FakeCublasLt()
    lib.candidates = 6

    def timer_for(stream):
        def timer(work):
            before = len(lib.algos)
            work()
            (algo,) = set(lib.algos[before:])
            k = seen[algo] = seen.get(algo, -1) + 1
            return seq[algo][min(k, len(seq[algo]) - 1)]

        return timer

    dev = FakeDevice()
    dev._matmul = lt.CublasLt((0, 0), lib=lib, search=True, timer_for=timer_for,
                              capturing=lambda stream: False)  # fmt: skip
    got, want = _product(dev)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert lib.algos[-1] == 1
    assert seen == {0: gemm_search.ROUNDS, 1: gemm_search.ROUNDS, 2: gemm_search.ROUNDS,
                    3: gemm_search.ROUNDS, 4: 0, 5: 0}  # fmt: skip


def test_search_skips_refused_candidates():
    dev, lib = _searching_device({0: 3.0, 1: 0.5, 2: 2.0, 3: 5.0}, refused={1})
    got, want = _product(dev)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert lib.algos[-1] == 2


def test_no_search_while_capturing_or_accumulating():
    dev, lib = _searching_device({0: 3.0, 1: 1.0}, candidates=2, capturing=True)
    _product(dev)
    assert lib.algos == [0] and dev.matmul_handle().num_searches == 0
    dev, lib = _searching_device({0: 3.0, 1: 1.0}, candidates=2)
    got, want = _product(dev, accumulate=True)
    np.testing.assert_allclose(got, 1 + want, rtol=1e-12)  # added once: no timed runs into D
    assert lib.algos == [0] and dev.matmul_handle().num_searches == 0


def test_accumulate_from_another_c_searches_and_leaves_c():
    # D = A B + C with C apart from D: the timed runs each write D afresh, so the search runs
    dev, lib = _searching_device({0: 3.0, 1: 1.0}, candidates=2)
    rng = np.random.default_rng(1)
    x, w, c = rng.standard_normal((5, 7)), rng.standard_normal((7, 3)), rng.standard_normal((5, 3))
    dx, dw, dc = (bc.device_put(a, dev) for a in (x, w, c))
    out = bc.DeviceArray.empty((5, 3), np.float64, dev)
    h = dev.matmul_handle()
    h.matmul(lt.gemm_spec(x.shape, w.shape, DN), dw.ptr, dx.ptr, out.ptr, in_dtype=np.float64,
             out_dtype=np.float64, accumulate=True, c_ptr=dc.ptr)  # fmt: skip
    np.testing.assert_allclose(np.asarray(out), c + x @ w, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(dc), c)
    assert h.num_searches == 1 and lib.algos[-1] == 1


def test_without_search_the_heuristic_first_choice():
    dev = FakeDevice()
    lib = dev.matmul_handle().lib
    lib.candidates = 5
    got, want = _product(dev)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    asked = [c for c in lib.calls if c[0] == "matmul_algo_get_heuristic"]
    assert len(asked) == 1 and lib.algos == [0]


@pytest.mark.parametrize("n", [0, 1])
def test_fastest_with_one_candidate_or_none_runs_nothing(n):
    from blu.cuda import gemm_search

    ran = []
    assert gemm_search.fastest(n, ran.append, lambda work: 1.0) == 0
    assert ran == []


def test_fastest_when_every_candidate_fails_is_the_first():
    from blu.cuda import gemm_search

    def run(i):
        raise RuntimeError("refused")

    assert gemm_search.fastest(3, run, lambda work: work() or 1.0) == 0
