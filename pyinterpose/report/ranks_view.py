"""The report's view of a multi-GPU job: each rank's memory side by side (one trace with several
ranks: a section of its report; many traces: a job report of its own, ``report DIR -o job.html``)."""
from __future__ import annotations

import pandas as pd

from ..analysis.ranks import job_view, per_rank
from .reporter import Reporter
from .sections import Report, Section
from .text import fmt_bytes

EXPLAIN = ("One row per rank (the process whose environment named it: RANK, JAX_PROCESS_ID, TF_CONFIG, "
           "SLURM_PROCID, ...): its device by the UUID the process saw (CUDA_VISIBLE_DEVICES remaps ordinals, "
           "not UUIDs), its peak of live device bytes and when it was first reached, the part of that held by "
           "the collective library (NCCL: its own buffers and pool; peers' buffers it imported count in "
           "the peer's row, never twice), and the training iterations found in it. Imbalance: the highest "
           "peak over the median peak.")


def _table(per_rank: list[dict]) -> pd.DataFrame:
    rows = [{"rank": r["rank"], "host": r["host"], "pid": r["pid"], "device": r["device"],
             "device UUID": r["device_uuid"] or "?", "peak live": fmt_bytes(r["peak_live_bytes"]),
             "peak at (s)": (f"{r['peak_t_ns'] / 1e9:.3f}" if r["peak_t_ns"] is not None and r["peak_t_ns"] >= 0
                             else "–"),
             "collective library": fmt_bytes(r["collective_peak_bytes"]),
             "iterations": "–" if r["iterations"] is None else r["iterations"]} for r in per_rank]
    return pd.DataFrame(rows)


def _device_table(job: dict) -> pd.DataFrame:
    return pd.DataFrame([{"host": e["host"], "device UUID": e["device_uuid"] or "?",
                          "ranks": ", ".join(str(r) for r in e["ranks"]),
                          "sum of the ranks' peaks": fmt_bytes(e["sum_of_peaks"])} for e in job.get("per_device") or []])


def _figure(per_rank: list[dict], job: dict) -> tuple[str, str]:
    labels = [f"pid {r['pid']}" if r["rank"] is None else str(r["rank"]) for r in per_rank]
    peaks = [r["peak_live_bytes"] for r in per_rank]
    top = max(range(len(peaks)), key=lambda i: peaks[i]) if peaks else None
    alt = "peak live device memory per rank; " + ", ".join(f"rank {a}: {fmt_bytes(p)}" for a, p in zip(labels, peaks))
    from .plots import ranks_png        # matplotlib on use (html.analyse imports it beside the analyses)

    return ranks_png(labels, peaks, top, job.get("median_peak_bytes")), alt


def facts(job: dict) -> list[tuple[str, str]]:
    if not job.get("ranks"):
        return []
    return [("ranks" if job.get("ranked", True) else "processes (no rank variables)", str(job["ranks"])),
            ("imbalance (max peak / median)", "–" if job["imbalance"] is None else f"{job['imbalance']:.3f}"),
            ("highest peak", f"{_who(job, 'max')} ({fmt_bytes(job['max_peak_bytes'])})"),
            ("first to reach its peak", f"{_who(job, 'first_to_peak')} ({job['first_to_peak_clock']} clock)")]


def _who(job: dict, key: str) -> str:
    """The job view's label for ``max`` / ``first_to_peak`` (older views: from the rank)."""
    label = job.get(f"{key}_label")
    return label if label else f"rank {job['max_rank' if key == 'max' else 'first_to_peak']}"


def fill_ranks(s: Section, ctx) -> bool:
    """The ranks section of one trace's report; False (no section) when no process of it has a rank."""
    trace, heads = ctx.trace, ctx.heads
    pr = per_rank(trace)
    if not pr or all(r["rank"] is None for r in pr):
        return False
    job = job_view(pr)
    s.facts = facts(job)
    s.figures.append(_figure(pr, job))
    s.tables.append(("per rank", _table(pr)))
    s.tables.append(("per device (ranks sharing a GPU add up there)", _device_table(job)))
    heads["ranks"] = job
    heads["per_rank"] = pr
    return True


RANKS = Reporter("ranks", "Ranks", fill_ranks, explain=EXPLAIN)


def duplicate_line(d: dict) -> str:
    return f"{d['trace']} is a copy of {d['copy_of']}: counted once"


def job_report(res: dict, title: str):
    """A Report (pyinterpose.report.sections) of a job analysed by pyinterpose.analysis.job."""
    s = Section("ranks", "Ranks", EXPLAIN)
    s.facts = facts(res["ranks"])
    if res["per_rank"]:
        s.figures.append(_figure(res["per_rank"], res["ranks"]))
    s.tables.append(("per rank", _table(res["per_rank"])))
    if res["ranks"].get("per_device"):
        s.tables.append(("per device (ranks sharing a GPU add up there)", _device_table(res["ranks"])))
    t = Section("traces", "Traces", "The job's traces, one per node or per rank (run -o trace-{host}-{rank}.pit).")
    t.tables.append(("traces", pd.DataFrame([{
        "trace": x["trace"], "host": x["host"], "processes": x["processes"], "events": x["events"],
        "lost events": x["lost_events"], "peak live": fmt_bytes(x["peak_live_bytes"]),
        "complete": "yes" if x["complete"] else "NO"} for x in res["traces"]])))
    warnings = [f"{x['trace']}: {w}" for x in res["traces"] for w in x["warnings"]]
    warnings += [duplicate_line(d) for d in res.get("duplicates") or []]
    return Report(title=title, facts=facts(res["ranks"]) + [("traces", str(len(res["traces"])))], sections=[s, t],
                  headlines={"ranks": res["ranks"], "per_rank": res["per_rank"]}, warnings=warnings)
