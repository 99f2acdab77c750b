"""Corpora, tokenizers, the train/val split and random batches for the GPT-2 example.

Where the corpus comes from (first hit wins):

1. ``--data PATH``: any UTF-8 text file, used as given;
2. ``$BLU_DATA_DIR/tinyshakespeare.txt``;
3. ``<repo root>/../shared/data/tinyshakespeare.txt`` (the ``shared/data`` folder beside the
   checkout);
4. a download of the public copy (``$BLU_DATA_URL``, default :data:`DEFAULT_URL`) into
   ``$BLU_DATA_DIR`` when set, else into ``<repo root>/.cache/data`` (git-ignored), where later
   runs find it.

Tokenizers: characters (the corpus' sorted distinct characters; 65 for tinyshakespeare) or
GPT-2 BPE through ``tiktoken``, built offline from ``gpt2/encoder.json`` and ``gpt2/vocab.bpe``
found in the same folders (see ``shared/data/README.md``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from examples.gpt2 import ExampleError

CORPUS_NAME = "tinyshakespeare.txt"
DEFAULT_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
# sha256 of OpenAI's GPT-2 tokenizer files, as pinned by tiktoken (tiktoken_ext/openai_public.py)
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
# tiktoken's r50k_pat_str: how GPT-2 splits text into words before applying merges
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
GPT2_EOT = 50256


class DataError(ExampleError):
    """A corpus or tokenizer file is missing, empty, not UTF-8, or cannot be downloaded."""


# ---- where data lives --------------------------------------------------------------------------


def repo_root() -> Path:
    """The checkout this file belongs to (``examples/gpt2/data.py`` -> the root)."""
    return Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    """``<repo root>/../shared/data``: the shared, read-only data folder beside the checkout."""
    return repo_root().parent / "shared" / "data"


def search_dirs(
    data_dir: str | os.PathLike | None = None, shared_dir: str | os.PathLike | None = None
) -> list[Path]:
    """The folders searched for data files, in order: ``$BLU_DATA_DIR``, then shared/data.

    Args:
        data_dir: overrides ``$BLU_DATA_DIR`` (``""`` means none).
        shared_dir: overrides :func:`shared_data_dir` (``""`` means none).
    """
    data_dir = os.environ.get("BLU_DATA_DIR", "") if data_dir is None else data_dir
    shared_dir = shared_data_dir() if shared_dir is None else shared_dir
    return [Path(d) for d in (data_dir, shared_dir) if str(d)]


def find_corpus(
    name: str = CORPUS_NAME,
    *,
    data_dir: str | os.PathLike | None = None,
    shared_dir: str | os.PathLike | None = None,
    url: str | None = None,
    download_dir: str | os.PathLike | None = None,
) -> Path:
    """Find the corpus file ``name``, downloading the public copy if no folder has it.

    Args:
        name: file name to look for.
        data_dir / shared_dir: see :func:`search_dirs`.
        url: where to download from (default ``$BLU_DATA_URL`` or :data:`DEFAULT_URL`).
        download_dir: where a download goes (default ``$BLU_DATA_DIR`` if set, else
            ``<repo root>/.cache/data``).

    Returns:
        The path of an existing file.

    Raises:
        DataError: the download failed or returned no text / non-UTF-8 bytes.
    """
    dirs = search_dirs(data_dir, shared_dir)
    for d in dirs:
        if (d / name).is_file():
            return d / name
    url = url or os.environ.get("BLU_DATA_URL") or DEFAULT_URL
    if download_dir is None:
        env_dir = os.environ.get("BLU_DATA_DIR", "") if data_dir is None else str(data_dir)
        download_dir = env_dir or repo_root() / ".cache" / "data"
    dest = Path(download_dir) / name
    if dest.is_file():  # downloaded by an earlier run
        return dest
    looked = ", ".join(str(d) for d in dirs) or "(no folders)"
    print(f"{name} not found in {looked}; downloading {url} -> {dest}")
    download(url, dest)
    return dest


def download(url: str, dest: Path, timeout: float = 60.0) -> None:
    """Download ``url`` to ``dest`` atomically (temporary file, then rename).

    Raises:
        DataError: network or HTTP failure, or the body is empty or not UTF-8 text.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = r.read()
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise DataError(
            f"could not download the corpus from {url}: {e}. Put the file in $BLU_DATA_DIR or "
            f"pass --data PATH (or set $BLU_DATA_URL to another copy)"
        ) from None
    _check_text(body, f"the download from {url}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(dest, body)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a part:
    a temporary file in the same folder (mode from the umask), flushed to disk, then renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _check_text(data: bytes, what: str) -> str:
    if not data:
        raise DataError(f"{what} is empty: a corpus needs some UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{what} is not UTF-8 text: byte 0x{data[e.start]:02x} at offset {e.start} "
            f"({e.reason}); convert it, e.g. `iconv -f latin1 -t utf-8`"
        ) from None
    if not text.strip():
        raise DataError(f"{what} holds only whitespace: a corpus needs some text")
    return text


def read_corpus(path: str | os.PathLike) -> str:
    """Read a UTF-8 corpus.

    Raises:
        DataError: the file is missing, not a file, empty, or not UTF-8.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"corpus {p} does not exist")
    if not p.is_file():
        raise DataError(f"corpus {p} is not a file")
    return _check_text(p.read_bytes(), f"corpus {p}")


# ---- tokenizers --------------------------------------------------------------------------------


class CharTokenizer:
    """Characters as tokens: id ``i`` is the ``i``-th of the sorted distinct characters."""

    kind = "char"

    def __init__(self, chars: str):
        if not chars or len(set(chars)) != len(chars):
            raise DataError("a character vocabulary needs distinct characters")
        self.chars = "".join(sorted(chars))
        self._codes = np.frombuffer(self.chars.encode("utf-32-le"), np.uint32)

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """Token ids (int32, shape ``(len(text),)``).

        Raises:
            DataError: ``text`` has characters outside the vocabulary.
        """
        codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
        ids = np.searchsorted(self._codes, codes)
        bad = (ids >= len(self._codes)) | (
            self._codes[np.minimum(ids, len(self._codes) - 1)] != codes
        )
        if bad.any():
            missing = sorted({text[i] for i in np.flatnonzero(bad)[:50]})
            raise DataError(
                f"characters {missing!r} are not in the {self.vocab_size}-character vocabulary"
            )
        return ids.astype(np.int32)

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in np.asarray(ids).reshape(-1).tolist())

    def to_meta(self) -> dict:
        return {"kind": self.kind, "chars": self.chars}


@contextlib.contextmanager
def _no_tiktoken_cache() -> Iterator[None]:
    # shared/data is read-only and the files are local: tell tiktoken not to copy them to a cache
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = ""
    try:
        yield
    finally:
        if old is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old


def find_bpe_files(data_dir=None, shared_dir=None) -> tuple[Path, Path]:
    """``(vocab.bpe, encoder.json)`` from ``<dir>/gpt2/`` of the first search folder with both.

    Raises:
        DataError: no folder has them.
    """
    dirs = search_dirs(data_dir, shared_dir)
    for d in dirs:
        bpe, enc = d / "gpt2" / "vocab.bpe", d / "gpt2" / "encoder.json"
        if bpe.is_file() and enc.is_file():
            return bpe, enc
    raise DataError(
        "GPT-2 tokenizer files gpt2/vocab.bpe and gpt2/encoder.json not found in "
        + (", ".join(str(d) for d in dirs) or "(no folders)")
        + "; set $BLU_DATA_DIR to a folder holding them (see shared/data/README.md)"
    )


class GPT2Tokenizer:
    """GPT-2's byte-level BPE (50,257 tokens) through tiktoken, from local files (offline)."""

    kind = "gpt2"

    def __init__(self, data_dir=None, shared_dir=None):
        try:
            import tiktoken
            from tiktoken.load import data_gym_to_mergeable_bpe_ranks
        except ImportError:
            raise DataError(
                "--tokenizer gpt2 needs tiktoken: pip install -e '.[examples]'"
            ) from None
        bpe, enc = find_bpe_files(data_dir, shared_dir)
        try:
            with _no_tiktoken_cache():
                ranks = data_gym_to_mergeable_bpe_ranks(
                    vocab_bpe_file=str(bpe),
                    encoder_json_file=str(enc),
                    vocab_bpe_hash=VOCAB_BPE_SHA256,
                    encoder_json_hash=ENCODER_JSON_SHA256,
                )
        except ValueError as e:
            raise DataError(f"GPT-2 tokenizer files in {bpe.parent} are damaged: {e}") from None
        self.enc = tiktoken.Encoding(
            name="gpt2",
            explicit_n_vocab=50257,
            mergeable_ranks=ranks,
            special_tokens={"<|endoftext|>": GPT2_EOT},
            pat_str=GPT2_PAT,
        )

    @property
    def vocab_size(self) -> int:
        return self.enc.n_vocab

    def encode(self, text: str) -> np.ndarray:
        """Token ids (int32); ``<|endoftext|>`` in the text is read as ordinary text."""
        return np.asarray(self.enc.encode_ordinary(text), np.int32)

    def decode(self, ids) -> str:
        return self.enc.decode(np.asarray(ids).reshape(-1).tolist())

    def to_meta(self) -> dict:
        return {"kind": self.kind}


def make_tokenizer(kind: str, text: str | None = None):
    """A tokenizer: ``"char"`` (built from ``text``) or ``"gpt2"``."""
    if kind == "char":
        if text is None:
            raise DataError("the char tokenizer is built from the corpus text")
        return CharTokenizer.from_text(text)
    if kind == "gpt2":
        return GPT2Tokenizer()
    raise DataError(f"unknown tokenizer {kind!r}; choose char or gpt2")


def tokenizer_from_meta(meta: dict):
    """Rebuild a tokenizer from :meth:`to_meta` output (as stored in a checkpoint)."""
    if meta.get("kind") == "char":
        return CharTokenizer(meta["chars"])
    if meta.get("kind") == "gpt2":
        return GPT2Tokenizer()
    raise DataError(f"unknown tokenizer in checkpoint metadata: {json.dumps(meta)[:200]}")


# ---- split and batches -------------------------------------------------------------------------


def train_val_split(tokens: np.ndarray, val_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """The first ``1 - val_fraction`` of the tokens for training, the rest for validation.

    Raises:
        DataError: ``val_fraction`` is not in (0, 1), or a part would be empty.
    """
    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"the validation fraction must be in (0, 1), got {val_fraction}")
    n = int(round(len(tokens) * (1.0 - val_fraction)))
    if n <= 0 or n >= len(tokens):
        raise DataError(
            f"a corpus of {len(tokens)} tokens is too small to split {1 - val_fraction:.0%} / "
            f"{val_fraction:.0%} into training and validation parts"
        )
    return tokens[:n], tokens[n:]


def check_batch_fits(tokens: np.ndarray, batch_size: int, block_size: int, split: str) -> None:
    """Raise DataError unless ``tokens`` holds ``batch_size`` distinct windows of
    ``block_size + 1`` tokens (inputs plus the shifted targets)."""
    windows = len(tokens) - block_size
    if windows < batch_size:
        raise DataError(
            f"batch of {batch_size} x {block_size} tokens is larger than the {split} split "
            f"({len(tokens)} tokens, {max(windows, 0)} windows of {block_size + 1}): lower "
            f"--batch-size or --block-size, or use a larger corpus"
        )


@functools.cache
def _starts():
    """``randint(key, (n,), 0, hi)`` jitted (``n``, ``hi`` static): one call instead of the ~100
    eager operations of the random-bits generator (~50 ms a batch on 2 cores)."""
    import blu
    import blu.random

    return blu.jit(lambda key, n, hi: blu.random.randint(key, (n,), 0, hi), static_argnums=(1, 2))


@functools.cache
def _fold_in():
    import blu
    import blu.random

    return blu.jit(blu.random.fold_in)


def fold_in(key, data: int):
    """``blu.random.fold_in(key, data)``, jitted (the same key; eager it takes ~8 ms)."""
    return _fold_in()(key, np.uint32(int(data) % 2**32))


def get_batch(tokens: np.ndarray, key, batch_size: int, block_size: int):
    """A random batch of windows: the same key always gives the same batch.

    Args:
        tokens: int token ids, shape ``(N,)``.
        key: a ``blu.random`` key; the window starts are ``randint(key, (batch_size,), 0,
            N - block_size)``.

    Returns:
        ``(x, y)``: int32 arrays of shape ``(batch_size, block_size)``; ``y`` is ``x`` shifted
        by one token (the next-token targets).
    """
    check_batch_fits(tokens, batch_size, block_size, "given")
    starts = np.asarray(_starts()(key, batch_size, len(tokens) - block_size))
    win = tokens[starts[:, None] + np.arange(block_size + 1)]
    return win[:, :-1].astype(np.int32), win[:, 1:].astype(np.int32)
