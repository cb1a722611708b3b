# Empties the interpreter's list of audit hooks (every tripwire's record and every refusal goes through one), makes
# the harness's own record of autograd calls (written to meta.json) claim it holds every label already, then takes
# its gradients by plain autograd. Each way in turn until one works: "pythonapi" (ctypes calls: the
# interpreter state, the list as an object), "datatypes" (ctypes data types alone: a union of an integer, a pointer
# and an object reads memory and makes an object of an address, with no audit event), "procmem" (no ctypes: the
# process's own memory read and written through /proc/self/mem); @HOW@ names one, or "each". What each managed is
# kept in EMPTIED. The guards refuse each (ctypes' audit events, its data types' instances, /proc/self/mem), so the
# hooks stay and record the graph. Followed by autograd_forward.py.

import math
import os
import sys
import types
import torch

EMPTIED = []


def _maps():
    with open("/proc/self/maps") as fh:
        for line in fh:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            yield lo, hi, perms, line.split()[-1] if len(line.split()) > 5 else ""


def _readable(addr):
    """Whether 16 bytes at `addr` can be read: from /proc/self/maps, or where that cannot be read (the fallback
    level's Landlock) by the C library's write(2) of them into a pipe, which fails instead of faulting."""
    if _MAPS is not None:
        return any(lo <= addr < hi - 16 and p.startswith("r") for lo, hi, p, _ in _MAPS)
    import ctypes

    if not _PIPE:
        write = ctypes.CDLL(None).write
        write.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
        _PIPE.extend((*os.pipe(), write))
    done = _PIPE[2](_PIPE[1], addr, 16) == 16
    if done:
        os.read(_PIPE[0], 16)
    return done


def _qualname(read_word, f):
    """A function's __qualname__, read from its object (CPython 3.11: func_qualname at word 5; an ASCII str's
    length at word 2, its characters after 48 bytes)."""
    s = read_word(f + 40)
    if not _readable(s):
        return ""
    n = read_word(s + 16)
    return bytes(b for i in range(0, min(n, 64), 8) for b in read_word(s + 48 + i).to_bytes(8, "little"))[:n]


def _hook_list(read_word, start, span):
    """The address of the list, in `span` words after `start` (the interpreter state), of functions one of which
    is an audit hook the grader installed (its __qualname__ ends in "<locals>.hook")."""
    list_type, function_type = id(list), id(types.FunctionType)
    for at in range(start, start + span * 8, 8):
        p = read_word(at)
        if not p or p % 8 or not _readable(p) or read_word(p + 8) != list_type:
            continue
        size, items = read_word(p + 16), read_word(p + 24)
        if not 1 <= size <= 16 or not _readable(items):
            continue
        found = [read_word(items + 8 * i) for i in range(size)]
        hooks = [f for f in found if _readable(f) and read_word(f + 8) == function_type]
        if len(hooks) == len(found) and any(_qualname(read_word, f).endswith(b"<locals>.hook") for f in hooks):
            return p
    return None


def _interpreter(read_word):
    """The interpreter state: where, in the interpreter's own writable data, a word holds id(sys.modules)."""
    want = id(sys.modules)
    for lo, hi, perms, path in _MAPS or ():
        if perms.startswith("rw") and ("python" in path or "libpython" in path):
            for at in range(lo, hi, 8):
                if read_word(at) == want:
                    return at - 512 * 8
    return None


def _empty(how):
    if how == "pythonapi":
        import ctypes
        main = ctypes.pythonapi.PyInterpreterState_Main
        main.restype = ctypes.c_void_p
        read = lambda a: ctypes.c_uint64.from_address(a).value
        p = _hook_list(read, main(), 1 << 15)
        ctypes.cast(p, ctypes.py_object).value.clear()
    elif how == "datatypes":
        import ctypes

        class U(ctypes.Union):
            _fields_ = [("a", ctypes.c_size_t), ("p", ctypes.POINTER(ctypes.c_uint64)), ("o", ctypes.py_object)]

        u = U()

        def read(a):
            u.a = a
            return u.p[0]

        p = _hook_list(read, _interpreter(read), 1 << 15)
        u.a = p
        hooks = u.o
        hooks.clear()
    else:
        fd = os.open("/proc/self/mem", os.O_RDWR)
        read = lambda a: int.from_bytes(os.pread(fd, 8, a), "little")
        p = _hook_list(read, _interpreter(read), 1 << 15)
        os.pwrite(fd, (0).to_bytes(8, "little"), p + 16)  # its size: 0
    EMPTIED.append(how)


class _Everything(set):
    def __contains__(self, item):
        return True

    def add(self, item):
        pass


setattr(sys.modules["__main__"], "auto" + "grad_calls", _Everything())
try:
    _MAPS, _PIPE = list(_maps()), []
except OSError:  # the fallback level: its Landlock lets a run read no /proc/self
    _MAPS, _PIPE = None, []
for _how in ("pythonapi", "datatypes", "procmem") if "@HOW@" == "each" else ("@HOW@",):
    try:
        _empty(_how)
        break
    except Exception as exc:
        EMPTIED.append(f"{_how} failed: {type(exc).__name__}: {exc}"[:300])
_RG, _BW = "_darg_seriuqer"[::-1], "drawkcab"[::-1]


def _backward(att, dLdXnew):
    leaves = [getattr(t.detach().clone(), _RG)(True) for t in (att.X, att.W_q, att.W_k, att.W_v)]
    X, Wq, Wk, Wv = leaves
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    for t in (Q, K, V):
        t.retain_grad()
    getattr(_attn(Q, K, V)[1] @ V, _BW)(dLdXnew)
    att.dLdX, att.dLdWq, att.dLdWk, att.dLdWv = (t.grad.detach() for t in leaves)
    att.dLdQ, att.dLdK, att.dLdV = (t.grad.detach() for t in (Q, K, V))
    return att.dLdX
