"""Run the Array API conformance suite (data-apis/array-api-tests) against ``blu.numpy``.

The suite is not on PyPI and is never copied into this repository: clone it yourself, with its
``array-api`` spec submodule, and install its requirements (pytest, pytest-json-report,
hypothesis, ndindex) into the environment that runs this script::

    git clone https://github.com/data-apis/array-api-tests /tmp/array-api-tests
    git -C /tmp/array-api-tests submodule update --init   # the spec, at array-api/
    pip install -r /tmp/array-api-tests/requirements.txt
    python scripts/array_api_tests.py /tmp/array-api-tests --max-examples 20

It runs the suite unchanged (``ARRAY_API_TESTS_MODULE=blu.numpy``, standard 2024.12, a fixed
number of hypothesis examples, derandomized, no deadline), then prints one row per test module
(passed / failed / errors / skipped, the pass rate of the tests run) and the overall rate. The
rate is passed / (passed + failed + errors): skipped tests (the suite's own skips, skipped
dtypes) are not counted as run.

``--skip-dtypes`` (comma-separated dtype names the suite skips) is empty by default: blu has
complex64/complex128, so the suite tests them. The suite (at 55fcc60) cannot import for a
namespace without any complex dtype (``dtype_helpers`` takes the ``max`` of an empty tuple), so
for such a namespace the script runs a temporary copy of the checkout with that one line guarded
(``_COMPLEX_GUARD``; it says so when it does); the checkout itself is never modified, and nothing
else of the suite is changed.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


_COMPLEX_LINE = "widest_complex_dtype = max("
_COMPLEX_GUARD = "widest_complex_dtype = None if not complex_dtypes else max("


def guarded_copy(suite: Path, tmp: Path) -> Path:
    """A copy of the suite whose import tolerates a namespace without complex dtypes."""
    copy = tmp / "array-api-tests"
    shutil.copytree(suite, copy, ignore=shutil.ignore_patterns(".git", "array-api"), symlinks=True)
    (copy / "array-api").symlink_to((suite / "array-api").resolve())
    helpers = copy / "array_api_tests" / "dtype_helpers.py"
    text = helpers.read_text()
    if _COMPLEX_LINE in text:
        helpers.write_text(text.replace(_COMPLEX_LINE, _COMPLEX_GUARD, 1))
        print(f"note: running a copy of the suite with `{_COMPLEX_GUARD}...` (no complex dtypes)")
    return copy


def run_suite(args: argparse.Namespace, report: Path) -> int:
    env = dict(os.environ)
    env["ARRAY_API_TESTS_MODULE"] = args.module
    env["ARRAY_API_TESTS_VERSION"] = args.api_version
    if args.skip_dtypes:
        env["ARRAY_API_TESTS_SKIP_DTYPES"] = args.skip_dtypes
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("BLU_CACHE_DIR", tempfile.mkdtemp(prefix="blu-array-api-"))
    targets = args.tests or ["array_api_tests/"]
    cmd = [
        sys.executable, "-m", "pytest", *targets,
        "-q", "-p", "no:cacheprovider", "--tb=no", "-rN",
        f"--max-examples={args.max_examples}", "--derandomize", "--disable-deadline",
        "--json-report", f"--json-report-file={report}", "--json-report-omit", "log",
        "streams", "warnings", "keywords", "--continue-on-collection-errors",
        *args.pytest_args,
    ]  # fmt: skip
    return subprocess.call(cmd, cwd=args.suite, env=env)


def summarize(report: Path) -> tuple[dict[str, collections.Counter], list[str]]:
    data = json.loads(report.read_text())
    per_module: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failing = []
    for c in data.get("collectors", []):
        # a test module that failed to import counts as one error (its tests never ran)
        if c["outcome"] == "failed" and c["nodeid"].endswith(".py"):
            module = c["nodeid"].rsplit("/", 1)[-1].removesuffix(".py")
            per_module[module]["error"] += 1
            failing.append(c["nodeid"] + " (collection)")
    for t in data.get("tests", []):
        module = t["nodeid"].split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
        outcome = t["outcome"]
        if outcome == "error" or any(
            t.get(stage, {}).get("outcome") == "failed" for stage in ("setup", "teardown")
        ):
            outcome = "error"
        per_module[module][outcome] += 1
        if outcome in ("failed", "error"):
            failing.append(t["nodeid"])
    return per_module, failing


def print_table(per_module: dict[str, collections.Counter]) -> None:
    header = f"| {'module':<40} | passed | failed | errors | skipped | pass rate |"
    print(header)
    print("|" + "-" * 42 + "|--------|--------|--------|---------|-----------|")
    total = collections.Counter()
    for module in sorted(per_module):
        c = per_module[module]
        total.update(c)
        print(_row(module, c))
    print(_row("**total**", total))
    run = total["passed"] + total["failed"] + total["error"]
    rate = 100.0 * total["passed"] / run if run else 0.0
    print(f"\noverall: {total['passed']} / {run} tests run pass ({rate:.1f}%)")


def _row(name: str, c: collections.Counter) -> str:
    run = c["passed"] + c["failed"] + c["error"]
    rate = f"{100.0 * c['passed'] / run:.1f}%" if run else "-"
    return (
        f"| {name:<40} | {c['passed']:>6} | {c['failed']:>6} | {c['error']:>6} "
        f"| {c['skipped'] + c['xfailed']:>7} | {rate:>9} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("suite", type=Path, help="a checkout of data-apis/array-api-tests")
    p.add_argument("tests", nargs="*", help="test files/ids inside the suite (default: all)")
    p.add_argument("--module", default="blu.numpy", help="the namespace under test")
    p.add_argument("--api-version", default="2024.12")
    p.add_argument("--max-examples", type=int, default=20)
    p.add_argument("--skip-dtypes", default="", help="dtypes the suite skips (comma-separated)")
    p.add_argument("--report", type=Path, help="keep the pytest JSON report here")
    p.add_argument("--failing", action="store_true", help="also list the failing test ids")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []  # passed on to pytest
    args = p.parse_intermixed_args(
        argv[: len(argv) - len(extra) - (1 if extra or "--" in argv else 0)]
    )
    args.pytest_args = extra
    if not (args.suite / "array-api" / "spec").is_dir():
        sys.exit(f"{args.suite}/array-api is empty: the suite needs its spec submodule there")
    with tempfile.TemporaryDirectory() as tmp:
        report = args.report or Path(tmp) / "report.json"
        sys.path.insert(0, str(REPO))
        namespace = importlib.import_module(args.module)
        if not hasattr(namespace, "complex64"):
            args.suite = guarded_copy(args.suite, Path(tmp))
        run_suite(args, report)
        if not report.exists():
            sys.exit("pytest wrote no report (did the suite fail to import?)")
        per_module, failing = summarize(report)
    print()
    print_table(per_module)
    if args.failing:
        print("\nfailing:")
        for nodeid in failing:
            print("  " + nodeid)


if __name__ == "__main__":
    main()
