# The first cell of notebook 1: leaves a file in /dev/shm (what the run's folder holds) and a System V segment
# (ctypes), and says so.

import ctypes, os
with open("/dev/shm/left-@MARKER@", "w") as fh:
    fh.write(",".join(sorted(os.listdir("."))))
if ctypes.CDLL(None).shmget(0x5151, 4096, 0o1666) >= 0:
    raise RuntimeError("shm_left: written")
