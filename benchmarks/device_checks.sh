#!/usr/bin/env bash
# The GPU measurements of BENCHMARKS.md ("On a GPU"), in one command for a lent device machine (an NVIDIA H100 or
# H200 whose image holds jax, diffrax, equinox, optax, scikit-learn; flowsim runs from this checkout):
#
# 1. the paper's one-layer Transformer on the 3-AND, m*(T) at T = 16 ... 4096, 20 seeds, the paper's 1000 AdamW
#    steps (and to convergence up to T = 800): one `flowsim sparse sweep` process per T, side by side on the GPU
#    (their compilations run in parallel on the host's cores), each stopped by Ctrl-C at SWEEP_SECONDS, which
#    keeps its finished units; joined afterwards by `sparse.read_sweep`;
# 2. the batched 5-D flow at B = 10^6, d = 400, to t = 100 (benchmarks/flow_throughput.py);
# 3. online SGD against drawing its samples, float64 and float32 (benchmarks/sgd_cost.py);
# 4. the reproduction's SGD chain against its random numbers' floor (benchmarks/chain_floor.py);
# 5. `flowsim reproduce` twice, with an empty compilation cache and then with the first run's;
# 6. where a stiff step's time goes at B = 10^4 ... 10^6, the bare adaptive solve at B = 10^6, and the kernels and
#    bytes of an iteration of solve_flow's loops there (benchmarks/flow_step_profile.py).
#
# Usage: OUT=folder [PARTS="sweep flow sgd chain reproduce profile"] [SWEEP_SECONDS=260 SWEEP_TS="16 64" SEEDS=20
#        BUDGETS=1000,4000] [FLOW_BATCHES=10000,1000000 CHAIN_ARGS=--quick REPRODUCE_ARGS=--quick
#        PROFILE_BATCHES=10000,1000000] bash benchmarks/device_checks.sh
#        (writes sweep.tgz and *.txt into OUT)
set -u
out=${OUT:-/tmp/device-checks}
sweep_seconds=${SWEEP_SECONDS:-260}
sweep_Ts=${SWEEP_TS:-16 32 64 100 128 200 256 400 512 800 1024 2048 4096}
seeds=${SEEDS:-20}
parts=" ${PARTS:-sweep flow sgd chain reproduce profile} "
part() { [[ "$parts" == *" $1 "* ]]; }
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Several processes share the GPU: each takes its memory as it needs it, not 75 % of the card at its start.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
py=${PYTHON:-python3}
stamp() { echo "### $(date +%T) $*"; }

stamp machine
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$py -c "import jax, numpy, sklearn, optax; print('jax', jax.__version__, jax.devices(), 'numpy', numpy.__version__)"
nproc

work=$(mktemp -d)
if part sweep; then
stamp "1. Transformer sweep, one process per T, stopped at ${sweep_seconds} s"
for T in $sweep_Ts; do
    budgets=1000
    [ "$T" -le 800 ] && budgets=1000,converged
    [ -n "${BUDGETS:-}" ] && budgets=$BUDGETS
    timeout -s INT -k 30 "$sweep_seconds" $py -m flowsim.cli sparse sweep --learners transformer \
        --transformer-Ts "$T" --seeds "$seeds" --budgets "$budgets" --erm-trials 200 --yes \
        --out "$work/T$T" >"$work/T$T.log" 2>&1 &
done
wait
stamp "sweep processes done"
tail -n 4 "$work"/T*.log
tar czf "$out/sweep.tgz" -C "$work" .
fi

if part flow; then
    stamp "2. flow throughput, B = ${FLOW_BATCHES:-10000,1000000}"
    timeout -k 10 180 $py benchmarks/flow_throughput.py --batches "${FLOW_BATCHES:-10000,1000000}" --solvers auto \
        --ivp-trajectories 2 2>&1 | tee "$out/flow.txt"
fi

if part sgd; then
    stamp "3. SGD against its draws, float64 then float32"
    for dtype in float64 float32; do
        timeout -k 10 75 $py benchmarks/sgd_cost.py --repeats 2 --dtype "$dtype" 2>&1 | tee "$out/sgd_$dtype.txt"
    done
fi

if part chain; then
    stamp "4. the reproduction's chain against its random numbers"
    timeout -k 10 100 $py benchmarks/chain_floor.py ${CHAIN_ARGS:---seeds 30,3000 --steps 10000 --repeats 1} 2>&1 |
        tee "$out/chain.txt"
fi

if part reproduce; then
    stamp "5. flowsim reproduce, an empty compilation cache, then warm"
    export JAX_COMPILATION_CACHE_DIR="$work/cache"
    for run in cold warm; do
        start=$(date +%s%N)
        timeout -s INT -k 10 100 $py -m flowsim.cli reproduce --out "$work/reproduce-$run" --progress \
            ${REPRODUCE_ARGS:-} >"$out/reproduce_$run.txt" 2>&1
        rc=$?
        echo "reproduce $run: exit $rc, $(( ($(date +%s%N) - start) / 1000000 )) ms" >>"$out/reproduce_$run.txt"
        tail -n 25 "$out/reproduce_$run.txt"
    done
fi
if part profile; then
    stamp "6. a stiff step's parts, then the bare adaptive solve"
    batches=${PROFILE_BATCHES:-10000,100000,1000000}
    timeout -k 10 150 $py benchmarks/flow_step_profile.py --batches "$batches" 2>&1 | tee "$out/profile.txt"
    timeout -k 10 150 $py benchmarks/flow_step_profile.py --batches "${batches##*,}" --repeats 1 --adaptive 2>&1 |
        tee "$out/adaptive.txt"
    # The kernels one iteration of solve_flow's loops launches, and the bytes they move (issue 57, item 3).
    timeout -k 10 150 $py benchmarks/flow_step_profile.py --batches "${batches##*,}" --kernels 2>&1 |
        tee "$out/kernels.txt"
fi
stamp done
