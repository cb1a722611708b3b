# Memory in nobody's resident set: @MB@ MB written to a memfd file where the system allows one, and as
# much to files in /dev/shm that no process maps, in a folder then closed to everyone (mode 000); a POSIX
# message queue (ctypes); then the run waits (and says if /dev/shm was full). The first cell of notebook 1: a run
# that is not stopped, with room enough, scores full marks.

import ctypes, os, time
chunk = b"x" * (1 << 20)
try:
    memfd = os.memfd_create("@MARKER@")
    for _ in range(int("@MB@")):
        os.write(memfd, chunk)
except OSError:
    pass  # refused (seccomp): nothing to hold there
folder = "/dev/shm/@MARKER@-d"
os.mkdir(folder)
full = None
try:
    for i in range(int("@MB@") // 64):
        with open(f"{folder}/f{i}", "wb") as fh:
            for _ in range(64):
                fh.write(chunk)
except OSError as exc:
    full = exc  # what was written stays
os.chmod(folder, 0)
try:
    librt = ctypes.CDLL("librt.so.1", use_errno=True)
    librt.mq_open(b"/@MARKER@-q", os.O_CREAT | os.O_RDWR, 0o600, None)
except OSError:
    pass
time.sleep(float("@HOLD@"))
if full is not None:
    raise full
