"""GPU sampling through the real nvidia-ml-py code path, against a fake libnvidia-ml.so.1
built from tests/fake_nvml/fake_nvml.c: the test controls the devices and processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import psutil
import pytest

from workerscope import monitor

MB = 1024 * 1024
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/, where fake_nvml/ is


@pytest.fixture
def fake_nvml(tmp_path, clean_env):
    """Build the fake NVML, put it first on LD_LIBRARY_PATH, return a function that sets the
    devices/processes it reports (the sidecar's NVML reads them on every call)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the fake NVML library")
    lib = tmp_path / "lib"
    lib.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib / "libnvidia-ml.so.1"),
                    os.path.join(HERE, "fake_nvml", "fake_nvml.c")], check=True)
    config = tmp_path / "nvml.cfg"
    clean_env.setenv("LD_LIBRARY_PATH", f"{lib}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    clean_env.setenv("FAKE_NVML_CONFIG", str(config))
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        clean_env.delenv(name, raising=False)

    def configure(text: str) -> None:
        tmp = config.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, config)  # the sidecar never reads half a file

    return configure


def _child():
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)


def test_tree_processes_attributed_others_not(fake_nvml, samples):
    """GPU memory and SM use of tree members are attributed to them; a foreign process's not."""
    child = _child()
    fake_nvml(f"device 55 {3000 * MB} {80000 * MB} 250000 61 1755 -\n"
              f"proc 0 {os.getpid()} {500 * MB} c 40\n"
              f"proc 0 {child.pid} {100 * MB} g 7\n"
              f"proc 0 1 {999 * MB} c 30\n")
    try:
        with monitor(interval=0.1, endpoint=samples.endpoint) as m:
            samples.wait(3)
    finally:
        child.stdin.close()
        child.wait()
    t = m.timeline
    gpu0 = [s.values for s in t.samples if s.scope == "gpu0"]
    assert gpu0 and gpu0[-1] == {"util_percent": 55, "mem_util_percent": 27,
                                 "mem_used_bytes": 3000 * MB, "mem_total_bytes": 80000 * MB,
                                 "power_w": 250.0, "temp_c": 61, "sm_clock_mhz": 1755}
    procs = {s.pid: s.values for s in t.samples if s.scope == "proc"}
    assert procs[os.getpid()]["gpu_mem_bytes"] == 500 * MB
    assert procs[os.getpid()]["gpu_util_percent"] == 40
    assert procs[child.pid]["gpu_mem_bytes"] == 100 * MB
    tree = [s.values for s in t.samples if s.scope == "tree"][-1]
    assert tree["gpu_mem_bytes"] == 600 * MB, "pid 1 is not in the tree"
    assert not any(s.pid == 1 for s in t.samples if s.scope == "proc")


def test_not_supported_is_absent_and_noted(fake_nvml, samples):
    """Metrics a device does not support are absent (not 0) and noted once."""
    fake_nvml(f"device 10 {MB} {2 * MB} 1 2 3 PTU\n")
    with monitor(interval=0.05, endpoint=samples.endpoint, gpus="all") as m:
        samples.wait(3)
    gpu0 = [s.values for s in m.timeline.samples if s.scope == "gpu0"]
    assert len(gpu0) >= 3
    assert all("power_w" not in v and "temp_c" not in v and v["util_percent"] == 10 for v in gpu0)
    (w,) = m.timeline.workers.values()
    assert sum("power_w not supported" in n for n in w.notes) == 1
    assert any("temp_c not supported" in n for n in w.notes)


def test_lost_gpu_is_noted_and_sampling_goes_on(fake_nvml, samples, clean_env):
    """A GPU that falls off the bus mid-job is noted; the other GPU and the tree go on."""
    healthy = f"device 20 {MB} {8 * MB} 100000 50 1000 -\n"
    fake_nvml(healthy + healthy)
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # named, so shown without a context
    with monitor(interval=0.05, endpoint=samples.endpoint) as m:
        samples.wait(3)
        fake_nvml(healthy + healthy.replace(" -\n", " L\n"))
        samples.wait(3)
    t = m.timeline
    gpu1 = [s.t_ns for s in t.samples if s.scope == "gpu1"]
    gpu0 = [s.t_ns for s in t.samples if s.scope == "gpu0"]
    tree = [s.t_ns for s in t.samples if s.scope == "tree"]
    assert gpu1 and max(gpu1) < max(gpu0) and max(gpu0) == max(tree)
    (w,) = t.workers.values()
    assert any("gpu1: the GPU is lost" in n for n in w.notes)


def test_unmatched_pids_fall_back_to_device_values(fake_nvml, samples):
    """GPU processes whose pids do not exist here (another pid namespace) are noted as such."""
    fake_nvml(f"device 70 {MB} {8 * MB} 100000 50 1000 -\nproc 0 4194000 {MB} c 70\n")
    with monitor(interval=0.1, endpoint=samples.endpoint, gpus="all") as m:
        samples.wait(2)
    (w,) = m.timeline.workers.values()
    assert any("cannot be matched" in n for n in w.notes)
    assert [s for s in m.timeline.samples if s.scope == "gpu0"]
    assert all("gpu_mem_bytes" not in s.values for s in m.timeline.samples if s.scope == "proc")


def test_driver_not_loaded_is_one_clear_note(fake_nvml, samples):
    """NVML present but its init failing (no driver): one note, no GPU samples, job fine."""
    fake_nvml("nodriver\n")
    with monitor(interval=0.05, endpoint=samples.endpoint) as m:
        samples.wait(2)
    (w,) = m.timeline.workers.values()
    assert [n for n in w.notes if n.startswith("gpu:")] == ["gpu: no NVIDIA GPU metrics (Driver Not Loaded)"]
    assert not [s for s in m.timeline.samples if s.scope.startswith("gpu")]


def test_no_nvml_library_at_all(clean_env):
    """With no libnvidia-ml on the machine the note says so and everything else is sampled."""
    clean_env.setenv("LD_LIBRARY_PATH", "/nonexistent")
    with monitor(interval=0.05) as m:
        pass
    (w,) = m.timeline.workers.values()
    if not any("Shared Library Not Found" in n for n in w.notes):
        pytest.skip("this machine has a real NVML library")
    assert [s for s in m.timeline.samples if s.scope == "tree"]


# A worker in a pid namespace of its own: prints its pid and its child's as it sees them, waits
# for "go", then runs one monitored job until "done".
NS_WORKER = """
import subprocess, sys
from workerscope import monitor
child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                         stdin=subprocess.PIPE)
import os
print(os.getpid(), child.pid, flush=True)
sys.stdin.readline()
with monitor(interval=0.1, endpoint=sys.argv[1]):
    sys.stdin.readline()
child.stdin.close()
child.wait()
"""


def _nspid(pid):
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("NSpid:"))
    return [int(x) for x in line.split()[1:]]


def test_host_pids_mapped_through_nspid_in_a_pid_namespace(fake_nvml, samples, tmp_path):
    """A worker, its child and its sidecar in a pid namespace of their own, with the host's
    /proc mounted inside as containers mount it (-v /proc:/host/proc): NVML's host pids are
    mapped through NSpid to the pids the sidecar sees, so GPU memory and SM use land on the
    right tree process; the host's pid 1 is nobody in the tree."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed")
    fake_nvml(f"device 55 {3000 * MB} {80000 * MB} 250000 61 1755 -\n")
    host_proc = tmp_path / "hostproc"
    host_proc.mkdir()
    # A private mount namespace holds the bind of the host's /proc; inside it, a pid namespace
    # with its own /proc (unshare --mount-proc) runs the worker.
    script = ('mount --bind /proc "$2" && '
              'exec unshare --pid --fork --mount-proc "$3" -c "$0" "$1"')
    outer = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                              script, NS_WORKER, samples.endpoint, str(host_proc),
                              sys.executable],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        line = outer.stdout.readline()
        if not line:
            err = outer.stderr.read()
            if "Operation not permitted" in err or "unshare failed" in err or "mount" in err:
                pytest.skip(f"no pid or mount namespace here: {err.strip()}")
            raise AssertionError(err)
        worker, child = (int(x) for x in line.split())
        # The host's pids of the two, as NVML would report them.
        host = {}
        for p in psutil.Process(outer.pid).children(recursive=True):
            nspid = _nspid(p.pid)
            if len(nspid) == 2 and nspid[1] in (worker, child):
                host[nspid[1]] = nspid[0]
        assert set(host) == {worker, child} and host[worker] != worker
        fake_nvml(f"device 55 {3000 * MB} {80000 * MB} 250000 61 1755 -\n"
                  f"proc 0 {host[worker]} {500 * MB} c 40\n"
                  f"proc 0 {host[child]} {100 * MB} g 7\n"
                  f"proc 0 1 {999 * MB} c 30\n")
        outer.stdin.write("go\n")
        outer.stdin.flush()
        samples.wait(5)
        outer.stdin.write("done\n")
        outer.stdin.flush()
        assert samples.sub.wait(jobs=1, timeout=30)
    finally:
        outer.stdin.close()
        outer.wait(timeout=30)
        outer.stdout.close()
        outer.stderr.close()
    t = samples.sub.timeline()
    procs = {}
    for s in t.samples:
        if s.scope == "proc" and "gpu_mem_bytes" in s.values:
            procs[s.pid] = s.values
    assert procs[worker]["gpu_mem_bytes"] == 500 * MB
    assert procs[worker]["gpu_util_percent"] == 40
    assert procs[child]["gpu_mem_bytes"] == 100 * MB
    tree = [s.values for s in t.samples if s.scope == "tree" and "gpu_mem_bytes" in s.values]
    assert tree[-1]["gpu_mem_bytes"] == 600 * MB, "the host's pid 1 is not in the tree"
    (w,) = t.workers.values()
    assert not any("cannot be matched" in n for n in w.notes)
