#!/usr/bin/env bash
# Ray for the GPU machine, which has no package index and takes at most 64 MiB a call with the
# working tree: Ray's cp312 wheel unpacked without what the judge's pool never loads (ray/jars, the
# Java workers; ray/dashboard/client/build, the dashboard's web page; the libraries rllib, data,
# serve, train, tune and llm), packed with xz,
# and the wheels of Ray's needs that machine lacks. Run here, in the repository's root (about two
# minutes on 2 cores); the result goes to the ignored folder .whl, which pool_gpu.sh reads (the
# device tool's `carry`).
#
#   bash benchmarks/ray_wheel.sh [RAY_VERSION]   # default 2.60.0
set -euo pipefail
cd "$(dirname "$0")/.."  # the repository's root: .whl goes there
version=${1:-2.60.0}
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d "$tmp/w" "ray==$version"
# Ray's needs missing on the GPU machine (its image has the others: click, filelock, msgpack, packaging, protobuf, pyyaml,
# requests, attrs, typing-extensions), at the versions that ran there with Ray 2.60.0
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 -d "$tmp/deps" jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 \
    rpds-py==2026.9.1
mkdir -p "$tmp/site" .whl
unzip -q "$tmp"/w/ray-*.whl -d "$tmp/site"  # unzip keeps the executables' mode (raylet, gcs_server)
rm -rf "$tmp/site/ray/jars" "$tmp/site/ray/dashboard/client/build" "$tmp/site/ray/rllib" "$tmp/site/ray/data" "$tmp/site/ray/serve" \
    "$tmp/site/ray/train" "$tmp/site/ray/tune" "$tmp/site/ray/llm"  # Ray's libraries: the pool imports none
tar -C "$tmp/site" -cf - . | xz -9 -T0 > .whl/ray_min.tar.xz
rm -f .whl/*.whl
cp "$tmp"/deps/*.whl .whl/
ls -l .whl
du -cb .whl/* | tail -1
