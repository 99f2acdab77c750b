"""Settings (``BLU_*`` environment variables) are parsed by one function that names the variable,
its value and what is expected (issue #41): a value that does not parse is an error when blu is
imported, never a bare ``ValueError`` later, nor silently ignored (``BLU_LOG_COMPILES=maybe``
used to mean off)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from blu.core.config import FLAGS, Config, parse_setting
from blu.core.errors import BluError, BluValueError

BAD = {  # variable -> (a value that does not parse, words of what is expected)
    "BLU_LOG_COMPILES": ("maybe", "a boolean"),
    "BLU_DEBUG_NANS": ("2", "a boolean"),
    "BLU_DEBUG": ("loud", "a whole number from 0 to 4"),
    "BLU_CUDA_GRAPHS": ("sometimes", "auto or a boolean"),
    "BLU_GPU_UNROLL": ("-1", "a whole number >= 0"),
    "BLU_NUM_CPU_DEVICES": ("zero", "a whole number >= 1"),
    "BLU_CACHE_MAX_BYTES": ("2GB", "a whole number of bytes"),
    "BLU_JIT_CACHE_SIZE": ("0", "a whole number >= 1"),
    "BLU_CPU_THREADS": ("1.5", "a whole number >= 1"),
    "BLU_GPU_KERNELS": ("4", "a whole number from 1 to 3"),
    "BLU_GPU_MEMORY_LIMIT": ("lots", "a whole number of bytes"),
    "BLU_JIT_BACKEND": ("llvm", "one of 'mlir', 'numpy'"),
    "BLU_GPU_ROWS": ("lane", "one of 'block', 'warp'"),
    "BLU_PARALLEL_BACKEND": ("gloo", "one of 'nccl', 'mpi', 'cpu'"),
    "BLU_DEFAULT_MATMUL_PRECISION": ("fp8", "one of 'fp32'"),
    "BLU_CPU_SPIN": ("y", "a boolean"),
    "BLU_GPU_EXP": ("fast", "one of 'ex2', 'ex2-reduced', 'poly'"),
    "BLU_GPU_GROUP_COLUMNS": ("sometimes", "a boolean"),
    "BLU_GPU_MAP_VALUES": ("0", "a whole number >= 1"),
}


@pytest.mark.parametrize("var", sorted(BAD))
def test_a_value_that_does_not_parse_names_variable_value_and_expectation(var):
    raw, expected = BAD[var]
    with pytest.raises(BluValueError) as e:
        Config(environ={var: raw})
    msg = str(e.value)
    assert msg.startswith(f"{var}={raw!r}: expected ") and expected in msg, msg
    assert isinstance(e.value, BluError) and isinstance(e.value, ValueError)


def test_every_setting_goes_through_the_one_parser():
    """Each flag's variable: an empty value is unset (the default), and a value that parses
    gives the same through ``parse_setting`` as through ``Config``."""
    good = {"BLU_CACHE_DIR": "/tmp/x", "BLU_DUMP_IR": "/tmp/ir", "BLU_CUDA_GRAPHS": "auto",
            "BLU_DEFAULT_MATMUL_PRECISION": "TF32", "BLU_JIT_BACKEND": "numpy",
            "BLU_GPU_ROWS": "warp", "BLU_PARALLEL_BACKEND": "mpi",
            "BLU_GPU_EXP": "poly"}  # fmt: skip
    for name, (var, _, default) in FLAGS.items():
        assert getattr(Config(environ={var: "  "}), name) == default, var
        raw = good.get(var) or ("1" if var not in BAD or BAD[var][1] != "a boolean" else "on")
        if var in BAD and "whole number" in BAD[var][1]:
            raw = "2" if var != "BLU_GPU_KERNELS" else "3"
        assert getattr(Config(environ={var: raw}), name) == parse_setting(var, raw), var


@pytest.mark.parametrize("raw,want", [("off", False), ("No", False), (" TRUE ", True)])
def test_booleans_both_ways(raw, want):
    assert Config(environ={"BLU_LOG_COMPILES": raw}).log_compiles is want


def test_bad_setting_stops_import_with_the_message(tmp_path):
    env = dict(os.environ, BLU_CPU_THREADS="many", BLU_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", "import blu"], env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode != 0
    assert "BluValueError: BLU_CPU_THREADS='many': expected a whole number >= 1" in r.stderr
