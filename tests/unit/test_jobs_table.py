"""The terminal report's jobs table stays readable with many jobs."""

from __future__ import annotations

from factories import S, job, timeline, worker

from workerscope.export.terminal import jobs_table, report


def _many(n: int):
    jobs = [job(id=i, name=f"task-{i}", start_ns=i * S, end_ns=i * S + (S if i != 77 else 9 * S))
            for i in range(1, n + 1)]
    if n > 40:
        jobs[40] = job(id=41, name="task-41", start_ns=41 * S, end_ns=42 * S, status="error",
                       error="ValueError: bad")
    return timeline(workers=[worker()], jobs=jobs)


def test_the_jobs_table_shows_twenty_rows_by_default_failed_and_longest_first():
    """141 jobs: 20 rows, the failed job and the longest among them, and a line that says how
    many were left out and how to list them all (it printed all 141)."""
    text = jobs_table(_many(141), width=120)
    rows = [line for line in text.splitlines() if "task-" in line]
    assert len(rows) == 20
    assert any("task-41" in r and "error" in r for r in rows)
    assert any("task-77" in r for r in rows)
    assert "121 more job(s)" in text and "--jobs 0" in text


def test_the_jobs_table_can_list_every_job():
    """limit=None (`report --jobs 0`) lists every job, and a short list is never cut."""
    assert sum("task-" in line for line in jobs_table(_many(141), 120, None).splitlines()) == 141
    assert "more job(s)" not in jobs_table(_many(5), width=120)
    assert "more job(s)" not in report(_many(5), width=120)
