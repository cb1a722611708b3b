"""What a run leaves on the host at the fallback level, removed after each run: the entries its uid owns in
/dev/shm (and, where Landlock is missing and the run could write there, in /tmp and /var/tmp) and the
System V segments, queues and semaphore sets it made. At the namespaces level all of these are the run's
own and go with it (or the template empties them)."""

from __future__ import annotations

import os

from .kernel import libc

SYSV_IPC = {"shm": "shmctl", "msg": "msgctl", "sem": "semctl"}  # /proc/sysvipc/<kind> -> the call that removes one
IPC_RMID = 0
UID_COLUMNS = {"shm": (7, 9), "msg": (7, 9), "sem": (4, 6)}  # owner and creator uid in /proc/sysvipc/<kind>'s rows


SHARED_FOLDERS = ("/dev/shm", "/tmp", "/var/tmp")


def clear_owned(uid: int) -> int:
    """Remove what `uid` owns in the shared folders and System V IPC; how many were removed. Never follows a
    link (a folder of the uid's is removed whole by remove_tree, which does not either)."""
    from .scratch import remove_tree

    removed = 0
    entries = []
    for folder in SHARED_FOLDERS:
        try:
            entries += list(os.scandir(folder))
        except OSError:
            pass
    for entry in entries:
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid:
                continue
            if entry.is_dir(follow_symlinks=False):
                remove_tree(entry.path)
            else:
                os.unlink(entry.path)
            removed += 1
        except OSError:
            pass
    lib = None
    for kind, call in SYSV_IPC.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            owner, creator = UID_COLUMNS[kind]
            # The owner may hand a segment to another uid (IPC_SET): the creator stays.
            if len(fields) > creator and fields[1].isdigit() and str(uid) in (fields[owner], fields[creator]):
                lib = lib or libc()
                args = (int(fields[1]), 0, IPC_RMID) if kind == "sem" else (int(fields[1]), IPC_RMID, None)
                removed += getattr(lib, call)(*args) == 0
    return removed
