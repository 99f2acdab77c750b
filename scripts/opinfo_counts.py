"""Print the OpInfo table's case counts per dtype and per transform (issue #39): the entries of
``tests/ops/`` each generic test of ``tests/transforms/test_opinfo.py`` and
``tests/transforms/test_opinfo_sweeps.py`` runs, less the entries a test skips by name (its
``skip`` dict or the sweeps' ``SKIP_*`` lists), and the known failures marked xfail.

Usage: python scripts/opinfo_counts.py [--dev]
(--dev: the GPU check's entries under HYPOTHESIS_PROFILE=dev, every entry; else the CI subset.)
"""

from __future__ import annotations

import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main() -> None:
    if "--dev" in sys.argv:
        os.environ["HYPOTHESIS_PROFILE"] = "dev"
    sys.path.insert(0, str(ROOT))
    sys.path.append(
        str(ROOT / "tests")
    )  # the shared helpers, by their bare names (last: no shadowing)
    from opinfo import TABLE

    import tests.transforms.test_opinfo_sweeps as sw

    def n(entries, test=None, names=()):
        return sum(
            1 for e in entries if (test is None or test not in e.skip) and e.name not in names
        )

    grad = [e for e in TABLE if e.grad]
    special = sum(e.finite_grad_at_special for e in TABLE)
    rows = [
        ("value, float64 (+ special points)", "float64", n(TABLE, "value")),
        ("derivatives to order 2: fwd, rev, rev-of-fwd", "float64", n(grad, "grad")),
        ("jacfwd == jacrev", "float64", sum(not {"grad", "jacobians"} & set(e.skip) for e in grad)),
        ("vmap vs loop (+ grad of vmap)", "float64", n(TABLE, "vmap")),
        ("jit vs eager, CPU", "float64", n(TABLE, "jit")),
        ("every keyword honoured", "float64", sum(1 for e in TABLE if e.kwargs)),
        ("finite gradient at special points", "float64", special),
        ("reverse over reverse (vjp of vjp)", "float64", len(sw._GRAD)),
    ]  # fmt: skip
    for dt in sw.REAL:
        real = [e for e in TABLE if "value" not in e.skip and e.ref is not None]
        rows.append(("value vs float64 reference", dt, n(real, None, sw.SKIP_REAL)))
    for dt in sw.COMPLEX:
        rows.append(("value vs complex128 reference", dt, len(sw._COMPLEX_ENTRIES)))
    rows.append(("JVP vs finite differences", "complex128", len(sw._COMPLEX_GRAD)))
    rows.append(("jit on the simulated GPU vs eager", "float32", len(sw._GPU)))
    width = max(len(r[0]) for r in rows)
    print(f"OpInfo table: {len(TABLE)} entries ({len(grad)} differentiable)\n")
    print(f"{'transform / check':<{width}}  {'dtype':<10} cases")
    for what, dt, count in rows:
        print(f"{what:<{width}}  {dt:<10} {count}")
    per_dtype: dict[str, int] = {}
    for _, dt, count in rows:
        per_dtype[dt] = per_dtype.get(dt, 0) + count
    print("\nper dtype: " + ", ".join(f"{dt} {c}" for dt, c in per_dtype.items()))
    xfails = {**sw.XFAIL_COMPLEX, **sw.XFAIL_ORDER2, **sw.XFAIL_COMPLEX_JVP}
    print(f"known failures marked xfail: {len(xfails)}")
    for name, reason in sorted(xfails.items()):
        print(f"  {name}: {reason}")


if __name__ == "__main__":
    main()
