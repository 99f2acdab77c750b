"""blu's own flash-attention kernels (``blu.lower.cuda.flash``) through ``jit`` on a CUDA
target, against the float64 numpy references of ``test_attention.py``: the forward's output and
log-sum-exp, and the gradients of q, k and v (the backward kernel), for float32 problems —
causal and not, T not a multiple of the tiles, T = 1, T != S, heads of 32/64/128 and
grouped-query attention; float32 through the CUDA-core kernels and through the tensor-core
kernels (``flash_tc``, forward and backward: 3xTF32 under precision "fp32", float32's
tolerances; TF32 under "tf32", about 1e-2 of the largest value).

Marked ``gpu``: on a real GPU the kernels run; with ``BLU_FAKE_GPU=1`` the executable still
compiles them (so the kernel cache holds them) while the simulated device runs the primitives'
CPU form, and the plan is checked to hold no ``(T, S)`` buffer.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from gpu_helpers import FAKE, GPU_MARKS, make_device, put

import blu
import blu.nn as bnn
from blu.lax import attention as att
from tests.lax.test_attention import ref_attention, ref_probs, ref_vjp

pytestmark = GPU_MARKS

CASES = [  # (b, t, s, n, kh, h, causal[, dtype])
    (2, 100, 100, 4, 4, 64, True),
    (2, 100, 100, 4, 2, 64, True, "bfloat16"),  # half precision (dQ through float32)
    (1, 70, 130, 2, 2, 32, False, "float16"),
    (1, 65, 65, 2, 2, 128, True, "bfloat16"),
    (2, 100, 100, 4, 4, 64, False),
    (1, 1, 1, 2, 2, 64, True),
    (1, 70, 130, 2, 2, 32, False),  # T != S, neither a multiple of the tiles
    (1, 130, 96, 2, 2, 32, True),  # causal with T > S: late queries see every key
    (1, 65, 65, 2, 2, 128, True),
    (2, 77, 77, 4, 2, 64, True),  # grouped-query attention
    (1, 256, 256, 3, 3, 64, True),
]


@pytest.fixture(scope="module")
def dev():
    return make_device()


def _ids(c):
    b, t, s, n, kh, h, causal = c[:7]
    return f"b{b}t{t}s{s}n{n}k{kh}h{h}{'c' if causal else ''}{c[7] if len(c) > 7 else ''}"


# float32 kernels: name -> (default_matmul_precision, flash_tensor_cores) that choose them
KERNELS = {
    "cudacores": ("fp32", False),
    "3xtf32": ("fp32", True),  # float32 accuracy on tensor cores
    "tf32": ("tf32", True),
}
TC_CASES = [  # the float32 cases, and more with several blocks of the tensor-core kernels
    c for c in CASES if len(c) == 7
] + [(1, 200, 200, 2, 1, 128, False), (3, 129, 129, 4, 2, 64, True)]


def _check(dev, case, kernels: str = "cudacores") -> None:
    b, t, s, n, kh, h, causal = case[:7]
    name = case[7] if len(case) > 7 else "float32"
    dt = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
    half = dt != np.float32
    rng = np.random.default_rng(t * 7 + h)
    q = rng.normal(size=(b, t, n, h)).astype(dt)
    k = rng.normal(size=(b, s, kh, h)).astype(dt)
    v = rng.normal(size=(b, s, kh, h)).astype(dt)
    w = rng.normal(size=(b, t, n, h)).astype(dt)

    def fwd(q, k, v):
        return att.dot_product_attention_fwd(q, k, v, scale=1.0 / np.sqrt(h), is_causal=causal,
                                             implementation="blu")  # fmt: skip

    def loss(q, k, v, w):
        out = bnn.dot_product_attention(q, k, v, is_causal=causal, implementation="blu")
        return (out.astype(np.float32) * w.astype(np.float32)).sum()

    # half precision: the outputs' own rounding (2^-8 for bf16); tf32: operands rounded to 10
    # mantissa bits (2^-11) over sums of h and S terms, relative to the largest value
    tol = 2e-2 if half else 1e-2 if kernels == "tf32" else 2e-4
    lse_tol = (1e-2, 1e-2) if kernels == "tf32" else (2e-5, 2e-4)
    precision, tensor_cores = KERNELS[kernels]
    with blu.config.override(default_matmul_precision=precision,
                             flash_tensor_cores=tensor_cores):  # fmt: skip
        out, lse = blu.jit(fwd)(*put(dev, q, k, v))
        grads = blu.jit(blu.grad(loss, argnums=(0, 1, 2)))(*put(dev, q, k, v, w))
        if dt == np.float32:  # the kernels asked for are the ones built
            exe = blu.jit(blu.grad(loss, argnums=(0, 1, 2))).lower(q, k, v, w, target="cuda:sm_90")
            mods = [m for ms in exe.compile().executable.library_modules.values() for m in ms]
            tc = [b"mma.sync" in bytes(m.ptx) for m in mods]
            want_tc = kernels != "cudacores"
            assert tc[0] == want_tc  # the forward
            assert tc[-1] == (want_tc and h < 128 or kernels == "tf32")  # the backward
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    want = ref_attention(q64, k64, v64, causal=causal)
    got = np.asarray(out).astype(np.float64)
    top = max(1.0, float(np.abs(want).max())) if kernels == "tf32" else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * top)
    _, want_lse, _ = ref_probs(q64, k64, causal=causal)
    np.testing.assert_allclose(np.asarray(lse), want_lse, rtol=lse_tol[0], atol=lse_tol[1])

    want_grads = ref_vjp(q64, k64, v64, w.astype(np.float64), causal=causal)
    for got, ref in zip(grads, want_grads[:3]):
        assert np.dtype(got.dtype) == dt
        scale = max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(np.asarray(got).astype(np.float64), ref, rtol=5 * tol,
                                   atol=5 * tol * scale)  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_flash_forward_and_gradients_against_float64(dev, case):
    _check(dev, case)


@pytest.mark.parametrize("kernels", ["3xtf32", "tf32"])
@pytest.mark.parametrize("case", TC_CASES, ids=_ids)
def test_tensor_core_kernels_against_float64(dev, case, kernels):
    """The tensor-core kernels (``flash_tc``) under each precision: the forward's results and
    the backward's gradients (heads of 128 in 3xTF32: the CUDA-core backward)."""
    _check(dev, case, kernels)


def test_training_step_plan_uses_the_kernels_and_holds_no_scores(dev):
    b, t, n, h = 2, 256, 4, 64

    def loss(q, k, v):
        return bnn.dot_product_attention(q, k, v, is_causal=True).sum()

    x = np.ones((b, t, n, h), np.float32)
    lowered = blu.jit(blu.grad(loss, argnums=(0, 1, 2))).lower(x, x, x, target="cuda:sm_90")
    exe = lowered.compile().executable
    libs = {nd.eqns[0].primitive for nd in exe.plan.nodes if nd.kind.value == "library"}
    assert libs == {att.fwd_p, att.bwd_p}
    assert len(exe.library_modules) == 2  # the forward's and the backward's kernel modules
    scores = b * n * t * t * 4
    assert lowered.memory_analysis().temp_size_in_bytes < scores, "a (T, T) buffer is planned"
    if not FAKE:
        got = blu.jit(blu.grad(loss, argnums=(0, 1, 2)))(*put(dev, x, x, x))
        assert all(np.isfinite(np.asarray(g)).all() for g in got)
