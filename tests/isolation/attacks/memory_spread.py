# Five processes, each well under its own address-space cap, that hold 1.5 GB between them.

import os, select, time
held = 0
readers = []
for _ in range(5):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        block = b"\x01" * (300 << 20)  # written, so resident
        os.write(w, b"ok")
        time.sleep(60)
        os._exit(0)
    os.close(w)
    readers.append(r)
deadline = time.monotonic() + 20
for r in readers:
    ready, _, _ = select.select([r], [], [], max(0.0, deadline - time.monotonic()))
    held += bool(ready) and os.read(r, 2) == b"ok"
raise RuntimeError(f"memory spread: {held} of 5 processes held 300 MB")
