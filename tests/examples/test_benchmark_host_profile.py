"""``benchmarks/host_profile.py`` on the CPU: the tiny config's step, two profiled calls."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import host_profile  # noqa: E402


def test_profiles_the_replayed_calls(capsys):
    assert host_profile.main(["--config", "tiny", "--B", "2", "--T", "32", "--calls", "2",
                              "--top", "3"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    ms = out.split("host ms (profiled) [")[1].split("]")[0].split(",")
    assert len(ms) == 2 and all(float(m) > 0 for m in ms)
    assert "Ordered by: internal time" in out and "Ordered by: cumulative time" in out
    assert "jit.py" in out  # the jitted call is in the profile


def test_stub_replay_times_the_gpu_paths_host_share(tmp_path):
    # on the simulated GPU with graphs that replay nothing: the jitted step's fast path on
    # device arrays (dispatch.py's DeviceFastCall) is what runs after the first calls
    import os
    import subprocess

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, BLU_FAKE_GPU="1", BLU_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(root))  # fmt: skip
    cmd = [sys.executable, str(root / "benchmarks" / "host_profile.py"), "--config", "tiny",
           "--B", "2", "--T", "32", "--calls", "3", "--top", "40", "--stub-replay"]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    med = float(r.stdout.split("host ms (unprofiled, median of 3) ")[1].split()[0])
    assert med > 0
    assert "dispatch.py" in r.stdout and "make_outputs" in r.stdout  # the device fast path ran
    # not the full path (jit.py's trace-cache lookup; pytree_registry's _lookup may be listed)
    assert not any("jit.py" in ln and "(_lookup)" in ln for ln in r.stdout.splitlines())
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "host_profile.py"),
                        "--stub-replay"], env=dict(env, BLU_FAKE_GPU="0"), capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    assert r.returncode != 0 and "BLU_FAKE_GPU=1" in r.stderr
