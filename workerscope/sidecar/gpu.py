"""GPU readings: NVIDIA through nvidia-ml-py (NVML), AMD through amdsmi when it is installed.

The only module that imports either, lazily. NVML is initialised once and its handles cached;
every call is guarded: a metric a device does not support is noted once and not asked again, a
lost GPU is noted and left alone, and sampling goes on without it. Process lists cost
milliseconds and serialise the driver, so they are read at most once a second.

NVML names processes by their pids in the host's (the root) pid namespace. In a container with
a pid namespace of its own those are not the pids the sidecar sees: `PidMap` maps them through
a procfs of the host mounted somewhere (`-v /proc:/host/proc:ro`, found in mountinfo): there,
/proc/HOSTPID/status's NSpid line lists the process's pid in each namespace down to its own.
"""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

# ([[index, device values], ...], {pid: {"gpu_mem_bytes": .., "gpu_util_percent": ..}})
Reading = tuple[list[list[Any]], dict[int, dict[str, float]]]

PROCESS_POLL_NS = 1_000_000_000
# The root pid namespace's inode number (PROC_PID_INIT_INO, include/linux/proc_ns.h).
ROOT_PID_NS = 0xEFFFFFFC


def _stat_field(path: str, index: int) -> int | None:
    """Field `index` (0 = state) after the command of a /proc/PID/stat, None if unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[index])
    except (OSError, ValueError, IndexError):
        return None


def _nspid(status_path: str) -> list[int] | None:
    """The NSpid line of a /proc/PID/status: the pid in each namespace, outermost first."""
    try:
        with open(status_path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    i = data.find(b"\nNSpid:")
    if i < 0:
        return None
    return [int(x) for x in data[i + 7:data.find(b"\n", i + 1)].split()]


def _nvml_library() -> bool:
    """Whether libnvidia-ml.so.1 loads (what nvidia-ml-py's nvmlInit loads on Linux)."""
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


class PidMap:
    """NVML's pids (the host's) -> the pids this sidecar sees, or None for a process that is
    not in its pid namespace (or cannot be told)."""

    def __init__(self, proc: str = "/proc", mountinfo: str = "/proc/self/mountinfo") -> None:
        self.proc = proc
        try:
            own_ns = os.stat(f"{proc}/self/ns/pid").st_ino
        except OSError:
            own_ns = ROOT_PID_NS
        # In the root pid namespace, or with no view of the host's: pids as they come (where
        # nothing matches, the caller notes it).
        self.host_proc: str | None = None
        self.level = 0  # our namespace's index in NSpid lists read through host_proc
        if own_ns != ROOT_PID_NS:
            self._find_host_proc(mountinfo)

    def _find_host_proc(self, mountinfo: str) -> None:
        """The procfs mount that sees the most namespaces above ours (the host's, ideally)."""
        try:
            with open(mountinfo, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return
        me = str(os.getpid())
        for line in lines:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) < 5 or not right.startswith("proc "):
                continue
            point = fields[4].replace("\\040", " ")
            try:
                there = os.readlink(f"{point}/self")  # our pid as that procfs numbers it
            except OSError:
                continue
            if there == me or not there.isdigit():
                continue  # our own namespace's view
            nspid = _nspid(f"{point}/{there}/status")
            if nspid and len(nspid) - 1 > self.level:
                self.host_proc, self.level = point, len(nspid) - 1

    def __call__(self, host_pid: int) -> int | None:
        if self.host_proc is None:
            return host_pid
        nspid = _nspid(f"{self.host_proc}/{host_pid}/status")
        if nspid is None or len(nspid) <= self.level:
            return None  # gone, or not in our namespace (nor one below it)
        pid = nspid[self.level]
        # A pid at our level could be another namespace's at that depth: the same start time
        # (boot ticks, one clock for both views) says it is the same process.
        start = _stat_field(f"{self.proc}/{pid}/stat", 19)
        if start is None or start != _stat_field(f"{self.host_proc}/{host_pid}/stat", 19):
            return None
        return pid


class GpuSampler:
    """Device values per GPU, and GPU memory and SM use per process of the tree."""

    def __init__(self) -> None:
        self.notes: list[str] = []  # new notes, taken by the caller with take_notes()
        self._noted: set[str] = set()
        self.devices: list[Any] = []
        self._nvml: Any = None
        self._unsupported: set[tuple[int, str]] = set()
        self._lost: set[int] = set()
        self._last_procs_ns = 0
        self._proc_mem: dict[int, dict[int, int]] = {}  # device -> pid -> bytes
        self._proc_sm: dict[int, dict[int, float]] = {}  # device -> pid -> percent
        self._util_ts: dict[int, int] = {}  # last NVML timestamp seen per device
        self._pids: PidMap | None = None  # made with the first process list
        self._unmapped = 0  # NVML pids of the last poll that are not ours to see
        self._amd: Any = None
        self._start()

    def note(self, text: str) -> None:
        if text not in self._noted:
            self._noted.add(text)
            self.notes.append(text)

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes

    # -- set-up --------------------------------------------------------------------------------
    def _start(self) -> None:
        pynvml: Any = None
        if not _nvml_library():
            # As nvmlInit would say, without importing nvidia-ml-py (~20 ms of start-up on
            # every machine without an NVIDIA driver).
            self.note("gpu: no NVIDIA GPU metrics (NVML Shared Library Not Found)")
        else:
            try:
                pynvml = importlib.import_module("pynvml")  # the nvidia-ml-py package
            except ImportError:
                self.note("gpu: nvidia-ml-py is not installed; no NVIDIA GPU metrics")
        if pynvml is not None:
            try:
                pynvml.nvmlInit()
                count = pynvml.nvmlDeviceGetCount()
                self.devices = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
                self._nvml = pynvml
                if not count:
                    self.note("gpu: NVML found no NVIDIA device")
            except pynvml.NVMLError as err:
                self.note(f"gpu: no NVIDIA GPU metrics ({err})")
            except OSError as err:  # a broken library file
                self.note(f"gpu: cannot load NVML ({err})")
        if not self.devices:
            self._start_amd()

    def _start_amd(self) -> None:
        try:
            import amdsmi  # optional extra
        except ImportError:
            return
        try:
            amdsmi.amdsmi_init()
            self.devices = list(amdsmi.amdsmi_get_processor_handles())
            self._amd = amdsmi
        except Exception as err:  # noqa: BLE001 - amdsmi raises its own AmdSmiException family
            self.note(f"gpu: no AMD GPU metrics ({err})")

    @property
    def available(self) -> bool:
        return bool(self.devices)

    @property
    def sees_processes(self) -> bool:
        """Whether any GPU process list has been read (tree GPU totals mean something)."""
        return any(self._proc_mem.values()) or self._unmapped > 0

    # -- one sample ----------------------------------------------------------------------------
    def read(self, tree_pids: set[int], now_ns: int) -> Reading:
        """([[index, device values], ...], {pid: {"gpu_mem_bytes": .., "gpu_util_percent": ..}})."""
        if self._nvml is not None:
            return self._read_nvml(tree_pids, now_ns)
        if self._amd is not None:
            return self._read_amd(tree_pids, now_ns)
        return [], {}

    def _call(self, index: int, metric: str, fn: Any, *args: Any) -> Any:
        """fn(*args), or None when the device can't answer (noted once, not asked again)."""
        nv = self._nvml
        if (index, metric) in self._unsupported or index in self._lost:
            return None
        try:
            return fn(*args)
        except nv.NVMLError_NotFound:
            return None  # e.g. no process samples newer than the last: nothing to report
        except nv.NVMLError_GpuIsLost:
            self._lost.add(index)
            self.note(f"gpu{index}: the GPU is lost; no further readings from it")
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            self._unsupported.add((index, metric))
            self.note(f"gpu{index}: {metric} not supported by this device or driver")
        except nv.NVMLError as err:
            self.note(f"gpu{index}: {metric}: {err}")
        return None

    def _read_nvml(self, tree_pids: set[int], now_ns: int) -> Reading:
        nv = self._nvml
        out = []
        for i, h in enumerate(self.devices):
            values: dict[str, float] = {}
            util = self._call(i, "util_percent", nv.nvmlDeviceGetUtilizationRates, h)
            if util is not None:
                values["util_percent"] = util.gpu
                values["mem_util_percent"] = util.memory
            mem = self._call(i, "mem_used_bytes", nv.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                values["mem_used_bytes"] = mem.used
                values["mem_total_bytes"] = mem.total
            power = self._call(i, "power_w", nv.nvmlDeviceGetPowerUsage, h)
            if power is not None:
                values["power_w"] = power / 1000.0
            temp = self._call(i, "temp_c", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            if temp is not None:
                values["temp_c"] = temp
            clock = self._call(i, "sm_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
            if clock is not None:
                values["sm_clock_mhz"] = clock
            if values:
                out.append([i, values])
        if now_ns - self._last_procs_ns >= PROCESS_POLL_NS:
            self._last_procs_ns = now_ns
            self._poll_processes()
        return out, self._per_pid(tree_pids)

    def _poll_processes(self) -> None:
        nv = self._nvml
        if self._pids is None:
            self._pids = PidMap()
        ours = self._pids
        self._unmapped = 0
        for i, h in enumerate(self.devices):
            mem: dict[int, int] = {}
            for metric, fn in (("compute processes", nv.nvmlDeviceGetComputeRunningProcesses),
                               ("graphics processes", nv.nvmlDeviceGetGraphicsRunningProcesses)):
                for p in self._call(i, metric, fn, h) or ():
                    pid = ours(p.pid)
                    if pid is None:
                        self._unmapped += 1
                        continue
                    # A process with both contexts (C+G) is in both lists with the same memory.
                    mem[pid] = max(mem.get(pid, 0), p.usedGpuMemory or 0)
            self._proc_mem[i] = mem
            # Without the last timestamp NVML returns stale samples from its whole buffer.
            samples = self._call(i, "process utilization", nv.nvmlDeviceGetProcessUtilization, h,
                                 self._util_ts.get(i, 0))
            sm: dict[int, float] = {}
            for s in samples or ():
                self._util_ts[i] = max(self._util_ts.get(i, 0), s.timeStamp)
                pid = ours(s.pid)
                if pid is not None:
                    sm[pid] = max(sm.get(pid, 0.0), float(s.smUtil))
            self._proc_sm[i] = sm

    def _per_pid(self, tree_pids: set[int]) -> dict[int, dict[str, float]]:
        per: dict[int, dict[str, float]] = {}
        seen_any = False
        for i in range(len(self.devices)):
            for pid, used in self._proc_mem.get(i, {}).items():
                seen_any = True
                key = _match(pid, tree_pids)
                if key is not None:
                    d = per.setdefault(key, {})
                    d["gpu_mem_bytes"] = d.get("gpu_mem_bytes", 0) + used
            for pid, util in self._proc_sm.get(i, {}).items():
                key = _match(pid, tree_pids)
                if key is not None:
                    d = per.setdefault(key, {})
                    d["gpu_util_percent"] = d.get("gpu_util_percent", 0.0) + util
        if seen_any and not per and not any(
                os.path.exists(f"/proc/{p}") for i in self._proc_mem for p in self._proc_mem[i]):
            # NVML reports host pids; in a container with its own pid namespace none exist
            # here, unless the host's /proc is mounted where PidMap finds it.
            self.note("gpu: GPU processes cannot be matched to this tree (a separate pid "
                      "namespace without the host's /proc mounted, e.g. -v /proc:/host/proc:ro, "
                      "or MIG); per-process GPU values are absent, device values remain")
        return per

    def _read_amd(self, tree_pids: set[int], now_ns: int) -> Reading:
        amd = self._amd
        out = []
        for i, h in enumerate(self.devices):
            if i in self._lost:
                continue
            values: dict[str, float] = {}
            try:
                act = amd.amdsmi_get_gpu_activity(h)
                values["util_percent"] = float(act["gfx_activity"])
                vram = amd.amdsmi_get_gpu_vram_usage(h)
                values["mem_used_bytes"] = float(vram["vram_used"]) * 1024 * 1024
                values["mem_total_bytes"] = float(vram["vram_total"]) * 1024 * 1024
            except Exception as err:  # noqa: BLE001 - amdsmi raises its own AmdSmiException family
                self._lost.add(i)
                self.note(f"gpu{i}: AMD readings stopped ({err})")
            if values:
                out.append([i, values])
        return out, {}

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as err:
                self.note(f"gpu: shutdown: {err}")


def _match(pid: int, tree_pids: set[int]) -> int | None:
    """The tree member that a GPU process (its pid already mapped by PidMap) stands for."""
    return pid if pid in tree_pids else None


def probe() -> dict[str, Any]:
    """What a sampler sees right now (for `python -m workerscope.sidecar.gpu`)."""
    g = GpuSampler()
    t = time.monotonic_ns()
    devices, _ = g.read(set(), t)
    return {"devices": devices, "notes": g.take_notes()}


if __name__ == "__main__":
    print(probe())
