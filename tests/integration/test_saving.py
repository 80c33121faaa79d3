"""Saving a Timeline does not depend on which modules were imported before."""

from __future__ import annotations

import subprocess

from helpers import python_script


def test_save_needs_no_import_of_the_views(tmp_path):
    """Timeline.save('x.json') works with only workerscope.timeline imported."""
    code = f"""
        from workerscope.timeline import Timeline
        print(Timeline().save({str(tmp_path / 'x.json')!r}))
        print(Timeline().save({str(tmp_path / 'x.html')!r}))
    """
    r = subprocess.run(python_script(code), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "x.json").stat().st_size > 0 and (tmp_path / "x.html").stat().st_size > 0
