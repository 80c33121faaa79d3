"""Terminal views on fixed timelines, compared with golden text; CSV; `workerscope report`."""

from __future__ import annotations

import csv
import io
import os

from factories import job, job_span, sample, span, timeline, worker
from helpers import run_cli

from workerscope import Timeline
from workerscope.export.csv import to_csv
from workerscope.export.terminal import gantt, report

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "golden")
S = 1_000_000_000


def fixed_timeline() -> Timeline:
    """Two workers over 10 s: a healthy one with nested spans and a failed call, and one
    killed at 6 s in the middle of its job."""
    t0 = 1_700_000_000 * S
    a, b = "n1/a:100:101", "b:200:201"
    jobs = [job(worker=a, name="task", start_ns=t0, end_ns=t0 + 10 * S, pid=100),
            job(worker=b, name="task", start_ns=t0 + 1 * S, end_ns=t0 + 6 * S, status="killed",
                pid=200)]
    return timeline(
        workers=[worker(a, status="exited"),
                 worker(b, status="killed", lost=3, notes=["gpu: NVML found no NVIDIA device"])],
        jobs=jobs,
        spans=[*(job_span(j, attrs=None) for j in jobs),
               span(worker=a, job=1, id=2, parent=1, name="load", start_ns=t0 + 1 * S,
                    end_ns=t0 + 4 * S, pid=100),
               span(worker=a, job=1, id=3, parent=2, name="parse", start_ns=t0 + 2 * S,
                    end_ns=t0 + 3 * S, pid=100),
               span(worker=a, job=1, id=4, parent=1, name="save", start_ns=t0 + 7 * S,
                    end_ns=t0 + 8 * S, pid=100, error="OSError"),
               span(worker=b, job=1, id=2, parent=1, name="load", start_ns=t0 + 2 * S,
                    end_ns=t0 + 5 * S, pid=200)],
        samples=[*(sample(worker=a, t_ns=t0 + k * S, pid=100, cpu_percent=10.0 * k,
                          rss_bytes=1e6 * k, cpu_user_s=k * 0.5, cpu_system_s=0.0)
                   for k in range(11)),
                 *(sample(worker=b, t_ns=t0 + k * S, pid=200,
                          cpu_percent=200.0 if k > 2 else 50.0, rss_bytes=5e5)
                   for k in range(1, 7))])


def golden(name: str, text: str) -> str:
    path = os.path.join(GOLDEN, name)
    if os.environ.get("WORKERSCOPE_REGOLD"):
        with open(path, "w") as f:
            f.write(text)
    with open(path) as f:
        return f.read()


def test_gantt_golden():
    """The Gantt of the fixed timeline at width 60, killed worker and failed span marked."""
    text = gantt(fixed_timeline(), width=60)
    assert text == golden("gantt_60.txt", text)
    lines = text.splitlines()
    assert lines[1].startswith("b:200 killed") and "✗" in lines[1]
    assert lines[3].startswith("n1/a:100 exited") and "!" in lines[3]


def test_report_golden():
    """The whole terminal report (Gantt, workers, jobs, functions, notes) at width 72."""
    text = report(fixed_timeline(), width=72)
    assert text == golden("report_72.txt", text)


def test_width_follows_argument_and_no_colour_by_default():
    """Every Gantt line is exactly `width` wide; colour codes only when asked for."""
    for width in (40, 100):
        lines = gantt(fixed_timeline(), width=width).splitlines()
        assert {len(line) for line in lines} == {width}
    assert "\x1b[" not in report(fixed_timeline())
    assert "\x1b[31m✗" in gantt(fixed_timeline(), color=True)


def test_csv_has_one_row_per_sample_and_every_metric():
    """The CSV has the fixed columns plus each metric, one row per sample, blanks for absent."""
    t = fixed_timeline()
    rows = list(csv.DictReader(io.StringIO(to_csv(t))))
    assert len(rows) == len(t.samples) == 17
    assert rows[0]["scope"] == "tree" and rows[0]["t_s"] == "0.000000"
    b = [r for r in rows if r["worker"] == "b:200:201"]
    assert b[0]["cpu_user_s"] == "" and float(b[-1]["cpu_percent"]) == 200.0


def test_report_command(tmp_path):
    """`workerscope report FILE` prints the views; with --csv/--json it writes files."""
    path = fixed_timeline().save(tmp_path / "t.wsc")
    r = run_cli("report", path)
    assert r.returncode == 0, r.stderr
    assert "killed" in r.stdout and "parse" in r.stdout and "\x1b[" not in r.stdout
    r = run_cli("report", path, "--csv", str(tmp_path / "t.csv"), "--json", str(tmp_path / "t.json"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "t.csv").stat().st_size > 0 and (tmp_path / "t.json").stat().st_size > 0
    r = run_cli("report", str(tmp_path / "missing.wsc"))
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_functions_table_shows_growth_and_says_what_its_columns_mean():
    """The function table shows each function's memory growth (0 B for a sleep in a large
    process, 250 MiB for the allocator) beside the RSS it ran in, and a line says which is
    which (issue 14, item 4)."""
    from test_exports import hog_and_nap

    from workerscope.export.terminal import functions_table

    text = functions_table(hog_and_nap())
    head, _, *rows = text.splitlines()
    cols = head.split()
    assert "grew" in cols and "rss" in cols, head
    nap = next(r for r in rows if r.startswith("nap"))
    hog = next(r for r in rows if r.startswith("hog"))
    assert "0 B" in nap and "270 MiB" in nap, nap
    assert "250 MiB" in hog, hog
    assert "grew: " in text and "rss: " in text


def test_report_fits_the_width_it_is_given():
    """Every line of the report fits 80 columns (and 60, and 100), long function names, long
    error texts, notes and deaths included; at 100 columns nothing needed is left out, and the
    columns a narrow table drops are the ones the others imply (issue 14, item 8)."""
    from test_deaths import death_timeline

    from workerscope.export.terminal import functions_table

    t = death_timeline()
    t.spans.append(span(worker="h4:400:401", job=1, id=9, parent=1,
                        name="package.module.Class.a_rather_long_method_name",
                        start_ns=t.spans[0].start_ns, end_ns=t.spans[0].start_ns + S, pid=400))
    t.workers["h4:400:401"].notes.append("gpu: NVML found no NVIDIA device; " * 4)
    for width in (60, 80, 100):
        text = report(t, width=width)
        too_wide = [line for line in text.splitlines() if len(line) > width]
        assert not too_wide, (width, too_wide)
    wide = functions_table(t, width=200).splitlines()[0].split()
    narrow = functions_table(t, width=80).splitlines()[0].split()
    assert {"total", "p50", "max", "cpu", "grew", "errors", "cut"} <= set(narrow), narrow
    assert "mean" in wide and "mean" not in narrow
    assert any("…" in line for line in functions_table(t, width=80).splitlines())


def test_a_note_many_workers_gave_is_said_once():
    """A note that every worker gave is printed once as `all 8 workers: ...`; one that some
    gave names how many and which; a note only one worker gave stays against that worker."""
    no_gpu = "gpu: no NVIDIA GPU metrics (NVML Shared Library Not Found)"
    t0 = 1_700_000_000 * S
    workers, jobs, samples = [], [], []
    for k in range(8):
        wid = f"h{k}:{100 + k}:{200 + k}"
        workers.append(worker(wid, status="exited",
                              notes=[no_gpu, *(["gpu0: power_w not supported"] if k < 2 else []),
                                     *(["tree: 3 children vanished mid-sample"] if k == 5 else [])]))
        jobs.append(job(worker=wid, name="task", start_ns=t0, end_ns=t0 + 2 * S, pid=100 + k))
        samples.append(sample(worker=wid, t_ns=t0 + S, pid=100 + k, cpu_percent=50.0))
    t = timeline(workers=workers, jobs=jobs, spans=[job_span(j, attrs=None) for j in jobs],
                 samples=samples)
    text = report(t, width=100)
    notes = text[text.index("notes:\n"):].splitlines()[1:]
    assert notes == ["  all 8 workers: " + no_gpu,
                     "  2 of 8 workers (h0:100, h1:101): gpu0: power_w not supported",
                     "  h5:105: tree: 3 children vanished mid-sample"], notes
