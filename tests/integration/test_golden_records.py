"""Records written by earlier code still load: the golden files in tests/golden, made once by
tests/golden/make_records.py and never replaced, read back whole."""

from __future__ import annotations

import collections
import json
import os

import pytest

from workerscope import load
from workerscope.export.terminal import report

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "golden")
TAGS = sorted(name[len("manifest_"):-len(".json")] for name in os.listdir(GOLDEN)
              if name.startswith("manifest_"))
KINDS = ("record", "timeline")  # the driver's record; a Timeline.save


def test_there_are_golden_files_of_each_kind():
    """Each manifest has a driver's record and a saved timeline beside it."""
    assert TAGS
    for tag in TAGS:
        for kind in KINDS:
            assert os.path.exists(os.path.join(GOLDEN, f"{kind}_{tag}.wsc"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tag", TAGS)
def test_a_golden_file_loads_whole(tag, kind, tmp_path):
    """The job, its spans (3 load_batch, 2 forward, one failed), its mark and its samples
    come back as they were recorded, and every view of them can be written."""
    t = load(os.path.join(GOLDEN, f"{kind}_{tag}.wsc"))
    with open(os.path.join(GOLDEN, f"manifest_{tag}.json")) as f:
        manifest = json.load(f)
    counts = {"spans": len(t.spans), "samples": len(t.samples), "marks": len(t.marks),
              "jobs": len(t.jobs), "workers": len(t.workers)}
    assert counts == {k: manifest[k] for k in counts}
    [job] = t.jobs
    assert job.name == "golden" and job.status == "ok"
    calls = collections.Counter(s.name.rsplit(".", 1)[-1] for s in t.spans if s.kind != "job")
    assert calls == {"load_batch": 3, "forward": 2, "fails": 1}
    [failed] = [s for s in t.spans if s.error]
    assert failed.name.endswith("fails") and "golden" in failed.error
    assert [m.name for m in t.marks] == ["epoch"]
    tree = [s for s in t.samples if s.scope == "tree"]
    assert tree and all(s.values["rss_bytes"] > 0 for s in tree)
    assert "load_batch" in report(t)
    for ext in ("json", "html", "csv"):
        path = tmp_path / f"out.{ext}"
        t.save(str(path))
        assert path.stat().st_size > 0
