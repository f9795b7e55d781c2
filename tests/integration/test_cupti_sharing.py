"""Sharing CUPTI with the program's own profiler (issue 33 item 8), on simcuda's libcupti with a Kineto-like
client (tests/c/cupti_client.c: its own activity buffers, CONCURRENT_KERNEL + RUNTIME + EXTERNAL_CORRELATION,
CUSTOM0 ids around its launches).  Ground truth: the kernels the client launched while it recorded, and the
kernels the program launched before it started.

* before: the client records before the shim's first kernel: the shim never takes CUPTI; every client
  kernel is in the client's own buffers, once, with its correlation records and nothing of the shim's; the
  trace says the device clock is off and why.
* after: the shim set CUPTI up first; when the client starts, CUPTI is handed back: the client's profile is
  whole, the trace has the device times of the kernels before (every one) and a note saying where they end.
"""
from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

import pyinterpose
from conftest import ROOT, last_json_line, run_cli

N = 25


@pytest.fixture(scope="module")
def client(native, cc, tmp_path_factory):
    sim = os.path.join(native, "simcuda")
    out = str(tmp_path_factory.mktemp("cupti") / "cupti_client")
    subprocess.run([cc, "-O1", "-g", "-D_GNU_SOURCE", "-I" + os.path.join(ROOT, "native", "include"),
                    "-I" + os.path.join(ROOT, "native", "simcuda"), "-o", out,
                    os.path.join(ROOT, "tests", "c", "cupti_client.c"), "-L" + sim, "-l:libcudart.so.13",
                    "-l:libcupti.so.13", "-Wl,-rpath," + sim, "-ldl", "-lpthread"], check=True)
    return out


@pytest.fixture(scope="module")
def local_client(native, cc, tmp_path_factory):
    """The same client in a library the program dlopens with RTLD_LOCAL (as Python loads torch._C, whose
    Kineto links libcupti): its libcupti is then outside the global scope.  On an H100 (torch 2.11) the shim's
    cuptiSubscribe found no real one there with RTLD_NEXT and answered CUPTI_ERROR_NOT_INITIALIZED, and
    torch.profiler recorded no kernel at all ("CUPTI initialization failed")."""
    sim = os.path.join(native, "simcuda")
    d = tmp_path_factory.mktemp("cupti_local")
    lib, loader = str(d / "libcupti_client.so"), str(d / "cupti_client_loader")
    subprocess.run([cc, "-O1", "-g", "-D_GNU_SOURCE", "-DCLIENT_LIBRARY", "-shared", "-fPIC",
                    "-fvisibility=hidden", "-I" + os.path.join(ROOT, "native", "include"),
                    "-I" + os.path.join(ROOT, "native", "simcuda"), "-o", lib,
                    os.path.join(ROOT, "tests", "c", "cupti_client.c"), "-L" + sim, "-l:libcudart.so.13",
                    "-l:libcupti.so.13", "-Wl,-rpath," + sim, "-ldl", "-lpthread"], check=True)
    subprocess.run([cc, "-O1", "-g", "-o", loader, os.path.join(ROOT, "tests", "c", "cupti_client_loader.c"),
                    "-ldl"], check=True)
    return loader, lib


def _whole(got):
    assert got["launched"] == N
    assert got["recorded"] == N and got["twice"] == 0          # every client kernel, once, in its own buffers
    assert got["custom0"] == N                                  # its correlation records
    assert got["other_external"] == 0                           # no correlation id of ours in its profile
    assert got["foreign_kernels"] == 0 and got["foreign_buffers"] == 0


def _kernel_names(tr):
    names = np.array(tr.kernels + [""], dtype=object)
    k = tr.gpu_activity[tr.gpu_activity["kind"] == "kernel"]
    return sorted(names[k["kernel"].to_numpy()].tolist())


def test_a_profiler_recording_before_our_first_kernel_keeps_cupti(client, tmp_path):
    out = str(tmp_path / "before.pit")
    cp = run_cli("run", "--simulated-gpu", "-o", out, "--", client, "before", str(N))
    assert cp.returncode == 0, cp.stderr
    _whole(last_json_line(cp.stdout))
    tr = pyinterpose.load(out)
    p = tr.processes.iloc[0]
    assert p["clock"] == "cpu"
    assert "started activity recording before the first kernel" in p["clock_note"]
    assert "cuptiActivityRegisterCallbacks from cupti_client" in p["clock_note"]
    assert len(tr.gpu_activity) == 0 and len(tr.launches) == N
    assert "device clock: off" in cp.stderr


@pytest.mark.parametrize("lookup", ["linked", "dlsym"])
def test_a_profiler_starting_later_gets_cupti_back_and_our_times_so_far_stay(client, tmp_path, lookup):
    """Kineto links libcupti (its calls reach the shim's exports); a client that dlopens it and looks the entry
    points up with dlsym (XLA's wrapper) gets the shim's too."""
    out = str(tmp_path / "after.pit")
    cp = run_cli("run", "--simulated-gpu", "-o", out, "--", client, "after", str(N),
                 env={"CLIENT_DLSYM": "1" if lookup == "dlsym" else "0"})
    assert cp.returncode == 0, cp.stderr
    _whole(last_json_line(cp.stdout))
    tr = pyinterpose.load(out)
    p = tr.processes.iloc[0]
    assert p["clock"] == "cupti"                                 # the device times it had
    assert "CUPTI was handed back" in p["clock_note"] and "device times end here" in p["clock_note"]
    assert len(tr.launches) == 2 * N
    assert _kernel_names(tr) == sorted(f"early_k{i}" for i in range(N))   # every kernel before, none after


def test_a_profiler_whose_libcupti_is_in_a_local_scope_gets_cupti_back(local_client, tmp_path):
    """torch.profiler as it is on a real GPU: Kineto's libcupti came with a library loaded RTLD_LOCAL, so the
    real cuptiSubscribe and cuptiActivity* are not found with RTLD_NEXT; the shim finds them in the
    caller's own scope, the client's profile is whole, the trace keeps the device times before it."""
    loader, lib = local_client
    out = str(tmp_path / "local.pit")
    cp = run_cli("run", "--simulated-gpu", "-o", out, "--", loader, lib, "after", str(N))
    assert cp.returncode == 0, cp.stderr
    _whole(last_json_line(cp.stdout))
    tr = pyinterpose.load(out)
    p = tr.processes.iloc[0]
    assert p["clock"] == "cupti"
    assert "CUPTI was handed back" in p["clock_note"] and "libcupti_client.so" in p["clock_note"]
    assert _kernel_names(tr) == sorted(f"early_k{i}" for i in range(N))


def test_a_profiler_in_a_local_scope_recording_before_our_first_kernel_keeps_cupti(local_client, tmp_path):
    loader, lib = local_client
    out = str(tmp_path / "local_before.pit")
    cp = run_cli("run", "--simulated-gpu", "-o", out, "--", loader, lib, "before", str(N))
    assert cp.returncode == 0, cp.stderr
    _whole(last_json_line(cp.stdout))
    p = pyinterpose.load(out).processes.iloc[0]
    assert p["clock"] == "cpu" and "from libcupti_client.so" in p["clock_note"]


def test_without_a_client_the_clock_is_unchanged(client, cbuild, tmp_path):
    """The watch costs nothing when nobody else uses CUPTI: a plain workload keeps the device clock."""
    prog = cbuild("gpuclock_workload")
    out = str(tmp_path / "plain.pit")
    cp = run_cli("run", "-q", "--simulated-gpu", "-o", out, "--", prog, "paths", "2")
    assert cp.returncode == 0, cp.stderr
    p = pyinterpose.load(out).processes.iloc[0]
    assert p["clock"] == "cupti" and p["clock_note"] == ""
