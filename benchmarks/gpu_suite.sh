#!/usr/bin/env bash
# The GPU suite in one command: bash benchmarks/gpu_suite.sh OUT_DIR [gpu_suite.py options]
# Runs the tests marked `gpu` and the GPU benchmarks; writes OUT_DIR/gpu_suite.{json,md,log}.
# Needs rmconsole's dependencies (see docs/performance.md for an offline install) and, for the
# MNIST checks, RMCONSOLE_DATA (or RMCONSOLE_TEST_DATA) pointing at a folder that holds MNIST/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_suite.sh OUT_DIR [options]}
shift
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export RMCONSOLE_COMMIT=${RMCONSOLE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export RMCONSOLE_TEST_DATA=${RMCONSOLE_TEST_DATA:-${RMCONSOLE_DATA:-}}
nvidia-smi || true
exec python3 benchmarks/gpu_suite.py "$out" "$@"
