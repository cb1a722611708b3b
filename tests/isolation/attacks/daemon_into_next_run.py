# The first cell of notebook 1: a daemon in a session of its own (named by ctypes' prctl) that keeps a heartbeat
# in /dev/shm for 30 s; the next run (heartbeat_cell.py, the first cell of notebook 2) reads it.

import ctypes, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, b"@MARKER@", 0, 0, 0)
        end = time.time() + 30
        while time.time() < end:
            with open("/dev/shm/hb-@MARKER@", "w") as fh:
                fh.write(repr(time.time()))
            time.sleep(0.05)
    os._exit(0)
time.sleep(0.3)
