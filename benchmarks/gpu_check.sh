#!/usr/bin/env bash
# The CUDA paths of ratioscope in one command (benchmarks/gpu_check.py): the tests marked
# cuda, the Kalman filter and bench_analyze.py on the GPU against its copy bandwidth, and
# the CPU and CUDA reports of the bundled run and a 1 GiB synthetic dump compared key by
# key; one summary table. Installs nothing: run it after the README's install commands
# (or, on a machine without a package index, with the packages it names installed).
# Without a CUDA device it prints one line and exits 0.
#
#   bash benchmarks/gpu_check.sh
#   bash benchmarks/gpu_check.sh --skip-bench
set -euo pipefail
cd "$(dirname "$0")/.."
# this checkout first on the path: the check runs the tree it is in, installed or not
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python="${PYTHON:-python}"
if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no CUDA device (torch.cuda.is_available() is False): skipped"
  exit 0
fi
exec "$python" benchmarks/gpu_check.py "$@"
