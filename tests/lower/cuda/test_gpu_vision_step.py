"""Two training steps of the vision models on the (simulated) GPU against the same steps on the
CPU, float32, SGD with momentum: a ResNet with the imagenet stem (7x7 stride-2 convolution,
batch norm, ReLU, 3x3 stride-2 max pool) and bottleneck blocks with a projection shortcut, its
batch norms in checkpoint blocks; and a ViT (patch convolution, layer norms, attention, GELU).
They run the CUDA plan's rules on real models (cuDNN convolutions in the simulated GPU's numpy
form, batch norm's one-pass statistics and two-sum backward, the max pool's int8 window offsets,
the values recomputed in their readers instead of crossing kernels) against the CPU plan's."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import make_device, on_gpu, put

import blu
import blu.random as random
from blu import optim
from examples.vision import resnet, vit
from examples.vision.train import make_steps

MODELS = {
    "resnet": (resnet, resnet.ResNetConfig("bottleneck", (2, 1), (4, 8), (1, 2), stem_width=8,
                                           num_classes=5, image_size=24)),
    "vit": (vit, vit.ViTConfig(image_size=12, patch=4, dim=32, depth=2, heads=4, mlp_dim=64,
                               num_classes=5, in_channels=3)),
}  # fmt: skip


@on_gpu
@pytest.mark.parametrize("name", list(MODELS))
def test_vision_step_matches_the_cpu(name):
    module, cfg = MODELS[name]
    params, stats = module.init(cfg, random.key(0))
    opt = optim.sgd(0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, cfg.image_size, cfg.image_size, 3)).astype(np.float32)
    y = rng.integers(0, cfg.num_classes, 6).astype(np.int32)
    # numpy copies: each run's step donates the arrays it is given
    state = blu.tree_util.tree_map(np.array, (params, stats, opt.init(params)))
    leaves = blu.tree_util.tree_leaves

    def two_steps(state, dev=None):
        step, _ = make_steps(module, cfg, opt)  # a fresh jit: its own executables
        p, s, o = blu.tree_util.tree_map(
            lambda a: put(dev, a) if dev else blu.numpy.array(a), state
        )
        losses = []
        for _ in range(2):
            p, s, o, loss = step(p, s, o, *(put(dev, x, y) if dev else (x, y)))
            losses.append(float(loss))
        return losses, [np.asarray(a, np.float64) for a in leaves((p, s))]

    want_loss, want = two_steps(state)
    got_loss, got = two_steps(state, make_device())
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-4)
    for g, w in zip(got, want, strict=True):  # parameters and running statistics
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * max(1.0, np.abs(w).max()))
