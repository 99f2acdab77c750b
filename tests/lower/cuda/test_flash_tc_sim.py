"""blu's flash-attention kernels (``flash_gpu``, and the tensor-core forms of ``flash_tc``) run
without a GPU: their generated MLIR executed by a lockstep SIMT interpreter (``simt_sim``:
threads as numpy arrays, ``mma.sync`` by the PTX ISA's fragment layouts, shared-memory races
reported) against the float64 references of ``test_attention.py``, forward (out, lse) and
backward (dq, dk, dv), causal and not, T not a multiple of the tiles, T != S, GQA.

Tolerances: float32 and 3xTF32 the float32 kernels' (errors ~1e-6 of the largest value); TF32
about 1e-2 (10-bit mantissas: errors ~1e-3). The GPU runs the same kernels in
``test_flash_attention_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from simt_sim import launch

from blu.lower.cuda import flash as fg
from tests.lax.test_attention import ref_attention, ref_probs, ref_vjp

CASES = [  # (b, t, s, n, kh, h, causal, mma)
    (1, 70, 70, 2, 1, 32, True, ""),  # the CUDA-core kernels: the interpreter's own check
    (1, 70, 70, 2, 1, 32, True, "tf32"),
    (1, 70, 70, 2, 1, 32, True, "3xtf32"),
    (1, 40, 70, 2, 2, 32, False, "3xtf32"),
    (1, 1, 1, 1, 1, 32, True, "tf32"),
    (1, 70, 70, 2, 1, 64, True, "3xtf32"),  # the backward at two blocks an SM (GPT-2's heads)
    (1, 1, 1, 1, 1, 64, True, "3xtf32"),
]
# the tensor-core backward's other layouts (flash_tc.BWD_*): (mode, raw, pairs, prefetch)
LAYOUTS = [
    ("3xtf32", False, False, True),  # split tiles, single loads, prefetch (the first layout)
    ("3xtf32", True, False, True),
    ("3xtf32", False, True, False),
    ("tf32", False, True, False),
]


def _run(sp: fg.FlashSpec, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    sq, sk = (sp.b, sp.t, sp.n, sp.h), (sp.b, sp.s, sp.kh, sp.h)
    q, k, v, do = (rng.normal(size=s).astype(np.float32) for s in (sq, sk, sk, sq))
    out, dq = np.zeros(q.size, np.float32), np.zeros(q.size, np.float32)
    lse, dvec = (np.zeros(sp.b * sp.n * sp.t, np.float32) for _ in range(2))
    dk, dv = np.zeros(k.size, np.float32), np.zeros(k.size, np.float32)
    (la,) = fg.launches(sp, "k", False)
    launch(fg.emit(sp, "k", False), la.func, la.grid, la.block, la.shared,
           [q.ravel(), k.ravel(), v.ravel(), out, lse])  # fmt: skip
    text = fg.emit(sp, "k", True)
    pre, bwd = fg.launches(sp, "k", True)
    launch(text, pre.func, pre.grid, pre.block, pre.shared, [out, do.ravel(), dq, dvec])
    launch(text, bwd.func, bwd.grid, bwd.block, bwd.shared,
           [q.ravel(), k.ravel(), v.ravel(), lse, do.ravel(), dvec, dq, dk, dv])  # fmt: skip
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    want = [ref_attention(q64, k64, v64, causal=sp.causal),
            ref_probs(q64, k64, causal=sp.causal)[1],
            *ref_vjp(q64, k64, v64, do64, causal=sp.causal)[:3]]  # fmt: skip
    got = [out.reshape(sq), lse.reshape(want[1].shape), dq.reshape(sq), dk.reshape(sk),
           dv.reshape(sk)]  # fmt: skip
    return got, want


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_kernels_in_the_interpreter_against_float64(case):
    b, t, s, n, kh, h, causal, mma = case
    sp = fg.FlashSpec(b, t, s, n, kh, h, causal, h**-0.5, "float32", mma)
    tol = 1e-2 if mma == "tf32" else 1e-5
    for got, want in zip(*_run(sp)):
        top = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * top)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda c: "-".join(map(str, c)))
def test_backward_layouts_in_the_interpreter_against_float64(layout, monkeypatch):
    from blu.lower.cuda import flash_tc

    mode, raw, pairs, prefetch = layout
    monkeypatch.setattr(flash_tc, "BWD_RAW", raw)
    monkeypatch.setitem(flash_tc.BWD_PAIRS, mode, pairs)
    monkeypatch.setitem(flash_tc.BWD_PREFETCH, mode, prefetch)
    sp = fg.FlashSpec(1, 70, 70, 2, 1, 32, True, 32**-0.5, "float32", mode)
    tol = 1e-2 if mode == "tf32" else 1e-5
    for got, want in list(zip(*_run(sp)))[2:]:  # dq, dk, dv
        top = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * top)
