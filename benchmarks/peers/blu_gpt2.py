"""GPT-2 training step in blu: throughput (one JSON line), the fidelity run, and the programs.

The model is the GPT-2 example's (``examples/gpt2/model.py``: tied embeddings, the vocabulary
padded as the config says — 50304 for ``gpt2-124m``) and so is the training step
(``examples.gpt2.train.make_steps``: one ``blu.jit`` program of ``value_and_grad``, the
gradient's global norm and the AdamW update, parameters and optimizer state donated), with the
peers' optimizer: AdamW from ``blu/optim.py``, lr 6e-4, betas (0.9, 0.999), eps 1e-8, decay 0.1
on matrices and embeddings only (``optim.decay_mask_matrices``, the peers' ``dim >= 2``), no
schedule, no clipping. Modes: ``fp32`` and ``tf32`` compute in float32 under
``default_matmul_precision`` "fp32" / "tf32"; ``bf16`` computes in bfloat16 with float32 master
weights (the example's ``--precision bf16``) under "bf16".

Throughput is measured as the peers measure it: parameters made on the host (numpy), moved to the
GPU once with random tokens; ``--warmup`` steps, then the peak-memory counter is reset and
``--steps`` steps are timed one by one (each waits for its loss); tokens/s from the median step;
peak memory from ``blu.cuda.memory_stats()["peak_allocated_bytes"]``, printed beside the memory
plan's prediction (``plan_peak_GiB``: ``jit(step).lower(..., target).memory_analysis()``, the
static plan of the very program that runs). Without a GPU it runs on the CPU (no measured peak;
the prediction is the CPU plan's).

    python benchmarks/peers/blu_gpt2.py --mode bf16 --config gpt2-124m --B 16 --T 1024
    python benchmarks/peers/blu_gpt2.py --fidelity --mode fp32 --weights w.npz --batches b.npz \\
        --steps 3 --out blu_fp32.json

Everything blu runs on the GPU goes through the jitted programs of :func:`blu_programs`; the
GPU machine has no MLIR, so their kernels are compiled ahead of time into the kernel cache by
:func:`compile_blu_programs` (same config, precision, batch and block).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: blu, examples

import blu  # noqa: E402
import blu.random as random  # noqa: E402
from blu import optim  # noqa: E402
from blu.core import pytree  # noqa: E402
from examples.gpt2.checkpoint import flatten_named, unflatten_named  # noqa: E402
from examples.gpt2.model import CONFIGS, GPTConfig, init_params, num_params  # noqa: E402
from examples.gpt2.train import make_steps  # noqa: E402

GPT2_TOKENS = 50257  # GPT-2's BPE vocabulary (padded by the config, e.g. to 50304)
MODES = ("fp32", "tf32", "bf16")
ADAMW = dict(learning_rate=6e-4, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.1)
INITS = ("numpy", "blu")


def model_config(name: str, vocab: int = GPT2_TOKENS) -> GPTConfig:
    """The example's config ``name`` sized for ``vocab`` tokens (padded as the config says).

    Raises:
        KeyError: unknown config name.
    """
    return CONFIGS[name].with_vocab(vocab)


def make_optimizer() -> optim.Optimizer:
    """AdamW as the peers run it: constant lr 6e-4, decay 0.1 on ``ndim >= 2`` leaves only."""
    return optim.adamw(**ADAMW, mask=optim.decay_mask_matrices)


@contextlib.contextmanager
def precision_scope(precision: str) -> Iterator[None]:
    """``blu.default_matmul_precision(precision)`` where it exists, else the config override."""
    if precision not in MODES:
        raise ValueError(f"precision must be one of {MODES}, got {precision!r}")
    ctx = getattr(blu, "default_matmul_precision", None)
    if ctx is not None:
        with ctx(precision):
            yield
    else:
        with blu.config.override(default_matmul_precision=precision):
            yield


def train_step(cfg: GPTConfig, precision: str) -> Any:
    """The example's jitted step ``(params, opt_state, xs, ys, key) -> (params, opt_state, loss,
    grad_norm)`` with ``xs, ys`` int32 ``(1, B, T)`` and ``key`` uint32 ``(2,)`` (unused: no
    dropout); parameters and optimizer state donated."""
    a = types.SimpleNamespace(precision=precision, grad_accum=1, grad_clip=0.0)
    return make_steps(cfg, make_optimizer(), a)[0]


def state_specs(cfg: GPTConfig) -> tuple[Any, Any]:
    """``(params, opt_state)`` as pytrees of ``ShapeDtypeStruct`` (nothing is computed)."""
    params = blu.eval_shape(lambda k: init_params(cfg, k), random.key(0))
    return params, blu.eval_shape(make_optimizer().init, params)


def step_specs(cfg: GPTConfig, batch: int, block: int) -> tuple:
    """The argument specs of :func:`train_step` for ``batch`` sequences of ``block`` tokens."""
    S = blu.ShapeDtypeStruct
    params, opt_state = state_specs(cfg)
    tokens = S((1, batch, block), np.int32)
    return (params, opt_state, tokens, tokens, S((2,), np.uint32))


def blu_programs(
    config: str, precision: str, batch: int, block: int, vocab: int = GPT2_TOKENS
) -> list[tuple[Any, tuple]]:
    """Every jitted function the blu side runs on the GPU, with its argument specs.

    Args:
        config: an example config name (``tiny``, ``small``, ``gpt2-124m``).
        precision: ``fp32``, ``tf32`` or ``bf16`` (lower and run under
            :func:`precision_scope` of it).
        batch, block: sequences per step and tokens per sequence.
        vocab: tokenizer vocabulary before the config's padding.

    Returns:
        ``[(jitted_fn, specs)]``: ``jitted_fn.lower(*specs, target=...)`` stages the very program
        the benchmark and the fidelity run call (the throughput and fidelity paths share it).
    """
    cfg = model_config(config, vocab)
    return [(train_step(cfg, precision), step_specs(cfg, batch, block))]


def compile_blu_programs(
    config: str,
    precision: str,
    batch: int,
    block: int,
    vocab: int = GPT2_TOKENS,
    target: str = "cuda:sm_90",
) -> list[Any]:
    """Lower and compile :func:`blu_programs` for ``target`` under the right precision (fills
    the kernel cache, ``BLU_CACHE_DIR``); returns the ``Compiled`` objects."""
    with precision_scope(precision):
        return [
            fn.lower(*specs, target=target).compile()
            for fn, specs in blu_programs(config, precision, batch, block, vocab)
        ]


# ---- state on the host -------------------------------------------------------------------------


def host_params(cfg: GPTConfig, seed: int = 0, how: str = "numpy") -> Any:
    """Initial float32 parameters as numpy arrays, in the example's structure.

    ``how="blu"``: the example's ``init_params`` with ``blu.random.key(seed)`` (threefry on the
    host: about 50 s for 124M parameters on 2 cores). ``how="numpy"``: the same distribution
    (GPT-2's: weights N(0, 0.02²), the residual projections ``c_proj`` N(0, (0.02/sqrt(2L))²),
    biases 0, LayerNorm gains 1) drawn with numpy's PCG64 — seconds, not a minute.
    """
    if how == "blu":
        return pytree.tree_map(np.asarray, init_params(cfg, random.key(seed)))
    if how != "numpy":
        raise ValueError(f"init must be one of {INITS}, got {how!r}")
    template = blu.eval_shape(lambda k: init_params(cfg, k), random.key(0))
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, spec in flatten_named(template, "params").items():
        leaf = name.rsplit(".", 1)[1]
        if leaf == "g":
            tensors[name] = np.ones(spec.shape, np.float32)
        elif leaf == "b":
            tensors[name] = np.zeros(spec.shape, np.float32)
        else:
            std = 0.02 / math.sqrt(2 * cfg.n_layer) if ".c_proj." in name else 0.02
            tensors[name] = rng.standard_normal(spec.shape, np.float32) * np.float32(std)
    return unflatten_named(template, "params", tensors, "initial weights")


def params_to_named(params: Any) -> dict[str, np.ndarray]:
    """``{"params.<key path>": array}``, the names the weight file and the torch peer use."""
    return {k: np.asarray(v) for k, v in flatten_named(params, "params").items()}


def params_from_file(cfg: GPTConfig, path: str | Path) -> Any:
    """Parameters from a ``.npz`` written with :func:`params_to_named` (names, shapes checked)."""
    template = blu.eval_shape(lambda k: init_params(cfg, k), random.key(0))
    with np.load(path) as f:
        tensors = {k: f[k] for k in f.files}
    return unflatten_named(template, "params", tensors, str(path))


def host_opt_state(params: Any) -> Any:
    """AdamW's initial state for ``params``, as numpy arrays."""
    return pytree.tree_map(np.asarray, make_optimizer().init(params))


def on_gpu() -> bool:
    return blu.cuda.is_available()


def to_run_device(tree: Any) -> Any:
    """``tree`` on the GPU when there is one (``blu.cuda.device_put``), else as it is."""
    return blu.cuda.device_put(tree) if on_gpu() else tree


def device_name() -> str:
    if not on_gpu():
        return "cpu"
    try:
        return blu.cuda.default_device().device_kind
    except Exception:  # noqa: BLE001 - a name is only decoration
        return "cuda"


# ---- the two runs ------------------------------------------------------------------------------


def plan_memory(step: Any, specs: tuple, precision: str, gpu: bool) -> Any:
    """The memory plan's analysis of ``step`` for these specs (JAX's ``memory_analysis()``
    fields and ``peak_bytes``), lowered for the GPU the benchmark runs on (else the CPU);
    None where lowering fails (the prediction is only reported)."""
    try:
        if gpu:
            from blu.lower.mlir.mlir_gpu import DEFAULT_TARGET as target
        else:
            target = "cpu"
        with precision_scope(precision):
            return step.lower(*specs, target=target).memory_analysis()
    except Exception as e:  # noqa: BLE001 - a missing prediction must not fail the benchmark
        print(f"note: no memory-plan prediction ({type(e).__name__}: {e})", file=sys.stderr)
        return None


def attention_impl(step: Any, specs: tuple, precision: str) -> str:
    """Which attention implementation the step's plan runs on the GPU ("cudnn", "blu flash",
    "decomposition"), from the forward equation's avals (``blu.lower.attention.gpu_choice``)."""
    from blu.lax import attention as att
    from blu.lower.attention import gpu_choice

    def eqns(jaxpr: Any):
        for e in jaxpr.eqns:
            yield e
            for p in e.params.values():
                inner = getattr(p, "jaxpr", p)
                if hasattr(inner, "eqns"):
                    yield from eqns(inner)

    try:
        with precision_scope(precision):
            closed = step.lower(*specs).jaxpr
        for e in eqns(getattr(closed, "jaxpr", closed)):
            if e.primitive is att.fwd_p:
                choice = gpu_choice([v.aval for v in e.invars], e.params, False)
                return {"cudnn": "cudnn", "blu": "blu flash"}.get(choice, "decomposition")
        return "none"
    except Exception as e:  # noqa: BLE001 - only reported
        return f"unknown ({type(e).__name__})"


def bench(a: argparse.Namespace) -> dict:
    """Throughput of the training step (see the module docstring)."""
    cfg = model_config(a.config, a.vocab)
    ((step, specs),) = blu_programs(a.config, a.mode, a.B, a.T, a.vocab)
    plan = plan_memory(step, specs, a.mode, on_gpu())
    params = host_params(cfg, a.seed, a.init)
    nparams = num_params(params)
    opt_state = host_opt_state(params)
    rng = np.random.default_rng(1)
    x = rng.integers(0, cfg.vocab_size, (1, a.B, a.T), dtype=np.int32)
    y = rng.integers(0, cfg.vocab_size, (1, a.B, a.T), dtype=np.int32)
    key = np.zeros(2, np.uint32)
    params, opt_state, x, y, key = to_run_device((params, opt_state, x, y, key))
    gpu = on_gpu()
    with precision_scope(a.mode):
        t0 = time.time()
        loss = None
        for _ in range(a.warmup):
            params, opt_state, loss, _ = step(params, opt_state, x, y, key)
        if loss is not None:
            loss.block_until_ready()
        warm_s = time.time() - t0
        if gpu:
            blu.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(a.steps):
            t = time.perf_counter()
            params, opt_state, loss, _ = step(params, opt_state, x, y, key)
            loss.block_until_ready()
            times.append(time.perf_counter() - t)
    times.sort()
    med = times[len(times) // 2]
    stats = blu.cuda.memory_stats() if gpu else {}
    gib = lambda k: round(stats[k] / 2**30, 3) if k in stats else None  # noqa: E731
    plan_gib = lambda n: None if plan is None else round(n / 2**30, 3)  # noqa: E731
    if plan is not None:
        measured = gib("peak_allocated_bytes")
        print(
            f"peak memory: plan {plan_gib(plan.peak_bytes)} GiB predicted (arena "
            f"{plan_gib(plan.temp_bytes)} GiB), "
            + (f"{measured} GiB measured" if measured is not None else "none measured (CPU)"),
            file=sys.stderr,
        )
    return dict(
        system="blu",
        mode=a.mode,
        B=a.B,
        T=a.T,
        params=nparams,
        tok_s=round(a.B * a.T / med),
        step_ms=round(med * 1e3, 2),
        peak_GiB=gib("peak_allocated_bytes"),
        reserved_GiB=gib("peak_reserved_bytes"),
        plan_peak_GiB=None if plan is None else plan_gib(plan.peak_bytes),
        plan_temp_GiB=None if plan is None else plan_gib(plan.temp_bytes),
        warmup_s=round(warm_s, 1),
        attention=attention_impl(step, specs, a.mode) if gpu else "cpu",
        loss=float(loss),
        device=device_name(),
        version=blu.__version__,
        backend="cuda" if gpu else "cpu",
    )


def fidelity(a: argparse.Namespace) -> dict:
    """Losses and gradient norms of ``--steps`` steps from given weights on given batches."""
    cfg = model_config(a.config, a.vocab)
    ((step, _specs),) = blu_programs(a.config, a.mode, a.B, a.T, a.vocab)
    params = params_from_file(cfg, a.weights)
    opt_state = host_opt_state(params)
    with np.load(a.batches) as f:
        xs, ys = f["x"][: a.steps], f["y"][: a.steps]
    if xs.shape[1:] != (a.B, a.T):
        raise ValueError(f"batches are {xs.shape[1:]}, not B={a.B} x T={a.T}")
    key = np.zeros(2, np.uint32)
    params, opt_state, key = to_run_device((params, opt_state, key))
    losses, norms = [], []
    with precision_scope(a.mode):
        for x, y in zip(xs, ys):
            xy = to_run_device((x[None].astype(np.int32), y[None].astype(np.int32)))
            params, opt_state, loss, norm = step(params, opt_state, *xy, key)
            losses.append(float(loss))
            norms.append(float(norm))
    out = dict(
        system="blu",
        mode=a.mode,
        B=a.B,
        T=a.T,
        steps=len(losses),
        losses=losses,
        grad_norms=norms,
        device=device_name(),
        version=blu.__version__,
    )
    Path(a.out).write_text(json.dumps(out))
    return {k: v for k, v in out.items() if k not in ("losses", "grad_norms")}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", default="fp32", choices=MODES)
    p.add_argument("--config", default="gpt2-124m", choices=list(CONFIGS))
    p.add_argument(
        "--vocab",
        type=int,
        default=GPT2_TOKENS,
        help="tokenizer vocabulary, padded as the config says (default 50257)",
    )
    p.add_argument("--B", type=int, default=16, help="sequences per batch")
    p.add_argument("--T", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--steps", type=int, default=30, help="timed steps (fidelity: steps run)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--seed", type=int, default=0, help="initial weights")
    p.add_argument("--init", default="numpy", choices=INITS, help="see host_params")
    p.add_argument("--fidelity", action="store_true", help="run given weights and batches")
    p.add_argument("--weights", help="fidelity: initial weights (.npz)")
    p.add_argument("--batches", help="fidelity: token batches (.npz with x, y of (N, B, T))")
    p.add_argument("--out", help="fidelity: where to write the JSON result")
    return p


def main(argv: list[str] | None = None) -> dict:
    a = build_parser().parse_args(argv)
    out = fidelity(a) if a.fidelity else bench(a)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
