# Ignores the polite signals where it may (the Linux levels refuse any handler in attention's run) and spins for ever.

import signal
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
    try:
        signal.signal(sig, signal.SIG_IGN)
    except OSError:
        pass
while True:
    pass
