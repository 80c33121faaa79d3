"""A sparse file given to load() (a .wsc or a record of 1 GiB that is mostly a hole) is
refused, or read as far as it holds entries, without being read whole into memory."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import python_script

from workerscope import Timeline, protocol
from workerscope.record import RecordWriter

SIZE = 2**30  # 1 GiB of hole: read whole, the process grew by as much
MAX_GROWTH = 128 * 2**20  # what load() may add to the process's peak RSS

LOAD = """
import json, resource, sys, time
from workerscope import load
from workerscope.errors import FileFormatError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
cpu = time.process_time()
try:
    t = load(sys.argv[1])
    out = {"loaded": True, "jobs": [j.status for j in t.jobs],
           "notes": [n for w in t.workers.values() for n in w.notes]}
except FileFormatError as err:
    out = {"loaded": False, "error": str(err)}
out["grew"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
out["cpu"] = time.process_time() - cpu
print(json.dumps(out))
"""


def _load_elsewhere(path: str) -> dict[str, object]:
    """load(path) in a process of its own: what it returned or raised, how much its peak RSS
    grew, and the CPU seconds it took."""
    proc = subprocess.run([*python_script(LOAD), path], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _record(path: str) -> None:
    """A whole record of one worker's job, through the real encoder and writer."""
    wid = protocol.worker_id("host-a", 100, 200)
    anchor = [1_700_000_000_000_000_000, 1_000_000_000]
    writer = RecordWriter(path)
    for seq, (kind, body) in enumerate([
            (protocol.HELLO, {"host": "host-a", "pid": 100, "anchor": anchor}),
            (protocol.JOB_START, {"job": 1, "name": "j", "t": anchor[1], "pid": 100}),
            (protocol.JOB_END, {"job": 1, "t": anchor[1] + 10**7, "status": "ok"}),
            (protocol.BYE, {"status": "exited"})]):
        assert writer.append(protocol.encode_frame(kind, wid, seq, body))
    writer.close()


def _sparse(path: str, head: bytes = b"") -> str:
    with open(path, "wb") as f:
        f.write(head)
    os.truncate(path, SIZE)
    return path


@pytest.mark.timeout(300)
@pytest.mark.parametrize("made", ["hole", "wsc+hole"])
def test_a_sparse_wsc_is_refused_without_reading_it(tmp_path, made):
    """A 1 GiB .wsc that is all hole, or a real .wsc with a 1 GiB hole after it: load() raises
    FileFormatError, its peak RSS grown by less than 128 MiB (it read the whole file
    first: +1 GiB)."""
    path = str(tmp_path / "t.wsc")
    head = b""
    if made == "wsc+hole":
        Timeline().save(path)
        with open(path, "rb") as f:
            head = f.read()
    out = _load_elsewhere(_sparse(path, head))
    print(out)
    assert out["loaded"] is False and "hole" in str(out["error"]), out
    assert int(out["grew"]) < MAX_GROWTH, out


@pytest.mark.timeout(300)
def test_a_record_with_a_hole_after_it_loads_what_it_holds(tmp_path):
    """A real record followed by a 1 GiB hole loads its job (the hole said as damaged, not
    torn), in less than 128 MiB more peak RSS and 5 s of CPU."""
    path = str(tmp_path / "r.wsc")
    _record(path)
    with open(path, "rb") as f:
        head = f.read()
    out = _load_elsewhere(_sparse(path, head))
    print(out)
    assert out["loaded"] is True and out["jobs"] == ["ok"], out
    assert any("damaged" in n for n in out["notes"]), out
    assert int(out["grew"]) < MAX_GROWTH and float(out["cpu"]) < 5.0, out


@pytest.mark.timeout(300)
def test_a_record_that_is_all_hole_is_refused(tmp_path):
    """A record's header and then a 1 GiB hole, no entry: FileFormatError, in less than
    128 MiB more peak RSS and 5 s of CPU."""
    path = str(tmp_path / "r.wsc")
    _record(path)
    with open(path, "rb") as f:
        magic = f.read(8)
    os.remove(path)
    out = _load_elsewhere(_sparse(path, magic))
    print(out)
    assert out["loaded"] is False, out
    assert int(out["grew"]) < MAX_GROWTH and float(out["cpu"]) < 5.0, out
