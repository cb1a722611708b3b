"""The course grader's isolation: run a submission's code in a separate, confined process (never shipped).

The grader never imports student code. It writes inputs into a scratch folder,
starts `python -I boot.py harness.py` there, and reads back plain arrays once
the process and everything it started are gone. The strongest level the
machine allows runs (levels.py; `Limits.min_isolation` says the weakest a
caller accepts): "namespaces" (bubblewrap as root), "fallback" (a root container
without namespaces, or a Linux user with Landlock: Landlock, seccomp, a
sandbox uid) or "portable" (students' own machines: a plain child with limits,
no isolation; the course grader uses it only when asked, and off Linux it is the student kit's runner,
gradelib/runner/). `installed()` puts these levels behind the kit's run interface (install.py).

At every level the child's stdout/stderr and its audit events come back over
pipes the grader opened before it started (never a path the child can
replace), read with a byte cap. Within `session(...)` the runs of one
submission are forked from one template process (Linux levels).

The modules, one job each: levels (which level, why, in words), namespaces and
fallback (the two Linux levels; the portable one is the kit's runner), launch (a child's command, user and
cgroups on Linux), runner (one run in a fresh interpreter), template (the fork
server's grader side), boot (the child's entry point), kernel (the Linux
interfaces both sides use), forkserver (the template's loop), guards (the child's audit hooks and
refusals), install (these levels behind the kit's run interface),
pipes (a run's pipes read to their caps, the audit events trusted no further), memory, cgroups,
slots (sandbox uids), processes (what a run left, and aborting), leftovers (what a run left in the host's
shared folders), safe_reading (the reader of files a child controls), interpreter (what a child starts from, the
course's Limits), tmpfs (the submission's capped folder), scratch (removing it however deep).
"""

from gradelib.runner.limits import ChildRun

from .install import FAULTS, ISOLATING, installed
from .interpreter import Limits
from .levels import LEVELS, isolation_level, isolation_reason, isolation_report
from .processes import abort_active
from .runner import run
from .scratch import remove_tree
from .template import PRELOAD, PRELOAD_NOTEBOOKS, session
from .tmpfs import cap_folder, uncap_folder

__all__ = [
    "FAULTS",
    "ISOLATING",
    "LEVELS",
    "PRELOAD",
    "PRELOAD_NOTEBOOKS",
    "ChildRun",
    "Limits",
    "abort_active",
    "cap_folder",
    "isolation_level",
    "installed",
    "isolation_reason",
    "isolation_report",
    "remove_tree",
    "run",
    "session",
    "uncap_folder",
]
