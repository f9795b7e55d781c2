"""Call sites on simcuda: Python stacks, owners, native stacks, threads without
Python, fork, and a multi-threaded stress run.  Ground truth: the lines and the
objects the workload (tests/py/stacks_workload.py) knows it allocated from."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import sysconfig

import pytest

import pyinterpose
from conftest import ROOT, gpu_trace, last_json_line, run_cli
from pyinterpose.trace import stacks as S

pytestmark = pytest.mark.slow   # every test here captures, replays or loads whole traces (> a few s)

WORKLOAD = os.path.join(ROOT, "tests", "py", "stacks_workload.py")
STRESS = os.path.join(ROOT, "tests", "py", "stacks_stress.py")


def _pythons():
    """This interpreter plus any other CPython 3.10-3.13 with headers found under pyenv."""
    out = [("this", sys.executable, sysconfig.get_paths()["include"])]
    import pwd

    home = pwd.getpwuid(os.getuid()).pw_dir      # the tests run with a private HOME: pyenv is in the real one
    root = os.environ.get("PYENV_ROOT") or os.path.join(home, ".pyenv")
    for exe in sorted(glob.glob(os.path.join(root, "versions", "3.1[0-4].*", "bin", "python3"))):
        ver = exe.split("/versions/")[1].split("/")[0]
        if ver.rsplit(".", 1)[0] == "%d.%d" % sys.version_info[:2]:
            continue
        out.append((ver, exe, None))
    return out


@pytest.fixture(scope="module")
def helper(cbuild):
    return cbuild("stacks_helper", shared=True)


def _build_ext(python: str, tmp, native, cc="cc"):
    """Compile tests/c/stacks_ext.c for ``python``; returns its directory (None without headers)."""
    info = subprocess.run([python, "-c", "import sysconfig, json; print(json.dumps("
                           "[sysconfig.get_paths()['include'], sysconfig.get_config_var('EXT_SUFFIX')]))"],
                          capture_output=True, text=True)
    if info.returncode:
        return None
    inc, suffix = json.loads(info.stdout)
    if not os.path.exists(os.path.join(inc, "Python.h")):
        return None
    d = tmp / ("ext-" + suffix.strip(".").replace(".", "-"))
    d.mkdir(exist_ok=True)
    sim = os.path.join(native, "simcuda")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-I" + inc, "-o", str(d / ("stacks_ext" + suffix)),
                    os.path.join(ROOT, "tests", "c", "stacks_ext.c"), "-L" + sim, "-l:libcudart.so.13",
                    "-Wl,-rpath," + sim], check=True)
    return str(d)


def _check_workload(path, truth):
    tr = pyinterpose.load(path)
    b = tr.blocks
    assert int(tr.processes["lost"].sum()) == 0
    for t in truth["allocs"]:
        rows = b[(b["size"] == t["size"]) & (b["pid"] == t["pid"])]
        assert len(rows) == t.get("count", 1), t
        for _, r in rows.iterrows():
            owner = str(r["owner"])
            if t["owner"] == "ffi":
                assert owner.startswith(("libffi", "_ctypes")), (t, owner)
            else:
                assert owner == t["owner"], (t, owner)
            sid = int(r["stack_id"])
            assert sid >= 0, t
            frames = S.frames_of(tr, sid)
            if t["kind"] == "python":
                got = [(f["function"].rsplit(".", 1)[-1], f["line"]) for f in frames[:len(t["frames"])]]
                assert got == [tuple(x) for x in t["frames"]], (t, got)
                assert all(f["filename"] == truth["file"] for f in frames[:len(t["frames"])])
                fn, line = t["frames"][0]
                assert S.call_site(tr, sid) == f"stacks_workload.py:{line} in {fn}"
            elif t["kind"] == "nopython":
                assert S.call_site(tr, sid) == "<no Python frames> libstacks_helper.so"
            else:
                assert S.call_site(tr, sid) == "backward (autograd thread) libstacks_helper.so"
    return tr


def test_python_stacks_match_the_lines_the_workload_knows(capture, helper, native, tmp_path):
    ext = _build_ext(sys.executable, tmp_path, native)
    path, cp = capture([sys.executable, WORKLOAD, helper] + ([ext] if ext else []))
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = _check_workload(path, truth)
    assert tr.meta["stacks"] == "python"
    # the forked child is its own process and its stack reaches back into the parent's main()
    child = [t for t in truth["allocs"] if t["size"] == 10050][0]["pid"]
    assert child in tr.processes["pid"].tolist()
    # interned: the three loop allocations share one stack id
    loop = tr.blocks[tr.blocks["size"].between(10010, 10012)]
    assert loop["stack_id"].nunique() == 1
    # a definition is written once: no duplicate (parent, frame) nodes in one process's tables
    assert not tr.stacks.duplicated(["parent_id", "frame_id"]).any()


@pytest.mark.parametrize("ver,exe,inc", _pythons()[1:] or [pytest.param(None, None, None, marks=pytest.mark.skip(
    reason="no other CPython 3.10-3.14 installed under ~/.pyenv"))])
def test_python_stacks_on_other_cpython_versions(capture, helper, native, tmp_path, ver, exe, inc):
    ext = _build_ext(exe, tmp_path, native)
    path, cp = capture([exe, WORKLOAD, helper] + ([ext] if ext else []))
    assert cp.returncode == 0, cp.stderr
    _check_workload(path, last_json_line(cp.stdout))


def test_stacks_none_records_owner_but_no_stack(capture, helper):
    path, cp = capture([sys.executable, WORKLOAD, helper], "--stacks", "none")
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    b = tr.blocks
    assert (b["stack_id"] == -1).all() and len(tr.stacks) == 0
    assert (b.loc[b["size"] == 10002, "owner"] == "libstacks_helper.so").all()
    assert (b["owner"] != "").all()


def test_native_stacks_are_symbolised_after_the_run(capture, helper):
    path, cp = capture([sys.executable, WORKLOAD, helper], "--stacks", "native")
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    b = tr.blocks
    sid = int(b.loc[b["size"] == 10002, "stack_id"].iloc[0])
    frames = S.frames_of(tr, sid)
    assert frames[0]["kind"] == "native" and frames[0]["object"] == "libstacks_helper.so"
    assert frames[0]["function"] == "helper_alloc"
    sid = int(b.loc[b["size"] == 10030, "stack_id"].iloc[0])
    names = [f["function"] for f in S.frames_of(tr, sid)]
    assert names[:1] == ["worker"], names  # the pthread's start routine in libstacks_helper.so


def test_not_a_python_program_gets_owner_and_a_note(capture, cbuild):
    prog = cbuild("shim_workload")
    path, cp = capture([prog, "all"])
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    assert any("no CPython" in n["note"] for n in tr.meta["capture_notes"])
    assert (tr.blocks["owner"] == "shim_workload").any()
    assert set(S.call_site(tr, s) for s in tr.blocks["stack_id"].unique()) == {"<no Python frames> shim_workload"}


def test_eight_threads_with_stacks_lose_nothing(capture, helper):
    path, cp = capture([sys.executable, STRESS, "8", "3000"], "--ring-records", "4096", timeout=600)
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    assert int(tr.processes["lost"].sum()) == 0
    b = tr.blocks
    assert len(b) == truth["allocs"]
    # each thread allocates at recursion depth d = size % 7 from one known line
    for d in range(7):
        sids = b.loc[b["size"] % 7 == d, "stack_id"].unique()
        for sid in sids:
            fr = S.frames_of(tr, int(sid))
            assert fr[0]["line"] == truth["line"] and fr[0]["function"].endswith("alloc")
            assert sum(f["function"].endswith("recurse") for f in fr) == d + 1


def test_old_traces_read_with_empty_tables():
    path = gpu_trace("torch-cnn-blocks.pit")
    tr = pyinterpose.load(path)
    assert (tr.blocks["owner"] == "").all() and (tr.blocks["stack_id"] == -1).all()
    assert len(tr.frames) == 0 and len(tr.stacks) == 0
    assert len(S.top_call_sites(tr)) == 0


def test_summary_shows_top_call_sites(capture, helper):
    path, cp = capture([sys.executable, WORKLOAD, helper])
    assert cp.returncode == 0, cp.stderr
    out = run_cli("summary", path, "--json")
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    sites = s["call_sites"]
    by_count = {r["call_site"]: r["blocks"] for r in sites["by_count"]}
    tr = pyinterpose.load(path)
    direct = int(tr.blocks["owner"].astype(str).str.startswith(("libffi", "_ctypes")).sum())
    line = [t for t in last_json_line(cp.stdout)["allocs"] if t["size"] == 10001][0]["frames"][0][1]
    assert by_count[f"stacks_workload.py:{line} in direct"] == direct  # the forked child's too
    text = run_cli("summary", path)
    assert "call sites" in text.stdout


def _fakepy(native, tmp_path, cc):
    sim = os.path.join(native, "simcuda")
    prog = str(tmp_path / "fakepy")
    subprocess.run([cc, "-O1", "-rdynamic", "-o", prog, os.path.join(ROOT, "tests", "c", "stacks_fakepy.c"),
                    "-L" + sim, "-l:libcudart.so.13", "-Wl,-rpath," + sim], check=True)
    return prog


@pytest.mark.parametrize("version,runtime,expect", [
    ("3.12.1 experimental free-threading build (main, Oct  7 2024) [GCC 12.2.0]", "",
     "free-threaded CPython build is not supported before 3.13"),
    ("3.13.0 experimental free-threading build (main, Oct  7 2024) [GCC 12.2.0]", "",
     "CPython 3.13 without _Py_DebugOffsets in _PyRuntime"),
    ("3.9.18 (main, May  9 2026) [GCC 12.2.0]", "", "CPython 3.9 is not supported"),
    ("3.15.0a1 (main, May  9 2026) [GCC 12.2.0]", "3.15", "CPython 3.15 is not supported (3.10-3.14"),
    ("3.14.0 (main, Oct  7 2025) [GCC 12.2.0]", "3.13", "_PyRuntime says version 0x30d00f0"),
])
def test_unsupported_python_is_refused_with_a_note(capture, native, tmp_path, cc, version, runtime, expect):
    prog = _fakepy(native, tmp_path, cc)
    path, cp = capture([prog], env={"FAKE_PY_VERSION": version, "FAKE_PY_RUNTIME": runtime})
    assert cp.returncode == 0, cp.stderr
    tr = pyinterpose.load(path)
    notes = [n["note"] for n in tr.meta["capture_notes"]]
    assert len(notes) == 1 and expect in notes[0], notes
    b = tr.blocks
    assert len(b) == 1 and b["owner"].iloc[0] == "fakepy"
    assert S.call_site(tr, int(b["stack_id"].iloc[0])) == "<no Python frames> fakepy"
    out = run_cli("summary", path)
    assert expect in " ".join(out.stdout.split())   # rich wraps long lines


@pytest.mark.parametrize("free_threaded", [False, True], ids=["gil", "free-threaded"])
def test_python_314_frames_are_read_through_its_debug_offsets(capture, native, tmp_path, cc, free_threaded):
    """A fake CPython 3.14 (tests/c/stacks_fakepy.c): its _Py_DebugOffsets (laid out as 3.14 declares them)
    give offsets no real CPython uses; f_executable is a tagged _PyStackRef; frames owned by the interpreter
    (3) or the C stack (4, renumbered in 3.14) and a NULL executable are not Python frames.  Free-threaded:
    the innermost frame runs a thread-local copy of its bytecode (co_tlbc[tlbc_index])."""
    prog = _fakepy(native, tmp_path, cc)
    version = "3.14.0 " + ("experimental free-threading build " if free_threaded else "") + "(main) [GCC 12.2.0]"
    path, cp = capture([prog], env={"FAKE_PY_VERSION": version, "FAKE_PY_RUNTIME": "3.14",
                                    "FAKE_PY_FT": "1" if free_threaded else "0"})
    assert cp.returncode == 0, cp.stderr
    want = last_json_line(cp.stdout)["frames"]
    tr = pyinterpose.load(path)
    assert tr.meta["capture_notes"] == []
    b = tr.blocks
    assert len(b) == 1
    got = [[f["filename"], f["function"], f["line"]] for f in S.frames_of(tr, int(b["stack_id"].iloc[0]))]
    assert got == want
    assert S.call_site(tr, int(b["stack_id"].iloc[0])) == "train.py:15 in forward"


def test_daemon_threads_allocating_through_interpreter_exit(capture):
    for i in range(3):
        path, cp = capture([sys.executable, os.path.join(ROOT, "tests", "py", "stacks_exit.py")],
                           name=f"exit{i}.pit")
        assert last_json_line(cp.stdout) == {"started": 4}
        tr = pyinterpose.load(path)
        # exit_group can kill a daemon thread between reserving its record and writing it: at most one
        # record per thread is lost, and then the loss is counted and run says so (exit 3), never hidden
        lost = int(tr.processes["lost"].sum())
        assert lost <= 4
        assert cp.returncode == (3 if lost else 0), cp.stderr
        assert ("INCOMPLETE" in cp.stderr) == bool(lost), cp.stderr
        assert len(tr.blocks) > 0 and (tr.blocks["stack_id"] >= 0).all()


def test_depth_limit_keeps_the_innermost_frames(capture, helper):
    path, cp = capture([sys.executable, WORKLOAD, helper], env={"PYINTERPOSE_STACK_DEPTH": "5"})
    assert cp.returncode == 0, cp.stderr
    truth = last_json_line(cp.stdout)
    tr = pyinterpose.load(path)
    want = [t for t in truth["allocs"] if t["size"] == 10005][0]["frames"][:5]  # deep(40): 43 frames
    sid = int(tr.blocks.loc[tr.blocks["size"] == 10005, "stack_id"].iloc[0])
    got = [(f["function"], f["line"]) for f in S.frames_of(tr, sid)]
    assert got == [tuple(x) for x in want]
