"""Sampling text from a trained model with a sampler that compiles once.

The model always sees a fixed-size buffer of ``block_size`` tokens and a position index ``pos``
(how many tokens of the buffer are real). Causal attention means the padding after ``pos`` cannot
change the logits at ``pos - 1``, so one jitted ``next_token(params, buf, pos, key)`` serves
every position: it is traced and compiled on the first token and reused for all the others
(``Sampler.trace_count`` stays 1). Once the text is longer than the buffer, the buffer holds the
last ``block_size`` tokens (the usual sliding context of GPT-2 samplers). The same holds for
the LLaMA-style decoder: the buffer's token ``i`` sits at rotary position ``i``, so the token at
``pos - 1`` is rotated by its own position at every step (no KV cache: each step recomputes the
buffer, as GPT-2's sampler does).

Also a command line: ``python -m examples.gpt2.sample --out runs/gpt2 --tokens 500``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import blu
import blu.numpy as bnp
import blu.random as random
from blu import lax
from examples.gpt2 import ExampleError
from examples.gpt2.models import ModelConfig, config_from_dict, hidden_states, logits_from_hidden


class Sampler:
    """Draws tokens one at a time with temperature and top-k.

    Args:
        cfg: the model's architecture.
        block_size: tokens the model sees (``<= cfg.n_ctx``); default ``cfg.n_ctx``.
        temperature: divides the logits; 0 picks the most likely token (greedy).
        top_k: sample among the ``top_k`` most likely tokens only (0 or None: all).
        n_valid: tokens ``>= n_valid`` (vocabulary padding) are never drawn; default all.

    Raises:
        ExampleError: a negative temperature, a bad ``top_k`` or ``block_size``.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        block_size: int | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        n_valid: int | None = None,
    ):
        self.cfg = cfg
        self.block_size = cfg.n_ctx if block_size is None else int(block_size)
        self.n_valid = cfg.vocab_size if n_valid is None else int(n_valid)
        self.temperature = float(temperature)
        self.top_k = int(top_k or 0)
        if not 0 < self.block_size <= cfg.n_ctx:
            raise ExampleError(f"sampler block size must be in [1, {cfg.n_ctx}], got {block_size}")
        if self.temperature < 0:
            raise ExampleError(f"temperature must be >= 0, got {temperature}")
        if not 0 <= self.top_k <= self.n_valid:
            raise ExampleError(f"top-k must be in [0, {self.n_valid}], got {top_k}")
        self.trace_count = 0
        self.next_token = blu.jit(self._next_token)

    def _next_token(self, params, buf, pos, key):
        """The token following ``buf[0, :pos]``: int32 scalar. ``buf`` (1, block) int32,
        ``pos`` int32 scalar in [1, block]."""
        self.trace_count += 1  # runs only while tracing: counts compilations
        V, d = self.cfg.vocab_size, self.cfg.d_model
        h = hidden_states(params, buf, self.cfg)  # (1, block, d)
        h = lax.dynamic_slice(h, (0, pos - 1, 0), (1, 1, d)).reshape(d)  # project one row only
        row = logits_from_hidden(params, h, self.cfg).astype(np.float32)  # (V,)
        if self.n_valid < V:
            row = bnp.where(bnp.arange(V) < self.n_valid, row, -np.inf)
        if self.temperature == 0.0:
            return bnp.argmax(row).astype(np.int32)
        row = row / np.float32(self.temperature)
        if 0 < self.top_k < self.n_valid:
            kth = lax.top_k(row, self.top_k)[0][self.top_k - 1]
            row = bnp.where(row < kth, -np.inf, row)
        return random.categorical(key, row).astype(np.int32)

    def generate(self, params, prompt: np.ndarray, n_tokens: int, key) -> np.ndarray:
        """``n_tokens`` new token ids (int32, shape ``(n_tokens,)``) following ``prompt``.

        Args:
            params: the model's parameters.
            prompt: at least one token id.
            n_tokens: how many tokens to draw (>= 0).
            key: a ``blu.random`` key; the same key gives the same text.
        """
        prompt = np.asarray(prompt, np.int32).reshape(-1)
        if prompt.size == 0:
            raise ExampleError("the prompt must hold at least one token")
        if n_tokens < 0:
            raise ExampleError(f"number of tokens to sample must be >= 0, got {n_tokens}")
        T = self.block_size
        tokens = list(prompt.tolist())
        buf = np.zeros((1, T), np.int32)
        for i in range(n_tokens):
            ctx = tokens[-T:]
            buf[0, : len(ctx)] = ctx
            tok = self.next_token(params, buf, np.int32(len(ctx)), random.fold_in(key, i))
            tokens.append(int(tok))
        return np.asarray(tokens[prompt.size :], np.int32)


def main(argv: list[str] | None = None) -> str:
    """Sample from the checkpoint in ``--out``; prints and returns the text."""
    from examples.gpt2 import checkpoint
    from examples.gpt2.data import tokenizer_from_meta
    from examples.gpt2.train import load_params

    p = argparse.ArgumentParser(
        prog="python -m examples.gpt2.sample", description="Sample text from a checkpoint."
    )
    p.add_argument("--out", default="runs/gpt2", help="checkpoint folder (default runs/gpt2)")
    p.add_argument("--tokens", type=int, default=500, help="tokens to generate (default 500)")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=40, help="0 = no top-k cut (default 40)")
    p.add_argument("--prompt", default="\n", help="text to continue (default a newline)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    a = p.parse_args(argv)
    tensors, meta = checkpoint.load(a.out)
    cfg = config_from_dict(meta["model_config"])
    tok = tokenizer_from_meta(meta["tokenizer"])
    params = load_params(tensors, cfg, a.out)
    a.top_k = clamp_top_k(a.top_k, tok.vocab_size, say=True)
    s = Sampler(cfg, meta["train_args"]["block_size"], a.temperature, a.top_k, tok.vocab_size)
    out = s.generate(params, tok.encode(a.prompt), a.tokens, random.key(a.seed))
    text = a.prompt + tok.decode(out)
    print(text)
    how = f"{a.tokens} tokens, temperature {a.temperature}, top-k {a.top_k or 'off'}, seed {a.seed}"
    append_sample(a.out, int(meta["step"]), text, how)
    return text


SAMPLES = "samples.txt"


def clamp_top_k(top_k: int, vocab_size: int, say: bool) -> int:
    """``top_k`` at most the vocabulary's size (more means no cut: the example's default 40
    exceeds a small character vocabulary); ``say``: print a note (stderr) when it clamps."""
    if top_k <= vocab_size:
        return top_k
    if say:
        print(f"--top-k {top_k} is more than the vocabulary ({vocab_size} tokens): sampling "
              f"with --top-k {vocab_size}", file=sys.stderr)  # fmt: skip
    return vocab_size


def append_sample(out: str | Path, step: int, text: str, how: str) -> Path:
    """Append a sample to ``samples.txt`` in the checkpoint folder ``out``, headed by the
    checkpoint's step and how it was drawn; returns the file's path."""
    from examples.gpt2 import checkpoint

    path = Path(out) / SAMPLES
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():  # ours: a new run of the example may replace it (not a user's file)
        checkpoint.record_written(out, SAMPLES)
    with path.open("a", encoding="utf-8") as f:
        f.write(f"--- step {step}: {how} ---\n{text}\n")
    return path


if __name__ == "__main__":
    try:
        main()
    except ExampleError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
