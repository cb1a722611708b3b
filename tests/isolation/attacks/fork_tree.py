# The first cell of notebook 1: a tree of processes, each in a session of its own and deaf to SIGTERM, every one
# forking two more down to depth 5 (63 in all), then all burning CPU: all must die with the run, however wide the tree.

import ctypes, os, signal, time
is_root = True
for depth in range(5):
    kids = 0
    for _ in range(2):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            ctypes.CDLL(None).prctl(15, b"@MARKER@", 0, 0, 0)
            is_root = False
            kids = -1
            break
        kids += 1
    if kids != -1:
        break  # a parent stops forking; its children go one level deeper
if is_root:
    raise RuntimeError("fork tree started")
time.sleep(2)  # past the end of the run
while True:
    pass
