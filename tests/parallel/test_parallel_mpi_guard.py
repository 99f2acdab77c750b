"""The MPI backend's guards (``blu.parallel.mpi_guard``), with 2 real processes under mpiexec:

- a rank that exits normally (end of script, ``sys.exit(0)``) while the other waits for it in a
  collective ends the job with an error on both ranks (before: a hang);
- ranks that pass operands of different dtypes or shapes to one collective raise a
  ``CollectiveMismatchError`` naming both ranks' operands, on both ranks (before: garbage and
  exit code 0, or a hang);
- a job whose ranks all leave normally, one long after the other, still exits 0.

Each rank writes its stderr to a file of its own (mpiexec may drop the ranks' forwarded output
when the job is aborted), and every job is bounded by a subprocess timeout, so a hang fails.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from blu.parallel import mpi

from .test_parallel_mpi import MPIEXEC, ROOT, TIMEOUT, _env

pytestmark = pytest.mark.skipif(
    MPIEXEC is None,
    reason="needs mpi4py and mpiexec (pip install 'blu[mpi]': mpi4py and the mpich wheel)",
)

PRELUDE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from blu import parallel as bp
    from blu.parallel import P

    bp.initialize()
    r, n = bp.process_index(), bp.process_count()
    sys.stderr = open(f"{sys.argv[1]}/err{r}", "w", buffering=1)
    mesh = bp.make_mesh((n,), ("x",))
    psum = bp.shard(lambda b: bp.psum(b, "x"), mesh, P("x"), P())
    how = sys.argv[2]
    """
)

LEAVES = PRELUDE + textwrap.dedent(
    """
    if how == "after_one":  # both ranks run one psum, then rank 1 leaves before the second
        psum(np.ones((n, 2), np.float32))
    if r == 1:
        if how == "sys_exit":
            sys.exit(0)
    else:
        psum(np.ones((n, 2), np.float32))
        open(f"{sys.argv[1]}/NOT_STOPPED{r}", "w").close()
    """
)

MISMATCH = PRELUDE + textwrap.dedent(
    """
    if how == "dtype":
        x = np.ones((n, 2), np.float32 if r == 0 else np.float64)
    elif how == "shape":
        x = np.ones((n, 2 + r), np.float32)
    else:  # "collective": rank 0 sums, rank 1 gathers
        x = np.ones((n, 2), np.float32)
        if r == 1:
            bp.shard(lambda b: bp.all_gather(b, "x"), mesh, P("x"), P())(x)
    out = psum(x)
    open(f"{sys.argv[1]}/NOT_STOPPED{r}", "w").close()
    """
)

FINISHES = PRELUDE + textwrap.dedent(
    """
    import blu
    got = np.asarray(psum(np.arange(2.0 * n, dtype=np.float32).reshape(n, 2)))
    if r == 0:  # rank 0 still works (no collective) after rank 1 has reached its exit hook
        f = blu.jit(lambda a: (a * 2.0).sum())
        for i in range(20):
            f(np.full((8, 8), float(i), np.float32))
    open(f"{sys.argv[1]}/done{r}", "w").write(repr(got.tolist()))
    """
)


def _job(tmp_path: Path, body: str, how: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    script = tmp_path / "job.py"
    script.write_text(body)
    cmd = [MPIEXEC, "-n", "2", sys.executable, str(script), str(tmp_path), how]
    res = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT,
                         cwd=ROOT)  # fmt: skip
    errs = [(tmp_path / f"err{r}").read_text() if (tmp_path / f"err{r}").exists() else ""
            for r in range(2)]  # fmt: skip
    return res, errs


@pytest.mark.parametrize("how", ["end_of_script", "sys_exit", "after_one"])
def test_a_rank_that_exits_normally_ends_the_job_with_an_error(tmp_path, how):
    res, errs = _job(tmp_path, LEAVES, how)
    out = res.stdout + res.stderr + "".join(errs)
    assert res.returncode != 0, out
    assert not (tmp_path / "NOT_STOPPED0").exists(), out
    said = "rank 1 exited while rank 0 waits for it in psum"
    assert "RankExitedError" in errs[0] and said in errs[0], out  # the waiting rank raised
    assert said in errs[1], out  # and the rank that left says why the job fails
    if how == "after_one":
        assert "collective 2 of its group [0, 1]; rank 1 entered 1 of them" in errs[0], out


@pytest.mark.parametrize(
    "how,want",
    [
        ("dtype", "rank 0: psum float32[1,2]; rank 1: psum float64[1,2]"),
        ("shape", "rank 0: psum float32[1,2]; rank 1: psum float32[1,3]"),
        ("collective", "rank 0: psum float32[1,2]; rank 1: all_gather float32[1,2]"),
    ],
)
def test_ranks_that_disagree_at_a_collective_all_raise(tmp_path, how, want):
    res, errs = _job(tmp_path, MISMATCH, how)
    out = res.stdout + res.stderr + "".join(errs)
    assert res.returncode != 0, out
    for r in range(2):
        assert not (tmp_path / f"NOT_STOPPED{r}").exists(), out
        assert "CollectiveMismatchError" in errs[r] and want in errs[r], out


def test_ranks_that_leave_at_different_times_finish_cleanly(tmp_path):
    res, errs = _job(tmp_path, FINISHES, "ok")
    out = res.stdout + res.stderr + "".join(errs)
    assert res.returncode == 0, out
    for r in range(2):
        assert (tmp_path / f"done{r}").read_text() == "[[2.0, 4.0]]", out


def test_the_header_names_each_operand():
    import numpy as np

    from blu.parallel import mpi_guard

    h = mpi_guard.header("psum", np.zeros((3, 4), np.float64))
    assert bytes(h).rstrip(b"\0") == b"psum float64[3,4]"
    long_a = mpi_guard.header("all_gather", np.zeros((1,) * 40 + (2,), np.int8))
    long_b = mpi_guard.header("all_gather", np.zeros((1,) * 40 + (3,), np.int8))
    assert long_a.size == long_b.size == mpi_guard.HEADER_BYTES
    assert (long_a != long_b).any()  # a long shape keeps its CRC: never read as another
    assert issubclass(mpi.CollectiveMismatchError, mpi.BluError)
