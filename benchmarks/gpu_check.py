"""GPU check for a machine with an NVIDIA GPU and PyTorch: does workerscope see what the GPU did?

    python benchmarks/gpu_check.py            # needs torch with CUDA, and nvidia-smi

Runs a PyTorch workload (allocate 4 GiB, then ~6 s of matrix multiplies) under
`workerscope run --interval 0.2`, while the workload itself prints torch.cuda.memory_reserved()
and nvidia-smi is polled for the process's memory and the device's utilisation. Prints one table:
what workerscope recorded next to those two baselines. Exit status 1 if workerscope's per-process
GPU memory is more than 10 % away from nvidia-smi's, or utilisation never rose.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

WORKLOAD = r"""
import json, time, torch
x = torch.empty(4 * 1024**3, dtype=torch.uint8, device="cuda")      # 4 GiB held
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print(json.dumps({"reserved": torch.cuda.memory_reserved()}), flush=True)
end = time.time() + 6
n = 0
while time.time() < end:
    c = a @ b
    n += 1
torch.cuda.synchronize()
print(json.dumps({"reserved": torch.cuda.memory_reserved(), "matmuls": n}), flush=True)
time.sleep(1.0)   # a quiet second at the end: utilisation should fall
"""


def smi_poll(stop: threading.Event, rows: list) -> None:
    while not stop.is_set():
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True).stdout
        util = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True, text=True).stdout
        rows.append((time.time(), out.strip(), util.strip()))
        stop.wait(0.2)


def main() -> int:
    if shutil.which("nvidia-smi") is None:
        print("gpu_check: nvidia-smi not found: this check needs an NVIDIA GPU machine")
        return 2
    out = os.path.join(tempfile.mkdtemp(), "gpu.wsc")
    stop, smi = threading.Event(), []
    poller = threading.Thread(target=smi_poll, args=(stop, smi))
    poller.start()
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "workerscope", "run", "--interval", "0.2", "-o", out,
                        "--", sys.executable, "-c", WORKLOAD], capture_output=True, text=True)
    stop.set()
    poller.join()
    print(r.stderr.strip())
    if r.returncode != 0:
        print(r.stdout)
        return 1
    torch_rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    from workerscope import load

    t = load(out)
    w = next(iter(t.workers.values()))
    tree_mem = max((v for _, v in t.series("tree", "gpu_mem_bytes")), default=None)
    util = [v for _, v in t.series("gpu0", "util_percent")]
    dev_mem = max((v for _, v in t.series("gpu0", "mem_used_bytes")), default=None)
    smi_proc = max((int(line.split(",")[1]) for _, apps, _ in smi for line in apps.splitlines()
                    if line.strip()), default=0) * 1024 * 1024
    smi_util = max((int(u.split(",")[0]) for _, _, u in smi if u), default=0)
    reserved = max(row["reserved"] for row in torch_rows)
    gib = 1024 ** 3

    def fmt(v: float | None, scale: float = gib, unit: str = "GiB") -> str:
        return "absent" if v is None else f"{v / scale:.2f} {unit}"

    gpu_name = subprocess.run(['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'],
                              capture_output=True, text=True).stdout.strip()
    print(f"\ngpu_check on {gpu_name}, {time.strftime('%Y-%m-%d')}, run took {time.time() - t0:.1f} s")
    print(f"{'quantity':<40} {'workerscope':>14} {'baseline':>14}  baseline source")
    print(f"{'process GPU memory (peak)':<40} {fmt(tree_mem):>14} {fmt(smi_proc):>14}  "
          "nvidia-smi --query-compute-apps")
    print(f"{'torch reserved (peak)':<40} {fmt(tree_mem):>14} {fmt(reserved):>14}  "
          "torch.cuda.memory_reserved")
    print(f"{'device memory used (peak)':<40} {fmt(dev_mem):>14} {'':>14}")
    print(f"{'device utilisation (peak)':<40} {max(util, default=0):>13}% {smi_util:>13}%  "
          "nvidia-smi utilization.gpu")
    print(f"{'samples of gpu0':<40} {len(util):>14}")
    print(f"notes: {w.notes}")
    ok = tree_mem is not None and smi_proc and abs(tree_mem - smi_proc) <= 0.1 * smi_proc
    ok = ok and max(util, default=0) >= 50
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
