"""The random-program fuzzer (programs: ``fuzz_programs.py``): every drawn program, eager, against
its numpy form in float64 (values; result dtypes against numpy's promotion of the native
dtypes); ``jit`` against eager on the CPU; ``grad`` (JVP and VJP) against central differences in
float64; ``vmap`` over random axes (batch sizes 0 to 3) against a Python loop; and, marked
``gpu``, ``jit`` on the simulated GPU (``BLU_FAKE_GPU=1``) against eager on the host.

Budget: the hypothesis profile's (``ci``: 12 programs per check, derandomized; ``dev``: 60);
``BLU_FUZZ_EXAMPLES=N`` runs N per check (a long run: ``HYPOTHESIS_PROFILE=dev
BLU_FUZZ_EXAMPLES=2000``). The programs the fuzzer found failing are kept as explicit tests
in ``test_fuzz_regressions.py``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from gpu_helpers import COMPILING_GPU_MARKS, make_device, put
from helpers import check_grads, loop_vmap, tolerance
from hypothesis import given, settings
from hypothesis import strategies as st

import blu
from blu.core import pytree
from tests.transforms.fuzz_programs import HALF, NUMPY, Program, programs

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

_N = os.environ.get("BLU_FUZZ_EXAMPLES")
FUZZ = settings(max_examples=int(_N)) if _N else settings()


def close(got, want, dtype, n_ops: int) -> None:
    """Leaves equal within the dtype's tolerance for ``n_ops`` operations, relative to each
    result's largest magnitude (rounding errors scale with the values they round)."""
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        tol = tolerance(dtype or g.dtype, n_ops)
        scale = 1.0 + (float(np.max(np.abs(w))) if w.size else 0.0)
        np.testing.assert_allclose(
            g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol * scale
        )


def check_program(prog: Program) -> None:
    """Eager against numpy in float64 (and the result dtypes), jit against eager."""
    leaves = prog.arrays()
    args = prog.pack(leaves)
    got = prog.fn()(*args)
    native = prog.run(NUMPY, leaves)  # numpy on the native dtypes: the expected dtypes
    want = prog.run(NUMPY, [x.astype(np.float64) for x in leaves])
    for g, n in zip(pytree.tree_leaves(got), pytree.tree_leaves(native), strict=True):
        assert np.asarray(g).dtype == np.asarray(n).dtype, (np.asarray(g).dtype, n.dtype)
    close(got, want, prog.precision, prog.n_ops)
    jitted = blu.jit(prog.fn())(*args)
    assert pytree.tree_structure(jitted) == pytree.tree_structure(got)
    for j, g in zip(pytree.tree_leaves(jitted), pytree.tree_leaves(got)):
        assert np.asarray(j).dtype == np.asarray(g).dtype
    close(jitted, got, prog.precision, prog.n_ops)


def check_program_grads(prog: Program) -> None:
    """The scalar ``sum_k <w_k, out_k>`` (fixed random weights) of the float64 program: JVP and,
    where reverse mode applies, VJP against central differences."""
    leaves = prog.arrays(np.float64)
    f = prog.flat_fn(wide=True)
    outs = pytree.tree_leaves(f(*leaves))
    rng = np.random.default_rng(prog.seed + 1)
    weights = [rng.standard_normal(np.shape(o)) for o in outs]

    def loss(*xs):
        return sum(blu.numpy.sum(w * o) for w, o in zip(weights, pytree.tree_leaves(f(*xs))))

    tol = 1e-6 * prog.n_ops
    if prog.reverse_ok:
        check_grads(loss, leaves, order=1, atol=tol, rtol=tol)
    else:  # forward mode only (a while_loop): the JVP
        from helpers import check_jvp

        check_jvp(loss, leaves, rng, atol=tol, rtol=tol)


def check_program_vmap(prog: Program, size: int, axes: list) -> None:
    """vmap over ``axes`` (None: not mapped) with a batch of ``size``, float64, against a loop."""
    if all(a is None for a in axes):
        axes = [0] + axes[1:]
    leaves = prog.arrays(np.float64, batch=(size, axes))
    f = prog.flat_fn(wide=True)
    got = blu.vmap(f, in_axes=tuple(axes))(*leaves)
    want = loop_vmap(f, leaves, axes)
    close(got, want, np.float64, prog.n_ops)


# ---- the fuzzer's tests --------------------------------------------------------------------------


@FUZZ
@given(programs(dtypes=HALF))
def test_fuzz_eager_and_jit(prog):
    check_program(prog)


@FUZZ
@given(programs().filter(lambda p: p.smooth))
def test_fuzz_grad_against_finite_differences(prog):
    check_program_grads(prog)


@st.composite
def _batched(draw):
    prog = draw(programs())
    axes = [draw(st.sampled_from([None, *range(-len(s) - 1, len(s) + 1)])) for s, _ in prog.inputs]
    return prog, draw(st.integers(0, 3)), axes


@FUZZ
@given(_batched())
def test_fuzz_vmap_against_loop(case):
    check_program_vmap(*case)


@pytest.fixture(scope="module")
def gpu_device():
    return make_device()


@COMPILING_GPU_MARKS[0]
@COMPILING_GPU_MARKS[1]
@COMPILING_GPU_MARKS[2]
@FUZZ
@given(prog=programs(dtypes=HALF))
def test_fuzz_jit_on_gpu_against_eager(prog, gpu_device):
    """The program jitted on device arrays (the simulated GPU under ``BLU_FAKE_GPU=1``) against
    eager on the host at the same inputs."""
    leaves = prog.arrays()
    got = blu.jit(prog.fn())(*prog.pack(list(put(gpu_device, *leaves)) if len(leaves) > 1
                                        else [put(gpu_device, *leaves)]))  # fmt: skip
    want = prog.fn()(*prog.pack(leaves))
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want), strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
    close(got, want, prog.precision, prog.n_ops)
