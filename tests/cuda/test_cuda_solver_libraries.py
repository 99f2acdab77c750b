"""Finding and loading cuSOLVER and cuBLAS for the GPU linear algebra (``blu.cuda.solver``), on
the CPU: the toolkit folders searched, the shared object picked in a folder, and the fallback to
a toolkit folder when ``cuda.pathfinder`` finds nothing (stand-in libraries, a stand-in
pathfinder). The kernels: ``test_cuda_solver_cpu.py``.
"""

from __future__ import annotations

import sys
import types

import pytest

from blu.cuda import solver, solver_libraries
from blu.cuda.errors import CudaError


def test_toolkit_dirs_follow_cuda_path_then_cuda_home():
    dirs = solver.toolkit_lib_dirs({"CUDA_PATH": "/opt/a", "CUDA_HOME": "/opt/b"})
    assert dirs[0] == "/opt/a/lib64"
    assert dirs.index("/opt/a/lib64") < dirs.index("/opt/b/lib64")
    assert dirs.index("/opt/b/lib64") < dirs.index("/usr/local/cuda/lib64")
    assert len(dirs) == len(set(dirs))


def test_find_library_prefers_the_soname_link(tmp_path):
    for name in ("libcusolver.so.12.0.4.66", "libcusolver.so.12", "libcusolverMg.so.12"):
        (tmp_path / name).write_bytes(b"")
    assert solver.find_library("cusolver", [str(tmp_path)]) == str(tmp_path / "libcusolver.so.12")
    assert solver.find_library("cublas", [str(tmp_path)]) is None


def _no_pathfinder(monkeypatch, folder):
    fake = types.ModuleType("cuda.pathfinder")

    def load_nvidia_dynamic_lib(name):
        raise RuntimeError(f"{name} not found (test)")

    fake.load_nvidia_dynamic_lib = load_nvidia_dynamic_lib
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", fake)
    monkeypatch.setattr(solver_libraries, "_loaded", {})
    monkeypatch.setattr(solver_libraries, "toolkit_lib_dirs", lambda env=None: [str(folder)])


def test_preload_reports_what_is_missing(monkeypatch, tmp_path):
    _no_pathfinder(monkeypatch, tmp_path)
    with pytest.raises(CudaError, match="libcublas, libcusolver: not found"):
        solver.preload_libraries()


def test_preload_falls_back_to_a_toolkit_folder(monkeypatch, tmp_path):
    # stand-ins for the libraries: a real shared object (the C math library) under their names
    with open("/proc/self/maps") as f:
        libm = next((ln.split()[-1] for ln in f if "/libm.so" in ln or "/libm-" in ln), None)
    if libm is None:
        pytest.skip("no libm mapped in this process")
    for name in ("libcublas.so.13", "libcusolver.so.12"):
        (tmp_path / name).write_bytes(open(libm, "rb").read())
    _no_pathfinder(monkeypatch, tmp_path)
    assert solver.preload_libraries() == {
        "cublas": str(tmp_path / "libcublas.so.13"),
        "cusolver": str(tmp_path / "libcusolver.so.12"),
    }
