"""The live state's GPU figures (the live view and /metrics read them) from sample frames."""

from __future__ import annotations

from workerscope import protocol
from workerscope.driver.live import LiveState, WorkerLive

GIB = 2**30


def _gpu_row(gpus: list[tuple[object, dict[str, float]]]) -> WorkerLive:
    live = LiveState()
    live.note(protocol.Frame(protocol.SAMPLE, "w", 0, {"t": 0, "gpus": gpus}), now=0.0)
    return live.workers["w"]


def test_a_gpu_in_mig_mode_counts_its_instances_memory_once():
    """A GPU in MIG mode reports the memory of its whole board and each instance its own part:
    the worker's figure is its instances' memory, not the board's added to theirs (it read
    18 GiB: a board's 12 GiB, its instance's 4 GiB and another GPU's 2)."""
    row = _gpu_row([(0, {"mem_used_bytes": 12 * GIB}),
                    ("0/mig1", {"mem_used_bytes": 4 * GIB, "util_percent": 30.0}),
                    (1, {"mem_used_bytes": 2 * GIB, "util_percent": 50.0})])
    assert row.gpu_mem == 6 * GIB
    assert row.gpu_util == 40.0


def test_gpus_without_mig_sum_their_memory():
    row = _gpu_row([(0, {"mem_used_bytes": 1 * GIB, "util_percent": 10.0}),
                    (1, {"mem_used_bytes": 3 * GIB, "util_percent": 30.0})])
    assert row.gpu_mem == 4 * GIB and row.gpu_util == 20.0
