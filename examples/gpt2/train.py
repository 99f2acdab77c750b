"""Train GPT-2 (or the LLaMA-style decoder, ``--arch llama``) with blu: the command line and
the training loop.

``python -m examples.gpt2`` trains the small CPU model on character-level tinyshakespeare, shows
a progress bar (loss, tokens/s), evaluates the validation loss periodically, checkpoints to
``runs/gpt2/``, then prints the final losses, writes ``runs/gpt2/loss.png`` and prints sampled
text (also appended to ``runs/gpt2/samples.txt`` with the step). ``--help`` lists every flag.

One training step is one ``blu.jit`` program: ``value_and_grad`` of the loss over
``--grad-accum`` micro-batches (averaged), gradient clipping and the AdamW update, with the
parameters and optimizer state donated. Every random choice (initialisation, batches, dropout,
sampling) derives from ``--seed`` through ``blu.random`` keys folded with the step number, so a
run resumed from a checkpoint continues bit for bit.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import blu
import blu.numpy as bnp
import blu.random as random
from blu import lax, optim
from blu.core import pytree
from blu.core.dtypes import bfloat16
from examples.gpt2 import ExampleError, checkpoint
from examples.gpt2.data import (
    check_batch_fits,
    find_corpus,
    fold_in,
    get_batch,
    make_tokenizer,
    read_corpus,
    tokenizer_from_meta,
    train_val_split,
)
from examples.gpt2.flags import (  # noqa: F401 (PRESETS, COMMON: re-exported for callers)
    COMMON,
    PRESETS,
    TRAJECTORY,
    _check_flags,
    _fill_defaults,
    build_parser,
    resolve_config,
)
from examples.gpt2.models import (
    CONFIGS,
    ModelConfig,
    config_from_dict,
    init_params,
    loss_fn,
    num_params,
)
from examples.gpt2.report import Progress, plot_losses
from examples.gpt2.sample import SAMPLES, Sampler, append_sample, clamp_top_k

# what a checkpoint's metadata must hold to be resumed
META_KEYS = ("step", "config_name", "model_config", "tokenizer", "train_args", "data", "history")


def _merge_resumed(a: argparse.Namespace, meta: dict) -> None:
    """Take the trajectory flags from the checkpoint; refuse ones given that differ."""
    saved = meta["train_args"]
    lacking = [k for k in (*TRAJECTORY, "steps") if not isinstance(saved, dict) or k not in saved]
    if lacking:
        raise checkpoint.CheckpointError(
            f"checkpoint in {a.out}: its train_args lack {lacking}; start a new run with "
            "--overwrite"
        )
    diffs = []
    if a.config is not None and a.config != meta["config_name"]:
        diffs.append(f"--config {a.config} (checkpoint: {meta['config_name']})")
    a.config = meta["config_name"]
    for k in TRAJECTORY:
        given = getattr(a, k)
        if given is not None and given != saved[k]:
            diffs.append(f"--{k.replace('_', '-')} {given} (checkpoint: {saved[k]})")
        setattr(a, k, saved[k])
    if diffs:
        raise checkpoint.CheckpointError(
            f"checkpoint in {a.out} does not match the flags: "
            + "; ".join(diffs)
            + ". Drop these flags to continue the checkpointed run, or pick another --out"
        )
    if a.steps is None:
        a.steps = saved["steps"]
    elif a.steps != saved["steps"]:
        print(
            f"note: --steps {a.steps} (checkpoint: {saved['steps']}): the learning-rate "
            "schedule follows the new total"
        )


def load_params(tensors: dict, cfg: ModelConfig, where: str):
    """Parameters of ``cfg`` from checkpoint tensors (shapes and names checked)."""
    template = blu.eval_shape(lambda k: init_params(cfg, k), random.key(0))
    return checkpoint.unflatten_named(template, "params", tensors, f"checkpoint {where}")


def make_optimizer(a: argparse.Namespace):
    """AdamW with linear warm-up and cosine decay; decay on matrices only (as GPT-2)."""
    schedule = optim.warmup_cosine_decay(
        peak_lr=a.lr, warmup_steps=a.warmup_steps, total_steps=a.steps, end_lr=a.min_lr
    )
    opt = optim.adamw(
        lambda count: schedule(count + 1),  # update n (from 1) uses lr(n): no zero-lr first step
        b1=a.beta1,
        b2=a.beta2,
        eps=1e-8,
        weight_decay=a.weight_decay,
        mask=optim.decay_mask_matrices,
    )
    return opt, schedule


def make_steps(cfg: ModelConfig, opt, a: argparse.Namespace):
    """The jitted training step and loss estimate for this run."""
    compute_dtype = bfloat16 if a.precision == "bf16" else None
    accum, clip = a.grad_accum, a.grad_clip

    def loss(params, x, y, key):
        return loss_fn(params, x, y, cfg, key if cfg.dropout > 0 else None, compute_dtype)

    grad_fn = blu.value_and_grad(loss)

    def train_step(params, opt_state, xs, ys, key):
        """xs, ys: (accum, B, T) int32. Returns new params and state, mean loss, grad norm."""
        if accum == 1:
            total, grads = grad_fn(params, xs[0], ys[0], random.fold_in(key, 0))
        else:  # a loop over the micro-batches inside the one program, summing gradients

            def micro(carry, batch):
                x, y, i = batch
                li, gi = grad_fn(params, x, y, random.fold_in(key, i))
                return (carry[0] + li, pytree.tree_map(bnp.add, carry[1], gi)), None

            zeros = (bnp.zeros((), np.float32), pytree.tree_map(bnp.zeros_like, params))
            steps = bnp.arange(accum, dtype=np.int32)
            (total, grads), _ = lax.scan(micro, zeros, (xs, ys, steps))
            total = total / np.float32(accum)
            grads = pytree.tree_map(lambda g: g / np.float32(accum), grads)
        if clip > 0:
            grads, norm = optim.clip_by_global_norm(grads, clip)
        else:
            norm = optim.global_norm(grads)
        params, opt_state = opt.step(grads, opt_state, params)
        return params, opt_state, total, norm

    def eval_loss(params, x, y):
        return loss_fn(params, x, y, cfg, None, compute_dtype)

    return blu.jit(train_step, donate_argnums=(0, 1)), blu.jit(eval_loss)


def estimate_loss(eval_fn, params, tokens, key, a) -> float:
    """Mean loss over ``--eval-iters`` batches drawn from ``key`` (the same ones every time)."""
    losses = [
        float(eval_fn(params, *get_batch(tokens, fold_in(key, j), a.batch_size, a.block_size)))
        for j in range(a.eval_iters)
    ]
    return float(np.mean(losses))


def main(argv: list[str] | None = None) -> dict:
    """Run the command line; returns a summary (losses, history, paths) for callers and tests.

    Raises:
        ExampleError: bad flags, data or checkpoint (``cli`` prints it as ``error: ...``).
    """
    t_start = time.perf_counter()
    a = build_parser().parse_args(argv)
    out = Path(a.out)
    meta = tensors = None
    if a.resume:
        tensors, meta = checkpoint.load(out)
        checkpoint.require_meta(meta, META_KEYS, str(out))
        _merge_resumed(a, meta)
    else:
        if checkpoint.exists(out) and not a.overwrite:
            raise ExampleError(
                f"{out} already holds a checkpoint: pass --resume to continue it, --overwrite "
                f"to replace it, or --out to use another folder"
            )
    resolve_config(a)  # --arch and --config agree (a resumed run: with its checkpoint's)
    _fill_defaults(a, CONFIGS[a.config])
    _check_flags(a, CONFIGS[a.config])
    # the folder is checked writable and taken (against a second run) before any training;
    # an --overwrite run replaces the old checkpoint only at its first commit
    with checkpoint.lock_out_dir(out):
        if a.resume:  # what another run may have committed before we took the folder
            tensors, meta = checkpoint.load(out)
        with blu.config.override(default_matmul_precision=a.precision):
            return _train(a, meta, tensors, t_start)


@dataclasses.dataclass
class _Data:
    corpus: Path
    tok: Any
    n_tokens: int
    sha256: str
    train: np.ndarray
    val: np.ndarray


def _load_data(a: argparse.Namespace, meta: dict | None) -> _Data:
    """Corpus, tokenizer and split; a resumed run must see the corpus it was trained on."""
    if a.data:
        corpus = Path(a.data)
    elif meta and Path(meta["data"]["path"]).is_file():
        corpus = Path(meta["data"]["path"])
    else:
        corpus = find_corpus()
    text = read_corpus(corpus)
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if meta and meta["data"]["sha256"] != sha:
        raise checkpoint.CheckpointError(
            f"checkpoint in {a.out} was trained on another corpus ({meta['data']['path']}, "
            f"sha256 {meta['data']['sha256'][:12]}...) than {corpus} (sha256 {sha[:12]}...)"
        )
    tok = tokenizer_from_meta(meta["tokenizer"]) if meta else make_tokenizer(a.tokenizer, text)
    tokens = tok.encode(text)
    train, val = train_val_split(tokens, a.val_fraction)
    check_batch_fits(train, a.batch_size, a.block_size, "training")
    check_batch_fits(val, a.batch_size, a.block_size, "validation")
    return _Data(corpus, tok, len(tokens), sha, train, val)


def _train(a: argparse.Namespace, meta: dict | None, tensors: dict | None, t_start: float) -> dict:
    out = Path(a.out)
    data = _load_data(a, meta)
    cfg = dataclasses.replace(CONFIGS[a.config].with_vocab(data.tok.vocab_size), dropout=a.dropout)
    if meta and config_from_dict(meta["model_config"]) != cfg:
        raise checkpoint.CheckpointError(
            f"checkpoint in {out} holds model {meta['model_config']}, not {cfg.to_dict()}"
        )
    if a.scan_layers:  # how the blocks run, not the architecture: checkpoints are the same
        cfg = dataclasses.replace(cfg, scan_layers=True)

    # ---- state: fresh, or the checkpoint's (the same keys either way)
    k_init, k_data, k_drop, k_eval, k_sample = random.split(random.key(a.seed), 5)
    opt, _ = make_optimizer(a)
    # the initialization as one jitted program, on the GPU with --device cuda (op by op on the
    # host, the threefry draws of GPT-2 124M took 28 s of a 2-core machine; jitted, 2 s)
    init = blu.jit(functools.wraps(init_params)(functools.partial(init_params, cfg)))
    init_opt = blu.jit(opt.init)
    if a.device == "cuda" and not a.lower_only:
        _require_gpu()
    if meta or a.lower_only:  # (shapes only: the checkpoint's tensors, or nothing, run)
        params = blu.eval_shape(init, k_init)
        opt_state = blu.eval_shape(init_opt, params)
    else:
        params = init(_on_device(k_init, a.device))
        opt_state = init_opt(params)
    history: dict[str, list] = {"train_loss": [], "val_loss": []}
    start = 0
    if meta:
        where = f"checkpoint {out}"
        params = checkpoint.unflatten_named(params, "params", tensors, where)
        opt_state = checkpoint.unflatten_named(opt_state, "opt", tensors, where)
        start = int(meta["step"])
        history = {k: list(v) for k, v in meta["history"].items()}
    end = max(start, min(a.steps, a.stop_at or a.steps))
    a.top_k = clamp_top_k(a.top_k, data.tok.vocab_size, say=bool(a.sample_tokens))
    new_run = not meta  # (--overwrite) its first commit replaces the old run's samples too
    train_step, eval_loss = make_steps(cfg, opt, a)
    if a.lower_only:
        steps = (train_step, eval_loss, init, init_opt)
        return _lower_for_gpu(a, data, cfg, steps, params, opt_state, (k_data, k_drop, k_sample,
                                                                        k_init))  # fmt: skip
    if a.device == "cuda":  # the state lives on the GPU; the jitted steps run there
        import blu.cuda as bc

        if meta:  # (a checkpoint's tensors: on the host)
            params, opt_state = bc.device_put((params, opt_state))
        bc.reset_peak_memory_stats()
    print(
        f"model {a.config}: {num_params(params) / 1e6:.2f}M parameters, vocab {cfg.vocab_size} "
        f"({data.tok.kind}), {a.precision}; data {data.corpus} ({len(data.train):,} train / "
        f"{len(data.val):,} val tokens); {a.steps} steps of {a.grad_accum} x {a.batch_size} x "
        f"{a.block_size} tokens" + (f"; checkpoint at step {start}" if meta else ""),
        flush=True,
    )

    def save(step: int) -> None:
        train_args = {k: getattr(a, k) for k in (*TRAJECTORY, "steps")}
        meta = {
            "step": step, "config_name": a.config, "model_config": cfg.to_dict(),
            "tokenizer": data.tok.to_meta(), "train_args": train_args,
            "data": {"path": str(data.corpus), "sha256": data.sha256, "tokens": data.n_tokens},
            "history": history, "blu_version": blu.__version__,
        }  # fmt: skip
        checkpoint.save(out, params, opt_state, meta)
        nonlocal new_run
        if new_run:  # only a samples.txt a run of this example wrote (its manifest says so)
            checkpoint.remove_written(out, [SAMPLES])
            new_run = False

    # ---- the training loop
    n_tok = a.batch_size * a.block_size * a.grad_accum
    shape = (a.grad_accum, a.batch_size, a.block_size)
    t_steps, tok_steps, rate = 0.0, 0, None
    t_loop = time.perf_counter()
    bar = Progress(a.steps, start, not a.no_progress and end > start)
    # --profile: trace --profile-steps steps after the first (which traces and compiles)
    prof_first = start + 2 if end >= start + 2 else start + 1
    profiling = contextlib.ExitStack()
    try:
        for step in range(start + 1, end + 1):
            if a.profile and step == prof_first:
                profiling.enter_context(blu.profiler.trace(a.profile))
            x, y = get_batch(data.train, fold_in(k_data, step), n_tok // a.block_size,
                             a.block_size)  # fmt: skip
            t0 = time.perf_counter()
            with blu.profiler.annotate("train step", step=step):
                params, opt_state, loss, _ = train_step(
                    params, opt_state, x.reshape(shape), y.reshape(shape),
                    fold_in(k_drop, step),
                )  # fmt: skip
                loss = float(loss)
            dt = time.perf_counter() - t0
            if a.profile and step == prof_first + a.profile_steps - 1:
                profiling.close()
                bar.write(f"wrote the timeline trace of steps {prof_first}-{step} to {a.profile}")
            if step > start + 1 or end == start + 1:  # the first step includes tracing
                t_steps, tok_steps = t_steps + dt, tok_steps + n_tok
            if not math.isfinite(loss):
                raise ExampleError(f"the loss became {loss} at step {step}; try a lower --lr")
            history["train_loss"].append(loss)
            rate = n_tok / dt if rate is None else 0.9 * rate + 0.1 * n_tok / dt
            bar.update(step, loss, rate)
            if step % a.eval_every == 0 or step == a.steps:
                v = estimate_loss(eval_loss, params, data.val, k_eval, a)
                history["val_loss"].append([step, v])
                bar.write(f"step {step}: train loss {loss:.4f}, val loss {v:.4f}")
            if (a.ckpt_every and step % a.ckpt_every == 0) or step == end:
                save(step)
    finally:
        profiling.close()  # a run shorter than the traced steps still writes its trace
        bar.close()
    train_s = time.perf_counter() - t_loop

    # ---- results
    result: dict[str, Any] = {"step": end, "history": history, "out": str(out), "train_s": train_s}
    if a.profile:
        result["profile"] = a.profile
    result["tokens_per_s"] = tok_steps / t_steps if t_steps > 0 else None
    result["train_loss"] = estimate_loss(eval_loss, params, data.train, fold_in(k_eval, 1), a)
    last_val = history["val_loss"][-1] if history["val_loss"] else None
    if last_val is not None and last_val[0] == end:
        result["val_loss"] = last_val[1]
    else:
        result["val_loss"] = estimate_loss(eval_loss, params, data.val, k_eval, a)
    arch = "LLaMA-style" if a.arch == "llama" else "GPT-2"
    title = f"{arch} {a.config} on {data.corpus.name} ({data.tok.kind}, {a.precision})"
    png = None if a.no_plot else plot_losses(history, out / "loss.png", title)
    result["plot"] = str(png) if png else None
    if end < a.steps:
        print(f"stopped at step {end} of {a.steps}: continue with --resume --out {out}")
    elif end == start:
        print(f"the checkpoint in {out} is at the run's last step ({end}): nothing to train")
    if a.device == "cuda":
        import blu.cuda as bc

        result["peak_gpu_bytes"] = bc.memory_stats()["peak_allocated_bytes"]
        print(f"peak GPU memory in use: {result['peak_gpu_bytes'] / 2**30:.2f} GiB")
    if a.sample_tokens:
        sampler = Sampler(cfg, a.block_size, a.temperature, a.top_k, data.tok.vocab_size)
        ids = sampler.generate(params, data.tok.encode(a.prompt), a.sample_tokens, k_sample)
        result["sample"] = a.prompt + data.tok.decode(ids)
        how = f"{a.sample_tokens} tokens, temperature {a.temperature}, top-k {a.top_k or 'off'}"
        result["samples_file"] = str(append_sample(out, end, result["sample"], how))
        print(f"--- sample ({how}; also in {result['samples_file']}) ---\n{result['sample']}\n---")
    result["wall_s"] = time.perf_counter() - t_start
    _print_summary(result, data.tok.kind, start, end, out, png)
    return result


def _require_gpu() -> None:
    import blu.cuda as bc

    if not bc.is_available():
        raise ExampleError("--device cuda: no GPU is available (blu.cuda.is_available())")


def _on_device(key: Any, device: str) -> Any:
    """``key`` where the run computes: on the GPU with ``--device cuda`` (a jitted function
    called with it runs there)."""
    if device != "cuda":
        return key
    import blu.cuda as bc

    return bc.device_put(key)


def _lower_for_gpu(a, data, cfg, steps, params, opt_state, keys) -> dict:
    """Compile the programs a ``--device cuda`` run executes, with the same argument types:
    the initialization, the training step, the evaluation loss and (with ``--sample-tokens``)
    the sampler's step."""
    (train_step, eval_loss, init, init_opt), (k_data, k_drop, k_sample, k_init) = steps, keys
    n_tok = a.batch_size * a.block_size * a.grad_accum
    shape = (a.grad_accum, a.batch_size, a.block_size)
    x, y = get_batch(data.train, fold_in(k_data, 1), n_tok // a.block_size, a.block_size)
    t0 = time.perf_counter()
    init.lower(k_init, target="cuda:sm_90").compile()
    init_opt.lower(params, target="cuda:sm_90").compile()
    args = (params, opt_state, x.reshape(shape), y.reshape(shape), fold_in(k_drop, 1))
    train_step.lower(*args, target="cuda:sm_90").compile()
    xe, ye = get_batch(data.val, fold_in(k_data, 0), a.batch_size, a.block_size)
    eval_loss.lower(params, xe, ye, target="cuda:sm_90").compile()
    if a.sample_tokens:
        sampler = Sampler(cfg, a.block_size, a.temperature, a.top_k, data.tok.vocab_size)
        buf = np.zeros((1, a.block_size), np.int32)
        key = fold_in(k_sample, 0)
        sampler.next_token.lower(params, buf, np.int32(1), key, target="cuda:sm_90").compile()
    print(f"compiled the GPU programs in {time.perf_counter() - t0:.1f} s")
    return {"lowered": True}


def _print_summary(r: dict, tok_kind: str, start: int, end: int, out: Path, png) -> None:
    unit = "nats per character" if tok_kind == "char" else "nats per token"
    speed = f"{r['tokens_per_s']:,.0f} tokens/s" if r["tokens_per_s"] else "no timed steps"
    steps = f"steps {start + 1}-{end}" if end > start else "no steps"
    print(
        f"final train loss {r['train_loss']:.4f} | val loss {r['val_loss']:.4f} {unit}\n"
        f"{speed} | training {r['train_s']:.1f} s ({steps}) | wall time {r['wall_s']:.1f} s\n"
        f"checkpoint: {out / checkpoint.RECORD}" + (f" | loss curve: {png}" if png else "")
    )


def cli(argv: list[str] | None = None) -> int:
    """``main`` with user errors printed as ``error: ...`` (exit status 2), no traceback."""
    try:
        main(argv)
    except ExampleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "interrupted; the last checkpoint is intact (continue with --resume)", file=sys.stderr
        )
        return 130
    return 0
