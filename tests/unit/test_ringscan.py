"""The span ring reader's C passes (_ringscan.c) give what their Python twins give
(spanring.PythonScan), on any words: the same slots classified, the same records passing the
first sanity test, and the same spans, ends, open spans, thread stacks, async contexts and
job cache from the same reader state."""

from __future__ import annotations

import copy
import importlib.util
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workerscope import protocol, spanring
from workerscope.spanring import PythonScan

_BUILT = importlib.util.find_spec("workerscope._ringscan") is not None


@pytest.fixture(scope="module")
def c_scan():
    if not _BUILT and shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler here: the reader's fast path cannot have been built")
    assert _BUILT, "the reader's C fast path is not built: pip install -e . builds it"
    from workerscope import _ringscan

    assert _ringscan.LAYOUT == spanring.VERSION
    return _ringscan


INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


def test_the_reader_uses_the_c_passes_where_built(c_scan, monkeypatch):
    """Not a silent fallback: where the module is built, readers run it, unless
    WORKERSCOPE_PURE_PYTHON=1 asks for the Python passes."""
    monkeypatch.delenv("WORKERSCOPE_PURE_PYTHON", raising=False)
    assert spanring._load_scan() is c_scan
    monkeypatch.setenv("WORKERSCOPE_PURE_PYTHON", "1")
    assert spanring._load_scan() is PythonScan


@settings(max_examples=400, deadline=None)
@given(seq=st.one_of(st.integers(1, 40), st.integers(1, 1 << 20)), cap=st.sampled_from([1, 2, 4, 8, 16]),
       ahead=st.integers(-40, 40), slots=st.integers(0, 24), data=st.data())
def test_slots_classify_as_python_does(c_scan, seq, cap, ahead, slots, data):
    """Slots holding their seq, an older or newer one, zeros, negatives or any int64, with
    the counter behind, at or past the ring's length ahead: the same fresh slots, lost and
    damaged counts, and the same stop at a slot not written yet."""
    hi = seq + slots - 1
    near = st.integers(seq - 2 * cap, hi + 2 * cap)
    words = []
    for _ in range(slots):
        words += [data.draw(st.one_of(near, st.just(0), INT64)), *data.draw(
            st.lists(INT64, min_size=5, max_size=5))]
    at = 0
    for s in range(seq, hi + 1):  # also from a later start, as the reader resumes
        c_post = hi + ahead
        assert c_scan.slots(words, at, s, hi, c_post, cap) == PythonScan.slots(
            words, at, s, hi, c_post, cap)
        at += spanring.RECORD_WORDS


def _near_bounds(draw, top: int, born: int, now: int) -> list[int]:
    """A record a writer could have written, each of its words then kept or, at random, put
    at or just past one of the first test's bounds, or at any int64."""
    seq = draw(st.integers(1, 1 << 20))
    flags = draw(st.integers(0, spanring.FLAGS))
    nid = draw(st.integers(0, top))
    depth, tid = draw(st.integers(0, spanring.MAX_DEPTH)), draw(st.integers(1, spanring.MAX_TID))
    start = draw(st.integers(born, max(born, now)))
    end = draw(st.sampled_from([0, start, now, start | spanring.ERR_BIT]))
    ctx = draw(st.integers(0, seq - 1))
    good = [seq, flags << 32 | nid, depth << 32 | tid, start, end, ctx]
    bounds = [
        [seq, ctx, ctx + 1, 0, -1],
        [16 << 32, (spanring.FLAGS + 1) << 32, spanring.F_END << 32, top + 1, -1,
         flags << 32 | (top + 1)],
        [0, tid, spanring.MAX_DEPTH << 32 | spanring.LOW32, (spanring.MAX_DEPTH + 1) << 32 | tid,
         depth << 32 | spanring.MAX_TID, depth << 32 | (spanring.MAX_TID + 1), depth << 32, -1],
        [born, born - 1, now, now + 1, -1],
        [0, -1, start - 1, now, now + 1, (now + 1) | spanring.ERR_BIT, start | spanring.ERR_BIT,
         spanring.ERR_BIT],
        [seq, seq - 1, 0, -1],
    ]
    return [draw(st.one_of(st.just(w), st.sampled_from(b), INT64) if draw(st.booleans())
                 else st.just(w)) for w, b in zip(good, bounds, strict=True)]


@settings(max_examples=1500, deadline=None)
@given(data=st.data(), n=st.integers(0, 6), top=st.integers(0, 8),
       born=st.integers(1, 1000), now=st.integers(0, 2000))
def test_the_first_sanity_test_is_python_s(c_scan, data, n, top, born, now):
    """Records near every bound of the test (flags, the end bit, the name id against top,
    depth and tid, ctx against seq, times against born and now, the error bit on an end),
    and arbitrary int64 words: the same split into passed and the rest."""
    words = [w for _ in range(n) for w in _near_bounds(data.draw, top, born, now)]
    fresh = list(range(0, len(words), spanring.RECORD_WORDS))
    assert c_scan.sane(words, fresh, top, born, now) == PythonScan.sane(
        words, fresh, top, born, now)


def _records(draw, n: int) -> list[int]:
    """n records in seq order as a writer writes them, of every kind: sync spans at depths
    that rise and fall, async spans and marks, F_END records of earlier seqs (with and
    without F_CPU), spans open, ended, ended with the error bit, begun in async contexts."""
    words: list[int] = []
    for seq in range(1, n + 1):
        flags = draw(st.sampled_from([0, 0, 0, spanring.F_ASYNC, spanring.F_MARK,
                                      spanring.F_END, spanring.F_END | spanring.F_CPU,
                                      spanring.F_CPU]))
        tid = draw(st.sampled_from([101, 102, 103]))
        depth = draw(st.integers(0, 5))
        start = 1000 + 10 * seq
        if flags & spanring.F_END:
            ended = draw(st.integers(1, max(1, seq - 1)))
            words += [seq, flags << 32, tid, ended, start + draw(st.integers(0, 9)),
                      draw(st.integers(0, 99))]
            continue
        end = draw(st.sampled_from([0, start, start + 5, start + 5 | spanring.ERR_BIT]))
        ctx = draw(st.sampled_from([0, 0, max(0, seq - 1), max(0, seq - 3)]))
        words += [seq, flags << 32 | draw(st.integers(1, 4)), depth << 32 | tid, start, end, ctx]
    return words


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(0, 40), half=st.integers(1, 8),
       room=st.one_of(st.integers(-4, 30), st.just(spanring.STACK_ROOM)))
def test_records_become_the_spans_python_makes(c_scan, data, n, half, room):
    """The same SpanRecords (values and type), ends, room left and records cut, and the same
    reader state after: open spans, stacks, async contexts and the job cache, from a state
    holding open spans, extras, a name the names table lacks, jobs on some threads, a job
    cache of earlier reads, and stacks with room for a few levels more or for all."""
    words = _records(data.draw, n)
    fresh = list(range(0, len(words), spanring.RECORD_WORDS))
    jobs = spanring.Jobs()
    jobs.start(7, 4242, 101, 0)
    jobs.start(8, 4242, None, 1000 + 10 * data.draw(st.integers(0, 40)))
    jobs.end(7, 1000 + 10 * data.draw(st.integers(0, 40)))
    names = {1: ("a", None), 2: ("b", {"k": 1}), 3: ("c", None)}  # 4: not in the table
    state = {
        "extras": {s: {"attrs": {"x": 1}} for s in data.draw(st.sets(st.integers(1, n + 1)))},
        "opened": {s: [protocol.RECORD_SPAN, None, s, None, 1, 0, 101, False]
                   for s in data.draw(st.sets(st.integers(1, n + 1)))},
        "stacks": {101: [None, 5, 6]}, "ctxs": {}, "cache": {102 + 1: (0, 1 << 62, 99)},
    }

    def run(scan):
        s = copy.deepcopy(state)
        out, done = [], []
        left = scan.spans(words, fresh, names, s["extras"], s["opened"], s["stacks"], s["ctxs"],
                          s["cache"], jobs.lookup, protocol.SpanRecord, spanring._UNNAMED,
                          protocol.RECORD_SPAN, protocol.RECORD_MARK, 4242, out, done,
                          3 << spanring.ID_SHIFT, half, n, room)
        return out, done, s, left

    c_out, c_done, c_state, c_left = run(c_scan)
    py_out, py_done, py_state, py_left = run(PythonScan)
    assert c_out == py_out
    assert all(type(r) is protocol.SpanRecord for r in c_out)
    assert (c_done, c_state, c_left) == (py_done, py_state, py_left)
    # The room taken is what the stacks grew by, a new thread's stack at its price. Three
    # threads, 5 deep at most, never take more than 3 x (price + 5): with less room, a pass's
    # own stack of a thread (no room for it) grows too, taken from the room.
    before = {t: len(v) for t, v in state["stacks"].items()}
    grown = sum(len(v) - before.get(t, 1 - spanring.STACK_NEW_LEVELS)
                for t, v in py_state["stacks"].items())
    if room >= 3 * (spanring.STACK_NEW_LEVELS + 5):
        assert py_left[0] == room - grown
    else:
        assert py_left[0] <= room - grown
    assert py_left[1] >= 0


def test_a_lookup_that_raises_raises_through_the_c_pass(c_scan):
    """An error in the jobs table is not swallowed: it reaches the reader as in Python."""
    def lookup(pid, tid, t):
        raise RuntimeError("jobs table broken")

    words = [1, 1 << 0, 1 << 32 | 101, 1000, 1010, 0]
    for scan in (c_scan, PythonScan):
        with pytest.raises(RuntimeError, match="jobs table broken"):
            scan.spans(words, [0], {1: ("a", None)}, {}, {}, {}, {}, {}, lookup,
                       protocol.SpanRecord, spanring._UNNAMED, protocol.RECORD_SPAN,
                       protocol.RECORD_MARK, 1, [], [], 1 << 40, 4, 1, spanring.STACK_ROOM)
