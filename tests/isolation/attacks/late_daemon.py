# The first cell of notebook 1: leaves a double-forked, setsid daemon that waits for the grader to finish and then
# writes into the output folder and over another submission's results (its own are under cells/).

import ctypes, json, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, b"@MARKER@", 0, 0, 0)  # PR_SET_NAME: findable in /proc
        time.sleep(float("@SLEEP@"))
        for path in ("@OUT@/daemon-was-here.txt", "@OUT@/reference_before/results.json",
                     "@OUT@/cells/late_daemon/results.json", "/tmp/daemon-@MARKER@.txt"):
            try:
                with open(path, "w") as fh:
                    json.dump({"score": 999.0, "tests": []}, fh)
            except OSError:
                pass
    os._exit(0)
raise RuntimeError("daemon started")
