"""GPT-2 / LLaMA training step in blu: throughput (one JSON line), the fidelity run, the programs.

The model is the example's (``benchmarks/peers/blu_models.py``: GPT-2, ``examples/gpt2/model.py``,
tied embeddings, the vocabulary padded as the config says — 50304 for ``gpt2-124m``; or for
``llama-*`` configs the LLaMA-style decoder of ``examples/gpt2/llama.py``) and so is the step
(``examples.gpt2.train.make_steps``: one ``blu.jit`` program of ``value_and_grad``, the
gradient's global norm and the AdamW update, parameters and optimizer state donated), with the
peers' optimizer: AdamW from ``blu/optim.py``, lr 6e-4, betas (0.9, 0.999), eps 1e-8, decay 0.1
on matrices and embeddings only (``optim.decay_mask_matrices``, the peers' ``dim >= 2``), no
schedule, no clipping. Modes: ``fp32`` and ``tf32`` compute in float32 under
``default_matmul_precision`` "fp32" / "tf32"; ``bf16`` computes in bfloat16 with float32 master
weights (the example's ``--precision bf16``) under "bf16".

Throughput is measured as the peers measure it: parameters made on the host (numpy), moved to the
GPU once with random tokens; ``--warmup`` steps, then the peak-memory counter is reset and
``--steps`` steps are timed one by one (each waits for its loss); tokens/s from the median step
(``host_ms``: the median time until the step's call returns, the host's work before the GPU
runs it, e.g. a CUDA graph's replay; ``$BENCH_REPLAY_TRACE=path``: the replayed steps' kernels
afterwards, ``benchmarks/peers/replay_trace.py``);
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
from benchmarks.peers import replay_trace  # noqa: E402
from benchmarks.peers.blu_models import (  # noqa: E402, F401  (re-exported)
    GPT2_TOKENS,
    INITS,
    host_params,
    model_config,
    param_specs,
    params_from_file,
    params_to_named,
)
from blu import optim  # noqa: E402
from blu.core import pytree  # noqa: E402
from examples.gpt2.models import CONFIGS, ModelConfig, num_params  # noqa: E402
from examples.gpt2.train import make_steps  # noqa: E402

MODES = ("fp32", "tf32", "bf16")
ADAMW = dict(learning_rate=6e-4, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.1)


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


def train_step(cfg: ModelConfig, precision: str) -> Any:
    """The example's jitted step ``(params, opt_state, xs, ys, key) -> (params, opt_state, loss,
    grad_norm)`` with ``xs, ys`` int32 ``(1, B, T)`` and ``key`` uint32 ``(2,)`` (unused: no
    dropout); parameters and optimizer state donated."""
    a = types.SimpleNamespace(precision=precision, grad_accum=1, grad_clip=0.0)
    return make_steps(cfg, make_optimizer(), a)[0]


def state_specs(cfg: ModelConfig) -> tuple[Any, Any]:
    """``(params, opt_state)`` as pytrees of ``ShapeDtypeStruct`` (nothing is computed)."""
    params = param_specs(cfg)
    return params, blu.eval_shape(make_optimizer().init, params)


def step_specs(cfg: ModelConfig, batch: int, block: int) -> tuple:
    """The argument specs of :func:`train_step` for ``batch`` sequences of ``block`` tokens."""
    S = blu.ShapeDtypeStruct
    params, opt_state = state_specs(cfg)
    tokens = S((1, batch, block), np.int32)
    return (params, opt_state, tokens, tokens, S((2,), np.uint32))


def blu_programs(
    config: str,
    precision: str,
    batch: int,
    block: int,
    vocab: int | None = None,
    scan_layers: bool = False,
    n_ctx: int | None = None,
) -> list[tuple[Any, tuple]]:
    """Every jitted function the blu side runs on the GPU, with its argument specs.

    Args:
        config: an example config name (``tiny``, ``small``, ``gpt2-124m``).
        precision: ``fp32``, ``tf32`` or ``bf16`` (lower and run under
            :func:`precision_scope` of it).
        batch, block: sequences per step and tokens per sequence.
        vocab: tokenizer vocabulary before the config's padding.
        scan_layers: the blocks as one ``lax.scan`` over stacked parameters.
        n_ctx: the context, if not the config's (``blu_models.model_config``).

    Returns:
        ``[(jitted_fn, specs)]``: ``jitted_fn.lower(*specs, target=...)`` stages the very program
        the benchmark and the fidelity run call (the throughput and fidelity paths share it).
    """
    cfg = model_config(config, vocab, scan_layers, n_ctx)
    return [(train_step(cfg, precision), step_specs(cfg, batch, block))]


def compile_blu_programs(
    config: str,
    precision: str,
    batch: int,
    block: int,
    vocab: int | None = None,
    target: str = "cuda:sm_90",
    scan_layers: bool = False,
    n_ctx: int | None = None,
) -> list[Any]:
    """Lower and compile :func:`blu_programs` for ``target`` under the right precision (fills
    the kernel cache, ``BLU_CACHE_DIR``); returns the ``Compiled`` objects."""
    with precision_scope(precision):
        return [
            fn.lower(*specs, target=target).compile()
            for fn, specs in blu_programs(
                config, precision, batch, block, vocab, scan_layers, n_ctx
            )
        ]


# ---- the largest batch, from the memory plan ---------------------------------------------------

H200_MEMORY_BYTES = 143771 * 2**20  # an H200's memory as the driver reports it (cuMemGetInfo)
# kept free: the CUDA context (~0.5 GiB), cuBLASLt's 32 MiB workspace, library handles, module
# images, the allocator's segment rounding
MAX_BATCH_MARGIN_BYTES = 2 * 2**30


def plan_analysis(
    config: str,
    mode: str,
    batch: int,
    block: int,
    vocab: int | None = None,
    target: str = "cuda:sm_90",
    n_ctx: int | None = None,
) -> Any:
    """The memory plan of the training step for ``target`` (lowered only: no kernel compiled,
    no GPU needed): JAX's ``memory_analysis()`` fields and ``peak_bytes``. ``n_ctx``: the
    model's context if not the config's (GPT-2's position table)."""
    ((fn, specs),) = blu_programs(config, mode, batch, block, vocab, n_ctx=n_ctx)
    with precision_scope(mode):
        return fn.lower(*specs, target=target).memory_analysis()


def footprint(config: str, mode: str, batch: int, block: int, vocab: int | None = None,
              target: str = "cuda:sm_90", n_ctx: int | None = None) -> int:  # fmt: skip
    """The bytes one training step holds on the device at once, from its plan: the arguments
    (parameters, AdamW state, tokens), the whole arena of temporaries and the fresh outputs
    (``blu.lower.plan.memory_report.footprint_bytes``; what the allocator's peak measures)."""
    from blu.lower.plan.memory_report import footprint_bytes

    return footprint_bytes(plan_analysis(config, mode, batch, block, vocab, target, n_ctx))


def predict_max_batch(
    config: str,
    mode: str,
    block: int,
    budget_bytes: int,
    vocab: int | None = None,
    limit: int = 1024,
    target: str = "cuda:sm_90",
    n_ctx: int | None = None,
) -> dict:
    """The largest batch whose training step's planned footprint is at most ``budget_bytes``
    (``benchmarks.peers.max_batch.search`` over lowerings: doubling, then bisection; the
    footprint grows with the batch).

    Returns:
        ``{"max_batch", "bytes" (its footprint), "next_bytes" (one more sequence's; None at the
        limit), "tries": [[batch, fits, bytes], ...], "at_limit"}``.
    """
    from benchmarks.peers import max_batch

    need: dict[int, int] = {}

    def size(b: int) -> int:
        if b not in need:
            need[b] = footprint(config, mode, b, block, vocab, target, n_ctx)
        return need[b]

    found = max_batch.search(lambda b: size(b) <= budget_bytes, start=1, limit=limit)
    best = found["max_batch"]
    nxt = best + 1 if best < limit else None
    return dict(
        max_batch=best,
        bytes=need.get(best),
        next_bytes=None if nxt is None else size(nxt),
        tries=[[b, ok, need[b]] for b, ok in found["tries"]],
        at_limit=found["at_limit"],
    )


def plan_oom_report(
    config: str,
    mode: str,
    batch: int,
    block: int,
    device_bytes: int,
    vocab: int | None = None,
    target: str = "cuda:sm_90",
    n_ctx: int | None = None,
) -> str | None:
    """The out-of-memory report the plan gives for ``batch`` on a device of ``device_bytes``
    (``Lowered.check_memory``: no kernel, no GPU), or None where it fits."""
    from blu.core.errors import BluOutOfMemoryError

    ((fn, specs),) = blu_programs(config, mode, batch, block, vocab, n_ctx=n_ctx)
    with precision_scope(mode):
        lowered = fn.lower(*specs, target=target)
    try:
        lowered.check_memory(device_bytes)
    except BluOutOfMemoryError as e:
        return str(e)
    return None


def first_batch_over(
    config: str,
    mode: str,
    block: int,
    device_bytes: int,
    known: dict[int, int],
    vocab: int | None = None,
    target: str = "cuda:sm_90",
    n_ctx: int | None = None,
) -> tuple[int, int]:
    """The smallest batch whose planned footprint exceeds ``device_bytes`` (it cannot run on
    the device at all), from ``known`` footprints (``{batch: bytes}``, two at least of them
    within ``device_bytes``) and their growth per sequence, checked by lowering. Returns
    ``(batch, bytes)``."""
    need = dict(known)

    def size(b: int) -> int:
        if b not in need:
            need[b] = footprint(config, mode, b, block, vocab, target, n_ctx)
        return need[b]

    (b0, p0), (b1, p1) = sorted((b, p) for b, p in known.items() if p <= device_bytes)[-2:]
    per = max((p1 - p0) / (b1 - b0), 1.0)
    b = b1 + max(1, math.ceil((device_bytes - p1) / per))
    while size(b) <= device_bytes:  # the growth is about linear: rarely more than one step
        b += max(1, math.ceil((device_bytes - size(b)) / per))
    while b - 1 > b1 and size(b - 1) > device_bytes:
        b -= 1
    return b, size(b)


def predict_record(
    config: str,
    mode: str,
    block: int,
    device_bytes: int = H200_MEMORY_BYTES,
    margin_bytes: int = MAX_BATCH_MARGIN_BYTES,
    vocab: int | None = None,
    limit: int = 1024,
    n_ctx: int | None = None,
) -> dict:
    """The largest batch from the plan (footprint within ``device_bytes - margin_bytes``), the
    plan's report for one more sequence, and the smallest batch that cannot fit the device at
    all (which a run on the GPU must refuse before launching anything), as one JSON-ready
    record (what ``--predict-max-batch`` prints)."""
    gib = lambda n: None if n is None else round(n / 2**30, 3)  # noqa: E731
    budget = device_bytes - margin_bytes
    t = time.perf_counter()
    found = predict_max_batch(config, mode, block, budget, vocab, limit, n_ctx=n_ctx)
    b = found["max_batch"]
    report_next = None
    if not found["at_limit"]:
        report_next = plan_oom_report(config, mode, b + 1, block, budget, vocab, n_ctx=n_ctx)
    known = {bb: n for bb, _, n in found["tries"]}
    if found["next_bytes"] is not None:
        known[b + 1] = found["next_bytes"]
    over: tuple = (None, None)
    if sum(n <= device_bytes for n in known.values()) >= 2:
        over = first_batch_over(config, mode, block, device_bytes, known, vocab, n_ctx=n_ctx)
    plan = plan_analysis(config, mode, b, block, vocab, n_ctx=n_ctx) if b else None
    gpu_total = None
    if on_gpu():
        gpu_total = int(blu.cuda.default_device().properties.total_memory)
    return dict(
        system="blu",
        config=config,
        mode=mode,
        T=block,
        vocab=vocab,
        n_ctx=n_ctx,
        limit=limit,
        max_batch=b,
        at_limit=found["at_limit"],
        device_bytes=device_bytes,
        margin_bytes=margin_bytes,
        budget_bytes=budget,
        gpu_total_bytes=gpu_total,
        footprint_GiB=gib(found["bytes"]),
        plan_peak_GiB=None if plan is None else gib(plan.peak_bytes),
        next_footprint_GiB=gib(found["next_bytes"]),
        plan_tries=[[bb, ok, gib(n)] for bb, ok, n in found["tries"]],
        oom_report_plan=report_next,
        over_batch=over[0],
        over_footprint_GiB=gib(over[1]),
        seconds=round(time.perf_counter() - t, 1),
    )


def predict(a: argparse.Namespace) -> dict:
    """``--predict-max-batch`` (see :func:`predict_record`)."""
    return predict_record(
        a.config, a.mode, a.T, a.device_bytes, a.margin_bytes, a.vocab, a.limit, n_ctx=a.n_ctx
    )


# ---- state on the host -------------------------------------------------------------------------


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
            from blu.lower.cuda.compiler import DEFAULT_TARGET as target

        else:
            target = "cpu"
        with precision_scope(precision):
            return step.lower(*specs, target=target).memory_analysis()
    except Exception as e:  # noqa: BLE001 - a missing prediction must not fail the benchmark
        print(f"note: no memory-plan prediction ({type(e).__name__}: {e})", file=sys.stderr)
        return None


def attention_impl(step: Any, specs: tuple, precision: str) -> str:
    """Which attention implementation the step's plan runs on the GPU ("cudnn", "blu flash",
    "decomposition"), from the forward equation's avals
    (``blu.lower.cuda.attention.gpu_choice``)."""
    from blu.lax import attention as att
    from blu.lower.cuda.attention import gpu_choice

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
    cfg = model_config(a.config, a.vocab, a.scan_layers, a.n_ctx)
    ((step, specs),) = blu_programs(a.config, a.mode, a.B, a.T, a.vocab, a.scan_layers, a.n_ctx)
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
        times, host = [], []
        for _ in range(a.steps):
            t = time.perf_counter()
            params, opt_state, loss, _ = step(params, opt_state, x, y, key)
            host.append(time.perf_counter() - t)  # until the call returns: the host's share
            loss.block_until_ready()
            times.append(time.perf_counter() - t)
        if gpu and replay_trace.requested():  # the replayed steps' kernels, through CUPTI
            state = [params, opt_state]

            def one() -> None:
                state[0], state[1], out, _ = step(state[0], state[1], x, y, key)
                out.block_until_ready()

            replay_trace.record(one, replay_trace.steps(), replay_trace.requested())
    times.sort()
    med = times[len(times) // 2]
    host_med = sorted(host)[len(host) // 2]
    stats = blu.cuda.memory_stats() if gpu else {}
    gib = lambda k: round(stats[k] / 2**30, 3) if k in stats else None  # noqa: E731
    plan_gib = lambda n: None if plan is None else round(n / 2**30, 3)  # noqa: E731
    from blu.lower.plan.memory_report import footprint_bytes

    if plan is not None:
        measured = gib("peak_allocated_bytes")
        print(
            f"peak memory: plan {plan_gib(plan.peak_bytes)} GiB predicted (arena "
            f"{plan_gib(plan.temp_bytes)} GiB; a call holds {plan_gib(footprint_bytes(plan))} "
            "GiB: arguments, the whole arena, fresh outputs), "
            + (f"{measured} GiB measured" if measured is not None else "none measured (CPU)"),
            file=sys.stderr,
        )
    return dict(
        system="blu",
        mode=a.mode,
        scan_layers=a.scan_layers,
        B=a.B,
        T=a.T,
        params=nparams,
        tok_s=round(a.B * a.T / med),
        step_ms=round(med * 1e3, 2),
        host_ms=round(host_med * 1e3, 2),
        peak_GiB=gib("peak_allocated_bytes"),
        reserved_GiB=gib("peak_reserved_bytes"),
        plan_peak_GiB=None if plan is None else plan_gib(plan.peak_bytes),
        plan_temp_GiB=None if plan is None else plan_gib(plan.temp_bytes),
        plan_footprint_GiB=None if plan is None else plan_gib(footprint_bytes(plan)),
        warmup_s=round(warm_s, 1),
        attention=attention_impl(step, specs, a.mode) if gpu else "cpu",
        loss=float(loss),
        device=device_name(),
        version=blu.__version__,
        backend="cuda" if gpu else "cpu",
    )


def fidelity(a: argparse.Namespace) -> dict:
    """Losses and gradient norms of ``--steps`` steps from given weights on given batches."""
    cfg = model_config(a.config, a.vocab, n_ctx=a.n_ctx)
    ((step, _specs),) = blu_programs(a.config, a.mode, a.B, a.T, a.vocab, n_ctx=a.n_ctx)
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
        scan_layers=a.scan_layers,
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
        default=None,
        help="tokenizer vocabulary, padded as the config says (default: GPT-2's 50257, "
        "llama configs Llama 3's 128256)",
    )
    p.add_argument("--scan-layers", action="store_true", help="the blocks as one lax.scan")
    p.add_argument("--n-ctx", type=int, default=None,
                   help="context (GPT-2: position-table rows) if not the config's")  # fmt: skip
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
    p.add_argument("--predict-max-batch", action="store_true",
                   help="the largest --B whose planned peak fits --device-bytes less "
                   "--margin-bytes (lowering only: no kernel, no GPU)")  # fmt: skip
    p.add_argument("--device-bytes", type=int, default=H200_MEMORY_BYTES,
                   help=f"device memory for --predict-max-batch (default {H200_MEMORY_BYTES}, "
                   "an H200)")  # fmt: skip
    p.add_argument("--margin-bytes", type=int, default=MAX_BATCH_MARGIN_BYTES,
                   help="kept free by --predict-max-batch (default 2 GiB)")  # fmt: skip
    p.add_argument("--limit", type=int, default=1024, help="--predict-max-batch: largest B tried")
    return p


def main(argv: list[str] | None = None) -> dict:
    a = build_parser().parse_args(argv)
    out = predict(a) if a.predict_max_batch else fidelity(a) if a.fidelity else bench(a)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
