"""What GPU users need to know, through the real nvidia-ml-py code path against the fake
libnvidia-ml.so.1 (tests/fake_nvml/fake_nvml.c): busy and idle time per span, the newer
per-process utilisation API and its answers, only the GPUs the job uses, MIG instances, GPM
activity, Xid errors and NVML's accounting of a worker that died."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from test_gpu import MB, fake_nvml  # noqa: F401 - the fixture

from workerscope import monitor, span
from workerscope.export.attribution import attribute, function_table
from workerscope.export.deaths import figures
from workerscope.export.html import to_html
from workerscope.export.terminal import report
from workerscope.protocol import GPU_XID_MARK

DEVICE = f"device 55 {3000 * MB} {80000 * MB} 250000 61 1755"


def _values(t, scope):
    return [s.values for s in t.samples if s.scope == scope]


def test_gpu_busy_and_idle_per_span(fake_nvml, samples):  # noqa: F811
    """A span that ran while the fake said 90% gets ~90% busy, one at 10% ~10% (within 5
    points), with the GPU-seconds idle that follow; GPM activity beside NVML's utilisation."""
    me = os.getpid()
    gpm = "gpm 0 -1 70 50 25 35\n"
    fake_nvml(f"{DEVICE} G\n{gpm}proc 0 {me} {500 * MB} c 90\n")
    with monitor(interval=0.05, endpoint=samples.endpoint) as m:
        samples.wait(3)
        with span("gpu_phase"):
            samples.wait(30)
        fake_nvml(f"{DEVICE} G\n{gpm}proc 0 {me} {500 * MB} c 10\n")
        with span("cpu_phase"):
            samples.wait(30)
    t = m.timeline
    a = attribute(t)
    by_name = {s.name: (s, a[(s.worker, s.pid, s.id)]) for s in t.spans}
    for name, told in (("gpu_phase", 90), ("cpu_phase", 10)):
        s, got = by_name[name]
        assert abs(got["gpu_busy_percent"] - told) <= 5, (name, got)
        wall = s.duration_ns / 1e9
        assert abs(got["gpu_idle_s"] - wall * (100 - told) / 100) <= 0.05 * wall, (name, got)
    rows = {r["name"]: r for r in function_table(t, a)}
    assert abs(rows["gpu_phase"]["gpu_busy_percent"] - 90) <= 5
    assert rows["cpu_phase"]["gpu_idle_s"] > rows["gpu_phase"]["gpu_idle_s"]
    text = report(t, width=160)
    assert "gpu busy" in text and "top spans by GPU idle:" in text
    top = text.split("top spans by GPU idle:\n", 1)[1].splitlines()[2]
    assert top.split()[0] == "cpu_phase", "the span with the GPU idle longest comes first"
    assert "GPU idle s" in to_html(t)
    gpu0 = _values(t, "gpu0")
    assert gpu0[-1]["sm_active_percent"] == 70 and gpu0[-1]["sm_occupancy_percent"] == 50
    assert gpu0[-1]["tensor_active_percent"] == 25 and gpu0[-1]["dram_active_percent"] == 35
    tree = _values(t, "tree")
    assert tree[-1]["gpu_devices"] == 1


def test_utilisation_api_fallback_and_not_found(fake_nvml, samples):  # noqa: F811
    """Where nvmlDeviceGetProcessesUtilizationInfo is not supported the older call answers;
    where NVML has no sample newer than the last seen (NOT_FOUND), a tree process that holds
    a context reads 0, not its last figure."""
    me = os.getpid()
    fake_nvml(f"{DEVICE} N\nproc 0 {me} {500 * MB} c 40\n")
    with monitor(interval=0.05, endpoint=samples.endpoint) as m:
        samples.wait(4)
    procs = [s.values for s in m.timeline.samples if s.scope == "proc" and s.pid == me]
    assert procs[-1]["gpu_util_percent"] == 40
    (w,) = m.timeline.workers.values()
    assert not any("process utilization not supported" in n for n in w.notes)

    fake_nvml(f"{DEVICE} F\nproc 0 {me} {500 * MB} c 40\n")
    with monitor(interval=0.05, endpoint=samples.endpoint) as m:
        samples.wait(4)
    procs = [s.values for s in m.timeline.samples if s.scope == "proc" and s.pid == me]
    assert procs[-1]["gpu_util_percent"] == 0
    assert procs[-1]["gpu_mem_bytes"] == 500 * MB


def test_only_the_gpus_the_job_uses(fake_nvml, samples, clean_env):  # noqa: F811
    """On a shared node: the GPU the tree holds a context on is shown, another job's is not;
    one named by CUDA_VISIBLE_DEVICES (by UUID) is shown too; with neither, none, said."""
    me = os.getpid()
    fake_nvml(f"{DEVICE} -\n{DEVICE} -\nproc 0 1 {999 * MB} c 30\nproc 1 {me} {200 * MB} c 20\n")
    with monitor(interval=0.05, endpoint=samples.endpoint) as m:
        samples.wait(4)
    assert _values(m.timeline, "gpu1") and not _values(m.timeline, "gpu0")

    # Read by the sidecar as it starts (the worker's environment then): another interval is
    # another sidecar.
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-0000")
    with monitor(interval=0.06, endpoint=samples.endpoint) as m:
        samples.wait(4)
    assert _values(m.timeline, "gpu0") and _values(m.timeline, "gpu1")

    clean_env.delenv("CUDA_VISIBLE_DEVICES")
    fake_nvml(f"{DEVICE} -\n{DEVICE} -\nproc 0 1 {999 * MB} c 30\n")
    with monitor(interval=0.07, endpoint=samples.endpoint) as m:
        samples.wait(4)
    assert not [s for s in m.timeline.samples if s.scope.startswith("gpu")]
    (w,) = m.timeline.workers.values()
    assert any("none named by CUDA_VISIBLE_DEVICES" in n for n in w.notes)


def test_mig_instances_named_and_mapped(fake_nvml, samples):  # noqa: F811
    """A GPU in MIG mode: the instance the tree runs on is a device of its own (gpu0/mig2),
    with its memory and GPM activity; the tree's process is mapped to it; the instance nobody
    of the tree uses is not shown; every view takes the scope."""
    me = os.getpid()
    fake_nvml(f"{DEVICE} MG\nmig 0 1 {100 * MB} {10000 * MB}\nmig 0 2 {300 * MB} {20000 * MB}\n"
              f"gpm 0 2 55 40 20 30\nproc 0 {me} {300 * MB} c 0 2\n")
    with monitor(interval=0.05, endpoint=samples.endpoint) as m:
        samples.wait(5)
    t = m.timeline
    mig = _values(t, "gpu0/mig2")
    assert mig and mig[-1]["mem_used_bytes"] == 300 * MB and mig[-1]["mem_total_bytes"] == 20000 * MB
    assert mig[-1]["sm_active_percent"] == 55 and mig[-1]["sm_occupancy_percent"] == 40
    assert not _values(t, "gpu0/mig1")
    gpu0 = _values(t, "gpu0")
    assert gpu0 and "util_percent" not in gpu0[-1], "NVML gives no utilisation in MIG mode"
    procs = [s.values for s in t.samples if s.scope == "proc" and s.pid == me]
    assert procs[-1]["gpu_mem_bytes"] == 300 * MB
    (w,) = t.workers.values()
    assert any("in MIG mode" in n for n in w.notes)
    assert "gpu0/mig2" in to_html(t)
    report(t)


# A worker whose job runs until it is killed: says "in" once the job has started.
KILLED_WORKER = """
import sys, time
from workerscope import monitor
with monitor(interval=0.05, endpoint=sys.argv[1]):
    print("in", flush=True)
    while True:
        time.sleep(0.05)
"""


def test_xid_on_the_timeline_and_accounting_peak_in_the_death_record(fake_nvml, samples):  # noqa: F811
    """An Xid error on the GPU a worker uses is a mark on the timeline and in the record of
    the death that follows, with the dead process's lifetime peak from NVML's accounting."""
    worker = subprocess.Popen([sys.executable, "-c", KILLED_WORKER, samples.endpoint],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "in"
        base = (f"{DEVICE} A\nproc 0 {worker.pid} {700 * MB} c 60\n"
                f"acct 0 {worker.pid} 83 41 {1536 * MB} 4200\n")
        fake_nvml(base)
        samples.wait(25)  # a process poll (once a second) has seen its context
        fake_nvml(base + "xid 0 79 1\n")
        deadline = time.monotonic() + 30
        while not [k for k in samples.sub.timeline().marks if k.name == GPU_XID_MARK]:
            assert time.monotonic() < deadline, "no Xid mark came"
            samples.wait(1)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        assert samples.sub.wait(jobs=1, timeout=30)
    finally:
        worker.kill()
        worker.wait()
        worker.stdout.close()
    t = samples.sub.timeline()
    (xid,) = [k for k in t.marks if k.name == GPU_XID_MARK]
    assert xid.attrs == {"device": "gpu0", "xid": 79}
    (job,) = t.jobs
    assert job.status == "killed"
    assert job.death["gpu_peak_mem_bytes"] == 1536 * MB
    assert job.death["gpu_lifetime"] == [{"device": "gpu0", "util_percent": 83,
                                          "mem_util_percent": 41, "time_s": 4.2,
                                          "peak_mem_bytes": 1536 * MB}]
    assert job.death["gpu_xids"] == [{"device": "gpu0", "xid": 79}]
    said = figures(job.death)
    assert "GPU memory peak 1.5 GiB" in said and "GPU Xid 79 on gpu0" in said


def test_accounting_off_is_said_with_how_to_turn_it_on(fake_nvml, samples):  # noqa: F811
    """A GPU without accounting: a note says a dead process's peak is lost, and how to keep it."""
    fake_nvml(f"{DEVICE} -\nproc 0 {os.getpid()} {MB} c 5\n")
    with monitor(interval=0.05, endpoint=samples.endpoint) as m:
        samples.wait(4)
    (w,) = m.timeline.workers.values()
    assert any("accounting is off" in n and "nvidia-smi -i 0 -am 1" in n for n in w.notes)


@pytest.mark.parametrize("value", ["none", ""])
def test_no_visible_devices_shows_only_used(fake_nvml, samples, clean_env, value):  # noqa: F811
    """CUDA_VISIBLE_DEVICES that names no GPU: only those the tree holds a context on."""
    clean_env.setenv("CUDA_VISIBLE_DEVICES", value)
    fake_nvml(f"{DEVICE} -\n{DEVICE} -\nproc 1 {os.getpid()} {MB} c 5\n")
    with monitor(interval=0.05, endpoint=samples.endpoint) as m:
        samples.wait(3)
    assert _values(m.timeline, "gpu1") and not _values(m.timeline, "gpu0")
