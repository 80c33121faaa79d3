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

import ctypes
import importlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# ([[unit key, device values], ...], {pid: {"gpu_mem_bytes": .., "gpu_util_percent": ..}})
Reading = tuple[list[list[Any]], dict[int, dict[str, float]]]

PROCESS_POLL_NS = 1_000_000_000
# GPM metrics (nvmlGpmMetricsGet) read on GPUs that have GPM (Hopper and later), as named in
# samples: NVML_GPM_METRIC_SM_UTIL, _SM_OCCUPANCY, _ANY_TENSOR_UTIL, _DRAM_BW_UTIL.
GPM_METRICS = (("sm_active_percent", 2), ("sm_occupancy_percent", 3),
               ("tensor_active_percent", 5), ("dram_active_percent", 10))
MAX_EVENTS_A_SAMPLE = 64  # Xid events taken from NVML's queue at one sample, at most
NO_INSTANCE = 0xFFFFFFFF  # an event's gpuInstanceId when it is not a MIG instance's
MAX_HOST_PIDS = 4096  # tree pids whose NVML pid is kept (for accounting after a death)
ACCOUNTING_OFF = ("NVML accounting is off, so a process's lifetime GPU peak is gone when it "
                  "exits; root can turn it on with `nvidia-smi -i {gpu} -am 1`")
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


@dataclass(frozen=True)
class Unit:
    """A device a sample reports: a GPU (key 0, scope gpu0) or a MIG instance of one (key
    "0/mig1", scope gpu0/mig1: GPU 0's GPU instance 1)."""

    key: int | str
    handle: Any
    gpu: int  # the GPU's index (a MIG instance's parent)
    gi: int | None  # the MIG GPU instance id; None for a GPU
    uuid: str  # GPU-... or MIG-...; a MIG instance's parent's in parent_uuid
    parent_uuid: str

    @property
    def name(self) -> str:
        return f"gpu{self.key}"


def visible_devices(environ: Mapping[str, str]) -> list[str] | None:
    """What CUDA_VISIBLE_DEVICES (else NVIDIA_VISIBLE_DEVICES) names: its entries ([] for
    none), or None where neither is set or it says "all"."""
    for name in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        if name in environ:
            value = environ[name].strip()
            if value.lower() == "all":
                return None
            if value.lower() in ("none", "void"):
                return []
            return [v.strip() for v in value.split(",") if v.strip()]
    return None


def _named(unit: Unit, entries: list[str]) -> bool:
    """Whether one of the entries names the unit: an index or a GPU-... UUID (prefix) names a
    GPU and its MIG instances, a MIG-... UUID one instance."""
    for entry in entries:
        if entry.isdigit() and int(entry) == unit.gpu:
            return True
        if entry.startswith("GPU-") and unit.parent_uuid.startswith(entry):
            return True
        if entry.startswith("MIG-") and unit.gi is not None and unit.uuid.startswith(entry):
            return True
    return False


class GpuSampler:
    """Device values of the GPUs (and MIG instances) the tree uses, and each tree process's
    GPU memory and SM share; Xid events; NVML's accounting figures of a process that died."""

    def __init__(self, every_device: bool = False,
                 environ: Mapping[str, str] | None = None) -> None:
        self.notes: list[str] = []  # new notes, taken by the caller with take_notes()
        self._noted: set[str] = set()
        self.devices: list[Any] = []  # the GPUs' handles, by index
        self.units: list[Unit] = []  # GPUs, then each GPU's MIG instances
        self._mig: set[int] = set()  # GPUs in MIG mode
        self._every = every_device
        env = os.environ if environ is None else environ
        self._named = visible_devices(env)
        self._nvml: Any = None
        self._unsupported: set[tuple[int | str, str]] = set()
        self._lost: set[int] = set()
        self._last_procs_ns = 0
        self._proc_mem: dict[int | str, dict[int, int]] = {}  # unit key -> pid -> bytes
        self._proc_sm: dict[int, dict[int, float]] = {}  # GPU -> pid -> percent
        self._util_ts: dict[int, int] = {}  # last NVML timestamp seen per GPU
        self._pids: PidMap | None = None  # made with the first process list
        self._unmapped = 0  # NVML pids of the last poll that are not ours to see
        self.used: set[int | str] = set()  # units a tree process has held a context on
        self._gpm: dict[int | str, Any] = {}  # unit key -> its last GPM sample
        self._gpm_ok: dict[int, bool] = {}
        self._accounting: dict[int, bool] = {}
        self._events: Any = None
        self._procs_read = False  # whether the last poll got any process list
        self._host_pids: dict[int, int] = {}  # a tree pid -> NVML's (the host's) pid of it
        self.xids: list[dict[str, Any]] = []  # new Xid events, taken with take_xids()
        self._amd: Any = None
        self._start()

    def note(self, text: str) -> None:
        if text not in self._noted:
            self._noted.add(text)
            self.notes.append(text)

    def take_notes(self) -> list[str]:
        notes, self.notes = self.notes, []
        return notes

    def take_xids(self) -> list[dict[str, Any]]:
        xids, self.xids = self.xids, []
        return xids

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
        if self._nvml is not None and self.devices:
            self._find_units()
            self._start_events()
        if not self.devices:
            self._start_amd()

    def _find_units(self) -> None:
        nv = self._nvml
        migs: list[Unit] = []
        for i, h in enumerate(self.devices):
            uuid = str(self._call(i, "uuid", nv.nvmlDeviceGetUUID, h) or "")
            self.units.append(Unit(i, h, i, None, uuid, uuid))
            mode = self._call(i, "mig mode", nv.nvmlDeviceGetMigMode, h)
            if not mode or mode[0] != nv.NVML_DEVICE_MIG_ENABLE:
                continue
            self._mig.add(i)
            for j in range(self._call(i, "mig devices", nv.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
                mig = self._call(i, "mig devices", nv.nvmlDeviceGetMigDeviceHandleByIndex, h, j)
                if mig is None:
                    continue  # NOT_FOUND: no instance there
                gi = self._call(i, "mig devices", nv.nvmlDeviceGetGpuInstanceId, mig)
                if gi is None:
                    continue
                mig_uuid = str(self._call(i, "uuid", nv.nvmlDeviceGetUUID, mig) or "")
                migs.append(Unit(f"{i}/mig{gi}", mig, i, int(gi), mig_uuid, uuid))
        self.units += migs

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

    def _start_events(self) -> None:
        """An event set for Xid errors (critical ones: NVML's nvmlEventTypeXidCriticalError)."""
        nv = self._nvml
        try:
            events = nv.nvmlEventSetCreate()
        except nv.NVMLError as err:
            self.note(f"gpu: no Xid events ({err})")
            return
        for i, h in enumerate(self.devices):
            self._call(i, "Xid events", nv.nvmlDeviceRegisterEvents, h,
                       nv.nvmlEventTypeXidCriticalError, events)
        self._events = events

    @property
    def available(self) -> bool:
        return bool(self.devices)

    @property
    def sees_processes(self) -> bool:
        """Whether any GPU process list has been read (tree GPU totals mean something)."""
        return any(self._proc_mem.values()) or self._unmapped > 0

    # -- one sample ----------------------------------------------------------------------------
    def read(self, tree_pids: set[int], now_ns: int) -> Reading:
        """([[unit key, device values], ...], {pid: {"gpu_mem_bytes": .., "gpu_util_percent":
        ..}}), the devices those the tree uses (shown())."""
        if self._nvml is not None:
            return self._read_nvml(tree_pids, now_ns)
        if self._amd is not None:
            return self._read_amd(tree_pids, now_ns)
        return [], {}

    def _call(self, key: int | str, metric: str, fn: Any, *args: Any) -> Any:
        """fn(*args), or None when the device can't answer (noted once, not asked again)."""
        nv = self._nvml
        gpu = key if isinstance(key, int) else int(key.split("/")[0])
        if (key, metric) in self._unsupported or gpu in self._lost:
            return None
        try:
            return fn(*args)
        except nv.NVMLError_NotFound:
            return None  # e.g. no process samples newer than the last: nothing to report
        except nv.NVMLError_GpuIsLost:
            self._lost.add(gpu)
            self.note(f"gpu{gpu}: the GPU is lost; no further readings from it")
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            self._unsupported.add((key, metric))
            self.note(f"gpu{key}: {metric} not supported by this device or driver")
        except nv.NVMLError as err:
            self.note(f"gpu{key}: {metric}: {err}")
        return None

    def shown(self) -> list[Unit]:
        """The units a sample reports: every one with gpus=all; else those CUDA_VISIBLE_DEVICES
        (or NVIDIA_VISIBLE_DEVICES) names and those a tree process has held a context on,
        with the GPU of each MIG instance shown."""
        if self._every or (self._named is None and not self._procs_read):
            return list(self.units)  # no process list to tell which (or none read yet)
        keys = {u.key for u in self.units if u.key in self.used
                or (self._named is not None and _named(u, self._named))}
        keys |= {u.gpu for u in self.units if u.key in keys}
        return [u for u in self.units if u.key in keys and u.gpu not in self._lost]

    def _read_nvml(self, tree_pids: set[int], now_ns: int) -> Reading:
        if now_ns - self._last_procs_ns >= PROCESS_POLL_NS:
            self._last_procs_ns = now_ns
            self._poll_processes(tree_pids)
        shown = self.shown()
        if not shown and self.units:
            self.note(f"gpu: {len(self.devices)} GPU(s) here, none named by CUDA_VISIBLE_DEVICES "
                      "or NVIDIA_VISIBLE_DEVICES nor used by the tree yet: their values start "
                      "when a process of the tree opens a context on one (gpus=all shows "
                      "every GPU)")
        out = []
        for u in shown:
            values = self._device_values(u) if u.gi is None else self._mig_values(u)
            values.update(self._gpm_values(u))
            if values:
                out.append([u.key, values])
            if u.gi is None and u.gpu not in self._mig:
                self._poll_utilisation(u, tree_pids)
        self._poll_events({u.gpu for u in shown})
        return out, self._per_pid(tree_pids)

    def _device_values(self, u: Unit) -> dict[str, float]:
        nv, i, h = self._nvml, u.key, u.handle
        values: dict[str, float] = {}
        if u.gpu in self._mig:
            self.note(f"gpu{i}: in MIG mode: NVML gives no utilisation of the GPU nor of its "
                      "processes; its instances' GPM activity stands in where the GPU has GPM")
        else:
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
        return values

    def _mig_values(self, u: Unit) -> dict[str, float]:
        mem = self._call(u.key, "mem_used_bytes", self._nvml.nvmlDeviceGetMemoryInfo, u.handle)
        return {} if mem is None else {"mem_used_bytes": mem.used, "mem_total_bytes": mem.total}

    def _gpm_values(self, u: Unit) -> dict[str, float]:
        """GPM's activity over the interval since the last sample (Hopper and later): SM
        activity, occupancy, tensor and DRAM activity, for a GPU or one MIG instance."""
        nv = self._nvml
        if u.gpu not in self._gpm_ok:
            support = self._call(u.gpu, "gpm", nv.nvmlGpmQueryDeviceSupport, self.devices[u.gpu])
            self._gpm_ok[u.gpu] = bool(support is not None and support.isSupportedDevice)
        if not self._gpm_ok[u.gpu] or (u.key, "gpm") in self._unsupported:
            return {}
        sample = self._call(u.key, "gpm", nv.nvmlGpmSampleAlloc)
        if sample is None:
            return {}
        if u.gi is None:
            got = self._call(u.key, "gpm", nv.nvmlGpmSampleGet, u.handle, sample)
        else:
            got = self._call(u.key, "gpm", nv.nvmlGpmMigSampleGet, self.devices[u.gpu], u.gi,
                             sample)
        if got is None:
            self._call(u.key, "gpm free", nv.nvmlGpmSampleFree, sample)
            return {}
        before, self._gpm[u.key] = self._gpm.get(u.key), sample
        if before is None:
            return {}
        ask = nv.c_nvmlGpmMetricsGet_t()
        ask.version = nv.NVML_GPM_METRICS_GET_VERSION
        ask.numMetrics = len(GPM_METRICS)
        ask.sample1, ask.sample2 = before, sample
        for k, (_, metric_id) in enumerate(GPM_METRICS):
            ask.metrics[k].metricId = metric_id
        answer = self._call(u.key, "gpm", nv.nvmlGpmMetricsGet, ask)
        self._call(u.key, "gpm free", nv.nvmlGpmSampleFree, before)
        values: dict[str, float] = {}
        for k, (name, _) in enumerate(GPM_METRICS):
            if answer is not None and answer.metrics[k].nvmlReturn == nv.NVML_SUCCESS:
                values[name] = float(answer.metrics[k].value)
        return values

    def _poll_processes(self, tree_pids: set[int]) -> None:
        """Who holds a context where, and with how much memory: each GPU's process lists, or
        each MIG instance's where the GPU is in MIG mode."""
        nv = self._nvml
        if self._pids is None:
            self._pids = PidMap()
        ours = self._pids
        self._unmapped = 0
        self._procs_read = False
        for u in self.units:
            if (u.gi is None) == (u.gpu in self._mig):
                continue  # a GPU in MIG mode: its instances' lists say where each process runs
            mem: dict[int, int] = {}
            for metric, fn in (("compute processes", nv.nvmlDeviceGetComputeRunningProcesses),
                               ("graphics processes", nv.nvmlDeviceGetGraphicsRunningProcesses)):
                got = self._call(u.key, metric, fn, u.handle)
                self._procs_read = self._procs_read or got is not None
                for p in got or ():
                    pid = ours(p.pid)
                    if pid is None:
                        self._unmapped += 1
                        continue
                    # A process with both contexts (C+G) is in both lists with the same memory.
                    mem[pid] = max(mem.get(pid, 0), p.usedGpuMemory or 0)
                    if pid in tree_pids:
                        self._host_pids[pid] = p.pid
                        if u.key not in self.used:
                            self.used.add(u.key)
                            self._accounting_on(u.gpu)
            self._proc_mem[u.key] = mem
        if len(self._host_pids) > MAX_HOST_PIDS:
            self._host_pids = {p: h for p, h in self._host_pids.items() if p in tree_pids}

    def _poll_utilisation(self, u: Unit, tree_pids: set[int]) -> None:
        """Each process's SM share since the last sample, from NVML's samples newer than the
        last one seen (never its whole buffer): the mean of those samples. A tree process that
        holds a context on the GPU and has no newer sample did not run there: 0."""
        samples = self._process_samples(u)
        if samples is None:
            self._proc_sm.pop(u.gpu, None)
            return
        ours = self._pids if self._pids is not None else PidMap()
        got: dict[int, list[float]] = {}
        for s in samples:
            self._util_ts[u.gpu] = max(self._util_ts.get(u.gpu, 0), int(s.timeStamp))
            pid = ours(s.pid)
            if pid is not None:
                got.setdefault(pid, []).append(float(s.smUtil))
        sm = {pid: sum(v) / len(v) for pid, v in got.items()}
        for pid in self._proc_mem.get(u.key, {}):
            if pid in tree_pids:
                sm.setdefault(pid, 0.0)
        self._proc_sm[u.gpu] = sm

    def _process_samples(self, u: Unit) -> list[Any] | None:
        """NVML's per-process utilisation samples of a GPU newer than the last seen: through
        nvmlDeviceGetProcessesUtilizationInfo where the driver has it, else
        nvmlDeviceGetProcessUtilization; [] for none newer (NOT_FOUND); None where neither
        answers."""
        nv = self._nvml
        since = self._util_ts.get(u.gpu, 0)
        for api, fn in (("processes utilization info", nv.nvmlDeviceGetProcessesUtilizationInfo),
                        ("process utilization", nv.nvmlDeviceGetProcessUtilization)):
            if (u.key, api) in self._unsupported or u.gpu in self._lost:
                continue
            try:
                return list(fn(u.handle, since))
            except nv.NVMLError_NotFound:
                return []
            except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
                self._unsupported.add((u.key, api))
            except nv.NVMLError_GpuIsLost:
                self._lost.add(u.gpu)
                self.note(f"gpu{u.gpu}: the GPU is lost; no further readings from it")
                return None
            except nv.NVMLError as err:
                self.note(f"gpu{u.key}: {api}: {err}")
                return None
        if u.gpu not in self._lost:
            self.note(f"gpu{u.key}: process utilization not supported by this device or driver")
        return None

    def _poll_events(self, gpus: set[int]) -> None:
        """The Xid errors NVML has queued since the last sample, of the GPUs shown."""
        nv = self._nvml
        if self._events is None:
            return
        index = {ctypes.cast(h, ctypes.c_void_p).value: i for i, h in enumerate(self.devices)}
        for _ in range(MAX_EVENTS_A_SAMPLE):
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError_Timeout:
                return
            except nv.NVMLError as err:
                self.note(f"gpu: Xid events: {err}")
                return
            gpu = index.get(ctypes.cast(data.device, ctypes.c_void_p).value)
            if gpu is None or gpu not in gpus:
                continue  # another job's GPU
            xid: dict[str, Any] = {"device": f"gpu{gpu}", "xid": int(data.eventData)}
            if data.gpuInstanceId != NO_INSTANCE:
                xid["device"] = f"gpu{gpu}/mig{int(data.gpuInstanceId)}"
            self.xids.append(xid)

    def _per_pid(self, tree_pids: set[int]) -> dict[int, dict[str, float]]:
        per: dict[int, dict[str, float]] = {}
        seen_any = False
        for mem in self._proc_mem.values():
            for pid, used in mem.items():
                seen_any = True
                key = _match(pid, tree_pids)
                if key is not None:
                    d = per.setdefault(key, {})
                    d["gpu_mem_bytes"] = d.get("gpu_mem_bytes", 0) + used
        for sm in self._proc_sm.values():
            for pid, util in sm.items():
                key = _match(pid, tree_pids)
                if key is not None:
                    d = per.setdefault(key, {})
                    d["gpu_util_percent"] = d.get("gpu_util_percent", 0.0) + util
        if seen_any and not per and not self._host_pids and not any(
                os.path.exists(f"/proc/{p}") for m in self._proc_mem.values() for p in m):
            # NVML reports host pids; in a container with its own pid namespace none exist
            # here, unless the host's /proc is mounted where PidMap finds it.
            self.note("gpu: GPU processes cannot be matched to this tree (a separate pid "
                      "namespace without the host's /proc mounted, e.g. -v /proc:/host/proc:ro, "
                      "or MIG); per-process GPU values are absent, device values remain")
        return per

    def gpus_in_use(self, tree_pids: set[int]) -> int:
        """How many GPUs whose processes' SM shares are read hold a context of the tree now:
        what the tree's gpu_util_percent is a share of (100 a GPU)."""
        return sum(1 for gpu, sm in self._proc_sm.items()
                   if any(p in tree_pids for p in sm) and gpu not in self._mig)

    # -- a death -------------------------------------------------------------------------------
    def _accounting_on(self, gpu: int) -> bool:
        """Whether NVML keeps accounting stats on the GPU (said once where it does not)."""
        if gpu not in self._accounting:
            nv = self._nvml
            mode = self._call(gpu, "accounting", nv.nvmlDeviceGetAccountingMode,
                              self.devices[gpu])
            self._accounting[gpu] = mode == nv.NVML_FEATURE_ENABLED
            if mode is not None and not self._accounting[gpu]:
                self.note(f"gpu{gpu}: {ACCOUNTING_OFF.format(gpu=gpu)}")
        return self._accounting[gpu]

    def lifetime(self, pid: int) -> dict[str, Any]:
        """A dead process's lifetime GPU figures from NVML's accounting stats, which outlive
        it: for its death record. {} where no GPU has them."""
        if self._nvml is None:
            return {}
        nv = self._nvml
        host = self._host_pids.get(pid, pid)
        out: list[dict[str, Any]] = []
        off: list[int] = []
        for gpu, h in enumerate(self.devices):
            if not self._accounting_on(gpu):
                if (gpu, "accounting") not in self._unsupported:
                    off.append(gpu)
                continue
            stats = self._call(gpu, "accounting stats", nv.nvmlDeviceGetAccountingStats, h, host)
            if stats is None:
                continue  # NOT_FOUND: it never ran there
            one: dict[str, Any] = {"device": f"gpu{gpu}", "util_percent": int(stats.gpuUtilization),
                                   "mem_util_percent": int(stats.memoryUtilization),
                                   "time_s": int(stats.time) / 1000.0}
            if stats.maxMemoryUsage is not None:
                one["peak_mem_bytes"] = int(stats.maxMemoryUsage)
            out.append(one)
        figures: dict[str, Any] = {}
        if out:
            figures["gpu_lifetime"] = out
            peaks = [o["peak_mem_bytes"] for o in out if "peak_mem_bytes" in o]
            if peaks:
                figures["gpu_peak_mem_bytes"] = max(peaks)
        used_gpus = {u.gpu for u in self.units if u.key in self.used}
        used_off = [g for g in off if g in used_gpus]
        if used_off:
            figures["gpu_accounting"] = "; ".join(
                f"gpu{g}: {ACCOUNTING_OFF.format(gpu=g)}" for g in used_off)
        return figures

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
            nv = self._nvml
            for sample in self._gpm.values():
                self._call(0, "gpm free", nv.nvmlGpmSampleFree, sample)
            if self._events is not None:
                self._call(0, "Xid events", nv.nvmlEventSetFree, self._events)
            try:
                nv.nvmlShutdown()
            except nv.NVMLError as err:
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
