"""What the user sees of a training run: the progress bar and the loss-curve PNG.

tqdm and matplotlib are the ``examples`` extra (``pip install -e '.[examples]'``); without them
the run still works, printing a line every tenth of the run and skipping the PNG.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_losses(history: dict, path: Path, title: str) -> Path | None:
    """Write the loss curve (train loss per step, its running mean, validation points)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed (pip install -e '.[examples]'); no loss.png")
        return None
    tr = np.asarray(history["train_loss"], np.float64)
    steps = np.arange(1, len(tr) + 1)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    ax.plot(steps, tr, color="tab:blue", alpha=0.3, lw=0.8, label="train (per step)")
    w = max(1, min(50, len(tr) // 10))
    if len(tr) >= w:
        ax.plot(
            steps[w - 1 :],
            np.convolve(tr, np.ones(w) / w, "valid"),
            color="tab:blue",
            label=f"train (mean of {w})",
        )
    if history["val_loss"]:
        vs, vl = zip(*history["val_loss"])
        ax.plot(vs, vl, "o-", color="tab:orange", label="validation")
    ax.set(xlabel="step", ylabel="cross-entropy (nats per token)", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


class Progress:
    """tqdm when available (and wanted), else a line every tenth of the run."""

    def __init__(self, total: int, initial: int, enabled: bool):
        self.bar = None
        self.total, self.every = total, max(1, total // 10)
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True
                )
            except ImportError:
                pass
        self.enabled = enabled

    def update(self, step: int, loss: float, tok_s: float) -> None:
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tok_s:,.0f}", refresh=False)
            self.bar.update(1)
        elif self.enabled and (step % self.every == 0 or step == self.total):
            print(f"step {step}/{self.total}  loss {loss:.4f}  {tok_s:,.0f} tokens/s", flush=True)

    def write(self, msg: str) -> None:
        if self.bar is not None:
            self.bar.write(msg)
        else:
            print(msg, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
