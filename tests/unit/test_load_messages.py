"""Giving load() a file of another format says what opens that format."""

from __future__ import annotations

import pytest

from workerscope.errors import FileFormatError
from workerscope.timeline import load


@pytest.mark.parametrize(("ext", "said"), [
    (".pftrace", "a .pftrace opens in Perfetto's UI"),
    (".html", "an .html report opens in any browser"),
    (".json", "a .json trace opens in Perfetto's UI"),
    (".md", "give the .wsc that was saved beside it"),
])
def test_load_of_another_format_names_what_opens_it(tmp_path, ext, said):
    """A .pftrace, .html or .md given to load() is a FileFormatError that fits its format
    (every one of them was told "a .json trace is for Perfetto")."""
    path = tmp_path / f"x{ext}"
    path.write_bytes(b"x")
    with pytest.raises(FileFormatError) as err:
        load(path)
    assert said in str(err.value)
    if ext != ".json":
        assert ".json" not in str(err.value)
