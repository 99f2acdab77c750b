"""The CPU compiler around the lowering rules: simplification, fusion into launch-plan nodes,
the memory plan (liveness, reuse, donation), the persistent kernel cache (hit from a second
process, keys computed without MLIR), the AOT ``Lowered`` stage and the debugging flags.

Fused groups are checked against eager evaluation (numpy impls) and must become one kernel.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
import blu.lax as lax
import blu.numpy as bnp
from blu import nn, optim
from blu.core.staging import hoist_consts
from blu.lower.cpu.executable import BluFloatingPointError, CpuExecutable, Lowered
from blu.lower.execution import make_executable
from blu.lower.mlir import llvm as mlir_cpu
from blu.lower.plan.partition import MAX_KERNEL_EQNS, partition
from blu.lower.plan.simplify import simplify
from tests.helpers import env_flag

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    yield


def build(f, *args, donated=None):
    closed = blu.make_jaxpr(f)(*args)
    consts = [np.asarray(c) for c in closed.consts]
    if donated is not None:
        donated = (False,) * len(consts) + tuple(donated)
    exe = CpuExecutable(hoist_consts(closed.jaxpr), "test", donated)
    return exe, consts


def run(f, *args):
    exe, consts = build(f, *args)
    return exe(*consts, *[np.asarray(a) for a in args]), exe


def kinds(exe) -> list[str]:
    return [n.kind for n in exe.plan.nodes]


def leaves(x):
    return [np.asarray(v) for v in blu.core.pytree.tree_leaves(x)]


# ---- simplification ----------------------------------------------------------------------------


def test_simplify_cse_dce_literal_folding_and_jit_inlining():
    inner = blu.jit(lambda x: lax.exp(x) * 2.0)

    def f(x):
        a = lax.exp(x) + lax.exp(x)  # the same exp twice: CSE
        _ = lax.sin(x)  # dead
        two = lax.add(np.float32(1.0), np.float32(1.0))  # scalars: folded
        return inner(a) * two

    x = np.arange(3, dtype=np.float32)
    j = simplify(blu.make_jaxpr(f)(x).jaxpr)
    names = [e.primitive.name for e in j.eqns]
    assert names.count("exp") == 2  # one of f's, one from the inlined jit
    assert "sin" not in names and "jit" not in names
    assert not any(n == "add" and all(not hasattr(a, "id") for a in e.invars)
                   for n, e in zip(names, j.eqns))  # fmt: skip
    (got,), _ = run(f, x)
    np.testing.assert_allclose(got, np.exp(2 * np.exp(x)) * 2 * 2, rtol=1e-6)


def test_closed_over_arrays_are_arguments_not_constants():
    table = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    x = np.ones((64, 64), np.float32)
    closed = blu.make_jaxpr(lambda x: lax.tanh(x + table))(x)
    lowered = Lowered(hoist_consts(closed.jaxpr))
    assert len(lowered.jaxpr.invars) == 2  # the table is an argument of the executable
    text = lowered.as_text()
    assert "dense" not in text and "memref<4096xf32>" in text
    (got,) = lowered.compile()(table, x)
    np.testing.assert_allclose(got, np.tanh(x + table), rtol=2e-6)


# ---- fusion ------------------------------------------------------------------------------------


def _one_kernel(f, *args, rtol=2e-6, atol=1e-6, extra_kinds=()):
    got, exe = run(f, *args)
    assert [k for k in kinds(exe) if k not in extra_kinds] == ["kernel"], exe.plan
    want = leaves(f(*args))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
    return exe


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_layer_norm_and_cross_entropy_are_one_kernel_each(dtype):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((6, 33)) * 3).astype(dtype)
    g, b = rng.standard_normal(33).astype(dtype), rng.standard_normal(33).astype(dtype)
    labels = rng.integers(0, 33, 6).astype(np.int32)
    _one_kernel(lambda x: nn.softmax(x, -1), x)
    _one_kernel(lambda x: nn.layer_norm(x, g, b), x, rtol=1e-5, atol=1e-5)
    _one_kernel(lambda x: nn.cross_entropy(x, labels), x, rtol=1e-5)
    # softmax: two reductions and the normalisation in three loop nests, one kernel
    _, exe = run(lambda x: nn.softmax(x, -1), x)
    assert len(exe.plan.nodes[0].layout.nests) == 3


def test_bias_gelu_fuses_after_the_matmul():
    rng = np.random.default_rng(2)
    x, w = (
        rng.standard_normal((8, 16)).astype(np.float32),
        rng.standard_normal((16, 32)).astype(np.float32),
    )
    b = rng.standard_normal(32).astype(np.float32)
    # tanh is within 5 ulp: near tanh = -1 that is ~2e-7 absolute, so GELU of very negative
    # inputs is ~1e-6 rather than numpy's rounded -0.0 (outputs here reach ~10)
    exe = _one_kernel(lambda x: nn.gelu(x @ w + b, approximate=True), x, rtol=1e-5, atol=1e-5,
                      extra_kinds=("dot",))  # fmt: skip
    assert kinds(exe) == ["dot", "kernel"]
    _one_kernel(lambda x: nn.gelu(x @ w + b, approximate=False), x, rtol=1e-5, extra_kinds=("dot",))


def test_adamw_update_is_one_kernel_and_updates_in_place():
    rng = np.random.default_rng(3)
    p = {
        "w": rng.standard_normal((32, 16)).astype(np.float32),
        "b": rng.standard_normal(16).astype(np.float32),
    }
    g = {
        "w": rng.standard_normal((32, 16)).astype(np.float32),
        "b": rng.standard_normal(16).astype(np.float32),
    }
    opt = optim.adamw(1e-2, weight_decay=0.1)
    state = opt.init(p)
    state = blu.core.pytree.tree_map(np.asarray, state)
    flat, tree = blu.core.pytree.tree_flatten((g, state, p))

    def update(*ls):
        g, s, p = blu.core.pytree.tree_unflatten(tree, list(ls))
        return blu.core.pytree.tree_leaves(opt.step(g, s, p))

    want = leaves(update(*flat))
    n_g = len(blu.core.pytree.tree_leaves(g))
    exe, consts = build(update, *flat, donated=[i >= n_g for i in range(len(flat))])
    assert kinds(exe) == ["kernel"]
    args = [np.array(a) for a in consts + [np.asarray(a) for a in flat]]
    got = exe(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(
            np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=2e-6, atol=1e-7
        )
    # params and both moments were written into the donated buffers
    inplace = sum(
        any(np.shares_memory(o, a) for a in args[len(consts) + n_g :]) for o in got if o.size > 1
    )
    assert inplace == 6
    assert exe.memory_analysis().alias_bytes >= sum(v.nbytes for v in got if v.size > 1)


def test_fusion_never_creates_a_cycle_through_library_calls():
    # the two halves of `a` meet again after a matmul: they must not be one kernel
    rng = np.random.default_rng(4)
    x, w = (
        rng.standard_normal((4, 4)).astype(np.float32),
        rng.standard_normal((4, 4)).astype(np.float32),
    )

    def f(x):
        a = lax.exp(x)
        m = a @ w
        return lax.tanh(a) + m, bnp.where(x > 0, size=3, fill_value=-1)

    got, exe = run(f, x)
    for g, w_ in zip(got, leaves(f(x))):
        np.testing.assert_allclose(g, w_, rtol=2e-6)
    assert kinds(exe).count("dot") == 1


# ---- memory ------------------------------------------------------------------------------------


def test_temporaries_reuse_dead_buffers():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    ws = [rng.standard_normal((64, 64)).astype(np.float32) / 8 for _ in range(6)]

    def f(x):
        for w in ws:
            x = lax.tanh(x @ w)
        return x

    (got,), exe = run(f, x)
    np.testing.assert_allclose(got, leaves(f(x))[0], rtol=1e-5, atol=1e-6)
    m = exe.memory_analysis()
    one = 64 * 64 * 4
    assert m.intermediate_bytes == 12 * one
    assert m.temp_bytes <= 3 * one  # a ping-pong of buffers instead of 11 temporaries
    assert m.peak_bytes < m.argument_bytes + m.intermediate_bytes


def test_concurrent_calls_of_one_executable():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(6)
    w = rng.standard_normal((32, 32)).astype(np.float32)
    exe, consts = build(lambda x: nn.softmax(lax.tanh(x) @ w, -1), w)
    xs = [rng.standard_normal((32, 32)).astype(np.float32) for _ in range(16)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: exe(*consts, x)[0], xs))
    for x, g in zip(xs, got):
        np.testing.assert_allclose(g, exe(*consts, x)[0], rtol=0, atol=0)


def test_donated_argument_is_updated_in_place_only_when_donated():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    f = lambda x: lax.exp(x) * 2.0  # noqa: E731
    for donate in (True, False):
        exe, _ = build(f, x, donated=[donate])
        arg = x.copy()
        (out,) = exe(arg)
        np.testing.assert_allclose(out, np.exp(x) * 2, rtol=2e-6)
        assert np.shares_memory(out, arg) == donate
        assert exe.memory_analysis().alias_bytes == (x.nbytes if donate else 0)


def test_gpt2_step_peak_is_below_the_sum_of_its_intermediates():
    from examples.gpt2 import model

    cfg = model.CONFIGS["tiny"].with_vocab(32)
    params = model.init_params(cfg, blu.random.key(0))
    opt = optim.adamw(1e-3, weight_decay=0.1)
    state = opt.init(params)
    rng = np.random.default_rng(0)
    x, y = (rng.integers(0, 32, (2, 16)).astype(np.int32) for _ in range(2))

    def step(params, state, x, y):
        loss, grads = blu.value_and_grad(model.loss_fn)(params, x, y, cfg)
        params, state = opt.step(grads, state, params)
        return params, state, loss

    flat, tree = blu.core.pytree.tree_flatten((params, state, x, y))
    fn = lambda *ls: blu.core.pytree.tree_leaves(
        step(*blu.core.pytree.tree_unflatten(tree, list(ls)))
    )  # noqa: E731
    args = [np.asarray(a) for a in flat]
    exe, consts = build(fn, *args, donated=[True] * (len(args) - 2) + [False, False])
    m = exe.memory_analysis()
    assert m.peak_bytes < m.intermediate_bytes / 3, m
    assert m.temp_bytes < m.intermediate_bytes / 4, m
    n_kernels = sum(k == "kernel" for k in kinds(exe))
    assert len(exe.kernels) < n_kernels  # identical layers share kernels
    want = leaves(fn(*args))
    fresh = [a.copy() for a in args]
    got = exe(*consts, *fresh)
    np.testing.assert_allclose(got[-1], want[-1], rtol=1e-5)  # the loss
    # JAX's pairing: each new parameter and moment is written into its own argument's buffer
    # (not another one of the same size), so the addresses are the same from call to call
    n_state = len(args) - 2
    assert all(np.shares_memory(got[i], fresh[i]) for i in range(n_state) if args[i].size > 1)
    for g, w in zip(got, want):
        np.testing.assert_allclose(
            np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-4, atol=1e-5
        )


# ---- the persistent cache and AOT ---------------------------------------------------------------

_PROGRAM = textwrap.dedent(
    """
    import sys, json
    import numpy as np
    import blu, blu.lax as lax
    from blu.lower.mlir import llvm as mlir_cpu
    from blu.lower.cpu.executable import Lowered
    x = np.linspace(-3, 3, 1000, dtype=np.float32).reshape(10, 100)
    def f(x):
        m = lax.reduce_max(x, (1,))
        e = lax.exp(x - lax.broadcast_in_dim(m, x.shape, (0,)))
        return e / lax.broadcast_in_dim(lax.reduce_sum(e, (1,)), x.shape, (0,))
    lowered = Lowered(blu.make_jaxpr(f)(x).jaxpr)
    keys = lowered.cache_keys()
    text = lowered.as_text()
    before = "mlir" in sys.modules
    (out,) = lowered.compile()(x)
    print(json.dumps({"keys": keys, "mlir_before_compile": before, "mlir": "mlir" in sys.modules,
                      "stats": mlir_cpu.stats, "sum": float(out.sum()),
                      "func": "func.func" in text}))
    """
)


def _run_program(cache_dir: str, no_so: bool) -> dict:
    import json

    env = dict(os.environ, BLU_CACHE_DIR=cache_dir, PYTHONPATH=ROOT)
    env.pop("BLU_CACHE_NO_SO", None)
    if no_so:
        env["BLU_CACHE_NO_SO"] = "1"
    res = subprocess.run(
        [sys.executable, "-c", _PROGRAM], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("no_so", [False, True], ids=["shared-object", "llvm-text"])
def test_second_process_hits_the_cache(tmp_path, no_so):
    first = _run_program(str(tmp_path), no_so)
    assert first["stats"]["compiled"] == 1 and first["func"]
    assert not first["mlir_before_compile"]  # keys and MLIR text need no mlir import
    second = _run_program(str(tmp_path), no_so)
    assert second["keys"] == first["keys"]
    assert second["stats"]["compiled"] == 0
    if no_so:  # the stored LLVM-dialect text: the pass pipeline is skipped
        assert second["stats"]["cache_llvm"] == 1
    elif mlir_cpu._linker is not None:
        assert second["stats"]["cache_so"] == 1
        assert not second["mlir"]  # loaded the shared object: MLIR never imported
    np.testing.assert_allclose(second["sum"], first["sum"])
    np.testing.assert_allclose(first["sum"], 10.0, rtol=1e-5)


def test_cache_key_depends_on_kernel_text_and_target():
    from blu.lower.mlir import cache

    x = np.ones((4,), np.float32)
    j32 = blu.make_jaxpr(lambda x: lax.exp(x))(x).jaxpr
    j64 = blu.make_jaxpr(lambda x: lax.exp(x))(x.astype(np.float64)).jaxpr
    t32, t64 = cache.canonical_text(j32), cache.canonical_text(j64)
    assert t32 != t64
    assert cache.canonical_text(blu.make_jaxpr(lambda y: lax.exp(y))(x).jaxpr) == t32
    assert cache.kernel_key(t32, "cpu:a") != cache.kernel_key(t32, "cpu:b")
    with pytest.raises(blu.BluError, match="cuda"):
        Lowered(j32, target="cuda:sm_90")


# ---- debugging ---------------------------------------------------------------------------------


def test_debug_nans_names_the_node(monkeypatch):
    f = lambda x: lax.log(x) * 2.0  # noqa: E731
    exe, _ = build(f, np.ones(3, np.float32))
    exe(np.array([1.0, 2.0, -1.0], np.float32))  # NaN, but not checked
    with blu.config.override(debug_nans=True):
        with pytest.raises(BluFloatingPointError, match="log"):
            exe(np.array([1.0, 2.0, -1.0], np.float32))


def test_dump_ir_and_log_compiles(tmp_path, monkeypatch, caplog):
    env_flag("BLU_DUMP_IR", str(tmp_path))
    x = np.ones((7, 13, 3), np.float32)  # a shape no other test compiles
    with blu.config.override(log_compiles=True), caplog.at_level(logging.WARNING, "blu.jit"):
        run(lambda x: lax.cos(x) + 1.0, x)
    files = os.listdir(tmp_path)
    assert any(f.endswith(".jaxpr.txt") for f in files)
    assert any(f.endswith(".llvm.mlir") for f in files)
    assert any("kernel" in r.getMessage() for r in caplog.records)


def test_backend_defaults_to_mlir_and_can_be_switched(monkeypatch):
    j = blu.make_jaxpr(lambda x: x + 1.0)(np.ones(2, np.float32)).jaxpr
    monkeypatch.delenv("BLU_JIT_BACKEND", raising=False)
    exe = make_executable(j)
    assert isinstance(exe, CpuExecutable)  # the MLIR bindings are installed here
    np.testing.assert_array_equal(exe(np.ones(2, np.float32))[0], [2.0, 2.0])
    env_flag("BLU_JIT_BACKEND", "numpy")
    assert type(make_executable(j)).__name__ == "NumpyExecutable"
    with pytest.raises(blu.BluError, match="BLU_JIT_BACKEND"):
        env_flag("BLU_JIT_BACKEND", "llvm")
    with blu.config.override(jit_backend="llvm"), pytest.raises(blu.BluError, match="BLU_JIT"):
        make_executable(j)


def test_partition_of_an_empty_and_a_passthrough_program():
    x = np.ones(3, np.float32)
    got, exe = run(lambda x: (x, 2.0), x)
    assert kinds(exe) == [] and got[0] is not None
    np.testing.assert_array_equal(got[0], x)
    assert partition(simplify(blu.make_jaxpr(lambda x: x)(x).jaxpr)).nodes == []
    assert mlir_cpu.PIPELINE.startswith("builtin.module(")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12), st.integers(1, 3)), max_size=8))
def test_overlapping_arguments_match_pairwise_may_share_memory(views):
    # the donation check's O(n log n) overlap test against numpy's pairwise one (a loop)
    from blu.lower.cpu.executable import _overlapping

    base = np.zeros(64, np.float32)
    arrays = [base[lo : lo + n : step] for lo, n, step in views]
    want = {
        i
        for i, a in enumerate(arrays)
        for k, b in enumerate(arrays)
        if i != k and a.size and b.size and np.may_share_memory(a, b)
    }
    assert _overlapping(arrays) == want


def _many_updates(lr, *pg):
    # an optimizer-like step: every parameter's update reads one scalar made from lr, which
    # pulls them all into one group; 190 of them: 571 buffers in one kernel
    s = lr * 2.0
    n = len(pg) // 2
    return [p - s * g for p, g in zip(pg[:n], pg[n:])]


def test_no_gpu_kernel_takes_more_buffers_than_a_launch_can():
    target = "cuda:sm_90"  # (CPU kernels take their buffers as function arguments: no limit)
    from blu.lower.backend import backend_for
    from blu.lower.plan.partition import _buffers

    limit = backend_for((), target).caps.kernel_buffers

    S = blu.ShapeDtypeStruct
    specs = [S((), np.float32)] + [S((3, 5), np.float32)] * 380
    prog = blu.jit(_many_updates).lower(*specs, target=target)._program
    kernels = [n for n in prog.plan.nodes if n.kind == "kernel"]
    assert all(_buffers(n, limit) <= limit for n in kernels)
    assert sum(len(n.outputs) for n in kernels) >= 190  # every update still fused somewhere
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s.shape).astype(np.float32) for s in specs]
    got = blu.jit(_many_updates)(*args)
    for i, out in enumerate(got):
        np.testing.assert_allclose(np.asarray(out), args[1 + i] - 2.0 * args[0] * args[191 + i],
                                   rtol=1e-6, atol=1e-6)  # fmt: skip


def _capped_then_summed(x, p):
    u = x
    for _ in range(MAX_KERNEL_EQNS):  # one group at the size cap
        u = u * 1.0001
    return p + u  # the cap kept this sum out; it joins at the end instead of reading u back


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
def test_an_equation_the_cap_kept_out_joins_its_producer(target):
    S = blu.ShapeDtypeStruct
    prog = blu.jit(_capped_then_summed).lower(S((4, 8), np.float32), S((4, 8), np.float32),
                                              target=target)._program  # fmt: skip
    kernels = [n for n in prog.plan.nodes if n.kind == "kernel"]
    assert len(kernels) == 1 and len(kernels[0].outputs) == 1, [len(n.eqns) for n in kernels]
    rng = np.random.default_rng(1)
    x, p = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 8))
    want = p + x.astype(np.float64) * 1.0001**MAX_KERNEL_EQNS
    got = blu.jit(_capped_then_summed)(x, p.astype(np.float32))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
def test_one_equation_of_many_operands_is_planned(target):
    # a concatenation of 600 arrays is one equation: no halving makes it narrower
    S = blu.ShapeDtypeStruct
    cat = lambda *xs: blu.numpy.concatenate(xs)  # noqa: E731
    prog = blu.jit(cat).lower(*[S((2, 3), np.float32)] * 600, target=target)._program
    assert any(len(n.inputs) == 600 for n in prog.plan.nodes)
    if target == "cpu":
        xs = [np.full((2, 3), i, np.float32) for i in range(600)]
        np.testing.assert_array_equal(np.asarray(blu.jit(cat)(*xs)), np.concatenate(xs))


def _products_and_a_sum(g, w, b):
    """A reshape of an argument read by two products and a sum (GPT-2's query-key-value
    gradient: the bias's, the weight's and the input's from one packed cotangent)."""
    d = bnp.reshape(g, (g.shape[0], g.shape[1], -1))
    return d @ w, bnp.einsum("btk,btc->kc", d, d[..., :4]), bnp.sum(d, axis=(0, 1)) * b


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
def test_a_reshape_read_by_products_and_kernels_is_a_view(target):
    """The reshape becomes a view of the argument that the products and the sum's kernel all
    read: no kernel writes a copy of it (an output of its shape), and the values hold."""
    S = blu.ShapeDtypeStruct
    args = [S((2, 5, 3, 4), np.float32), S((12, 6), np.float32), S((12,), np.float32)]
    prog = blu.jit(_products_and_a_sum).lower(*args, target=target)._program
    views = [n for n in prog.plan.nodes if n.kind == "view"]
    assert views and any(tuple(v.aval.shape) == (2, 5, 12) for n in views for v in n.outputs)
    for n in prog.plan.nodes:
        assert n.kind != "kernel" or all(tuple(v.aval.shape) != (2, 5, 12) for v in n.outputs)
    if target == "cpu":
        rng = np.random.default_rng(0)
        g, w, b = (rng.standard_normal(a.shape).astype(np.float32) for a in args)
        got = blu.jit(_products_and_a_sum)(g, w, b)
        d = g.astype(np.float64).reshape(2, 5, 12)
        want = (d @ w, np.einsum("btk,btc->kc", d, d[..., :4]), d.sum(axis=(0, 1)) * b)
        for x, y in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(x), y, rtol=1e-5, atol=1e-5)


def test_a_reshape_of_a_kernels_value_stays_in_the_kernel():
    """A reshape whose operand a kernel computes is not made a view: the kernel writes the
    reshaped value once (a view would keep the operand as a separate output)."""
    S = blu.ShapeDtypeStruct
    fn = lambda g, w: _products_and_a_sum(g * 2.0, w, w[:, 0])  # noqa: E731
    prog = blu.jit(fn).lower(S((2, 5, 3, 4), np.float32), S((12, 6), np.float32))._program
    assert not any(n.kind == "view" and any(tuple(v.aval.shape) == (2, 5, 12) for v in n.outputs)
                   for n in prog.plan.nodes)  # fmt: skip


def _aliased_in_a_kernel(a, b, c, d):
    """A kernel reading a product's result both directly and through a reshape view of it
    (two inputs, the same bytes) whose output may go where that result was."""
    x = a @ b
    v = bnp.reshape(x, (8, 2))
    return (x + v.T + (v @ c).T) @ d


def _aliased_donated(x, c):
    v = bnp.reshape(x, (8, 2))
    return x + v.T + (v @ c).T


@pytest.mark.parametrize("fake_gpu", [False, True])
def test_a_kernel_reading_one_buffer_twice_is_not_written_over_it(fake_gpu, monkeypatch):
    """A reviewing helper's cases: neither in place over a temporary (the first) nor into the
    donated argument (the second) while the kernel reads the same bytes through another input
    (float64 numpy as the reference)."""
    rng = np.random.default_rng(0)
    a, b, c, d = (rng.standard_normal(s).astype(np.float32)
                  for s in [(2, 3), (3, 8), (2, 2), (8, 3)])  # fmt: skip
    x = rng.standard_normal((2, 8)).astype(np.float32)
    A, B, C, D, X = (t.astype(np.float64) for t in (a, b, c, d, x))
    P = A @ B
    want_f = (P + P.reshape(8, 2).T + (P.reshape(8, 2) @ C).T) @ D
    want_g = X + X.reshape(8, 2).T + (X.reshape(8, 2) @ C).T
    with blu.config.override(fake_gpu=fake_gpu):
        put = blu.cuda.device_put if fake_gpu else (lambda t: t)
        got_f = blu.jit(_aliased_in_a_kernel)(*(put(t) for t in (a, b, c, d)))
        got_g = blu.jit(_aliased_donated, donate_argnums=0)(put(x.copy()), put(c))
        np.testing.assert_allclose(np.asarray(got_f), want_f, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(got_g), want_g, rtol=1e-5, atol=1e-5)
