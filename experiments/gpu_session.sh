#!/usr/bin/env bash
# Everything that needs a GPU, in as few device calls as the 10-minute per-call limit allows.
#
#   bash experiments/gpu_session.sh all               # issue 39's next call (~8 min): tests_csr, bench_csr, csr_tune
#                                                     # (the calibration grid is done: results/gpu/h200/; stage
#                                                     # `calibrate` times only what that file lacks)
#   QUICK=1 bash experiments/gpu_session.sh all       # CPU dry run of the same stages (tiny sizes; tests collected only)
#   bash experiments/gpu_session.sh tests bench       # GPU test classes + kernel benchmark (all impls, tile keep 1.0:
#                                                     # the issue-19 "summary" incl. the Pallas CSR kernel, cuSPARSE)
#   bash experiments/gpu_session.sh bench_learned     # the BSR / CSR rows at the learned BlockEdgeMask tile keeps
#   bash experiments/gpu_session.sh csr_tune          # CsrBlockSizes sweep of the Pallas CSR kernel (scale 20, F = 128)
#   bash experiments/gpu_session.sh validate ugs      # h100 cost-model validation + UGS on Cora
#
# The validation grid is cut to SpMMs of <= 1.5e8 edge-features (--max-work): the full grid ran
# past the 350 s stage limit on an H100 (where the time went was not measured).
#
# Runs from the repository root with the package on PYTHONPATH (nothing is installed); Cora is
# read from $CODESIGN_DATA (default: .devdata, a copy of ../shared/data carried with the call).
# Each stage has its own time limit so that one hang leaves the others' results; logs and
# results go to $OUT (default results/gpu). Results are then committed under results/gpu/.
set -u
OUT=${OUT:-results/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CODESIGN_DATA=${CODESIGN_DATA:-$PWD/.devdata}
PY=${PY:-python3}
# h200 on an H200, else h100 (names the kernel benchmark's output)
GPU_TAG=${GPU_TAG:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200 && echo h200 || echo h100)}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  $PY -c "import jax, jaxlib, flax, optax; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'flax', flax.__version__, 'optax', optax.__version__); print(jax.devices())"
} 2>&1 | tee "$OUT/env.txt"

# Device loops (kernel_bench.device_loop) need XLA:GPU's while-loop unrolling off; set only where this
# jaxlib knows the flag (an unknown XLA flag aborts every process)
NO_UNROLL=--xla_gpu_enable_while_loop_unrolling=WHILE_LOOP_UNROLLING_NO_UNROLL
if XLA_FLAGS="${XLA_FLAGS:-} $NO_UNROLL" $PY -c "import jax; jax.devices()" >/dev/null 2>&1; then
  export XLA_FLAGS="${XLA_FLAGS:-} $NO_UNROLL"
fi
echo "XLA_FLAGS=${XLA_FLAGS:-}" | tee -a "$OUT/env.txt"
# QUICK=1: every stage at tiny sizes with short limits (the CPU dry run in tests/test_csr_experiments.py)
Q=${QUICK:+--quick}
[ $# -eq 1 ] && [ "$1" = all ] && set -- tests_csr bench_csr csr_tune
for stage in "$@"; do
  echo "=== $stage $(date -u +%T)"
  case "$stage" in
    tests)
      timeout 270 $PY -m pytest -o addopts="" -q -p no:cacheprovider -k "Gpu or GPU or dispatch or aggregate or tf32" \
        ${TEST_FILES:-tests/test_pallas_spmm.py tests/test_pallas_condensed.py tests/test_pallas_gat.py tests/test_pallas_csr.py tests/test_kernels.py} \
        2>&1 | tee "$OUT/pytest_gpu.log" | tail -25 ;;
    bench_csr)  # issue 39's kernel table: R-MAT 2^20, segment_sum, cuSPARSE, Pallas CSR f32 / bf16 / int8, no BSR
      timeout 200 $PY experiments/kernel_bench.py ${Q:---scale 20 --edges 8000000} --graphs rmat --tile-keep 1.0 \
        --impls segment,bcsr,pallas_csr,pallas_csr_bf16,pallas_csr_int8 --inner 10 --reps 3 \
        --out "$OUT/kernel_bench_csr_$GPU_TAG.json" 2>&1 | tee "$OUT/kernel_bench_csr.log" | grep -v "it/s\]" | tail -30 ;;
    calibrate)  # device-timed calibration grid + NVML energy for the h100 / h200 preset
      timeout 170 $PY experiments/gpu_calibrate.py $Q ${Q:---resume results/gpu/h200/gpu_calibration.json} \
        --out "$OUT/gpu_calibration_$GPU_TAG.json" \
        2>&1 | tee "$OUT/gpu_calibration.log" | tail -12 ;;
    tests_csr)  # the Pallas CSR kernel's GPU classes, compiled (not interpreted), against references
      timeout 90 $PY -m pytest -o addopts="" -q -p no:cacheprovider ${Q:+--collect-only} -k "Gpu or GPU" \
        tests/test_pallas_csr.py 2>&1 | tee "$OUT/pytest_gpu_csr.log" | tail -15 ;;
    bench)
      timeout 300 $PY experiments/kernel_bench.py --scale 20 --edges 8000000 --tile-keep 1.0 \
        --out "$OUT/kernel_bench_$GPU_TAG.json" 2>&1 | tee "$OUT/kernel_bench.log" | grep -v "it/s\]" | tail -40 ;;
    bench_learned)
      timeout 300 $PY experiments/kernel_bench.py --scale 20 --edges 8000000 --tile-keep learned \
        --out "$OUT/kernel_bench_learned_$GPU_TAG.json" 2>&1 | tee "$OUT/kernel_bench_learned.log" | grep -v "it/s\]" | tail -40 ;;
    csr_tune)  # writes after every candidate
      timeout 200 $PY experiments/csr_tune.py $Q --inner 10 --reps 3 --out "$OUT/csr_tune_$GPU_TAG.json" \
        2>&1 | tee "$OUT/csr_tune.log" | tail -20 ;;
    validate)
      timeout 350 $PY experiments/hwmodel_validation.py --hw h100 --max-work 1.5e8 --reps 10 --out "$OUT/hwmodel_validation_h100.json" \
        2>&1 | tr '\r' '\n' | grep -v "kernel/s\]\|s/kernel\]" | tee "$OUT/validation.log" | tail -12 ;;
    ugs)
      timeout 200 $PY experiments/ugs_baseline.py --rounds 8 --seeds 5 --out "$OUT" \
        2>&1 | tr '\r' '\n' | grep -v "run/s\]\|s/run\]" | tee "$OUT/ugs.log" | tail -14 ;;
    *) echo "unknown stage $stage" ;;
  esac
done
echo "=== done $(date -u +%T)"
