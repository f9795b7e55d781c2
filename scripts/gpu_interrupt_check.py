"""A training job under `pyinterpose run`, signalled as a whole (its process group) while it trains, on a real
GPU (issue 33 item 7): the trace must say 0 lost.  Prints a JSON list of table rows (scripts/gpu_validate.sh).

    python scripts/gpu_interrupt_check.py OUT_DIR TRAIN_SCRIPT [SECONDS]

SIGINT and SIGTERM each once: `pyinterpose run -o OUT/interrupt-SIG.pit -- python TRAIN_SCRIPT --model
transformer --steps 100000`, the signal to the group after SECONDS (default 20) of training."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    out, script = sys.argv[1], sys.argv[2]
    wait = float(sys.argv[3]) if len(sys.argv) > 3 else 20.0
    rows, bad = [], 0
    for sig in (signal.SIGINT, signal.SIGTERM):
        pit = os.path.join(out, f"interrupt-{sig.name}.pit")
        p = subprocess.Popen([sys.executable, "-m", "pyinterpose", "run", "-f", "-o", pit, "--", sys.executable, script,
                              "--model", "transformer", "--steps", "100000"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(wait)
        os.killpg(p.pid, sig)
        _, err = p.communicate(timeout=300)
        from pyinterpose import load

        lost = int(load(pit).processes["lost"].clip(lower=0).sum())
        ok = lost == 0 and "LOST" not in err
        bad += not ok
        rows.append({"trace": f"interrupt {sig.name}", "check": "events lost when the job is signalled",
                     "measured": lost, "expected": 0, "result": "PASS" if ok else "FAIL"})
    print(json.dumps(rows))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
