# The first cell of notebook 1: fills its scratch and TMPDIR with 48 MB each, starts a second process outside its
# session, ignores the polite signals and hangs without spinning (the spinning loop is the batch's infinite_loop attack).

import ctypes, os, signal, time
ctypes.CDLL(None).prctl(15, b"@MARKER@", 0, 0, 0)
if os.fork() == 0:
    os.setsid()  # a second process, outside the child's session
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    try:
        signal.signal(sig, signal.SIG_IGN)
    except OSError:  # refused where a level refuses handlers: it hangs all the same
        pass
block = b"x" * (1 << 20)
for folder in (".", os.environ.get("TMPDIR", "tmp")):
    try:
        with open(os.path.join(folder, "fill-@MARKER@.bin"), "wb") as fh:
            for _ in range(48):
                fh.write(block)
    except OSError:
        pass
while True:  # hangs without spinning: the spinning loop is the batch's infinite_loop attack
    time.sleep(3600)
