"""Configuration: flags read from environment variables, changeable in code or for a block.

    blu.config.update("log_compiles", True)
    with blu.config.override(log_compiles=True): ...

Flags: ``log_compiles`` (``BLU_LOG_COMPILES``): log every jit trace with the reason the cache
missed; ``debug_nans`` (``BLU_DEBUG_NANS``); ``debug`` (``BLU_DEBUG``, a level 0-4);
``cache_dir`` (``BLU_CACHE_DIR``); ``cache_max_bytes`` (``BLU_CACHE_MAX_BYTES``, default 2 GiB:
the kernel cache folder is trimmed to it, least recently used entries first);
``default_matmul_precision`` ("fp32" | "tf32" | "bf16").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from blu.core.errors import BluValueError


def _env_bool(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise BluValueError(f"{name}={raw!r}: expected a whole number of bytes") from None


class Config:
    def __init__(self) -> None:
        self._values: dict[str, Any] = {
            "log_compiles": _env_bool("BLU_LOG_COMPILES"),
            "debug_nans": _env_bool("BLU_DEBUG_NANS"),
            "debug": int(os.environ.get("BLU_DEBUG", "0") or 0),
            "cache_dir": os.environ.get(
                "BLU_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "blu")
            ),
            "cache_max_bytes": _env_int("BLU_CACHE_MAX_BYTES", 2 << 30),
            "default_matmul_precision": os.environ.get("BLU_DEFAULT_MATMUL_PRECISION", "fp32"),
        }

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(f"blu.config has no flag {name!r}") from None

    def update(self, name: str, value: Any) -> None:
        """Set a flag for the rest of the program."""
        if name not in self._values:
            raise BluValueError(f"blu.config has no flag {name!r}; flags: {sorted(self._values)}")
        self._values[name] = value

    @contextlib.contextmanager
    def override(self, **flags: Any) -> Iterator[None]:
        """Set flags for the duration of a ``with`` block."""
        old = {k: getattr(self, k) for k in flags}
        for k, v in flags.items():
            self.update(k, v)
        try:
            yield
        finally:
            for k, v in old.items():
                self._values[k] = v


config = Config()
