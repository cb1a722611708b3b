"""Run a submission's code in a separate, confined process.

The grader never imports student code. It writes inputs into a scratch folder,
starts `python -I boot.py harness.py` there, and reads back plain arrays once
the process and everything it started are gone. The strongest level the
machine allows runs (`isolation_level()`; `Limits.isolation="strict"` refuses
the weaker ones): "namespaces" (namespaces.py, bubblewrap as root) or the
fallback, "landlock" / "none" (fallback.py: rlimits, Landlock where the kernel
has it, seccomp, an unprivileged user).

At every level the child's stdout/stderr and its audit events come back over
pipes the grader opened before it started (never a path the child can
replace), read with a byte cap (streams.py). Within `session(...)` the runs of
one submission are forked from one template process (template.py).

The modules, one job each: levels (which level, why, in words), namespaces,
fallback, launch (a child's command, user and cgroups at the level in force),
runner (one run in a fresh interpreter), template (the fork server's grader
side), boot (the child's entry point) and kernel (the Linux interfaces both
sides use), limits, streams, cgroups, slots (sandbox uids), processes (what a
run left, and aborting), interpreter (what a child starts from), scratch (the
submission's capped folder).
"""

from .levels import LEVELS, isolation_level, isolation_reason, isolation_report
from .limits import ChildRun, Limits
from .processes import abort_active
from .runner import run
from .scratch import cap_folder, remove_tree, uncap_folder
from .template import PRELOAD, PRELOAD_NOTEBOOKS, session

__all__ = [
    "LEVELS", "PRELOAD", "PRELOAD_NOTEBOOKS", "ChildRun", "Limits", "abort_active", "cap_folder", "isolation_level",
    "isolation_reason", "isolation_report", "remove_tree", "run", "session", "uncap_folder",
]
