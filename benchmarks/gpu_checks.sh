#!/usr/bin/env bash
# The runtime's CUDA collectives and the host-staging bound on a machine with one NVIDIA GPU, in one go.
#
#   benchmarks/gpu_checks.sh          # from the project root; results under $OUT (default ./gpu-checks)
#
# Prepare the machine as /work/shared/gpu/README.md says (wheels of mpich, mpi4py, msgspec,
# platformdirs, python-hostlist in .whl/ when the machine has no package index; they are
# installed here).  Runs, each with a time limit:
#   1. collectives, 2 ranks sharing the GPU (host staging): six dtypes through allreduce (sum/avg/min/max),
#      allreduce_n, allreduce_n_async, allreduce_n_into, allreduce_n_fresh, bcast, allgather with
#      different first dims, and a mixed-device group on one rank (one line on every rank);
#   2. the same at one rank (the identity);
#   3. DDL_GPU_TRANSPORT=nccl on the shared GPU: the one-line refusal on every rank;
#   4. ddl_runtime.torch.DistributedOptimizer, 2 ranks sharing the GPU, against a one-process reference;
#   5. gpu/nccl.py's collectives and horovod.torch's device route on CUDA through a real NCCL group, at one
#      rank (NCCL refuses two ranks on one GPU: the NCCL transport across ranks needs two GPUs);
#      then (nccl-ops) hvd's allgather, broadcast, alltoall, reducescatter there, and the host-staged
#      allgather/alltoall outputs pinned;
#   6. the bound: host-staged allreduce of 64 MB and 4 MB against pinned D2H + host allreduce + H2D;
#   7. hvd-bound: horovod.torch's hvd.allreduce of the same CUDA tensors against the same bound;
#   8. sweep-1gpu-trials (unverified until run on a GPU): `wml sweep` of 4 one-GPU trials packed on this host
#      (the local site): each trial holds one GPU, not the node (CUDA_VISIBLE_DEVICES = its GPU; on a 1-GPU
#      host they run one after another), every trial COMPLETED with its metrics (wml sweep show --format json).
#   9. Horovod's test_torch.py at one rank (its CUDA tensors on the NCCL device route), where the suite
#      is at $HOROVOD_SUITE (default .conformance/horovod; log: test_torch_1rank_nccl.log).
# Writes under $OUT: results.jsonl (rank 0's RESULT line of each run), checks.log (all output, by run),
# summary.txt (the machine and each run's exit status), pip.log.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-checks}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps .whl/*.whl > "$OUT/pip.log" 2>&1
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
MPIEXEC=$(command -v mpiexec || echo "$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/mpiexec")
{ nvidia-smi -L; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"; "$MPIEXEC" --version | head -2; } > "$OUT/summary.txt" 2>&1

run() {  # name, ranks, limit_s, extra mpiexec args..., -- check
    local name=$1 n=$2 limit=$3; shift 3
    local args=()
    while [ "$1" != "--" ]; do args+=("$1"); shift; done
    shift
    local log="$OUT/.$name.log"
    timeout "$limit" "$MPIEXEC" -n "$n" -genv CUDA_VISIBLE_DEVICES 0 "${args[@]}" python3 benchmarks/gpu_checks.py "$@" \
        > "$log" 2>&1
    local rc=$?
    { echo "== $name (exit $rc)"; cat "$log"; } >> "$OUT/checks.log"
    grep '^RESULT ' "$log" | sed "s/^RESULT {/{\"run\": \"$name\", \"exit\": $rc, /" >> "$OUT/results.jsonl"
    rm -f "$log"
    echo "$name: exit $rc" | tee -a "$OUT/summary.txt"
}
: > "$OUT/results.jsonl"; : > "$OUT/checks.log"
run collectives-2-ranks 2 180 -- collectives
run collectives-1-rank 1 90 -- collectives
run forced-nccl-shared 2 90 -genv DDL_GPU_TRANSPORT nccl -- forced-nccl
run optimizer-2-ranks 2 90 -- optimizer
run nccl-code-1-rank 1 90 -- nccl-code
run nccl-ops-1-rank 1 120 -- nccl-ops
run bound-2-ranks 2 150 -- bound
run hvd-bound-2-ranks 2 150 -- hvd-bound
run_sweep() {
    local work; work=$(mktemp -d)
    { echo "== sweep-1gpu-trials"
      WML_JOBS_DIR=$work/jobs WML_DATA_DIR=$work/data timeout 300 python3 -m wmlce_tools sweep --gpus-per-rank 1 \
          --seeds 4 --json python3 "$PWD/benchmarks/_sweep_gpu_trial.py" > "$work/sweep.json" 2> "$work/sweep.err"
      echo "exit $?"; tail -5 "$work/sweep.err"
      run_id=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['run_id'])" "$work/sweep.json")
      WML_JOBS_DIR=$work/jobs WML_DATA_DIR=$work/data python3 -m wmlce_tools sweep show "$run_id" --format json
    } >> "$OUT/checks.log" 2>&1
    echo "sweep-1gpu-trials: see checks.log" | tee -a "$OUT/summary.txt"
}
run_sweep
# Horovod's test_torch.py at one rank: its CUDA tensors take the NCCL device route (a group of one)
SUITE=${HOROVOD_SUITE:-$PWD/.conformance/horovod}
if [ -f "$SUITE/parallel/test_torch.py" ]; then
    (cd "$SUITE" && timeout 300 python3 -m wmlce_tools.ddlrun.cli --horovod -n 1 python3 -m pytest -q -rs \
        -p no:cacheprovider -o addopts="" parallel/test_torch.py) > "$OUT/test_torch_1rank_nccl.log" 2>&1
    echo "test_torch-1-rank-nccl: exit $?; $(grep -E '[0-9]+ (passed|failed)' "$OUT/test_torch_1rank_nccl.log" | tail -1)" \
        | tee -a "$OUT/summary.txt"
fi
