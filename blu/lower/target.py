"""Target strings, parsed once: ``"cpu"`` (the host) and ``"cuda:sm_XX"`` (an NVIDIA GPU of
compute capability X.X, e.g. ``"cuda:sm_90"`` for Hopper). Every other module asks a parsed
``Target`` (or its backend) what it is; this is the one place that reads the strings
(``tests/lower/test_layout.py`` greps for comparisons elsewhere)."""

from __future__ import annotations

import dataclasses
import functools

from blu.core.errors import BluValueError

CPU = "cpu"
CUDA_DEFAULT = "cuda:sm_90"  # the GPUs blu is built for


@dataclasses.dataclass(frozen=True)
class Target:
    """A parsed target.

    Attributes:
        platform: the backend that compiles for it: ``"cpu"`` or ``"cuda"``.
        chip: the GPU architecture (``"sm_90"``), or ``""`` for the CPU.
    """

    platform: str
    chip: str = ""

    def __str__(self) -> str:
        return f"{self.platform}:{self.chip}" if self.chip else self.platform


def parse_target(target: str | Target) -> Target:
    """``"cpu"`` -> ``Target("cpu")``; ``"cuda:sm_90"`` -> ``Target("cuda", "sm_90")``.

    Raises:
        BluValueError: any other string (the message names the accepted forms).
    """
    if isinstance(target, Target):
        return target
    return _parse(target)


@functools.lru_cache(maxsize=64)
def _parse(target: str) -> Target:
    if target == CPU:
        return Target(CPU)
    platform, _, chip = str(target).partition(":")
    if platform == "cuda" and chip.startswith("sm_") and chip[3:].rstrip("a").isdigit():
        return Target("cuda", chip)
    if platform == "cuda":
        raise BluValueError(f"GPU target {target!r}: expected 'cuda:sm_XX' (e.g. 'cuda:sm_90')")
    raise BluValueError(f"target {target!r}: expected 'cpu' or 'cuda:sm_XX' (e.g. 'cuda:sm_90')")


def platform_of(target: str | Target) -> str:
    """The platform (``"cpu"`` / ``"cuda"``) of a target string (the cache's host key
    ``"cpu:<arch>:<flags>"`` counts as the CPU)."""
    if isinstance(target, str) and target.startswith("cpu:"):
        return CPU
    return parse_target(target).platform
