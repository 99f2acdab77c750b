"""The conditional-node helper kernels (``blu/cuda/conditional.py``) are valid PTX for sm_90
(``ptxas`` compiles them as relocatable code: ``cudaGraphSetConditional`` is the driver's)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from blu.cuda.conditional import _SET_CONDITION_PTX


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="needs ptxas")
def test_conditional_kernels_pass_ptxas(tmp_path):
    src = tmp_path / "conditional.ptx"
    src.write_text(_SET_CONDITION_PTX)
    r = subprocess.run(["ptxas", "-arch=sm_90", "-c", str(src), "-o", str(tmp_path / "c.o")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = _SET_CONDITION_PTX
    assert ".entry blu_set_condition" in text and ".entry blu_set_branch" in text
