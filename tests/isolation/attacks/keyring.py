# The first cell of notebook 1 (ctypes works there: attention's guards refuse it). The kernel's keyrings are per uid
# and outside every namespace: a key added here would be there for the next run under the same sandbox uid (and,
# with its permissions opened, for any uid). It then tries every door to a user namespace, and io_uring. The kernel
# refuses each call before it reads an argument.

import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]
payload = b"@MARKER@"
key = libc.syscall(nr[0], b"user", b"@MARKER@", payload, len(payload), -4)
add_errno = ctypes.get_errno()
found = libc.syscall(nr[1], 10, -4, b"user", b"@MARKER@", 0)  # KEYCTL_SEARCH the user keyring
search_errno = ctypes.get_errno()
# No program starts: Python's ways are refused by the boot's audit hook, execve itself by the filter.
import subprocess


def program(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True).stdout.split()
    except PermissionError:
        return "refused"


status = program(["/bin/sh", "-c", "grep Seccomp: /proc/self/status"])
child = os.fork()
if child == 0:
    libc.execl(b"/bin/sh", b"sh", None)
    os._exit(ctypes.get_errno())
execv = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
# A user namespace (every capability inside it) by each door: unshare, clone with the flag, clone3, setns.
calls = {"x86_64": (56, 435, 308), "aarch64": (220, 435, 268)}[os.uname().machine]
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
doors = []
for name, call in (("unshare", lambda: libc.unshare(CLONE_NEWUSER)),
                   ("clone", lambda: libc.syscall(calls[0], CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)),
                   ("clone3", lambda: libc.syscall(calls[1], None, 0)),
                   ("setns", lambda: libc.syscall(calls[2], 0, CLONE_NEWUSER))):
    got = call()
    if got == 0:  # a child of clone() that got through
        os._exit(0)
    doors.append(f"{name}={got}/{ctypes.get_errno()}")
uring = libc.syscall(425, 4, None)  # io_uring_setup(entries, params): refused before params is read
doors.append(f"io_uring={uring}/{ctypes.get_errno()}")
shell = program(["/bin/sh", "-c", "unshare -U true; echo $?"])
raise RuntimeError(f"keyring add_key={key} errno={add_errno} search={found} errno={search_errno} exec={status} "
                   f"execv={execv} namespaces {' '.join(doors)} shell={shell}")
