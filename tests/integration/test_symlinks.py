"""Files are written as a careful tool writes them in a shared folder: never through another
user's symlink."""

from __future__ import annotations

import os

import pytest
from factories import job, timeline, worker

from workerscope import Subscriber
from workerscope.errors import WorkerscopeError

OTHER_UID = 54_321  # the other local user: the owner of the planted links


@pytest.fixture
def shared(tmp_path):
    """A world-writable sticky folder (as /tmp is), and a private file of the victim's."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give a planted symlink to another user (lchown)")
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    secret = tmp_path / "secret"
    secret.write_text("the victim's own data\n")
    secret.chmod(0o600)
    return folder, secret


def _plant(link, target) -> None:
    os.symlink(target, link)
    os.lchown(link, OTHER_UID, OTHER_UID)


def test_a_save_never_writes_through_a_planted_temporary_name(clean_env, shared):
    """Another user's symlink at the name of the save's temporary file (PATH.tmp<pid>) is not
    followed: the victim's file is untouched and the report is written (it was overwritten
    with the report where fs.protected_symlinks is 0, and the save failed where it is 1)."""
    folder, secret = shared
    out = folder / "report.json"
    _plant(f"{out}.tmp{os.getpid()}", secret)
    t = timeline(workers=[worker()], jobs=[job(end_ns=10**9)])
    t.save(out)
    assert secret.read_text() == "the victim's own data\n"
    assert out.read_bytes().startswith(b"{") and not out.is_symlink()


def test_a_save_over_another_user_s_symlink_replaces_the_link(clean_env, shared):
    """A save whose path is another user's symlink replaces the link, never its target."""
    folder, secret = shared
    out = folder / "report.json"
    _plant(out, secret)
    timeline(workers=[worker()]).save(out)
    assert secret.read_text() == "the victim's own data\n" and not out.is_symlink()


def test_a_record_is_not_opened_through_another_user_s_symlink(clean_env, shared):
    """Subscriber(record=PATH) where PATH is another user's symlink: refused, with a message
    that says why, and the victim's file is untouched."""
    folder, secret = shared
    record = folder / "run.wsc"
    _plant(record, secret)
    with pytest.raises(WorkerscopeError, match="symlink"):
        Subscriber(record=record).start()
    assert secret.read_text() == "the victim's own data\n"


def test_a_record_through_one_s_own_symlink_is_written(clean_env, tmp_path):
    """A symlink the user made themselves is theirs to follow: the record lands at its target."""
    target = tmp_path / "real.wsc"
    link = tmp_path / "link.wsc"
    os.symlink(target, link)
    with Subscriber(record=link):
        pass
    assert target.stat().st_size > 0 and link.is_symlink()


def test_one_s_own_link_to_another_user_s_link_stops_there(clean_env, shared, tmp_path):
    """A save through the user's own link that points at another user's link replaces that
    link, never its target (the chain was resolved whole)."""
    folder, secret = shared
    theirs = folder / "theirs.json"
    _plant(theirs, secret)
    mine = tmp_path / "mine.json"
    os.symlink(theirs, mine)
    timeline(workers=[worker()]).save(mine)
    assert secret.read_text() == "the victim's own data\n"
    assert not theirs.is_symlink() and mine.is_symlink()
