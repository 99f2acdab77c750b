"""Checkpoints of the GPT-2 example never lose a run: a crash injected at every file-system call
of the commit leaves the old checkpoint or the new one, complete (also when the new one has the
old one's step, as under --overwrite); the metadata is covered by the hash; malformed records
are refused clearly; the output folder is checked writable and locked before training."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the repo root holds examples/

pytest.importorskip("safetensors")
from examples.gpt2 import checkpoint, train  # noqa: E402
from examples.gpt2.checkpoint import CheckpointError  # noqa: E402

FS_CALLS = ("open", "write", "fsync", "close", "replace", "rename", "unlink", "mkdir")


class Crash(BaseException):
    """A simulated power cut: not an Exception, so no `except Exception` handles it."""


def state(seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(3, 4)).astype(np.float32)}, {"m": rng.normal(size=4)}


def meta(step: int, seed: int) -> dict:
    return {"step": step, "train_args": {"seed": seed}, "history": {"train_loss": [1.0]}}


def assert_complete(d: Path, params: dict, opt: dict, m: dict) -> None:
    tensors, got = checkpoint.load(d)
    assert got == m
    np.testing.assert_array_equal(tensors["params.w"], params["w"])
    np.testing.assert_array_equal(tensors["opt.m"], opt["m"])


def count_calls(monkeypatch, crash_at: int | None) -> list[str]:
    """Wrap the os calls a commit makes; raise Crash at call number ``crash_at``."""
    seen: list[str] = []
    for name in FS_CALLS:
        real = getattr(os, name)

        def wrapped(*a, _real=real, _name=name, **k):
            seen.append(_name)
            if crash_at is not None and len(seen) - 1 == crash_at:
                raise Crash(f"crash at {_name}")
            return _real(*a, **k)

        monkeypatch.setattr(os, name, wrapped)
    return seen


@pytest.mark.parametrize("same_step", [False, True], ids=["later-step", "overwrite-same-step"])
def test_crash_at_every_call_of_the_commit_leaves_old_or_new(tmp_path, monkeypatch, same_step):
    old_p, old_o = state(0)
    new_p, new_o = state(1)
    old_m, new_m = meta(4, 0), meta(4 if same_step else 8, 1)
    with monkeypatch.context() as mp:
        d0 = tmp_path / "count"
        checkpoint.save(d0, old_p, old_o, old_m)
        calls = count_calls(mp, None)
        checkpoint.save(d0, new_p, new_o, new_m)
    n = len(calls)
    assert {"write", "fsync", "replace"} <= set(calls) and n >= 8, calls
    outcomes = set()
    for k in range(n):
        d = tmp_path / f"crash{k}"
        checkpoint.save(d, old_p, old_o, old_m)
        with monkeypatch.context() as mp:
            count_calls(mp, k)
            try:
                checkpoint.save(d, new_p, new_o, new_m)
                outcomes.add("finished")
            except Crash:
                pass
        _, got = checkpoint.load(d)
        if got == old_m:
            assert_complete(d, old_p, old_o, old_m)
            outcomes.add("old")
        else:
            assert_complete(d, new_p, new_o, new_m)
            outcomes.add("new")
        # the next run takes the folder: leftovers go, the committed checkpoint stays
        with checkpoint.lock_out_dir(d):
            pass
        names = sorted(p.name for p in d.iterdir())
        rec = json.loads((d / checkpoint.RECORD).read_text())
        want = [checkpoint.LOCK, checkpoint.RECORD, checkpoint.MANIFEST, rec["tensors_file"]]
        assert names == sorted(want), names
        assert_complete(d, *((old_p, old_o, old_m) if got == old_m else (new_p, new_o, new_m)))
    assert outcomes >= {"old", "new"}


def test_tensor_file_is_named_by_its_sha256_and_a_failed_write_leaves_nothing(
    tmp_path, monkeypatch
):
    import hashlib

    import safetensors.numpy

    old_p, old_o = state(0)
    path = checkpoint.save(tmp_path, old_p, old_o, meta(4, 0))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()  # the bytes on disk, read here
    assert path.name == f"ckpt-00000004-{digest[:16]}.safetensors"
    assert json.loads((tmp_path / checkpoint.RECORD).read_text())["tensors_sha256"] == digest
    before = sorted(p.name for p in tmp_path.iterdir())

    def full_disk(tensors, path, metadata=None):  # half a file, then the disk is full
        Path(path).write_bytes(b"\0" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.numpy, "save_file", full_disk)
    with pytest.raises(OSError, match="No space"):
        checkpoint.save(tmp_path, *state(1), meta(8, 0))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temporary file left
    assert_complete(tmp_path, old_p, old_o, meta(4, 0))


def test_metadata_is_covered_by_the_hash(tmp_path):
    checkpoint.save(tmp_path, *state(0), meta(4, 0))
    rec = json.loads((tmp_path / checkpoint.RECORD).read_text())
    rec["meta"]["step"] = 400  # was: accepted
    (tmp_path / checkpoint.RECORD).write_text(json.dumps(rec))
    with pytest.raises(CheckpointError, match="record_sha256 does not match"):
        checkpoint.load(tmp_path)


def _rewrite(d: Path, edit) -> None:
    rec = json.loads((d / checkpoint.RECORD).read_text())
    edit(rec)
    if "record_sha256" in rec:  # an attacker (or a bug) that recomputes the record hash
        body = {k: rec[k] for k in checkpoint._RECORD_KEYS[:-1] if k in rec}
        rec["record_sha256"] = checkpoint._record_hash(body)
    (d / checkpoint.RECORD).write_text(json.dumps(rec))


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda r: r.pop("tensors_sha256"), "lacks"),
        (lambda r: r.pop("record_sha256"), "lacks"),
        (lambda r: r.update(tensors_file="../../etc/passwd"), "not a tensor file name"),
        (lambda r: r.update(meta=[1, 2]), "meta is not an object"),
        (lambda r: r.update(tensors_sha256="0" * 64), "sha256 does not match"),
        (lambda r: r.update(version=1), "not a blu-gpt2-example v2"),
    ],
    ids=["no-tensor-hash", "no-record-hash", "path", "meta-type", "tensor-hash", "version"],
)
def test_malformed_records_are_refused_clearly(tmp_path, edit, match):
    checkpoint.save(tmp_path, *state(0), meta(4, 0))
    _rewrite(tmp_path, edit)
    with pytest.raises(CheckpointError, match=match):
        checkpoint.load(tmp_path)


@pytest.mark.parametrize("text", ["", "[1]", '{"format": "blu-gpt2-ex', "\xff\xfe"])
def test_undecodable_records_are_refused(tmp_path, text):
    (tmp_path / checkpoint.RECORD).write_text(text, encoding="latin-1")
    with pytest.raises(CheckpointError, match="corrupt"):
        checkpoint.load(tmp_path)


def test_resume_without_train_args_is_a_clear_error(tmp_path):
    checkpoint.save(tmp_path, *state(0), {"step": 4})
    with pytest.raises(CheckpointError, match=r"lacks the metadata \[.*'train_args'"):
        train.main(["--resume", "--out", str(tmp_path), "--no-progress"])


def _no_training(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("training started")

    monkeypatch.setattr(train, "_train", boom)


def test_second_run_in_the_same_out_fails_at_start(tmp_path, monkeypatch):
    _no_training(monkeypatch)
    with checkpoint.lock_out_dir(tmp_path):
        with pytest.raises(CheckpointError, match=rf"in use by another run \(pid {os.getpid()}"):
            train.main(["--config", "tiny", "--out", str(tmp_path), "--no-progress"])
    # released: the folder can be taken again
    with checkpoint.lock_out_dir(tmp_path):
        pass


def test_concurrent_process_holds_the_lock(tmp_path):
    import subprocess

    code = (
        f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\n"
        "from examples.gpt2 import checkpoint\n"
        f"with checkpoint.lock_out_dir({str(tmp_path)!r}):\n"
        "    print('locked', flush=True); time.sleep(30)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "locked"
        with pytest.raises(CheckpointError, match=rf"in use by another run \(pid {p.pid},"):
            with checkpoint.lock_out_dir(tmp_path):
                pass
    finally:
        p.kill()
        p.wait()
    with checkpoint.lock_out_dir(tmp_path):  # a dead holder's lock is free (flock)
        pass


def test_read_only_out_is_found_before_training(tmp_path, monkeypatch):
    _no_training(monkeypatch)
    out = tmp_path / "ro"
    out.mkdir()
    real_open = os.open

    def erofs(path, *a, **k):  # a read-only file system (chmod does not stop root)
        if str(path).startswith(str(out)) and a and a[0] & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", erofs)
    with pytest.raises(CheckpointError, match="not writable.*Read-only file system"):
        train.main(["--config", "tiny", "--out", str(out), "--no-progress", "--ckpt-every", "0"])


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores modes")
def test_read_only_mode_out_is_found_before_training(tmp_path, monkeypatch):
    _no_training(monkeypatch)
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        with pytest.raises(CheckpointError, match="not writable"):
            train.main(["--config", "tiny", "--out", str(out), "--no-progress"])
    finally:
        out.chmod(0o755)


def test_leftovers_are_cleaned_at_the_next_start(tmp_path):
    checkpoint.save(tmp_path, *state(0), meta(4, 0))
    (tmp_path / f".ckpt.json.123.abcd{checkpoint.TMP_SUFFIX}").write_bytes(b"half")
    checkpoint.record_written(tmp_path, "ckpt-00000008-0123456789abcdef.safetensors")  # a crash
    (tmp_path / "ckpt-00000008-0123456789abcdef.safetensors").write_bytes(b"orphan")
    (tmp_path / "notes.txt").write_text("mine")
    with checkpoint.lock_out_dir(tmp_path):
        pass
    rec = json.loads((tmp_path / checkpoint.RECORD).read_text())
    names = sorted(p.name for p in tmp_path.iterdir())
    want = [checkpoint.LOCK, checkpoint.RECORD, checkpoint.MANIFEST, rec["tensors_file"]]
    assert names == sorted([*want, "notes.txt"])
    assert_complete(tmp_path, *state(0), meta(4, 0))
