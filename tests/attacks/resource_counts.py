# Forks, starts threads and creates files until something stops it, and says how far it got.

import errno, os, threading, time
start = time.monotonic()
forks, fork_stop = 0, "time"
for _ in range(300):
    if time.monotonic() - start > 2:  # report well inside the batch's time limit on a loaded machine
        break
    try:  # a small program of its own, started without copying this process (a fork of a process that has
        # imported torch takes 60 ms on a busy machine), so the processes hold little memory between them
        os.posix_spawn("/bin/sleep", ["sleep", "60"], {})
    except OSError as exc:
        fork_stop = errno.errorcode.get(exc.errno, str(exc.errno))
        break
    forks += 1
threads, stop = 0, threading.Event()
for _ in range(200):
    if time.monotonic() - start > 2.5:
        break
    try:
        threading.Thread(target=stop.wait, daemon=True).start()
    except RuntimeError:
        break
    threads += 1
files, stop = 0, "time"
os.makedirs("many", exist_ok=True)
for i in range(100000):
    if time.monotonic() - start > 3.5:  # (the run's scratch holds fewer files than this makes in 3.5 s)
        break
    try:
        open(f"many/{i}", "w").close()
    except OSError as exc:
        stop = errno.errorcode.get(exc.errno, str(exc.errno))
        break
    files += 1
import shutil
shutil.rmtree("many", ignore_errors=True)  # room again for the harness to write this report
raise RuntimeError(f"counts forks={forks} threads={threads} files={files} stop={stop} fork_stop={fork_stop}")
