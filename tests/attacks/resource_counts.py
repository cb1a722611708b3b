# Forks, starts threads and creates files until something stops it, and says how far it got.

import errno, os, threading, time
start = time.monotonic()
forks = 0
for _ in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    forks += 1
threads, stop = 0, threading.Event()
for _ in range(200):
    try:
        threading.Thread(target=stop.wait, daemon=True).start()
    except RuntimeError:
        break
    threads += 1
files, stop = 0, "time"
os.makedirs("many", exist_ok=True)
for i in range(100000):
    if time.monotonic() - start > 6:  # stay inside the 15 s run on a loaded machine
        break
    try:
        open(f"many/{i}", "w").close()
    except OSError as exc:
        stop = errno.errorcode.get(exc.errno, str(exc.errno))
        break
    files += 1
import shutil
shutil.rmtree("many", ignore_errors=True)  # room again for the harness to write this report
raise RuntimeError(f"counts forks={forks} threads={threads} files={files} stop={stop}")
