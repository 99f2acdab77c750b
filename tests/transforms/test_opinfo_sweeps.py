"""More generic tests over the OpInfo table (tests/ops/): every entry in float32, float16 and
bfloat16 and, where numpy's reference takes complex numbers, in complex64 and complex128, against
the float64 / complex128 reference evaluated at the same (rounded) inputs; reverse-over-reverse
(the VJP of the VJP) against finite differences of the VJP in float64; and jit on the simulated
GPU (``BLU_FAKE_GPU=1``, marked ``gpu``) against eager on the host.

Tolerances come from the dtype: ``16 * n_ops`` epsilons of the result's (real) dtype. Known
exceptions are listed below with their reason; ``XFAIL`` names those that are bugs of issue #39
another change fixes (complex derivatives, custom_jvp in reverse mode, the gamma family).

Samples per entry: 1 under HYPOTHESIS_PROFILE=ci, 3 under dev. The GPU check runs every sixth
entry under ci (about 75 entries) and all of them under dev.
"""

from __future__ import annotations

import os
import warnings
import zlib

import ml_dtypes
import numpy as np
import pytest
from gpu_helpers import COMPILING_GPU_MARKS, make_device, put
from helpers import check_vjp, tolerance
from opinfo import TABLE, OpInfo

import blu
from blu.core import pytree

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

DEV = os.environ.get("HYPOTHESIS_PROFILE", "ci") == "dev"
N_SAMPLES = 3 if DEV else 1
bf16 = ml_dtypes.bfloat16
REAL = {"float32": np.float32, "float16": np.float16, "bfloat16": bf16}
COMPLEX = {"complex64": np.complex64, "complex128": np.complex128}

# ---- known exceptions ----------------------------------------------------------------------------
# entry name -> reason, per sweep. SKIP: not a bug (the operation has no such dtype by design).
# XFAIL: a bug of issue #39 that another change fixes (strict: the test fails once it is fixed).
_PARTS = "builds complex numbers from its real parts: complex64/complex128 only, as in JAX"
SKIP_REAL: dict[str, str] = {
    "numpy.nextafter:bits": "compares float64 bit patterns (the float32 ones: test_nextafter)",
    "lax.bitcast_convert_type": "its sample reinterprets float64 bits as a fixed integer type",
    "numpy.from_dlpack": "numpy's DLPack export has no half floats",
    "numpy.spacing": "the gap to the next float of the input's own dtype (float64's is another)",
    **{
        e.name: _PARTS
        for e in TABLE
        if e.name.startswith("fft.") or e.name in ("numpy.conj", "numpy.angle", "numpy.iscomplex")
    },
}
# arguments that stay float32 for half inputs (the attention's log-sum-exp and its cotangent)
KEEP_FLOAT32: dict[str, tuple[int, ...]] = {
    "lax.dot_product_attention_bwd": (6,),
    "lax.dot_product_attention_bwd(need_dbias=True)": (6,),
}
# entries whose float results have a fixed dtype, whatever the inputs' (values still compared)
FIXED_DTYPE: dict[str, str] = {
    "numpy.astype": "a conversion to its target dtype",
    "lax.convert_element_type": "a conversion to its target dtype",
    "numpy.float_power": "float64 (complex128) results, as numpy's float_power",
    "linalg.eig": "complex eigen-decomposition (complex64 for half and single inputs)",
    "linalg.eigvals": "complex eigenvalues, compared as float64 (real, imaginary) pairs",
    "nn.cross_entropy": "the loss accumulates and is returned in float32 for half inputs",
    "nn.linear_cross_entropy": "the loss accumulates and is returned in float32 for half inputs",
    "nn.linear_cross_entropy(chunk_size=1)": "as nn.linear_cross_entropy",
    "lax.dot_product_attention_fwd": "its log-sum-exp residual is float32 for half inputs",
    "lax.dot_product_attention_jvp": "its log-sum-exp residual is float32 for half inputs",
    "numpy.kaiser": "the window is in the default float (float32) whatever beta's dtype, as JAX's",
    "numpy.sort_complex": "complex results: complex64 for half and single inputs, as JAX's",
}
SKIP_COMPLEX: dict[str, str] = {
    **{e.name: "blu.nn is real-valued (its references compare and clip reals)" for e in TABLE
       if e.name.startswith("nn.") or e.name.startswith("lax.dot_product_attention")},
    **{f"lax.{n}": "real-only in lax, as in JAX" for n in ("digamma", "erf", "erfc", "round")},
    "linalg.cholesky": "the complexified sample is not Hermitian (the triangle read decides)",
    "lax.linalg.cholesky": "the complexified sample is not Hermitian (the triangle read decides)",
    **{f"lax.{n}": "real operands only, as JAX's" for n in ("approx_max_k", "approx_min_k")},
    "numpy.nanmedian": "complex inputs refused, as JAX's nanquantile family",
}  # fmt: skip
XFAIL_COMPLEX: dict[str, str] = {}
XFAIL_ORDER2: dict[str, str] = {}
XFAIL_COMPLEX_JVP: dict[str, str] = {}


def _samples(e: OpInfo, salt: int = 0) -> list[tuple]:
    seed = zlib.crc32(e.name.encode())
    return [e.sample(np.random.default_rng([i, seed, salt])) for i in range(N_SAMPLES)]


def _is_float(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def _eps(dt) -> float:
    return float(ml_dtypes.finfo(np.dtype(dt)).eps)


def _close(got, want, dt, n_ops: int) -> None:
    """Leaves of ``got`` equal those of ``want`` (float64/complex128) within ``16 n_ops`` epsilons
    of ``dt`` (relative and absolute); exact for integers and bools; NaN matches NaN."""
    tol = 16 * n_ops * _eps(dt)
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
            continue
        assert g.dtype.kind in "fcV", g.dtype
        g = g.astype(np.complex128 if g.dtype.kind == "c" else np.float64)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)


def _float_leaves(out) -> list:
    return [np.asarray(o) for o in pytree.tree_leaves(out) if np.asarray(o).dtype.kind in "fcV"]


# ---- real dtypes ---------------------------------------------------------------------------------

_REAL_CASES = [
    pytest.param(e, n, id=f"{e.name}-{n}")
    for e in TABLE
    for n in REAL
    if "value" not in e.skip and e.ref is not None
]


@pytest.mark.parametrize("e, dtname", _REAL_CASES)
def test_real_dtypes_against_float64_reference(e: OpInfo, dtname: str):
    """The entry's float arrays rounded to the dtype: the float results keep the dtype and equal
    the float64 reference at the rounded inputs."""
    if e.name in SKIP_REAL:
        pytest.skip(SKIP_REAL[e.name])
    dt = REAL[dtname]
    for args in _samples(e):
        if not any(_is_float(a) for a in args):
            pytest.skip("no float argument")
        keep = KEEP_FLOAT32.get(e.name, ())
        low = tuple(
            a.astype(np.float32 if i in keep else dt) if _is_float(a) else a
            for i, a in enumerate(args)
        )
        want = e.ref(*(lo.astype(np.float64) if _is_float(a) else a for a, lo in zip(args, low)))
        if want is None:
            continue
        got = e.fn(*low)
        for leaf in _float_leaves(got) if e.name not in FIXED_DTYPE else ():
            assert leaf.dtype == np.dtype(dt), (e.name, leaf.dtype, dtname)
        _close(got, want, dt, e.n_ops)


# ---- complex dtypes ------------------------------------------------------------------------------


def _complexify(args: tuple, rng) -> tuple:
    return tuple(a + 1j * rng.uniform(-0.5, 0.5, a.shape) if _is_float(a) else a for a in args)


def _takes_complex(e: OpInfo) -> bool:
    """numpy's reference accepts complex inputs and gives a complex result (then so must blu,
    as JAX does)."""
    if e.ref is None or "value" in e.skip or e.name in SKIP_COMPLEX:
        return False
    args = _samples(e)[0]
    if not any(_is_float(a) for a in args):
        return False
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("error", np.exceptions.ComplexWarning)  # drops the imaginary part
            want = e.ref(*_complexify(args, np.random.default_rng(0)))
    except Exception:  # noqa: BLE001 - the reference refuses complex: not a complex operation
        return False
    return want is not None and any(
        np.iscomplexobj(np.asarray(w)) for w in pytree.tree_leaves(want)
    )


_COMPLEX_ENTRIES = [e for e in TABLE if _takes_complex(e)]
_COMPLEX_CASES = [
    pytest.param(
        e,
        n,
        id=f"{e.name}-{n}",
        marks=[pytest.mark.xfail(reason=XFAIL_COMPLEX[e.name], strict=True)]
        if e.name in XFAIL_COMPLEX
        else [],
    )
    for e in _COMPLEX_ENTRIES
    for n in COMPLEX
]


@pytest.mark.parametrize("e, dtname", _COMPLEX_CASES)
def test_complex_dtypes_against_complex128_reference(e: OpInfo, dtname: str):
    dt = COMPLEX[dtname]
    for k, args in enumerate(_samples(e)):
        z = tuple(
            a.astype(dt) if np.iscomplexobj(a) else a
            for a in _complexify(args, np.random.default_rng(k))
        )
        want = e.ref(*(a.astype(np.complex128) if np.iscomplexobj(a) else a for a in z))
        got = e.fn(*z)
        for leaf in _float_leaves(got) if e.name not in FIXED_DTYPE else ():
            assert leaf.dtype in (np.dtype(dt), np.dtype(dt(0).real.dtype)), (leaf.dtype, dtname)
        _close(got, want, dt, e.n_ops)


_COMPLEX_GRAD = [e for e in _COMPLEX_ENTRIES if e.grad and "grad" not in e.skip]


@pytest.mark.parametrize(
    "e",
    [
        pytest.param(
            e,
            id=e.name,
            marks=[pytest.mark.xfail(reason=XFAIL_COMPLEX_JVP[e.name], strict=True)]
            if e.name in XFAIL_COMPLEX_JVP
            else [],
        )
        for e in _COMPLEX_GRAD
    ],
)
def test_complex_jvp_against_finite_differences(e: OpInfo):
    """complex128: the JVP in a random complex direction ``t`` (the real-linear derivative,
    holomorphic or not) equals ``(f(z + h t) - f(z - h t)) / 2h`` for real ``h``."""
    rng = np.random.default_rng(zlib.crc32(e.name.encode()))
    for k, args in enumerate(_samples(e)):
        z = _complexify(args, np.random.default_rng(k))
        which = [i for i, a in enumerate(z) if np.iscomplexobj(a)]
        f = _of(e, z, tuple(which))
        xs = [z[i] for i in which]
        ts = [rng.standard_normal(x.shape) + 1j * rng.standard_normal(x.shape) for x in xs]
        _, got = blu.jvp(f, tuple(xs), tuple(ts))
        h = 1e-6
        plus = f(*(x + h * t for x, t in zip(xs, ts)))
        minus = f(*(x - h * t for x, t in zip(xs, ts)))
        want = pytree.tree_map(
            lambda p, m: (np.asarray(p, np.complex128) - np.asarray(m, np.complex128)) / (2 * h),
            plus,
            minus,
        )
        tol = 1e-5 * e.n_ops
        for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want), strict=True):
            if np.asarray(w).dtype.kind not in "fc":
                continue
            np.testing.assert_allclose(np.asarray(g), w, rtol=tol, atol=tol)


# ---- reverse over reverse ------------------------------------------------------------------------

_GRAD = [e for e in TABLE if e.grad and "grad" not in e.skip]


def _of(e: OpInfo, args: tuple, which: tuple[int, ...]):
    def f(*xs):
        full = list(args)
        for i, x in zip(which, xs):
            full[i] = x
        return e.fn(*full)

    return f


@pytest.mark.parametrize(
    "e",
    [
        pytest.param(
            e,
            id=e.name,
            marks=[pytest.mark.xfail(reason=XFAIL_ORDER2[e.name], strict=True)]
            if e.name in XFAIL_ORDER2
            else [],
        )
        for e in _GRAD
    ],
)
def test_reverse_over_reverse_against_finite_differences(e: OpInfo):
    """``x -> vjp(f, x)(ct)`` (a reverse-mode gradient) differentiated in reverse mode again:
    ``<v, J t>`` from central differences of the gradient equals ``<vjp(v), t>``."""
    for args in _samples(e):
        which = e.diff_args
        if which is None:
            which = tuple(i for i, a in enumerate(args) if _is_float(a))
        f = _of(e, args, which)
        xs = [args[i] for i in which]
        out = f(*xs)
        if not which or not _float_leaves(out):
            continue
        rng = np.random.default_rng(zlib.crc32(e.name.encode()))
        ct = pytree.tree_map(
            lambda o: rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype), out
        )

        def grad_of(*xs, ct=ct, f=f):
            return blu.vjp(f, *xs)[1](ct)

        tol = 1e-4 * e.n_ops
        check_vjp(grad_of, xs, rng, atol=tol, rtol=tol)


# ---- jit on the simulated GPU against eager ------------------------------------------------------

_BITS = ("numpy.nextafter:bits", "lax.bitcast_convert_type")
_GPU = [e for e in (TABLE if DEV else TABLE[::6]) if "jit" not in e.skip]


@pytest.fixture(scope="module")
def gpu_device():
    return make_device()


@pytest.mark.parametrize("e", [pytest.param(e, id=e.name, marks=COMPILING_GPU_MARKS) for e in _GPU])
def test_jit_on_gpu_against_eager(e: OpInfo, gpu_device):
    """``jit`` of the entry on device arrays (float arrays in float32) against eager evaluation
    on the host at the same inputs, within float32's tolerance for the entry's operations."""
    args = _samples(e)[0]
    arrays = tuple(i for i, a in enumerate(args) if isinstance(a, np.ndarray))
    if not arrays:
        pytest.skip("no array argument")
    keep = e.name in _BITS  # its sample reads float64 bit patterns
    xs = [
        args[i].astype(np.float32) if _is_float(args[i]) and not keep else args[i] for i in arrays
    ]
    f = _of(e, args, arrays)
    on_device = put(gpu_device, *xs)
    got = blu.jit(f)(*(on_device if len(xs) > 1 else (on_device,)))
    want = f(*xs)
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        r = tolerance(g.dtype if g.dtype.kind == "f" else np.float64, e.n_ops)
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=r, atol=r, equal_nan=True)


# ---- jit of complex programs (fused complex kernels) against eager ------------------------------

_JIT_COMPLEX = [
    e for e in (_COMPLEX_ENTRIES if DEV else _COMPLEX_ENTRIES[::5]) if "jit" not in e.skip
]


@pytest.mark.parametrize("dtname", COMPLEX)
@pytest.mark.parametrize("e", [pytest.param(e, id=e.name) for e in _JIT_COMPLEX])
def test_jit_complex_against_eager(e: OpInfo, dtname: str):
    """``jit`` on the CPU (complex arithmetic fused into kernels, ``rules_complex.py``) of the
    complexified sample against eager evaluation (the numpy impls) at the same inputs, within
    ``64 n_ops`` epsilons of the dtype."""
    dt = COMPLEX[dtname]
    z = tuple(
        a.astype(dt) if np.iscomplexobj(a) else a
        for a in _complexify(_samples(e)[0], np.random.default_rng(0))
    )
    arrays = tuple(i for i, a in enumerate(z) if isinstance(a, np.ndarray))
    f = _of(e, z, arrays)
    xs = [z[i] for i in arrays]
    want = f(*xs)
    got = blu.jit(f)(*xs)
    tol = 64 * e.n_ops * _eps(dt)
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if g.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)
