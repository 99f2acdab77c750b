"""``concatenate``'s index rule reads every operand at every position (a select keeps one), so
each operand's index must be clamped into it: the last operand's was not, and a GPU kernel
read before that operand's buffer (an illegal address where the buffer starts an allocation:
top-k sampling's ``take_along_axis`` on the H200). Checked on the emitted MLIR: every load's
index is a clamp; and the cache key of a kernel holding a concatenate names the rule's
version (``program.RULE_VERSIONS``), so no kernel built by the old rule is reused."""

from __future__ import annotations

import re

import numpy as np

import blu
import blu.numpy as bnp
from blu.lower.cuda.codegen import emit_gpu_kernel
from blu.lower.mlir.program import RULE_VERSIONS, node_text
from blu.lower.plan.fusion import KernelLayout
from blu.lower.plan.nodes import Node, NodeKind


def kernel_of(f, *args):
    j = blu.make_jaxpr(f)(*args).jaxpr
    node = Node(NodeKind.KERNEL, list(j.eqns), list(j.invars), list(j.outvars))
    node.jaxpr = j
    node.layout = KernelLayout(j)
    return node


def test_every_concatenate_operand_is_read_at_a_clamped_index():
    node = kernel_of(lambda a, b, c: bnp.concatenate([a, b * 2.0, c], axis=1) + 1.0,
                     np.zeros((3, 1), np.float32), np.zeros((3, 5), np.float32),
                     np.zeros((3, 2), np.float32))  # fmt: skip
    text = emit_gpu_kernel(node.layout, "kc")
    # each operand's column: (position - offset) clamped by maxsi then minsi, before its load
    shifted = re.findall(r"(%i\d+) = arith\.subi", text)
    assert len(shifted) == 2, text  # the two operands after the first
    for v in shifted:
        assert re.search(rf"= arith\.maxsi {v}, ", text), (v, text)
    assert len(re.findall(r"memref\.load %in[012]\[", text)) == 3
    assert len(re.findall(r"arith\.minsi", text)) >= 3
    assert f"concatenate={RULE_VERSIONS['concatenate']}" in node_text(node)


def test_concatenate_values_on_the_cpu():
    a, b = np.arange(6.0).reshape(3, 2), -np.arange(9.0).reshape(3, 3)
    got = blu.jit(lambda a, b: bnp.concatenate([a, b], 1) * 2.0)(a, b)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([a, b], 1) * 2.0)
