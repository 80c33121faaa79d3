"""The samples' .csv opens in a spreadsheet as data: a text cell that a spreadsheet would run
as a formula is written with a leading quote; numbers, negative ones too, stay numbers."""

from __future__ import annotations

import csv
import io

from factories import sample, timeline, worker

from workerscope.export.csv import to_csv

FORMULAS = ["=HYPERLINK(\"http://x\",\"y\")", "+1+1", "-1+cmd|' /C calc'!A0", "@SUM(A1)",
            "\tx"]


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_text_cells_that_start_a_formula_are_quoted():
    """Worker, host, scope and metric names starting with = + - @ tab or CR get a leading quote."""
    workers = [worker(f, host=f, pid=i + 1) for i, f in enumerate(FORMULAS)]
    samples = [sample(worker=f, scope=f, t_ns=i, values={f: 1.0})
               for i, f in enumerate(FORMULAS)]
    rows = _rows(to_csv(timeline(workers=workers, samples=samples)))
    head, body = rows[0], rows[1:]
    assert sorted(head[6:]) == sorted("'" + f for f in FORMULAS)
    for row in body:
        for cell in (row[0], row[1], row[4]):
            assert cell.startswith("'") and cell[1:] in FORMULAS, row


def test_a_cell_that_starts_with_a_carriage_return_is_quoted():
    """A text cell starting with CR gets the leading quote too (Python's csv writes CR as is)."""
    t = timeline(workers=[worker("\r=1+1", pid=1)], samples=[sample(worker="\r=1+1")])
    assert "\n'\r=1+1," in to_csv(t)


def test_numbers_stay_numbers_and_plain_text_is_untouched():
    """A negative value, a time before the origin and a plain worker name are written as is."""
    t = timeline(workers=[worker("h:1:2")],
                 samples=[sample(worker="h:1:2", t_ns=-5, pid=-3, values={"delta": -1.5}),
                          sample(worker="h:1:2", t_ns=10, values={"delta": -2})])
    rows = _rows(to_csv(t))
    assert rows[1][0] == "h:1:2" and rows[1][2] == "-5" and rows[1][5] == "-3"
    assert rows[1][-1] == "-1.5" and rows[2][-1] == "-2"
    assert rows[2][3].startswith("0.0000")
