"""First code of the student kit's child (`python -I -B start.py`, configured by $GRADER_BOOT): import numpy and
torch once, then run the harnesses it is sent in turn. Standard library only (`-I` leaves the kit off sys.path)."""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys

BOOT_ENV = "GRADER_BOOT"
EVENT_PREFIX = "gradelib."
MAX_EVENT = 200


def install_reporter(fd: int) -> None:
    """An audit hook that writes the harness's `gradelib.*` events (an autograd entry point called) on `fd` as they
    happen, so clearing Python state afterwards cannot take them back."""
    write = os.write  # bound now: rebinding os.write later changes nothing here

    def hook(event: str, args: tuple) -> None:
        if event.startswith(EVENT_PREFIX):
            line = " ".join([event, *(str(a) for a in args)])[:MAX_EVENT].replace("\n", " ")
            try:  # one write that starts with an end of line, so a stray partial line cannot swallow it
                write(fd, ("\n" + line + "\n").encode("utf-8", "replace"))
            except OSError:
                pass

    sys.addaudithook(hook)


def exit_code(code) -> int:
    """A SystemExit's code as an exit status."""
    if code is None or isinstance(code, int):
        return (code or 0) & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_harness(argv: list[str]) -> None:
    """Run the harness argv[0] as __main__, with `argv` as its sys.argv."""
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")


def add_paths(paths: list[str]) -> None:
    """Put back the folders the grader's interpreter has on sys.path and `-I` leaves off (a user site, a
    PYTHONPATH entry), so the run imports what the grader's interpreter imports."""
    for path in paths:
        if path not in sys.path and os.access(path, os.R_OK | os.X_OK):
            sys.path.append(path)


def limit_cpu(seconds: float) -> None:
    """CPU time from now on: `seconds` more than used so far (no limit where the system has none: Windows)."""
    try:
        import resource
    except ImportError:
        return
    used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    want = int(used + seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))


def serve(preload: list[str]) -> None:
    """Import `preload` once, then take one run at a time from stdin (a JSON line: argv, cwd, env, cpu_s, out,
    events) and answer each with its exit code on the original stdout. Each run gets its own output and event
    files, environment and CPU time; the modules it imported from its folder or made without a file are forgotten."""
    import traceback

    requests, answers = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    quiet_r, quiet_w = os.open(os.devnull, os.O_RDONLY), os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet_r, 0)
    for name in preload:
        with contextlib.suppress(Exception):  # the run imports it itself, and reports what fails
            __import__(name)
    events = os.dup(quiet_w)  # each run's events file is dup2'd onto it
    install_reporter(events)
    home, kept_path = os.getcwd(), list(sys.path)
    for line in requests:
        task = json.loads(line)
        before = set(sys.modules)
        for name, onto in (("out", (1, 2)), ("events", (events,))):
            fd = os.open(task[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            for target in onto:
                os.dup2(fd, target)
            os.close(fd)
        os.chdir(task["cwd"])
        os.environ.clear()
        os.environ.update(task["env"])
        limit_cpu(task["cpu_s"])
        code = 0
        try:
            run_harness(task["argv"])
        except SystemExit as exc:
            code = exit_code(exc.code)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            for fd in (1, 2, events):
                os.dup2(quiet_w, fd)
            os.chdir(home)
            sys.path[:] = kept_path
            here = os.path.join(os.path.realpath(task["cwd"]), "")
            for name in set(sys.modules) - before:  # the run's own modules: the harness's, the submission's
                path = getattr(sys.modules.get(name), "__file__", None) or ""
                if not path or os.path.realpath(path).startswith(here):
                    sys.modules.pop(name, None)
            torch = sys.modules.get("torch")
            if torch is not None:  # torch's global switches a run may have turned, back to a fresh start's
                torch.set_default_dtype(torch.float32)
                torch.set_grad_enabled(True)
        answers.write(json.dumps({"code": code}) + "\n")
        answers.flush()


def main() -> None:
    config = json.loads(os.environ.pop(BOOT_ENV, "{}"))
    add_paths(config.get("paths") or [])
    serve(config.get("preload") or [])


if __name__ == "__main__":
    main()
