# The first cell of notebook 1: a chain of processes, each in a session of its own (named by ctypes' prctl),
# burning CPU: all must die with the run.

import ctypes, os, time
started = 0
for depth in range(80):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid:
        if depth:
            time.sleep(2)  # past the end of the run: then every link but the first burns CPU
            while True:
                pass
        break
    os.setsid()
    ctypes.CDLL(None).prctl(15, b"@MARKER@", 0, 0, 0)
    started += 1
if started == 0:
    raise RuntimeError("setsid chain started")
time.sleep(2)
while True:
    pass
