#!/usr/bin/env bash
# What a lent GPU machine's call carries, built here once (it has no package index, and a call
# carries at most 64 MiB, the repo included, counted in files as well as bytes): three archives in
# .gpu-carry/, which benchmarks/device/gpu_check.sh unpacks there (benchmarks/device/README.md).
#   wheels.tar    the wheels rmconsole needs that the GPU image lacks (image-packages.txt), Python 3.12
#   mnist.tar.xz  MNIST's four idx files (the gpu tests' bf16 check, the CIFAR-shaped run's data)
#   tiny.tar.gz   the Tiny-ImageNet subset, losslessly packed (pack_tiny.py: same pixels, 20% fewer bytes),
#                 val/ cut to TINY_VAL_PER_CLASS (30) images a class
# .gpu-carry/ and its inputs (.whl/, .tiny/) are git-ignored (.git/info/exclude), so only a call
# that names .gpu-carry in `carry` takes it. Exits 1 when repo + archives pass 64 MiB.
# Usage: bash benchmarks/device/prepare.sh [DATA_ROOT]   (default ../shared/data; needs pip access and jpegtran)
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:-../shared/data}
python=${PYTHON:-python3}
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for path in /.whl/ /.tiny/ /.gpu-carry/ /.gpu-home/; do
    grep -qxF "$path" "$exclude" 2>/dev/null || echo "$path" >>"$exclude"
done
if [ ! -d .whl ]; then
    "$python" rmconsole/wheelhouse.py .whl --python 3.12 --skip-from benchmarks/device/image-packages.txt
    rm -f .whl/rmconsole-*.whl # the repo itself travels; PYTHONPATH=$PWD there
fi
[ -d .tiny/tiny-imagenet-200 ] || "$python" benchmarks/device/pack_tiny.py "$data/tiny-imagenet-200" .tiny/tiny-imagenet-200
mkdir -p .gpu-carry.partial
tar -cf .gpu-carry.partial/wheels.tar -C .whl .
tar -cf - -C "$data" MNIST/raw | xz -9 -T1 >.gpu-carry.partial/mnist.tar.xz
# val/ keeps its first $val_per_class images a class (sorted names; 50 in the subset): the 64 MiB a call
# carries counts its files beyond their bytes, and the whole val/ put the call over it on 2026-11-28.
val_per_class=${TINY_VAL_PER_CLASS:-30}
(cd .tiny && { find tiny-imagenet-200 -path '*/val/*' -prune -o -type f -print; \
    for class in tiny-imagenet-200/val/*/; do find "$class" -type f | sort | head -n "$val_per_class"; done; } \
    | sort | tar -czf ../.gpu-carry.partial/tiny.tar.gz -T -)
rm -rf .gpu-carry && mv .gpu-carry.partial .gpu-carry
mib() { du -cb --apparent-size "$@" | tail -1 | awk '{printf "%.1f", $1 / 1048576}'; }
repo=$(git ls-files -z --cached --others --exclude-standard | du -cb --apparent-size --files0-from=- | tail -1 | awk '{printf "%.1f", $1 / 1048576}')
files=$(git ls-files --cached --others --exclude-standard | wc -l)
total=$(awk "BEGIN {print $repo + $(mib .gpu-carry)}")
echo "MiB: repo $repo ($files files), wheels.tar $(mib .gpu-carry/wheels.tar), mnist.tar.xz $(mib .gpu-carry/mnist.tar.xz), tiny.tar.gz $(mib .gpu-carry/tiny.tar.gz)"
echo "the call carries repo + .gpu-carry = $total MiB in $((files + 3)) files (at most 64 MiB)"
awk "BEGIN {exit !($total <= 64)}" || { echo "prepare.sh: $total MiB is over the 64 MiB a call carries" >&2; exit 1; }
