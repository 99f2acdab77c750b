"""blu.config: each flag read from its environment variable once, then set by update/override."""

import json
import os
import subprocess
import sys

import pytest

import blu
from blu.core.config import FLAGS, Config
from blu.core.errors import BluValueError

# the flags agreed in INTERFACES.md (issue #15), with their environment variables
AGREED = {
    "log_compiles": "BLU_LOG_COMPILES",
    "debug_nans": "BLU_DEBUG_NANS",
    "debug": "BLU_DEBUG",
    "cache_dir": "BLU_CACHE_DIR",
    "default_matmul_precision": "BLU_DEFAULT_MATMUL_PRECISION",
    "jit_backend": "BLU_JIT_BACKEND",
    "cuda_graphs": "BLU_CUDA_GRAPHS",
    "gpu_unroll": "BLU_GPU_UNROLL",
    "gpu_rows": "BLU_GPU_ROWS",
    "dump_ir": "BLU_DUMP_IR",
    "cache_no_so": "BLU_CACHE_NO_SO",
    "fake_gpu": "BLU_FAKE_GPU",
    "profile": "BLU_PROFILE",
    "num_cpu_devices": "BLU_NUM_CPU_DEVICES",
    "parallel_backend": "BLU_PARALLEL_BACKEND",
    "disable_jit": "BLU_DISABLE_JIT",
    "cache_max_bytes": "BLU_CACHE_MAX_BYTES",
    "cache_key_file": "BLU_CACHE_KEY_FILE",
    "cudnn_attention": "BLU_CUDNN_ATTENTION",
    "cudnn_conv": "BLU_CUDNN_CONV",
    "jit_cache_size": "BLU_JIT_CACHE_SIZE",
    "executable_cache_size": "BLU_EXECUTABLE_CACHE_SIZE",
    "kernel_cache_size": "BLU_KERNEL_CACHE_SIZE",
    "flash_attention": "BLU_FLASH_ATTENTION",
    "gpu_memory_limit": "BLU_GPU_MEMORY_LIMIT",
    "cpu_threads": "BLU_CPU_THREADS",
    "gpu_kernels": "BLU_GPU_KERNELS",
    "flash_tensor_cores": "BLU_FLASH_TENSOR_CORES",
    "gemm_search": "BLU_GEMM_SEARCH",
    "gpu_epilogues": "BLU_GPU_EPILOGUES",
    "gpu_gelu_aux": "BLU_GPU_GELU_AUX",
    "gpu_column_blocks": "BLU_GPU_COLUMN_BLOCKS",
    "gpu_row_stash": "BLU_GPU_ROW_STASH",
    "gpu_row_prefetch": "BLU_GPU_ROW_PREFETCH",
    "gpu_exp": "BLU_GPU_EXP",
    "gpu_group_columns": "BLU_GPU_GROUP_COLUMNS",
    "gpu_map_values": "BLU_GPU_MAP_VALUES",
    "packed_attention": "BLU_PACKED_ATTENTION",
    "unroll_scans": "BLU_UNROLL_SCANS",
    "cuda_conditional_nodes": "BLU_CUDA_CONDITIONAL_NODES",
    "cpu_mkl": "BLU_CPU_MKL",
    "cpu_spin": "BLU_CPU_SPIN",
}


def test_every_agreed_flag_has_its_variable():
    assert {name: var for name, (var, _, _) in FLAGS.items()} == AGREED


def test_defaults_without_environment():
    c = Config(environ={})
    assert c.log_compiles is False and c.debug_nans is False and c.debug == 0
    assert c.cache_dir == os.path.join(os.path.expanduser("~"), ".cache", "blu")
    assert c.default_matmul_precision == "fp32"
    assert c.jit_backend == "" and c.gpu_rows == "block" and c.gpu_unroll is None
    assert c.cuda_graphs == "auto" and c.cache_no_so is False and c.fake_gpu is False
    assert c.profile is False and c.dump_ir == ""
    assert c.num_cpu_devices == 1 and c.parallel_backend is None


@pytest.mark.parametrize("raw,want", [("1", True), ("true", True), ("ON", True), ("yes", True),
                                      ("0", False), ("no", False), ("", False)])  # fmt: skip
def test_bool_flags_from_environment(raw, want):
    for name in ("log_compiles", "debug_nans", "cuda_graphs", "cache_no_so", "fake_gpu", "profile"):
        if name == "cuda_graphs" and raw == "":
            continue  # unset: its default, "auto"
        assert getattr(Config(environ={AGREED[name]: raw}), name) is want, name


@pytest.mark.parametrize("raw", ["auto", "AUTO", " Auto "])
def test_cuda_graphs_auto(raw):
    assert Config(environ={"BLU_CUDA_GRAPHS": raw}).cuda_graphs == "auto"


def test_typed_flags_from_environment(tmp_path):
    env = {
        "BLU_CACHE_DIR": str(tmp_path),
        "BLU_DEBUG": "3",
        "BLU_GPU_UNROLL": "0",
        "BLU_GPU_ROWS": "Warp",
        "BLU_JIT_BACKEND": "NumPy",
        "BLU_NUM_CPU_DEVICES": "4",
        "BLU_PARALLEL_BACKEND": "cpu",
        "BLU_DUMP_IR": str(tmp_path / "ir"),
        "BLU_DEFAULT_MATMUL_PRECISION": "bf16",
    }
    c = Config(environ=env)
    assert c.cache_dir == str(tmp_path) and c.debug == 3 and c.gpu_unroll == 0
    assert c.gpu_rows == "warp" and c.jit_backend == "numpy" and c.num_cpu_devices == 4
    assert c.parallel_backend == "cpu" and c.dump_ir == str(tmp_path / "ir")
    assert c.default_matmul_precision == "bf16"
    # a value that does not parse is an error naming the variable (test_reliability_settings.py)
    with pytest.raises(BluValueError, match="BLU_NUM_CPU_DEVICES='zero'"):
        Config(environ={"BLU_NUM_CPU_DEVICES": "zero"})


def test_update_wins_over_the_environment(tmp_path):
    c = Config(environ={"BLU_CACHE_DIR": str(tmp_path / "env")})
    c.update("cache_dir", str(tmp_path / "code"))
    assert c.cache_dir == str(tmp_path / "code")


def test_override_restores_also_on_error():
    c = Config(environ={"BLU_LOG_COMPILES": "1"})
    with c.override(log_compiles=False, debug=2):
        assert c.log_compiles is False and c.debug == 2
    assert c.log_compiles is True and c.debug == 0
    with pytest.raises(RuntimeError), c.override(debug=4):
        raise RuntimeError
    assert c.debug == 0


def test_unknown_flags_and_attribute_assignment_are_errors():
    c = Config(environ={})
    with pytest.raises(BluValueError, match="no flag 'nope'"):
        c.update("nope", 1)
    with pytest.raises(BluValueError, match="no flag 'nope'"), c.override(nope=1):
        pass
    with pytest.raises(BluValueError, match="config.update"):
        c.debug = 1
    with pytest.raises(AttributeError):
        _ = c.nope


def test_set_flag_fixture_changes_the_global_config(set_flag):
    set_flag("num_cpu_devices", 3)
    assert blu.config.num_cpu_devices == 3 and len(blu.parallel.devices()) == 3


def test_environment_read_once_at_import(tmp_path):
    """A fresh process takes its flags from the environment at import; changing os.environ
    afterwards changes nothing, and config.update does."""
    code = (
        "import json, os, blu\n"
        "from blu.cuda.device import fake_gpu\n"
        "before = [len(blu.parallel.devices()), fake_gpu(), blu.config.cache_dir]\n"
        "os.environ['BLU_NUM_CPU_DEVICES'] = '5'\n"
        "os.environ['BLU_CACHE_DIR'] = 'elsewhere'\n"
        "after_env = [len(blu.parallel.devices()), blu.config.cache_dir]\n"
        "blu.config.update('num_cpu_devices', 2)\n"
        "print(json.dumps([before, after_env, len(blu.parallel.devices())]))\n"
    )
    env = dict(os.environ, BLU_NUM_CPU_DEVICES="3", BLU_FAKE_GPU="1",
               BLU_CACHE_DIR=str(tmp_path))  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    before, after_env, after_update = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == [3, True, str(tmp_path)]
    assert after_env == [3, str(tmp_path)]
    assert after_update == 2
