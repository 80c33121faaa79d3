"""Report generation time and output size for synthetic timelines of 1k to 1M spans, against a
raw json.dumps floor.

    python benchmarks/bench_report.py            # 1k, 10k, 100k and 1M spans
    python benchmarks/bench_report.py 1000 10000 # other sizes

The timelines are built directly from the dataclasses in workerscope/timeline.py, shaped like a
training run seen by 16 sidecars on 4 hosts: each worker runs jobs of 100 steps, each step a
span with two children, one of which has a child of its own (job > step > load_batch |
forward > kernel: 4 levels), ~20 ms a step (~200 spans/s per worker), attrs on 1 step in 50,
1 span in 1000 failed, a mark per job; every 0.1 s of the span range a tree, a proc and a host
sample per worker, with the metrics a real sidecar sends. A size counts every span, job spans
included.

Per size and format, the time (perf_counter, GC on; best of 5 runs up to 10k spans, one run
above, where a case takes long enough to be stable) and the size of what it writes:
  json floor       json.dumps of the spans as plain lists, built beforehand: the least any
                   exporter pays to serialise that much data (the baseline for "x floor")
  chrome .json     to_chrome(t) then json.dumps(separators=(",", ":")).encode(): what
                   Timeline.save("x.json") does, per-span resource attribution included
  .pftrace         Timeline.save("x.pftrace"): Perfetto's protobuf trace through the perfetto
                   package's protos, streamed to the file in chunks (no per-span attribution)
  html             to_html(t).encode() (past 500k spans the shortest are binned)
  terminal report  terminal.report(t) (width 80): Gantt, workers, jobs and functions tables
  csv samples      to_csv(t).encode()
  .wsc save        Timeline.save to a temp file (msgpack of to_dict(), written, renamed)
  .wsc load        workerscope.load of that file: what `workerscope report` starts with

Each measurement runs in a forked child of the process that built the timeline, so a case
that passes the time limit (LIMIT_S, 3 minutes) is killed and reported as skipped rather than
hanging the run, and its memory is its own: the "peak MB" column is the child's high-water
RSS above what it started with (VmHWM after clear_refs). The child's first touches of the
inherited timeline cost copy-on-write page faults: at 1M spans, walking every span and sample
took 0.27 s in a fresh child against 0.12 s in the parent, so ~0.15 s on the 1M rows.
"""

from __future__ import annotations

import gc
import json
import multiprocessing as mp
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

# A WORKERSCOPE_* variable in the caller's environment could change what is measured.
for _var in [v for v in os.environ if v.startswith("WORKERSCOPE_")]:
    del os.environ[_var]

# The synthetic timeline is built with the tests' record factories (tests/factories.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

import psutil  # noqa: E402
from factories import job, job_span, mark, sample, span, worker  # noqa: E402

from workerscope.errors import WorkerscopeError  # noqa: E402
from workerscope.export.chrome import to_chrome  # noqa: E402
from workerscope.export.csv import to_csv  # noqa: E402
from workerscope.export.html import MAX_SPANS, to_html  # noqa: E402
from workerscope.export.terminal import report  # noqa: E402
from workerscope.timeline import Timeline, load  # noqa: E402

SIZES = (1_000, 10_000, 100_000, 1_000_000)
WORKERS = 16
HOSTS = 4
STEPS_PER_JOB = 100
TICK_NS = 100_000_000  # samples every 0.1 s
T0 = 1_750_000_000 * 10**9  # an epoch origin, as in a real trace
LIMIT_S = 180.0  # per case: past this, kill it and say so
SMALL = 10_000  # up to this many spans, best of SMALL_REPEATS runs; above, one run
SMALL_REPEATS = 5

STEP_NAMES = ("train_step", "train_step", "train_step", "eval_step")
KERNELS = tuple(f"kernel_{name}" for name in ("matmul", "conv2d", "softmax", "layernorm",
                                              "attention", "gelu", "dropout", "adam"))


# -- the synthetic timeline -----------------------------------------------------------------
def _tree_values(k: int, rng: random.Random) -> dict[str, float]:
    cpu = 0.085 * k
    return {"cpu_percent": 80.0 + 20.0 * rng.random(), "cpu_user_s": round(cpu, 2),
            "cpu_system_s": round(cpu * 0.05, 2), "rss_bytes": 2_000_000_000 + 1000 * k,
            "peak_rss_bytes": 2_100_000_000 + 1000 * k, "uss_bytes": 1_900_000_000.0,
            "pss_bytes": 1_950_000_000.0, "read_bytes": 4096 * k, "write_bytes": 1024 * k,
            "read_chars": 9000 * k, "write_chars": 300 * k, "num_threads": 12, "num_fds": 40,
            "ctx_switches_voluntary": 30 * k, "ctx_switches_involuntary": 3 * k, "num_procs": 3}


def _host_values(k: int, rng: random.Random) -> dict[str, float]:
    out = {f"cpu_percent_core{c}": 100.0 * rng.random() for c in range(8)}
    out.update({"cpu_percent": 60.0 + 30.0 * rng.random(), "cpu_iowait_percent": 0.5,
                "cpu_steal_percent": 0.0, "mem_used_bytes": 40_000_000_000 + 10_000 * k,
                "mem_available_bytes": 200_000_000_000, "mem_total_bytes": 256_000_000_000,
                "swap_used_bytes": 0, "net_sent_bytes": 1_000_000 * k,
                "net_recv_bytes": 3_000_000 * k, "net_sent_packets": 900 * k,
                "net_recv_packets": 2500 * k, "disk_read_bytes": 50_000 * k,
                "disk_write_bytes": 20_000 * k, "load_1m": 7.5, "load_5m": 7.1,
                "load_15m": 6.9})
    return out


def build(n_spans: int, seed: int = 1) -> Timeline:
    """A timeline of n_spans spans (jobs included) over WORKERS workers."""
    rng = random.Random(seed)
    t = Timeline()
    spans, jobs, marks, samples = t.spans, t.jobs, t.marks, t.samples
    for w in range(WORKERS):
        host, pid = f"host{w % HOSTS}", 10_000 + 100 * w
        wid = f"{host}:{pid}:{pid + 1}"
        t.workers[wid] = worker(wid, sidecar_pid=pid + 1, interval=0.1, boot_id=f"boot-{host}",
                                status="exited")
        t.processes[(wid, pid)] = "python"
        t.threads[(wid, pid, pid)] = "MainThread"
        quota = n_spans // WORKERS + (w < n_spans % WORKERS)
        now = T0 + w * 1_370_000  # workers start a little apart
        first = now
        ids = 0
        count = 0
        while quota > 0:
            ids += 1
            job_id, job_start = ids, now
            quota -= 1  # the job's own span
            step = 0
            while step < STEPS_PER_JOB and quota > 0:
                count += 1
                s = now + rng.randrange(20_000, 80_000)
                length = rng.randrange(15_000_000, 25_000_000)
                ids += 4
                sid, load_id, fwd_id, ker_id = ids - 3, ids - 2, ids - 1, ids
                attrs = {"batch": count, "lr": 0.001} if count % 50 == 0 else None
                error = "ValueError" if count % 250 == 0 else None  # 1 in 1000 spans
                fwd_start = s + length // 5
                ker_start = fwd_start + 500_000
                step_spans = [
                    span(worker=wid, job=job_id, id=sid, name=STEP_NAMES[count % 4], start_ns=s,
                         end_ns=s + length, pid=pid, attrs=attrs, error=error),
                    span(worker=wid, job=job_id, id=load_id, parent=sid, name="load_batch",
                         start_ns=s + 10_000, end_ns=s + length // 5 - 100_000, pid=pid),
                    span(worker=wid, job=job_id, id=fwd_id, parent=sid, name="forward",
                         start_ns=fwd_start, end_ns=s + length - 20_000, pid=pid),
                    span(worker=wid, job=job_id, id=ker_id, parent=fwd_id,
                         name=KERNELS[count % len(KERNELS)], start_ns=ker_start,
                         end_ns=s + length - 600_000, pid=pid),
                ]
                spans.extend(step_spans[:quota])
                quota -= min(quota, 4)
                now = s + length
                step += 1
            now += 100_000
            jobs.append(job(worker=wid, id=job_id, name="train", start_ns=job_start, end_ns=now,
                            pid=pid))
            spans.append(job_span(jobs[-1]))
            marks.append(mark(worker=wid, job=job_id, name="checkpoint", t_ns=now, pid=pid,
                              attrs={"step": count}))
            now += 200_000
        # Samples on the sidecar's 0.1 s grid, over this worker's span range and one past it.
        for k, ts in enumerate(range(first - first % TICK_NS, now + TICK_NS, TICK_NS), start=1):
            tree = _tree_values(k, rng)
            samples.append(sample(worker=wid, t_ns=ts, pid=pid, values=tree))
            proc = dict(tree)
            del proc["num_procs"]
            samples.append(sample(worker=wid, t_ns=ts, scope="proc", pid=pid, values=proc))
            samples.append(sample(worker=wid, t_ns=ts, scope="host", values=_host_values(k, rng)))
    t.sort()
    return t


def floor_lists(t: Timeline) -> list[list[Any]]:
    """The spans as plain JSON-ready lists: what the floor serialises."""
    return [[s.worker, s.job, s.id, s.parent, s.name, s.start_ns, s.end_ns, s.pid, s.tid,
             s.attrs, s.error, s.kind] for s in t.spans]


# -- the cases ------------------------------------------------------------------------------
def case_floor(rows: list[list[Any]]) -> int:
    return len(json.dumps(rows, separators=(",", ":")).encode())


def case_chrome(t: Timeline) -> int:
    return len(json.dumps(to_chrome(t), separators=(",", ":")).encode())


def case_pftrace(t: Timeline, path: str) -> int:
    from workerscope.export.pftrace import write_pftrace  # imported (warm) by main, as the rest

    write_pftrace(t, path)
    size = os.path.getsize(path)
    os.unlink(path)
    return size


def case_html(t: Timeline) -> int:
    return len(to_html(t).encode())


def case_report(t: Timeline) -> int:
    return len(report(t).encode())


def case_csv(t: Timeline) -> int:
    return len(to_csv(t).encode())


def case_save(t: Timeline, path: str) -> int:
    t.save(path)
    return os.path.getsize(path)


def case_load(t: Timeline, path: str) -> int:
    back = load(path)
    if len(back.spans) != len(t.spans) or len(back.samples) != len(t.samples):
        raise RuntimeError(f"load gave {len(back.spans)} spans, {len(back.samples)} samples")
    return os.path.getsize(path)


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _child(fn: Callable[[], int], conn: Any) -> None:
    try:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # VmHWM restarts from what this child has now
            hwm_ok = True
        except OSError:
            hwm_ok = False
        base = _rss_kb("VmRSS")
        t0 = time.perf_counter()
        size = fn()
        seconds = time.perf_counter() - t0
        peak = (_rss_kb("VmHWM") - base) / 1024 if hwm_ok else float("nan")
        conn.send(("ok", seconds, size, peak))
    except BaseException as err:  # reported by the parent; the child has nothing else to do
        conn.send(("error", repr(err)))
    finally:
        conn.close()


def run_case(fn: Callable[[], int], limit: float) -> tuple[str, Any, Any, Any]:
    """Run fn in a forked child: ("ok", seconds, bytes, peak MB), ("skipped", reason) past the
    limit, or ("error", repr)."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, child), daemon=True)
    proc.start()
    child.close()
    try:
        if parent.poll(limit):
            try:
                result = parent.recv()
            except EOFError:
                result = ("error", f"the child died (exit {proc.exitcode})")
        else:
            result = ("skipped", f"over {limit:.0f} s")
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()
    if result[0] == "ok":
        return result  # type: ignore[return-value]
    return (result[0], result[1], None, None)


def best_of(fn: Callable[[], int], runs: int) -> tuple[str, Any, Any, Any]:
    """The fastest of `runs` runs, or the first that did not finish."""
    best = None
    for _ in range(runs):
        result = run_case(fn, LIMIT_S)
        if result[0] != "ok":
            return result
        if best is None or result[1] < best[1]:
            best = result
    assert best is not None
    return best


def cases_of(t: Timeline, rows: list[list[Any]], path: str,
             pf_path: str) -> list[tuple[str, Callable[[], int]]]:
    """The cases measured on timeline t, by label, in the order of the table."""
    return [
        ("json floor", lambda: case_floor(rows)),
        ("chrome .json", lambda: case_chrome(t)),
        (".pftrace", lambda: case_pftrace(t, pf_path)),
        ("html" + (" (binned)" if len(t.spans) > MAX_SPANS else ""), lambda: case_html(t)),
        ("terminal report", lambda: case_report(t)),
        ("csv samples", lambda: case_csv(t)),
        (".wsc save", lambda: case_save(t, path)),
        (".wsc load", lambda: case_load(t, path)),
    ]


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or list(SIZES)
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB; {WORKERS} workers on {HOSTS} hosts, "
          f"4-level spans, tree+proc+host samples every 0.1 s; best of {SMALL_REPEATS} up to "
          f"{SMALL:,} spans, one run above, each in a forked child, limit {LIMIT_S:.0f} s")
    print()
    head = (f"{'spans':>9}  {'format':<16} {'seconds':>9} {'MB':>9} {'us/span':>9} "
            f"{'x floor':>8} {'peak MB':>8}")
    print(head)
    print("-" * len(head))
    sys.stdout.flush()
    failed = 0
    tmpdir = tempfile.mkdtemp(prefix="bench-report-")
    path = os.path.join(tmpdir, "t.wsc")
    pf_path = os.path.join(tmpdir, "t.pftrace")
    try:
        from workerscope.export.pftrace import trace_protos

        trace_protos()  # its ~20 ms import paid here, as the other exporters' imports are
        has_perfetto = True
    except WorkerscopeError:
        has_perfetto = False
    try:
        for n in sizes:
            t0 = time.perf_counter()
            t = build(n)
            built = time.perf_counter() - t0
            rows = floor_lists(t)
            gc.collect()
            cases = cases_of(t, rows, path, pf_path)
            floor = None
            for label, fn in cases:
                if label == ".pftrace" and not has_perfetto:
                    print(f"{n:>9,}  {label:<16} (no perfetto package: pip install "
                          "'workerscope[trace]')")
                    continue
                if label == ".wsc load" and not os.path.exists(path):
                    print(f"{n:>9,}  {label:<16} {'(no .wsc saved)':>9}")
                    continue
                status, a, size, peak = best_of(fn, SMALL_REPEATS if n <= SMALL else 1)
                if status != "ok":
                    failed += status == "error"
                    print(f"{n:>9,}  {label:<16} {status.upper()}: {a}")
                    continue
                floor = floor or a
                print(f"{n:>9,}  {label:<16} {a:9.3f} {size / 1e6:9.2f} "
                      f"{a / len(t.spans) * 1e6:9.2f} {a / floor:7.1f}x {peak:8.0f}")
                sys.stdout.flush()
            if os.path.exists(path):
                os.unlink(path)
            print(f"{'':>9}  (built in {built:.1f} s: {len(t.spans):,} spans, {len(t.jobs):,} "
                  f"jobs, {len(t.samples):,} samples over "
                  f"{((t.end_ns or 0) - (t.start_ns or 0)) / 1e9:.1f} s)")
            print()
            del t, rows, cases
            gc.collect()
    finally:
        for name in os.listdir(tmpdir):
            os.unlink(os.path.join(tmpdir, name))
        os.rmdir(tmpdir)
        left = psutil.Process().children(recursive=True)
        if left:
            print(f"LEFT BEHIND: {[p.pid for p in left]}", file=sys.stderr)
    return 1 if left or failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
