# The first cell of notebook 1: leaves 8 MB in /dev/shm and a System V segment of 8 MB behind it.

import ctypes, errno, os
report = []
try:
    with open("/dev/shm/@MARKER@-shm", "wb") as fh:
        fh.write(b"x" * (8 << 20))
    report.append("devshm:written")
except OSError as exc:
    report.append(f"devshm:{errno.errorcode.get(exc.errno)}")
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(int("@SHMKEY@"), 8 << 20, 0o1000 | 0o600)  # IPC_CREAT
if shmid >= 0:
    addr = libc.shmat(shmid, None, 0)
    if addr not in (None, 2**64 - 1):
        ctypes.memset(addr, 1, 8 << 20)
        report.append("sysv:attached")
else:
    report.append(f"sysv:{errno.errorcode.get(ctypes.get_errno())}")
raise RuntimeError("shm " + " ".join(report))
