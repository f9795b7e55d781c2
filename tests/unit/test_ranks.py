"""Rank context from the recorded environment, folding processes into ranks, the job view."""
from __future__ import annotations

import json

from pyinterpose.analysis import ranks
from pyinterpose.trace import context


def test_rank_variables_of_each_launcher():
    assert context.rank_context({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}) == \
        {"rank": 3, "world_size": 8, "local_rank": 1, "local_world_size": 4, "rank_source": "RANK"}
    assert context.rank_context({"JAX_PROCESS_ID": "2", "JAX_NUM_PROCESSES": "4"})["rank"] == 2
    assert context.rank_context({"JAX_PROCESS_ID": "2", "JAX_NUM_PROCESSES": "4"})["world_size"] == 4
    tf = {"cluster": {"worker": ["a:1", "b:1", "c:1"], "chief": ["z:1"], "ps": ["p:1"]},
          "task": {"type": "worker", "index": 1}}
    # chief first, then the workers: worker 1 is rank 2 of 5
    got = context.rank_context({"TF_CONFIG": json.dumps(tf)})
    assert (got["rank"], got["world_size"], got["rank_source"]) == (2, 5, "TF_CONFIG")
    got = context.rank_context({"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1"})
    assert (got["rank"], got["world_size"], got["local_rank"]) == (5, 16, 1)
    assert context.rank_context({"OMPI_COMM_WORLD_RANK": "7", "OMPI_COMM_WORLD_SIZE": "9"})["rank"] == 7
    # torchrun's RANK wins over the launcher's under it; junk is no rank
    assert context.rank_context({"RANK": "1", "SLURM_PROCID": "0"})["rank"] == 1
    assert context.rank_context({"RANK": "x", "TF_CONFIG": "{not json"})["rank"] is None
    assert context.rank_context({})["rank"] is None


def _p(pid, rank, peak, host="n1", peak_wall=None, peak_t=10):
    return {"pid": pid, "rank": rank, "world_size": 4 if rank is not None else None, "host": host,
            "peak_live_bytes": peak, "peak_wall_s": peak_wall, "peak_t_ns": peak_t, "device": 0,
            "device_uuid": f"GPU-{host}-{rank}"}


def test_fold_ranks_keeps_the_rank_process_and_lists_its_helpers():
    got = ranks.fold_ranks([_p(10, 1, 100), _p(11, 1, 0), _p(12, 0, 50), _p(13, None, 999)])
    assert [(r["rank"], r["pid"], r["other_pids"]) for r in got] == [(0, 12, []), (1, 10, [11])]
    # no ranks at all: every process with device memory
    got = ranks.fold_ranks([_p(1, None, 5), _p(2, None, 0)])
    assert [(r["rank"], r["pid"]) for r in got] == [(None, 1)]


def test_job_view_imbalance_and_first_to_peak():
    rs = [_p(1, 0, 100, peak_wall=5.0), _p(2, 1, 300, peak_wall=4.0), _p(3, 2, 200, peak_wall=6.0)]
    j = ranks.job_view(rs)
    assert j["imbalance"] == 300 / 200 and j["max_rank"] == 1 and j["first_to_peak"] == 1
    assert j["first_to_peak_clock"] == "wall"
    rs[0]["peak_wall_s"] = None     # one rank without a wall time: the trace clock decides
    rs[2]["peak_t_ns"] = 1
    assert ranks.job_view(rs)["first_to_peak"] == 2
    assert ranks.job_view([])["imbalance"] is None


def test_collective_library_by_owner():
    assert ranks.collective_library("libnccl.so.2") == "nccl"
    assert ranks.collective_library("libsimnccl.so") == "nccl"
    assert ranks.collective_library("libcublas.so.12") == ""


def test_one_process_on_two_devices_has_a_peak_per_device():
    import pandas as pd

    from pyinterpose.trace.model import Trace

    MiB = 1 << 20
    # device 0: 4 MiB [0, 10) + 2 MiB [5, 20) -> 6 MiB; device 1: 8 MiB [12, 30); process: 10 MiB at 12..20
    rows = [(0, 4 * MiB, 0, 10), (0, 2 * MiB, 5, 20), (1, 8 * MiB, 12, 30)]
    blocks = pd.DataFrame([{"block_id": i, "pid": 7, "device": d, "kind": "device", "api": "cuMemAlloc_v2",
                            "address": 0x1000 * (i + 1), "size": n, "t_alloc": a, "t_free": f, "seq_alloc": a,
                            "seq_free": f, "freed": True} for i, (d, n, a, f) in enumerate(rows)])
    procs = pd.DataFrame([{"pid": 7, "context": json.dumps({"JAX_PROCESS_ID": "0", "JAX_NUM_PROCESSES": "1"}),
                           "devices": json.dumps([[0, "GPU-a"], [1, "GPU-b"]])}])
    tr = Trace.from_tables(blocks=blocks, processes=procs)
    (r,) = ranks.per_rank(tr, iterations=False)
    assert (r["rank"], r["peak_live_bytes"], r["device"], r["device_uuid"]) == (0, 10 * MiB, 1, "GPU-b")
    assert [(d["device_uuid"], d["peak_live_bytes"]) for d in r["devices"]] == [("GPU-a", 6 * MiB), ("GPU-b", 8 * MiB)]
    per_dev = {e["device_uuid"]: e["sum_of_peaks"] for e in ranks.job_view([r])["per_device"]}
    assert per_dev == {"GPU-a": 6 * MiB, "GPU-b": 8 * MiB}
