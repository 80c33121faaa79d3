"""The /proc parsers of the tick, fed bytes: no process is read."""

from __future__ import annotations

from workerscope.procfs import Io, parse_io, parse_stat, parse_tick

# Fields 3.. of a real stat line (a sleeping process), after "PID (COMM) ".
_REST = (b"S 1 100 100 0 -1 4194560 120 0 0 0 7 3 11 5 20 0 4 0 123456 10485760 2560 "
         b"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")


def test_stat_fields_by_name():
    """parse_stat names the tick's fields: state, CPU times, threads, start, vsize, rss pages."""
    st = parse_stat(b"42 (python3) " + _REST)
    assert st is not None
    assert (st.comm, st.state, st.utime, st.stime, st.cutime, st.cstime) == (
        b"python3", b"S", 7, 3, 11, 5)
    assert (st.num_threads, st.starttime, st.vsize, st.rss) == (4, 123456, 10485760, 2560)


def test_stat_comm_with_spaces_and_parentheses():
    """A comm holding spaces and parentheses, `(a) (b)`, is kept whole; the fields follow it."""
    st = parse_stat(b"42 ((a) (b) c)) " + _REST)
    assert st is not None
    assert st.comm == b"(a) (b) c)"
    assert (st.state, st.utime, st.rss) == (b"S", 7, 2560)


def test_stat_long_comm():
    """A long comm (kernel threads, or a full 15-byte name with spaces) does not shift fields."""
    st = parse_stat(b"7 (kworker/u16:3 x y z) " + _REST)
    assert st is not None and st.comm == b"kworker/u16:3 x y z" and st.num_threads == 4


def test_stat_without_the_later_fields():
    """A stat that ends right after rss (an old kernel's fewer trailing fields) still parses."""
    fields = _REST.split(b" ")[:22]
    st = parse_stat(b"42 (p) " + b" ".join(fields) + b"\n")
    assert st is not None and st.rss == 2560 and st.vsize == 10485760


def test_stat_cut_short_or_empty_is_none():
    """An empty read (the process is gone), a text cut short or garbage is None, never an error."""
    assert parse_stat(b"") is None
    assert parse_stat(b"42 (p) S 1 100") is None
    assert parse_stat(b"no parentheses here") is None
    assert parse_stat(b"42 (p) " + _REST.replace(b" 7 ", b" x ")) is None


def test_io_by_name():
    """parse_io gives the character and storage counters of a full /proc/PID/io text."""
    data = (b"rchar: 100\nwchar: 200\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\n"
            b"write_bytes: 8192\ncancelled_write_bytes: 0\n")
    assert parse_io(data) == Io(100, 200, 4096, 8192)


def test_io_missing_storage_fields():
    """A kernel without task IO accounting for storage: read_bytes and write_bytes are None."""
    data = b"rchar: 100\nwchar: 200\nsyscr: 3\nsyscw: 4\n"
    assert parse_io(data) == Io(100, 200, None, None)


def test_io_in_another_order():
    """Fields are found by name wherever they are, and one missing is None."""
    data = b"wchar: 2\nread_bytes: 3\nrchar: 1\nsyscr: 9\nsyscw: 9\nfoo: 5\n"
    assert parse_io(data) == Io(1, 2, 3, None)


def test_io_empty():
    """An empty io text (the process died between its reads) gives every counter None."""
    assert parse_io(b"") == Io(None, None, None, None)


_IO = (b"rchar: 100\nwchar: 200\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\n"
       b"write_bytes: 8192\ncancelled_write_bytes: 0\n")


def test_tick_agrees_with_parse_stat_and_parse_io():
    """parse_tick gives parse_stat's tick fields and parse_io's counters for the same texts."""
    for stat in (b"42 (python3) " + _REST, b"42 ((a) (b) c)) " + _REST,
                 b"42 (p) " + b" ".join(_REST.split(b" ")[:22]) + b"\n"):
        st, tick = parse_stat(stat), parse_tick(stat, _IO)
        assert st is not None and tick is not None
        assert tick == (st.comm, st.state, st.utime, st.stime, st.cutime, st.cstime,
                        st.num_threads, st.rss, st.vsize != 0, (100, 200, 4096, 8192),
                        st.minflt)


def test_tick_io_by_name_where_not_in_the_kernel_order():
    """An io text without storage fields, in another order, or empty gives parse_io's Io."""
    stat = b"42 (p) " + _REST
    for io in (b"rchar: 100\nwchar: 200\nsyscr: 3\nsyscw: 4\n",
               b"wchar: 2\nread_bytes: 3\nrchar: 1\nsyscr: 9\nsyscw: 9\nfoo: 5\n", b""):
        tick = parse_tick(stat, io)
        assert tick is not None and tick[9] == parse_io(io) and isinstance(tick[9], Io)


def test_tick_unmapped_and_bad_stat():
    """vsize 0 reads unmapped; a stat cut short or garbage is None whatever the io."""
    tick = parse_tick(b"42 (p) " + _REST.replace(b" 10485760 ", b" 0 "), _IO)
    assert tick is not None and tick[8] is False
    assert parse_tick(b"", _IO) is None
    assert parse_tick(b"42 (p) S 1 100", _IO) is None
    assert parse_tick(b"42 (p) " + _REST.replace(b" 7 ", b" x "), _IO) is None
