# Finds the audit pipe among its descriptors and writes to it: PAYLOAD once (a little junk, or the start
# of a record, with no end of line: glued to the autograd record that follows, either would hide it), or
# without end when FOREVER is "yes". Followed by autograd_hidden.py.

import os, stat


def audit_pipe():  # the only pipe past stdout and stderr (its flags cannot be read: the grader's filter refuses)
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                return fd
        except OSError:
            continue
    raise RuntimeError("no audit pipe found")


fd = audit_pipe()
if "@FOREVER@" == "yes":
    while True:
        os.write(fd, b"y" * 65536)
os.write(fd, b"@PAYLOAD@")
