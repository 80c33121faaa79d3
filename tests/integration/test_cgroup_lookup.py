"""The host sampler and the death watch name one memory cgroup, found where it is mounted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare to mount the cgroup hierarchy elsewhere")
def test_one_cgroup_lookup_in_a_mount_namespace_that_moves_the_hierarchy(tmp_path):
    """With the memory hierarchy mounted at another path (and hidden at /sys/fs/cgroup), the
    host's limit file and the death watch's cgroup are the same directory."""
    code = textwrap.dedent("""
        import json, os
        from workerscope.sidecar.death import DeathWatch
        watch = DeathWatch(os.getpid())
        found = watch._cgroup_dir()
        from workerscope.sidecar.host import HostSampler
        files = HostSampler(os.getpid()).cgroup_files
        print(json.dumps({"death": found and found[1], "files": files}))
    """)
    where = tmp_path / "cg"
    script = f"""
        set -e
        mount --make-rprivate /
        mkdir -p {where}
        if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
            mount -t cgroup2 none {where}
        else
            mount -t cgroup -o memory none {where}
        fi
        umount -l /sys/fs/cgroup
        exec {sys.executable} -c '{code}'
    """
    r = subprocess.run(["unshare", "-m", "sh", "-c", textwrap.dedent(script)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0 and "mount" in r.stderr:
        pytest.skip(f"cannot mount a cgroup hierarchy here: {r.stderr.strip()[:200]}")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["death"] is not None and out["death"].startswith(str(where))
    limit, _ = out["files"]
    assert limit is not None and os.path.dirname(limit) == out["death"]
