"""The GPT-2 example's data pipeline: corpus discovery and download, tokenizers, split, batches."""

from __future__ import annotations

import functools
import http.server
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root holds examples/

import blu.random as random  # noqa: E402
from examples.gpt2 import data  # noqa: E402
from examples.gpt2.data import DataError  # noqa: E402

SHAKESPEARE = "First Citizen:\nBefore we proceed any further, hear me speak.\n"


@pytest.fixture
def server(tmp_path):
    """An HTTP server on 127.0.0.1 serving ``tmp_path/www``; yields (base url, folder)."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(QuietHandler, directory=str(www))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", www
    finally:
        httpd.shutdown()
        httpd.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("BLU_DATA_DIR", raising=False)
    monkeypatch.delenv("BLU_DATA_URL", raising=False)


def local_corpus() -> Path:
    """tinyshakespeare from $BLU_DATA_DIR or shared/data, never downloaded (else skip)."""
    for d in data.search_dirs():
        if (d / data.CORPUS_NAME).is_file():
            return d / data.CORPUS_NAME
    pytest.skip("tinyshakespeare.txt is not in $BLU_DATA_DIR or ../shared/data")


def _write(folder: Path, text: str, name: str = data.CORPUS_NAME) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")
    return folder / name


# ---- discovery order ---------------------------------------------------------------------------


def test_shared_dir_is_beside_the_checkout():
    root = Path(__file__).resolve().parents[2]
    assert data.repo_root() == root
    assert data.shared_data_dir() == root.parent / "shared" / "data"


def test_env_dir_comes_before_shared(tmp_path, monkeypatch, no_env):
    env, shared = tmp_path / "env", tmp_path / "shared"
    _write(env, "from env\n")
    _write(shared, "from shared\n")
    monkeypatch.setenv("BLU_DATA_DIR", str(env))
    p = data.find_corpus(shared_dir=shared, url="http://127.0.0.1:9/never")
    assert p == env / data.CORPUS_NAME
    assert data.read_corpus(p) == "from env\n"


def test_shared_used_when_env_lacks_the_file(tmp_path, monkeypatch, no_env):
    env, shared = tmp_path / "env", tmp_path / "shared"
    env.mkdir()
    _write(shared, "from shared\n")
    monkeypatch.setenv("BLU_DATA_DIR", str(env))
    assert (
        data.find_corpus(shared_dir=shared, url="http://127.0.0.1:9/x") == shared / data.CORPUS_NAME
    )
    monkeypatch.delenv("BLU_DATA_DIR")
    assert (
        data.find_corpus(shared_dir=shared, url="http://127.0.0.1:9/x") == shared / data.CORPUS_NAME
    )


def test_download_when_no_folder_has_it(tmp_path, server, monkeypatch, no_env):
    base, www = server
    _write(www, SHAKESPEARE, "input.txt")
    env = tmp_path / "env"  # set but empty: the download goes there
    monkeypatch.setenv("BLU_DATA_DIR", str(env))
    monkeypatch.setenv("BLU_DATA_URL", f"{base}/input.txt")
    p = data.find_corpus(shared_dir=tmp_path / "no-shared")
    assert p == env / data.CORPUS_NAME
    assert p.read_text(encoding="utf-8") == SHAKESPEARE
    assert sorted(os.listdir(env)) == [data.CORPUS_NAME]  # no temporary file left
    # the second time it is found, not downloaded: a dead URL does no harm
    monkeypatch.setenv("BLU_DATA_URL", "http://127.0.0.1:9/dead")
    assert data.find_corpus(shared_dir=tmp_path / "no-shared") == p


def test_download_into_explicit_folder_without_env(tmp_path, server, no_env):
    base, www = server
    _write(www, SHAKESPEARE, "input.txt")
    p = data.find_corpus(shared_dir="", url=f"{base}/input.txt", download_dir=tmp_path / "dl")
    assert p == tmp_path / "dl" / data.CORPUS_NAME and p.read_text() == SHAKESPEARE
    # a later run finds the downloaded copy instead of downloading again
    again = data.find_corpus(
        shared_dir="", url="http://127.0.0.1:9/dead", download_dir=tmp_path / "dl"
    )
    assert again == p


def test_default_locations_relative_to_the_checkout(tmp_path, server, monkeypatch, no_env):
    """No env, no shared/data beside the checkout: download into <root>/.cache/data, once."""
    base, www = server
    _write(www, SHAKESPEARE, "input.txt")
    monkeypatch.setattr(data, "repo_root", lambda: tmp_path / "checkout")
    monkeypatch.setenv("BLU_DATA_URL", f"{base}/input.txt")
    p = data.find_corpus()
    assert p == tmp_path / "checkout" / ".cache" / "data" / data.CORPUS_NAME
    monkeypatch.setenv("BLU_DATA_URL", "http://127.0.0.1:9/dead")
    assert data.find_corpus() == p
    # a shared/data folder beside the checkout is found before the downloaded copy
    shared = _write(tmp_path / "shared" / "data", "shared copy\n")
    assert data.find_corpus() == shared


@pytest.mark.parametrize(
    "body, path, message",
    [
        (None, "missing.txt", "could not download"),
        (b"", "input.txt", "empty"),
        (b"caf\xe9 latin-1", "input.txt", "not UTF-8"),
    ],
)
def test_failed_download_is_a_clear_error_and_leaves_no_file(
    tmp_path, server, no_env, body, path, message
):
    base, www = server
    if body is not None:
        (www / "input.txt").write_bytes(body)
    dest = tmp_path / "dl"
    with pytest.raises(DataError, match=message):
        data.find_corpus(shared_dir="", url=f"{base}/{path}", download_dir=dest)
    assert not dest.exists() or os.listdir(dest) == []


# ---- reading a corpus --------------------------------------------------------------------------


def test_read_corpus_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        data.read_corpus(tmp_path / "nope.txt")
    with pytest.raises(DataError, match="not a file"):
        data.read_corpus(tmp_path)
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match="empty"):
        data.read_corpus(tmp_path / "empty.txt")
    (tmp_path / "blank.txt").write_bytes(b" \n\n\t")
    with pytest.raises(DataError, match="only whitespace"):
        data.read_corpus(tmp_path / "blank.txt")
    (tmp_path / "latin1.txt").write_bytes("naïve café".encode("latin-1"))
    with pytest.raises(DataError, match=r"not UTF-8 text: byte 0xef at offset 2"):
        data.read_corpus(tmp_path / "latin1.txt")
    (tmp_path / "ok.txt").write_text("héllo — wörld ☃\n", encoding="utf-8")
    assert data.read_corpus(tmp_path / "ok.txt") == "héllo — wörld ☃\n"


# ---- tokenizers --------------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=200))
def test_char_tokenizer_round_trip(text):
    tok = data.CharTokenizer.from_text(text)
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and ids.shape == (len(text),)
    assert tok.vocab_size == len(set(text))
    assert ids.min() >= 0 and ids.max() < tok.vocab_size
    assert tok.decode(ids) == text
    # ids follow the sorted characters; check against a dict built independently
    table = {c: i for i, c in enumerate(sorted(set(text)))}
    assert ids.tolist() == [table[c] for c in text]
    assert data.tokenizer_from_meta(tok.to_meta()).encode(text).tolist() == ids.tolist()


def test_char_tokenizer_rejects_unknown_characters():
    tok = data.CharTokenizer.from_text("abc")
    with pytest.raises(DataError, match=r"\['z'\]"):
        tok.encode("abz")


def test_char_tokenizer_on_tinyshakespeare_has_65_tokens():
    text = data.read_corpus(local_corpus())
    tok = data.CharTokenizer.from_text(text)
    assert tok.vocab_size == 65
    assert tok.decode(tok.encode(text[:5000])) == text[:5000]


def test_gpt2_bpe_offline(monkeypatch):
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    try:
        tok = data.GPT2Tokenizer()
    except DataError as e:
        pytest.skip(str(e))  # the tokenizer files are not beside the checkout
    assert "TIKTOKEN_CACHE_DIR" not in os.environ  # restored after loading
    assert tok.encode("Hello world").tolist() == [15496, 995]
    assert tok.vocab_size == 50257
    text = data.read_corpus(local_corpus())[:3000]
    assert tok.decode(tok.encode(text)) == text
    # <|endoftext|> inside a corpus is ordinary text, not the special token
    assert data.GPT2_EOT not in tok.encode("<|endoftext|>").tolist()


def test_gpt2_bpe_missing_files_is_a_clear_error(tmp_path, no_env):
    with pytest.raises(DataError, match="vocab.bpe"):
        data.find_bpe_files(data_dir=tmp_path, shared_dir="")


def test_make_tokenizer_unknown_kind():
    with pytest.raises(DataError, match="unknown tokenizer"):
        data.make_tokenizer("bytes", "abc")


# ---- split and batches -------------------------------------------------------------------------


def test_train_val_split():
    tokens = np.arange(1000, dtype=np.int32)
    tr, va = data.train_val_split(tokens, 0.1)
    assert len(tr) == 900 and len(va) == 100
    np.testing.assert_array_equal(np.concatenate([tr, va]), tokens)
    with pytest.raises(DataError, match=r"in \(0, 1\)"):
        data.train_val_split(tokens, 1.0)
    with pytest.raises(DataError, match="too small"):
        data.train_val_split(tokens[:3], 0.1)


@pytest.mark.parametrize("n, batch, block", [(100, 4, 8), (50, 1, 1), (20, 3, 17)])
def test_batches_are_windows_in_range_and_deterministic(n, batch, block):
    tokens = np.arange(n, dtype=np.int32) * 7  # distinct values: a window gives away its start
    key = random.key(3)
    x, y = data.get_batch(tokens, key, batch, block)
    assert x.shape == y.shape == (batch, block) and x.dtype == y.dtype == np.int32
    starts = x[:, 0] // 7
    assert (starts >= 0).all() and (starts + block < n).all()
    np.testing.assert_array_equal(x, tokens[starts[:, None] + np.arange(block)])
    np.testing.assert_array_equal(y, tokens[starts[:, None] + np.arange(block) + 1])
    x2, y2 = data.get_batch(tokens, random.key(3), batch, block)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)


def test_different_keys_give_different_batches():
    tokens = np.arange(10_000, dtype=np.int32)
    a, _ = data.get_batch(tokens, random.fold_in(random.key(0), 1), 16, 8)
    b, _ = data.get_batch(tokens, random.fold_in(random.key(0), 2), 16, 8)
    assert not np.array_equal(a, b)


@given(st.integers(-(2**40), 2**40), st.integers(0, 2**32 - 1))
def test_jitted_key_and_starts_are_the_eager_ones(d, seed):
    # the example jits fold_in and randint (one call each, not ~100 eager operations): the same
    # keys and the same window starts as the eager functions
    key = random.key(seed)
    np.testing.assert_array_equal(np.asarray(data.fold_in(key, d)),
                                  np.asarray(random.fold_in(key, d)))  # fmt: skip
    tokens = np.arange(5000, dtype=np.int32)
    x, _ = data.get_batch(tokens, data.fold_in(key, d), 5, 9)
    want = np.asarray(random.randint(random.fold_in(key, d), (5,), 0, 5000 - 9))
    np.testing.assert_array_equal(x[:, 0], want)


def test_batch_larger_than_split_is_a_clear_error():
    tokens = np.arange(20, dtype=np.int32)
    with pytest.raises(DataError, match="larger than the training split"):
        data.check_batch_fits(tokens, 8, 16, "training")
    data.check_batch_fits(tokens, 4, 16, "training")  # 20 - 16 = 4 windows: fits
