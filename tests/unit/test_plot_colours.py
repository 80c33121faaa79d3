"""A worker has one colour in every resource plot."""

from __future__ import annotations

from factories import S, sample, timeline, worker

from workerscope.export.plotspec import PLOTS, plot_series


def test_a_worker_s_process_has_the_worker_s_colour():
    """Three single-process workers whose CPU ranks differ from their order: each worker's
    line in "CPU by process" has the colour of its line in "CPU (tree)" (the busiest process
    took the first colour whichever worker it was)."""
    ws = [worker(f"h:{pid}:9", pid=pid) for pid in (11, 12, 13)]
    samples = []
    for k in range(5):
        for w, cpu in zip(ws, (10.0, 50.0, 90.0), strict=True):
            values = {"cpu_percent": cpu, "rss_bytes": 1e6}
            samples.append(sample(worker=w.id, t_ns=k * S, scope="tree", pid=w.pid, values=values))
            samples.append(sample(worker=w.id, t_ns=k * S, scope="proc", pid=w.pid, values=values))
    t = timeline(workers=ws, samples=samples)
    order = [w.id for w in ws]
    tree_spec = next(s for s in PLOTS if s.scope == "tree" and "cpu_percent" in s.metrics)
    proc_spec = next(s for s in PLOTS if s.scope == "proc" and "cpu_percent" in s.metrics)
    tree = {s.label: s.color for s in plot_series(t, tree_spec, order)}
    procs = plot_series(t, proc_spec, order)
    assert len(procs) == 3
    for line in procs:
        pid = int(line.label.split()[-1])
        assert line.color == tree[f"h:{pid}:9"], line.label
