"""gpu_share_check.py PIT PROFILED.trace.json REFERENCE.trace.json — sharing CUPTI with torch.profiler on a real GPU
(issue 33 item 8): the program's own profile, recorded while pyinterpose ran (PROFILED), has as many kernel events
as the same program's profile without pyinterpose (REFERENCE), and the trace has the device clock or says why not.
Prints a JSON list of table rows (scripts/gpu_validate.sh, part `share`)."""
from __future__ import annotations

import json
import sys


def kernels(path: str) -> int:
    with open(path) as f:
        prof = json.load(f)
    ev = prof.get("traceEvents", prof) if isinstance(prof, dict) else prof
    return sum(1 for e in ev if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph", "X") == "X")


def main(argv: list[str]) -> int:
    import pyinterpose

    pit, profiled, reference = argv
    got, want = kernels(profiled), kernels(reference)
    p = pyinterpose.load(pit).processes
    main_pid = p.iloc[0]
    note = str(main_pid["clock_note"])
    says = main_pid["clock"] == "cupti" and (note == "" or "handed back" in note) or \
        (main_pid["clock"] == "cpu" and "left to it" in note)
    rows = [{"trace": "torch transformer + torch.profiler", "check": "profiler kernel events under pyinterpose",
             "measured": got, "expected": f"{want} (same program, no pyinterpose)",
             "result": "PASS" if got == want and want > 0 else "FAIL"},
            {"trace": "torch transformer + torch.profiler", "check": "trace clock says which and why",
             "measured": f"{main_pid['clock']}: {note[:120]}", "expected": "cupti (handed back) or cpu (left to it)",
             "result": "PASS" if says else "FAIL"}]
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
