"""The attack batch as a whole (attack_batch.py: the reference, every attack of BATCH_ATTACKS, the reference
again, in one instructor-CLI run; the notebook cells of CELL_ATTACKS in a second): the batch finishes in time,
every attack of attention.py scores 0 for what it did not compute, the reference's results after the attacks are
those before them, the isolation level is recorded, and nothing of any attack is left on the host.

What each attack managed, and what stopped it, is checked in the test_attacks_*.py file of what it goes
for (processes, files, host, harness).
"""

from __future__ import annotations

import re

import pytest

from attack_batch import BACKWARD_ONLY, BATCH_ATTACKS, BATCH_TIMEOUT_S, CELL_ATTACKS, WITH_REFERENCE
from attack_tools import POINTS, batch_level, only_at, outputs

pytestmark = pytest.mark.attacks


def test_batch_finishes_and_reference_results_are_unaltered(attack_batch):
    for proc in (attack_batch["proc"], attack_batch["cell_proc"] or attack_batch["proc"]):
        assert proc.returncode == 0, proc.stderr[-3000:]
    # Sequential upper bound: every run within its limit plus start-up.
    assert attack_batch["wall"] < BATCH_TIMEOUT_S + 15 * len(graded(attack_batch))
    before, after = attack_batch["results"]["reference_before"], attack_batch["results"]["reference_after"]
    assert before["score"] == after["score"] == POINTS
    strip = lambda r: [{k: v for k, v in t.items()} for t in r["tests"]]  # noqa: E731
    assert strip(before) == strip(after)
    assert all(t["status"] == "passed" for t in before["tests"])


# An attack appended to the reference computes its results: it goes for something else (test_attacks_hidden.py);
# the autograd attacks keep their honest forward's points.
@pytest.mark.parametrize("attack", sorted(set(BATCH_ATTACKS) - set(BACKWARD_ONLY) - set(WITH_REFERENCE)))
def test_attack_scores_zero(attack_batch, attack):
    only_at(attack_batch, "namespaces", "fallback", "portable", attack=attack)
    result = attack_batch["results"][attack]
    assert result is not None, f"{attack} has no results.json"
    assert result["score"] == 0.0, outputs(result)
    assert all(t["score"] == 0.0 and t["status"] == "failed" for t in result["tests"])
    assert sum(t["max_score"] for t in result["tests"]) == POINTS


def test_isolation_level_is_recorded(attack_batch):
    level = batch_level(attack_batch)
    result = attack_batch["results"]["reference_before"]
    assert result["extra_data"]["isolation"] == level
    assert f"Sandbox: {level}\n" in (attack_batch["out"] / "reference_before" / "feedback.txt").read_text()
    report = (attack_batch["out"] / "report.html").read_text()
    graded_here = len(graded(attack_batch))
    assert re.search(rf'id="sandbox">sandbox: {level} \({graded_here} submissions\)', report), report[:3000]


def graded(batch: dict) -> list[str]:
    """The submissions of the batch's attention run (the cell attacks are graded by a run of their own)."""
    return [name for name in batch["results"] if name not in CELL_ATTACKS]


def test_attacks_leave_nothing_behind(attack_batch):
    left = attack_batch["left"]
    assert left["tmp"] == [] and left["scratch"] == [] and left["uid_processes"] == [], left
    assert left["cgroups"] == [], left
    if batch_level(attack_batch) in ("namespaces", "fallback"):  # removed after each run at the fallback
        assert left["dev_shm"] == [] and left["sysv_shm"] is False, left
