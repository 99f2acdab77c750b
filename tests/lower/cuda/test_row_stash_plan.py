"""Which row groups keep their rows in shared memory (``blu.lower.cuda.codegen_stash``), by chip
and budget, and how their kernels are compiled; no GPU needed (the kernels' values:
``test_gpu_simt.py``, and on the GPU ``test_gpu_row_stash.py``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import blu
import blu.nn as nn
import blu.numpy as bnp
from blu.lower.cuda import codegen, codegen_stash
from blu.lower.plan.nodes import NodeKind
from tests.lower.cuda.test_gpu_row_stash import V, classifier

bf16, f32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)


def _kernels(fn, *specs, **flags):
    with blu.config.override(**flags):
        low = blu.jit(fn).lower(*specs, target="cuda:sm_90")
        return [n for n in low._program.plan.nodes if n.kind == NodeKind.KERNEL]


def _shared(dt, chip, **flags) -> list[int]:
    s = blu.ShapeDtypeStruct
    (node,) = _kernels(classifier, s((512, V), dt), s((512,), np.int32), **flags)
    with blu.config.override(**flags):
        return [la.shared for la in codegen.launches(node.layout, "k", chip) if la.shared]


@pytest.mark.parametrize("dt, chip, flags, want", [
    (bf16, "sm_90", {}, 2 * V),  # two blocks an SM
    (f32, "sm_90", {}, 4 * V),  # one
    (bf16, "sm_80", {}, 2 * V),  # 163 KiB a block
    (f32, "sm_80", {}, 0),
    (bf16, "sm_89", {}, 0),  # 99 KiB a block, less the kernel's own
    (bf16, "sm_90", {"gpu_row_stash": 0}, 0),  # off
    (bf16, "sm_90", {"gpu_row_stash": 2 * V - 2}, 0),  # below the row's bytes
    (bf16, "sm_90", {"gpu_row_stash": 2 * V}, 2 * V),
])  # fmt: skip
def test_the_stash_fits_the_chip_and_the_budget(dt, chip, flags, want):
    got = _shared(dt, chip, **flags)
    assert got == ([want] * 2 if want else [])  # the forward's group and the gradient's


def test_two_blocks_an_sm_only_where_both_stashes_fit():
    assert codegen_stash.two_blocks(2 * V, "sm_90") and not codegen_stash.two_blocks(4 * V)
    assert not codegen_stash.two_blocks(2 * V, "sm_80")
    assert codegen_stash.stash_bytes("sm_90") == (227 << 10) - codegen_stash.STATIC
    assert codegen_stash.stash_bytes("sm_61") == (48 << 10) - codegen_stash.STATIC
    s = blu.ShapeDtypeStruct
    for dt, blocks in ((bf16, True), (f32, False)):
        (node,) = _kernels(classifier, s((512, V), dt), s((512,), np.int32))
        text = codegen.emit_gpu_kernel(node.layout, "k")
        assert ("nvvm.minctasm = 2" in text) is blocks
        assert "gpu.dynamic_shared_memory" in text


def test_groups_in_registers_and_unread_rows_take_no_stash():
    """An unrolled group (layer norm over 768) keeps its row in registers; a looped group
    whose input only one pass reads (a sum of squares) has nothing to keep."""
    s = blu.ShapeDtypeStruct
    for fn, spec in ((nn.layer_norm, s((1024, 768), f32)),
                     (lambda x: bnp.sum(x * x, axis=1), s((1024, V), bf16))):  # fmt: skip
        for node in _kernels(fn, spec):
            assert not any(la.shared for la in codegen.launches(node.layout, "k"))


def test_looped_groups_are_compiled_for_their_block():
    """A looped row group's loops step by its block (known at emission): ``nvvm.maxntid``
    keeps ``run.fit_block`` from launching fewer threads, which would leave elements
    unread."""
    s = blu.ShapeDtypeStruct
    (node,) = _kernels(classifier, s((512, V), bf16), s((512,), np.int32), gpu_row_stash=0)
    text = codegen.emit_gpu_kernel(node.layout, "k")
    for la in codegen.launches(node.layout, "k"):
        if la.block == 1024:
            head = next(ln for ln in text.splitlines() if f"gpu.func @{la.func}(" in ln)
            assert "nvvm.maxntid = array<i32: 1024, 1, 1>" in head
