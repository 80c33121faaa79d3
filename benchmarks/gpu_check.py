"""The real-hardware GPU check: does workerscope see what the GPU did, span by span?

    python benchmarks/gpu_check.py [--rounds 10]   # needs torch with CUDA, and nvidia-smi

A PyTorch job holds 2 GiB and alternates 200 ms of matrix multiplies (`gpu_step`, a @timed
function that synchronises before it returns) with 200 ms of pure-Python CPU work
(`cpu_step`), under `workerscope run --interval 0.05`. Beside it, in this process, NVML is
polled independently (nvidia-ml-py: the job's per-process memory, the device's utilisation) and
nvidia-smi once a second; the job prints torch.cuda's own numbers. Printed, one table:

- per-process GPU memory: workerscope's peak against NVML's and nvidia-smi's (within 10%);
- torch.cuda.memory_reserved beside it (what the caching allocator holds, less than NVML's:
  the CUDA context is not in it);
- the GPU busy share of the gpu_step spans (want above 80%) and of the cpu_step spans (want
  below 20%), from the attribution every view uses;
- GPM's SM activity where the GPU has it (Hopper and later), device utilisation against NVML's;
- the device, driver, CUDA and torch versions, and whether the GPU is in MIG mode (read, never
  changed: a MIG run needs an operator to turn MIG on, and is skipped otherwise).

Exit status 0 when every figure is within its target, 1 when one is not, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

WORKLOAD = r"""
import json, sys, time, torch
from workerscope import timed
rounds = int(sys.argv[1])
x = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")      # 2 GiB held
a = torch.randn(4096, 4096, device="cuda", dtype=torch.float32)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.float32)

@timed
def gpu_step():
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:
        for _ in range(4):
            a @ b
        torch.cuda.synchronize()

@timed
def cpu_step():
    end = time.perf_counter() + 0.2
    n = 0
    while time.perf_counter() < end:
        n += 1

for _ in range(rounds):
    gpu_step()
    cpu_step()
print(json.dumps({"reserved": torch.cuda.memory_reserved(),
                  "allocated_peak": torch.cuda.max_memory_allocated(),
                  "cuda": torch.version.cuda, "torch": torch.__version__}), flush=True)
"""


def nvml_poll(stop: threading.Event, rows: list[dict[str, float]], pids: set[int]) -> None:
    """NVML read here, apart from workerscope: the job's processes' memory, device use."""
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    while not stop.is_set():
        row: dict[str, float] = {"t": time.time()}
        try:
            row["util"] = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        except pynvml.NVMLError:
            pass
        mem = [p.usedGpuMemory or 0 for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
               if not pids or p.pid in pids]
        row["proc_mem"] = max(mem, default=0)
        rows.append(row)
        stop.wait(0.05)
    pynvml.nvmlShutdown()


def smi(*query: str) -> str:
    return subprocess.run(["nvidia-smi", *query], capture_output=True, text=True).stdout.strip()


def smi_poll(stop: threading.Event, rows: list[int]) -> None:
    while not stop.is_set():
        out = smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
        rows.extend(int(line.split(",")[1]) * 1024 * 1024 for line in out.splitlines()
                    if line.strip())
        stop.wait(1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    if shutil.which("nvidia-smi") is None:
        print("gpu_check: nvidia-smi not found: this check needs an NVIDIA GPU machine")
        return 2
    out = os.path.join(tempfile.mkdtemp(), "gpu.wsc")
    stop, nvml_rows, smi_rows = threading.Event(), [], []
    pollers = [threading.Thread(target=nvml_poll, args=(stop, nvml_rows, set())),
               threading.Thread(target=smi_poll, args=(stop, smi_rows))]
    for p in pollers:
        p.start()
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "workerscope", "run", "--interval", "0.05", "-o",
                        out, "--", sys.executable, "-c", WORKLOAD, str(args.rounds)],
                       capture_output=True, text=True)
    stop.set()
    for p in pollers:
        p.join()
    if r.returncode != 0:
        print(r.stdout, r.stderr)
        return 1
    job = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")][-1]

    from workerscope import load
    from workerscope.export.attribution import attribute, function_table

    t = load(out)
    a = attribute(t)
    table = {row["name"]: row for row in function_table(t, a)}
    ws_mem = max((v for _, v in t.series("tree", "gpu_mem_bytes")), default=None)
    nvml_mem = max((row["proc_mem"] for row in nvml_rows), default=0)
    smi_mem = max(smi_rows, default=0)
    sm_active = [v for _, v in t.series("gpu0", "sm_active_percent")]
    util = [v for _, v in t.series("gpu0", "util_percent")]
    gpu_busy = table.get("gpu_step", {}).get("gpu_busy_percent")
    cpu_busy = table.get("cpu_step", {}).get("gpu_busy_percent")
    name = smi("--query-gpu=name", "--format=csv,noheader")
    driver = smi("--query-gpu=driver_version", "--format=csv,noheader")
    mig = smi("--query-gpu=mig.mode.current", "--format=csv,noheader")
    gib = 1024 ** 3

    def gb(v: float | None) -> str:
        return "absent" if v is None else f"{v / gib:.2f} GiB"

    def pct(v: float | None) -> str:
        return "absent" if v is None else f"{v:.1f}%"

    checks = [
        ("process GPU memory, peak", gb(ws_mem), gb(nvml_mem), "NVML polled here",
         ws_mem is not None and nvml_mem > 0 and abs(ws_mem - nvml_mem) <= 0.1 * nvml_mem),
        ("process GPU memory, peak", gb(ws_mem), gb(smi_mem), "nvidia-smi compute-apps",
         ws_mem is not None and smi_mem > 0 and abs(ws_mem - smi_mem) <= 0.1 * smi_mem),
        ("torch reserved / peak allocated", gb(job["reserved"]), gb(job["allocated_peak"]),
         "torch.cuda (context not in it)", True),
        ("GPU busy in gpu_step spans", pct(gpu_busy), "> 80%", "target",
         gpu_busy is not None and gpu_busy > 80),
        ("GPU busy in cpu_step spans", pct(cpu_busy), "< 20%", "target",
         cpu_busy is not None and cpu_busy < 20),
        ("device utilisation, peak", pct(max(util, default=None)),
         pct(max((row.get("util", 0) for row in nvml_rows), default=None)), "NVML polled here",
         True),
        ("GPM SM activity, peak", pct(max(sm_active, default=None)), "", "Hopper and later",
         True),
    ]
    print(f"\ngpu_check on {name} (driver {driver}, CUDA {job['cuda']}, torch {job['torch']}, "
          f"MIG {mig or 'n/a'}), {time.strftime('%Y-%m-%d')}, {time.time() - t0:.1f} s, "
          f"{args.rounds} rounds")
    print(f"{'quantity':<34} {'workerscope':>12} {'baseline':>12}  {'source':<30} ok")
    for what, ours, theirs, source, ok in checks:
        print(f"{what:<34} {ours:>12} {theirs:>12}  {source:<30} {'yes' if ok else 'NO'}")
    if mig.lower() != "enabled":
        print("MIG: off on this GPU; the MIG run is skipped (turning it on is an operator's "
              "change, never this check's)")
    w = next(iter(t.workers.values()))
    print(f"notes: {w.notes}")
    return 0 if all(ok for *_, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
