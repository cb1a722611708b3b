"""What a run leaves on the host at the fallback level, removed after each run: the entries its uid owns in
/dev/shm and /dev/mqueue, whatever modes it gave them (and, where Landlock is missing and the run could
write there, in /tmp and /var/tmp) and the System V segments, queues and semaphore sets it made. At the namespaces
level all of these are the run's
own and go with it (or the template empties them).

The removal runs as the run's own uid, in a short process of its own: removing another user's System V
object takes a capability Docker's default set lacks (CAP_SYS_ADMIN), its owner needs none, and whatever
the run left there (links, deep folders) is then handled with no more rights than the run had."""

from __future__ import annotations

import subprocess
import sys

SHARED_FOLDERS = ("/dev/shm", "/tmp", "/var/tmp", "/dev/mqueue")  # a queue's file there is the queue

# Run as `python -I -S -c CLEANUP FOLDER...` with the run's uid: standard library only, no recursion.
CLEANUP = r'''
import ctypes, os, stat, sys
uid, removed = os.getuid(), 0
def remove(top):
    stack = [(top, False)]
    while stack:
        path, emptied = stack.pop()
        try:
            if emptied:
                os.rmdir(path)
                continue
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(path)
                continue
            if st.st_uid == uid and st.st_mode & 0o700 != 0o700:  # a folder it closed (0500, 000): opened again
                os.chmod(path, stat.S_IMODE(st.st_mode) | 0o700)
            stack.append((path, True))
            stack.extend((e.path, False) for e in os.scandir(path))
        except OSError:
            pass
for folder in sys.argv[1:]:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        continue
    for entry in entries:
        try:
            if entry.stat(follow_symlinks=False).st_uid == uid:
                remove(entry.path)
                removed += 1
        except OSError:
            pass
libc = ctypes.CDLL(None, use_errno=True)
for kind, call, columns in (("shm", "shmctl", (7, 9)), ("msg", "msgctl", (7, 9)), ("sem", "semctl", (4, 6))):
    try:
        rows = open(f"/proc/sysvipc/{kind}").read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        f = row.split()
        # The owner may hand an object to another uid (IPC_SET): the creator stays.
        if len(f) > columns[1] and f[1].isdigit() and str(uid) in (f[columns[0]], f[columns[1]]):
            args = (int(f[1]), 0, 0) if kind == "sem" else (int(f[1]), 0, None)  # IPC_RMID
            removed += getattr(libc, call)(*args) == 0
print(removed)
'''


def clear_owned(uid: int) -> int:
    """Remove what `uid` owns in the shared folders and System V IPC; how many were removed (0 when the
    cleanup could not run)."""
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", CLEANUP, *SHARED_FOLDERS], user=uid, group=uid,
                              extra_groups=[], env={"PATH": "/usr/bin:/bin"}, cwd="/", capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return 0
    return int(done.stdout.strip()) if done.stdout.strip().isdigit() else 0
