"""The GPT-2 training example end to end, on the tiny config: the loss falls, a resumed run
continues bit for bit, bad flags and bad checkpoints are refused clearly, the sampler compiles
once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root holds examples/

import blu  # noqa: E402
import blu.random as random  # noqa: E402
from examples.gpt2 import ExampleError, checkpoint, train  # noqa: E402
from examples.gpt2.data import CORPUS_NAME, GPT2Tokenizer, read_corpus, search_dirs  # noqa: E402
from examples.gpt2.model import CONFIGS, forward, init_params  # noqa: E402
from examples.gpt2.sample import Sampler  # noqa: E402
from examples.gpt2.sample import main as sample_main  # noqa: E402

STEPS = 12


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The first 40,000 characters of tinyshakespeare (from $BLU_DATA_DIR or shared/data; never
    downloaded: without it, a synthetic corpus with the same kind of structure)."""
    p = tmp_path_factory.mktemp("corpus") / "shakespeare40k.txt"
    found = [d / CORPUS_NAME for d in search_dirs() if (d / CORPUS_NAME).is_file()]
    if found:
        text = read_corpus(found[0])[:40_000]
    else:
        rng = np.random.default_rng(0)
        words = "the king and queen of this fair land shall speak to thee my lord".split()
        lines = [" ".join(rng.choice(words, 8)).capitalize() + ".\n" for _ in range(900)]
        text = "".join(f"CITIZEN:\n{line}\n" for line in lines)[:40_000]
    p.write_text(text, encoding="utf-8")
    return p


def _args(corpus: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--config",
        "tiny",
        "--data",
        str(corpus),
        "--out",
        str(out),
        "--steps",
        str(STEPS),
        "--batch-size",
        "8",
        "--block-size",
        "16",
        "--eval-every",
        "6",
        "--eval-iters",
        "2",
        "--lr",
        "1e-2",
        "--warmup-steps",
        "2",
        "--no-progress",
        "--sample-tokens",
        "0",
        *extra,
    ]


def _tensors(out: Path) -> dict[str, np.ndarray]:
    rec = json.loads((out / checkpoint.RECORD).read_text())
    return safetensors.numpy.load_file(str(out / rec["tensors_file"]))


@pytest.fixture(scope="module")
def full_run(corpus, tmp_path_factory):
    """An uninterrupted 8-step run: (summary, output folder)."""
    out = tmp_path_factory.mktemp("full")
    return train.main(_args(corpus, out)), out


def test_loss_falls(full_run, corpus):
    result, out = full_run
    losses = result["history"]["train_loss"]
    assert len(losses) == STEPS and all(np.isfinite(losses))
    vocab = len(set(corpus.read_text(encoding="utf-8")))
    assert abs(losses[0] - np.log(vocab)) < 0.3  # about ln(vocab) at initialisation
    assert np.mean(losses[-2:]) < losses[0] - 0.5
    (s6, v6), (s12, v12) = result["history"]["val_loss"]
    assert (s6, s12) == (6, 12) and max(v6, v12) < losses[0] - 0.4
    assert result["val_loss"] == v12
    meta = json.loads((out / checkpoint.RECORD).read_text())["meta"]
    assert meta["step"] == STEPS and meta["train_args"]["precision"] == "fp32"
    assert meta["model_config"]["vocab_size"] == vocab


def test_loss_curve_png(full_run):
    pytest.importorskip("matplotlib")  # the examples extra; without it the run skips the PNG
    result, out = full_run
    assert result["plot"] == str(out / "loss.png")
    assert (out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_continues_bit_for_bit(full_run, corpus, tmp_path):
    full, full_out = full_run
    first = train.main(_args(corpus, tmp_path, "--stop-at", "3"))
    assert first["step"] == 3
    assert first["history"]["train_loss"] == full["history"]["train_loss"][:3]
    # --data left out: a resumed run reads the corpus it was trained on
    resumed = train.main(
        [
            "--resume",
            "--out",
            str(tmp_path),
            "--no-progress",
            "--sample-tokens",
            "0",
            "--eval-iters",
            "2",
            "--eval-every",
            "6",
        ]
    )
    assert resumed["step"] == STEPS
    # the next-step loss (and every later one) equals the uninterrupted run's exactly
    assert resumed["history"] == full["history"]
    a, b = _tensors(full_out), _tensors(tmp_path)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # resuming a finished run trains nothing and leaves the checkpoint as it was
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix != ".png"}
    again = train.main(["--resume", "--out", str(tmp_path), "--no-progress", "--no-plot",
                        "--sample-tokens", "0", "--eval-iters", "2"])  # fmt: skip
    assert again["step"] == STEPS and again["history"] == full["history"]
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix != ".png"}
    assert after == before


def test_corrupt_checkpoint_is_refused_and_left_untouched(full_run, corpus, tmp_path):
    _, full_out = full_run
    out = tmp_path / "run"
    shutil.copytree(full_out, out)
    rec = json.loads((out / checkpoint.RECORD).read_text())
    tfile = out / rec["tensors_file"]
    blob = bytearray(tfile.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    tfile.write_bytes(bytes(blob))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(checkpoint.CheckpointError, match="corrupt"):
        train.main(["--resume", "--out", str(out), "--data", str(corpus), "--no-progress"])
    # a fresh run does not replace it either, unless told to
    with pytest.raises(ExampleError, match="already holds a checkpoint"):
        train.main(_args(corpus, out))
    (out / "junk").write_text("")  # (so the listing below also sees untouched extras)
    before["junk"] = b""
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # a torn record (e.g. a foreign file) is refused the same way
    (out / checkpoint.RECORD).write_text('{"format": "blu-gpt2-ex')
    with pytest.raises(checkpoint.CheckpointError, match="corrupt"):
        checkpoint.load(out)
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint"):
        checkpoint.load(tmp_path / "empty")


def test_mismatched_checkpoint_is_refused(full_run, corpus, tmp_path):
    _, full_out = full_run
    out = tmp_path / "run"
    shutil.copytree(full_out, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    base = ["--resume", "--out", str(out), "--data", str(corpus), "--no-progress"]
    with pytest.raises(checkpoint.CheckpointError, match=r"--config small \(checkpoint: tiny\)"):
        train.main([*base, "--config", "small"])
    with pytest.raises(checkpoint.CheckpointError, match=r"--batch-size 4 \(checkpoint: 8\)"):
        train.main([*base, "--batch-size", "4"])
    other = tmp_path / "other.txt"
    other.write_text(corpus.read_text()[:30_000])
    with pytest.raises(checkpoint.CheckpointError, match="another corpus"):
        train.main(["--resume", "--out", str(out), "--data", str(other), "--no-progress"])
    # tensors whose shapes do not fit the model the record describes
    tensors, meta = checkpoint.load(out)
    cfg = CONFIGS["tiny"].with_vocab(meta["model_config"]["vocab_size"] + 1)
    with pytest.raises(checkpoint.CheckpointError, match="params.wte"):
        train.load_params(tensors, cfg, str(out))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--steps", "0"], "--steps must be positive"),
        (["--steps", "-3"], "--steps must be positive"),
        (["--block-size", "33"], "larger than the model's context"),
        (["--batch-size", "100000"], "larger than the training split"),
        (["--batch-size", "0"], "--batch-size must be positive"),
        (["--grad-accum", "0"], "--grad-accum must be positive"),
        (["--lr", "0"], "--lr > 0"),
        (["--stop-at", "13"], "--stop-at must be in"),
        (["--warmup-steps", "12"], "--warmup-steps must be"),
        (["--temperature", "-1"], "--temperature must be"),
    ],
)
def test_bad_flags_are_clear_errors(corpus, tmp_path, extra, message):
    with pytest.raises(ExampleError, match=message):
        train.main(_args(corpus, tmp_path, *extra))
    assert not checkpoint.exists(tmp_path)


def test_short_run_of_a_preset_shortens_its_warmup():
    a = train.build_parser().parse_args(["--steps", "30"])
    a.config = "small"
    train._fill_defaults(a, CONFIGS["small"])
    assert a.warmup_steps == 3 and a.steps == 30 and a.block_size == CONFIGS["small"].n_ctx
    a = train.build_parser().parse_args([])
    a.config = "small"
    train._fill_defaults(a, CONFIGS["small"])
    assert (a.steps, a.warmup_steps, a.lr, a.min_lr) == (700, 50, 4e-3, 4e-4)


def test_missing_corpus_exit_status_and_message(tmp_path, capsys):
    # --out under tmp_path: the default (runs/gpt2 in the working directory) may hold the README
    # main job's checkpoint, which is refused before the corpus is looked at
    argv = [
        "--config",
        "tiny",
        "--data",
        str(tmp_path / "none.txt"),
        "--out",
        str(tmp_path / "run"),
    ]
    assert train.cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: corpus") and "does not exist" in err


def test_help_documents_every_flag():
    r = subprocess.run(
        [sys.executable, "-m", "examples.gpt2", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    flags = [s for a in train.build_parser()._actions for s in a.option_strings]
    assert len(flags) > 25
    for f in flags:
        assert f in r.stdout, f
    for a in train.build_parser()._actions:
        assert a.help, a.option_strings


def test_grad_accum_matches_one_big_batch(corpus, tmp_path):
    one = train.main(_args(corpus, tmp_path / "a", "--stop-at", "2"))
    two = train.main(
        _args(corpus, tmp_path / "b", "--stop-at", "2", "--batch-size", "4", "--grad-accum", "2")
    )
    # the same 8 windows per step (drawn from one key), averaged in two halves
    np.testing.assert_allclose(
        two["history"]["train_loss"], one["history"]["train_loss"], rtol=2e-5
    )


def test_bf16_compute_keeps_fp32_master_weights(corpus, tmp_path, full_run):
    r = train.main(_args(corpus, tmp_path, "--stop-at", "2", "--precision", "bf16"))
    fp32 = full_run[0]["history"]["train_loss"][:2]
    assert np.allclose(r["history"]["train_loss"], fp32, atol=0.05)
    assert r["history"]["train_loss"] != fp32  # it really computed in bf16
    params = {k: v for k, v in _tensors(tmp_path).items() if k.startswith("params.")}
    assert params and all(v.dtype == np.float32 for v in params.values())
    meta = json.loads((tmp_path / checkpoint.RECORD).read_text())["meta"]
    assert meta["train_args"]["precision"] == "bf16"
    assert blu.config.default_matmul_precision == "fp32"  # the run's setting did not leak


def test_tf32_is_recorded_and_dropout_changes_the_loss(corpus, tmp_path, full_run):
    r = train.main(
        _args(corpus, tmp_path, "--stop-at", "2", "--precision", "tf32", "--dropout", "0.2")
    )
    meta = json.loads((tmp_path / checkpoint.RECORD).read_text())["meta"]
    assert meta["train_args"]["precision"] == "tf32" and meta["model_config"]["dropout"] == 0.2
    losses = r["history"]["train_loss"]
    assert all(np.isfinite(losses)) and losses != full_run[0]["history"]["train_loss"][:2]


def test_gpt2_tokenizer_run_and_sample_cli(corpus, tmp_path, full_run, capsys):
    try:
        GPT2Tokenizer()
    except ExampleError as e:
        pytest.skip(str(e))  # the tokenizer files are not beside the checkout
    r = train.main(
        _args(
            corpus,
            tmp_path,
            "--stop-at",
            "1",
            "--tokenizer",
            "gpt2",
            "--batch-size",
            "2",
            "--sample-tokens",
            "5",
            "--temperature",
            "1",
        )
    )
    meta = json.loads((tmp_path / checkpoint.RECORD).read_text())["meta"]
    assert meta["model_config"]["vocab_size"] == 50257 and meta["tokenizer"] == {"kind": "gpt2"}
    assert np.isfinite(r["train_loss"]) and r["history"]["train_loss"][0] > 9  # ~ln(50257)
    assert isinstance(r["sample"], str) and r["sample"].startswith("\n")
    capsys.readouterr()
    text = sample_main(["--out", str(full_run[1]), "--tokens", "25", "--prompt", "ROMEO:"])
    assert text.startswith("ROMEO:") and len(text) == len("ROMEO:") + 25
    assert capsys.readouterr().out.startswith("ROMEO:")


def test_samples_are_written_beside_the_checkpoint_with_the_step(corpus, full_run, tmp_path):
    r = train.main(
        _args(corpus, tmp_path, "--stop-at", "2", "--sample-tokens", "7", "--top-k", "5")
    )
    path = tmp_path / "samples.txt"
    assert r["samples_file"] == str(path)
    first = path.read_text(encoding="utf-8")
    assert first.startswith("--- step 2: 7 tokens, temperature 0.8, top-k 5 ---\n")
    assert first.endswith(r["sample"] + "\n")
    text = sample_main(["--out", str(tmp_path), "--tokens", "4", "--prompt", "the", "--top-k", "0"])
    again = path.read_text(encoding="utf-8")
    assert again.startswith(first) and again.endswith(f"seed 0 ---\n{text}\n")
    assert again.count("--- step 2:") == 2
    r = train.main(_args(corpus, tmp_path, "--stop-at", "1", "--sample-tokens", "3",
                         "--top-k", "5", "--overwrite"))  # fmt: skip
    assert path.read_text(encoding="utf-8").count("--- step") == 1  # a new run, new samples


def test_sampler_compiles_once_and_draws_valid_tokens():
    cfg = CONFIGS["tiny"].with_vocab(40)
    params = init_params(cfg, random.key(1))
    s = Sampler(cfg, block_size=12, temperature=0.9, top_k=5, n_valid=37)
    out = s.generate(params, np.array([3, 1, 4]), 30, random.key(7))  # longer than the buffer
    assert out.shape == (30,) and out.dtype == np.int32
    assert out.min() >= 0 and out.max() < 37
    assert s.trace_count == 1
    again = s.generate(params, np.array([3, 1, 4]), 30, random.key(7))
    np.testing.assert_array_equal(out, again)
    assert s.trace_count == 1


def test_greedy_sampler_matches_the_unpadded_model():
    """The fixed buffer's padding never changes the next token (causal attention)."""
    cfg = CONFIGS["tiny"].with_vocab(30)
    params = init_params(cfg, random.key(2))
    s = Sampler(cfg, block_size=8, temperature=0.0)
    got = s.generate(params, np.array([5]), 12, random.key(0))
    tokens = [5]
    for _ in range(12):
        ctx = np.asarray(tokens[-8:], np.int32)[None]
        logits = np.asarray(forward(params, ctx, cfg))[0, -1]
        tokens.append(int(np.argmax(logits)))
    assert got.tolist() == tokens[1:]
    top1 = Sampler(cfg, block_size=8, temperature=1.0, top_k=1)
    assert top1.generate(params, np.array([5]), 12, random.key(3)).tolist() == tokens[1:]


def test_sampler_rejects_bad_settings():
    cfg = CONFIGS["tiny"].with_vocab(30)
    with pytest.raises(ExampleError, match="temperature"):
        Sampler(cfg, temperature=-0.5)
    with pytest.raises(ExampleError, match="top-k"):
        Sampler(cfg, top_k=31)
    with pytest.raises(ExampleError, match="block size"):
        Sampler(cfg, block_size=cfg.n_ctx + 1)


def test_gpt2_sizes_have_the_released_parameter_counts():
    """Every GPT-2 config's parameter count (tied embeddings, GPT-2's 50,257 BPE tokens padded to
    a multiple of 64): OpenAI's released 124M / 355M / 774M / 1.5B checkpoints' counts plus the
    padding rows, from the shapes alone (nothing is initialised)."""
    from examples.gpt2.model import num_params

    released = {"gpt2-124m": 124_439_808, "gpt2-350m": 354_823_168,
                "gpt2-774m": 774_030_080, "gpt2-1.5b": 1_557_611_200}  # fmt: skip
    for name, want in released.items():
        cfg = CONFIGS[name].with_vocab(50257)
        assert cfg.vocab_size == 50304 and cfg.d_model % cfg.n_head == 0
        shapes = blu.eval_shape(lambda k, cfg=cfg: init_params(cfg, k), random.key(0))
        assert num_params(shapes) == want + (50304 - 50257) * cfg.d_model, name
