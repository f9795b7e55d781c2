"""Would this run fit on a device of another size, and at what cost (``pyinterpose fit``).

For one process of a trace (default: the main one) and each capacity, the answers are tried in this
order, each only where it can help:

1. **captured** — the framework's allocator as captured, simulated on its request stream
   (:mod:`pyinterpose.analysis.pools`: ``pytorch`` with the trace's own PYTORCH_ALLOC_CONF, ``bfc``
   growing for JAX/TensorFlow, ``cudamalloc`` when the framework is unknown), no capacity limit.  It
   *needs* the most, at any moment, of its simulated reserve plus the device bytes allocated outside
   it (libraries) at that moment.  Fits exactly when capacity >= need.  When the run ended in an
   out-of-memory failure, the need is at least the simulated reserve at the failure plus the request
   plus what was outside (what came after is unknown: "at least").
2. **captured, releasing its cache** (only when 1 does not fit and capacity >= the lower bound): the
   same simulator with the capacity as its limit, modelling its out-of-memory path (PyTorch:
   release cached blocks and retry): fits when the replay never runs out.  It costs
   synchronisations and cudaFree/cudaMalloc calls on the way (not timed here).
3. **knobs** (only when 1 and 2 do not fit and capacity >= the lower bound), through the simulators:
   PyTorch ``expandable_segments:True``, ``max_split_size_mb:20``, ``backend:cudaMallocAsync``
   (modelled as one cudaMalloc per tensor); JAX ``XLA_PYTHON_CLIENT_ALLOCATOR=platform`` (one
   allocation per buffer) and ``XLA_PYTHON_CLIENT_MEM_FRACTION=.95`` (BFC in one region of 95 % of
   the capacity; JAX's default, preallocating 75 %, is answered too); TensorFlow
   ``TF_GPU_ALLOCATOR=cuda_malloc_async`` (one allocation per tensor) and its default BFC (one region
   of the whole capacity, ``allow_growth`` off).  Not modelled (said in ``not_modelled``): PyTorch's
   ``garbage_collection_threshold`` (the simulator has no garbage collector), XLA's memory fraction
   when preallocation is off.
4. **planned pool** (only when no allocator answer fits and capacity >= the lower bound): an offline
   plan of every block's address (MiniMalloc-style exact search on the steady step,
   :func:`pyinterpose.analysis.pools.plan` "optimal"); it needs the larger of the whole run's peak
   of live bytes (the lower bound) and the planned steady step.
5. **host swapping** (only when nothing above fits): the swap analysis's public entry point
   (:func:`pyinterpose.analysis.swap.evaluate`, budget mode, ``vote`` order) with the capacity as the
   budget and the card's PCIe bandwidth per direction (``--bandwidth``, else the trace's own
   measured/NVML figure for a plain ``--capacity``); fits when the swaps bring the peak of live bytes
   to the capacity; the cost is the stall time as a share of the run (the step time grows by it).
   The peak after swapping is of live bytes: it assumes a planned pool (an allocator's fragmentation
   would come on top).

The lower bound is the whole run's peak of live device bytes of the process (and, after a final
out-of-memory failure, the live bytes then plus the request): one byte below it, nothing but swapping
can fit.
"""
from __future__ import annotations

import json
import os

import numpy as np

from ..errors import PyinterposeError
from ..heap import give_back
from ..trace.model import counted_bytes
from . import pools, swap
from ..trace.model import peak_live_bytes_of
from .bandwidth import Bandwidth, DEFAULT_LATENCY_S, pcie_bytes_per_s, resolve_bandwidth
from .oom import live_mask, oom_failures, reserve_at
from .owners import allocator_mask, framework
from .pools import plan, reserved_curve, simulate, steady_problem
from .pools.allocators import pytorch_options

MiB = 1 << 20
GiB = 1 << 30
PLAN_TIME_LIMIT = 1.0
_SIMULATOR = {"pytorch": "pytorch", "jax": "bfc", "tensorflow": "bfc"}


# ---------------------------------------------------------------------------------- the GPU table
def gpu_table() -> list[dict]:
    """The GPU models of ``pyinterpose/data/gpus.json``, each with ``memory_bytes`` (vendor figure,
    binary GB), ``capacity_bytes`` (measured total where known, else memory_bytes) and
    ``bytes_per_s`` (PCIe per direction, theoretical after encoding)."""

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "gpus.json")
    with open(path) as fh:
        rows = json.load(fh)["gpus"]
    out = []
    for g in rows:
        g = dict(g)
        g["memory_bytes"] = int(round(float(g["memory_gb"]) * GiB))
        g["capacity_bytes"] = int(g.get("measured_total_bytes") or g["memory_bytes"])
        g["bytes_per_s"] = pcie_bytes_per_s(g["pcie_gen"], g["pcie_lanes"])
        out.append(g)
    return out


def find_gpu(name: str) -> dict:
    """A card by name or alias (case-insensitive; "-", "_" and spaces ignored)."""
    def key(s):
        return "".join(ch for ch in str(s).lower() if ch.isalnum())

    table = gpu_table()
    for g in table:
        if key(name) in {key(g["name"]), *(key(a) for a in g.get("aliases", []))}:
            return g
    raise PyinterposeError(f"unknown GPU {name!r} (known: {', '.join(g['name'] for g in table)})")


# ---------------------------------------------------------------------------------- what the run needs
def _curve_max(seq_a, val_a, seq_b, val_b) -> int:
    """max over time of a(t) + b(t), two step functions given as (seq, value after) sorted by seq."""
    if len(seq_b) == 0 or len(seq_a) == 0:
        v = val_a if len(seq_b) == 0 else val_b
        return int(np.max(v)) if len(v) else 0
    s = np.sort(np.concatenate([seq_a, seq_b]))   # repeated points evaluate alike

    def at(seq, val):
        if len(seq) == 0:
            return np.zeros(len(s), np.int64)
        k = np.searchsorted(seq, s, side="right") - 1
        return np.where(k >= 0, np.asarray(val, np.int64)[np.maximum(k, 0)], 0)

    return int((at(seq_a, val_a) + at(seq_b, val_b)).max())


class FitModel:
    """What one process of a trace needs, computed once; :meth:`answer` per capacity."""

    def __init__(self, trace, pid: int | None = None, bandwidth_bytes_per_s: float | None = None,
                 plan_time_limit: float = PLAN_TIME_LIMIT, swap: bool = True):
        self.trace = trace
        self.pid = pools.resolve_pid(trace, pid)
        b = trace.blocks
        if self.pid is None or len(b) == 0:
            raise PyinterposeError("the trace has no device allocations: nothing to fit")
        bpid = b["pid"].to_numpy() == self.pid
        dev = b["counts_device"].to_numpy(bool) & bpid
        if not dev.any():
            raise PyinterposeError(f"process {self.pid} made no device allocations: nothing to fit")
        self.framework = framework(trace)
        self.reserved_view = str(trace.meta.get("view") or "blocks") == "reserved"
        # a reserved-view trace's blocks are the allocator's own segments: its need is their peak as
        # captured (replaying an allocator on them would count it twice); nothing else is asked
        self.simulator = "none" if self.reserved_view else _SIMULATOR.get(self.framework, "cudamalloc")
        amask = allocator_mask(trace) & bpid
        outside = dev & ~amask
        self.lower_bound = peak_live_bytes_of(trace, dev)
        self.outside_peak = peak_live_bytes_of(trace, outside)
        sa, sf = b["seq_alloc"].to_numpy(np.int64), b["seq_free"].to_numpy(np.int64)
        size = counted_bytes(b)
        freed = b["freed"].to_numpy(bool)
        o_seq = np.concatenate([sa[outside], sf[outside & freed]])
        o_d = np.concatenate([size[outside], -size[outside & freed]])
        order = np.argsort(o_seq, kind="stable")
        self._out_seq, self._out_live = o_seq[order], np.cumsum(o_d[order])
        self._arrs_made = None
        self._req_seq = None
        self.try_swap = swap
        self.notes: list[str] = []
        if self.reserved_view:
            self.notes.append("a reserved-view trace: its blocks are the framework allocator's segments, so the "
                              "need is their peak as captured (JAX/TensorFlow preallocation makes it a share of "
                              "the GPU it ran on, not a need); knobs, a planned pool and swapping need the "
                              "tensors: capture with --view blocks")
        # the run's own failures: what it asked for and never got
        self.unmet = None
        f = oom_failures(trace)
        f = f[(f["pid"].to_numpy() == self.pid) & (f["outcome"].astype(str).to_numpy() == "final")]
        unmet_live, unmet_reserve = 0, 0
        for r in f.to_dict("records"):
            own, _ = live_mask(trace, self.pid, int(r["seq"]), int(r["t"]))
            live = int(size[own].sum())
            alloc_live = int(size[own & amask].sum())
            out_live = live - alloc_live
            res = reserve_at(trace, self.pid, int(r["seq"]), alloc_live).get("reserve_bytes")
            unmet_live = max(unmet_live, live + int(r["size"]))
            unmet_reserve = max(unmet_reserve, (res if res is not None else alloc_live) + int(r["size"]) + out_live)
        if len(f):
            self.unmet = {"failures": int(len(f)), "live_plus_request_bytes": unmet_live,
                          "reserve_plus_request_bytes": unmet_reserve}
            self.notes.append("the run ended in an out-of-memory failure: every need is at least what was "
                              "live then plus the request (what the run did afterwards is unknown)")
        self.lower_bound = max(self.lower_bound, unmet_live)
        self._needs: dict = {}
        self._config_note()
        self.captured_need = self.allocator_need(self.simulator, self._captured_options())
        if self.unmet:
            self.captured_need = max(self.captured_need, unmet_reserve)
        self._plan_time_limit = plan_time_limit
        self._planned = None
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s

    def _config_note(self) -> None:
        """What the user's own settings (recorded in the trace's meta["user_env"]) make of the answers: the
        captured answer simulates a growing BFC; a JAX run that did not turn preallocation off, or a
        TensorFlow run on its default allocator, gets the "default" answer's behaviour."""
        env = self.trace.meta.get("user_env")
        if env is None or self.reserved_view:
            return
        if self.framework == "jax" and str(env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "")).lower() not in ("false", "0"):
            if str(env.get("XLA_PYTHON_CLIENT_ALLOCATOR", "")).lower() != "platform":
                self.notes.append("your run's settings (as the trace recorded them) leave JAX preallocating 75 % of "
                                  "the GPU: its outcome is the 'JAX default' answer, tried when the growing BFC "
                                  "does not fit")
        if self.framework == "tensorflow" and not env.get("TF_GPU_ALLOCATOR"):
            self.notes.append("your run's settings (as the trace recorded them) leave TensorFlow on its default BFC "
                              "(one region of the whole memory unless TF_FORCE_GPU_ALLOW_GROWTH is set): its "
                              "outcome is the 'TensorFlow default BFC' answer, tried when the growing BFC does not fit")

    # ---- needs
    def _captured_options(self) -> dict:
        if self.simulator == "pytorch":
            return dict(pytorch_options(self.trace.meta, None)[0])
        return {}   # bfc: allow_growth (growing regions) is the simulator's default

    @property
    def _arrs(self):
        """The allocator's request stream as numpy columns (what pools.reserved_curve replays; no
        DataFrame), made when a simulation other than the captured one is needed."""
        if self._arrs_made is None:
            rq = pools.replay_stream(self.trace, self.pid, allocator_mask(self.trace))   # by block (issue 30)
            self._req_seq = rq["seq"]
            self._arrs_made = rq["arrays"]
        return self._arrs_made

    def allocator_need(self, sim: str, options: dict) -> int:
        """Peak over time of the simulated reserve (no limit) plus the device bytes outside the
        allocator at that moment (``sim`` "none": the allocator's blocks as captured).  The captured
        allocator's curve is pools.reserved_curve's (computed once per trace: the report's timeline
        shares it)."""
        if sim == "none":
            b = self.trace.blocks
            return peak_live_bytes_of(self.trace, b["counts_device"].to_numpy(bool) & (b["pid"].to_numpy() == self.pid))
        key = (sim, tuple(sorted(options.items())))
        if key not in self._needs:
            if sim == self.simulator and options == self._captured_options():
                rc = reserved_curve(self.trace, sim, self.pid)
                seq, curve = np.asarray(rc["seq"], np.int64), rc["bytes"]
            else:
                curve = simulate(self._arrs, sim, None, series=True, **options)["reserved_after"]
                seq = self._req_seq
            self._needs[key] = _curve_max(seq, curve, self._out_seq, self._out_live)
        return self._needs[key]

    def allocator_fits_limited(self, sim: str, options: dict, limit: int) -> bool:
        """The simulator with a device limit (the bytes left after the peak outside the allocator):
        True when the replay never runs out."""
        cap = int(limit) - self.outside_peak
        if cap <= 0:
            return False
        return simulate(self._arrs, sim, cap, **options)["oom_at"] is None

    def planned_need(self) -> int:
        if self._planned is None:
            need = self.lower_bound
            try:
                prob = steady_problem(self.trace, self.pid)
                if len(prob):
                    need = max(need, int(plan(prob, "optimal", time_limit=self._plan_time_limit).peak_bytes))
            except PyinterposeError as e:
                self.notes.append(f"planned pool: steady step not planned ({e}); the lower bound is used")
            self._planned = need
        return self._planned

    def knobs(self) -> tuple[list[tuple], list[str]]:
        """(name, kind, simulator, options, fraction) per knob of the framework, and the knobs not modelled.
        kind "need": fits when capacity >= its need; "region": one region of fraction x capacity."""
        fw = self.framework
        if fw == "pytorch":
            base = self._captured_options()
            ks = []
            if not base.get("expandable_segments"):
                ks.append(("PYTORCH_ALLOC_CONF=expandable_segments:True", "need", "pytorch",
                           {**base, "expandable_segments": True}, None))
            if not base.get("max_split_size"):
                ks.append(("PYTORCH_ALLOC_CONF=max_split_size_mb:20", "need", "pytorch",
                           {**base, "max_split_size": 20 * MiB}, None))
            ks.append(("PYTORCH_ALLOC_CONF=backend:cudaMallocAsync", "need", "cudamalloc", {}, None))
            return ks, ["garbage_collection_threshold (the simulator has no garbage collector)"]
        if fw == "jax":
            return ([("JAX default: XLA_PYTHON_CLIENT_PREALLOCATE=true (75 % up front)", "region", "bfc",
                      {"allow_growth": False}, 0.75),
                     ("XLA_PYTHON_CLIENT_MEM_FRACTION=.95", "region", "bfc", {"allow_growth": False}, 0.95),
                     ("XLA_PYTHON_CLIENT_ALLOCATOR=platform", "need", "cudamalloc", {}, None)],
                    ["XLA_PYTHON_CLIENT_MEM_FRACTION with preallocation off (the growing BFC is simulated "
                     "without the fraction's cap)"])
        if fw == "tensorflow":
            return ([("TensorFlow default BFC (allow_growth off: one region of all memory)", "region", "bfc",
                      {"allow_growth": False}, 1.0),
                     ("TF_GPU_ALLOCATOR=cuda_malloc_async", "need", "cudamalloc", {}, None)], [])
        return [], []

    # ---- one capacity
    def answer(self, capacity: int, label: str | None = None, gpu: dict | None = None) -> dict:
        C = int(capacity)
        answers = []
        not_tried = []

        def record_answer(name, fits, need=None, cost=0.0, note="", **extra):   # one way to fit; its verdict
            answers.append({"name": name, "fits": bool(fits), "need_bytes": None if need is None else int(need),
                            "headroom_bytes": None if need is None else C - int(need),
                            "step_time_cost": float(cost), "note": note, **extra})
            return fits

        fits = record_answer("captured allocator (its segments as recorded)" if self.reserved_view else
                   f"captured allocator ({self.simulator})", C >= self.captured_need, self.captured_need,
                   note="peak of the recorded segments" if self.reserved_view else
                   "simulated peak reserve plus the bytes outside the allocator")
        below = C < self.lower_bound
        knobs, not_modelled = self.knobs()
        if self.reserved_view:
            if not fits:
                not_tried.append("knobs, a planned pool and swapping: a reserved-view trace has no tensors "
                                 "(capture with --view blocks)")
        elif not fits and not below:
            fits = record_answer(f"captured allocator ({self.simulator}), releasing its cache when full",
                       self.allocator_fits_limited(self.simulator, self._captured_options(), C),
                       note="its out-of-memory path (release cached blocks, retry) keeps it within the capacity; "
                            "the synchronisations and cudaFree/cudaMalloc calls it costs are not timed")
            if not fits:
                for name, kind, sim, opts, frac in knobs:
                    if kind == "need":
                        need = self.allocator_need(sim, opts)
                        ok = record_answer(name, C >= need, need)
                    else:
                        ok = record_answer(name, self.allocator_fits_limited(sim, opts, int(frac * C)),
                                 note=f"one BFC region of {frac:g} x the capacity")
                    fits = fits or ok
            if not fits:
                pn = self.planned_need()
                fits = record_answer("planned pool (optimal offsets)", C >= pn, pn,
                           note="the larger of the lower bound and the exact plan of the steady step")
        elif fits:
            not_tried.append("knobs, planned pool and swapping: the captured allocator fits")
        else:
            not_tried.append("allocator knobs and a planned pool: the capacity is below the lower bound "
                             "(peak of live bytes)")
        if not fits and not self.reserved_view:
            if self.try_swap:
                fits = self._swap(C, gpu, record_answer)
            else:
                not_tried.append(f"host swapping (pyinterpose fit FILE --capacity {C} evaluates it)")
        chosen = next((a for a in answers if a["fits"]), None)
        if chosen is None:
            needs = [a["need_bytes"] for a in answers if a["need_bytes"] is not None]
            best = min(needs) if needs else self.lower_bound
            verdict, how, headroom, cost = "does not fit", None, C - best, None
        else:
            how = chosen["name"]
            verdict = "fits" if chosen is answers[0] else f"fits with {how}"
            headroom = chosen["headroom_bytes"] if chosen["headroom_bytes"] is not None else C - self.lower_bound
            cost = chosen["step_time_cost"]
        return {"label": label or str(C), "capacity_bytes": C, "gpu": _gpu_public(gpu), "fits": chosen is not None,
                "verdict": verdict, "how": how, "headroom_bytes": int(headroom),
                "step_time_cost": cost, "answers": answers, "not_tried": not_tried,
                "not_modelled": not_modelled if any(a["name"] in {k[0] for k in knobs} for a in answers) else []}

    def _swap(self, C: int, gpu: dict | None, record_answer) -> bool:
        bps = self.bandwidth_bytes_per_s or (gpu or {}).get("bytes_per_s")
        if bps:
            src = "--bandwidth" if self.bandwidth_bytes_per_s else f"{gpu['name']}: PCIe gen{gpu['pcie_gen']} " \
                f"x{gpu['pcie_lanes']} (theoretical per direction)"
            bw = Bandwidth(float(bps), float(bps), DEFAULT_LATENCY_S, src)
        else:
            try:
                bw = resolve_bandwidth(self.trace)
            except PyinterposeError as e:
                record_answer("host swapping", False,
                              note=f"not evaluated: no bandwidth ({e}); give --bandwidth or --gpu")
                return False
        if len(self.trace.blocks) > swap.SIDE_BY_SIDE_BLOCKS:
            # a long trace (issue 30): the allocator simulations' reserve curves and the blocks' live
            # order, kept for the answers above, go before the swap problem is built (at 100 M events
            # ~0.43 GB; every need above is kept by this model, and what is asked again is made again)
            for module in ("pools.reserved_curve", "model"):
                self.trace.forget(module)
            give_back()
        try:
            r = swap.evaluate(self.trace, bandwidth=bw, budget=C, strategies=["vote"], modes=("budget",),
                              pid=self.pid)
        except PyinterposeError as e:
            record_answer("host swapping", False, note=f"not evaluated: {e}")
            return False
        s = r["strategies"][0]
        need = int(s["peak_after"])
        extra = ""
        if self.unmet:   # the request that failed was never a block: swapping what ran does not make room for it
            need = max(need, int(self.unmet["live_plus_request_bytes"]))
            extra = "; the run ended in an out-of-memory failure: at least what was live then plus the request"
        ok = bool(s["budget_met"]) and need <= C
        return record_answer("host swapping", ok, need, cost=s["overhead_fraction"] if ok else 0.0,
                   note=f"{s['swaps']} swaps, {s['stall_seconds']:.4f} s of stalls; bandwidth {bw.source}; "
                        f"peak of live bytes after swapping (with a planned pool){extra}",
                   swaps=int(s["swaps"]), stall_seconds=float(s["stall_seconds"]),
                   bytes_moved=int(s["bytes_moved"]))

    def summary(self) -> dict:
        return {"pid": self.pid, "framework": self.framework, "simulator": self.simulator,
                "lower_bound_bytes": int(self.lower_bound), "captured_need_bytes": int(self.captured_need),
                "outside_allocator_peak_bytes": int(self.outside_peak), "unmet": self.unmet,
                "notes": list(self.notes)}


def _gpu_public(g: dict | None) -> dict | None:
    if g is None:
        return None
    return {k: g[k] for k in ("name", "model", "memory_gb", "memory_bytes", "capacity_bytes", "pcie_gen",
                              "pcie_lanes", "bytes_per_s", "source") if k in g}


def fit(trace, capacities: list[tuple[str, int, dict | None]] | None = None, pid: int | None = None,
        bandwidth_bytes_per_s: float | None = None, swap: bool = True) -> dict:
    """The ``fit`` JSON: ``capacities``: (label, bytes, gpu entry or None); default: every card of
    the GPU table.  ``swap=False``: host swapping is not evaluated (the report: one swap evaluation
    per card costs seconds at a million events)."""
    if capacities is None:
        capacities = [(g["name"], g["capacity_bytes"], g) for g in gpu_table()]
    m = FitModel(trace, pid=pid, bandwidth_bytes_per_s=bandwidth_bytes_per_s, swap=swap)
    return {**m.summary(), "capacities": [m.answer(c, label, g) for label, c, g in capacities]}
