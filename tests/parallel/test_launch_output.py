"""The launcher's output: each rank's lines whole and prefixed ``[rank N] ``, never two ranks on
one line (before: the ranks shared the launcher's stdout, and tutorial 07's doc test once read
``rank 0 ...rank 1 ...`` on one line).

The ranks below write each line in many small pieces, flushing after each, so that without the
relay their pieces would interleave; the checks hold whatever order the ranks run in.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from blu.parallel.launch_output import Relay

ROOT = Path(__file__).resolve().parents[2]

PIECES = textwrap.dedent(
    """
    import os, sys
    r = os.environ.get("RANK") or os.environ.get("PMI_RANK")
    for i in range(40):
        for piece in ("line ", str(i), " of rank ", r, " ", "x" * 50):
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\\n")
        sys.stdout.flush()
    sys.stderr.write(f"to stderr from {r}\\n")
    sys.stdout.write(f"no newline at the end from {r}")
    """
)


def _env() -> dict:
    import os

    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_", "PMI_", "OMPI_", "PMIX_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("BLU_NUM_CPU_DEVICES", None)
    env.pop("PYTHONUNBUFFERED", None)  # the launcher sets it for the ranks
    return env


def _check(stdout: str, stderr: str) -> None:
    lines = stdout.splitlines()
    want = re.compile(r"^\[rank (\d)\] line (\d+) of rank (\d) x{50}$")
    seen: dict[str, list[int]] = {"0": [], "1": []}
    for ln in lines:
        if ln.startswith("[rank ") and " line " in ln:
            m = want.match(ln)
            assert m and m.group(1) == m.group(3), f"a mixed line: {ln!r}\n{stdout}"
            seen[m.group(1)].append(int(m.group(2)))
    assert seen == {"0": list(range(40)), "1": list(range(40))}, stdout
    for r in "01":
        assert f"[rank {r}] no newline at the end from {r}" in lines, stdout
        assert f"[rank {r}] to stderr from {r}" in stderr.splitlines(), stderr


def test_the_launcher_prefixes_each_line_with_its_rank(tmp_path):
    script = tmp_path / "pieces.py"
    script.write_text(PIECES)
    cmd = [sys.executable, "-m", "blu.parallel.launch", "--nproc", "2", str(script)]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    _check(res.stdout, res.stderr)


def test_the_mpi_launcher_prefixes_each_line_with_its_rank(tmp_path):
    from blu.parallel import mpi

    try:
        mpi.mpiexec()
    except mpi.MpiError:
        pytest.skip("needs mpiexec (pip install 'blu[mpi]')")
    script = tmp_path / "pieces.py"
    script.write_text(PIECES)
    cmd = [sys.executable, "-m", "blu.parallel.launch", "--nproc", "2", "--backend", "mpi",
           str(script)]  # fmt: skip
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    _check(res.stdout, res.stderr)


def test_relays_write_whole_lines_whatever_the_pieces():
    out = io.StringIO()
    lock = threading.Lock()
    a, b = Relay(0, out, lock), Relay(1, out, lock)
    a.feed(b"hel")
    b.feed(b"wor")
    a.feed(b"lo\nnext")
    b.feed(b"ld\r50%\r")
    a.close()
    b.close()
    assert out.getvalue() == "[rank 0] hello\n[rank 1] world\r[rank 1] 50%\r[rank 0] next\n"


@pytest.mark.parametrize("fails", [False, True])
def test_a_rank_that_raised_never_marks_itself_done(tmp_path, fails):
    """The launcher tells a rank that vanished from one that finished by its ``<rank>.done``
    mark, written at exit: a rank that raised must not write it even when its exit handlers run
    (plain Python runs them after an uncaught exception; MPI_Abort sometimes lets them run)."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "rank.py"
    script.write_text(
        textwrap.dedent(f"""
        from blu.parallel import runtime
        runtime._mark_for_launcher(0)
        if {fails}:
            raise RuntimeError("this rank fails")
    """)
    )
    env = {**os.environ, "BLU_LAUNCH_DONE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert (r.returncode != 0) == fails, r.stderr
    assert (tmp_path / "0.start").exists()
    assert (tmp_path / "0.done").exists() == (not fails)
