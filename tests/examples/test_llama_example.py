"""The LLaMA-style decoder of the training example (``examples/gpt2/llama.py``): its forward
against an independent numpy float64 implementation, RoPE's relative-position property,
grouped-query attention against repeated K/V heads, and the shared command line on the tiny
config (the loss falls, a resumed run continues bit for bit, the sampler follows the model)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root holds examples/

import blu  # noqa: E402
import blu.random as random  # noqa: E402
from blu.core import pytree  # noqa: E402
from examples.gpt2 import ExampleError, checkpoint, llama, models, train  # noqa: E402
from examples.gpt2.sample import Sampler  # noqa: E402
from examples.gpt2.sample import main as sample_main  # noqa: E402

CFG = dataclasses.replace(llama.CONFIGS["llama-tiny"], vocab_size=23)  # 4 heads, 2 K/V heads
STEPS = 8


# ---- an independent float64 implementation, written directly in numpy -------------------------


def _np_rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def _np_rope(x, theta):
    """Rotation of each pair (i, i + D/2) as a complex number times exp(i·pos·freq_i)."""
    _, T, _, D = x.shape
    freq = 1.0 / theta ** (np.arange(D // 2) * 2.0 / D)
    rot = np.exp(1j * np.arange(T)[:, None] * freq[None, :])[None, :, None, :]  # (1, T, 1, D/2)
    z = (x[..., : D // 2] + 1j * x[..., D // 2 :]) * rot
    return np.concatenate([z.real, z.imag], axis=-1)


def _np_attention(q, k, v):
    """Causal attention, query head n reading K/V head n // (N / K), one head at a time."""
    B, T, N, D = q.shape
    group = N // k.shape[2]
    out = np.zeros_like(q)
    allowed = np.tril(np.ones((T, T), bool))
    for n in range(N):
        s = np.einsum("btd,bsd->bts", q[:, :, n], k[:, :, n // group]) / np.sqrt(D)
        s = np.where(allowed, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[:, :, n] = np.einsum("bts,bsd->btd", p, v[:, :, n // group])
    return out


def np_forward(params, ids, cfg):
    P = pytree.tree_map(lambda a: np.asarray(a, np.float64), params)
    B, T = ids.shape
    H, K, D = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    x = P["embed"][ids]
    for blk in P["layers"]:
        h = _np_rms(x, blk["attn_norm"]["g"], cfg.norm_eps)
        a = blk["attn"]
        q = _np_rope((h @ a["wq"]).reshape(B, T, H, D), cfg.rope_theta)
        k = _np_rope((h @ a["wk"]).reshape(B, T, K, D), cfg.rope_theta)
        v = (h @ a["wv"]).reshape(B, T, K, D)
        x = x + _np_attention(q, k, v).reshape(B, T, H * D) @ a["wo"]
        h = _np_rms(x, blk["mlp_norm"]["g"], cfg.norm_eps)
        m = blk["mlp"]
        gate = h @ m["w_gate"]
        x = x + (gate / (1 + np.exp(-gate)) * (h @ m["w_up"])) @ m["w_down"]
    return _np_rms(x, P["norm"]["g"], cfg.norm_eps) @ P["head"].T


def _params(cfg, seed=0, gain_noise=True):
    """Random parameters; norm gains away from 1 so a mix-up of them would show."""
    params = llama.init_params(cfg, random.key(seed))
    if not gain_noise:
        return params
    rng = np.random.default_rng(seed)
    return pytree.tree_map(
        lambda p: (
            p + rng.uniform(-0.5, 0.5, np.shape(p)).astype(np.float32) if np.ndim(p) == 1 else p
        ),
        params,
    )


def _ids(cfg, B=2, T=11, seed=1):
    return np.random.default_rng(seed).integers(0, cfg.vocab_size, (B, T)).astype(np.int32)


# ---- the model ---------------------------------------------------------------------------------


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_forward_matches_numpy_float64(theta):
    cfg = dataclasses.replace(CFG, rope_theta=theta)
    params, ids = _params(cfg), _ids(cfg)
    want = np_forward(params, ids, cfg)
    got = np.asarray(blu.jit(lambda p, i: llama.forward(p, i, cfg))(params, ids))
    assert got.shape == (2, 11, cfg.vocab_size) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    # the fused loss is the cross-entropy of those logits
    y = _ids(cfg, seed=2)
    lse = np.log(np.exp(want - want.max(-1, keepdims=True)).sum(-1)) + want.max(-1)
    ce = np.mean(lse - np.take_along_axis(want, y[..., None], -1)[..., 0])
    np.testing.assert_allclose(float(llama.loss_fn(params, ids, y, cfg)), ce, rtol=1e-5)


def test_rope_depends_only_on_the_position_difference():
    D, theta = 16, 10000.0
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 1, 1, 1, D)).astype(np.float32)

    def score(m, n):
        cos, sin = llama.rope_tables(np.array([m, n]), D, theta)
        qm = np.asarray(llama.apply_rope(q, cos[:1], sin[:1]), np.float64)
        kn = np.asarray(llama.apply_rope(k, cos[1:], sin[1:]), np.float64)
        return float((qm * kn).sum())

    for delta in (0, 1, 5, 37):
        scores = [score(m + delta, m) for m in (0, 3, 100, 1000)]
        np.testing.assert_allclose(scores, scores[0], rtol=1e-4, atol=1e-5)
    assert abs(score(5, 0) - score(0, 0)) > 1e-3  # and it does depend on the difference
    # position 0 is no rotation; the rotation keeps norms
    cos, sin = llama.rope_tables(np.array([0, 7]), D, theta)
    np.testing.assert_array_equal(np.asarray(llama.apply_rope(q, cos[:1], sin[:1])), q)
    r = np.asarray(llama.apply_rope(q, cos[1:], sin[1:]))
    np.testing.assert_allclose(np.linalg.norm(r), np.linalg.norm(q), rtol=1e-6)


def test_gqa_equals_multi_head_with_repeated_kv_heads():
    params, ids = _params(CFG), _ids(CFG)
    group = CFG.n_head // CFG.n_kv_head
    D = CFG.head_dim
    mha = dataclasses.replace(CFG, n_kv_head=CFG.n_head)

    def repeat_heads(w):  # (d, K·D) -> (d, N·D): K/V head j serves query heads j·g .. j·g+g-1
        w = np.asarray(w).reshape(w.shape[0], CFG.n_kv_head, D)
        return np.repeat(w, group, axis=1).reshape(w.shape[0], -1)

    p_mha = pytree.tree_map(lambda a: a, params)
    for blk in p_mha["layers"]:
        blk["attn"]["wk"], blk["attn"]["wv"] = (
            repeat_heads(blk["attn"][n]) for n in "wk wv".split()
        )
    got = np.asarray(llama.forward(params, ids, CFG))
    want = np.asarray(llama.forward(p_mha, ids, mha))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # n_kv_head == n_head is plain multi-head attention (the numpy reference, one head each)
    np.testing.assert_allclose(want, np_forward(p_mha, ids, mha), rtol=2e-4, atol=2e-5)


def test_bf16_compute_keeps_float32_gradients():
    from blu.core.dtypes import bfloat16

    params, ids, y = _params(CFG), _ids(CFG), _ids(CFG, seed=2)
    l32 = float(llama.loss_fn(params, ids, y, CFG))
    l16, g = blu.value_and_grad(lambda p: llama.loss_fn(p, ids, y, CFG, None, bfloat16))(params)
    assert abs(float(l16) - l32) < 0.05
    assert g["layers"][0]["attn"]["wk"].dtype == np.float32
    assert np.isfinite(np.asarray(g["head"])).all()


def test_config_checks_and_parameter_counts():
    with pytest.raises(ExampleError, match="n_kv_head 3 does not divide n_head 4"):
        dataclasses.replace(CFG, n_kv_head=3).check()
    with pytest.raises(ExampleError, match="must be even"):
        dataclasses.replace(CFG, n_head=32).check()  # head size 1
    counts = {}
    for name, c in llama.CONFIGS.items():
        cfg = c.with_vocab(50257)  # GPT-2's BPE, padded as configured
        shapes = blu.eval_shape(lambda k, cfg=cfg: llama.init_params(cfg, k), random.key(0))
        counts[name] = models.num_params(shapes)
        d, kv, f, V = cfg.d_model, cfg.n_kv_head * cfg.head_dim, cfg.d_ff, cfg.vocab_size
        per_layer = 2 * d * d + 2 * d * kv + 3 * d * f + 2 * d
        assert counts[name] == 2 * V * d + cfg.n_layer * per_layer + d
    assert 1.1e9 < counts["llama-1b"] < 1.3e9  # Llama-3.2-1B's body, untied 50304-token vocab
    assert 1.4e8 < counts["llama-125m"] < 1.6e8
    assert models.config_from_dict(CFG.to_dict()) == CFG


# ---- the command line --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    words = "the king and queen of this fair land shall speak to thee my lord".split()
    text = "".join(f"CITIZEN:\n{' '.join(rng.choice(words, 8)).capitalize()}.\n\n"
                   for _ in range(600))  # fmt: skip
    p = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    p.write_text(text, encoding="utf-8")
    return p


def _args(corpus: Path, out: Path, *extra: str) -> list[str]:
    return ["--arch", "llama", "--config", "llama-tiny", "--data", str(corpus), "--out",
            str(out), "--steps", str(STEPS), "--batch-size", "8", "--block-size", "16",
            "--eval-every", "4", "--eval-iters", "2", "--lr", "1e-2", "--warmup-steps", "2",
            "--no-progress", "--no-plot", "--sample-tokens", "0", *extra]  # fmt: skip


@pytest.fixture(scope="module")
def full_run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("llama_full")
    return train.main(_args(corpus, out)), out


def test_training_reduces_the_loss(full_run, corpus):
    result, out = full_run
    losses = result["history"]["train_loss"]
    assert len(losses) == STEPS and all(np.isfinite(losses))
    vocab = len(set(corpus.read_text(encoding="utf-8")))
    assert abs(losses[0] - np.log(vocab)) < 0.3
    assert np.mean(losses[-2:]) < losses[0] - 0.3
    meta = json.loads((out / checkpoint.RECORD).read_text())["meta"]
    assert meta["config_name"] == "llama-tiny" and meta["model_config"]["arch"] == "llama"


def test_resume_continues_bit_for_bit(full_run, corpus, tmp_path):
    full, full_out = full_run
    first = train.main(_args(corpus, tmp_path, "--stop-at", "3"))
    assert first["history"]["train_loss"] == full["history"]["train_loss"][:3]
    again = ["--resume", "--out", str(tmp_path), "--no-progress", "--no-plot"]
    resumed = train.main([*again, "--sample-tokens", "0", "--eval-iters", "2", "--eval-every", "4"])
    assert resumed["step"] == STEPS and resumed["history"] == full["history"]
    a, b = checkpoint.load(full_out)[0], checkpoint.load(tmp_path)[0]
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    with pytest.raises(ExampleError, match="--arch gpt2 does not match --config llama-tiny"):
        train.main(["--resume", "--arch", "gpt2", "--out", str(tmp_path), "--no-progress"])


def test_sample_cli_reads_a_llama_checkpoint(full_run, capsys):
    _, out = full_run
    text = sample_main(["--out", str(out), "--tokens", "20", "--prompt", "CITIZEN", "--seed", "3"])
    assert text.startswith("CITIZEN") and len(text) == 27


def test_greedy_sampler_follows_the_model_at_every_position():
    """Each greedy token is the argmax of the full forward at the position before it: the
    sampler's buffer puts every token at its own rotary position."""
    params = _params(CFG, gain_noise=False)
    sampler = Sampler(CFG, block_size=16, temperature=0.0)
    prompt = np.array([1, 2, 3], np.int32)
    new = sampler.generate(params, prompt, 10, random.key(0))
    assert sampler.trace_count == 1 and new.shape == (10,)
    seq = np.concatenate([prompt, new])[None]
    logits = np.asarray(llama.forward(params, seq, CFG))[0]
    np.testing.assert_array_equal(new, logits[2:-1].argmax(-1))
    drawn = Sampler(CFG, 16, 1.0, 5).generate(params, prompt, 30, random.key(1))
    assert drawn.min() >= 0 and drawn.max() < CFG.vocab_size


def test_arch_flag_and_help_list_the_llama_configs(corpus, tmp_path):
    with pytest.raises(ExampleError, match="--arch llama does not match --config tiny"):
        train.main(["--arch", "llama", "--config", "tiny", "--data", str(corpus), "--out",
                    str(tmp_path), "--no-progress"])  # fmt: skip
    r = subprocess.run([sys.executable, "-m", "examples.gpt2", "--help"], cwd=ROOT,
                       capture_output=True, text=True, check=True)  # fmt: skip
    for name in llama.CONFIGS:
        assert name in r.stdout
    assert "--arch {gpt2,llama}" in r.stdout
