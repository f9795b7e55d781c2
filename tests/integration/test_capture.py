"""The capture half, for real: the preload shim on simcuda, the ring, the drain,
the trace file.  Ground truth is what the C workload itself says it did."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import pyinterpose
from conftest import last_json_line, run_cli


def test_shim_has_no_cuda_or_python_dependency(native):
    readelf = shutil.which("readelf")
    if not readelf:
        pytest.skip("readelf (binutils) not installed")
    out = subprocess.run([readelf, "-d", os.path.join(native, "libpyinterpose.so")], capture_output=True,
                         text=True, check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    assert needed, out
    for lib in needed:
        assert not lib.startswith(("libcudart", "libcuda", "libpython")), needed


def test_shim_does_nothing_at_load_time(native):
    """Preloaded into programs that make no CUDA call, with a session set: no ring,
    no output, exit status untouched."""
    session = "loadtime" + str(os.getpid())
    env = dict(os.environ, LD_PRELOAD=os.path.join(native, "libpyinterpose.so"), PYINTERPOSE_SESSION=session)
    cp = subprocess.run(["sh", "-c", "ls / > /dev/null; exit 3"], env=env, capture_output=True, text=True)
    assert cp.returncode == 3 and cp.stderr == ""
    assert not [n for n in os.listdir("/dev/shm") if session in n]


@pytest.mark.slow
def test_every_hook_path_counts_exactly(capture, cbuild):
    prog = cbuild("shim_workload")
    path, cp = capture([prog, "all"])
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)  # the program's own stdout reaches us untouched
    tr = pyinterpose.load(path)
    c = tr.counts
    assert c["alloc"] == truth["allocs"] == 14
    assert c["free"] == truth["frees"]
    assert c["launch"] == truth["launches"]
    assert c["access"] == truth["accesses"]
    assert c["failure"] == truth["failures"] == 1
    assert c["copy"] == truth["copies"] and c["memset"] == truth["memsets"]
    assert c["advise"] + c["prefetch"] == truth["hints"]
    assert truth["export_table_untouched"] == 1
    assert c["unmatched_free"] == 0
    # every resolution path reached a hook, and the ABI variant is the exact one asked for
    by_api = c["by_api"]
    for api in ("cudaMalloc", "cudaMallocAsync", "cudaMallocManaged", "cudaMallocPitch", "cudaMallocHost",
                "cudaLaunchKernel", "cudaMemcpy", "cudaMemset", "cudaMemAdvise", "cudaMemPrefetchAsync",
                "cuMemAlloc_v2", "cuLaunchKernel", "cuMemAllocFromPoolAsync", "cuMemAllocManaged",
                "cuMemAdvise_v2", "cuLaunchKernelEx", "cuMemAddressReserve", "cuMemCreate", "cuMemMap",
                "cuMemUnmap", "cuMemRelease", "cuMemAddressFree"):
        assert by_api.get(api, 0) >= 1, (api, by_api)
    assert by_api["cuMemFreeAsync_ptsz"] == 1  # per-thread flag -> the _ptsz ABI
    assert "cuMemFreeAsync" not in by_api
    assert by_api["cuMemAlloc_v2"] == 4  # 3 via dlsym + 1 via cudaGetDriverEntryPoint
    # runtime calls reach the driver inside simcuda; only the outermost call is recorded
    assert by_api["cudaMalloc"] == 2 and by_api["cudaFree"] == 3
    # a failed allocation is a failure, never a block
    f = tr.failures
    assert len(f) == 1 and f["api"].iloc[0] == "cudaMalloc" and f["result"].iloc[0] == 2
    assert (tr.blocks["size"] == (1 << 50)).sum() == 0
    b = tr.blocks
    assert b["freed"].all()
    # reserve + create + map are one logical vmm block; the reservation is in trace.reservations
    assert sorted(b["kind"].astype(str).unique()) == sorted(
        ["device", "async", "managed", "pitch", "host", "pool", "vmm"])
    assert len(tr.reservations) == 1 and tr.reservations["size"].iloc[0] == 4 << 20
    # device memory: host does not count
    assert set(b[b["counts_device"]]["kind"].astype(str)) == {"device", "async", "managed", "pitch", "pool", "vmm"}
    # the interior pointer (b + 12345) was attributed to the 3 MiB async block
    acc = tr.accesses.merge(b[["block_id", "size", "kind"]], on="block_id")
    first_launch = tr.launches.sort_values("seq").iloc[0]
    touched = acc[acc["seq"] == first_launch["seq"]]
    assert sorted(touched["kind"].astype(str)) == ["async", "device", "managed"]
    assert first_launch["kernel_name"] == "k3_runtime"
    assert set(tr.kernels) >= {"k3_runtime", "k3_driver", "kstruct"}
    # the packed `extra` launch: one pointer param + a struct holding two pointers
    ks = tr.launches[tr.launches["kernel_name"] == "kstruct"]
    assert ks["n_access"].tolist() == [3]
    # copies: destination written, source (pinned host) read
    cp_acc = acc[acc["op"] == "copy"]
    assert sorted(cp_acc["kind"].astype(str)) == ["device", "host"]


@pytest.mark.slow
def test_no_access_option(capture, cbuild):
    path, cp = capture([cbuild("shim_workload"), "all"], "--no-access")
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    assert tr.counts["launch"] == 6 and tr.counts["access"] == 0
    assert tr.meta["access"] is False


@pytest.mark.slow
def test_ring_back_pressure_is_lossless(capture, cbuild):
    """8 threads x 200k alloc/free pairs plus launches through a 4096-record ring."""
    path, cp = capture([cbuild("shim_workload"), "stress", "200000", "8"], "--ring-records", "4096",
                       timeout=600)
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    assert tr.counts["alloc"] == truth["allocs"] == 8 * 200001
    assert tr.counts["free"] == truth["frees"]
    assert tr.counts["launch"] == truth["launches"]
    assert tr.counts["access"] == truth["accesses"]
    assert tr.counts["events"] > 16 * 4096  # far more events than the ring holds
    p = tr.processes.iloc[0]
    assert p["lost"] == 0 and p["written"] == tr.counts["events"]
    assert p["waits"] > 0  # producers did wait for the drain
    assert tr.blocks["freed"].all() and tr.counts["unmatched_free"] == 0


@pytest.mark.slow
def test_forked_child_is_its_own_process(capture, cbuild):
    path, cp = capture([cbuild("shim_workload"), "fork", "500"])
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    procs = tr.processes.set_index("pid")
    assert set(procs.index) == {truth["parent"], truth["child"]}
    assert bool(procs.loc[truth["child"], "forked"]) and not bool(procs.loc[truth["parent"], "forked"])
    per = tr.blocks.groupby("pid").size()
    assert per[truth["parent"]] == truth["parent_allocs"]
    assert per[truth["child"]] == truth["child_allocs"]
    assert (procs["lost"] == 0).all()


@pytest.mark.slow
def test_execd_children_are_captured(capture, cbuild):
    prog = cbuild("shim_workload")
    path, cp = capture(["sh", "-c", f"{prog} all && {prog} all"])
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    per = tr.blocks.groupby("pid").size()
    # 14 allocations each, of which reserve + create + map make one VMM block
    assert len(per) == 2 and (per == 12).all()
    assert tr.reservations.groupby("pid").size().tolist() == [1, 1]


@pytest.mark.slow
def test_sigkill_keeps_everything_before_the_kill(tmp_path, cbuild, native):
    out = str(tmp_path / "k.pit")
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-m", "pyinterpose", "run", "-q", "--simulated-gpu", "-o", out, "--",
                             cbuild("shim_workload"), "sleep", "3000"], stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    truth = last_json_line(line)
    os.kill(truth["pid"], signal.SIGKILL)
    assert proc.wait(timeout=60) == 128 + signal.SIGKILL
    tr = pyinterpose.load(out)
    assert tr.counts["alloc"] == 3000
    assert (~tr.blocks["freed"]).all()  # never freed: marked, lifetime to the end of the trace
    assert (tr.blocks["t_free"] == tr.end_ns).all()


@pytest.mark.slow
def test_sigterm_is_forwarded_and_exit_code_kept(tmp_path):
    out = str(tmp_path / "s.pit")
    proc = subprocess.Popen([sys.executable, "-m", "pyinterpose", "run", "-q", "-o", out, "--", "sh", "-c",
                             "trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 42
    assert pyinterpose.load(out).meta["trailer"]["exit_status"] == 42


@pytest.mark.slow
def test_exit_code_and_output_streams_are_the_programs(tmp_path):
    out = str(tmp_path / "e.pit")
    cp = run_cli("run", "-o", out, "--", "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 7")
    assert cp.returncode == 7
    assert cp.stdout == "to-stdout\n"
    assert cp.stderr.startswith("to-stderr\n")
    assert f"wrote {out}" in cp.stderr and "pyinterpose summary" in cp.stderr  # next steps, on stderr


@pytest.mark.slow
def test_second_preloaded_library_using_rtld_next_keeps_working(tmp_path, cbuild, native):
    other = cbuild("shim_other_preload", shared=True, link_cudart=False)
    prog = cbuild("shim_workload")
    for order in ("shim-first",):
        report = tmp_path / f"calls-{order}"
        out = str(tmp_path / f"{order}.pit")
        # `run` puts the shim first, then the user's preloads (the parent python has `other` too)
        env = {"OTHER_PRELOAD_REPORT": str(report), "LD_PRELOAD": other}
        cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", prog, "stress", "1000", "2", env=env)
        assert cp.returncode == 0, cp.stderr
        assert sum(map(int, report.read_text().split())) == 2 * 1001  # every cudaMalloc went through it
        tr = pyinterpose.load(out)
        assert tr.counts["alloc"] == 2 * 1001  # ... and through the shim


@pytest.mark.slow
def test_other_library_preloaded_before_the_shim(tmp_path, cbuild, native):
    """LD_PRELOAD=other:shim by hand: the other library's RTLD_NEXT reaches the shim, then cudart."""
    other = cbuild("shim_other_preload", shared=True, link_cudart=False)
    prog = cbuild("shim_workload")
    report = tmp_path / "calls"
    env = dict(os.environ, LD_PRELOAD=f"{other}:{os.path.join(native, 'libpyinterpose.so')}",
               OTHER_PRELOAD_REPORT=str(report), LD_LIBRARY_PATH=os.path.join(native, "simcuda"))
    cp = subprocess.run([prog, "stress", "500", "2"], env=env, capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert sum(map(int, report.read_text().split())) == 2 * 501


@pytest.mark.slow
def test_reserved_view_sets_no_knobs(capture, cbuild):
    path, cp = capture([cbuild("shim_workload"), "all"], "--view", "reserved")
    assert cp.returncode == 0
    tr = pyinterpose.load(path)
    assert tr.meta["view"] == "reserved" and tr.meta["knobs"] == {}


@pytest.mark.slow
def test_blocks_view_knobs_reach_the_program_and_the_trace(capture):
    path, cp = capture([sys.executable, "-c", "import os; print(os.environ['PYTORCH_CUDA_ALLOC_CONF'], "
                                             "os.environ['XLA_PYTHON_CLIENT_ALLOCATOR'], "
                                             "os.environ.get('XLA_FLAGS', '<unset>'), "
                                             "os.environ['TF_GPU_ALLOCATOR'])"], env={"XLA_FLAGS": ""})
    # XLA's command buffers (CUDA graphs) stay on: the view changes no XLA flag, and the trace says so
    assert cp.stdout.split() == ["backend:cudaMallocAsync", "platform", "cuda_malloc_async"]
    meta = pyinterpose.load(path).meta
    assert "XLA_FLAGS" not in meta["knobs"] and meta["cuda_graphs"].startswith("left on")
    knobs = meta["knobs"]
    assert knobs["PYTORCH_CUDA_ALLOC_CONF"] == "backend:cudaMallocAsync"
    assert knobs["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


@pytest.mark.slow
def test_mark_step_becomes_a_marker(capture):
    path, cp = capture([sys.executable, "-c",
                        "import pyinterpose\nfor i in range(5): assert pyinterpose.mark_step('step')\n"])
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    assert len(tr.markers) == 5 and set(tr.markers["label"]) == {"step"}
    assert not pyinterpose.mark_step()  # not under pyinterpose: a no-op


@pytest.mark.slow
def test_python_dash_m_works_the_same(tmp_path):
    out = str(tmp_path / "m.pit")
    cp = subprocess.run([sys.executable, "-m", "pyinterpose", "run", "-q", "-o", out, "--", "true"],
                        capture_output=True, text=True)
    assert cp.returncode == 0 and os.path.exists(out)


# ---- bad input: one line, non-zero, no traceback ------------------------------------------
def _one_line_error(cp):
    assert cp.returncode != 0
    assert "Traceback" not in cp.stderr
    lines = [l for l in cp.stderr.strip().splitlines() if l]
    assert len(lines) == 1 and lines[0].startswith("pyinterpose: error:"), cp.stderr
    return lines[0]


def test_run_without_a_command():
    assert "no command" in _one_line_error(run_cli("run"))
    assert "no command" in _one_line_error(run_cli("run", "--"))


def test_run_missing_program(tmp_path):
    cp = run_cli("run", "-o", str(tmp_path / "x.pit"), "--", "/nonexistent/prog")
    assert "not found" in _one_line_error(cp)
    assert cp.returncode == 127
    cp = run_cli("run", "-o", str(tmp_path / "x.pit"), "--", "no-such-program-xyz")
    assert "not found" in _one_line_error(cp)


def test_run_unwritable_output(tmp_path):
    cp = run_cli("run", "-o", "/nonexistent-dir/x.pit", "--", "true")
    assert "/nonexistent-dir does not exist" in _one_line_error(cp)
    assert cp.returncode == 2


@pytest.mark.slow
def test_summary_on_bad_files(tmp_path, capture, cbuild):
    junk = tmp_path / "junk.pit"
    junk.write_bytes(b"hello world, not a trace at all")
    assert "not a pyinterpose trace" in _one_line_error(run_cli("summary", str(junk)))
    empty = tmp_path / "empty.pit"
    empty.write_bytes(b"")
    assert "empty" in _one_line_error(run_cli("summary", str(empty)))
    assert "no such file" in _one_line_error(run_cli("summary", str(tmp_path / "missing.pit")))
    # a newer format version
    path, _ = capture([cbuild("shim_workload"), "all"])
    data = bytearray(open(path, "rb").read())
    data[8] = 99
    newer = tmp_path / "newer.pit"
    newer.write_bytes(bytes(data))
    assert "newer" in _one_line_error(run_cli("summary", str(newer)))


@pytest.mark.slow
def test_truncated_trace_reads_up_to_last_complete_chunk(tmp_path, capture, cbuild):
    path, _ = capture([cbuild("shim_workload"), "stress", "100000", "2"])  # many 64k-record chunks
    full = pyinterpose.load(path)
    data = open(path, "rb").read()
    cut = tmp_path / "cut.pit"
    cut.write_bytes(data[: len(data) * 2 // 3])
    part = pyinterpose.load(str(cut))
    assert part.warnings and "cut short" in part.warnings[0]
    assert 0 < part.counts["events"] < full.counts["events"]
    cp = run_cli("summary", str(cut), "--json")
    assert cp.returncode == 0 and "warning" in cp.stderr and "Traceback" not in cp.stderr


def _process_group(pgid):
    """The pids of a process group (Linux /proc)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[2]) == pgid:
                pids.append(int(name))
    return pids


@pytest.mark.slow
def test_a_pause_of_the_whole_run_is_not_a_dead_drain(tmp_path, cbuild):
    """A stop of every process of the run (a VM descheduled, SIGSTOP, a suspended laptop) stops
    the drain's heartbeat and the blocked producers alike, but the clock runs on: on resuming,
    the producers saw a heartbeat older than the lease and gave the drain up (1.4 M events lost
    once in CI).  They must wait to see the heartbeat stay still while they themselves run."""
    out = str(tmp_path / "p.pit")
    env = dict(os.environ, PYINTERPOSE_LEASE_S="1")
    n = 200000
    proc = subprocess.Popen([sys.executable, "-m", "pyinterpose", "run", "-q", "--simulated-gpu", "-o", out,
                             "--ring-records", "4096", "--", cbuild("shim_workload"), "stress", str(n), "8"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        # stop it once the drain has written a first part of the trace (not after a fixed sleep: on
        # an idle machine a short run was over before the stop came); the producers are then running,
        # blocked on the small ring
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if os.path.exists(out) and os.path.getsize(out) > (1 << 20):
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the workload ended before it could be stopped"
        os.killpg(proc.pid, signal.SIGSTOP)
        time.sleep(2.5)                              # longer than the lease
        # resume the workload first and the drain (`run` itself) 50 ms later, as a scheduler may
        # after a pause: the producers then surely look at the heartbeat before it beats again
        for pid in _process_group(proc.pid):
            if pid != proc.pid:
                os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stderr
    truth = last_json_line(stdout)
    tr = pyinterpose.load(out)
    assert tr.counts["alloc"] == truth["allocs"] == 8 * (n + 1)
    assert tr.counts["free"] == truth["frees"]
