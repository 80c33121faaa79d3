"""Timeline.save("x.parquet"): a folder of Parquet tables (export/parquet.py), read back as they
are by DuckDB (SQL) and polars, giving the function table's numbers for a 4-worker run. The
readers run in a process of their own: both keep thread pools (and their descriptors) for the
life of the process that loads them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from workerscope import Subscriber
from workerscope.export.attribution import function_table
from workerscope.export.parquet import TABLES
from workerscope.timeline import Job, Span, Timeline, Worker

pytest.importorskip("pyarrow")
READER = textwrap.dedent("""
    import json, sys
    import duckdb, polars as pl
    path = sys.argv[1]
    out = {"sql": [list(r) for r in duckdb.sql(
        f"SELECT name, kind, count(*), sum(duration_s) FROM '{path}/spans.parquet' "
        "GROUP BY name, kind").fetchall()]}
    out["polars"] = [list(r) for r in pl.read_parquet(f"{path}/spans.parquet")
                     .group_by("name").agg(pl.col("duration_s").sum()).iter_rows()]
    jobs = pl.read_parquet(f"{path}/jobs.parquet")
    out["jobs"] = {"height": jobs.height, "status": sorted(set(jobs["status"])),
                   "job": jobs["job"].to_list(), "name": jobs["name"].to_list()}
    out["workers"] = pl.read_parquet(f"{path}/workers.parquet").height
    out["tree_rss"] = duckdb.sql(f"SELECT count(*) FROM '{path}/samples.parquet' WHERE "
                                 "scope = 'tree' AND metric = 'rss_bytes'").fetchall()[0][0]
    out["attrs"] = pl.read_parquet(f"{path}/spans.parquet")["attrs"].to_list()
    print(json.dumps(out))
""")


def _read(path: str) -> dict:
    pytest.importorskip("duckdb")
    pytest.importorskip("polars")
    proc = subprocess.run([sys.executable, "-c", READER, path], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)

WORKER = textwrap.dedent("""
    import sys, time
    from workerscope import profiled, timed

    @timed
    def fetch(i):
        time.sleep(0.01 * (i % 3))

    @timed
    def crunch(n):
        return sum(range(n))

    def job(k):
        for i in range(5 + k):
            fetch(i)
            crunch(20_000 * (k + 1))

    run = profiled(job, mode="heavy", interval=0.05, endpoint=sys.argv[1])
    for k in range(2):
        run(int(sys.argv[2]) + k)
""")


@pytest.fixture(scope="module")
def four_workers():
    with Subscriber() as sub:
        procs = [subprocess.Popen([sys.executable, "-c", WORKER, sub.endpoint, str(k)])
                 for k in range(4)]
        for p in procs:
            assert p.wait(timeout=120) == 0
        assert sub.wait(jobs=8, byes=4, timeout=60)
        return sub.timeline()


def test_duckdb_and_polars_read_the_function_table_back(four_workers, tmp_path):
    t = four_workers
    path = t.save(tmp_path / "run.parquet")
    assert sorted(os.listdir(path)) == sorted(f"{name}.parquet" for name in TABLES)
    want = {(r["name"], r["kind"]): (r["calls"], r["total_s"]) for r in function_table(t)}
    read = _read(path)
    got = {(name, kind): (calls, total) for name, kind, calls, total in read["sql"]}
    assert got.keys() == want.keys() and len(got) == 3  # fetch, crunch, the job
    for key, (calls, total) in want.items():
        assert got[key][0] == calls and got[key][1] == pytest.approx(total, rel=1e-9), key
    for name, total in read["polars"]:
        assert total == pytest.approx(sum(v[1] for k, v in want.items() if k[0] == name))
    assert read["jobs"]["height"] == 8 and read["jobs"]["status"] == ["ok"]
    assert read["workers"] == 4
    assert read["tree_rss"] == len([s for s in t.samples if s.scope == "tree"
                                    and "rss_bytes" in s.values])


def test_saving_again_replaces_the_folder_whole(four_workers, tmp_path):
    path = str(tmp_path / "run.parquet")
    four_workers.save(path)
    Timeline(workers={"w": Worker("w")}).save(path)
    read = _read(path)
    assert read["sql"] == [] and read["workers"] == 1 and read["jobs"]["height"] == 0
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temporary left


def test_values_past_the_columns_types_are_saved_not_refused(tmp_path):
    """Accepted data a save must not fail on: an id past int64, a name with a lone surrogate."""
    t = Timeline(workers={"w": Worker("w")},
                 jobs=[Job("w", 1 << 70, "job\udc80", 0, 10, "ok", None, 1, 1)],
                 spans=[Span("w", 1, 2, None, "f", 0, 5, 1, 1, attrs={"x": float("nan")})])
    read = _read(t.save(tmp_path / "odd.parquet"))
    assert read["jobs"]["job"] == [None] and read["jobs"]["name"][0].startswith("job")
    assert read["attrs"] == ['{"x": "NaN"}']


def test_a_folder_of_other_files_is_refused_not_deleted(tmp_path):
    from workerscope.errors import OutputPathError

    theirs = tmp_path / "dataset.parquet"
    theirs.mkdir()
    (theirs / "part-0001.parquet").write_bytes(b"someone's data")
    with pytest.raises(OutputPathError, match="other files"):
        Timeline().save(theirs)
    assert (theirs / "part-0001.parquet").read_bytes() == b"someone's data"
