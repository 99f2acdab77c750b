#!/usr/bin/env bash
# A/B of one command in two trees on the GPU machine, in alternating processes (the H200's
# run-to-run spread is ~10%, so compare within one call):
#
#   scripts/gpu_ab.sh BEFORE_DIR ROUNDS COMMAND...
#
# BEFORE_DIR: the other tree (e.g. made on the CPU machine by
#   `git archive <rev> blu benchmarks examples | tar -x -C .gpucarry/before`, and carried);
# the command runs there and here alternately, ROUNDS times each, every output line prefixed
# with "before" or "after". Both trees read the carried kernel cache ($BLU_CACHE_DIR, as in
# scripts/gpu_check.sh): fill it from both trees on the CPU machine first
# (`PYTHONPATH=<tree> python scripts/fill_gpu_cache.py --cache <dir> ...` for each). E.g.
#
#   scripts/gpu_ab.sh .gpucarry/before 3 python3 benchmarks/peers/blu_vision.py \
#       --model resnet50 --mode bf16 --batch 256 --steps 20 --warmup 5
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ]; then
    sed -n '2,16p' "$0" >&2
    exit 2
fi
before="$(cd "$1" && pwd)" rounds="$2"
shift 2
export BLU_CACHE_DIR="${BLU_CACHE_DIR:-$PWD/.blu_cache-gpu}" BLU_DATA_DIR="${BLU_DATA_DIR:-$PWD/.data}"
export NCCL_NVLS_ENABLE=0  # never NVLink multicast (scripts/gpu_check.sh says why)
[ -d "$BLU_CACHE_DIR" ] && chmod -R go-w "$BLU_CACHE_DIR" && chmod 700 "$BLU_CACHE_DIR"
here="$PWD"
for ((i = 1; i <= rounds; i++)); do
    for side in before after; do
        dir=$here
        [ "$side" = before ] && dir=$before
        (cd "$dir" && PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}" "$@" 2>&1) | sed "s/^/$side $i: /"
    done
done
