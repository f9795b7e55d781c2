#!/usr/bin/env bash
# gpu_call.sh PARTS LIMIT [VAR=VALUE...] — one device call's worth of scripts/gpu_validate.sh, for the device tool
# (run it as the call's command, `.whl` carried: docs/gpu-validation.md).  Runs the given parts under `timeout
# LIMIT` into /tmp/gv (kept between calls on a warm machine, so a later call's table holds the earlier rows too),
# then puts what should come back into $OUT: console.log (the table), logs.tgz (every log, JSON and row file, no
# trace), traces.tgz (the traces under 12 MB), ls.txt, dmesg.txt, start.txt (Unix seconds at start and end).
#   e.g.  bash scripts/gpu_call.sh jax,clock 330 JAX_RUNS=2 STEP_TIMEOUT=150
# On 2026-11-28 (H100) five calls did every part but `torch` in 754 s held: jax,clock 172 s; oom 153 s;
# window,apply 175 s; ranks,share,graphs 125 s; interrupt 69 s.
set -u
P=${1:?parts}; L=${2:?limit in seconds}; shift 2
OUT=${OUT:?run this as a device call: \$OUT is where files come back}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONUNBUFFERED=1
date +%s >"$OUT/start.txt"
timeout -k 5 "$L" env PARTS="$P" "$@" bash "$ROOT/scripts/gpu_validate.sh" /tmp/gv >"$OUT/console.log" 2>&1
echo "rc=$?" >>"$OUT/console.log"
date +%s >>"$OUT/start.txt"
(cd /tmp && tar czf "$OUT/logs.tgz" --exclude='*.pit' --exclude='*history.json' --exclude='*.trace.json' gv)
(cd /tmp && find gv -name '*.pit' -size -12M | head -40 | tar czf "$OUT/traces.tgz" -T -)
ls -la /tmp/gv >"$OUT/ls.txt" 2>&1
dmesg 2>/dev/null | tail -30 >"$OUT/dmesg.txt"
tail -60 "$OUT/console.log"
