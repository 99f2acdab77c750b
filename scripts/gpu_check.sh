#!/usr/bin/env bash
# Run blu's GPU checks on the GPU test machine, in parts that each fit in one 10-minute command.
#
#   scripts/gpu_check.sh [PART...]     PART: tests | example | bench | parallel | all
#                                      (default: tests)
#
# Before it travels (on a machine with network): scripts/fetch_gpu_wheels.sh, which puts the
# nvmath-python and nccl4py wheels in .whl/; scripts/fill_gpu_cache.py, which compiles every GPU
# kernel into .blu_cache/, copies what the GPU reads to .blu_cache-gpu/ and the corpora the tests
# read to .data/ (benchmarks/gpt2_124m.py --prepare-data adds the benchmark's tokens; all
# git-ignored: carry them, carry: [".whl", ".blu_cache-gpu", ".data"]).
# The GPU machine has no network: the wheels are installed from .whl/ into /tmp/site, and the
# repository root goes on PYTHONPATH (blu itself is not installed there).
#
# Parts (each under its own time limit, so the table below always prints):
#   tests    python3 -m pytest -m gpu $TESTS_ARGS       (limit $TESTS_LIMIT s, default 480;
#            TESTS_ARGS default tests/, e.g. TESTS_ARGS=tests/lower/cuda/test_gpu_row_groups.py
#            for a subset)
#   example  the GPT-2 example on the GPU, once present  (limit $EXAMPLE_LIMIT s, default 480)
#   bench    the GPT-2 benchmark on the GPU, once present (limit $BENCH_LIMIT s, default 480)
#   parallel the distributed programs (DP, ZeRO-1, FSDP, TP, PP, 2-D) as a world of one over NCCL
#            (scripts/parallel_gpu_world1.py; limit $PARALLEL_LIMIT s, default 480)
# All parts of one invocation share $TOTAL_LIMIT s (default 570, under the device tool's 600 s
# per command): a part gets at most what is left. Run one part per device call for full limits:
# `scripts/gpu_check.sh tests`, then `scripts/gpu_check.sh example`, then `... bench`.
# Logs go to $OUT (the device tool brings them back) or /tmp/blu_gpu_check; a short table is
# printed last: part, result, seconds, detail.
set -uo pipefail
cd "$(dirname "$0")/.."

LOG_DIR="${OUT:-/tmp/blu_gpu_check}"
mkdir -p "$LOG_DIR"
TESTS_LIMIT="${TESTS_LIMIT:-480}"
EXAMPLE_LIMIT="${EXAMPLE_LIMIT:-480}"
BENCH_LIMIT="${BENCH_LIMIT:-480}"
TOTAL_LIMIT="${TOTAL_LIMIT:-570}"
# The example and benchmark parts: each runs once its presence check succeeds (edit these when
# the GPU example and benchmark land).
EXAMPLE_CHECK="${EXAMPLE_CHECK:-grep -q -- '--device' examples/gpt2/train.py}"
# (keep in step with GPU_EXAMPLE in scripts/fill_gpu_cache.py, which compiles its kernels)
EXAMPLE_CMD="${EXAMPLE_CMD:-python3 -m examples.gpt2 --device cuda --config gpt2-124m --tokenizer gpt2 --data .data/pd_books.txt --precision bf16 --batch-size 16 --block-size 1024 --steps 60 --eval-every 30 --eval-iters 2 --sample-tokens 40 --no-progress --out /tmp/blu_gpt2_gpu --overwrite}"
BENCH_CHECK="${BENCH_CHECK:-test -e benchmarks/gpt2_124m.py}"
BENCH_CMD="${BENCH_CMD:-python3 benchmarks/gpt2_124m.py}"
PARALLEL_LIMIT="${PARALLEL_LIMIT:-480}"
PARALLEL_CMD="${PARALLEL_CMD:-BLU_PARALLEL_BACKEND=nccl python3 scripts/parallel_gpu_world1.py}"
# Kernels come from the carried cache (filled by scripts/fill_gpu_cache.py: the GPU machine has no
# MLIR); corpora from the carried .data/ (../shared does not travel).
export BLU_CACHE_DIR="${BLU_CACHE_DIR:-$PWD/.blu_cache-gpu}" BLU_DATA_DIR="${BLU_DATA_DIR:-$PWD/.data}"
# the tests read the carried cache too (tests/conftest.py otherwise uses a temporary one)
export BLU_TEST_CACHE_DIR="${BLU_TEST_CACHE_DIR:-$BLU_CACHE_DIR}"
# blu refuses a cache folder or entry others could write (as ssh does): the copy that travelled
# may have picked up a looser umask on the way
[ -d "$BLU_CACHE_DIR" ] && chmod -R go-w "$BLU_CACHE_DIR" && chmod 700 "$BLU_CACHE_DIR"
START=$SECONDS
budget() {  # the limit for a part: its own, or what is left of TOTAL_LIMIT (less 15 s)
    local left=$((TOTAL_LIMIT - (SECONDS - START) - 15))
    [ "$left" -lt 1 ] && left=1
    [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}

# Never let NCCL, PyTorch or NVSHMEM use NVLink multicast (KINDS.md: it can take shared GPUs down).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"

declare -a ROWS=()
row() { ROWS+=("$(printf '%-9s %-6s %7s  %s' "$1" "$2" "$3" "$4")"); }

print_table() {
    echo
    echo "==== blu GPU check ===="
    printf '%-9s %-6s %7s  %s\n' part result seconds detail
    for r in "${ROWS[@]}"; do echo "$r"; done
}
trap print_table EXIT

# ---- install the carried wheels ----------------------------------------------------------------
t0=$SECONDS
if ls .whl/*.whl >/dev/null 2>&1; then
    if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >"$LOG_DIR/install.log" 2>&1; then
        row install ok $((SECONDS - t0)) "$(cd .whl && ls *.whl | sed 's/-cp3.*//' | tr '\n' ' ')"
    else
        row install FAIL $((SECONDS - t0)) "see install.log: $(tail -n 1 "$LOG_DIR/install.log")"
    fi
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
    row install skip 0 "no .whl/*.whl (run scripts/fetch_gpu_wheels.sh here first; carry .whl)"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

python3 - >"$LOG_DIR/env.log" 2>&1 <<'EOF'
import importlib, platform
print("python", platform.python_version())
for m in ("numpy", "ml_dtypes", "cuda.bindings", "cuda.core", "cuda.pathfinder", "nvmath",
          "nccl", "torch", "jax", "scipy", "hypothesis"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", "?"))
    except Exception as e:  # noqa: BLE001
        print(m, "MISSING", type(e).__name__, e)
import blu.cuda as bc
print("blu.cuda.is_available()", bc.is_available())
for d in bc.devices():
    p = d.properties
    print(d, p.name, p.arch, f"{p.total_memory / 2**30:.1f} GiB")
EOF
gpu_line=$(grep -E '^cuda:0' "$LOG_DIR/env.log" || true)
if grep -q 'is_available() True' "$LOG_DIR/env.log"; then
    row env ok 0 "${gpu_line:-?}"
else
    row env FAIL 0 "no GPU seen by blu: $(grep -E 'MISSING|Error' "$LOG_DIR/env.log" | head -n 2 | tr '\n' ' ')"
fi

# ---- parts -------------------------------------------------------------------------------------
run_tests() {
    local t=$SECONDS log="$LOG_DIR/tests.log" limit
    limit=$(budget "$TESTS_LIMIT")
    # shellcheck disable=SC2086  # TESTS_ARGS: several paths or options
    timeout "$limit" python3 -m pytest -q -m gpu ${TESTS_ARGS:-tests/} -p no:cacheprovider -rfEs \
        --durations=10 >"$log" 2>&1
    local rc=$?
    local summary
    summary=$(grep -E '[0-9]+ (passed|failed|error|skipped|deselected)' "$log" | tail -n 1 | tr -d '=')
    if [ $rc -eq 124 ]; then
        row tests TIME $((SECONDS - t)) "stopped after ${limit}s; see tests.log"
    elif [ $rc -eq 0 ]; then
        row tests ok $((SECONDS - t)) "${summary:-?}"
    else
        row tests FAIL $((SECONDS - t)) "${summary:-rc $rc}; see tests.log"
        grep -E '^(FAILED|ERROR)' "$log" | head -n 15
    fi
}

run_cmd() {  # name limit check cmd
    local name=$1 limit check=$3 cmd=$4 t=$SECONDS log="$LOG_DIR/$1.log"
    limit=$(budget "$2")
    if ! bash -c "$check" >/dev/null 2>&1; then
        row "$name" skip 0 "not present yet ($check)"
        return
    fi
    timeout "$limit" bash -c "$cmd" >"$log" 2>&1
    local rc=$?
    if [ $rc -eq 124 ]; then
        row "$name" TIME $((SECONDS - t)) "stopped after ${limit}s; see $name.log"
    elif [ $rc -eq 0 ]; then
        row "$name" ok $((SECONDS - t)) "$(tail -n 1 "$log" | cut -c1-90)"
    else
        row "$name" FAIL $((SECONDS - t)) "rc $rc: $(tail -n 1 "$log" | cut -c1-80)"
    fi
}

parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(tests)
for p in "${parts[@]}"; do
    case "$p" in
        tests) run_tests ;;
        example) run_cmd example "$EXAMPLE_LIMIT" "$EXAMPLE_CHECK" "$EXAMPLE_CMD" ;;
        bench) run_cmd bench "$BENCH_LIMIT" "$BENCH_CHECK" "$BENCH_CMD" ;;
        parallel) run_cmd parallel "$PARALLEL_LIMIT" "test -e scripts/parallel_gpu_world1.py" \
                      "$PARALLEL_CMD" ;;
        all) run_tests
             run_cmd example "$EXAMPLE_LIMIT" "$EXAMPLE_CHECK" "$EXAMPLE_CMD"
             run_cmd bench "$BENCH_LIMIT" "$BENCH_CHECK" "$BENCH_CMD" ;;
        *) row "$p" FAIL 0 "unknown part (tests | example | bench | parallel | all)" ;;
    esac
done
# the table prints on exit (trap); the log tails above it help when a part failed
[ -f "$LOG_DIR/tests.log" ] && tail -n 25 "$LOG_DIR/tests.log"
exit 0
