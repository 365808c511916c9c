#!/usr/bin/env bash
# The GPU check: one command of at most 8 minutes that a lent GPU machine runs first, before anything
# else (benchmarks/device/README.md). It unpacks .gpu-carry/ (prepare.sh) and runs the GPU suite's
# parts in this order, each with its own time cap and each saved the moment it ends:
#   tests  every `gpu` test (130 s)
#   steps  ms, GPU busy ms and costliest kernels an update: ER with cuDNN's algorithms timed
#          (cudnn.benchmark), then every task-free method (90 s)
#   stack  RM's memory epochs with 1, 4, 8, 16 seeds stacked in one process (60 s)
#   tiny   Tiny-ImageNet ER and CLIB, one process each, for a fixed budget (110 s)
#   cifar  the CIFAR-shaped RM run: memory samples/s (150 s)
#   profile  RM's graphed memory step under torch.profiler: which kernels its GPU time goes to (35 s)
#   slots  runs per GPU 1 and 8, under NVIDIA MPS when its daemon starts (120 s)
# and stops at 470 s in all. `--resume` (a second call, on the still-held machine) resumes the Tiny
# runs where the first call cut them. REHEARSE=1 runs it on this CPU at toy sizes (the plumbing).
# Usage: bash benchmarks/device/gpu_check.sh OUT_DIR [--resume]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu_check.sh OUT_DIR [--resume]}
mode=${2:-}
started=$SECONDS
scratch=${GPU_CHECK_SCRATCH:-/tmp/rmconsole-gpu-check}
site=$scratch/site
data=$scratch/data
mkdir -p "$out" "$site" "$data" "$scratch/wheels"
tar -xf .gpu-carry/wheels.tar -C "$scratch/wheels"
if [ -n "${REHEARSE:-}" ]; then # this CPU's Python is not the image's 3.12: check the wheels install there
    "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --dry-run --only-binary=:all: \
        --python-version 3.12 --target "$site" "$scratch"/wheels/*.whl
elif [ ! -f "$site/.installed" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$scratch"/wheels/*.whl
    touch "$site/.installed"
fi
[ -d "$data/MNIST/raw" ] || tar -xJf .gpu-carry/mnist.tar.xz -C "$data"
[ -d "$data/tiny-imagenet-200" ] || tar -xzf .gpu-carry/tiny.tar.gz -C "$data"
echo "gpu_check: wheels and data unpacked in $((SECONDS - started)) s"
if [ -z "${REHEARSE:-}" ]; then
    export PYTHONPATH=$site
    python=python3
    rehearse=()
else
    python=${PYTHON:-python3}
    rehearse=(--rehearse)
fi
export PYTHONUNBUFFERED=1 RMCONSOLE_DATA=$data RMCONSOLE_TEST_DATA=$data
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export RMCONSOLE_COMMIT=${RMCONSOLE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
nvidia-smi || true
tiny=(--tiny-data "$data" --tiny-home .gpu-home/tiny)
if [ "$mode" = --resume ]; then
    exec "$python" benchmarks/gpu_suite.py "$out" "${rehearse[@]}" --only tiny "${tiny[@]}" \
        --tiny-limit $((450 - (SECONDS - started))) --total-limit $((460 - (SECONDS - started)))
fi
exec "$python" benchmarks/gpu_suite.py "$out" "${rehearse[@]}" --total-limit $((470 - (SECONDS - started))) \
    --only tests --only steps --only stack --only tiny --only cifar --only profile --only slots \
    --tests-limit 130 --steps-limit 90 --stack-limit 60 --tiny-limit 110 --cifar-limit 150 --part-limit 120 \
    --profile-modes graphs --profile-limit 35 --profile-epochs 2 --steps-cudnn-benchmark er \
    --cifar-data mnist --cifar-epochs 128 --slots 1,8 --slots-epochs 16 --mps "${tiny[@]}"
