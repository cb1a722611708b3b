# A notebook cell, run after shm_left.py's run in the same sandbox: says what of it it finds.
import os
_files = [n for n in os.listdir("/dev/shm") if "@MARKER@" in n]
_segments = open("/proc/sysvipc/shm").read().splitlines()[1:]
raise RuntimeError(f"shared memory seen: files={_files} segments={len(_segments)}")
