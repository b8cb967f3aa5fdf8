#!/usr/bin/env bash
# Everything commrt runs on a GPU machine, in one call:
#   bash benchmarks/gpu_run.sh [stage ...]   stages: env tests onegpu multigpu tune tunear tunefused tuneag tuners fxgrid bench benchops cli decode fxoverlap fxoverlaptp copyengine scatter scattersweep scatternarrow scattergrid overhead
# (onegpu: the one-GPU suite, pytest -m gpu; its summary is kept as
#  benchmarks/results/gpu_tests_<device>.txt, a copy in $OUT; multigpu: the tests that
#  need every GPU of the machine, pytest -m multigpu, kept as gpu_tests_<device>_ws<N>.txt;
#  on 2 x H200 it takes over 600 s: TESTS_K=test_gpu_allreduce, then TESTS_K="not
#  test_gpu_allreduce", in two calls)
# (env: TESTS_K=expr selects GPU tests, ONEGPU_APART="tests/x.py ..." runs those test files
#  in a second pytest beside the rest, ONEGPU_ONLY="tests/x.py ..." runs only those files,
#  each in its own pytest beside the others, kept as gpu_tests_${ONEGPU_LABEL:-subset}_<device>.txt,
#  ONEGPU_ARGS adds pytest options (e.g. "-n 3"), DECODE_ARGS / BENCH_ARGS add bench_tp_decode.py /
#  bench_allreduce.py options, FX_ARGS / TP_ARGS add bench_fx_overlap.py options (without /
#  with --tp), CE_ARGS
#  bench_copy_engine.py options, GRID_CELLS the overlap grid's cells (fxgrid) and FXGRID_ARGS
#  its other options (e.g. "--grid-rows late;cap=256"), GRID_ARGS bench_scatter.py --grid options (e.g.
#  "--widths 0,1,4,16" then "--widths 100,1024,4096 --update": the grid in two calls;
#  "--widths 4 --rows 1024 --ops index_put --dtypes bfloat16 --update": one group again;
#  "--ops scatter_add": the same grid of scatter_add, in a file of its own),
#  STAGE_TIMEOUT=seconds caps each stage's command)
# (default: env tests tune bench cli decode)
# Logs and results go to $OUT (or ./gpu_out) as log.txt plus results.tar.gz (a second call
# into the same $OUT adds to it).
# GIT_COMMIT names the commit where the copy is not a git checkout.
# NVLink multicast stays OFF: these three are exported here and never unset.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
set -uo pipefail
OUT=${OUT:-$PWD/gpu_out}
RES=$OUT/results
mkdir -p "$RES"
# a later call into the same $OUT keeps what the earlier ones left in results.tar.gz
[ -f "$OUT/results.tar.gz" ] && tar -C "$OUT" -xzf "$OUT/results.tar.gz"
LOG=$OUT/log.txt
NGPU=$(python3 -c 'import torch; print(torch.cuda.device_count())')
STAGES=${*:-env tests tune bench cli decode}
# The table outlives one call (a warm machine keeps /tmp), so tune and bench may be split.
TABLE=${GPU_RUN_TABLE:-/tmp/commrt_gpu/table.json}
mkdir -p "$(dirname "$TABLE")"
say() { echo "=== $* ($(date -u +%H:%M:%S))" | tee -a "$LOG"; }
run() { timeout "${STAGE_TIMEOUT:-0}" "$@" 2>&1 | tee -a "$LOG"; echo "exit ${PIPESTATUS[0]}: $*" | tee -a "$LOG"; }
versions() {
  python3 - <<'PY'
import torch, triton
try:
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
except Exception:  # a build without NCCL
    nccl = "none"
print(f"torch: {torch.__version__}  triton: {triton.__version__}  cuda: {torch.version.cuda}"
      f"  nccl: {nccl}")
PY
}
# The first GPU's name, and its lower-case slug for file names
gpu_name() { local n; n=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1); echo "${n:-unknown}"; }
gpu_slug() { echo "$1" | tr '[:upper:]' '[:lower:]' | tr ' ' '-' | tr -cd 'a-z0-9._-'; }
PYTEST=$(command -v pytest >/dev/null && echo pytest || echo python3 -m pytest)
# A test summary's head: device, versions, date, commit
summary_head() {
  echo "device: $1"
  versions
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
}
# $OUT/$1 kept in results/ (the tarball) and the checkout's benchmarks/results
keep_summary() {
  cp "$OUT/$1" "$RES/$1"
  cp "$OUT/$1" "benchmarks/results/$1" 2>/dev/null
}
# The one-GPU suite with every test id and outcome (-rfEsxXp: -rA without the captured
# output of every passing test, which kept an H100 run printing past its time limit),
# kept with device, versions, date, commit and command as gpu_tests_<device>.txt in
# $OUT, results/ and the checkout.
onegpu() {
  local name dev file raw cmd rc path ignore=() pids=() part
  name=$(gpu_name)
  dev=$(gpu_slug "$name")
  file=gpu_tests_$dev.txt
  [ -n "${ONEGPU_ONLY:-}" ] && file=gpu_tests_${ONEGPU_LABEL:-subset}_$dev.txt
  raw=$OUT/onegpu_pytest.txt
  cmd="$PYTEST -m gpu -rfEsxXp -q${ONEGPU_ARGS:+ $ONEGPU_ARGS}"
  # ONEGPU_APART="tests/a.py ...": those files in a second pytest beside the rest, on the
  # same GPU (the suite in about half the time)
  for path in ${ONEGPU_APART:-}; do ignore+=(--ignore="$path"); done
  if [ -n "${ONEGPU_ONLY:-}" ]; then  # only these files, one pytest each
    part=0
    for path in $ONEGPU_ONLY; do
      timeout "${STAGE_TIMEOUT:-0}" $cmd "$path" ${TESTS_K:+-k "$TESTS_K"} \
        >"$raw.$part" 2>&1 & pids+=($!)
      part=$((part + 1))
    done
  else
    timeout "${STAGE_TIMEOUT:-0}" $cmd tests "${ignore[@]}" ${TESTS_K:+-k "$TESTS_K"} \
      >"$raw.0" 2>&1 & pids+=($!)
    if [ -n "${ONEGPU_APART:-}" ]; then
      timeout "${STAGE_TIMEOUT:-0}" $cmd $ONEGPU_APART ${TESTS_K:+-k "$TESTS_K"} \
        >"$raw.1" 2>&1 & pids+=($!)
    fi
  fi
  rc=0
  for part in "${pids[@]}"; do wait "$part" || rc=$?; done
  cat "$raw".* >"$raw"
  cat "$raw" >>"$LOG"
  {
    summary_head "$name"
    if [ -n "${ONEGPU_ONLY:-}" ]; then
      echo "command: one beside the other:" \
        "$(for path in $ONEGPU_ONLY; do printf '%s; ' "$cmd $path${TESTS_K:+ -k \"$TESTS_K\"}"; done)"
    elif [ -n "${ONEGPU_APART:-}" ]; then
      echo "command: $cmd tests ${ignore[*]}${TESTS_K:+ -k \"$TESTS_K\"}, beside it:" \
        "$cmd $ONEGPU_APART${TESTS_K:+ -k \"$TESTS_K\"}"
    else
      echo "command: $cmd tests${TESTS_K:+ -k \"$TESTS_K\"}"
    fi
    echo "exit: $rc"
    for part in "$raw".*; do
      echo
      sed -n '/short test summary info/,$p' "$part"
    done
  } >"$OUT/$file"
  rm -f "$raw".*
  keep_summary "$file"
  grep -h -E "^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error)" "$raw" | tee -a "$LOG"
  echo "exit $rc: $cmd (summary: $OUT/$file)" | tee -a "$LOG"
}

# The multi-GPU tests (pytest -m multigpu: NCCL ranks on every GPU), their summary kept
# as gpu_tests_<device>_ws<N>.txt as onegpu keeps its own.
multigpu() {
  local name file raw cmd rc
  name=$(gpu_name)
  file=gpu_tests_$(gpu_slug "$name")_ws$NGPU.txt
  raw=$OUT/multigpu_pytest.txt
  cmd="$PYTEST -m multigpu -rfEsxXp -q --durations=0${MULTIGPU_ARGS:+ $MULTIGPU_ARGS}"
  timeout "${STAGE_TIMEOUT:-0}" $cmd tests ${TESTS_K:+-k "$TESTS_K"} >"$raw" 2>&1
  rc=$?
  cat "$raw" >>"$LOG"
  {
    summary_head "$NGPU x $name"
    echo "command: $cmd tests${TESTS_K:+ -k \"$TESTS_K\"}"
    echo "exit: $rc"
    echo
    sed -n '/slowest durations/,$p' "$raw"
  } >"$OUT/$file"
  rm -f "$raw"
  keep_summary "$file"
  echo "exit $rc: $cmd (summary: $OUT/$file)" | tee -a "$LOG"
}

python3 -m pip install -q --no-deps --no-build-isolation -e . >>"$LOG" 2>&1 || say "install FAILED"
for stage in $STAGES; do
  case $stage in
    env)
      say env
      run nvidia-smi topo -m
      run python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.nccl.version(), torch.cuda.get_device_name())' ;;
    tests)  # with the table this call tuned, if any (else the shipped one)
      say "GPU tests"
      [ -f "$TABLE" ] && export COMMRT_TABLE=$TABLE
      run python3 -m pytest -q -rf -m "gpu or multigpu" ${TESTS_K:+-k "$TESTS_K"} tests ;;
    onegpu)  # one GPU is enough: W virtual ranks in one process
      say "one-GPU tests"
      onegpu ;;
    multigpu)  # every GPU of the machine
      say "multi-GPU tests"
      multigpu ;;
    tune)
      say "commrt tune"
      run commrt tune --out "$TABLE" --raw "$RES/tune_raw.json" --plot "$RES/tune.png" ;;
    tunear)  # only the all_reduce section (then tunefused adds the fused one): a table
             # survives a call that runs out of time in the fused section
      say "commrt tune --only all_reduce"
      run commrt tune --only all_reduce --out "$TABLE" --raw "$RES/tune_raw.json" \
        --plot "$RES/tune.png" ;;
    tunefused)  # only the fused section, on top of the table in use (shipped or $TABLE)
      say "commrt tune --only fused"
      [ -f "$TABLE" ] && export COMMRT_TABLE=$TABLE
      run commrt tune --only fused --out "$TABLE.new" --raw "$RES/tune_fused_raw.json" \
        && mv "$TABLE.new" "$TABLE" ;;
    tuneag|tuners)  # one collective's section, on top of the table in use (shipped or $TABLE)
      op=$([ "$stage" = tuneag ] && echo all_gather || echo reduce_scatter)
      say "commrt tune --only $op"
      [ -f "$TABLE" ] && export COMMRT_TABLE=$TABLE
      run commrt tune --only "$op" --out "$TABLE.new" --raw "$RES/tune_${op}_raw.json" \
        && mv "$TABLE.new" "$TABLE" ;;
    fxgrid)  # the overlap grid (GRID_CELLS=0,5 for some cells only)
      say "bench_fx_overlap --grid"
      run torchrun --nproc-per-node "$NGPU" benchmarks/bench_fx_overlap.py --grid \
        --out-dir "$RES" ${GRID_CELLS:+--grid-cells "$GRID_CELLS"} ${FXGRID_ARGS:-} ;;
    usetable)  # a table carried in .carry/ (from an earlier call)
      cp .carry/table.json "$TABLE" ;;
    bench)
      say "bench_allreduce"
      [ -f "$TABLE" ] && export COMMRT_TABLE=$TABLE
      run torchrun --nproc-per-node "$NGPU" benchmarks/bench_allreduce.py --out-dir "$RES" ${BENCH_ARGS:-} ;;
    benchops)  # all-gather and reduce-scatter, every variant against auto
      [ -f "$TABLE" ] && export COMMRT_TABLE=$TABLE
      gen=$(python3 -c 'import torch; from commrt.dispatch.profile import generation_key as g; p = torch.cuda.get_device_properties(0); print(g("nvidia", p.name, p.major, p.minor))')
      for op in all_gather reduce_scatter; do
        say "commrt bench --op $op --all"
        run commrt bench --op "$op" --all --out "$RES/${op}_${gen}_ws$NGPU.json"
      done ;;
    decode)
      say "bench_tp_decode"
      [ -f "$TABLE" ] && export COMMRT_TABLE=$TABLE
      run torchrun --nproc-per-node "$NGPU" benchmarks/bench_tp_decode.py --out-dir "$RES" ${DECODE_ARGS:-} ;;
    fxoverlap)
      say "bench_fx_overlap"
      [ -f "$TABLE" ] && export COMMRT_TABLE=$TABLE
      run torchrun --nproc-per-node "$NGPU" benchmarks/bench_fx_overlap.py --out-dir "$RES" ${FX_ARGS:-} ;;
    copyengine)  # the copy-engine all-reduce alone and beside matmuls, against NCCL
      say "bench_copy_engine"
      run torchrun --nproc-per-node "$NGPU" benchmarks/bench_copy_engine.py --out-dir "$RES" ${CE_ARGS:-} ;;
    fxoverlaptp)  # the same step tensor parallel
      say "bench_fx_overlap --tp"
      [ -f "$TABLE" ] && export COMMRT_TABLE=$TABLE
      run torchrun --nproc-per-node "$NGPU" benchmarks/bench_fx_overlap.py --tp --out-dir "$RES" ${TP_ARGS:-} ;;
    scatter)  # single GPU is enough
      say "bench_scatter"
      run python3 benchmarks/bench_scatter.py --out-dir "$RES" ;;
    scatternarrow)  # single GPU is enough
      say "scatter_narrow_sweep"
      run python3 benchmarks/scatter_narrow_sweep.py --out-dir "$RES" ;;
    scattergrid)  # single GPU is enough; --update merges into benchmarks/results' grid file
      # (a grid's GPU steps take turns under its GPU lock: on one H100 at 94df385 the main
      #  grid took 140 s for --dtypes float32, 67 s for --dtypes bfloat16 --ops index_add,
      #  97 s for --dtypes bfloat16 --ops index_put --widths 4,16,100,1024,4096 and 182 s for
      #  --widths 0,1 of those (Inductor's bf16 atomics on a hot row), each with --update;
      #  the scatter_add grid's bf16 --widths 0,1 alone 306 s: scatter_grid_*H100*.md)
      say "bench_scatter --grid"
      [ -d "$RES" ] && cp -n benchmarks/results/scatter_grid_*.json benchmarks/results/scatter_add_grid_*.json benchmarks/results/scatter_int_grid_*.json "$RES"/ 2>/dev/null
      run python3 benchmarks/bench_scatter.py --grid --out-dir "$RES" ${GRID_ARGS:-} ;;
    scattersweep)  # single GPU is enough
      say "scatter_sweep"
      run python3 benchmarks/scatter_sweep.py --out-dir "$RES" ;;
    overhead)
      say "host overhead"
      [ -f "$TABLE" ] && export COMMRT_TABLE=$TABLE
      run torchrun --nproc-per-node "$NGPU" benchmarks/bench_host_overhead.py ;;
    cli)
      say "commrt info / bench"
      [ -f "$TABLE" ] && export COMMRT_TABLE=$TABLE
      run commrt info
      run commrt bench --out "$RES/commrt_bench.json" ;;
    *) say "unknown stage $stage" ;;
  esac
  [ -f "$TABLE" ] && cp "$TABLE" "$RES/table.json"
  tar -C "$OUT" -czf "$OUT/results.tar.gz" results  # what is done so far survives a timeout
done
rm -rf "$RES"
say done
