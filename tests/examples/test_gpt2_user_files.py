"""The GPT-2 example leaves the files it did not write alone, and a small vocabulary does not
fail the run after training (issue #41):

- cleaning up ``--out`` deletes only the tensor files runs of the example wrote (its manifest,
  ``.ckpt-written``, or the record it replaces), never a user's ``ckpt-*.safetensors`` or
  ``*.ckpt-tmp`` files, whatever their names;
- an ``--overwrite`` run replaces the old run's ``samples.txt`` only once it has committed its
  own first checkpoint (a run that fails before keeps the old samples), and never a
  ``samples.txt`` the example did not write;
- ``--top-k`` above the vocabulary is clamped to it before training (before: the run trained,
  saved, then exited 2 when it came to sample).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from examples.gpt2 import checkpoint, train

from .test_gpt2_example import _args as _full_args
from .test_gpt2_example import corpus  # noqa: F401  (the module-scoped corpus)

USER_FILES = {
    "ckpt-final.safetensors": b"the user's own weights",
    "ckpt-00000001-0123456789abcdef.safetensors": b"named as the example names its files",
    "notes.ckpt-tmp": b"a user's file with the temporary suffix",
    ".draft.1.0123abcd.ckpt-tmp": b"another",
}


def _args(corpus, out, *extra: str) -> list[str]:  # noqa: F811
    return _full_args(corpus, out, "--warmup-steps", "0", *extra)  # runs of 1-3 steps


def _ours(out) -> list[str]:
    return sorted(p.name for p in out.iterdir() if checkpoint._TENSOR_NAME.fullmatch(p.name)
                  and p.name not in USER_FILES)  # fmt: skip


def test_cleanup_deletes_only_the_files_the_example_wrote(corpus, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    out.mkdir()
    for name, data in USER_FILES.items():
        (out / name).write_bytes(data)
    train.main(_args(corpus, out, "--steps", "3", "--ckpt-every", "1"))  # three commits
    record = json.loads((out / checkpoint.RECORD).read_text())
    assert _ours(out) == [record["tensors_file"]]  # its older checkpoints are gone
    train.main(_args(corpus, out, "--steps", "2", "--ckpt-every", "1", "--overwrite"))
    record = json.loads((out / checkpoint.RECORD).read_text())
    assert _ours(out) == [record["tensors_file"]]
    for name, data in USER_FILES.items():
        assert (out / name).read_bytes() == data, name
    assert record["tensors_file"] in checkpoint.written(out)
    assert not set(USER_FILES) & set(checkpoint.written(out))


def test_a_checkpoint_of_an_earlier_version_is_replaced(corpus, tmp_path):  # noqa: F811
    # a folder from before the manifest: the record's tensor file is the example's own
    train.main(_args(corpus, tmp_path, "--steps", "1"))
    old = json.loads((tmp_path / checkpoint.RECORD).read_text())["tensors_file"]
    (tmp_path / checkpoint.MANIFEST).unlink()
    train.main(_args(corpus, tmp_path, "--steps", "2", "--overwrite"))
    new = json.loads((tmp_path / checkpoint.RECORD).read_text())["tensors_file"]
    assert new != old and _ours(tmp_path) == [new]


def test_a_new_run_keeps_the_old_samples_until_it_commits(corpus, tmp_path, monkeypatch):  # noqa: F811
    train.main(_args(corpus, tmp_path, "--steps", "2", "--sample-tokens", "5", "--top-k", "5"))
    samples = (tmp_path / "samples.txt").read_text(encoding="utf-8")
    record = (tmp_path / checkpoint.RECORD).read_bytes()
    real = train.make_steps

    def failing(*args, **kw):  # the new run fails at its first step, before any commit
        _, eval_loss = real(*args, **kw)

        def step(*a, **k):
            raise RuntimeError("the new run fails before its first commit")

        return step, eval_loss

    monkeypatch.setattr(train, "make_steps", failing)
    with pytest.raises(RuntimeError, match="before its first commit"):
        train.main(_args(corpus, tmp_path, "--steps", "2", "--overwrite"))
    assert (tmp_path / "samples.txt").read_text(encoding="utf-8") == samples
    assert (tmp_path / checkpoint.RECORD).read_bytes() == record


def test_a_samples_file_the_example_did_not_write_is_kept(corpus, tmp_path):  # noqa: F811
    (tmp_path / "samples.txt").write_text("my notes\n", encoding="utf-8")
    train.main(_args(corpus, tmp_path, "--steps", "1", "--sample-tokens", "3", "--top-k", "5"))
    train.main(_args(corpus, tmp_path, "--steps", "1", "--overwrite"))
    assert (tmp_path / "samples.txt").read_text(encoding="utf-8").startswith("my notes\n")


def test_top_k_above_the_vocabulary_is_clamped_before_training(tmp_path, capsys):
    rng = np.random.default_rng(0)
    small = tmp_path / "small.txt"  # a vocabulary of 6 characters, under the default top-k 40
    small.write_text("".join(rng.choice(list("abcde\n"), 6000)), encoding="utf-8")
    args = _args(small, tmp_path / "out", "--steps", "2", "--sample-tokens", "4")
    assert train.cli(args) == 0, capsys.readouterr().err
    assert "sampling with --top-k 6" in capsys.readouterr().err
    text = (tmp_path / "out" / "samples.txt").read_text(encoding="utf-8")
    assert "top-k 6 ---" in text
