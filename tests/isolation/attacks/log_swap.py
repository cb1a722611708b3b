# The grader once read back the child's output from scratch/log.txt and followed whatever the child
# had put there. This swaps log.txt for a FIFO or a symbolic link (SWAP: "fifo" or the link's target),
# prints, and fails.

import os
print("attack-printed-this", flush=True)
SWAP = "@SWAP@"
for name in ("log.txt", "tmp/log.txt"):
    try:
        os.unlink(name)
    except OSError:
        pass
    try:
        if SWAP == "fifo":
            os.mkfifo(name)
        else:
            os.symlink(SWAP, name)
    except OSError:
        pass
os._exit(3)
