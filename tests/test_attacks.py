"""Hostile submissions are contained: each scores 0 for what it did not compute,
the grader finishes in time, and nobody else's results change.

Most attacks are graded in one instructor-CLI batch that starts and ends with
the reference solution, so the reference's results before and after the
attacks can be compared. Each attack reports what it managed (or why it
could not) in the exception it raises, so a test also sees that the attack
really ran and what stopped it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from gradelib import rubric, sandbox
from gradelib.sandbox import cgroups, isolation_level, isolation_report
from gradelib.sandbox.kernel import landlock_abi
from gradelib.sandbox.slots import SLOTS, UID_BASE

from support import FIXTURES, REPO, SOLUTIONS, grade_files

PYTHON = sys.executable
CLI = REPO / "autograder" / "autograder.py"
POINTS = rubric.load()["attention"].points
BATCH_TIMEOUT_S = 10  # per problem run; the infinite loop spends all of it (the reference needs 1.4 s on a quiet core)
DAEMON_SLEEP_S = 3

needs_landlock = pytest.mark.skipif(
    landlock_abi() == 0, reason="file-system containment relies on Landlock, which this kernel lacks: "
    + "; ".join(isolation_report())
)
needs_namespaces = pytest.mark.skipif(
    isolation_level() != "namespaces", reason="this attack is stopped only by the namespace level (bubblewrap as "
    "root); here: " + "; ".join(isolation_report())
)
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="dropping privileges needs root; here: " + "; ".join(isolation_report())
)

# Each attack is an attention.py. @OUT@, @REPO@ and @MARKER@ are filled in per run.
ATTACKS: dict[str, str] = {}

ATTACKS["forged_results"] = r'''
import errno, json, os
FORGED = {"score": 999.0, "tests": [{"name": "attention", "score": 999.0, "max_score": 30.0}]}
report = []
for label, path in [
    ("cwd", "results.json"),
    ("parent", "../results.json"),
    ("grandparent", "../../results.json"),
    ("own_out", "@OUT@/forged_results/results.json"),
    ("other_out", "@OUT@/reference_before/results.json"),
    ("out_root", "@OUT@/results.json"),
    ("tmp", "/tmp/forged-@MARKER@.json"),
]:
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as fh:
            json.dump(FORGED, fh)
        report.append(f"{label}:written")
    except OSError as exc:
        report.append(f"{label}:{type(exc).__name__}/{errno.errorcode.get(exc.errno, exc.errno)}")
raise RuntimeError("forgery " + " ".join(report))
'''

ATTACKS["exit_at_import"] = r'''
import os
os._exit(0)
'''

ATTACKS["infinite_loop"] = r'''
import signal
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
    signal.signal(sig, signal.SIG_IGN)
while True:
    pass
'''

ATTACKS["huge_allocation"] = r'''
import numpy as np
hoard = [np.ones(2**30)]  # 8 GiB of float64, past the address-space cap
'''

# Patch every comparison a grader might use, bypass the child's own type check
# and claim a plain tensor -- but the values are still only what it computed.
ATTACKS["patch_comparisons"] = r'''
import sys
import numpy as np
import torch

always = lambda *a, **k: True
silent = lambda *a, **k: None
np.allclose = np.array_equal = np.array_equiv = always
np.isclose = lambda a, b, *x, **k: np.ones(np.broadcast(a, b).shape, dtype=bool)
np.testing.assert_allclose = np.testing.assert_array_equal = np.testing.assert_array_almost_equal = silent
np.testing.assert_equal = np.testing.assert_almost_equal = silent
torch.allclose = torch.equal = always
torch.testing.assert_close = silent
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
main = sys.modules["__main__"]
main.to_array = lambda obj: np.asarray(obj.detach().numpy() if hasattr(obj, "detach") else obj)
sys.modules["child_common"].type_name = lambda obj: "torch.Tensor"


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = weights_keys, weights_queries, weights_values

    def forward(self, X):
        B, T, D = X.shape
        Dk, Dv = self.W_k.shape[1], self.W_v.shape[1]
        self.Q = self.K = torch.zeros(B, T, Dk, dtype=X.dtype)
        self.V = torch.zeros(B, T, Dv, dtype=X.dtype)
        self.A_w = self.A_sig = torch.zeros(B, T, T, dtype=X.dtype)
        self.X = X
        return torch.zeros(B, T, Dv, dtype=X.dtype)

    def backward(self, dLdXnew):
        self.dLdQ, self.dLdK, self.dLdV = torch.zeros_like(self.Q), torch.zeros_like(self.K), torch.zeros_like(self.V)
        self.dLdWq, self.dLdWk = torch.zeros_like(self.W_q), torch.zeros_like(self.W_k)
        self.dLdWv = torch.zeros_like(self.W_v)
        return torch.zeros_like(self.X)
'''

ATTACKS["lying_tensor"] = r'''
import torch


class LyingTensor(torch.Tensor):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def allclose(self, *args, **kwargs):
        return True


def lie(*shape, like):
    return torch.zeros(*shape, dtype=like.dtype).as_subclass(LyingTensor)


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = weights_keys, weights_queries, weights_values

    def forward(self, X):
        B, T, D = X.shape
        Dk, Dv = self.W_k.shape[1], self.W_v.shape[1]
        self.Q, self.K, self.V = lie(B, T, Dk, like=X), lie(B, T, Dk, like=X), lie(B, T, Dv, like=X)
        self.A_w, self.A_sig = lie(B, T, T, like=X), lie(B, T, T, like=X)
        self.X = X
        return lie(B, T, Dv, like=X)

    def backward(self, dLdXnew):
        B, T, D = self.X.shape
        self.dLdQ, self.dLdK, self.dLdV = (lie(*t.shape, like=self.X) for t in (self.Q, self.K, self.V))
        self.dLdWq, self.dLdWk, self.dLdWv = (lie(*w.shape, like=self.X) for w in (self.W_q, self.W_k, self.W_v))
        return lie(B, T, D, like=self.X)
'''

# Hunts for expected values on disk and in the grader's memory; if it finds a
# case file whose inputs match, it hands back the stored answers.
ATTACKS["search_for_answers"] = r'''
import glob, os, time
import numpy as np
import torch

report = {}
found = []


def note(label, fn):
    try:
        value = fn()
        report[label] = "ok"
        return value
    except PermissionError:
        report[label] = "EACCES"
    except FileNotFoundError:
        report[label] = "ENOENT"
    except BaseException as exc:
        report[label] = type(exc).__name__


def load_answers(path):
    with np.load(path, allow_pickle=False) as data:
        if "expected_X_new" in data.files:
            found.append({k: data[k] for k in data.files})
            return path


ppid = os.getppid()
cwd = note("ppid_cwd", lambda: os.readlink(f"/proc/{ppid}/cwd"))
note("ppid_cmdline", lambda: open(f"/proc/{ppid}/cmdline", "rb").read().replace(b"\0", b" ").decode())
note("ppid_environ", lambda: open(f"/proc/{ppid}/environ", "rb").read())
note("ppid_maps", lambda: open(f"/proc/{ppid}/maps").read())
note("ppid_mem", lambda: open(f"/proc/{ppid}/mem", "rb").read(1))
fds = note("ppid_fd_list", lambda: os.listdir(f"/proc/{ppid}/fd")) or ["0", "1", "2"]
note("ppid_fd_open", lambda: [open(f"/proc/{ppid}/fd/{fd}", "rb").read(1) for fd in fds])
note("ppid_root", lambda: os.listdir(f"/proc/{ppid}/root/"))
note("init_root", lambda: os.listdir("/proc/1/root/"))
roots = ["@REPO@", *([cwd] if cwd else [])]
for i, root in enumerate(roots):
    note(f"listdir_hidden{i}", lambda: os.listdir(f"{root}/fixtures/attention/hidden"))
    for name in ("dk_ne_dv", "single_step", "wide_float32"):
        note(f"open_{name}{i}", lambda: load_answers(f"{root}/fixtures/attention/hidden/{name}.npz"))
    note(f"proc_root_{i}", lambda: load_answers(f"/proc/{ppid}/root{root}/fixtures/attention/hidden/dk_ne_dv.npz"))
note("listdir_root", lambda: os.listdir("/"))
note("listdir_tmp", lambda: os.listdir("/tmp"))
note("listdir_up", lambda: os.listdir(".."))
note("glob_up", lambda: glob.glob("../**/*.npz", recursive=True))
seen, deadline = 0, time.monotonic() + 5
for top, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(top, d) not in ("/proc", "/sys", "/usr", "/dev")]
    for f in files:
        if f.endswith(".npz"):
            note(f"walk:{f}", lambda: load_answers(os.path.join(top, f)))
    seen += 1
    if seen > 20000 or time.monotonic() > deadline:
        break
report["walked_dirs"] = seen
REPORT = " ".join(f"{k}={v}" for k, v in sorted(report.items()))


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k = weights_keys

    def forward(self, X):
        for answers in found:
            if answers["X"].shape == tuple(X.shape) and np.array_equal(answers["X"], X.numpy()):
                self.answers = answers
                for q in ("Q", "K", "V", "A_w", "A_sig"):
                    setattr(self, q, torch.from_numpy(answers["expected_" + q]))
                return torch.from_numpy(answers["expected_X_new"])
        raise RuntimeError(f"found {len(found)} answer files; " + REPORT)

    def backward(self, dLdXnew):
        for q in ("dLdQ", "dLdK", "dLdV", "dLdWq", "dLdWk", "dLdWv"):
            setattr(self, q, torch.from_numpy(self.answers["expected_" + q]))
        return torch.from_numpy(self.answers["expected_dLdX"])
'''

# Leaves a double-forked, setsid daemon that waits for the grader to finish
# and then writes into the output folder and over another submission's results.
ATTACKS["late_daemon"] = r'''
import ctypes, json, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, b"@MARKER@", 0, 0, 0)  # PR_SET_NAME: findable in /proc
        time.sleep(@SLEEP@)
        for path in ("@OUT@/daemon-was-here.txt", "@OUT@/reference_before/results.json",
                     "@OUT@/late_daemon/results.json", "/tmp/daemon-@MARKER@.txt"):
            try:
                with open(path, "w") as fh:
                    json.dump({"score": 999.0, "tests": []}, fh)
            except OSError:
                pass
    os._exit(0)
raise RuntimeError("daemon started")
'''


# A chain of processes, each in a session of its own, burning CPU: all must die with the run.
# The kernel's keyrings are per uid and outside every namespace: a key added here would be there
# for the next run under the same sandbox uid (and, with its permissions opened, for any uid).
ATTACKS["keyring"] = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]
payload = b"@MARKER@"
key = libc.syscall(nr[0], b"user", b"@MARKER@", payload, ctypes.c_size_t(len(payload)), ctypes.c_int(-4))
add_errno = ctypes.get_errno()
found = libc.syscall(nr[1], 10, ctypes.c_long(-4), b"user", b"@MARKER@", 0)  # KEYCTL_SEARCH the user keyring
search_errno = ctypes.get_errno()
# A fresh program started by exec keeps the filter (it is not Python's to remove).
import subprocess
status = subprocess.run(["/bin/sh", "-c", "grep Seccomp: /proc/self/status"], capture_output=True, text=True).stdout.split()
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
params = ctypes.create_string_buffer(120)  # struct io_uring_params
uring = libc.syscall(425, 4, params)
doors.append(f"io_uring={uring}/{ctypes.get_errno()}")
shell = subprocess.run(["/bin/sh", "-c", "unshare -U true; echo $?"], capture_output=True, text=True).stdout.split()
raise RuntimeError(f"keyring add_key={key} errno={add_errno} search={found} errno={search_errno} exec={status} "
                   f"namespaces {' '.join(doors)} shell={shell}")
'''

ATTACKS["setsid_chain"] = r'''
import ctypes, os, time
started = 0
for depth in range(80):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid:
        if depth:
            time.sleep(2)  # past the end of the run: then every link but the first burns CPU
            while True:
                pass
        break
    os.setsid()
    ctypes.CDLL(None).prctl(15, b"@MARKER@", 0, 0, 0)
    started += 1
if started == 0:
    raise RuntimeError("setsid chain started")
time.sleep(2)
while True:
    pass
'''

ATTACKS["resource_counts"] = r'''
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
'''

ATTACKS["shared_memory"] = r'''
import ctypes, errno, os
report = []
try:
    with open("/dev/shm/@MARKER@-shm", "wb") as fh:
        fh.write(b"x" * (8 << 20))
    report.append("devshm:written")
except OSError as exc:
    report.append(f"devshm:{errno.errorcode.get(exc.errno)}")
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget(@SHMKEY@, 8 << 20, 0o1000 | 0o600)  # IPC_CREAT
if shmid >= 0:
    addr = libc.shmat(shmid, None, 0)
    if addr not in (None, 2**64 - 1):
        ctypes.memset(addr, 1, 8 << 20)
        report.append("sysv:attached")
else:
    report.append(f"sysv:{errno.errorcode.get(ctypes.get_errno())}")
raise RuntimeError("shm " + " ".join(report))
'''

ATTACKS["network"] = r'''
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
            s.sendto(b"@MARKER@", ("127.0.0.1", @UDPPORT@))
def unix():
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect("@SOCK@")
        s.sendall(b"@MARKER@")
def tcp():
    with socket.create_connection(("127.0.0.1", @TCPPORT@), timeout=2) as s:
        s.sendall(b"@MARKER@")
attempt("udp", udp)
attempt("unix", unix)
attempt("tcp", tcp)
raise RuntimeError("net " + " ".join(report))
'''

ATTACKS["host_processes"] = r'''
import os
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            seen.append(open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
host = [c for c in seen if "pytest" in c or "autograder.batch" in c]
raise RuntimeError(f"proc visible={len(seen)} host_visible={len(host)} {host[:2]}")
'''

ATTACKS["root_only_files"] = r'''
import errno, os
report = [f"uid={os.getuid()}"]
for label, path in (("secret", "@SECRET@"), ("shadow", "/etc/shadow"), ("init_environ", "/proc/1/environ")):
    try:
        with open(path, "rb") as fh:
            data = fh.read(200)
        report.append(f"{label}:read:{data[:40]!r}")
    except OSError as exc:
        report.append(f"{label}:{errno.errorcode.get(exc.errno, exc.errno)}")
raise RuntimeError("files " + " ".join(report))
'''

# The grader once read back the child's output from scratch/log.txt and followed whatever
# the child had put there. Each of these swaps log.txt, prints, and fails.
LOG_SWAP = r'''
import os
print("attack-printed-this", flush=True)
for name in ("log.txt", "tmp/log.txt"):
    try:
        os.unlink(name)
    except OSError:
        pass
    try:
        @SWAP@
    except OSError:
        pass
os._exit(3)
'''
ATTACKS["log_symlink_feedback"] = LOG_SWAP.replace("@SWAP@", 'os.symlink("@OUT@/reference_before/feedback.txt", name)')
ATTACKS["log_symlink_secret"] = LOG_SWAP.replace("@SWAP@", 'os.symlink("@SECRET@", name)')
ATTACKS["log_fifo"] = LOG_SWAP.replace("@SWAP@", "os.mkfifo(name)")
ATTACKS["log_dev_zero"] = LOG_SWAP.replace("@SWAP@", 'os.symlink("/dev/zero", name)')


def fill(source: str, out: Path, marker: str, extra: dict[str, str] | None = None) -> str:
    source = (source.replace("@OUT@", str(out)).replace("@REPO@", str(REPO)).replace("@MARKER@", marker)
              .replace("@SLEEP@", str(DAEMON_SLEEP_S)))
    for key, value in (extra or {}).items():
        source = source.replace(key, value)
    return source


def processes_named(comm: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == comm:
                pids.append(int(entry))
        except OSError:
            pass
    return pids


def forged_files(folder: Path) -> list[Path]:
    """Files under `folder` holding the score the attacks forge."""
    return [p for p in folder.rglob("*") if p.is_file() and b"999.0" in p.read_bytes()]


def run_cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, str(CLI), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    """Grade reference, every attack, reference again -- one CLI run, two jobs."""
    root = tmp_path_factory.mktemp("attacks")
    out = root / "grades"
    marker = "zz" + uuid.uuid4().hex[:10]  # comm names hold 15 characters
    reference = SOLUTIONS.joinpath("attention.py").read_text()
    order = ["reference_before", *ATTACKS, "reference_after"]
    with host_listeners(marker) as host:
        extra = {"@UDPPORT@": str(host["udp_port"]), "@TCPPORT@": str(host["tcp_port"]), "@SOCK@": host["sock"],
                 "@SECRET@": host["secret"], "@SHMKEY@": str(host["shm_key"])}
        paths = []
        for name in order:
            folder = root / "submissions" / name
            folder.mkdir(parents=True)
            text = reference if name.startswith("reference") else fill(ATTACKS[name], out, marker, extra)
            (folder / "attention.py").write_text(text)
            paths.append(str(folder))
        scratch_before = set(Path("/tmp").glob("autograder-scratch-*"))
        start = time.monotonic()
        proc = run_cli(*paths, "--out", str(out), "--jobs", "2", "--timeout", str(BATCH_TIMEOUT_S), "--only", "attention")
        wall = time.monotonic() - start
        alive_after = processes_named(marker)
        time.sleep(DAEMON_SLEEP_S + 1)  # past the moment the daemon would write
        received = host["received"]()
        left = {
            "dev_shm": [p.name for p in Path("/dev/shm").iterdir() if marker in p.name],
            "sysv_shm": sysv_segment_present(host["shm_key"]),
            "tmp": [p.name for p in Path("/tmp").iterdir() if marker in p.name and p.name != Path(host["secret"]).name
                    and p.name != Path(host["sock"]).name],
            "scratch": leftover_scratch(scratch_before),
            "uid_processes": sandbox_uid_processes(),
            "cgroups": leftover_cgroups(),
        }
    results = {}
    for name in order:
        path = out / name / "results.json"
        results[name] = json.loads(path.read_text()) if path.exists() else None
    return {"proc": proc, "wall": wall, "out": out, "marker": marker, "results": results,
            "alive_after": alive_after, "alive_later": processes_named(marker), "received": received, "left": left}


@contextlib.contextmanager
def host_listeners(marker: str):
    """What the network and file attacks aim at on the host: UDP, TCP and UNIX listeners, a root-only file."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    sock_path = f"/tmp/{marker}.sock"  # short: a UNIX socket path holds 107 bytes
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(sock_path)
    os.chmod(sock_path, 0o777)  # the socket's own mode lets anyone connect; only the sandbox may stop it
    unix.listen(8)
    unix.setblocking(False)
    secret = Path(f"/tmp/{marker}-secret")
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"TOPSECRET-" + marker.encode())
    os.close(fd)

    def received() -> list[str]:
        got = []
        for label, s in (("udp", udp),):
            try:
                while True:
                    got.append(f"{label}:{s.recv(100)!r}")
            except BlockingIOError:
                pass
        for label, s in (("tcp", tcp), ("unix", unix)):
            try:
                while True:
                    conn, _ = s.accept()
                    got.append(f"{label}:connection")
                    conn.close()
            except BlockingIOError:
                pass
        return got

    try:
        yield {"udp_port": udp.getsockname()[1], "tcp_port": tcp.getsockname()[1], "sock": sock_path,
               "secret": str(secret), "shm_key": int(marker[2:9], 16), "received": received}
    finally:
        for s in (udp, tcp, unix):
            s.close()
        Path(sock_path).unlink(missing_ok=True)
        secret.unlink(missing_ok=True)
        # At the fallback level the shared-memory attack's leftovers are real: the test removes them.
        for p in Path("/dev/shm").iterdir():
            if marker in p.name:
                p.unlink(missing_ok=True)
        key = int(marker[2:9], 16)
        if sysv_segment_present(key):
            subprocess.run(["ipcrm", "-M", str(key)], capture_output=True, check=False)


def sysv_segment_present(key: int) -> bool:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return any(line.split() and int(line.split()[0]) == key for line in lines)


def sandbox_uid_processes() -> list[int]:
    """Processes of sandbox uids that no live grader holds: what a grading left behind.

    A grader holds its uid's slot lock for as long as it runs anything as that uid, so the
    processes of a uid whose lock we can take belong to no grading in progress (another
    test's, run alongside, keeps its lock). While we hold the lock no grader can take it.
    """
    import fcntl

    from gradelib.sandbox.slots import SLOT_DIR

    by_uid: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        try:
            uid = os.stat(f"/proc/{entry}").st_uid if entry.isdigit() else -1
        except OSError:
            continue
        if UID_BASE <= uid < UID_BASE + SLOTS:
            by_uid.setdefault(uid, []).append(int(entry))
    stray = []
    for uid, pids in sorted(by_uid.items()):
        try:
            fd = os.open(SLOT_DIR / f"slot-{uid - UID_BASE}.lock", os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            stray += pids  # no lock file: no grader ever held it
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # held: a grading in progress (another test's)
        try:
            stray += [p for p in pids if os.path.exists(f"/proc/{p}")]
        finally:
            os.close(fd)
    return stray


def _owner_dead(name: str, prefix: str) -> bool:
    """A name <prefix><pid>-... made by a process that is gone or a zombie (or a name without a pid).

    A zombie has ended: an orphaned grader re-parented to a long-lived subreaper (a test worker that
    graded in-process) may stay one until that process ends, and nothing of it may stay that long."""
    owner = name[len(prefix):].split("-")[0]
    if not owner.isdigit():
        return True
    try:
        stat = Path(f"/proc/{owner}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:][:1] in ("Z", "X")


def leftover_scratch(before: set[Path] = frozenset()) -> list[str]:
    """Batch scratch folders not in `before` whose batch has ended (a running batch's are its own)."""
    return sorted(str(p) for p in set(Path("/tmp").glob("autograder-scratch-*")) - set(before)
                  if _owner_dead(p.name, "autograder-scratch-"))


def leftover_cgroups() -> list[str]:
    """Run cgroups whose grader has ended."""
    return sorted(str(p) for p in Path("/sys/fs/cgroup").glob("**/gradelib-*") if _owner_dead(p.name, "gradelib-"))


def descendants(pid: int) -> list[int]:
    """Live processes below `pid` (whatever uid; orphans of a sandboxed run come to the grader, a subreaper)."""
    parent = {}
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split() if stat else []
        if fields and fields[0] != "Z":  # a zombie runs nothing
            parent[int(entry)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier]
        found += kids
        frontier = kids
    return found


def outputs(result: dict) -> str:
    return "\n".join(t["output"] for t in result["tests"]) + "\n" + result.get("output", "")


def test_batch_finishes_and_reference_results_are_unaltered(batch):
    assert batch["proc"].returncode == 0, batch["proc"].stderr[-3000:]
    # Sequential upper bound: every run within its limit plus start-up.
    assert batch["wall"] < BATCH_TIMEOUT_S + 15 * len(batch["results"])
    before, after = batch["results"]["reference_before"], batch["results"]["reference_after"]
    assert before["score"] == after["score"] == POINTS
    strip = lambda r: [{k: v for k, v in t.items()} for t in r["tests"]]  # noqa: E731
    assert strip(before) == strip(after)
    assert all(t["status"] == "passed" for t in before["tests"])


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_scores_zero(batch, attack):
    result = batch["results"][attack]
    assert result is not None, f"{attack} has no results.json"
    assert result["score"] == 0.0, outputs(result)
    assert all(t["score"] == 0.0 and t["status"] == "failed" for t in result["tests"])
    assert sum(t["max_score"] for t in result["tests"]) == POINTS


@needs_landlock
def test_forged_results_files_are_refused(batch):
    out, marker = batch["out"], batch["marker"]
    text = outputs(batch["results"]["forged_results"])
    # The attack ran: it could write its own scratch folder, and nothing else.
    assert "forgery" in text and "cwd:written" in text, text
    for label in ("parent", "grandparent", "own_out", "other_out", "out_root", "tmp"):
        # Landlock answers EACCES; inside the namespaces the root above /scratch is also read-only (EROFS).
        assert re.search(rf"{label}:\w+/(EACCES|EROFS)\b", text), (label, text)
    assert not (out / "results.json").exists()
    assert not Path(f"/tmp/forged-{marker}.json").exists()
    assert forged_files(out) == []


def test_exit_at_import_is_reported(batch):
    text = outputs(batch["results"]["exit_at_import"])
    assert "no result for this case: the submission's process exited with code 0" in text


def test_infinite_loop_is_stopped_at_the_timeout(batch):
    text = outputs(batch["results"]["infinite_loop"])
    assert f"was stopped after the {BATCH_TIMEOUT_S} s time limit" in text, text
    assert batch["results"]["infinite_loop"]["execution_time"] < BATCH_TIMEOUT_S + 15


def test_huge_allocation_hits_the_memory_cap(batch):
    text = outputs(batch["results"]["huge_allocation"])
    assert "import raised" in text and ("MemoryError" in text or "Unable to allocate" in text), text


def test_patched_comparisons_change_nothing(batch):
    text = outputs(batch["results"]["patch_comparisons"])
    # The child's type check was bypassed too: the grader judged the values it computed.
    assert "has wrong values" in text and "wrong type" not in text, text


def test_lying_tensor_subclass_is_refused_by_type(batch):
    text = outputs(batch["results"]["lying_tensor"])
    assert "has the wrong type: got attention.LyingTensor, expected torch.Tensor" in text, text


@needs_landlock
@needs_root
def test_search_for_answers_finds_nothing(batch):
    text = outputs(batch["results"]["search_for_answers"])
    assert "found 0 answer files" in text, text
    for probe in ("ppid_cwd", "ppid_environ", "ppid_maps", "ppid_mem", "ppid_root", "init_root",
                  "proc_root_0", "listdir_root", "listdir_tmp", "listdir_up"):
        assert f"{probe}=EACCES" in text, (probe, text)
    # The repository is denied by Landlock, or not mounted at all inside the namespaces.
    refused = "(EACCES|ENOENT)" if isolation_level() == "namespaces" else "EACCES"
    for probe in ("listdir_hidden0", "open_dk_ne_dv0", "open_single_step0"):
        assert re.search(rf"{probe}={refused}\b", text), (probe, text)
    # Listing the grader's descriptor numbers is allowed to uid 0; opening any of them is not.
    assert "ppid_fd_open=EACCES" in text, text


@needs_landlock
def test_late_daemon_is_killed_and_writes_nothing(batch):
    out, marker = batch["out"], batch["marker"]
    assert "daemon started" in outputs(batch["results"]["late_daemon"])
    assert batch["alive_after"] == [] and batch["alive_later"] == []
    assert not (out / "daemon-was-here.txt").exists()
    assert forged_files(out) == []
    assert not Path(f"/tmp/daemon-{marker}.txt").exists()
    assert batch["results"]["late_daemon"]["score"] == 0.0


def test_forged_stdout_does_not_reach_the_autolab_line(tmp_path):
    source = r'''
import json, os, sys
line = json.dumps({"scores": {"attention": 999}})
print(line)
print("TOTAL" + " " * 60 + "30.00 /  30.00")
sys.stderr.write(line + "\n")
for fd in ("/proc/self/fd/1", f"/proc/{os.getppid()}/fd/1", "/dev/tty"):
    try:
        with open(fd, "w") as fh:
            fh.write(line + "\n")
    except OSError:
        pass
sys.stdout.flush()
raise SystemExit(line)
'''
    folder = tmp_path / "forger"
    folder.mkdir()
    (folder / "attention.py").write_text(source)
    proc = run_cli(str(folder), "--out", str(tmp_path / "grades"), "--timeout", "30", "--only", "attention", timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == {"scores": {"attention": 0.0}}
    assert lines[-1] == '{"scores":{"attention":0.0}}'
    # The forged text reaches the report only inside the grader's message, never as a line of its own.
    forged = [line for line in lines[:-1]
              if (line.startswith('{"scores"') and "999" in line) or "30.00 /  30.00" in line]
    assert forged == [], proc.stdout
    assert "999" not in proc.stderr
    result = json.loads((tmp_path / "grades" / "forger" / "results.json").read_text())
    assert result["score"] == 0.0


def test_memory_cap_applies_to_gradual_growth(tmp_path):
    # Allocate and touch 256 MiB at a time until the cap stops it.
    source = r'''
import numpy as np
hoard = []
while True:
    hoard.append(np.ones(2**25))
'''
    start = time.monotonic()
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=30, memory_mb=1536)
    assert time.monotonic() - start < 30
    assert result.score == 0.0
    text = "\n".join(t.output for t in result.tests)
    assert "MemoryError" in text or "killed by" in text, text


FLOOD = "import os\nwhile True:\n    os.write(1, b'{\"scores\":{\"attention\":30}}\\n' * 1000)\n"


# Five processes, each well under its own address-space cap, that hold 1.5 GB between them.
MEMORY_SPREAD = r"""
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
"""


def _memory_cgroups() -> bool:
    if os.geteuid() != 0:
        return False
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    return "memory" in v2.read_text().split() if v2.exists() else Path("/sys/fs/cgroup/memory/cgroup.procs").exists()


@pytest.mark.skipif(not _memory_cgroups(), reason="the run's memory cgroup needs root and the memory controller")
def test_memory_spread_over_processes_is_capped_for_the_run_as_a_whole(tmp_path):
    """RLIMIT_AS caps each process alone; the run's memory cgroup caps them together (1200 MB here),
    so five processes of 300 MB each do not all live, and nothing of them is left."""
    before = set(descendants(os.getpid()))
    result = grade_files(tmp_path, {"attention.py": MEMORY_SPREAD}, only=["attention"], timeout_s=30, memory_mb=1200)
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    assert result.score == 0.0
    assert "5 of 5 processes held 300 MB" not in said, said
    assert ("of 5 processes held 300 MB" in said) or ("killed by SIGKILL" in said), said
    assert set(descendants(os.getpid())) - before == set()


@pytest.mark.parametrize("where", ["attention.py", "a notebook cell"])
def test_a_flood_of_output_is_stopped_at_its_cap_not_at_the_time_limit(tmp_path, where):
    """Printing without end is stopped once the output passes Limits.output_mb, in a plain run and in a
    run forked from the template (attention.py with a notebook), long before the 30 s limit; the
    forged score lines gain nothing and the honest problem beside it keeps its points."""
    reference = SOLUTIONS.joinpath("attention.py").read_text()
    if where == "attention.py":
        files, only = {"attention.py": FLOOD + reference}, ["attention"]
    else:
        files, only = {"attention.py": reference, "01_mlm_and_next_token.ipynb": _notebook_with_first_cell(FLOOD)}, ["attention", "losses"]
    start = time.monotonic()
    result = grade_files(tmp_path, files, only=only, timeout_s=30)
    wall = time.monotonic() - start
    assert wall < 15, wall
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    cap = sandbox.Limits().output_mb
    assert f"was stopped when its output passed {cap} MB" in said, said
    by_problem = {p: sum(t.score for t in result.tests if t.problem == p) for p in only}
    if where == "attention.py":
        assert by_problem == {"attention": 0.0}
    else:
        assert by_problem == {"attention": rubric.load()["attention"].points, "losses": 0.0}, by_problem


def test_fixtures_are_outside_every_sandbox_path():
    """Landlock grants the child the interpreter's folders; none may hold the fixtures."""
    from gradelib.sandbox.fallback import READ_ONLY_SYSTEM_PATHS
    from gradelib.sandbox.interpreter import python_mounts, python_paths

    hidden = (FIXTURES / "attention" / "hidden").resolve()
    for granted in (*READ_ONLY_SYSTEM_PATHS, *python_paths(), *python_mounts()[0]):
        assert not hidden.is_relative_to(Path(granted).resolve()), granted


def test_isolation_level_is_recorded(batch):
    level = isolation_level()
    result = batch["results"]["reference_before"]
    assert result["extra_data"]["isolation"] == level
    assert f"Sandbox: {level}\n" in (batch["out"] / "reference_before" / "feedback.txt").read_text()
    report = (batch["out"] / "report.html").read_text()
    assert re.search(rf'id="sandbox">sandbox: {level} \({len(batch["results"])} submissions\)', report), report[:3000]


def test_strict_isolation_refuses_to_grade_without_namespaces(tmp_path):
    folder = tmp_path / "honest"
    folder.mkdir()
    (folder / "attention.py").write_text(SOLUTIONS.joinpath("attention.py").read_text())
    env = {**os.environ, "GRADELIB_SANDBOX": "landlock"}  # as on a machine without bubblewrap
    proc = subprocess.run([PYTHON, str(CLI), str(folder), "--out", str(tmp_path / "grades"), "--isolation", "strict",
                           "--only", "attention"], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "--isolation strict: not grading, namespaces are unavailable" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "grades" / "honest").exists()


def attack_text(batch, attack: str) -> str:
    result = batch["results"][attack]
    assert result is not None, f"{attack} has no results.json"
    return outputs(result)


def test_no_run_can_add_or_read_a_kernel_key(batch):
    """add_key and keyctl fail with EPERM (the sandbox's seccomp filter), and no key with the marker exists."""
    text = attack_text(batch, "keyring")
    assert "keyring add_key=-1 errno=1 search=-1 errno=1 exec=['Seccomp:', '2']" in text, text


def test_no_run_can_make_a_user_namespace(batch):
    """unshare, clone with CLONE_NEWUSER and setns fail with EPERM; clone3 (whose flags a filter cannot
    read) with ENOSYS, so the C library falls back to clone() for threads; unshare(1) from a shell fails
    too. io_uring (kernel surface of the same kind) fails with EPERM."""
    text = attack_text(batch, "keyring")
    assert "namespaces unshare=-1/1 clone=-1/1 clone3=-1/38 setns=-1/1 io_uring=-1/1 shell=['1']" in text, text
    assert batch["marker"] not in Path("/proc/keys").read_text()


@needs_namespaces
def test_setsid_chain_dies_with_the_run(batch):
    assert "setsid chain started" in attack_text(batch, "setsid_chain")
    # Checked the moment the batch returned: no link of the chain is left burning CPU.
    assert batch["alive_after"] == [] and batch["alive_later"] == []
    assert batch["left"]["uid_processes"] == []


@needs_namespaces
def test_process_and_thread_counts_stop_at_the_cap(batch):
    from gradelib.sandbox import Limits

    text = attack_text(batch, "resource_counts")
    found = re.search(r"counts forks=(\d+) threads=(\d+) files=(\d+)", text)
    assert found, text
    forks, threads, files = map(int, found.groups())
    cap = Limits().processes
    assert forks < cap and forks + threads < cap, text  # RLIMIT_NPROC counts processes and threads together
    assert files > 0  # the attack ran; the files went with its scratch folder
    if os.geteuid() == 0:  # the submission's tmpfs holds at most SCRATCH_FILES inodes
        from gradelib.sandbox.scratch import SCRATCH_FILES

        assert files < SCRATCH_FILES and ("stop=ENOSPC" in text or "stop=time" in text), text
    assert batch["left"]["scratch"] == []


@needs_namespaces
def test_shared_memory_is_gone_after_the_run(batch):
    text = attack_text(batch, "shared_memory")
    assert "devshm:written" in text and "sysv:attached" in text, text  # private ones: allowed, and dropped
    assert batch["left"]["dev_shm"] == []
    assert batch["left"]["sysv_shm"] is False


@needs_namespaces
def test_network_reaches_nothing_on_the_host(batch):
    text = attack_text(batch, "network")
    assert re.search(r"unix:(ENOENT|EACCES)\b", text), text
    assert re.search(r"tcp:(ECONNREFUSED|ENETUNREACH|EACCES)\b", text), text
    assert "net udp:" in text, text  # sent or refused, it must not arrive
    assert batch["received"] == []


@needs_namespaces
def test_host_processes_are_invisible(batch):
    text = attack_text(batch, "host_processes")
    found = re.search(r"proc visible=(\d+) host_visible=(\d+)", text)
    assert found, text
    visible, host = map(int, found.groups())
    assert host == 0 and 0 < visible <= 4, text  # the namespace's init and the child itself


@needs_namespaces
def test_root_only_files_stay_unreadable(batch):
    text = attack_text(batch, "root_only_files")
    uid = int(re.search(r"uid=(\d+)", text).group(1))
    assert UID_BASE <= uid < UID_BASE + SLOTS, text  # a real unprivileged uid, not uid 0
    assert ":read:" not in text and "TOPSECRET" not in text, text
    assert re.search(r"secret:(ENOENT|EACCES)\b", text) and re.search(r"shadow:(ENOENT|EACCES)\b", text), text
    # /proc/1/environ is mounted and root's: only the uid keeps it closed.
    assert re.search(r"init_environ:EACCES\b", text), text


@pytest.mark.parametrize("attack", ["log_symlink_feedback", "log_symlink_secret", "log_fifo", "log_dev_zero"])
def test_replaced_log_file_is_never_read(batch, attack):
    text = attack_text(batch, attack)
    # What the child printed came back over the grader's pipe ...
    assert "attack-printed-this" in text and "exited with code 3" in text, text
    # ... and whatever the child left at log.txt was not read.
    assert "Submission: reference_before" not in text and "TOPSECRET" not in text, text
    assert "\x00" not in text and len(text) < 200_000


def test_attacks_leave_nothing_behind(batch):
    left = batch["left"]
    assert left["tmp"] == [] and left["scratch"] == [] and left["uid_processes"] == [], left
    assert left["cgroups"] == [], left
    if isolation_level() == "namespaces":
        assert left["dev_shm"] == [] and left["sysv_shm"] is False, left


AUTOGRAD_HIDDEN = r"""
import sys
import torch

ag = getattr(torch, "auto" + "grad")


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        self.W_k, self.W_q, self.W_v = weights_keys, weights_queries, weights_values

    def _forward(self, X, W_k, W_q, W_v):
        Q, K, V = X @ W_q, X @ W_k, X @ W_v
        A_w = Q @ K.transpose(-1, -2)
        T = X.shape[1]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        A_sig = torch.softmax((A_w / K.shape[-1] ** 0.5).masked_fill(mask, float("-inf")), dim=-1)
        return Q, K, V, A_w, A_sig, A_sig @ V

    def forward(self, X):
        self.X = X
        self.Q, self.K, self.V, self.A_w, self.A_sig, out = self._forward(X, self.W_k, self.W_q, self.W_v)
        return out

    def backward(self, dLdXnew):
        leaves = [t.detach().clone() for t in (self.X, self.W_k, self.W_q, self.W_v)]
        for t in leaves:
            getattr(t, "requires" + "_grad_")(True)
        Q, K, V, *_rest, out = self._forward(*leaves)
        inner = [Q, K, V]
        grads = getattr(ag, "gr" + "ad")([out], [*leaves, *inner], [dLdXnew])
        self.dLdX, self.dLdWk, self.dLdWq, self.dLdWv, self.dLdQ, self.dLdK, self.dLdV = (g.detach() for g in grads)
        # Hide it: clear the harness's record and the flags it writes.
        main = sys.modules["__main__"]
        main.autograd_calls.clear()
        main.autograd_calls = set()
        return self.dLdX
"""


def test_autograd_hidden_by_clearing_the_record_is_still_caught(tmp_path):
    result = grade_files(tmp_path, {"attention.py": AUTOGRAD_HIDDEN}, only=["attention"], timeout_s=60)
    by_name = {t.name: t for t in result.tests}
    forward = [t for name, t in by_name.items() if "forward" in name]
    backward = [t for name, t in by_name.items() if "backward" in name]
    assert forward and all(t.passed for t in forward), [t.output for t in forward]  # honest forward points stay
    assert backward and all(t.score == 0.0 for t in backward)
    text = "\n".join(t.output for t in backward)
    assert "Backward points withheld" in text and "torch.autograd.grad" in text, text
    # The source hides the names from the static check: the runtime record alone caught it.
    assert "uses automatic differentiation" not in text, text


# The forward both autograd attacks below share; each brings its own _backward(att, dLdXnew).
AUTOGRAD_FORWARD = r'''

def _attn(Q, K, V):
    T, dk = Q.shape[1], K.shape[-1]
    A_w = Q @ K.transpose(1, 2)
    fut = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return A_w, torch.softmax((A_w / math.sqrt(dk)).masked_fill(fut, float("-inf")), dim=-1)


class Attention:
    def __init__(self, wk, wq, wv):
        self.W_k, self.W_q, self.W_v = wk, wq, wv

    def forward(self, X):
        self.X = X
        self.Q, self.K, self.V = X @ self.W_q, X @ self.W_k, X @ self.W_v
        self.A_w, self.A_sig = _attn(self.Q, self.K, self.V)
        return self.A_sig @ self.V

    def backward(self, dLdXnew):
        return _backward(self, dLdXnew)
'''

# The C++ engine behind torch.autograd.grad, called directly, every name spelled so no source check sees it.
AUTOGRAD_BY_THE_ENGINE = r'''
import math
import torch

_AG = getattr(torch, "auto" + "grad")
_ENGINE = _AG.variable.Variable._execution_engine  # what the tripwired functions call internally
_RG = "_darg_seriuqer"[::-1]  # "requires_grad_"


def _leaf(t):
    return getattr(t.detach().clone(), _RG)(True)


def _vjp(out, inputs, g):  # tensors, grad_tensors, keep_graph, create_graph, inputs, allow_unreachable, accumulate_grad
    return _ENGINE.run_backward((out,), (g,), False, False, tuple(inputs), True, False)


def _backward(att, dLdXnew):
    Q, K, V = _leaf(att.Q), _leaf(att.K), _leaf(att.V)
    att.dLdQ, att.dLdK, att.dLdV = _vjp(_attn(Q, K, V)[1] @ V, (Q, K, V), dLdXnew)
    X, Wq, Wk, Wv = _leaf(att.X), _leaf(att.W_q), _leaf(att.W_k), _leaf(att.W_v)
    dX, att.dLdWq, att.dLdWk, att.dLdWv = _vjp(_attn(X @ Wq, X @ Wk, X @ Wv)[1] @ (X @ Wv), (X, Wq, Wk, Wv), dLdXnew)
    return dX
''' + AUTOGRAD_FORWARD

# `__name__ = "__main__"` first: a source check that skips `if __name__ == "__main__":` blocks (an honest
# self-test there never runs when graded) skipped this one, which the import runs.
AUTOGRAD_UNDER_A_FORGED_MAIN_GUARD = r'''
import math
import torch

__name__ = "__main__"
if __name__ == "__main__":
    from torch.autograd.variable import Variable

    def _grads(f, inputs, g):
        leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
        return Variable._execution_engine.run_backward((f(*leaves),), (g,), False, False, tuple(leaves), True, False)


def _backward(att, dLdXnew):
    att.dLdQ, att.dLdK, att.dLdV = _grads(lambda q, k, v: _attn(q, k, v)[1] @ v, (att.Q, att.K, att.V), dLdXnew)
    full = lambda x, wq, wk, wv: _attn(x @ wq, x @ wk, x @ wv)[1] @ (x @ wv)  # noqa: E731
    dX, att.dLdWq, att.dLdWk, att.dLdWv = _grads(full, (att.X, att.W_q, att.W_k, att.W_v), dLdXnew)
    return dX
''' + AUTOGRAD_FORWARD


# It takes the grader's saved-tensors hook off before recording its graph (names spelled at run time).
AUTOGRAD_WITHOUT_THE_HOOK = r'''
import math
import torch

getattr(torch._C._autograd, "_pop_saved_tensors_" + "default_hooks")()
_RG = "_darg_seriuqer"[::-1]


def _backward(att, dLdXnew):
    leaves = [getattr(t.detach().clone(), _RG)(True) for t in (att.X, att.W_q, att.W_k, att.W_v, att.Q, att.K, att.V)]
    X, Wq, Wk, Wv = leaves[:4]
    out = _attn(X @ Wq, X @ Wk, X @ Wv)[1] @ (X @ Wv)
    grads = getattr(torch, "auto" + "grad").grad(out, (X, Wq, Wk, Wv), dLdXnew)
    att.dLdQ, att.dLdK, att.dLdV = (torch.zeros_like(t) for t in (att.Q, att.K, att.V))
    dX, att.dLdWq, att.dLdWk, att.dLdWv = grads
    return dX
''' + AUTOGRAD_FORWARD


def test_taking_the_saved_tensors_hook_off_is_itself_reported(tmp_path):
    result = grade_files(tmp_path, {"attention.py": AUTOGRAD_WITHOUT_THE_HOOK}, only=["attention"], timeout_s=60)
    backward = [t for t in result.tests if "backward" in t.name]
    assert backward and all(t.score == 0.0 for t in backward)
    assert "a call removing the grader's saved-tensors hook" in backward[0].output, backward[0].output
    assert "uses automatic differentiation" not in backward[0].output  # the runtime record alone caught it


@pytest.mark.parametrize("attack", ["the engine, called directly", "a forged main guard"])
def test_autograd_by_the_engine_or_under_a_forged_main_guard_loses_the_backward_points(tmp_path, attack):
    """Both took 30 / 30. The engine is now audited wherever it is reached from, a graph recorded for
    backward is reported by a saved-tensors hook whatever runs it, and a file that rebinds __name__
    has its main-guard blocks read like the rest."""
    source = AUTOGRAD_BY_THE_ENGINE if attack.startswith("the engine") else AUTOGRAD_UNDER_A_FORGED_MAIN_GUARD
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=60)
    forward = [t for t in result.tests if "forward" in t.name]
    backward = [t for t in result.tests if "backward" in t.name]
    assert forward and all(t.passed for t in forward), [t.output for t in forward]
    assert backward and all(t.score == 0.0 for t in backward)
    text = backward[0].output
    assert "Backward points withheld" in text, text
    assert "the autograd engine (run_backward)" in text and "an autograd graph (tensors that require grad)" in text, text
    if attack == "a forged main guard":
        assert "uses automatic differentiation" in text and "from torch.autograd.variable import Variable" in text, text


def test_a_self_test_under_a_plain_main_guard_still_costs_nothing():
    """The benefit of the doubt stays for honest files: only a module that could rebind __name__ loses it."""
    from gradelib.problems.attention import autograd_uses

    honest = SOLUTIONS.joinpath("attention.py").read_text() + (
        "\n\nif __name__ == '__main__':\n    import torch\n    x = torch.ones(2, requires_grad=True)\n    x.sum().backward()\n")
    assert autograd_uses(honest) == []
    for rebinding in ("__name__ = '__main__'\n", "globals()['__name__'] = '__main__'\n",
                      "import sys\nsetattr(sys.modules[__name__], 'x', 1)\n"):
        hits = autograd_uses(rebinding + honest)
        assert any("requires_grad=True" in h for h in hits), (rebinding, hits)


# At exit, every .npy the harness wrote is padded to 64 MB with a hole: free for the writer, 8 GB of reads
# for a grader that reads whole files (12 s, 9 s of system time, outside every run's cgroup).
SPARSE_OUTPUTS = r"""
import atexit, os


def _pad():
    for top, _dirs, files in os.walk("outputs"):
        for name in files:
            if name.endswith(".npy"):
                with open(os.path.join(top, name), "r+b") as fh:
                    fh.truncate(64 * 1024 * 1024)


atexit.register(_pad)
"""

# 1,500 nested folders left in scratch: shutil.rmtree recurses once per level and raised RecursionError,
# which turned every line of the problem into "internal grader error".
DEEP_FOLDERS = r"""
import os
fd = os.open(".", os.O_RDONLY)
for _ in range(1500):
    os.mkdir("d", dir_fd=fd)
    inner = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = inner
os.close(fd)
"""


@pytest.mark.parametrize("attack", ["padded outputs", "deep folders"])
def test_outputs_padded_with_holes_or_folders_nested_deep_cost_the_grader_nothing(tmp_path, attack):
    """Padded .npy files are refused from their header (nothing after the data is read): the submission
    loses what it padded, quickly. A tree deeper than Python's recursion limit is removed all the same,
    and the honest code beside it keeps its points."""
    reference = SOLUTIONS.joinpath("attention.py").read_text()
    source = (SPARSE_OUTPUTS if attack == "padded outputs" else DEEP_FOLDERS) + reference
    start = time.monotonic()
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=30)
    wall = time.monotonic() - start
    said = "\n".join(t.output for t in result.tests)
    assert "internal grader error" not in said, said
    if attack == "padded outputs":
        assert result.score == 0.0
        assert "bytes after the" in said and "it was not read" in said, said
        assert wall < 15, wall
    else:
        assert result.score == POINTS, said


def test_a_tree_deeper_than_the_recursion_limit_is_removed(tmp_path):
    from gradelib.sandbox import remove_tree

    top = tmp_path / "scratch"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(sys.getrecursionlimit() + 200):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    (top / "link").symlink_to(tmp_path / "kept")
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "file").write_text("x")
    remove_tree(top)
    assert not top.exists()
    assert (tmp_path / "kept" / "file").read_text() == "x"  # a link is removed, not followed


# Before its autograd call, the backward sends 400 harmless-looking events of its own (76 KB): with
# only the first 64 KB of the audit pipe read, the autograd record fell out of view (30 / 30).
PADDED_EVENTS = """
import sys as _sys
for _ in range(400):
    _sys.audit("gradelib.pad", "x" * 190)
""" + AUTOGRAD_HIDDEN

# It finds the audit pipe among its descriptors and writes to it: once a little junk, or the start of
# a record, with no end of line (glued to the autograd record that follows, either would hide it), once
# without end.
PIPE_WRITER = r"""
import os, stat, fcntl


def audit_pipe():
    for fd in range(3, 256):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                return fd
        except OSError:
            continue
    raise RuntimeError("no audit pipe found")


fd = audit_pipe()
if @FOREVER@:
    while True:
        os.write(fd, b"y" * 65536)
os.write(fd, @PAYLOAD@)
""" + AUTOGRAD_HIDDEN


JUST_BEFORE_THE_CALL = r"""
_plain = getattr(Attention, "back" + "ward")


def _prefixed(self, dLdXnew):
    os.write(fd, b"gradelib.note ")
    return _plain(self, dLdXnew)


setattr(Attention, "back" + "ward", _prefixed)
"""


@pytest.mark.parametrize("attack", ["padding events", "junk on the pipe", "a record-shaped prefix", "a flood on the pipe"])
def test_the_autograd_record_survives_whatever_the_submission_sends_on_the_audit_pipe(tmp_path, attack):
    """Every record on the audit pipe is read and indexed, whatever precedes it; bytes that are not the
    hook's own records mark the channel as tampered with (backward points withheld, forward kept), and
    a flood is stopped at 1 MB, not at the time limit."""
    writer = PIPE_WRITER.replace("@FOREVER@", "False")
    source = {"padding events": PADDED_EVENTS,
              "junk on the pipe": writer.replace("@PAYLOAD@", 'b"junk with no end of line "'),
              # A record's start with no end of line, written just before the autograd call: the hook's own
              # record must not become its arguments.
              "a record-shaped prefix": writer.replace("@PAYLOAD@", 'b""') + JUST_BEFORE_THE_CALL,
              "a flood on the pipe": PIPE_WRITER.replace("@FOREVER@", "True").replace("@PAYLOAD@", 'b""')}[attack]
    start = time.monotonic()
    result = grade_files(tmp_path, {"attention.py": source}, only=["attention"], timeout_s=30)
    assert time.monotonic() - start < 20
    backward = [t for t in result.tests if "backward" in t.name]
    forward = [t for t in result.tests if "forward" in t.name]
    assert backward and all(t.score == 0.0 for t in backward), [t.output for t in backward]
    text = "\n".join(t.output for t in backward)
    assert "Backward points withheld" in text, text
    if attack in ("padding events", "a record-shaped prefix"):
        assert "torch.autograd.grad while running" in text and all(t.passed for t in forward), text
    elif attack == "junk on the pipe":
        assert "tampered with the grader's record of autograd calls (it wrote to the grader's audit pipe)" in text, text
        assert all(t.passed for t in forward), [t.output for t in forward]
    else:
        assert "was stopped when it sent more than 1 MB to the grader's audit pipe" in "\n".join(result.notes), result.notes


FILL_AND_HANG = r"""
import ctypes, os, signal, time
ctypes.CDLL(None).prctl(15, b"@MARKER@", 0, 0, 0)
if os.fork() == 0:
    os.setsid()  # a second process, outside the child's session
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, signal.SIG_IGN)
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
"""


def test_worker_killed_at_its_deadline_leaves_nothing(tmp_path):
    marker = "zz" + uuid.uuid4().hex[:10]
    folder = tmp_path / "filler"
    folder.mkdir()
    (folder / "attention.py").write_text(FILL_AND_HANG.replace("@MARKER@", marker))
    scratch_before = set(Path("/tmp").glob("autograder-scratch-*"))
    start = time.monotonic()
    # The submission's own limit (60 s) is past the batch's deadline for the whole worker (10 s).
    proc = run_cli(str(folder), "--out", str(tmp_path / "grades"), "--timeout", "60", "--submission-timeout", "10",
                   "--only", "attention", "--retries", "0", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - start < 60
    result = json.loads((tmp_path / "grades" / "filler" / "results.json").read_text())
    assert result["score"] == 0.0 and "ran past the 10 s limit" in result["output"], result["output"]
    assert sandbox_uid_processes() == []
    assert processes_named(marker) == []
    assert leftover_cgroups() == []
    assert leftover_scratch(scratch_before) == []
    leftovers = []
    deadline = time.monotonic() + 20
    for top, dirs, files in os.walk("/tmp"):
        leftovers += [os.path.join(top, f) for f in files if marker in f]
        if time.monotonic() > deadline:
            break
    assert leftovers == []


def test_a_batch_killed_outright_is_cleaned_up_by_the_next(tmp_path):
    """SIGKILL skips a batch's cleanup: its scratch (and the capped tmpfs in it) stay until the next batch starts."""
    from gradelib.sandbox.processes import become_subreaper
    from gradelib.sandbox.scratch import mounts_under

    # This process as a long-lived subreaper above the batch (as a supervisor would be): the killed
    # batch's worker is re-parented here and stays a zombie, never reaped. The next batch must count it gone.
    become_subreaper()
    marker = "zk" + uuid.uuid4().hex[:10]
    folder = tmp_path / "filler"
    folder.mkdir()
    name = f'import ctypes\nctypes.CDLL(None).prctl(15, b"{marker}", 0, 0, 0)\n'
    (folder / "attention.py").write_text(name + FILL_AND_HANG.replace("@MARKER@", marker))
    batch = subprocess.Popen([PYTHON, str(CLI), str(folder), "--out", str(tmp_path / "grades"), "--timeout", "60",
                              "--only", "attention"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    pattern = f"autograder-scratch-{batch.pid}-*"
    deadline = time.monotonic() + 60
    while not processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_named(marker), "the submission never started"
    time.sleep(1.0)  # it has filled its scratch by now
    os.kill(batch.pid, 9)
    batch.wait()
    stale = sorted(Path("/tmp").glob(pattern))
    assert stale, "a batch killed outright skips its own cleanup"
    deadline = time.monotonic() + 20  # the worker (SIGTERM on its parent's death) ends the sandbox
    while processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_named(marker) == []
    honest = tmp_path / "honest"
    honest.mkdir()
    (honest / "attention.py").write_text(SOLUTIONS.joinpath("attention.py").read_text())
    proc = run_cli(str(honest), "--out", str(tmp_path / "grades2"), "--only", "attention")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "grades2" / "honest" / "results.json").read_text())["score"] == POINTS
    assert not any(p.exists() for p in stale) and all(mounts_under(p) == [] for p in stale)
    # The killed batch's worker ended its run on SIGTERM; its run cgroups went with it or with the next batch.
    assert leftover_cgroups() == []


def test_read_tail_never_follows_links_or_blocks(tmp_path):
    from gradelib.safeio import read_tail

    secret = tmp_path / "secret"
    secret.write_text("TOPSECRET")
    secret.chmod(0o600)
    (tmp_path / "link").symlink_to(secret)
    (tmp_path / "zero").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "plain").write_text("x" * 5000 + "end")
    start = time.monotonic()
    assert read_tail(tmp_path / "link") == ""
    assert read_tail(tmp_path / "zero") == ""
    assert read_tail(tmp_path / "fifo") == ""
    assert time.monotonic() - start < 5
    assert read_tail(tmp_path / "plain", 100) == "x" * 97 + "end"


# =====================================================================================================
# Reading what a child left, safely (gradelib/safeio.py): links, FIFOs and devices planted in its
# outputs, and control characters in what it reports. Each test runs its own small CLI batch.
# =====================================================================================================

SAFEIO_SECRET = "SECRET-of-another-student-" + uuid.uuid4().hex[:8]
SAFEIO_TIMEOUT_S = 20

# The reference attention.py, plus a patch of the child's Recorder: after every write the outputs of
# each case are replaced -- meta.json by a link to another student's file or by a FIFO, or every .npy
# by a link to /dev/zero or to a valid array elsewhere.
PLANT_OUTPUTS = r'''
import itertools, os, sys
_cc = sys.modules["child_common"]
_write = _cc.Recorder.write
_order = {}

def _planting_write(self):
    _write(self)
    kind = _order.setdefault(self.dir.name, len(_order)) % 4
    if kind == 0:
        os.unlink(self.dir / "meta.json")
        os.symlink("@SECRET@", self.dir / "meta.json")
    elif kind == 1:
        os.unlink(self.dir / "meta.json")
        os.mkfifo(self.dir / "meta.json")
    else:
        target = "/dev/zero" if kind == 2 else "@ARRAY@"
        for p in list(self.dir.glob("*.npy")):
            p.unlink()
            os.symlink(target, p)

_cc.Recorder.write = _planting_write
'''

ESCAPES = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202e"
ESCAPE_ATTACKS = {
    "escape_in_exception": 'raise RuntimeError("\\x1b[2J\\x07 cleared your screen \\x1b]0;owned\\x07 \\u202e")\n',
    "escape_in_type_name": r'''
import torch

Evil = type("Evil\x1b[2J\x07\u202e", (), {})


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        pass

    def forward(self, X):
        self.Q = self.K = self.V = self.A_w = self.A_sig = Evil()
        return Evil()

    def backward(self, dLdXnew):
        raise ValueError("\x1b[31mred\x1b[0m \x07bell \x1b]8;;http://x\x07link\x1b]8;;\x07")
''',
}


def _no_control_characters(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\x9b\u202e")


def _strings(value):
    """Every string inside a parsed JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_links_and_fifos_planted_in_a_childs_outputs_are_refused_unread(tmp_path):
    import numpy as np

    secret = tmp_path / "other_student" / "feedback.txt"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"quantities": {q: {"present": True, "type": "torch.Tensor", "note": SAFEIO_SECRET}
                                                 for q in ("Q", "K", "V", "X_new")}, "errors": {}, "flags": {}}))
    array = secret.parent / "array.npy"
    np.save(array, np.zeros((2, 2)))
    source = SOLUTIONS.joinpath("attention.py").read_text() + PLANT_OUTPUTS.replace("@SECRET@", str(secret)).replace(
        "@ARRAY@", str(array))
    folder = tmp_path / "planter"
    folder.mkdir()
    (folder / "attention.py").write_text(source)
    out = tmp_path / "grades"
    start = time.monotonic()
    proc = run_cli(str(folder), "--out", str(out), "--timeout", str(SAFEIO_TIMEOUT_S), "--only", "attention", timeout=180)
    wall = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert wall < SAFEIO_TIMEOUT_S + 30, wall  # a FIFO read would have blocked until the deadline
    raw = (out / "planter" / "results.json").read_text()
    result = json.loads(raw)
    feedback = (out / "planter" / "feedback.txt").read_text()
    text = outputs(result)
    assert "meta.json is a symbolic link, not a regular file" in text, text
    assert "meta.json is a FIFO (named pipe), not a regular file" in text, text
    assert ".npy is a symbolic link, not a regular file" in text, text
    assert result["score"] == 0.0
    for where in (raw, feedback, proc.stdout, proc.stderr):
        assert SAFEIO_SECRET not in where
        assert "Traceback" not in where
    assert json.loads(secret.read_text())["quantities"]["Q"]["note"] == SAFEIO_SECRET  # untouched


def test_control_characters_from_a_submission_reach_no_terminal_or_file(tmp_path):
    folders = []
    for name, source in {"reference": SOLUTIONS.joinpath("attention.py").read_text(), **ESCAPE_ATTACKS}.items():
        folder = tmp_path / "subs" / name
        folder.mkdir(parents=True)
        (folder / "attention.py").write_text(source)
        folders.append(str(folder))
    out = tmp_path / "grades"
    batch = run_cli(*folders, "--out", str(out), "--timeout", str(SAFEIO_TIMEOUT_S), "--only", "attention", timeout=240)
    assert batch.returncode == 0, batch.stderr[-3000:]
    single = run_cli(folders[1], "--out", str(tmp_path / "single"), "--timeout", str(SAFEIO_TIMEOUT_S),
                     "--only", "attention", timeout=120)
    assert single.returncode == 0, single.stderr[-3000:]
    assert "cleared your screen" in single.stdout  # the message arrives, without its escapes
    assert json.loads(single.stdout.strip().splitlines()[-1]) == {"scores": {"attention": 0.0}}
    texts = {"batch stdout": batch.stdout, "batch stderr": batch.stderr, "single stdout": single.stdout,
             "single stderr": single.stderr, "report.html": (out / "report.html").read_text(),
             "grades.csv": (out / "grades.csv").read_text()}
    for name in ESCAPE_ATTACKS:
        texts[f"{name}/feedback.txt"] = (out / name / "feedback.txt").read_text()
        raw = (out / name / "results.json").read_text()
        texts[f"{name}/results.json"] = raw
        texts[f"{name}/results.json strings"] = "\n".join(_strings(json.loads(raw)))
    for where, text in texts.items():
        assert _no_control_characters(text), (where, [c for c in text if c in ESCAPES])
        assert "\\u001b" not in text.lower() and "\\u0007" not in text, where
    type_text = texts["escape_in_type_name/feedback.txt"]
    assert "got attention.Evil[2J" in type_text and "red[0m bell" in type_text, type_text


def test_an_interpreter_under_tmp_is_mounted_over_the_private_tmp(monkeypatch, tmp_path):
    """A checkout (and its .venv) under /tmp must stay visible inside the namespace: /tmp is mounted first."""
    from gradelib.sandbox import namespaces

    venv = "/tmp/some-checkout/.venv"
    monkeypatch.setattr(namespaces, "python_mounts", lambda: ([venv], f"{venv}/bin/python"))
    argv, _, _ = namespaces.bwrap_argv(tmp_path, UID_BASE, sandbox.Limits())
    tmpfs = next(i for i in range(len(argv) - 1) if argv[i] == "--tmpfs" and argv[i + 1] == "/tmp")
    bind = next(i for i in range(len(argv) - 2) if argv[i] == "--ro-bind" and argv[i + 1] == venv)
    assert tmpfs < bind


# ---------------------------------------------------------------- the per-submission template process
# Runs of one submission are forked from one template (gradelib/sandbox/template.py). What one run
# does to the template, or leaves behind, must cost that run only: the next problem of the same
# submission is graded in full, by a fresh template where needed, and nothing outlives the grading.

TEMPLATE_ATTACKS = {
    "kill_template": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "stop_template": "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n",
    # A daemon in a session of its own that keeps a heartbeat in /dev/shm for 30 s; the next run reads it.
    "daemon_into_next_run": r'''
import ctypes, os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(15, b"@MARKER@", 0, 0, 0)
        end = time.time() + 30
        while time.time() < end:
            with open("/dev/shm/hb-@MARKER@", "w") as fh:
                fh.write(repr(time.time()))
            time.sleep(0.05)
    os._exit(0)
time.sleep(0.3)
''',
}

HEARTBEAT_CELL = r'''import os, time
_path = "/dev/shm/hb-@MARKER@"
_first = open(_path).read() if os.path.exists(_path) else None
time.sleep(0.5)
_second = open(_path).read() if os.path.exists(_path) else None
if _first is not None:  # a raising cell costs nothing here; the message reaches the feedback
    raise RuntimeError("heartbeat alive" if _first != _second else "heartbeat stopped")
'''


def _notebook_with_first_cell(source: str) -> str:
    import nbformat

    nb = nbformat.read(SOLUTIONS / "01_mlm_and_next_token.ipynb", as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(source))
    return nbformat.writes(nb)


@pytest.mark.parametrize("attack", sorted(TEMPLATE_ATTACKS))
def test_a_run_that_attacks_the_template_costs_only_itself(tmp_path, attack):
    marker = "zt" + uuid.uuid4().hex[:10]
    losses = rubric.load()["losses"]
    files = {
        "attention.py": TEMPLATE_ATTACKS[attack].replace("@MARKER@", marker) + SOLUTIONS.joinpath("attention.py").read_text(),
        "01_mlm_and_next_token.ipynb": _notebook_with_first_cell(HEARTBEAT_CELL.replace("@MARKER@", marker)),
    }
    (tmp_path / "attack").mkdir()
    (tmp_path / "honest").mkdir()
    before = set(descendants(os.getpid()))  # what other tests left running is not this test's
    start = time.monotonic()
    attacked = grade_files(tmp_path / "attack", files, only=["attention", "losses"], timeout_s=30)
    wall = time.monotonic() - start
    # The next problem of the same submission is graded in full (a fresh template where the old one went) ...
    assert attacked.score >= losses.points, (attack, [(t.name, t.score, t.output[:200]) for t in attacked.tests])
    # ... with no heartbeat from the first run's daemon: it died with that run.
    said = "\n".join([*attacked.notes, *(t.output for t in attacked.tests)])
    assert "heartbeat alive" not in said, said
    if attack == "daemon_into_next_run" and attacked.isolation != "namespaces":
        assert "heartbeat stopped" in said, said  # the daemon ran, and was gone before the next run began
    elif attack == "daemon_into_next_run":  # its heartbeat file went with the submission's emptied /dev/shm too
        assert "heartbeat" not in said, said
    Path(f"/dev/shm/hb-{marker}").unlink(missing_ok=True)  # the host's /dev/shm at the fallback level
    assert wall < 60, wall
    # Nothing of the attack outlives the grading, and an honest handin graded next is untouched.
    assert processes_named(marker) == [] and set(descendants(os.getpid())) - before == set()
    honest = grade_files(tmp_path / "honest", {"attention.py": SOLUTIONS.joinpath("attention.py").read_text()},
                         only=["attention"], timeout_s=30)
    assert honest.score == rubric.load()["attention"].points
    assert processes_named(marker) == []


# The first run leaves a file in /dev/shm and a System V segment; the notebook's run, next in the same
# sandbox, looks for both (it found both, with the hidden inputs' names the first run wrote there).
SHM_LEFT = r'''
import ctypes, os
with open("/dev/shm/left-@MARKER@", "w") as fh:
    fh.write(",".join(sorted(os.listdir("inputs"))))
ctypes.CDLL(None).shmget(0x5151, 4096, 0o1666)
'''
SHM_SEEN = r'''import os
_files = [n for n in os.listdir("/dev/shm") if "@MARKER@" in n]
_segments = open("/proc/sysvipc/shm").read().splitlines()[1:]
raise RuntimeError(f"shared memory seen: files={_files} segments={len(_segments)}")
'''


@needs_namespaces
def test_shared_memory_one_run_leaves_is_gone_before_the_next_run_of_the_submission(tmp_path):
    """At the namespaces level a submission's runs share its sandbox's /dev/shm and IPC namespace: the
    template empties both after each run, so what one problem's run leaves never reaches the next."""
    marker = "zs" + uuid.uuid4().hex[:10]
    files = {"attention.py": SHM_LEFT.replace("@MARKER@", marker) + SOLUTIONS.joinpath("attention.py").read_text(),
             "01_mlm_and_next_token.ipynb": _notebook_with_first_cell(SHM_SEEN.replace("@MARKER@", marker))}
    result = grade_files(tmp_path, files, only=["attention", "losses"], timeout_s=30)
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    assert "shared memory seen: files=[] segments=0" in said, said
    assert result.score == rubric.load()["attention"].points + rubric.load()["losses"].points


# ---------------------------------------------------------------- cgroup v2
def test_on_a_cgroup_v2_host_a_run_gets_one_cpu_and_a_process_cap(tmp_path, monkeypatch):
    """Where /sys/fs/cgroup is v2 (this machine may be v1), a run's group is made at the (namespace's)
    root, with the kernel's v2 files: cpu.max "<quota> <period>" (one CPU) and pids.max (the run's
    processes, plus bubblewrap's two); killing it lifts the CPU cap first and kills what cgroup.procs lists."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.procs").write_text("")
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", root)
    made = cgroups.make(sandbox.Limits(processes=40))
    assert len(made) == 1 and made[0].parent == root and made[0].name.startswith(f"gradelib-{os.getpid()}-")
    assert (made[0] / "cpu.max").read_text() == f"{cgroups.CPU_PERIOD_US} {cgroups.CPU_PERIOD_US}"
    assert (made[0] / "pids.max").read_text() == "42"
    assert (made[0] / "memory.max").read_text() == str(3072 << 20) and (made[0] / "memory.swap.max").read_text() == "0"
    assert cgroups.label(made) == "cgroups: v2"
    child = subprocess.Popen(["sleep", "60"])
    try:
        (made[0] / "cgroup.procs").write_text(f"{child.pid}\n")
        assert cgroups.kill(made, wait_s=0.3) == 1
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert (made[0] / "cpu.max").read_text() == "max"
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------- what the model's child says about itself
# Notebook 3 runs in the same process as the harness that rebuilds the model, so its code can change
# what that harness writes to the grader: here every JSON report gains step timings no number can
# hold and a parameter count that is not a number. The grader must read past it, grade the model
# by what it answered, and let nothing of it decide a point.
FORGED_REPORT_CELL = r'''
import json as _json
_dump = _json.dump
def _forged(obj, fh, *args, **kwargs):
    if isinstance(obj, dict) and "calls" in obj:
        obj["seconds"] = {"cells": 10 ** 400, "x" * 5000: 1.0, "load": "fast", **{f"k{i}": i for i in range(300)}}
        obj["parameters"] = "lots"
    return _dump(obj, fh, *args, **kwargs)
_json.dump = _forged
'''


def test_a_notebook_that_forges_the_model_harness_report_changes_no_grade(tmp_path):
    import nbformat

    nb = nbformat.read(SOLUTIONS / "03_language_model.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(FORGED_REPORT_CELL))
    lm = FIXTURES / "lm"
    files = {"03_language_model.ipynb": nbformat.writes(nb), "model.pt": (lm / "reference_model.pt").read_bytes(),
             "predictions.npy": (lm / "reference_predictions.npy").read_bytes(),
             "generated.npy": (lm / "reference_generated.npy").read_bytes()}
    result = grade_files(tmp_path, files, only=["prediction", "generation"], timeout_s=120)
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    assert "internal grader error" not in said, said[:3000]
    quality = {t.line: t for t in result.tests if t.line in ("nll", "perplexity")}
    # The reference model, graded by what it answered: the forged report neither costs nor earns a point.
    assert set(quality) == {"nll", "perplexity"} and all(t.passed for t in quality.values()), said[:3000]
    assert result.score == result.max_score, [(t.name, t.score, t.output[:200]) for t in result.tests if not t.passed]


# ---------------------------------------------------------------- the one-pass path is for public rows only
# The local grader hands the child the validation targets with the prompts and reads every step's logits
# from outputs/<set>/logits.npy in one go. A notebook under hidden grading finds the harness's task in
# memory, marks the hidden set as given, and plants logits.npy with logits that put all their mass on the
# true characters (which a student could only have from a leak; the test writes them in). The grader
# takes the one-pass file only for sets it gave out itself, so the attack earns nothing.
PLANT_LOGITS_CELL = r'''
import gc as _gc, numpy as _np
for _obj in _gc.get_objects():
    if type(_obj) is dict and type(_obj.get("teacher_forcing")) is list:
        for _entry in _obj["teacher_forcing"]:
            _entry["given"] = True
_targets = _np.array(@TARGETS@, dtype=_np.int64)
_logits = _np.full((*_targets.shape, 30), -30.0, dtype=_np.float32)
_np.put_along_axis(_logits, _targets[..., None], 30.0, axis=-1)
import child_common as _cc  # the harness's own module: where its outputs go
(_cc.OUTPUTS / "test").mkdir(parents=True, exist_ok=True)
_np.save(_cc.OUTPUTS / "test" / "logits.npy", _logits)
'''


def test_a_notebook_that_plants_one_pass_logits_for_the_hidden_rows_gains_nothing(tmp_path):
    import nbformat

    lm = FIXTURES / "lm"
    with np.load(lm / "hidden" / "prediction_test_out.npz") as f:
        targets = f["out"][:, :20]
    nb = nbformat.read(SOLUTIONS / "03_language_model.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PLANT_LOGITS_CELL.replace("@TARGETS@", repr(targets.tolist()))))
    files = {"03_language_model.ipynb": nbformat.writes(nb), "model.pt": (lm / "reference_model.pt").read_bytes()}
    result = grade_files(tmp_path, files, only=["prediction"], timeout_s=120)
    nll = next(t for t in result.tests if t.line == "nll")
    # Planted logits would give an NLL near 0 and full credit; the grader never read them.
    assert nll.score == 0.0 and "prediction NLL" not in nll.output, nll.output
    assert "answered 0 of 20 steps" in nll.output, nll.output
    said = "\n".join([*result.notes, *(t.output for t in result.tests)])
    assert "internal grader error" not in said and "Traceback" not in said, said[:3000]


def test_audit_records_are_read_whole_wherever_the_pipe_splits_them():
    """The grader's reader of the audit pipe: a record split across reads is one record; harmless
    events in any number do not hide a harness event; a byte that is not part of a hook record marks
    the channel, even glued to the front of a real record."""
    from gradelib.sandbox.limits import EVENTS_KEPT
    from gradelib.sandbox.streams import Events

    stream = b"gradelib.boot ok\n" + b"gradelib.pad " + b"x" * 190 + b"\n"
    stream = stream[:17] + stream[17:] * 600 + b"gradelib.autograd torch.autograd.grad\n"
    for cut in (1, 5, 17, 100, 4095):
        events = Events(1 << 20)
        for i in range(0, len(stream), cut):
            events.add(stream[i : i + cut])
        assert events.by_name["autograd"] == ["torch.autograd.grad"], cut
        assert events.by_name["boot"] == ["ok"] and len(events.by_name["pad"]) == EVENTS_KEPT
        assert not events.tampered and len(events.records) == EVENTS_KEPT
    glued = Events(1 << 20)
    glued.add(b"gradelib.boot ok\njunk gradelib.autograd torch.autograd.grad\n")
    assert glued.tampered == "it wrote to the grader's audit pipe" and "autograd" not in glued.by_name
    # The hook starts each record with an end of line: a record-shaped fragment before it stays apart.
    framed = Events(1 << 20)
    framed.add(b"\ngradelib.boot ok\ngradelib.note \ngradelib.autograd torch.autograd.grad\n")
    assert framed.by_name["autograd"] == ["torch.autograd.grad"] and not framed.tampered
    flood = Events(1 << 20)
    for _ in range(300):  # well-formed records, 1.2 MB of them
        flood.add(b"gradelib.pad " + b"x" * 3986 + b"\n")
    assert flood.flooded and flood.tampered.startswith("it sent more than 1 MB")
