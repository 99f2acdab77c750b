"""The example with ``--device cuda`` (marked ``gpu``: a GPU, or with ``BLU_FAKE_GPU=1`` the
simulated one): the parameters are initialized by one jitted program on the device, trained
there, and the run's losses and checkpoint agree with the same run on the CPU (same seed, fp32:
the two compute in different orders, so to float32 rounding amplified by a few steps). Also
``--lower-only``, which compiles the programs of a GPU run (initialization included) without
running them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gpu_helpers import GPU_MARKS

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import blu.cuda as bc  # noqa: E402
from examples.gpt2 import train  # noqa: E402
from tests.examples.test_gpt2_example import _args, _tensors, corpus  # noqa: E402, F401

pytestmark = GPU_MARKS


def test_the_example_on_the_device_matches_the_cpu(corpus, tmp_path):  # noqa: F811
    extra = ("--precision", "fp32", "--no-plot", "--steps", "6", "--eval-every", "6")
    cpu = train.main(_args(corpus, tmp_path / "cpu", *extra))
    bc.reset_peak_memory_stats()
    gpu = train.main(_args(corpus, tmp_path / "gpu", *extra, "--device", "cuda"))
    assert gpu["peak_gpu_bytes"] > 0  # the state lived on the device
    # a few Adam steps amplify float32 rounding (relative 1e-7 a step) into the losses
    np.testing.assert_allclose(gpu["history"]["train_loss"], cpu["history"]["train_loss"],
                               rtol=1e-4)  # fmt: skip
    np.testing.assert_allclose(gpu["val_loss"], cpu["val_loss"], rtol=1e-4)
    a, b = _tensors(tmp_path / "cpu"), _tensors(tmp_path / "gpu")
    assert a.keys() == b.keys()
    for name in a:  # (by norm: Adam moves an entry of near-zero gradient by noise-sized steps)
        diff = np.linalg.norm(b[name].astype(np.float64) - a[name])
        assert diff <= 1e-3 * np.linalg.norm(a[name].astype(np.float64)) + 1e-4, name


def test_lower_only_compiles_without_running(corpus, tmp_path, monkeypatch):  # noqa: F811
    from blu.lower.cuda import executable

    compiled = []
    real = executable.GpuExecutable.__init__

    def counting(self, jaxpr, name, *args, **kwargs):
        compiled.append(name)
        real(self, jaxpr, name, *args, **kwargs)

    monkeypatch.setattr(executable.GpuExecutable, "__init__", counting)
    r = train.main(_args(corpus, tmp_path, "--device", "cuda", "--lower-only"))
    assert r == {"lowered": True}
    names = " ".join(compiled)
    assert "init_params" in names and "init" in names.replace("init_params", "")  # the state's
    assert "train_step" in names and "eval_loss" in names  # the steps'
    assert not (tmp_path / "ckpt.json").exists()  # nothing ran, nothing was written
