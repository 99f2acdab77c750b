#!/usr/bin/env bash
# Download the Python wheels the GPU test machine lacks (it has no network) into .whl/.
#
# The GPU machine has Python 3.12, cuda-bindings, cuda-core, cuda-pathfinder, numpy, ml_dtypes,
# scipy, pytest, hypothesis, torch, jax and cuDNN 9 (nvidia-cudnn-cu13), but not nvmath-python
# (cuBLASLt bindings), nccl4py or nvidia-cudnn-frontend (`import cudnn`, fused attention; its
# declared needs nvidia-cutlass-dsl and apache-tvm-ffi are not needed for SDPA: --no-deps).
# Run this here, on a machine with network access, before scripts/gpu_check.sh travels there;
# .whl/ is git-ignored and is carried to the GPU machine with the working tree (carry: [".whl"]).
#
# Usage: scripts/fetch_gpu_wheels.sh            (pinned versions below)
#        NVMATH_VERSION=... NCCL4PY_VERSION=... CUDNN_FRONTEND_VERSION=... scripts/fetch_gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."

NVMATH_VERSION="${NVMATH_VERSION:-1.0.0}"
NCCL4PY_VERSION="${NCCL4PY_VERSION:-0.6.0}"
CUDNN_FRONTEND_VERSION="${CUDNN_FRONTEND_VERSION:-1.32.0}"  # seen working on the H200 (DESIGN.md)
DEST=.whl

mkdir -p "$DEST"
# One version of each package only: two versions in .whl/ stop the install on the GPU machine.
rm -f "$DEST"/nvmath_python-*.whl "$DEST"/nccl4py-*.whl "$DEST"/nvidia_cudnn_frontend-*.whl

# pip matches each manylinux tag exactly, so list the ones these packages publish.
platforms=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
    manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$tag")
done

for spec in "nvmath-python==${NVMATH_VERSION}" "nccl4py==${NCCL4PY_VERSION}" \
    "nvidia-cudnn-frontend==${CUDNN_FRONTEND_VERSION}"; do
    python3 -m pip download -q --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp "${platforms[@]}" -d "$DEST" "$spec"
done

echo "wheels in $DEST:"
for w in "$DEST"/*.whl; do
    printf '  %-70s %6s KiB\n' "$(basename "$w")" "$(( $(stat -c %s "$w") / 1024 ))"
    # what each needs (the GPU machine must already have these; see the comment above)
    unzip -p "$w" '*/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' \
        | sed 's/^/      /' || true
done
echo "carry .whl to the GPU machine (device run: carry [\".whl\"]) and run scripts/gpu_check.sh"
