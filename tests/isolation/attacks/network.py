# Sends to UDP, TCP and UNIX-socket listeners on the host.

import errno, socket
report = []
def attempt(label, fn):
    try:
        fn()
        report.append(f"{label}:ok")
    except OSError as exc:
        report.append(f"{label}:{errno.errorcode.get(exc.errno, exc.errno)}")
def udp():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _ in range(5):
            s.sendto(b"@MARKER@", ("127.0.0.1", int("@UDPPORT@")))
def unix():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("@SOCK@")
        s.sendall(b"@MARKER@")
def rootsock():  # a root daemon's socket: mode 0600 in a 0700 folder, for uid 0 alone
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("@ROOTSOCK@")
        s.sendall(b"@MARKER@")
def tcp():
    with socket.create_connection(("127.0.0.1", int("@TCPPORT@")), timeout=2) as s:
        s.sendall(b"@MARKER@")
attempt("udp", udp)
attempt("unix", unix)
attempt("rootsock", rootsock)
attempt("tcp", tcp)
raise RuntimeError("net " + " ".join(report))
