# Forks, starts threads and creates files until something stops it, and says how far it got.

import errno, os, threading, time
start = time.monotonic()
# Threads first, then processes: no run may start another program, so each process is a fork of this one,
# torch and all, which the memory limit (summing whole resident sizes where Pss cannot be read) would stop
# long before 64 of them; after the threads, the cap leaves room for few.
threads, stop = 0, threading.Event()
for _ in range(200):
    if time.monotonic() - start > 2:  # report well inside the batch's time limit on a loaded machine
        break
    try:
        threading.Thread(target=stop.wait, daemon=True).start()
    except RuntimeError:
        break
    threads += 1
forks, fork_stop = 0, "time"
for _ in range(300):
    if time.monotonic() - start > 4:
        break
    try:
        pid = os.fork()
    except OSError as exc:
        fork_stop = errno.errorcode.get(exc.errno, str(exc.errno))
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    forks += 1
files, stop = 0, "time"
os.makedirs("many", exist_ok=True)
for i in range(100000):
    if time.monotonic() - start > 5.5:  # (the run's scratch holds fewer files than this makes in 1.5 s)
        break
    try:
        open(f"many/{i}", "w").close()
    except OSError as exc:  # no errno: the grader's guards refused it
        stop = errno.errorcode.get(exc.errno, str(exc.errno)) if exc.errno is not None else "refused"
        break
    files += 1
import shutil
shutil.rmtree("many", ignore_errors=True)  # room again for the harness to write this report
raise RuntimeError(f"counts forks={forks} threads={threads} files={files} stop={stop} fork_stop={fork_stop}")
