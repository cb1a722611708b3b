"""Where a submission's time and due date come from: the platform's submission_metadata.json, kept beside its results.

Gradescope writes submission_metadata.json beside the upload (/autograder/submission_metadata.json
next to /autograder/submission/), never inside it; a class exported in that layout
(<student>/submission/ and <student>/submission_metadata.json) is read the same way. A file of that
name inside what the student uploaded is theirs: it is never read, and the run says so. What the
platform recorded (the time, the assignment's due date and each user's own, which is how Gradescope
records an extension, the users) is kept in grades/<name>/submission_metadata.json in Gradescope's
own shape, so the gradebook reads the kept copy exactly as it would read the platform's.
"""

from __future__ import annotations

import json
from pathlib import Path

from gradelib.safeio import SafeReadError, clean_text

from ..isolation import safe_reading
from .atomic import write_text_atomic
from .gradebook import METADATA, metadata_times
from .records import UPLOAD_FOLDER

MAX_METADATA_BYTES = 1024 * 1024
KEPT_BY = "autograder"  # marks a copy this grader kept from the platform's file (an older grader's copies are not used)
IGNORED = ("a submission_metadata.json inside the upload was ignored: a submission's time comes only from the "
           "platform's copy beside the upload or from --submitted-at")


def platform_metadata(submission: Path) -> Path | None:
    """The platform's submission_metadata.json for `submission`, beside Gradescope's upload folder; None where there
    is none."""
    beside = submission.parent / METADATA
    if submission.name == UPLOAD_FOLDER and submission.is_dir() and beside.is_file():
        return beside
    return None


def copies_inside(submission: Path) -> bool:
    """Whether a folder upload holds a submission_metadata.json at its top level or one folder down (a student's,
    never read)."""
    if not submission.is_dir() or submission.is_symlink():
        return False
    if (submission / METADATA).exists():
        return True
    try:
        folders = [p for p in list(submission.iterdir())[:200] if p.is_dir() and not p.is_symlink()]
    except OSError:
        return False
    return any((p / METADATA).exists() for p in folders)


def kept_copy(data, source: Path | None, notes: list[str]) -> dict:
    """What is kept of the platform's metadata `data` (None: there was none), in Gradescope's shape, with the run's
    notes."""
    submitted, _, users = metadata_times(data)
    assignment = data.get("assignment") if isinstance(data, dict) and isinstance(data.get("assignment"), dict) else {}
    _, assignment_due, _ = metadata_times({"assignment": assignment})

    def user(u: dict) -> dict:
        kept = {k: clean_text(str(u[k]))[:200] for k in ("name", "email", "sid") if k in u}
        _, own_due, _ = metadata_times({"users": [u]})
        return kept | ({"assignment": {"due_date": own_due.isoformat()}} if own_due else {})

    return {
        "kept_by": KEPT_BY,
        "read_from": str(source) if source else None,
        "created_at": submitted.isoformat() if submitted else None,
        "assignment": {"due_date": assignment_due.isoformat() if assignment_due else None},
        "users": [user(u) for u in users][:10],
        "notes": notes,
    }


def keep_metadata(submission: Path, folder: Path) -> list[str]:
    """Keep the platform's metadata of `submission` beside its results (or remove a stale copy); returns the notes."""
    notes = [IGNORED] if copies_inside(submission) else []
    source = platform_metadata(submission)
    data = None
    if source is not None:
        try:
            data = safe_reading.read_json(source, MAX_METADATA_BYTES)
        except SafeReadError as exc:
            notes.append(f"the platform's submission_metadata.json could not be read ({clean_text(exc)[:200]})")
    if data is None and not notes:
        (folder / METADATA).unlink(missing_ok=True)
        return []
    write_text_atomic(
        folder / METADATA, json.dumps(kept_copy(data, source if data is not None else None, notes), indent=1)
    )
    return notes


def read_kept(folder: Path) -> tuple[dict | None, list[str]]:
    """The kept copy of a submission's platform metadata (None when there is none to use) and the notes kept with it."""
    try:
        data = safe_reading.read_json(folder / METADATA, MAX_METADATA_BYTES)
    except SafeReadError:
        return None, []
    if not isinstance(data, dict) or data.get("kept_by") != KEPT_BY:
        return None, ["a submission_metadata.json kept by an older grader was not used (it may have come from inside "
                      "the upload); grade the submission again to read the platform's"]
    notes = (
        [clean_text(n)[:300] for n in data.get("notes", []) if isinstance(n, str)][:5]
        if isinstance(data.get("notes"), list)
        else []
    )
    return (data if data.get("read_from") else None), notes
