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
