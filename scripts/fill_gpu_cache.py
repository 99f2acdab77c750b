"""Fill the kernel cache for the GPU machine (which has no MLIR): every kernel the GPU tests, the
GPT-2 example and the GPT-2 benchmark run is compiled here, to PTX and (with ptxas) cubin.

    python scripts/fill_gpu_cache.py [--cache .blu_cache] [--skip-tests] [--skip-example]
                                     [--skip-bench] [--skip-parallel] [--bench-modes fp32,bf16]
                                     [--bench-config llama-1b --bench-batch 8 --bench-block 2048]
                                     [--skip-max-batch] [--max-batch-modes bf16]
                                     [--skip-kernel-bench] [--skip-flash-tiles]
                                     [--skip-device-programs] [--skip-generate]
                                     [--skip-vision]

How: the GPU tests and the example run on a simulated GPU (``BLU_FAKE_GPU=1``: device arrays in
host memory, each fused kernel's CPU build executed while its GPU build is compiled into the
cache), so exactly the kernels they will ask for on the GPU get compiled; the benchmark's programs
(GPT-2 124M, too big to run here) and ``benchmarks/gpu_kernels.py``'s (every emitter generation)
are lowered with ``jit(f).lower(*specs, target="cuda:sm_90").compile()``, which compiles without
running; so are those of the benchmark's ``--find-max-batch`` run, at the one batch per mode
that blu's memory plan predicts for an H200 (``--device-memory``, ``--max-batch-margin``: the
values the GPU run uses). Then carry the cache folder to the GPU machine and point
``BLU_CACHE_DIR`` at it (``scripts/gpu_check.sh`` does). Only the GPU entries travel: they are
copied to ``<cache>-gpu`` (``.blu_cache-gpu``), which is the folder to carry.

The corpora the GPU tests read (tinyshakespeare, the GPT-2 BPE files) are first copied from
``../shared/data`` to ``.data/`` (``--data-dir``), and every step here reads them from there
(``BLU_DATA_DIR``), as the GPU machine does from the carried ``.data/``: a test that found its
corpus here but not there would tokenize another text, ask for other shapes, and miss the cache.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_TESTS = [
    "tests/lower/cuda/test_gpu_kernels.py",
    "tests/lower/cuda/test_gpu_splits.py",
    "tests/lower/cuda/test_gpu_special.py",
    "tests/lower/cuda/test_gpu_exp.py",
    "tests/lower/cuda/test_gpu_group_columns.py",
    "tests/lower/cuda/test_gpu_map_stores.py",
    "tests/lower/cuda/test_gpu_row_groups.py",
    "tests/lower/cuda/test_gpu_generations.py",
    "tests/lower/cuda/test_gpu_row_stash.py",
    "tests/lower/cuda/test_gpu_executable.py",
    "tests/lower/cuda/test_gpu_fast_path.py",
    "tests/examples/test_gpt2_example_gpu.py",
    "tests/lower/test_lower_gather_scatter.py",
    "tests/lower/cuda/test_gpu_dynamic.py",
    "tests/lower/cuda/test_gpu_loops.py",
    "tests/lower/cuda/test_gpu_complex_dots.py",
    "tests/lower/cuda/test_flash_attention_gpu.py",
    "tests/examples/test_benchmark_gpt2.py",
    "tests/reliability/test_oom_report.py",
    "tests/lower/cuda/test_complex_gpu.py",
    "tests/lower/cuda/test_gpu_epilogues.py",
    "tests/lower/cuda/test_packed_attention.py",
    "tests/cuda/test_cuda_fft_gpu.py",
    "tests/lower/cuda/test_gpu_cumulative.py",
    "tests/lower/test_scatter_along_axis.py",
    "tests/lower/test_random_gamma_grad_kernel.py",
    "tests/lower/cuda/test_gpu_sort.py",
    "tests/lower/cuda/test_gpu_collectives.py",
    "tests/examples/test_gpt2_decode.py",
    "tests/lower/cuda/test_cudnn_conv_plan.py",
    "tests/lax/test_conv_primitive.py",
    "tests/lower/cuda/test_gpu_vision_step.py",
    "tests/lower/cuda/test_gpu_transformer_step.py",
    "tests/lower/test_fusion_deferred_reductions.py",
]
# the GPU example run of scripts/gpu_check.sh (its programs depend on every flag: e.g. --steps
# sets the learning-rate schedule's constants)
GPU_EXAMPLE = ["--config", "gpt2-124m", "--tokenizer", "gpt2", "--data", ".data/pd_books.txt",
               "--precision", "bf16", "--batch-size", "16", "--block-size", "1024", "--steps",
               "60", "--eval-every", "30", "--eval-iters", "2", "--sample-tokens", "40",
               "--no-progress", "--out", "/tmp/blu_gpt2_gpu", "--overwrite"]  # fmt: skip
EXAMPLE_ARGS = ["--device", "cuda", "--steps", "3", "--eval-every", "3", "--eval-iters", "1",
                "--sample-tokens", "0", "--no-progress", "--no-plot", "--overwrite"]  # fmt: skip


# the files the GPU tests and the small example read through examples.gpt2.data.search_dirs
TEST_CORPORA = ("tinyshakespeare.txt", "gpt2/encoder.json", "gpt2/vocab.bpe")


def stage_corpora(source: Path, dest: Path, names: tuple[str, ...] = TEST_CORPORA) -> list[str]:
    """Copy each of ``names`` from ``source`` to ``dest`` unless an identical copy is there.

    Returns the names copied. Raises ``FileNotFoundError`` naming the file when ``source`` lacks
    one: without it the tests would fall back to a synthetic corpus here and on the GPU alike,
    silently, and fill the cache for programs nobody meant to run."""
    copied = []
    for name in names:
        src, dst = source / name, dest / name
        if not src.is_file():
            raise FileNotFoundError(f"{src}: a corpus the GPU tests read is missing")
        if dst.is_file() and filecmp.cmp(src, dst, shallow=False):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        copied.append(name)
    return copied


def run(cmd: list[str], env: dict, what: str) -> bool:
    t = time.perf_counter()
    print(f"[fill] {what}: {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, cwd=ROOT, env=env)
    print(f"[fill] {what}: {'ok' if r.returncode == 0 else f'FAILED rc={r.returncode}'} "
          f"({time.perf_counter() - t:.0f} s)", flush=True)  # fmt: skip
    return r.returncode == 0


def export_gpu_entries(cache: Path, dest: Path) -> int:
    """Copy the entries the GPU machine reads (``.ptx``, ``.cubin``, ``mlir-version``) to
    ``dest``, without the CPU builds the simulated GPU left beside them (they would only add to
    what travels). Each entry carries its digest record (its header line: key, kind, blu's
    version, sha256), checked on the GPU machine before use, with its contents
    (``entry_check``: no ``.extern`` in PTX, only ptxas's own undefined symbols in a cubin). No key
    travels: GPU entries are not signed (the CPU's are, and stay here). Only blu's entries, as
    regular files, are copied. The folders are made 0700: blu refuses a cache folder others could
    write. Returns the number of kernels."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(mode=0o700, parents=True)
    n = 0
    entry = re.compile(r"[0-9a-f]{2}/[0-9a-f]{64}\.(ptx|cubin)|mlir-version")
    for f in cache.rglob("*"):
        # blu's GPU entries only, as regular files (a link or a foreign file never travels)
        if entry.fullmatch(f.relative_to(cache).as_posix()) and f.is_file() and not f.is_symlink():
            target = dest / f.relative_to(cache)
            target.parent.mkdir(mode=0o700, exist_ok=True)
            shutil.copy2(f, target)
            target.chmod(0o644)
            n += f.suffix == ".ptx"
    return n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", default=str(ROOT / ".blu_cache"), help="the cache folder to fill")
    p.add_argument("--skip-tests", action="store_true")
    p.add_argument("--data-dir", default=str(ROOT / ".data"),
                   help="where the corpora are staged and read from (carry it: .data)")  # fmt: skip
    p.add_argument("--skip-example", action="store_true")
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument(
        "--skip-attention",
        action="store_true",
        help="skip benchmarks/attention.py's jitted programs",
    )
    p.add_argument("--skip-parallel", action="store_true",
                   help="skip scripts/parallel_gpu_world1.py's distributed programs")  # fmt: skip
    p.add_argument("--skip-kernel-bench", action="store_true",
                   help="skip benchmarks/gpu_kernels.py's programs")  # fmt: skip
    p.add_argument("--skip-flash-tiles", action="store_true",
                   help="skip benchmarks/flash_tiles.py's kernel variants")  # fmt: skip
    p.add_argument("--skip-device-programs", action="store_true",
                   help="skip benchmarks/device_programs.py's programs")  # fmt: skip
    p.add_argument("--skip-vision", action="store_true",
                   help="skip benchmarks/vision.py's programs (ResNet-50, ViT-B/16)")  # fmt: skip
    p.add_argument("--skip-generate", action="store_true",
                   help="skip benchmarks/generate.py's programs (GPT-2 generation)")  # fmt: skip
    p.add_argument("--bench-modes", default="fp32,tf32,bf16")
    p.add_argument(
        "--skip-max-batch",
        action="store_true",
        help="skip the --find-max-batch programs (one predicted batch per mode)",
    )
    p.add_argument("--max-batch-modes", default="fp32,tf32,bf16")
    p.add_argument(
        "--device-memory",
        type=int,
        default=None,
        metavar="BYTES",
        help="the GPU's memory for the prediction (default: an H200's)",
    )
    p.add_argument(
        "--max-batch-margin",
        type=int,
        default=None,
        metavar="BYTES",
        help="bytes kept free (default: the benchmark's, 2 GiB)",
    )
    p.add_argument("--bench-config", default="gpt2-124m")
    p.add_argument("--bench-batch", type=int, default=16,
                   help="the benchmark's --batch (default 16)")  # fmt: skip
    p.add_argument("--bench-block", type=int, default=1024,
                   help="the benchmark's --block (default 1024)")  # fmt: skip
    p.add_argument("--bench-n-ctx", type=int, default=None,
                   help="the benchmark's --n-ctx (default: the config's context)")  # fmt: skip
    p.add_argument("--example-configs", default="small,gpt2-124m-bpe",
                   help="example configs to run (gpt2-124m-bpe: gpt2-124m on GPT-2 BPE, lowered "
                   "only)")  # fmt: skip
    a = p.parse_args()
    # BLU_TEST_CACHE_DIR: the tests compile into this cache (else into a temporary one)
    sys.path.insert(0, str(ROOT))
    from examples.gpt2.data import shared_data_dir

    copied = stage_corpora(shared_data_dir(), Path(a.data_dir))
    print(f"[fill] corpora in {a.data_dir}: {', '.join(copied) or 'already there'}", flush=True)
    env = dict(os.environ, BLU_CACHE_DIR=a.cache, BLU_TEST_CACHE_DIR=a.cache, BLU_FAKE_GPU="1",
               BLU_DATA_DIR=a.data_dir, PYTHONPATH=str(ROOT))  # fmt: skip
    os.environ.update(BLU_CACHE_DIR=a.cache)
    ok = True
    if not a.skip_tests:
        tests = [t for t in GPU_TESTS if (ROOT / t).exists()]
        ok &= run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
                   *tests], env, "GPU tests on the simulated GPU")  # fmt: skip
    if not a.skip_example:
        for cfg in a.example_configs.split(","):
            if cfg == "gpt2-124m-bpe":
                lower_env = dict(env, BLU_FAKE_GPU="0")
                ok &= run([sys.executable, "-m", "examples.gpt2", "--device", "cuda",
                           "--lower-only", *GPU_EXAMPLE], lower_env,
                          "GPT-2 124M example, lowered")  # fmt: skip
            if cfg == "small":
                ok &= run([sys.executable, "-m", "examples.gpt2", "--config", "small",
                           "--out", "/tmp/blu_fill_example", *EXAMPLE_ARGS], env,
                          "GPT-2 example (small, char) on the simulated GPU")  # fmt: skip
    if not a.skip_parallel:
        # the distributed programs (DP, ZeRO-1, FSDP, TP, PP, 2-D) as a world of one: the GPU runs
        # them over NCCL; here the one-process communicator stands in (the same programs)
        ok &= run([sys.executable, "scripts/parallel_gpu_world1.py", "--backend", "cpu"], env,
                  "distributed programs, a world of one, on the simulated GPU")  # fmt: skip
    if not a.skip_attention:
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from benchmarks.attention import fill_cache\n"
            "fill_cache()\n"
        )
        ok &= run(
            [sys.executable, "-c", code],
            dict(env, BLU_FAKE_GPU="0"),
            "attention benchmark programs, lowered for cuda:sm_90",
        )
    if not a.skip_bench:
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from benchmarks.gpt2_124m import fill_cache\n"
            f"fill_cache({a.bench_config!r}, {a.bench_modes!r}.split(','), {a.bench_batch}, "
            f"{a.bench_block}, n_ctx={a.bench_n_ctx})\n"
        )
        ok &= run([sys.executable, "-c", code], dict(env, BLU_FAKE_GPU="0"),
                  f"benchmark programs ({a.bench_config}, {a.bench_batch}x{a.bench_block}), "
                  "lowered for cuda:sm_90")  # fmt: skip
    if not a.skip_max_batch:
        extra = "".join(f", {k}={v}" for k, v in (("device_bytes", a.device_memory),
                                                    ("margin_bytes", a.max_batch_margin))
                        if v is not None)  # fmt: skip
        code = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from benchmarks.gpt2_124m import fill_max_batch_cache\n"
            f"fill_max_batch_cache({a.bench_config!r}, {a.max_batch_modes!r}.split(','), "
            f"block={a.bench_block}, n_ctx={a.bench_n_ctx}{extra})\n"
        )
        ok &= run([sys.executable, "-c", code], dict(env, BLU_FAKE_GPU="0"),
                  "GPT-2 --find-max-batch programs (the plan's batch per mode)")  # fmt: skip
    if not a.skip_kernel_bench:
        ok &= run([sys.executable, str(ROOT / "benchmarks" / "gpu_kernels.py"), "--fill"],
                  dict(env, BLU_FAKE_GPU="0"),
                  "GPU kernel benchmark programs, lowered for cuda:sm_90")  # fmt: skip
    if not a.skip_flash_tiles:  # every flash-attention variant: CUDA cores, TF32, 3xTF32
        ok &= run([sys.executable, str(ROOT / "benchmarks" / "flash_tiles.py"), "--compile",
                   "--cache", a.cache], dict(env, BLU_FAKE_GPU="0"),
                  "flash-attention kernel variants (benchmarks/flash_tiles.py)")  # fmt: skip
    if not a.skip_device_programs:  # the former host fallbacks, timed against JAX on the GPU
        ok &= run([sys.executable, str(ROOT / "benchmarks" / "device_programs.py"), "--fill"],
                  dict(env, BLU_FAKE_GPU="0"),
                  "device programs, lowered for cuda:sm_90")  # fmt: skip
    if not a.skip_vision:  # the vision benchmark's steps (its default models, modes and batch)
        ok &= run([sys.executable, str(ROOT / "benchmarks" / "vision.py"), "--fill"],
                  dict(env, BLU_FAKE_GPU="0"),
                  "vision benchmark programs, lowered for cuda:sm_90")  # fmt: skip
    if not a.skip_generate:  # GPT-2 124M generation loops (the defaults of the GPU run)
        ok &= run([sys.executable, str(ROOT / "benchmarks" / "generate.py"), "--fill"],
                  dict(env, BLU_FAKE_GPU="0"),
                  "GPT-2 generation programs, lowered for cuda:sm_90")  # fmt: skip
    n = export_gpu_entries(Path(a.cache), Path(a.cache + "-gpu"))
    print(f"[fill] {a.cache}: {n} GPU kernels, copied to {a.cache}-gpu (carry that folder)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
