"""Bad inputs give clear errors, never silent wrong answers: out-of-range labels in
cross_entropy (a BluError when concrete; under jit NaN loss with NaN gradient, or ignored
positions with ignore_index, the loss always agreeing with its gradient), take(mode="raise"),
and allocations that cannot fit (BluOutOfMemoryError naming shape, dtype, bytes and the line)."""

from __future__ import annotations

import numpy as np
import pytest

import blu
import blu.numpy as bnp
from blu import nn
from blu.core.errors import BluIndexError, BluOutOfMemoryError

LOGITS = np.random.default_rng(0).normal(size=(4, 5))


def ref_loss(x: np.ndarray, labels: np.ndarray, ignore: int | None = None) -> float:
    lse = np.log(np.exp(x).sum(-1))
    keep = labels != ignore if ignore is not None else np.ones(len(labels), bool)
    per = [lse[i] - x[i, labels[i]] for i in range(len(labels)) if keep[i]]
    return float(np.sum(per) / keep.sum())


def finite_diff(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (float(f(x + d)) - float(f(x - d))) / (2 * eps)
    return g


@pytest.mark.parametrize("bad", [5, 9, -1])
def test_concrete_out_of_range_label_is_an_error(bad):
    labels = np.array([1, bad, 0, 2])
    with pytest.raises(blu.BluError, match=rf"label {bad} at position \(1,\) is out of range"):
        nn.cross_entropy(LOGITS, labels)
    with pytest.raises(blu.BluError, match="out of range for 5 classes"):
        blu.grad(lambda x: nn.cross_entropy(x, labels))(LOGITS)


def test_traced_out_of_range_label_gives_nan_loss_and_nan_gradient():
    f = blu.jit(lambda x, y: nn.cross_entropy(x, y, reduction="none"))
    labels = np.array([1, 7, 0, -3])
    loss = np.asarray(f(LOGITS, labels))
    assert np.isnan(loss[[1, 3]]).all() and np.isfinite(loss[[0, 2]]).all()
    good = np.array([0, 2])
    g = np.asarray(blu.grad(lambda x: bnp.sum(f(x, labels)[good]))(LOGITS))
    fd = finite_diff(lambda x: 2 * ref_loss(x[good], labels[good]), LOGITS)
    np.testing.assert_allclose(g[good], fd[good], rtol=1e-5, atol=1e-8)
    # rows not in the loss get a zero gradient (a zero cotangent through the bad rows' NaN stays
    # zero: docs/conventions.md), as their finite differences say
    np.testing.assert_array_equal(g[[1, 3]], 0.0)
    # the mean loss is NaN, and so is its gradient at the bad positions (they agree; was: a
    # finite loss from one label and a gradient from another)
    g_all = np.asarray(blu.grad(lambda x: bnp.mean(f(x, labels)))(LOGITS))
    fd_all = finite_diff(lambda x: bnp.mean(f(x, labels)), LOGITS)
    assert np.isnan(fd_all).all() and np.isnan(g_all[[1, 3]]).all()


def test_ignore_index_under_jit_loss_agrees_with_gradient():
    labels = np.array([1, -100, 4, -100])
    f = blu.jit(lambda x, y: nn.cross_entropy(x, y, ignore_index=-100))
    np.testing.assert_allclose(float(f(LOGITS, labels)), ref_loss(LOGITS, labels, -100), rtol=1e-12)
    g = np.asarray(blu.jit(blu.grad(f))(LOGITS, labels))
    fd = finite_diff(lambda x: ref_loss(x, labels, -100), LOGITS)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-8)
    assert (g[[1, 3]] == 0).all()


def test_take_raise_mode():
    x = bnp.arange(5.0)
    np.testing.assert_array_equal(np.asarray(bnp.take(x, np.array([0, -5, 4]), mode="raise")),
                                  [0.0, 0.0, 4.0])  # fmt: skip
    with pytest.raises(BluIndexError, match="index 5 is out of bounds for axis 0 with size 5"):
        bnp.take(x, np.array([1, 5]), mode="raise")  # was: silently clamped
    with pytest.raises(IndexError):
        bnp.take(x, -6, mode="raise")
    with pytest.raises(blu.BluError, match="cannot check traced indices"):
        blu.jit(lambda x, i: bnp.take(x, i, mode="raise"))(x, np.array([1]))


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda: bnp.zeros((2**20, 2**20)) + 1.0, "float32[1048576, 1048576]"),
        (lambda: bnp.zeros((2**40, 2**40)), "float32[1099511627776, 1099511627776]"),
        (lambda: blu.jit(lambda: bnp.zeros((2**20, 2**20)))(), "float32[1048576, 1048576]"),
        (lambda: blu.jit(lambda: bnp.zeros((2**40, 2**40)))(), "1099511627776, 1099511627776"),
        (lambda: blu.jit(lambda a: a + bnp.ones((2**20, 2**20)))(1.0), "1048576, 1048576"),
    ],
    ids=["eager", "eager-unaddressable", "jit", "jit-unaddressable", "jit-fused"],
)
def test_allocation_that_cannot_fit_is_a_blu_error(make, shape):
    with pytest.raises(BluOutOfMemoryError) as e:
        make()
    msg = str(e.value)
    assert shape in msg and "bytes" in msg and isinstance(e.value, MemoryError)
    assert "test_reliability_inputs.py" in msg  # the user's line
    assert "iterator is too large" not in msg.splitlines()[0][:60]
