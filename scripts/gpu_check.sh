#!/usr/bin/env bash
# The GPU check of issue 6 in one prepared run (benchmarks/gpu_validate.py), for a session that has
# the device machine. That machine has PyTorch, torchvision, transformers, numpy, scipy and networkx
# but not OR-Tools: its wheels (built for its Python 3.12) travel in .whl, ignored by git.
#
#   bash scripts/gpu_check.sh prepare      # here: download the wheels into .whl (needs PyPI)
#   device run, carry [".whl"], timeout_s 540, command:
#     bash scripts/gpu_check.sh run        # there: install the wheels, run the CUDA tests and the check into $OUT
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
prepare)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
    mkdir -p .whl
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl \
        ortools==9.15.6755 immutabledict==4.3.1 protobuf==6.33.1
    ls -la .whl
    ;;
run)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
    out="${OUT:-gpu_validate}"
    mkdir -p "$out"
    # the CUDA paths' tests first (seconds), then the benchmark; both inside the 540 s device call
    timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_execute_cuda.py 2>&1 | tee "$out/tests.txt" || true
    timeout 420 python3 benchmarks/gpu_validate.py --budget-s 330 --out "$out" 2>&1 | tee "$out/log.txt" || true
    ;;
*)
    echo "usage: $0 prepare|run" >&2
    exit 2
    ;;
esac
