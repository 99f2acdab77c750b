"""Finding and loading cuSOLVER and cuBLAS for the GPU linear algebra (``blu.cuda.solver``).

**Libraries.** nvmath's bindings look each symbol up in the process, and otherwise load the
library with ``cuda.pathfinder.load_nvidia_dynamic_lib`` (NVIDIA wheels, conda, the system
loader, ``$CUDA_PATH``/``$CUDA_HOME``). ``preload_libraries`` runs that search before the first
call and, where it fails, loads ``lib<name>.so.*`` from a CUDA toolkit's ``lib64``
(``$CUDA_PATH``, ``$CUDA_HOME``, ``/usr/local/cuda``, ``/usr/local/cuda-*``), dependencies
first (nvJitLink, cuSPARSE, cuBLASLt, cuBLAS), with ``RTLD_GLOBAL`` so nvmath finds the symbols.
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from collections.abc import Sequence
from typing import Any

from blu.cuda.errors import CudaError

LOAD_ORDER = ("nvJitLink", "cusparse", "cublasLt", "cublas", "cusolver")  # dependencies first
_loaded: dict[str, str] = {}
_load_lock = threading.Lock()


def toolkit_lib_dirs(env: dict[str, str] | None = None) -> list[str]:
    """Library folders of CUDA toolkits, most specific first: ``$CUDA_PATH``, ``$CUDA_HOME``,
    ``/usr/local/cuda``, then ``/usr/local/cuda-*`` (newest name first)."""
    env = os.environ if env is None else env
    roots = [env.get("CUDA_PATH"), env.get("CUDA_HOME"), "/usr/local/cuda"]
    roots += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    dirs: list[str] = []
    for root in filter(None, roots):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            path = os.path.join(root, sub)
            if path not in dirs:
                dirs.append(path)
    return dirs


def find_library(name: str, dirs: Sequence[str]) -> str | None:
    """The first ``lib<name>.so.<version>`` in ``dirs`` (the shortest name: the soname link)."""
    for d in dirs:
        hits = glob.glob(os.path.join(glob.escape(d), f"lib{name}.so.*"))
        if hits:
            return min(hits, key=lambda p: (len(p), p))
    return None


def preload_libraries() -> dict[str, str]:
    """Load cuSOLVER and cuBLAS (and their dependencies) into the process, once.

    Returns:
        ``{library: path or how it was found}`` for every library of ``LOAD_ORDER`` loaded.

    Raises:
        CudaError: libcusolver or libcublas found neither by cuda-pathfinder nor in a toolkit.
    """
    with _load_lock:
        if "cusolver" in _loaded and "cublas" in _loaded:
            return dict(_loaded)
        try:
            from cuda.pathfinder import load_nvidia_dynamic_lib
        except ImportError:
            load_nvidia_dynamic_lib = None
        notes = []
        for name in LOAD_ORDER:
            if name in _loaded:
                continue
            if load_nvidia_dynamic_lib is not None:
                try:
                    found = load_nvidia_dynamic_lib(name)
                    _loaded[name] = found.abs_path or f"(pathfinder: {found.found_via})"
                    continue
                except Exception as e:  # noqa: BLE001 - not found, or a dependency missing
                    notes.append(f"pathfinder({name}): {e}")
            path = find_library(name, toolkit_lib_dirs())
            if path is not None:
                try:
                    ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
                    _loaded[name] = path
                except OSError as e:
                    notes.append(f"{path}: {e}")
        missing = [n for n in ("cublas", "cusolver") if n not in _loaded]
        if missing:
            raise CudaError(
                f"the GPU linear algebra needs {', '.join('lib' + m for m in missing)}: not found "
                f"by cuda-pathfinder (pip install nvidia-cusolver nvidia-cublas) nor in "
                f"{toolkit_lib_dirs()}; {'; '.join(notes)}",
                call="load_nvidia_dynamic_lib",
            )
        return dict(_loaded)


def bindings() -> tuple[Any, Any]:
    """``(nvmath.bindings.cusolverDn, nvmath.bindings.cublas)``, after ``preload_libraries``."""
    preload_libraries()
    try:
        from nvmath.bindings import cublas, cusolverDn
    except ImportError as e:
        raise CudaError(
            "the GPU linear algebra needs nvmath-python (pip install nvmath-python; on the GPU "
            f"test machine scripts/gpu_check.sh installs it from .whl/): {e}",
            call="import nvmath.bindings.cusolverDn",
        ) from e
    return cusolverDn, cublas
