"""The vision example: ResNet-50's and ViT-B/16's parameter counts equal torchvision's (counted
from shapes, nothing allocated), forward shapes, batch norm's statistics threaded through the
step, and the CPU run on scikit-learn's digits (the procedural glyphs without scikit-learn)
reaching its stated accuracy."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root holds examples/

import blu  # noqa: E402
import blu.random as random  # noqa: E402
from examples.vision import ExampleError, data, models, train  # noqa: E402


def _count(name: str) -> tuple[int, int]:
    module, cfg = models.get(name)
    params, stats = blu.eval_shape(lambda k: module.init(cfg, k), random.key(0))
    return models.num_params(params), models.num_params(stats)


def test_resnet50_has_torchvisions_parameter_count():
    # torchvision.models.resnet50(): sum(p.numel() for p in m.parameters()) == 25_557_032;
    # its buffers: a running mean and variance per batch-norm channel (26,560 channels)
    assert _count("resnet50") == (25_557_032, 2 * 26_560)
    assert _count("resnet18")[0] == 11_689_512  # torchvision.models.resnet18()


def test_vit_b16_has_torchvisions_parameter_count():
    # torchvision.models.vit_b_16(): 86,567,656 parameters, no batch statistics
    assert _count("vit-b16") == (86_567_656, 0)


@pytest.mark.parametrize("name", ["resnet50", "vit-b16"])
def test_imagenet_forward_shapes(name):
    module, cfg = models.get(name)

    def fwd(k, x):
        params, stats = module.init(cfg, k)
        return module.apply(params, stats, x, cfg, train=True)

    x = blu.ShapeDtypeStruct((2, 224, 224, 3), np.float32)
    logits, stats = blu.eval_shape(fwd, random.key(0), x)
    assert logits.shape == (2, 1000) and logits.dtype == np.float32
    _, ref_stats = blu.eval_shape(lambda k: module.init(cfg, k), random.key(0))
    assert blu.tree_util.tree_structure(stats) == blu.tree_util.tree_structure(ref_stats)


def test_batch_stats_thread_through_the_step_and_eval_uses_them():
    module, cfg = models.get("resnet-tiny")
    params, stats = module.init(cfg, random.key(1))
    x = np.random.default_rng(0).normal(3.0, 2.0, (16, 8, 8, 1)).astype(np.float32)
    y = np.arange(16, dtype=np.int32) % 10
    opt = train.make_optimizer(train.build_parser().parse_args(["--steps", "2"]))
    step, _ = train.make_steps(module, cfg, opt)
    conv = np.asarray(params["stem"]["conv"], np.float64)  # (the step donates params)
    p2, s2, _, loss = step(params, stats, opt.init(params), x, y)
    assert np.isfinite(float(loss))
    # the stem's batch norm saw x through a 3x3 conv: its running mean moved by 0.1 * batch mean
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    h = sum(
        xp[:, i : i + 8, j : j + 8, :] @ conv[i, j] for i in range(3) for j in range(3)
    )  # (16, 8, 8, 16)
    np.testing.assert_allclose(
        np.asarray(s2["stem"]["bn"]["mean"]), 0.1 * h.mean(axis=(0, 1, 2)), rtol=1e-4, atol=1e-5
    )
    # eval mode: the statistics come back unchanged, the logits depend on them
    logits, s3 = module.apply(p2, s2, x, cfg, train=False)
    assert logits.shape == (16, 10)
    np.testing.assert_array_equal(np.asarray(s3["stem"]["bn"]["var"]), s2["stem"]["bn"]["var"])


def test_glyphs_are_deterministic_and_balanced():
    x, y = data.glyphs(n=500, seed=3)
    x2, y2 = data.glyphs(n=500, seed=3)
    np.testing.assert_array_equal(x, x2)
    assert x.shape == (500, 8, 8, 1) and x.min() >= 0 and x.max() <= 1
    assert np.bincount(y, minlength=10).min() > 25


# the real digits where scikit-learn is installed (CI: the test lock pins it), else the glyphs
HAS_SKLEARN = importlib.util.find_spec("sklearn") is not None
DATA, THRESHOLD = ("digits", 0.95) if HAS_SKLEARN else ("glyphs", 0.9)


def test_cpu_digits_run_reaches_its_accuracy(capsys):
    # measured after 200 steps (seeds 0-2): digits 0.983-0.989; glyphs (seeds 0-3) 0.955-0.973
    argv = ["--model", "resnet-tiny", "--data", DATA, "--steps", "200", "--eval-every", "100"]
    r = train.main(argv)
    assert r["val_acc"] >= THRESHOLD, r["history"]
    assert r["history"]["step"] == [100, 200]
    assert r["history"]["train_loss"][1] < r["history"]["train_loss"][0]
    assert "held-out accuracy" in capsys.readouterr().out


@pytest.mark.skipif(not HAS_SKLEARN, reason="scikit-learn is not installed")
def test_sklearn_digits_shape():
    x, y = data.sklearn_digits()
    assert x.shape == (1797, 8, 8, 1) and x.min() == 0.0 and x.max() == 1.0
    np.testing.assert_array_equal(
        np.bincount(y), [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    )


def test_vit_tiny_on_synthetic_batches_with_sgd_and_a_checkpoint(tmp_path):
    r = train.main(["--model", "vit-tiny", "--data", "synthetic", "--image-size", "8",
                    "--steps", "2", "--batch-size", "4", "--optimizer", "sgd",
                    "--out", str(tmp_path / "run")])  # fmt: skip
    assert r["val_acc"] is None and len(r["losses"]) == 2 and np.isfinite(r["losses"]).all()
    assert Path(r["checkpoint"]).is_file()


def test_image_folder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in ("cat", "dog"):
        (tmp_path / c).mkdir()
        for i in range(3):
            a = (rng.random((12, 10, 3)) * 255).astype(np.uint8)
            Image.fromarray(a).save(tmp_path / c / f"{i}.png")
    x, y, k = data.image_folder(tmp_path, 8, 1)
    assert x.shape == (6, 8, 8, 1) and k == 2 and list(y) == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ExampleError, match="one subfolder per class"):
        data.image_folder(tmp_path / "cat", 8, 1)


def test_bad_flags_are_refused(capsys):
    assert train.cli(["--steps", "0"]) == 2
    assert "--steps must be >= 1" in capsys.readouterr().err
    with pytest.raises(ExampleError, match="patch size"):
        train.main(["--model", "vit-tiny", "--data", "synthetic", "--image-size", "9"])
