#!/usr/bin/env bash
# shellcheck disable=SC2086  # $PY, $PI, $T, $J hold command words: split on purpose
# gpu_validate.sh OUTDIR — pyinterpose on a real NVIDIA GPU against the frameworks' own records.
#
# Captures PyTorch (ResNet-18 "cnn", a 6-layer "transformer") and JAX ("attn") in both views with the
# workloads in scripts/gpu_workloads/, turns what the workloads themselves report (torch memory history,
# max_memory_reserved/allocated, JAX memory_stats) into NAME.truth.json, compares (scripts/gpu_compare.py),
# times the capture overhead (median step time with and without pyinterpose), and runs the JAX blocks view
# 10 more times (60 steps): 10/10 must finish; a torchrun ranks step; then, each under timeout (STEP_TIMEOUT):
# the device clock (--gpu-clock cupti vs torch.profiler's kernel durations, launch lag, cost; JAX coverage),
# out of memory (PyTorch and JAX --oom: summary --json 'oom' vs the frameworks' messages),
# scripts/gpu_apply.sh and CUDA graphs (scripts/gpu_graphs_check.py).  A step's failure does not stop the others.  Prints one table (steps:
# docs/gpu-validation.md); exits 1 if any check fails.
#
# Needs: an NVIDIA GPU, python3 with torch, torchvision, jax (CUDA), optax, numpy, pandas, matplotlib, rich,
# a C compiler; cffi (+ pycparser) as wheels in .whl/ when the machine has none (docs/gpu-validation.md).
set -u
OUT=${1:-gpu-validation}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
STEPS=${STEPS:-20}
JAX_RUNS=${JAX_RUNS:-10}
# PARTS: which parts run (comma-separated; default all).  A device call is limited to 10 minutes: split the
# parts over calls when the whole does not fit, e.g. PARTS=torch,jax,ranks then PARTS=clock,oom,apply,window.
PARTS=${PARTS:-torch,jax,ranks,clock,share,oom,apply,interrupt,graphs,window}
want() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONUNBUFFERED=1

# ---- install: carried wheels, then the native parts built in place --------------------------------------
if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/pi-site \
        "$ROOT"/.whl/*.whl || { echo "gpu_validate: installing .whl/*.whl failed" >&2; exit 2; }
    export PYTHONPATH=/tmp/pi-site${PYTHONPATH:+:$PYTHONPATH}
fi
$PY -c "import cffi, numpy, pandas, rich, matplotlib" ||
    { echo "gpu_validate: missing Python packages (see docs/gpu-validation.md)" >&2; exit 2; }
(cd "$ROOT" && $PY pyinterpose/_build.py >"$OUT/build.log" 2>&1) ||
    { echo "gpu_validate: native build failed, see $OUT/build.log" >&2; exit 2; }
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
$PY -c "import torch, jax; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| jax', jax.__version__)" \
    | tee "$OUT/versions.txt"

W="$ROOT/scripts/gpu_workloads"
PI="$PY -m pyinterpose"
FAILED=0
run() {  # run LOG CMD...: log stdout+stderr, remember failures
    local log=$1; shift
    echo "+ $(date +%s) $*" >>"$OUT/commands.txt"
    "$@" >"$OUT/$log.log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then echo "gpu_validate: $log failed (exit $rc), see $OUT/$log.log" >&2; FAILED=1; fi
    return $rc
}
ASYNC=(env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync PYTORCH_ALLOC_CONF=backend:cudaMallocAsync)
# what --view blocks sets for JAX (XLA's command buffers stay on: pyinterpose expands graph replays)
PLATFORM=(env XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false)

J="$W/jax_train.py --model attn --steps $STEPS --donate"
ok=0

# ---- PyTorch ---------------------------------------------------------------------------------------------
want torch && for m in cnn transformer; do
    T="$W/torch_train.py --model $m --steps $STEPS"
    # baselines without pyinterpose: the same allocator each view runs with
    run "plain-torch-$m-native" $PY $T --out "$OUT/plain-torch-$m-native.json"
    run "plain-torch-$m-async" "${ASYNC[@]}" $PY $T --out "$OUT/plain-torch-$m-async.json"
    # blocks view (cudaMallocAsync, set by pyinterpose) and reserved view with the memory history
    run "torch-$m-blocks" $PI run -f --view blocks -o "$OUT/torch-$m-blocks.pit" -- \
        $PY $T --out "$OUT/torch-$m-blocks.json"
    run "torch-$m-reserved" $PI run -f --view reserved -o "$OUT/torch-$m-reserved.pit" -- \
        $PY $T --history-json "$OUT/torch-$m-history.json" --out "$OUT/torch-$m-reserved.json"
    # reserved view without the history: the overhead of capture alone
    run "overhead-torch-$m" $PI run -f --view reserved -o "$OUT/overhead-torch-$m.pit" -- \
        $PY $T --out "$OUT/overhead-torch-$m.json"
done

# ---- JAX -------------------------------------------------------------------------------------------------
if want jax; then
run plain-jax-attn-bfc $PY $J --out "$OUT/plain-jax-attn-bfc.json"
run plain-jax-attn-platform "${PLATFORM[@]}" $PY $J --out "$OUT/plain-jax-attn-platform.json"
run jax-attn-blocks $PI run -f --view blocks -o "$OUT/jax-attn-blocks.pit" -- $PY $J --out "$OUT/jax-attn-blocks.json"
run jax-attn-reserved $PI run -f --view reserved -o "$OUT/jax-attn-reserved.pit" -- \
    $PY $J --out "$OUT/jax-attn-reserved.json"

# the crash of issue 11 came in about half of the 60-step runs: 10 more, all must finish
for i in $(seq 1 "$JAX_RUNS"); do
    if $PI run -f --view blocks -o "$OUT/jax-repeat.pit" -- $PY "$W/jax_train.py" --model attn --steps 60 --donate \
        >"$OUT/jax-repeat-$i.log" 2>&1; then ok=$((ok + 1)); fi
done
rm -f "$OUT/jax-repeat.pit"
fi

# ---- ranks: a two-process torchrun on this GPU, each rank against its own max_memory_allocated --------------
# (issue 23 item 6; prepared without a GPU, not yet run on one)
if want ranks; then
mkdir -p "$OUT/ranks"
run torch-ranks $PI run -f --view blocks -o "$OUT/torch-ranks.pit" -- \
    $PY -m torch.distributed.run --nproc-per-node 2 "$W/torch_ranks.py" --out-dir "$OUT/ranks" --steps $STEPS &&
    run torch-ranks-check $PY "$ROOT/scripts/gpu_ranks_check.py" "$OUT/torch-ranks.pit" "$OUT/ranks"
fi

# ---- later steps: each bounded by timeout, each leaves rows-NAME.json (rows of the final table) ----------
STEP_TIMEOUT=${STEP_TIMEOUT:-600}
TO=(timeout -k 10 "$STEP_TIMEOUT")
rows() {  # rows NAME CMD...: CMD prints a JSON list of table rows; anything else becomes one FAIL row
    local name=$1; shift
    echo "+ $(date +%s) $*" >>"$OUT/commands.txt"
    "${TO[@]}" "$@" >"$OUT/rows-$name.json" 2>"$OUT/rows-$name.err"
    local rc=$?
    if ! $PY -c 'import json,sys; r=json.load(open(sys.argv[1])); assert isinstance(r, list)' "$OUT/rows-$name.json" \
        2>/dev/null; then
        $PY -c 'import json,sys; print(json.dumps([{"trace": sys.argv[1], "check": "step ran", "measured":
            "exit " + sys.argv[2] + ", see rows-" + sys.argv[1] + ".err", "expected": "rows", "result": "FAIL"}]))' \
            "$name" "$rc" >"$OUT/rows-$name.json"
    fi
    [ $rc -eq 0 ] || { echo "gpu_validate: $name: a check failed (exit $rc), see $OUT/rows-$name.json" >&2; FAILED=1; }
}

# ---- device clock (issue 21 item 7): --gpu-clock cupti vs torch.profiler, cost, JAX ----------------------
if want clock; then
T="$W/torch_train.py --model transformer --steps $STEPS"
# the baselines without pyinterpose, when the torch / jax parts did not leave them
[ -f "$OUT/plain-torch-transformer-native.json" ] ||
    run plain-torch-transformer-native "${TO[@]}" $PY $T --out "$OUT/plain-torch-transformer-native.json"
[ -f "$OUT/plain-jax-attn-platform.json" ] ||
    run plain-jax-attn-platform "${TO[@]}" "${PLATFORM[@]}" $PY $J --out "$OUT/plain-jax-attn-platform.json"
for c in cupti off; do
    run "clock-torch-transformer-$c" "${TO[@]}" $PI run -f --gpu-clock $c --view reserved \
        -o "$OUT/clock-torch-transformer-$c.pit" -- $PY $T --out "$OUT/clock-torch-transformer-$c.json"
done
# the same program once more, no pyinterpose, under torch.profiler: its kernel records are the reference
run profile-torch-transformer "${TO[@]}" $PY $T --profile-json "$OUT/profile-torch-transformer.trace.json" \
    --out "$OUT/profile-torch-transformer.json"
rows clock-kernels $PY "$ROOT/scripts/gpu_clock_check.py" kernels "$OUT/clock-torch-transformer-cupti.pit" \
    "$OUT/profile-torch-transformer.trace.json" --detail "$OUT/clock-kernels-detail.json"
rows clock-cost-torch $PY "$ROOT/scripts/gpu_clock_check.py" cost "torch transformer, reserved" \
    "$OUT/clock-torch-transformer-cupti.json" "$OUT/clock-torch-transformer-off.json" \
    "$OUT/plain-torch-transformer-native.json"
# the share of the cost that is the shim's periodic flush on the launching thread (2026-11-28 on an H100:
# cupti +15 % over off, steps 23-27 ms early, 20.5-21 ms late): the same run with the flush once an hour
run clock-torch-transformer-noflush "${TO[@]}" env PYINTERPOSE_GPU_FLUSH_MS=3600000 $PI run -f --gpu-clock cupti \
    --view reserved -o "$OUT/clock-torch-transformer-noflush.pit" -- $PY $T \
    --out "$OUT/clock-torch-transformer-noflush.json"
rows clock-cost-torch-noflush $PY "$ROOT/scripts/gpu_clock_check.py" cost "torch transformer, flush 1/h" \
    "$OUT/clock-torch-transformer-noflush.json" "$OUT/clock-torch-transformer-off.json" \
    "$OUT/plain-torch-transformer-native.json"
for c in cupti off; do
    run "clock-jax-attn-$c" "${TO[@]}" $PI run -f --gpu-clock $c --view blocks -o "$OUT/clock-jax-attn-$c.pit" -- \
        $PY $J --out "$OUT/clock-jax-attn-$c.json"
done
rows clock-jax $PY "$ROOT/scripts/gpu_clock_check.py" coverage "$OUT/clock-jax-attn-cupti.pit" "jax attn, cupti"
rows clock-cost-jax $PY "$ROOT/scripts/gpu_clock_check.py" cost "jax attn, blocks" "$OUT/clock-jax-attn-cupti.json" \
    "$OUT/clock-jax-attn-off.json" "$OUT/plain-jax-attn-platform.json"
fi

# ---- sharing CUPTI (issue 33 item 8): torch.profiler inside a pyinterpose run keeps its whole profile -----
if want share; then
T="$W/torch_train.py --model transformer --steps $STEPS"
[ -f "$OUT/profile-torch-transformer.trace.json" ] ||
    run profile-torch-transformer "${TO[@]}" $PY $T --profile-json "$OUT/profile-torch-transformer.trace.json" \
        --out "$OUT/profile-torch-transformer.json"
run share-torch-transformer "${TO[@]}" $PI run -f -o "$OUT/share-torch-transformer.pit" -- \
    $PY $T --profile-json "$OUT/share-torch-transformer.trace.json" --out "$OUT/share-torch-transformer.json"
rows share $PY "$ROOT/scripts/gpu_share_check.py" "$OUT/share-torch-transformer.pit" \
    "$OUT/share-torch-transformer.trace.json" "$OUT/profile-torch-transformer.trace.json"
fi

# ---- out of memory (issue 22 item 5): batch doubled until the framework raises; explanation vs its message --
if want oom; then
run oom-torch "${TO[@]}" $PI run -f --view blocks -o "$OUT/oom-torch.pit" -- \
    $PY "$W/torch_train.py" --model transformer --oom --out "$OUT/oom-torch.json"
rows oom-torch $PY "$ROOT/scripts/gpu_oom_check.py" torch "$OUT/oom-torch.pit" "$OUT/oom-torch.json" \
    "torch transformer OOM, blocks"
run oom-jax "${TO[@]}" $PI run -f --view blocks -o "$OUT/oom-jax.pit" -- \
    $PY "$W/jax_train.py" --model attn --donate --oom --out "$OUT/oom-jax.json"
rows oom-jax $PY "$ROOT/scripts/gpu_oom_check.py" jax "$OUT/oom-jax.pit" "$OUT/oom-jax.json" "jax attn OOM, blocks"
fi

# ---- interrupt (issue 33 item 7): SIGINT / SIGTERM to the whole job while it trains: 0 lost ----------------
if want interrupt; then
rows interrupt $PY "$ROOT/scripts/gpu_interrupt_check.py" "$OUT" "$W/torch_train.py"
fi

# ---- CUDA graphs (issue 32): torch.cuda.graph replays (graphs-blocks.pit re-captured), torch.compile
# reduce-overhead ResNet-18 against its memory history, JAX with command buffers on against memory_stats ---
if want graphs; then
run graphs-capture "${TO[@]}" $PI run -f --view blocks -o "$OUT/graphs-capture.pit" -- \
    $PY "$W/torch_graphs.py" --mode capture --replays 10 --out "$OUT/graphs-capture.json"
run graphs-compile "${TO[@]}" $PI run -f --view reserved -o "$OUT/graphs-compile.pit" -- \
    $PY "$W/torch_graphs.py" --mode compile --steps $STEPS --history-json "$OUT/graphs-compile-history.json" \
    --out "$OUT/graphs-compile.json"
run graphs-jax "${TO[@]}" $PI run -f --view blocks -o "$OUT/graphs-jax.pit" -- $PY $J --out "$OUT/graphs-jax.json"
# the buffer count to compare with: the platform allocator has no memory_stats, the BFC run's num_allocs
[ -f "$OUT/plain-jax-attn-bfc.json" ] ||
    run plain-jax-attn-bfc "${TO[@]}" $PY $J --out "$OUT/plain-jax-attn-bfc.json"
rows graphs $PY "$ROOT/scripts/gpu_graphs_check.py" "$OUT"
fi

# ---- flight recorder (issue 29): a PyTorch run with a leak that OOMs on purpose, under --flight-recorder 20,
# against PyTorch's own OOM observer snapshot (caching allocator: --view reserved, blocks = its segments) ------
if want window; then
run window-torch "${TO[@]}" $PI run -f --view reserved --flight-recorder 20 -o "$OUT/window-torch.pit" -- \
    $PY "$W/torch_leak_oom.py" --steps 200 --out "$OUT/window-torch.json"
rows window-torch $PY "$ROOT/scripts/gpu_window_check.py" "$OUT/window-torch.pit" "$OUT/window-torch.json"
fi

# ---- run --apply (issue 25): scripts/gpu_apply.sh in OUT/apply, its JSON turned into rows ------------------
if want apply; then
echo "+ scripts/gpu_apply.sh $OUT/apply" >>"$OUT/commands.txt"
"${TO[@]}" bash "$ROOT/scripts/gpu_apply.sh" "$OUT/apply" >"$OUT/apply.json" 2>"$OUT/apply.err"
apply_rc=$?
[ $apply_rc -eq 0 ] || { echo "gpu_validate: gpu_apply.sh failed (exit $apply_rc), see $OUT/apply.err" >&2; FAILED=1; }
$PY - "$OUT/apply.json" "$apply_rc" >"$OUT/rows-apply.json" <<'EOF'
import json, sys
rows = []
try:
    res = json.load(open(sys.argv[1]))
except Exception:
    res = {}
for m in ("cnn", "transformer"):
    r = res.get(m) or {}
    eq = r.get("loss_bitwise_equal")
    rows.append({"trace": f"apply {m}", "check": "loss with the plan = without (bitwise)", "measured": eq,
                 "expected": True, "result": "PASS" if eq is True else "FAIL"})
    a, n = (r.get("apply") or {}), (r.get("native") or {})
    rows.append({"trace": f"apply {m}", "check": "NVML peak with plan / native max_memory_reserved",
                 "measured": f"{a.get('nvml_peak_used_bytes')} / {n.get('max_memory_reserved')}", "expected": "-",
                 "result": "PASS" if a and n else "FAIL"})
rows.append({"trace": "apply", "check": "gpu_apply.sh exit status", "measured": int(sys.argv[2]), "expected": 0,
             "result": "PASS" if sys.argv[2] == "0" else "FAIL"})
print(json.dumps(rows))
EOF
fi

# ---- compare with the frameworks' own records, overhead, stability: one table -----------------------------
$PY "$ROOT/scripts/gpu_compare.py" make-truth "$OUT"
$PY - "$OUT" "$ok" "$JAX_RUNS" "$PARTS" >"$OUT/extra-rows.json" <<'EOF'
import json, os, sys
out, ok, runs, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
def med(name):
    p = os.path.join(out, name + ".json")
    try:
        return json.load(open(p))["median_step_ms"]
    except Exception:
        return None
rows = []
for traced, plain, what in [("torch-cnn-blocks", "plain-torch-cnn-async", "torch cnn, blocks view"),
                            ("overhead-torch-cnn", "plain-torch-cnn-native", "torch cnn, reserved view"),
                            ("torch-transformer-blocks", "plain-torch-transformer-async", "torch transformer, blocks"),
                            ("overhead-torch-transformer", "plain-torch-transformer-native",
                             "torch transformer, reserved"),
                            ("jax-attn-blocks", "plain-jax-attn-platform", "jax attn, blocks view"),
                            ("jax-attn-reserved", "plain-jax-attn-bfc", "jax attn, reserved view")]:
    if ("jax" if "jax" in traced else "torch") not in parts:  # a part this call did not run
        continue
    a, b = med(traced), med(plain)
    meas = "-" if a is None or b is None else f"{a:.2f} ms vs {b:.2f} ms ({(a / b - 1) * 100:+.1f}%)"
    rows.append({"trace": what, "check": "median step: traced vs plain", "measured": meas, "expected": "-",
                 "result": "PASS" if a is not None and b is not None else "FAIL"})
if "jax" in parts:
    rows.append({"trace": "jax attn, blocks, 60 steps", "check": f"runs that finished (of {runs})", "measured": ok,
                 "expected": runs, "result": "PASS" if ok == runs else "FAIL"})
import glob
for p in sorted(glob.glob(os.path.join(out, "rows-*.json"))):  # the later steps' rows (clock, oom, apply)
    rows += json.load(open(p))
print(json.dumps(rows))
EOF
$PY "$ROOT/scripts/gpu_compare.py" "$OUT" --extra "$OUT/extra-rows.json" | tee "$OUT/table.txt"
rc=${PIPESTATUS[0]}
[ $FAILED -eq 0 ] || rc=1
echo "gpu_validate: $( [ $rc -eq 0 ] && echo all checks passed || echo SOME CHECKS FAILED ); files in $OUT"
exit $rc
