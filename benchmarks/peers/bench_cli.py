"""The command line of ``benchmarks/gpt2_124m.py``: its constants, flags and their checks, and
the model sizes every system builds (kept apart so the driver stays one concept)."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.peers import fidelity as fid

ROOT = Path(__file__).resolve().parents[2]

SYSTEMS = ("blu", "torch", "torch-compile", "jax")
H200_MEMORY_BYTES = 143771 * 2**20  # as blu_gpt2.H200_MEMORY_BYTES (no blu import here)
MAX_BATCH_MARGIN_BYTES = 2 * 2**30
MODES = ("fp32", "tf32", "bf16")
CONFIGS = ("tiny", "small", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b",
           "llama-tiny", "llama-small", "llama-125m", "llama-1b")  # fmt: skip
GPT2_TOKENS = 50257
LLAMA_TOKENS = 128256  # Llama 3's tokenizer, the vocabulary of llama-1b (blu_models.py's)
PEERS_DIR = ROOT / "benchmarks" / "peers"
DEFAULT_JSON = ROOT / "runs" / "bench" / "gpt2_124m.json"
DEFAULT_WORKDIR = ROOT / ".cache" / "bench_gpt2"
DEFAULT_PREDICTIONS = ROOT / ".data" / "max_batch_plan.json"


class BenchmarkError(Exception):
    """A flag, a results file or BENCHMARKS.md that the benchmark cannot use (printed as
    ``error: ...``, exit status 2)."""


def _csv(value: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise BenchmarkError(
            f"{flag} takes a comma-separated list of {', '.join(allowed)}; got {value!r}"
        )
    return list(dict.fromkeys(items))


def build_parser(doc: str) -> argparse.ArgumentParser:
    """The flags of ``benchmarks/gpt2_124m.py`` (``doc``: its docstring, for the help)."""
    p = argparse.ArgumentParser(
        prog="python benchmarks/gpt2_124m.py",
        description=doc.split("\n\n")[0],
        epilog="\n\n".join(doc.split("\n\n")[1:3]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--systems",
        default=None,
        help="default: all of " + ",".join(SYSTEMS) + " (llama-* configs: all but jax)",
    )
    p.add_argument("--modes", default=",".join(MODES), help="default: fp32,tf32,bf16")
    p.add_argument(
        "--config",
        default="gpt2-124m",
        choices=CONFIGS,
        help="model size (the GPT-2 example's configs, GPT-2 or, llama-*, LLaMA-style; "
        "tiny/small/llama-tiny for CPU smoke runs)",
    )
    p.add_argument(
        "--vocab",
        type=int,
        default=None,
        help="tokenizer vocabulary, padded as the config says (default: GPT-2's 50257, padded "
        "to 50304 for gpt2-124m; llama-* configs Llama 3's 128256)",
    )
    p.add_argument("--n-ctx", type=int, default=None, metavar="T",
                   help="the model's context if not the config's: GPT-2's learned position "
                   "table has that many rows (e.g. 8192 for gpt2-124m at --block 8192); every "
                   "system builds the same")  # fmt: skip
    p.add_argument("--batch", type=int, default=16, help="sequences per step (default 16)")
    p.add_argument("--block", type=int, default=1024, help="tokens per sequence (default 1024)")
    p.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="untimed steps first (default: each script's own: blu 5, torch 5, jax 3)",
    )
    p.add_argument("--timeout", type=float, default=420, help="seconds per process (default 420)")
    p.add_argument(
        "--time-budget",
        type=float,
        default=0,
        metavar="S",
        help="stop starting processes once S seconds are spent (0: no limit)",
    )
    p.add_argument("--no-throughput", action="store_true", help="run no throughput processes")
    p.add_argument("--find-max-batch", action="store_true",
                   help="search the largest batch that trains one step, per system and mode "
                   "(instead of the throughput runs and fidelity checks)")  # fmt: skip
    p.add_argument("--max-batch-start", type=int, default=1, metavar="B",
                   help="--find-max-batch: first batch tried (default 1)")  # fmt: skip
    p.add_argument("--max-batch-limit", type=int, default=1024, metavar="B",
                   help="--find-max-batch: largest batch tried (default 1024)")  # fmt: skip
    p.add_argument("--max-batch-grid", default=None, metavar="B,B,...",
                   help="--find-max-batch: only try these batch sizes (e.g. those blu's kernel "
                   "cache was filled for)")  # fmt: skip
    p.add_argument("--blu-max-batch", default="plan", choices=("plan", "search"),
                   help="--find-max-batch for blu: predict from the memory plan and run that "
                   "batch (default), or search on the GPU as the peers")  # fmt: skip
    p.add_argument("--device-memory", type=int, default=H200_MEMORY_BYTES, metavar="BYTES",
                   help="--find-max-batch: the GPU's memory (default an H200's, "
                   f"{H200_MEMORY_BYTES}); fill blu's kernel cache for the same")  # fmt: skip
    p.add_argument("--max-batch-margin", type=int, default=MAX_BATCH_MARGIN_BYTES, metavar="BYTES",
                   help="--find-max-batch: bytes kept free (default 2 GiB)")  # fmt: skip
    p.add_argument("--blu-predictions", default=None, metavar="PATH",
                   help="--find-max-batch: blu's plan predictions saved by the kernel-cache fill "
                   f"(e.g. {DEFAULT_PREDICTIONS.relative_to(ROOT)}); a matching one is used "
                   "instead of predicting again")  # fmt: skip
    p.add_argument("--fidelity", action=argparse.BooleanOptionalAction, default=True,
                   help="run the fidelity checks (blu and torch; default on: --no-fidelity skips "
                   "them)")  # fmt: skip
    p.add_argument("--fidelity-steps", type=int, default=200, help="bf16 curve steps (200)")
    p.add_argument(
        "--data",
        default=None,
        metavar="PATH",
        help="fidelity tokens: a .txt corpus (GPT-2 BPE) or a .npy of token ids",
    )
    p.add_argument(
        "--init",
        default="numpy",
        choices=("numpy", "blu"),
        help="initial weights: the example's init drawn with numpy (fast) or blu",
    )
    p.add_argument("--seed", type=int, default=0, help="initial weights and fidelity batches")
    p.add_argument(
        "--prepare-data",
        action="store_true",
        help="tokenize the corpus into .data/pd_books.gpt2.npy and exit",
    )
    p.add_argument(
        "--json",
        default=str(DEFAULT_JSON),
        help=f"results file (default {DEFAULT_JSON.relative_to(ROOT)})",
    )
    p.add_argument("--workdir", default=str(DEFAULT_WORKDIR), help="logs, weights, batches")
    p.add_argument("--report", action="store_true", help="run nothing: print the table from --json")
    p.add_argument(
        "--update-benchmarks",
        action="store_true",
        help="rewrite this benchmark's section of BENCHMARKS.md",
    )
    p.add_argument("--benchmarks-md", default=str(ROOT / "BENCHMARKS.md"), help=argparse.SUPPRESS)
    p.add_argument("--machine", default=None, help="machine name (default: the GPU's, or CPU)")
    return p


def parse_args(argv: list[str] | None, doc: str) -> argparse.Namespace:
    """Parsed and checked flags (``systems`` and ``modes`` become lists).

    Raises:
        BenchmarkError: an impossible value, naming the flag.
    """
    a = build_parser(doc).parse_args(argv)
    if a.systems is None:  # JAX has no LLaMA peer
        a.systems = ",".join(s for s in SYSTEMS if not (is_llama(a.config) and s == "jax"))
    a.systems = _csv(a.systems, SYSTEMS, "--systems")
    a.modes = _csv(a.modes, MODES, "--modes")
    if a.vocab is None:
        a.vocab = default_vocab(a.config)
    if is_llama(a.config) and "jax" in a.systems:
        raise BenchmarkError(f"--systems jax has no LLaMA model ({a.config}): leave jax out")
    for flag in ("batch", "block", "steps", "vocab", "timeout"):
        if getattr(a, flag) <= 0:
            raise BenchmarkError(f"--{flag} must be positive, got {getattr(a, flag)}")
    if a.warmup is not None and a.warmup < 0:
        raise BenchmarkError(f"--warmup must be >= 0, got {a.warmup}")
    if a.max_batch_start < 1 or a.max_batch_limit < a.max_batch_start:
        raise BenchmarkError(
            f"--max-batch-start ({a.max_batch_start}) must be >= 1 and <= --max-batch-limit "
            f"({a.max_batch_limit})"
        )
    if a.max_batch_grid is not None:
        try:
            a.max_batch_grid = sorted({int(v) for v in a.max_batch_grid.split(",") if v.strip()})
        except ValueError:
            raise BenchmarkError(
                f"--max-batch-grid takes comma-separated integers, got {a.max_batch_grid!r}"
            ) from None
        if not a.max_batch_grid or a.max_batch_grid[0] < 1:
            raise BenchmarkError("--max-batch-grid needs positive batch sizes")
    if a.time_budget < 0:
        raise BenchmarkError(f"--time-budget must be >= 0, got {a.time_budget}")
    if a.fidelity_steps < fid.FP32_STEPS:
        raise BenchmarkError(
            f"--fidelity-steps must be >= {fid.FP32_STEPS}, got {a.fidelity_steps}"
        )
    if a.n_ctx is not None and a.n_ctx <= 0:
        raise BenchmarkError(f"--n-ctx must be positive, got {a.n_ctx}")
    if a.update_benchmarks and (is_llama(a.config) or a.n_ctx is not None):
        raise BenchmarkError(
            f"--update-benchmarks writes GPT-2's section of BENCHMARKS.md, not {a.config}'s"
            f"{' at --n-ctx' if a.n_ctx else ''}: leave it out"
        )
    n_ctx = model_dims(a.config, a.vocab, a.n_ctx)["n_ctx"]
    if a.block > n_ctx:
        raise BenchmarkError(
            f"--block {a.block} is longer than the context of {a.config} ({n_ctx}); "
            f"--n-ctx {a.block} gives the model a longer one"
        )
    if a.report and not Path(a.json).is_file():
        raise BenchmarkError(f"--report reads --json {a.json}, which does not exist")
    if a.data is not None and not Path(a.data).is_file():
        raise BenchmarkError(f"--data {a.data} is not a file")
    return a


def is_llama(config: str) -> bool:
    """Whether ``config`` names the LLaMA-style decoder (``examples.gpt2.llama``)."""
    return config.startswith("llama")


def default_vocab(config: str) -> int:
    """The tokenizer vocabulary ``config`` is benchmarked with: GPT-2's, or Llama 3's."""
    return LLAMA_TOKENS if is_llama(config) else GPT2_TOKENS


def model_dims(config: str, vocab: int, n_ctx: int | None = None) -> dict:
    """The example config's sizes, vocabulary padded (what every system builds); a LLaMA
    config's also ``arch="llama"``, its K/V heads, SwiGLU width, RoPE base and RMSNorm epsilon
    (the flags of ``torch_gpt2.py --arch llama``). ``n_ctx``: the context if not the config's."""
    from examples.gpt2.models import CONFIGS as EXAMPLE_CONFIGS

    c = EXAMPLE_CONFIGS[config].with_vocab(vocab)
    dims = dict(vocab=c.vocab_size, n_layer=c.n_layer, n_head=c.n_head, d_model=c.d_model,
                n_ctx=c.n_ctx if n_ctx is None else n_ctx)  # fmt: skip
    if is_llama(config):
        dims.update(arch="llama", n_kv_head=c.n_kv_head, d_ff=c.d_ff, rope_theta=c.rope_theta,
                    norm_eps=c.norm_eps)  # fmt: skip
    return dims
