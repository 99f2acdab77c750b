"""The vision benchmark (``benchmarks/vision.py``) on the CPU: flag checks, the ``--tiny`` smoke
run of blu's peer, and (when PyTorch is installed) the fidelity harness: PyTorch's functional
ResNet from blu's initial weights gives blu's losses."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root holds benchmarks/ and examples/

from benchmarks import vision as drv  # noqa: E402
from benchmarks.peers import blu_vision  # noqa: E402


def test_flags_are_checked(capsys):
    assert drv.cli(["--systems", "blu,jax"]) == 2
    assert "--systems takes" in capsys.readouterr().err
    a = drv.resolve(drv.build_parser().parse_args(["--tiny"]))
    assert a.models == ["resnet-tiny", "vit-tiny"] and a.systems == ["blu", "torch"]
    assert drv.modes_for(a, "resnet-tiny") == ["fp32"] and a.batch == 4
    a = drv.resolve(drv.build_parser().parse_args([]))
    assert drv.modes_for(a, "resnet50") == ["bf16", "tf32"] and a.batch == 256


@pytest.mark.slow  # a blu process that compiles the step (~8 s)
def test_tiny_smoke_run_of_blu(tmp_path):
    out = tmp_path / "r.jsonl"
    argv = ["--tiny", "--models", "resnet-tiny", "--systems", "blu", "--fidelity-steps", "0",
            "--workdir", str(tmp_path), "--json", str(out)]  # fmt: skip
    (r,) = drv.main(argv)
    assert r["ok"], r
    assert r["system"] == "blu" and r["B"] == 4 and r["params"] == 77_754 and r["images_s"] > 0
    assert json.loads(out.read_text())["model"] == "resnet-tiny"


def test_weights_round_trip_through_the_flat_names():
    tree = {"a": {"b": np.ones(2), "c": {"d": np.zeros((1, 2))}}, "e": np.arange(3)}
    back = blu_vision.unflatten(blu_vision.flatten(tree, "params"), "params")
    np.testing.assert_array_equal(back["a"]["c"]["d"], tree["a"]["c"]["d"])
    assert sorted(blu_vision.flatten(tree, "params")) == ["params/a/b", "params/a/c/d", "params/e"]


def test_torch_peer_reproduces_blus_losses(tmp_path):
    pytest.importorskip("torch")
    from benchmarks.peers import torch_vision

    a = argparse.Namespace(models=["resnet-tiny"], fidelity_steps=2, fidelity_batch=4)
    weights, batches, cfg_json = drv.prepare("resnet-tiny", a, tmp_path)
    common = dict(model="resnet-tiny", mode="fp32", image_size=None, weights=str(weights),
                  batches=str(batches), steps=2, compile=False, config_json=cfg_json)  # fmt: skip
    ours = blu_vision.fidelity(argparse.Namespace(**common, out=str(tmp_path / "b.json")))
    theirs = torch_vision.fidelity(argparse.Namespace(**common, out=str(tmp_path / "t.json")))
    np.testing.assert_allclose(theirs["losses"], ours["losses"], rtol=1e-5)
