"""Image classification data, all as NHWC float32 arrays with int32 labels.

- ``digits``: scikit-learn's bundled ``load_digits`` (1,797 8x8 handwritten digits, UCI's
  optdigits; offline: the data ships in scikit-learn's wheel, pinned in the test and examples
  locks). The default when scikit-learn is installed, and what CI trains on.
- ``glyphs``: procedurally drawn 8x8 digits (a 5x7 bitmap font placed at a random offset,
  with random stroke intensity, dropped pixels and Gaussian noise): no dependency, learnable
  but not trivial; the default without scikit-learn.
- a folder (``--data-dir``): one subfolder per class holding images (anything Pillow reads),
  resized to the model's input size.
- ``synthetic``: ImageNet-shaped random batches (for speed runs; nothing to learn).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np

from examples.vision import ExampleError

# A 5x7 bitmap font for 0-9 (rows top to bottom, '#' ink).
_FONT = {
    0: [" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "],
    1: ["  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "],
    2: [" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"],
    3: ["#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "],
    4: ["   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "],
    5: ["#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "],
    6: ["  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "],
    7: ["#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "],
    8: [" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "],
    9: [" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "],
}
_BITMAPS = np.array([[[c == "#" for c in row] for row in _FONT[d]] for d in range(10)], np.float32)


@dataclasses.dataclass
class Dataset:
    """Train and held-out splits; ``x`` ``(N, H, W, C)`` float32 (standardized by the training
    split's mean and standard deviation), ``y`` ``(N,)`` int32."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    num_classes: int

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]


def glyphs(n: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` procedural 8x8 digit images ``(n, 8, 8, 1)`` in [0, 1] and their labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, n).astype(np.int32)
    x = np.zeros((n, 8, 8), np.float32)
    dy, dx = rng.integers(0, 2, n), rng.integers(0, 4, n)  # the 5x7 glyph anywhere in 8x8
    for i in range(n):
        x[i, dy[i] : dy[i] + 7, dx[i] : dx[i] + 5] = _BITMAPS[y[i]]
    x *= rng.uniform(0.5, 1.0, (n, 1, 1)).astype(np.float32)  # stroke intensity
    x *= rng.random((n, 8, 8)) > 0.1  # dropped ink
    x += rng.normal(0.0, 0.2, (n, 8, 8)).astype(np.float32)
    return np.clip(x, 0.0, 1.0)[..., None], y


def sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 digits as ``(1797, 8, 8, 1)`` in [0, 1] and labels."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ExampleError(
            "--data digits needs scikit-learn (pip install --require-hashes -r "
            "requirements/examples.lock); --data glyphs needs nothing"
        ) from None
    d = load_digits()
    return (d.images.astype(np.float32) / 16.0)[..., None], d.target.astype(np.int32)


_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".pgm"}


def image_folder(root: str | Path, size: int, channels: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Images under ``root/<class>/``, resized to ``size x size`` (grayscale if ``channels`` is
    1, else RGB), in [0, 1]; classes numbered in sorted order of their folder names."""
    root = Path(root)
    if not root.is_dir():
        raise ExampleError(f"--data-dir {root}: not a folder")
    classes = sorted(p for p in root.iterdir() if p.is_dir())
    if len(classes) < 2:
        raise ExampleError(f"--data-dir {root}: needs one subfolder per class (at least 2)")
    try:
        from PIL import Image
    except ImportError:
        raise ExampleError("--data-dir needs Pillow to read images (pip install pillow)") from None
    xs, ys = [], []
    for label, d in enumerate(classes):
        for f in sorted(d.rglob("*")):
            if f.suffix.lower() not in _IMAGE_SUFFIXES:
                continue
            img = Image.open(f).convert("L" if channels == 1 else "RGB").resize((size, size))
            a = np.asarray(img, np.float32) / 255.0
            xs.append(a[..., None] if channels == 1 else a)
            ys.append(label)
    if not xs:
        raise ExampleError(f"--data-dir {root}: no images found in {[c.name for c in classes]}")
    return np.stack(xs), np.array(ys, np.int32), len(classes)


def split(
    name: str, x: np.ndarray, y: np.ndarray, num_classes: int, val_fraction: float, seed: int
) -> Dataset:
    """A seeded shuffle into train / held-out splits, standardized by the training split."""
    perm = np.random.default_rng(seed).permutation(len(x))
    n_val = max(1, int(round(len(x) * val_fraction)))
    if n_val >= len(x):
        raise ExampleError(f"{name}: {len(x)} examples are too few for a held-out split")
    val, tr = perm[:n_val], perm[n_val:]
    mean, std = float(x[tr].mean()), float(x[tr].std()) or 1.0
    xs = ((x - mean) / std).astype(np.float32)
    return Dataset(name, xs[tr], y[tr], xs[val], y[val], num_classes)


def load(kind: str, data_dir: str | None, size: int, channels: int, seed: int,
         val_fraction: float = 0.2) -> Dataset:  # fmt: skip
    """The dataset a run asked for (``kind``: ``digits``, ``glyphs`` or ``auto``: digits when
    scikit-learn is installed, else glyphs; ``data_dir`` wins)."""
    if data_dir:
        x, y, k = image_folder(data_dir, size, channels)
        return split(str(data_dir), x, y, k, val_fraction, seed)
    if kind == "auto":
        kind = "digits" if importlib.util.find_spec("sklearn") else "glyphs"
    if kind == "glyphs":
        x, y = glyphs(seed=seed)
    elif kind == "digits":
        x, y = sklearn_digits()
    else:
        raise ExampleError(f"unknown --data {kind!r}")
    return split(kind, x, y, 10, val_fraction, seed)


def batches(n: int, batch_size: int, seed: int):
    """Endless index batches: seeded reshuffles of ``range(n)`` (each epoch a new order)."""
    if batch_size > n:
        raise ExampleError(f"--batch-size {batch_size} exceeds the {n} training examples")
    rng = np.random.default_rng(seed)
    while True:
        perm = rng.permutation(n)
        for i in range(0, n - batch_size + 1, batch_size):
            yield perm[i : i + batch_size]


def synthetic_imagenet(batch_size: int, size: int = 224, classes: int = 1000, seed: int = 0):
    """One ImageNet-shaped random batch: ``(B, size, size, 3)`` float32 N(0, 1) images and
    labels in ``[0, classes)``, the same for the same seed (speed runs: nothing to learn)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch_size, size, size, 3), np.float32)
    return x, rng.integers(0, classes, batch_size).astype(np.int32)
