"""Compiled gather (``blu/lower/mlir/rules_gather.py``) and scatter kernels
(``blu/lower/mlir/scatter.py``)
against the numpy impls of ``gather_p`` / ``scatter_add_p`` / ``scatter_p`` (the oracle).

Random shapes include size-0 and size-1 dimensions; indices repeat and go out of bounds
(negative, past the end, the extremes of their dtype) in both modes. Data movement and in-order
accumulation are exact, so results are compared bit for bit (NaN positions included): the CPU
scatter adds rows in order, in the compute type (half floats in float32, rounded once per
addition), exactly as ``np.add.at`` does.

Gathers run through the MLIR CPU executable (``CpuExecutable``), fused with their neighbours;
scatters compile ``emit_scatter``'s text and are called through ctypes like
``mlir_cpu.Kernel``. The GPU text is checked with ``ptxas -arch=sm_90`` where ptxas exists; the
``gpu``-marked test runs the kernels on a GPU (kernels from the cache there; here, under
``BLU_FAKE_GPU=1``, it only compiles them into the cache).
"""

from __future__ import annotations

import ctypes
import importlib.util
import math
import shutil

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blu
import blu.lax as lax
import blu.numpy as bnp
from blu.core.jaxpr import Jaxpr
from blu.core.staging import hoist_consts
from blu.lax.gather_scatter import gather_p
from blu.lower.cpu.executable import CpuExecutable
from blu.lower.mlir import cache
from blu.lower.mlir import llvm as mlir_cpu
from blu.lower.mlir.rules_gather import gather_supported
from blu.lower.mlir.scatter import emit_scatter, scatter_launches, scatter_supported
from blu.lower.plan import fusion, partition

BF16, F16 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
I8, I32, I64 = np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64)
U16, U32, BOOL = np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.bool_)
DTYPES = [F32, F64, BF16, I32]
INDEX_DTYPES = [I32, I64, U32, I8]
HAVE_MLIR = importlib.util.find_spec("mlir") is not None
needs_mlir = pytest.mark.skipif(not HAVE_MLIR, reason="needs the MLIR bindings")


@pytest.fixture(scope="module")
def cpu_cache(tmp_path_factory):
    """A private kernel cache, and ``can_fuse`` accepting gathers (``fusion.can_fuse`` does
    once it calls ``gather_supported``; until then the plan would run gathers with numpy)."""
    mp = pytest.MonkeyPatch()
    base = fusion.can_fuse
    mp.setattr(
        partition,
        "can_fuse",
        lambda e: gather_supported(e) if e.primitive.name == "gather" else base(e),
    )
    yield
    mp.undo()


# ---- inputs ------------------------------------------------------------------------------------


def values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Random operand / update values (floats with a NaN and signed zeros sprinkled in)."""
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.asarray(rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True))
    x = np.asarray(rng.standard_normal(shape) * 3).astype(dtype)  # arrays, also of shape ()
    flat = x.reshape(-1)
    if flat.size > 2:
        flat[rng.integers(0, flat.size, 2)] = np.asarray([np.nan, -0.0]).astype(dtype)
    return x


def coordinates(rng: np.random.Generator, batch, sizes, dtype) -> np.ndarray:
    """Indices ``batch + (len(sizes),)``: mostly in range (small ranges, so rows repeat), some
    past either end or at the extremes of ``dtype``."""
    dtype, info = np.dtype(dtype), np.iinfo(dtype)
    cols = []
    for n in sizes:
        inside = rng.integers(0, max(n, 1), batch)
        bad = [n, n + 3, info.max] + ([-1, -7, info.min] if info.min < 0 else [])
        outside = rng.choice(np.asarray(bad, np.int64), batch)
        cols.append(np.where(rng.random(batch) < 0.25, outside, inside))
    return np.stack(cols, -1).astype(dtype) if cols else np.zeros(batch + (0,), dtype)


@st.composite
def cases(draw, dtypes=DTYPES):
    """(operand shape, axes, batch shape, dtype, index dtype, mode, seed)."""
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(0, 4)) for _ in range(rank))
    axes = tuple(draw(st.permutations(range(rank)))[: draw(st.integers(0, rank))])
    batch = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    dtype, idt = draw(st.sampled_from(dtypes)), draw(st.sampled_from(INDEX_DTYPES))
    mode = draw(st.sampled_from(["clip", "fill_or_drop"]))
    return shape, axes, batch, dtype, idt, mode, draw(st.integers(0, 2**31 - 1))


def assert_same(got, want, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, what
    if want.dtype.kind == "f" or want.dtype == BF16:
        got, want = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(got, want, err_msg=what)


# ---- gather ------------------------------------------------------------------------------------


def compiled(f, *args):
    """``f``'s outputs from the MLIR CPU executable, and the node kinds of its plan."""
    closed = blu.make_jaxpr(f)(*args)
    exe = CpuExecutable(hoist_consts(closed.jaxpr))
    outs = exe(*[np.asarray(c) for c in closed.consts], *[np.asarray(a) for a in args])
    return outs, [n.kind for n in exe.plan.nodes]


@needs_mlir
@given(cases())
def test_gather_matches_the_numpy_impl(cpu_cache, case):
    shape, axes, batch, dtype, idt, mode, seed = case
    rng = np.random.default_rng(seed)
    x = values(rng, shape, dtype)
    i = coordinates(rng, batch, [shape[a] for a in axes], idt)
    (got,), kinds = compiled(lambda x, i: lax.gather(x, i, axes=axes, mode=mode), x, i)
    assert kinds == ["kernel"] or 0 in np.shape(got), kinds
    assert_same(got, gather_p.impl(x, i, axes=axes, mode=mode), str(case))


@needs_mlir
@pytest.mark.parametrize("dtype", [F32, BF16, I32, BOOL])
def test_numpy_indexing_forms_compile_to_one_kernel(cpu_cache, dtype):
    """``x[i]`` (negative indices wrap, then clip), ``x[:, i]``, ``take``, ``take_along_axis``,
    ``x[i, :, j]``: one fused kernel each (an output transpose stays a numpy view)."""
    rng = np.random.default_rng(0)
    x = values(rng, (5, 3, 4), dtype)
    i = np.array([0, -1, 4, 2, 2, -5, 9, -8], np.int32)
    j = np.array([3, 0, 1, 1, -2, 3, 0, 2], np.int64)
    along = rng.integers(-3, 3, (5, 2, 4)).astype(np.int32)
    forms = {
        "x[i]": (lambda x, i, j, a: x[i]),
        "x[:, i]": (lambda x, i, j, a: x[:, i]),
        "take axis 2": (lambda x, i, j, a: bnp.take(x, i, axis=2)),
        "take_along_axis": (lambda x, i, j, a: bnp.take_along_axis(x, a, axis=1)),
        "x[i, :, j]": (lambda x, i, j, a: x[i, :, j]),
    }
    for what, f in forms.items():
        (got,), kinds = compiled(f, x, i, j, along)
        assert "fallback" not in kinds and kinds.count("kernel") == 1, (what, kinds)
        eager = f(*[bnp.asarray(a) for a in (x, i, j, along)])  # the numpy impls
        assert_same(got, eager, what)


@needs_mlir
def test_embedding_lookup_fuses_with_its_consumers(cpu_cache):
    rng = np.random.default_rng(1)
    wte, wpe = values(rng, (50, 8), F32), values(rng, (6, 8), F32)
    tokens = rng.integers(0, 50, (3, 6)).astype(np.int32)

    def embed(wte, wpe, tokens):
        return wte[tokens] * 2.0 + wpe[bnp.arange(6)]

    (got,), kinds = compiled(embed, wte, wpe, tokens)
    assert kinds == ["kernel"], kinds
    eager = embed(*[bnp.asarray(a) for a in (wte, wpe, tokens)])
    np.testing.assert_allclose(got, np.asarray(eager), rtol=1e-6)


def test_gather_supported_accepts_every_configuration_of_blus_gather():
    x, i = np.zeros((3, 0, 2), BF16), np.zeros((4, 2), np.uint64)
    for axes in [(1, 0), (2, 1), ()]:
        ii = i[:, : len(axes)]
        eqn = blu.make_jaxpr(lambda x, i: lax.gather(x, i, axes=axes, mode="fill"))(x, ii)
        assert gather_supported(eqn.jaxpr.eqns[0])


# ---- scatter on the CPU ------------------------------------------------------------------------


def scatter_eqn(prim, x, i, u, axes, mode):
    """The one ``scatter_add`` / ``scatter`` equation of ``prim(x, i, u)``."""
    fn = {"scatter_add": lax.scatter_add, "scatter": lax.scatter}[prim]
    j = blu.make_jaxpr(lambda x, i, u: fn(x, i, u, axes=axes, mode=mode))(x, i, u).jaxpr
    (eqn,) = [e for e in j.eqns if e.primitive.name == prim]
    return eqn


def cpu_scatter(eqn, x, i, u, inplace=False):
    """Compile ``emit_scatter(eqn, ..., "cpu")`` and call it as ``mlir_cpu.Kernel`` is called
    (the packed wrapper: an array of pointers to the four buffer addresses)."""
    canonical = cache.canonical_text(Jaxpr([], list(eqn.invars), [eqn], list(eqn.outvars)))
    k = mlir_cpu.get_kernel(canonical, lambda sym: emit_scatter(eqn, sym, "cpu"), "scatter")
    x = np.array(x, copy=True)
    out = x if inplace else np.empty_like(x)
    bufs = [x, np.ascontiguousarray(i), np.ascontiguousarray(u), out]
    ptrs = (ctypes.c_void_p * 4)(*[b.ctypes.data for b in bufs])
    packed = (ctypes.c_void_p * 4)(*[ctypes.addressof(ptrs) + 8 * n for n in range(4)])
    k.fn(packed)
    return out


def scatter_inputs(case):
    shape, axes, batch, dtype, idt, mode, seed = case
    rng = np.random.default_rng(seed)
    rest = tuple(n for d, n in enumerate(shape) if d not in axes)
    x = values(rng, shape, dtype)
    i = coordinates(rng, batch, [shape[a] for a in axes], idt)
    return x, i, values(rng, batch + rest, dtype), axes, mode


@needs_mlir
@given(cases(), st.sampled_from(["scatter_add", "scatter"]), st.booleans())
def test_scatter_matches_the_numpy_impl(cpu_cache, case, prim, inplace):
    x, i, u, axes, mode = scatter_inputs(case)
    eqn = scatter_eqn(prim, x, i, u, axes, mode)
    assert scatter_supported(eqn)
    with np.errstate(over="ignore"):
        want = eqn.primitive.impl(x, i, u, **eqn.params)
    assert_same(cpu_scatter(eqn, x, i, u, inplace), want, f"{prim} {case} inplace={inplace}")


@needs_mlir
@pytest.mark.parametrize("dtype", [F16, BOOL, I8, U16])
def test_scatter_add_of_narrow_types(cpu_cache, dtype):
    """Half floats round once per addition, bool adds are `or`, narrow integers wrap."""
    rng = np.random.default_rng(2)
    x, u = values(rng, (4, 3), dtype), values(rng, (9, 3), dtype)
    i = rng.integers(-1, 5, (9, 1)).astype(np.int32)
    eqn = scatter_eqn("scatter_add", x, i, u, (0,), "drop")
    assert_same(cpu_scatter(eqn, x, i, u), eqn.primitive.impl(x, i, u, **eqn.params))


@needs_mlir
def test_embedding_gradient_is_a_scatter_add_of_the_transposed_gather(cpu_cache):
    """grad of ``sum(w[tokens] * g)`` is ``scatter_add(zeros, tokens, g)``: repeated tokens
    accumulate; compared with a Python loop in float64."""
    rng = np.random.default_rng(3)
    w, tokens = values(rng, (11, 5), F32), rng.integers(0, 11, (4, 7)).astype(np.int32)
    g = rng.standard_normal((4, 7, 5)).astype(np.float32)
    j = blu.make_jaxpr(blu.grad(lambda w: (w[tokens] * g).sum()))(w).jaxpr
    (eqn,) = [e for e in j.eqns if e.primitive.name == "scatter_add"]
    want = np.zeros((11, 5))
    for b, t in np.ndindex(4, 7):
        want[tokens[b, t]] += g[b, t]
    got = cpu_scatter(eqn, np.zeros((11, 5), F32), tokens.reshape(4, 7, 1), g)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_scatter_launches_are_known_without_mlir():
    """GPT-2's embedding gradient: a (50304, 768) table, 16 x 1024 tokens."""

    def spec(shape, dtype):  # a stand-in of that aval (a zero-strided view, no memory)
        return np.broadcast_to(np.zeros((), dtype), shape)

    x, i, u = spec((50304, 768), F32), spec((16, 1024, 1), I32), spec((16, 1024, 768), F32)
    eqn = blu.make_jaxpr(lambda x, i, u: lax.scatter_add(x, i, u, axes=(0,)))(x, i, u)
    eqn = eqn.jaxpr.eqns[0]
    copy, add = scatter_launches(eqn, "k")
    assert (copy.func, copy.block, add.func, add.block) == ("k_0", 256, "k_1", 256)
    assert copy.grid == 1 << 16  # at most; grid-stride loops do the rest
    assert add.grid == 16 * 1024 * 768 // 256  # one thread per update element
    assert [launch.func for launch in scatter_launches(eqn, "k", inplace=True)] == ["k_1"]
    none = blu.make_jaxpr(lambda x, i, u: lax.scatter_add(x, i, u, axes=(0,)))(
        spec((0, 3), F32), spec((2, 1), I32), spec((2, 3), F32)
    )
    assert scatter_launches(none.jaxpr.eqns[0], "k") == []
    text = emit_scatter(eqn, "k", "cuda:sm_90")
    assert "gpu.func @k_0" in text and "gpu.func @k_1" in text and "atomic_rmw addf" in text
    with pytest.raises(blu.BluError, match="target"):
        emit_scatter(eqn, "k", "tpu")


# ---- GPU text ----------------------------------------------------------------------------------

needs_ptxas = pytest.mark.skipif(
    not HAVE_MLIR or shutil.which("ptxas") is None, reason="needs MLIR and ptxas"
)


def _ptx(text: str) -> str:
    from blu.lower.cuda.compiler import compile_ptx, ptxas

    ptx = compile_ptx(text, "sm_90")
    assert ptxas(ptx, "sm_90") is not None  # raises CompileError if ptxas rejects it
    return ptx.decode()


@needs_ptxas
@pytest.mark.parametrize(
    "prim, dtype, atom",
    [("scatter_add", F32, "atom.global.add.f32"), ("scatter_add", F64, "atom.global.add.f64"),
     ("scatter_add", BF16, "atom.global.add.noftz.bf16"),
     ("scatter_add", F16, "atom.global.add.noftz.f16"), ("scatter_add", I32, "atom.global.add.u32"),
     ("scatter_add", I8, "cas.b32"), ("scatter_add", BOOL, "atom.global.or.b32"),
     ("scatter", BF16, None)],
)  # fmt: skip
def test_gpu_scatter_text_passes_ptxas(prim, dtype, atom):
    x, u = np.zeros((7, 2, 3), dtype), np.zeros((5, 2), dtype)
    i = np.zeros((5, 2), np.int64)
    eqn = scatter_eqn(prim, x, i, u, (2, 0), "drop")
    ptx = _ptx(emit_scatter(eqn, "ks", "cuda:sm_90"))
    assert ".entry ks_0" in ptx and ".entry ks_1" in ptx
    assert atom is None or atom in ptx


@needs_ptxas
@pytest.mark.parametrize("dtype, mode", [(F32, "fill"), (BF16, "clip")])
def test_gpu_gather_text_passes_ptxas(dtype, mode):
    from blu.lower.cuda.codegen import emit_gpu_kernel
    from blu.lower.plan.fusion import KernelLayout

    x, i = np.zeros((50, 8), dtype), np.zeros((3, 6), np.int32)
    j = blu.make_jaxpr(lambda x, i: lax.gather(x, i[..., None], axes=(0,), mode=mode) * 2)(x, i)
    ptx = _ptx(emit_gpu_kernel(KernelLayout(j.jaxpr), "kg"))
    assert "ld.global" in ptx


# ---- on a GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("prim, dtype", [("scatter_add", F32), ("scatter_add", BF16),
                                         ("scatter_add", I32), ("scatter", F32)])  # fmt: skip
def test_scatter_kernels_on_the_gpu(prim, dtype):
    """Fixed shapes (the kernels come from the cache on the GPU machine): an embedding-gradient
    scatter with repeated and out-of-range tokens; float sums within float rounding of the
    in-order CPU result (the GPU's order of atomic additions is not fixed)."""
    import blu.cuda as bc
    from blu.cuda import driver
    from blu.cuda.device import fake_gpu
    from blu.lower.cuda import compiler as mlir_gpu

    if not bc.is_available():
        pytest.skip("needs an NVIDIA GPU and cuda-python")
    rng = np.random.default_rng(4)
    x = values(rng, (64, 32), dtype)
    if prim == "scatter":  # unique rows: which duplicate wins is not specified on the GPU
        i = rng.permutation(70)[:40].reshape(40, 1).astype(np.int32)
    else:
        i = rng.integers(-2, 70, (40, 1)).astype(np.int32)
    u = values(rng, (40, 32), dtype)
    if dtype != I32:
        x, u = np.nan_to_num(x), np.nan_to_num(u)
    eqn = scatter_eqn(prim, x, i, u, (0,), "drop")
    target = mlir_gpu.DEFAULT_TARGET
    canonical = cache.canonical_text(Jaxpr([], list(eqn.invars), [eqn], list(eqn.outvars)))
    mod = mlir_gpu.get_module(
        canonical, lambda sym: emit_scatter(eqn, sym, target), "scatter test", target
    )
    if fake_gpu():
        return  # filling the cache: compiled above
    dev = bc.devices()[0]
    dev.activate()
    module = driver.Module(mod.image(), name=mod.name)
    bufs = [bc.device_put(a, dev) for a in (x, i, u)] + [bc.DeviceArray.empty(x.shape, dtype, dev)]
    for launch in scatter_launches(eqn, mod.name):
        module.function(launch.func).launch(
            launch.grid, launch.block, [b.ptr for b in bufs], stream=dev.stream
        )
    got, want = np.asarray(bufs[3]), eqn.primitive.impl(x, i, u, **eqn.params)
    if dtype == I32 or prim == "scatter":
        assert_same(got, want)
    else:
        tol = 2e-2 if dtype == BF16 else 1e-5
        scale = math.sqrt(i.shape[0])
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol, atol=tol * scale)  # fmt: skip
