#!/usr/bin/env bash
# Horovod's own test_torch.py on CUDA through ddlrun, as issue 30's done-when runs it: 2 ranks
# sharing the one GPU (two emulated nodes, each with local rank 0 on cuda:0), then 1 rank.
#
#   OUT=/tmp/out benchmarks/gpu_horovod_torch.sh     # from the project root
#
# HOROVOD_SUITE: the folder holding parallel/test_torch.py (default .conformance/horovod, a copy
# of ../shared/conformance/horovod: see ../shared/gpu/README.md). Each run has a time limit
# (LIMIT2, LIMIT1 seconds); the logs and one summary line per run go under $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-checks}
mkdir -p "$OUT"
SUITE=${HOROVOD_SUITE:-$PWD/.conformance/horovod}
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
{ nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; } \
    >> "$OUT/summary.txt" 2>&1
cd "$SUITE" || exit 2
PYTEST=(python3 -m pytest -q -rs -p no:cacheprovider -o addopts="" parallel/test_torch.py)
timeout "${LIMIT2:-200}" ddlrun --horovod -n 2 --emulate-nodes 2 --ranks-per-gpu 2 "${PYTEST[@]}" \
    > "$OUT/test_torch_2ranks_shared.log" 2>&1
echo "test_torch.py, 2 ranks sharing the GPU: exit $?; $(grep -E '[0-9]+ (passed|failed)' "$OUT/test_torch_2ranks_shared.log" | tr '\n' ' ')" \
    | tee -a "$OUT/summary.txt"
timeout "${LIMIT1:-120}" ddlrun --horovod -n 1 "${PYTEST[@]}" > "$OUT/test_torch_1rank.log" 2>&1
echo "test_torch.py, 1 rank: exit $?; $(grep -E '[0-9]+ (passed|failed)' "$OUT/test_torch_1rank.log" | tr '\n' ' ')" \
    | tee -a "$OUT/summary.txt"
