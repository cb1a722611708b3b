# Prepended to the reference attention.py: leaves a file in /dev/shm (the names of the hidden inputs)
# and a System V segment.

import ctypes, os
with open("/dev/shm/left-@MARKER@", "w") as fh:
    fh.write(",".join(sorted(os.listdir("inputs"))))
ctypes.CDLL(None).shmget(0x5151, 4096, 0o1666)
