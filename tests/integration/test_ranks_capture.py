"""simtrain --ranks under `pyinterpose run`: every rank's peak, iterations and device against the rank's
own truth (what the rank's loop and its collective library counted), and the NCCL-like library's
memory: attributed to it, imports/IPC/multicast never counted, the overlapping windows counted once."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import pyinterpose
from pyinterpose.analysis import ranks as R
from pyinterpose.analysis.summary import summarize

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

SIMTRAIN = [sys.executable, "-m", "pyinterpose.examples.simtrain"]
MiB = 1 << 20


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    from conftest import run_cli

    d = tmp_path_factory.mktemp("ranks")
    out, truth = str(d / "job.pit"), str(d / "truth.json")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", *SIMTRAIN, "--ranks", "3", "--steps", "6",
                 "--layers", "3", "--truth", truth)
    assert cp.returncode == 0, cp.stderr
    with open(truth) as f:
        return pyinterpose.load(out), json.load(f)


def test_per_rank_figures_equal_each_ranks_truth(three_ranks):
    tr, truth = three_ranks
    s = summarize(tr)
    got = {r["rank"]: r for r in s["per_rank"]}
    assert sorted(got) == [0, 1, 2]
    for t in truth["ranks"]:
        g = got[t["rank"]]
        assert g["pid"] == t["pid"]
        assert g["peak_live_bytes"] == t["peak_live_bytes"]
        assert g["iterations"] == t["steps"] == 6
        assert g["device"] == t["device"] and g["device_uuid"] == t["device_uuid"]
        assert (g["world_size"], g["local_rank"], g["rank_source"]) == (3, t["local_rank"], "RANK")
        assert g["collective_peak_bytes"] == t["nccl"]["owned_bytes"]
    peaks = np.array([t["peak_live_bytes"] for t in sorted(truth["ranks"], key=lambda t: t["rank"])], float)
    assert s["ranks"]["imbalance"] == pytest.approx(peaks.max() / np.median(peaks), rel=1e-12)
    assert s["ranks"]["max_rank"] == truth["heavy_rank"] == 2
    assert len({r["device_uuid"] for r in s["per_rank"]}) == 3


def test_collective_memory_is_attributed_and_never_counted_twice(three_ranks):
    tr, truth = three_ranks
    b = tr.blocks
    for t in truth["ranks"]:
        n = t["nccl"]
        assert n["verified"] == 2          # both peers' writes reached this rank's buffer: shared for real
        mine = b[b["pid"] == t["pid"]]
        lib = mine[mine["owner"].astype(str) == "libsimnccl.so"]
        kinds = lib["kind"].astype(str).value_counts().to_dict()
        assert kinds == {"vmm": 2, "vmm_import": 2, "ipc": 2, "multicast": 1, "device": 1, "pool": 4}, kinds
        # a peer's IPC buffer opened here: its size known (cuMemGetAddressRange_v2), never counted here
        ipc = lib[lib["kind"].astype(str) == "ipc"]
        assert (ipc["size"] == 2 * MiB).all() and not ipc["counts_device"].any()
        # peers' buffers, IPC opens and the multicast object count nothing here
        assert not lib[lib["kind"].astype(str).isin(["vmm_import", "ipc", "multicast"])]["counts_device"].any()
        # the two windows (4 + 4 MiB) of one 6 MiB handle count 6 MiB
        own = lib[lib["kind"].astype(str) == "vmm"]
        assert own["size"].sum() == 8 * MiB and own["device_bytes"].sum() == n["buffer_bytes"] == 6 * MiB
        assert (own["handle_types"] == 1).all()            # created exportable as POSIX fds, as NCCL does
        # the library's own peak: buffer + IPC buffer + pool objects, each once
        assert pyinterpose.trace.model.peak_live_bytes(lib) == n["owned_bytes"]
    # summed over the job, the peers' memory is counted once: by its owner
    total = sum(r["collective_peak_bytes"] for r in R.per_rank(tr))
    assert total == sum(t["nccl"]["owned_bytes"] for t in truth["ranks"])


def test_visible_devices_remap_to_the_physical_gpu(capture, tmp_path):
    truth_path = str(tmp_path / "truth.json")
    path, cp = capture([*SIMTRAIN, "--ranks", "2", "--steps", "4", "--layers", "2", "--visible-devices",
                        "--no-multicast", "--truth", truth_path])
    assert cp.returncode == 0, cp.stderr
    with open(truth_path) as f:
        truth = json.load(f)
    got = {r["rank"]: r for r in R.per_rank(pyinterpose.load(path))}
    for t in truth["ranks"]:
        g = got[t["rank"]]
        assert g["device"] == 0 == t["device"]                 # each sees one GPU, as ordinal 0
        assert g["cuda_visible_devices"] == str(t["rank"])
        assert g["device_uuid"] == t["device_uuid"]            # ... the physical one, by UUID
        assert g["peak_live_bytes"] == t["peak_live_bytes"] and g["iterations"] == 4
    assert got[0]["device_uuid"] != got[1]["device_uuid"]


def test_the_report_shows_each_rank(three_ranks):
    from pyinterpose.report import html

    tr, truth = three_ranks
    rep = html.build(tr, time_limit=0.2)
    want = {t["rank"]: t["peak_live_bytes"] for t in truth["ranks"]}
    assert {r["rank"]: r["peak_live_bytes"] for r in rep.headlines["per_rank"]} == want
    sec = [s for s in rep.sections if s.id == "ranks"]
    assert len(sec) == 1 and sec[0].tables and len(sec[0].figures) == 1
    assert all(f"rank {t['rank']}: " in sec[0].figures[0][1] for t in truth["ranks"])
    assert rep.headlines["ranks"]["max_rank"] == truth["heavy_rank"]


@pytest.mark.parametrize("framework", ["jax", "tf"])
def test_driver_api_programs_name_their_device(capture, tmp_path, framework):
    """jax/tf paths reach the device only through driver contexts (cuDevicePrimaryCtxRetain + cuCtxSetCurrent,
    no cudaSetDevice): the events and the recorded UUID still name device 1."""
    truth_path = str(tmp_path / "truth.json")
    path, cp = capture([*SIMTRAIN, "--framework", framework, "--device", "1", "--steps", "4", "--layers", "2",
                        "--truth", truth_path], env={"SIMCUDA_DEVICES": "2"})
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    dev = tr.blocks[tr.blocks["counts_device"]]
    assert set(dev["device"].tolist()) == {1}
    devices = json.loads(tr.processes["devices"].iloc[0])
    assert devices == [[1, "GPU-73696d63-7564-612d-0000-000000000002"]]


def test_summary_text_and_json_of_one_trace(three_ranks):
    from conftest import run_cli

    tr, truth = three_ranks
    cp = run_cli("summary", tr.path, env={"COLUMNS": "200"})
    assert cp.returncode == 0, cp.stderr
    assert "3 ranks: imbalance (max peak / median)" in cp.stdout and "first to reach its peak: rank" in cp.stdout
    cp = run_cli("summary", tr.path, "--json")
    assert cp.returncode == 0, cp.stderr
    pr = json.loads(cp.stdout)["per_rank"]
    assert [(r["rank"], r["pid"], r["peak_live_bytes"]) for r in pr] == \
        [(t["rank"], t["pid"], t["peak_live_bytes"]) for t in sorted(truth["ranks"], key=lambda t: t["rank"])]
    assert all(r["device_uuid"].startswith("GPU-") for r in pr)
