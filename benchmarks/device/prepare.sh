#!/usr/bin/env bash
# What a lent GPU machine's calls carry, built here once (it has no package index and a call carries
# at most 64 MiB, the repo included): benchmarks/device/README.md says which call takes what.
#   .whl/    the wheels rmconsole needs that the GPU image lacks (image-packages.txt), for Python 3.12
#   .tiny/   the Tiny-ImageNet subset, losslessly packed (pack_tiny.py: same pixels, 20% fewer bytes)
#   .mnist/  MNIST's four files gzipped (the GPU tests and the suite's --cifar-data mnist); gunzip there
# All three are git-ignored (.git/info/exclude), so only a call that names them in `carry` takes them.
# Usage: bash benchmarks/device/prepare.sh [DATA_ROOT]   (default ../shared/data; needs pip access and jpegtran)
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:-../shared/data}
python=${PYTHON:-python3}
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for path in /.whl/ /.tiny/ /.mnist/ /.gpu-home/; do
    grep -qxF "$path" "$exclude" 2>/dev/null || echo "$path" >>"$exclude"
done
if [ ! -d .whl ]; then
    "$python" rmconsole/wheelhouse.py .whl --python 3.12 --skip-from benchmarks/device/image-packages.txt
    rm -f .whl/rmconsole-*.whl # the repo itself travels; PYTHONPATH=$PWD there
fi
[ -d .tiny/tiny-imagenet-200 ] || "$python" benchmarks/device/pack_tiny.py "$data/tiny-imagenet-200" .tiny/tiny-imagenet-200
if [ ! -d .mnist/MNIST/raw ]; then
    mkdir -p .mnist/MNIST/raw.partial
    for f in "$data"/MNIST/raw/*-ubyte; do gzip -9c "$f" >".mnist/MNIST/raw.partial/$(basename "$f").gz"; done
    mv .mnist/MNIST/raw.partial .mnist/MNIST/raw
fi
mib() { du -sb --apparent-size "$@" | awk '{s += $1} END {printf "%.1f", s / 1048576}'; }
repo=$(git ls-files -z --cached --others --exclude-standard | du -cb --apparent-size --files0-from=- | tail -1 | awk '{printf "%.1f", $1 / 1048576}')
echo "MiB: repo $repo, .whl $(mib .whl), .tiny $(mib .tiny), .mnist $(mib .mnist) (a call carries at most 64 in all)"
echo "call A (tests, cifar, slots, imagenet): repo + .whl + .mnist = $(awk "BEGIN {print $repo + $(mib .whl) + $(mib .mnist)}") MiB"
echo "call B (tiny): repo + .whl + .tiny = $(awk "BEGIN {print $repo + $(mib .whl) + $(mib .tiny)}") MiB"
