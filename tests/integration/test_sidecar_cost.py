"""The monitor reports its own cost (scope `sidecar`), and starts lean: no psutil, and no pyzmq
unless there is a driver to send to."""

from __future__ import annotations

import os
import subprocess
import sys

from workerscope import monitor


def test_the_sidecars_own_cost_is_on_the_timeline(clean_env, samples):
    """Every sample carries the sidecar's CPU (cumulative, never falling), its RSS and what
    its previous sample cost, on the tree's root; cpu_percent once a rate can be taken."""
    with monitor(interval=0.05, endpoint=samples.endpoint) as m:
        samples.wait(6)
    cost = [s for s in m.timeline.samples if s.scope == "sidecar"]
    tree = [s for s in m.timeline.samples if s.scope == "tree"]
    assert len(cost) == len(tree) >= 6
    assert {s.pid for s in cost} == {os.getpid()}
    cpu = [s.values["cpu_s"] for s in cost]
    assert cpu == sorted(cpu) and cpu[-1] > 0
    assert all(5 * 2**20 < s.values["rss_bytes"] < 2**30 for s in cost)
    costs = [s.values["sample_cost_s"] for s in cost if "sample_cost_s" in s.values]
    assert len(costs) >= len(cost) - 1 and all(0 < c < 0.05 for c in costs), costs
    rates = [s.values["cpu_percent"] for s in cost if "cpu_percent" in s.values]
    assert rates and all(0 <= r < 100 for r in rates), rates


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_the_sidecar_imports_neither_psutil_nor_pyzmq():
    """The sidecar's modules (its __main__ and service) load neither psutil nor pyzmq, nor
    the worker's or the driver's modules (asyncio among them): importing the package for the
    sidecar costs little more than what it uses."""
    loaded = _modules_after("import workerscope.sidecar.__main__")
    assert not {m for m in loaded if m.split(".")[0] in ("psutil", "zmq", "asyncio")}, loaded
    assert not {m for m in loaded if m.startswith(("workerscope.worker", "workerscope.driver",
                                                   "importlib.metadata"))}


def test_samples_per_frame_keeps_thread_and_sidecar_readings():
    """Aggregated frames (samples_per_frame) keep the per-thread rows, keyed by (pid, tid),
    with a new thread's start, and the sidecar's own cost, as last/min/mean/max like the
    other scopes."""
    from workerscope.sidecar.aggregate import Aggregator

    agg = Aggregator(2)
    assert agg.add({"t": 1, "tree": {}, "host": {}, "procs": [],
                    "threads": [[10, 11, {"cpu_user_s": 1.0}], [10, 12, {"cpu_user_s": 5.0}, 7]],
                    "sidecar": {"cpu_s": 0.1, "sample_cost_s": 0.002}}) is None
    out = agg.add({"t": 2, "tree": {}, "host": {}, "procs": [],
                   "threads": [[10, 11, {"cpu_user_s": 2.0}]],
                   "sidecar": {"cpu_s": 0.2, "sample_cost_s": 0.001}})
    rows = {(r[0], r[1]): r[2:] for r in out["threads"]}
    assert rows[(10, 11)][0]["cpu_user_s"] == 2.0 and rows[(10, 11)][0]["cpu_user_s_min"] == 1.0
    assert rows[(10, 12)] == [{"cpu_user_s": 5.0}, 7], "a new thread's start is kept"
    assert out["sidecar"]["cpu_s"] == 0.2 and out["sidecar"]["sample_cost_s_max"] == 0.002
