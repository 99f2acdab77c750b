"""The training command line's flags: the parser, the per-config presets, and their checks.

``build_parser`` makes ``python -m examples.gpt2``'s parser (flags left at None are filled
from the chosen config's preset by ``fill_defaults``); ``check_flags`` refuses impossible
values, naming the flag. Both architectures (GPT-2 and the LLaMA-style decoder, see
``examples.gpt2.models``) share every flag; ``--arch`` picks the family, ``--config`` the size.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from examples.gpt2 import ExampleError
from examples.gpt2.models import ARCHS, CONFIGS, ModelConfig, arch_of

# Training defaults per model config; a flag given on the command line wins.
# fmt: off
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(steps=30, batch_size=8, lr=1e-2, warmup_steps=2, beta2=0.99,
                 eval_every=10, eval_iters=2),
    # measured: val loss 1.856 nats/char after 700 steps, 3.5 minutes on 2 idle CPU cores
    "small": dict(steps=700, batch_size=32, lr=4e-3, warmup_steps=50, beta2=0.99,
                  eval_every=100, eval_iters=20),
    "gpt2-124m": dict(steps=5000, batch_size=16, lr=6e-4, warmup_steps=200, beta2=0.95,
                      eval_every=250, eval_iters=20),
    # GPT-3's learning rates at the matching sizes (Brown et al. 2020, table 2.1)
    "gpt2-350m": dict(steps=5000, batch_size=8, lr=3e-4, warmup_steps=200, beta2=0.95,
                      eval_every=250, eval_iters=20),
    "gpt2-774m": dict(steps=5000, batch_size=8, lr=2.5e-4, warmup_steps=200, beta2=0.95,
                      eval_every=250, eval_iters=20),
    "gpt2-1.5b": dict(steps=5000, batch_size=4, lr=2e-4, warmup_steps=200, beta2=0.95,
                      eval_every=250, eval_iters=20),
    # the LLaMA-style decoder: GPT-2's recipes at the matching sizes (not yet tuned for it)
    "llama-tiny": dict(steps=30, batch_size=8, lr=1e-2, warmup_steps=2, beta2=0.99,
                       eval_every=10, eval_iters=2),
    "llama-small": dict(steps=700, batch_size=32, lr=4e-3, warmup_steps=50, beta2=0.99,
                        eval_every=100, eval_iters=20),
    "llama-125m": dict(steps=5000, batch_size=16, lr=6e-4, warmup_steps=200, beta2=0.95,
                       eval_every=250, eval_iters=20),
    # Llama 3's recipe: peak lr 3e-4, beta2 0.95 (Dubey et al. 2024)
    "llama-1b": dict(steps=5000, batch_size=8, lr=3e-4, warmup_steps=200, beta2=0.95,
                     eval_every=250, eval_iters=20),
}
DEFAULT_CONFIG = {"gpt2": "small", "llama": "llama-small"}  # per --arch
COMMON = dict(grad_accum=1, weight_decay=0.1, beta1=0.9, grad_clip=1.0, dropout=0.0, seed=1337,
              precision="fp32", val_fraction=0.1, tokenizer="char")
# flags that shape the training trajectory: a resumed run takes them from the checkpoint
TRAJECTORY = ("batch_size", "block_size", "grad_accum", "lr", "min_lr", "warmup_steps",
              "weight_decay", "beta1", "beta2", "grad_clip", "dropout", "seed", "precision",
              "val_fraction", "tokenizer")
# fmt: on


def _presets_text() -> str:
    rows = []
    for name, pre in PRESETS.items():
        c = CONFIGS[name]
        shape = f"{c.n_layer} layers, {c.n_head} heads, d={c.d_model}, context {c.n_ctx}"
        if arch_of(c) == "llama":
            shape += (f", {c.n_kv_head} KV heads, SwiGLU {c.d_ff}, RoPE theta "
                      f"{c.rope_theta:g}")  # fmt: skip
        rows.append(
            f"  {name:<12} {shape}\n"
            f"{'':15}{pre['steps']} steps x {pre['batch_size']} sequences, lr {pre['lr']:g}, "
            f"warm-up {pre['warmup_steps']}, beta2 {pre['beta2']}; val loss every "
            f"{pre['eval_every']} steps ({pre['eval_iters']} batches)"
        )
    return "\n".join(rows)


EPILOG = """\
model configs and their training defaults (a flag given on the command line wins):
{presets}
  (all)        grad-accum 1, weight-decay 0.1, beta1 0.9, grad-clip 1.0, dropout 0, seed 1337,
               precision fp32, val-fraction 0.1, tokenizer char, block-size = the context
  gpt2 configs: GPT-2 (LayerNorm, learned positions, GELU MLP, tied head); llama configs: a
  LLaMA-style decoder (RMSNorm, rotary positions, SwiGLU, grouped-query attention, untied head)

examples:
  python -m examples.gpt2                       # small model, char-level tinyshakespeare
  python -m examples.gpt2 --resume --steps 1400 # continue that run (here: for longer)
  python -m examples.gpt2 --config tiny --steps 20 --out runs/tiny --sample-tokens 100
  python -m examples.gpt2 --arch llama --config llama-tiny --out runs/llama-tiny
  python -m examples.gpt2 --config gpt2-124m --tokenizer gpt2 --precision bf16 --data book.txt
  python -m examples.gpt2.sample --out runs/gpt2 --prompt "ROMEO:" --tokens 300
"""


def build_parser() -> argparse.ArgumentParser:
    """The command line; flags left at None are filled from the config's preset."""
    p = argparse.ArgumentParser(
        prog="python -m examples.gpt2",
        description="Train a GPT-2-style language model with blu, then sample from it. With no "
        "flags: the 'small' model on character-level tinyshakespeare, a few minutes on 2 CPU "
        "cores, writing runs/gpt2/ (checkpoint, loss.png).",
        epilog=EPILOG.format(presets=_presets_text()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # fmt: off
    m = p.add_argument_group("model")
    m.add_argument("--arch", choices=ARCHS, default=None,
                   help="architecture: gpt2 (default) or llama; picks the default --config "
                   "(small, llama-small) and must match a --config given")
    m.add_argument("--config", choices=list(CONFIGS), default=None,
                   help="model size (default small, or llama-small with --arch llama; --resume "
                   "keeps the checkpoint's)")
    m.add_argument("--dropout", type=float, default=None, help="dropout rate (default 0)")
    m.add_argument("--scan-layers", action="store_true",
                   help="gpt2: run the blocks as one lax.scan over their stacked parameters "
                   "(one compiled block body) instead of unrolled")
    m.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where to train: cpu (default) or cuda (the first GPU; kernels come "
                   "from the kernel cache, see scripts/fill_gpu_cache.py)")
    m.add_argument("--lower-only", action="store_true",
                   help="with --device cuda: compile the jitted steps for the GPU into the kernel "
                   "cache and exit (run where MLIR is installed; see scripts/fill_gpu_cache.py)")
    m.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default=None,
                   help="fp32 (default); tf32 matmuls (on the CPU the same as fp32); bf16 "
                   "compute with fp32 master weights in the optimizer")
    d = p.add_argument_group("data")
    d.add_argument("--data", default=None, metavar="PATH",
                   help="a UTF-8 text corpus (default: tinyshakespeare.txt from $BLU_DATA_DIR, "
                   "else ../shared/data beside the checkout, else downloaded from "
                   "$BLU_DATA_URL or the public copy)")
    d.add_argument("--tokenizer", choices=("char", "gpt2"), default=None,
                   help="characters (default) or GPT-2 BPE via tiktoken from the local "
                   "gpt2/encoder.json and gpt2/vocab.bpe")
    d.add_argument("--val-fraction", type=float, default=None, metavar="F",
                   help="last fraction of the corpus held out for validation (default 0.1)")
    t = p.add_argument_group("training (defaults: see the table below)")
    t.add_argument("--steps", type=int, default=None, metavar="N",
                   help="optimizer steps in the whole run")
    t.add_argument("--batch-size", type=int, default=None, metavar="B",
                   help="sequences per micro-batch")
    t.add_argument("--block-size", type=int, default=None, metavar="T",
                   help="tokens per sequence, at most the model's context (default: the context)")
    t.add_argument("--grad-accum", type=int, default=None, metavar="K",
                   help="micro-batches whose gradients are averaged per step (default 1)")
    t.add_argument("--lr", type=float, default=None, help="peak learning rate")
    t.add_argument("--min-lr", type=float, default=None,
                   help="learning rate at the end of the cosine decay (default lr/10)")
    t.add_argument("--warmup-steps", type=int, default=None, metavar="N",
                   help="steps of linear warm-up before the cosine decay")
    t.add_argument("--weight-decay", type=float, default=None, metavar="WD",
                   help="AdamW's decoupled decay of the weight matrices (default 0.1)")
    t.add_argument("--beta1", type=float, default=None, help="AdamW beta1 (default 0.9)")
    t.add_argument("--beta2", type=float, default=None, help="AdamW beta2")
    t.add_argument("--grad-clip", type=float, default=None, metavar="NORM",
                   help="clip the gradient's global norm to this (0: off; default 1.0)")
    t.add_argument("--seed", type=int, default=None,
                   help="seed of every random choice: init, batches, dropout, sampling "
                   "(default 1337)")
    e = p.add_argument_group("evaluation, checkpoints and output")
    e.add_argument("--eval-every", type=int, default=None, metavar="N",
                   help="steps between validation losses")
    e.add_argument("--eval-iters", type=int, default=None, metavar="N",
                   help="batches per loss estimate (the same batches every time)")
    e.add_argument("--ckpt-every", type=int, default=None, metavar="N",
                   help="steps between checkpoints (default: --eval-every; 0: only at the end)")
    e.add_argument("--out", default="runs/gpt2", metavar="DIR",
                   help="folder for the checkpoint (ckpt.json + ckpt-*.safetensors) and "
                   "loss.png (default runs/gpt2)")
    e.add_argument("--resume", action="store_true",
                   help="continue the run checkpointed in --out, bit for bit (its flags are "
                   "kept; giving a different one is an error, except --steps)")
    e.add_argument("--overwrite", action="store_true",
                   help="start a new run even if --out holds a checkpoint (it is replaced)")
    e.add_argument("--stop-at", type=int, default=None, metavar="STEP",
                   help="stop after this step with a checkpoint, as if interrupted (the "
                   "schedule still follows --steps); continue with --resume")
    e.add_argument("--no-progress", action="store_true", help="no progress bar")
    e.add_argument("--no-plot", action="store_true", help="do not write loss.png")
    e.add_argument("--profile", default=None, metavar="PATH",
                   help="write a timeline trace (Chrome/Perfetto JSON: host spans, kernels with "
                   "their jaxpr equations and source lines, memory) of a few training steps "
                   "after the first to PATH; open it in ui.perfetto.dev or summarize it with "
                   "scripts/summarize_trace.py")
    e.add_argument("--profile-steps", type=int, default=3, metavar="N",
                   help="steps the --profile trace covers (default 3)")
    s = p.add_argument_group("sampling at the end")
    s.add_argument("--sample-tokens", type=int, default=500, metavar="N",
                   help="tokens to generate (0: none; default 500)")
    s.add_argument("--temperature", type=float, default=0.8,
                   help="divides the logits; 0 is greedy (default 0.8)")
    s.add_argument("--top-k", type=int, default=40, metavar="K",
                   help="sample among the K likeliest tokens (0: all; default 40)")
    s.add_argument("--prompt", default="\n",
                   help="text the sample continues (default: a newline)")
    # fmt: on
    return p


def _fill_defaults(a: argparse.Namespace, cfg: ModelConfig) -> None:
    preset = {**COMMON, **PRESETS[a.config]}
    warmup_given = a.warmup_steps is not None
    for k, v in preset.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if not warmup_given and a.warmup_steps >= a.steps > 0:  # e.g. a short run of a preset
        a.warmup_steps = a.steps // 10
    if a.block_size is None:
        a.block_size = cfg.n_ctx
    if a.min_lr is None:
        a.min_lr = a.lr / 10
    if a.ckpt_every is None:
        a.ckpt_every = a.eval_every


def _check_flags(a: argparse.Namespace, cfg: ModelConfig) -> None:
    """Raise ExampleError naming the first flag with an impossible value."""
    positive = ("steps", "batch_size", "block_size", "grad_accum", "eval_every", "eval_iters")
    for k in positive:
        if getattr(a, k) <= 0:
            raise ExampleError(f"--{k.replace('_', '-')} must be positive, got {getattr(a, k)}")
    if a.block_size > cfg.n_ctx:
        raise ExampleError(
            f"--block-size {a.block_size} is larger than the model's context ({a.config}: "
            f"n_ctx={cfg.n_ctx})"
        )
    if not (a.lr > 0 and math.isfinite(a.lr)) or not 0 <= a.min_lr <= a.lr:
        raise ExampleError(f"need --lr > 0 and 0 <= --min-lr <= --lr, got {a.lr}, {a.min_lr}")
    checks = [
        ("warmup-steps", 0 <= a.warmup_steps < a.steps, f"in [0, --steps={a.steps})"),
        ("weight-decay", a.weight_decay >= 0, ">= 0"),
        ("beta1", 0 <= a.beta1 < 1, "in [0, 1)"),
        ("beta2", 0 <= a.beta2 < 1, "in [0, 1)"),
        ("grad-clip", a.grad_clip >= 0, ">= 0"),
        ("dropout", 0 <= a.dropout < 1, "in [0, 1)"),
        ("val-fraction", 0 < a.val_fraction < 1, "in (0, 1)"),
        ("ckpt-every", a.ckpt_every >= 0, ">= 0"),
        ("sample-tokens", a.sample_tokens >= 0, ">= 0"),
        ("profile-steps", a.profile_steps >= 1, ">= 1"),
        ("temperature", a.temperature >= 0, ">= 0"),
        ("top-k", a.top_k >= 0, ">= 0"),
    ]
    for flag, ok, want in checks:
        if not ok:
            raise ExampleError(f"--{flag} must be {want}, got {getattr(a, flag.replace('-', '_'))}")
    if a.scan_layers and not hasattr(cfg, "scan_layers"):
        raise ExampleError(f"--scan-layers is for --arch gpt2 (the config is {a.config})")
    if a.stop_at is not None and not 1 <= a.stop_at <= a.steps:
        raise ExampleError(f"--stop-at must be in [1, --steps={a.steps}], got {a.stop_at}")


def resolve_config(a: argparse.Namespace) -> None:
    """Set ``a.config`` from ``--arch`` when it is not given (a resumed run has it from the
    checkpoint); refuse a ``--config`` of another architecture than ``--arch``."""
    if a.config is None:
        a.config = DEFAULT_CONFIG[a.arch or "gpt2"]
    arch = arch_of(CONFIGS[a.config])
    if a.arch is not None and a.arch != arch:
        raise ExampleError(
            f"--arch {a.arch} does not match --config {a.config} (a {arch} "
            f"config; {a.arch} configs: "
            f"{[n for n, c in CONFIGS.items() if arch_of(c) == a.arch]})"
        )
    a.arch = arch
