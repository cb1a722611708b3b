# Ignores the polite signals and spins for ever.

import signal
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
    signal.signal(sig, signal.SIG_IGN)
while True:
    pass
