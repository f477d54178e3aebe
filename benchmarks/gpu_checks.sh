#!/usr/bin/env bash
# Every GPU check of the project against its limit (issues 38, 39, 41, 42, 48), in two parts of about
# 5 minutes each on one NVIDIA GPU, the most valuable first (issue 48: a lent GPU machine has 15 minutes,
# of which each start takes one to two):
#
#   benchmarks/gpu_checks.sh part1    # Large Model Support's timed lines (ResNet-152 throughput, the
#                                     # GPT-2-medium decoder at 4x its batch, the batch-64 overhead), the
#                                     # ranks-sharing training ratios under CUDA MPS and time-sliced (one
#                                     # baseline; ddlrun --gpu-sharing starts MPS's daemon) and the ResNet-50 step
#   benchmarks/gpu_checks.sh part2    # every correctness check side by side (LMS's untimed lines,
#                                     # collectives, helpers, NCCL, Horovod's test_torch.py, the sweep),
#                                     # then the transfer bounds, one at a time (the ipc route's under MPS
#                                     # and time-sliced)
#   benchmarks/gpu_checks.sh          # both parts, one after the other (about 10 minutes)
#   benchmarks/gpu_checks.sh lms-timed collectives-1-rank   # just those entries
#   benchmarks/gpu_checks.sh --cpu    # the smoke run CI does (tests/runtime/test_gpu_checks_cmd.py):
#                                     # the entries with a CPU mode, on CPU, no limits
#
# Timed entries run alone on the GPU; the entries between `together` and `apart` measure no time and
# run side by side (at most GPU_CHECKS_WIDTH at once, default 6; one at a time with --cpu).  Each part
# keeps to GPU_CHECKS_BUDGET_S (default 290 s a part; an entry's limit never reaches past it, and an
# entry the budget left no time for is a FAIL line).
#
# Prints one line per check: NAME  FIGURE  LIMIT  PASS|FAIL, then "N checks, M failed"; exits 1 on
# any miss (a run that fails, times out or reports nothing is a FAIL line of its own).  Under $OUT:
# results.jsonl (every CHECK line), checks.log (every run's output), summary.txt (the machine, the
# commit (WML_COMMIT where the tree has no .git), /dev/shm's room, the table).  Prepare the GPU machine
# as ../shared/gpu/README.md says (.whl/ wheels are installed here, keras and its dependencies among
# them for the helpers' Keras line; Horovod's suite in $HOROVOD_SUITE, default .conformance/horovod).
#
# Adding a check: one `entry` line below (name, time limit in seconds, gpu|both, then the command).
# The command prints `CHECK {"name", "figure", "limit", "pass"}` lines (benchmarks/_checks.py);
# `--cpu` is appended to it in the smoke run, which skips gpu-only entries.
set -u
cd "$(dirname "$0")/.."
CPU=0
ONLY=" "   # entry names given as arguments: run just those
PARTS=" "  # part1 / part2: run that part (none named, no entry named: both)
for a in "$@"; do
    case "$a" in
        --cpu) CPU=1 ;;
        part1|part2) PARTS+="$a " ;;
        *) ONLY+="$a " ;;
    esac
done
[ "$PARTS" = " " ] && PARTS=" part1 part2 "
OUT=${OUT:-$PWD/gpu-checks}
mkdir -p "$OUT"
if [ "$CPU" = 0 ] && compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps .whl/*.whl > "$OUT/pip.log" 2>&1
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
MPIEXEC=$(command -v mpiexec || echo "$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/mpiexec")
SHIM=$(python3 -c "from ddl_runtime.horovod.shim import SHIM_DIR; print(SHIM_DIR)")
SUITE=${HOROVOD_SUITE:-$PWD/.conformance/horovod}
GPU="-genv CUDA_VISIBLE_DEVICES 0"  # every rank on the one GPU
[ "$CPU" = 1 ] && GPU=""
M1="$MPIEXEC -n 1 $GPU"
M2="$MPIEXEC -n 2 $GPU"
HOST="-genv DDL_GPU_TRANSPORT host"
# two ranks on the one GPU through ddlrun, under CUDA MPS (ddlrun starts one control daemon before the
# ranks and stops it after them, issue 57) and time-sliced, for the sharing lines side by side; on CPU
# (no GPU to share) the time-sliced lines run as before, through mpiexec, and the MPS lines not at all
DDLRUN2="python3 -m wmlce_tools.ddlrun.cli --mpiexec $MPIEXEC --no-prefix -n 2 --ranks-per-gpu 2"
MPS="$DDLRUN2 --gpu-sharing mps --"
SLICED="$DDLRUN2 --gpu-sharing time-slice --"
[ "$CPU" = 1 ] && SLICED="$M2"
CHECKS="python3 benchmarks/gpu_checks.py"
# the commit: WML_COMMIT where it is given (a copied tree may carry another checkout's .git), else git's
{ if [ -n "${WML_COMMIT:-}" ]; then echo "commit $WML_COMMIT (WML_COMMIT)"
  else echo "commit $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (dirty)')"; fi
  [ "$CPU" = 1 ] && echo "--cpu smoke run" || nvidia-smi -L
  [ "$CPU" = 1 ] || echo "MPS control: $(command -v nvidia-cuda-mps-control || echo 'nvidia-cuda-mps-control not found: the -mps lines fail')"
  python3 -m wmlce_tools.ddlrun.cli --version 2>&1 | tail -1      # the -mps lines and the sharing lines run through it
  df -h /dev/shm | tail -1
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  "$MPIEXEC" --version | head -1; } > "$OUT/summary.txt" 2>&1
: > "$OUT/results.jsonl"; : > "$OUT/checks.log"

PART_BUDGET=${GPU_CHECKS_BUDGET_S:-290}  # each part fits 5 minutes: a limit never reaches past it
[ "$CPU" = 1 ] && PART_BUDGET=${GPU_CHECKS_BUDGET_S:-1500}  # a loaded CI machine: 3x each limit
WIDTH=${GPU_CHECKS_WIDTH:-6}
[ "$CPU" = 1 ] && WIDTH=1
BUDGET=$PART_BUDGET
SECONDS=0
part() {  # name: the entries that follow belong to it (each part has its own budget)
    PART=$1
    BUDGET=$((SECONDS + PART_BUDGET))
}

limit_of() {  # an entry's limit within what is left of the budget (0: nothing left)
    local limit=$1
    [ "$CPU" = 1 ] && limit=$((limit * 3))
    local left=$((BUDGET - SECONDS))
    [ "$left" -lt "$limit" ] && limit=$left
    [ "$limit" -lt 0 ] && limit=0
    echo "$limit"
}

over_budget() {  # name: the line of an entry the budget left no time for
    python3 benchmarks/_checks.py missing "$1" 125 "$BUDGET" | sed 's/no result (exit 125)/not run: the budget was spent/' \
        | tee -a "$OUT/results.jsonl" | python3 benchmarks/_checks.py table --quiet-total
}

TOGETHER=0   # between `together` and `apart`: entries run side by side
N=0          # entries started: each has its own log and lines file, read back in order

together() { TOGETHER=1; }
apart() {    # wait for the side-by-side entries, then report them in the order they were started
    wait
    TOGETHER=0
    report_done
}

report_done() {
    local f
    for f in $(ls -a "$OUT" | grep -E '^\.lines-[0-9]+$' | sort -t- -k2 -n); do
        f="$OUT/$f"
        cat "$f" >> "$OUT/checks.log.tmp" 2>/dev/null
        grep -v '^$' "${f}.jsonl" | tee -a "$OUT/results.jsonl" | python3 benchmarks/_checks.py table --quiet-total
        rm -f "$f" "${f}.jsonl"
    done
    [ -f "$OUT/checks.log.tmp" ] && { cat "$OUT/checks.log.tmp" >> "$OUT/checks.log"; rm -f "$OUT/checks.log.tmp"; }
}

wanted() {  # name: whether this entry is to run (its part, or named on the command line)
    [[ "$PARTS" == *" $PART "* ]] || [ "$ONLY" != " " ] || return 1
    [ "$ONLY" != " " ] && [[ "$ONLY" != *" $1 "* ]] && return 1
    return 0
}

entry() {  # name limit_s gpu|both -- command...
    local name=$1 want=$2 where=$3 limit; shift 4
    wanted "$name" || return
    [ "$CPU" = 1 ] && [ "$where" = gpu ] && return
    limit=$(limit_of "$want")
    [ "$limit" -lt 5 ] && { over_budget "$name"; return; }
    N=$((N + 1))
    if [ "$TOGETHER" = 1 ]; then
        while [ "$(jobs -rp | wc -l)" -ge "$WIDTH" ]; do sleep 0.2; done
        run_entry "$N" "$name" "$limit" "$@" &
    else
        run_entry "$N" "$name" "$limit" "$@"
        report_done
    fi
}

run_entry() {  # n name limit command...: its output to .lines-n, its CHECK lines to .lines-n.jsonl
    local n=$1 name=$2 limit=$3 rc lines extra=(); shift 3
    local log="$OUT/.run-$n.log"
    [ "$CPU" = 1 ] && extra=(--cpu)
    timeout -k 10 "$limit" "$@" "${extra[@]}" > "$log" 2>&1
    rc=$?
    { echo "== $name (exit $rc): $*"; cat "$log"; } > "$OUT/.lines-$n.part"
    lines=$(grep '^CHECK ' "$log")
    if [ -z "$lines" ] || { [ "$rc" != 0 ] && ! grep -q '"pass": false' <<< "$lines"; }; then
        lines+=$'\n'$(python3 benchmarks/_checks.py missing "$name" "$rc" "$limit")
    fi
    printf '%s\n' "$lines" > "$OUT/.lines-$n.part.jsonl"
    rm -f "$log"
    mv "$OUT/.lines-$n.part.jsonl" "$OUT/.lines-$n.jsonl" && mv "$OUT/.lines-$n.part" "$OUT/.lines-$n"
}

suite() {  # name limit_s known-failures-file|"" -- launcher...: Horovod's test_torch.py
    local name=$1 want=$2 known=$3 limit; shift 4
    [ "$CPU" = 1 ] && return
    wanted "$name" || return
    limit=$(limit_of "$want")
    [ "$limit" -lt 5 ] && { over_budget "$name"; return; }
    N=$((N + 1))
    if [ "$TOGETHER" = 1 ]; then
        while [ "$(jobs -rp | wc -l)" -ge "$WIDTH" ]; do sleep 0.2; done
        run_suite "$N" "$name" "$limit" "$known" "$@" &
    else
        run_suite "$N" "$name" "$limit" "$known" "$@"
        report_done
    fi
}

run_suite() {
    local n=$1 name=$2 limit=$3 known=$4; shift 4
    local log="$OUT/.suite-$n.log"
    ( cd "$SUITE" && timeout -k 10 "$limit" "$@" python3 -m pytest -q -rf -p no:cacheprovider -o addopts="" \
        parallel/test_torch.py ) > "$log" 2>&1
    local rc=$?
    { echo "== $name (exit $rc)"; cat "$log"; } > "$OUT/.lines-$n.part"
    { python3 benchmarks/_checks.py suite "$name" "$log" $known
      [ "$rc" = 124 ] && python3 benchmarks/_checks.py missing "$name" "$rc" "$limit"; } > "$OUT/.lines-$n.part.jsonl"
    rm -f "$log"
    mv "$OUT/.lines-$n.part.jsonl" "$OUT/.lines-$n.jsonl" && mv "$OUT/.lines-$n.part" "$OUT/.lines-$n"
}

# == part 1: the timed lines, alone on the GPU, most valuable first ==================================
part part1
# issue 42 / 48: LMS's timed lines (ResNet-152 batch 256 in 16 GiB vs uncapped; the GPT-2-medium decoder
# at 4x the batch that fits without LMS vs uncapped, results equal; batch 64 on vs off)
entry lms-timed                175 gpu  -- python3 benchmarks/lms_bench.py --only throughput,gpt,overhead
# ranks sharing the GPU against one rank with their batch (one baseline for every route), under CUDA MPS
# and time-sliced side by side (issue 57), each with ddl_runtime's and horovod's DistributedOptimizer; each
# line names how the GPU was shared, as the MPS daemon says (an MPS run without an MPS server fails)
entry resnet-1x128-alone        40 both -- $M1 python3 benchmarks/gpu_train_ratio.py alone --baseline "$OUT/resnet_alone.json"
entry resnet-2x64-shared-mps    50 gpu  -- $MPS python3 benchmarks/gpu_train_ratio.py shared --baseline "$OUT/resnet_alone.json"
entry resnet-2x64-shared        50 both -- $SLICED python3 benchmarks/gpu_train_ratio.py shared --baseline "$OUT/resnet_alone.json"
# the host transport's training (issue 38 item 2: allreduce_n_async overlapping with backward there too);
# its limit is a first target, half the 4.1-4.4x the host route took before it overlapped
entry resnet-2x64-shared-host   50 gpu  -- $M2 $HOST python3 benchmarks/gpu_train_ratio.py shared --limit 2.2 \
    --baseline "$OUT/resnet_alone.json"
entry resnet-step-1-rank        45 both -- env PYTHONPATH="$SHIM:$PYTHONPATH" $M1 python3 benchmarks/gpu_resnet_step.py

# == part 2: correctness side by side, then the transfer bounds alone ==================================
part part2
together
entry lms-untimed              200 gpu  -- python3 benchmarks/lms_bench.py --only largest,gpt_largest,equal,wmlce,ranks
suite test_torch-2-ranks-sharing 150 "" -- env PYTHONPATH="$SHIM:$PYTHONPATH" \
    "$MPIEXEC" -n 2 -genv DDL_EMULATE_NODES 2 -genv CUDA_VISIBLE_DEVICES 0
# known at one rank: the 14 that fail on CPU too, and test_horovod_sync_batch_norm (at one rank its second
# input has one value per channel, which torch's own BatchNorm1d refuses: it fails with any implementation)
suite test_torch-1-rank 100 "$PWD/benchmarks/horovod_torch_1rank_known_failures.txt" -- \
    env PYTHONPATH="$SHIM:$PYTHONPATH" "$MPIEXEC" -n 1 -genv CUDA_VISIBLE_DEVICES 0
entry collectives-2-ranks       60 both -- $M2 $CHECKS collectives                 # ipc: ranks on one GPU
entry collectives-2-ranks-host  60 both -- $M2 $HOST $CHECKS collectives           # host staging
entry collectives-1-rank        45 both -- $M1 $CHECKS collectives
entry forced-nccl-shared        40 gpu  -- $M2 -genv DDL_GPU_TRANSPORT nccl $CHECKS forced-nccl
entry optimizer-2-ranks         45 both -- $M2 $CHECKS optimizer
entry nccl-code-1-rank          45 gpu  -- $M1 $CHECKS nccl-code
entry nccl-ops-1-rank           60 gpu  -- $M1 $CHECKS nccl-ops                   # hvd's other collectives on NCCL
entry helpers-2-ranks           60 both -- $M2 $CHECKS helpers
entry sweep-1gpu-trials         90 gpu  -- python3 benchmarks/gpu_sweep_check.py  # issue 39: packed one-GPU trials
apart
# the transfer figures: the device route under CUDA MPS and time-sliced (issue 57), the host-staging
# bounds (issue 30's limits), alone
entry device-bound-2-ranks-mps  40 gpu  -- $MPS $CHECKS device-bound
entry device-bound-2-ranks      40 both -- $SLICED $CHECKS device-bound
entry bound-2-ranks-host        40 both -- $M2 $HOST $CHECKS bound
entry hvd-bound-2-ranks-host    45 both -- $M2 $HOST $CHECKS hvd-bound

echo "--" >> "$OUT/summary.txt"
python3 benchmarks/_checks.py table < "$OUT/results.jsonl" | tee -a "$OUT/summary.txt" | tail -1
python3 benchmarks/_checks.py table < "$OUT/results.jsonl" > /dev/null
