"""The CPU executable's arena (``blu/lower/cpu/hugepages.py``): as long as asked, writable, from a
2 MiB boundary where it spans a huge page (Linux), and the executable's arena is one."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import blu
from blu.lower.cpu import hugepages


@pytest.mark.parametrize("nbytes", [0, 1, 4096, hugepages.HUGE_PAGE - 1, hugepages.HUGE_PAGE,
                                    3 * hugepages.HUGE_PAGE + 12345])  # fmt: skip
def test_arena_is_as_long_as_asked_and_writable(nbytes):
    a = hugepages.arena(nbytes)
    assert a.dtype == np.uint8 and a.ndim == 1 and a.nbytes == max(nbytes, 64)
    a[:] = 7
    a[-1] = 3
    assert int(a.sum()) == 7 * (a.size - 1) + 3
    if sys.platform.startswith("linux") and nbytes >= hugepages.HUGE_PAGE:
        assert a.ctypes.data % hugepages.HUGE_PAGE == 0


def test_an_executables_arena_starts_at_a_huge_page():
    n = 1 << 20  # float32 temporaries of 4 MiB each: an arena of several huge pages

    def f(x):
        m = x.reshape(1024, 1024)
        y = blu.numpy.exp(m) @ m
        return blu.numpy.tanh(y).sum() + (y * y).sum()

    x = np.linspace(-1, 1, n, dtype=np.float32)
    got = float(blu.jit(f)(x))
    x64 = x.astype(np.float64)
    m64 = x64.reshape(1024, 1024)
    y = np.exp(m64) @ m64
    assert np.isclose(got, np.tanh(y).sum() + (y * y).sum(), rtol=1e-4)
    exe = blu.jit(f).lower(x, target="cpu").compile().executable
    exe(x)
    if sys.platform.startswith("linux") and exe._arena.nbytes >= hugepages.HUGE_PAGE:
        assert exe._arena.ctypes.data % hugepages.HUGE_PAGE == 0
