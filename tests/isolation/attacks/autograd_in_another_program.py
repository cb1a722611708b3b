# Takes the gradients from a fresh interpreter (no audit hook, no tripwire there), started once a run, at its
# first backward: it reads every case's inputs from the run's folder (inputs/*.npz: X, the weights, dLdXnew) and
# writes each case's gradients beside them, found again by a hash of X and dLdXnew. Started by @HOW@:
# "subprocess"; "execv" (fork, then the C library's execl through ctypes, which the guards refuse); "fork_exec"
# (_posixsubprocess.fork_exec, as multiprocessing calls it: no audit event); "spawn" (a multiprocessing process
# started by the spawn method: fork_exec again). The program first leaves a mark where the test looks (@MARK@:
# a path, or "" for none), so a test sees that it started whether or not it finished in time. Followed by
# autograd_forward.py.

import hashlib
import math
import os
import subprocess
import sys
import numpy as np
import torch

_PROGRAM = """
if "@MARK@":
    open("@MARK@", "a").close()
import glob, hashlib, math, numpy as np, torch
for path in glob.glob("inputs/*.npz"):
    d = dict(np.load(path))
    X, Wq, Wk, Wv = (torch.from_numpy(d[k]).requires_grad_(True) for k in ("X", "W_q", "W_k", "W_v"))
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    T = X.shape[1]
    fut = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    A = torch.softmax(((Q @ K.transpose(1, 2)) / math.sqrt(K.shape[-1])).masked_fill(fut, float("-inf")), dim=-1)
    out = A @ V
    grads = torch.autograd.grad(out, (X, Wq, Wk, Wv, Q, K, V), torch.from_numpy(d["dLdXnew"]))
    key = hashlib.sha1(d["X"].tobytes() + d["dLdXnew"].tobytes()).hexdigest()
    np.savez(f"g_out_{key}.npz", *[t.detach().numpy() for t in grads])
"""


def _other_program():
    how = "@HOW@"
    if how == "subprocess":
        done = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError("the other program failed: " + done.stderr[-300:])
    elif how == "fork_exec":
        from multiprocessing.util import spawnv_passfds

        pid = spawnv_passfds(os.fsencode(sys.executable), [sys.executable, "-c", _PROGRAM], ())
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if status != 0:
            raise RuntimeError(f"the other program failed: exit {status}")
    elif how == "spawn":
        import multiprocessing
        import types

        process = multiprocessing.get_context("spawn").Process(target=exec, args=(_PROGRAM, {}))
        main, sys.modules["__main__"] = sys.modules["__main__"], types.ModuleType("__main__")  # not run again there
        try:
            process.start()
        finally:
            sys.modules["__main__"] = main
        process.join()
        if process.exitcode != 0:
            raise RuntimeError(f"the other program failed: exit {process.exitcode}")
    else:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)  # before the fork: a refusal ends this run's backward, not a child's
        pid = os.fork()
        if pid == 0:
            exe = sys.executable.encode()
            libc.execl(exe, exe, b"-c", _PROGRAM.encode(), None)
            os._exit(100 + ctypes.get_errno())
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        if status != 0:
            raise RuntimeError(f"execv failed: exit {status}")


def _backward(att, dLdXnew):
    name = f"g_out_{hashlib.sha1(att.X.numpy().tobytes() + dLdXnew.numpy().tobytes()).hexdigest()}.npz"
    if not os.path.exists(name):
        _other_program()
    with np.load(name) as got:
        dX, att.dLdWq, att.dLdWk, att.dLdWv, att.dLdQ, att.dLdK, att.dLdV = (
            torch.from_numpy(got[f"arr_{i}"]) for i in range(7))
    return dX
