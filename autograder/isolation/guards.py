"""What a run of attention.py cannot reach: the course's tripwires against automatic differentiation and the record
that says they are still in place. Standard library only (torch is imported by then): boot.py loads it beside
itself and calls `arm` at the attention harness's first TRIPWIRES_EVENT, before the submission is imported.

How a record stays out of the submission's reach:
- Every record leaves through an audit hook of the course (`_reporter`), which Python offers no way to remove,
  straight onto the audit pipe. The hooks hold their state in closures and are reachable from no Python object.
- Each tripwire is a "sealed" function: what it reports through and what it calls are constants of its code,
  which Python code reaches only through the function's __code__ (refused by `_refuser`: an audit event) or the
  f_code of a frame of it. Its globals are empty, it has no closure, no builtins and no defaults. A tripwire
  reports before it does anything else, so by the time a frame of it exists (seen from what it calls, or in a
  traceback) its record has left; nothing reaches that frame sooner (no tracing, no signal handler, no thread).
- Tripwires sit where every mode of automatic differentiation passes, under every name a loaded module binds them
  to: a graph recorded for a backward pass (the saved-tensors hook on top of the harness's, and anomaly mode), the
  creation of a forward-mode dual level, each torch.func transform's entry into its interpreter, a new engine, the
  hooks and switches that would turn them off; and the public names (torch.func.jvp, ...) for the words.
- The ways Python code could reach them anyway are refused: gc's object lists, other threads' frames, tracing, new
  code objects, other interpreters, the interpreter's test modules, /proc/<pid>/mem and reopening a descriptor
  through /proc; ctypes' data types cannot make an instance and its function pointers cannot be called (either
  reads and writes any address without an event), and every ctypes audit event (a library opened, a symbol looked
  up, an absolute address) is refused. At the Linux levels a seccomp filter adds: no signal handler (one would run
  inside whichever function the signal interrupts), no thread (the saved-tensors hook is per thread), no change to
  the audit pipe's descriptor (kernel.run_guard_program).
- After each stage the harness calls `check`: it records whether anomaly mode and the saved-tensors hook are still
  in place, then asks the reporter for a heartbeat, signed with a key made for this run and sent as its first
  record. The grader treats a run whose heartbeats are missing or wrong as one whose guards went silent.
What remains: a submission that corrupts the interpreter's memory without these (crafted bytecode, an interpreter
bug) can silence or forge anything in its own process; the heartbeat then tells only a silence it did not forge.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import os
import signal
import sys

GRAPH_LABEL = "an autograd graph (tensors that require grad)"
TAKEN_OFF = "a change to the grader's tripwires (anomaly mode or torch.fx.traceback)"
HOOK_OFF = "a change to the grader's saved-tensors hook"
THREAD = "a thread of its own (the grader's saved-tensors hook is per thread)"
# (owner, attribute) -> the label its tripwire reports; the object found there is replaced wherever a loaded module
# binds it. The first group are the choke points every mode of automatic differentiation passes.
CHOKE_POINTS = {
    ("torch._C", "_enter_dual_level"): "forward-mode autograd (a dual level)",
    ("torch._C._functorch", "_grad_increment_nesting"): "a torch.func reverse-mode transform (grad, vjp, jacrev)",
    ("torch._C._functorch", "_jvp_increment_nesting"): "a torch.func forward-mode transform (jvp, jacfwd, linearize)",
    ("torch._C._functorch", "_vmap_increment_nesting"): "torch.func.vmap",
    ("torch._C._functorch", "push_dynamic_layer_stack"): "a torch.func transform",
    ("torch._C._autograd", "_push_saved_tensors_default_hooks"): "a saved-tensors hook pushed over the grader's",
    ("torch._C._autograd", "_pop_saved_tensors_default_hooks"): "a call removing the grader's saved-tensors hook",
    ("torch._C._autograd", "_saved_tensors_hooks_disable"): HOOK_OFF,
    ("torch._C._autograd", "_saved_tensors_hooks_set_tracing"): HOOK_OFF,
    ("torch._C", "_set_anomaly_enabled"): "a call switching the grader's anomaly mode",
    ("torch._C", "set_anomaly_enabled"): "a call switching the grader's anomaly mode",
    ("torch._C", "_ImperativeEngine"): "a new autograd engine",
    ("torch.autograd.variable", "ImperativeEngine"): "a new autograd engine",
    ("_thread", "start_new_thread"): THREAD,
}
NAMED = {
    **{("torch.autograd", n): f"torch.autograd.{n}" for n in ("backward", "grad")},
    ("torch.Tensor", "backward"): "Tensor.backward",
    ("torch.nn.functional", "scaled_dot_product_attention"): "scaled_dot_product_attention",
    **{("torch.autograd.functional", n): f"torch.autograd.functional.{n}"
       for n in ("vjp", "jvp", "jacobian", "hessian", "vhp", "hvp")},
    **{("torch.func", n): f"torch.func.{n}"
       for n in ("grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "vmap", "linearize")},
    **{("torch.autograd.forward_ad", n): f"torch.autograd.forward_ad.{n}"
       for n in ("enter_dual_level", "make_dual", "unpack_dual")},
}
LABELS = frozenset({GRAPH_LABEL, TAKEN_OFF, "the autograd engine", *CHOKE_POINTS.values(), *NAMED.values()})
# Audit events refused once armed (besides every "ctypes.*" one, some opens, imports and attribute reads).
REFUSED = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
                     "sys.settrace", "sys.setprofile", "sys.addaudithook", "code.__new__", "os.symlink", "os.link",
                     "cpython.PyInterpreterState_New"})
TEST_MODULES = ("_test", "_ctypes_test", "_xxsubinterpreters", "_xxinterpchannels")  # prefixes of modules refused

# The sealed functions' sources: each "@name@" becomes the object `name` (_sealed).
WRAPPER = '''
def {name}(*args, **kwargs):
    if "@sent@".__len__() == 0:
        "@audit@"("@record@", "@data@")
        "@sent@".append(1)
    return "@original@"(*args, **kwargs)
'''
PACK = '''
def pack(tensor):
    if "@sent@".__len__() == 0:
        "@audit@"("@record@", "@data@")
        "@sent@".append(1)
    return tensor
'''
ENGINE_GETATTR = '''
def __getattr__(self, name):
    if "@sent@".__len__() == 0:
        "@audit@"("@record@", "@data@")
        "@sent@".append(1)
    return "@getattr@"("@engine@", name)
'''
CHECK = '''
def check():
    try:
        top = "@hooks_on_top@"(False)
        intact = "@is_on@"() and "@modules@".get("torch.fx.traceback") is "@fx@" and (
            "@fx@".format_stack is "@format_stack@" and top is not None and top[0] is "@pack@")
    except "@BaseException@":
        intact = False
    if not intact and "@sent@".__len__() == 0:
        "@audit@"("@record@", "@data@")
        "@sent@".append(1)
    "@audit@"("@alive@")
'''
SEALED_GLOBALS: dict = {"__builtins__": {}}  # every sealed function's globals: it looks up none


def _sealed(source: str, **objects):
    """The one function `source` defines, each string "@name@" in it standing for objects[name], a constant of its
    code (the compiler's warning that a string is not callable is expected)."""
    import types
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        code = next(c for c in compile(source, "<grader's guards>", "exec").co_consts if isinstance(c, types.CodeType))

    def constant(value):
        if type(value) is str and value[:1] == value[-1:] == "@" and value[1:-1] in objects:
            return objects[value[1:-1]]
        return tuple(constant(v) for v in value) if type(value) is tuple else value

    return types.FunctionType(code.replace(co_consts=constant(code.co_consts)), SEALED_GLOBALS, code.co_name)


def _record(label: str) -> bytes:
    return f"\ngradelib.autograd {label}\n".encode()


def arm(k, fd: int, after_stage: list, filtered: bool) -> None:
    """Set the course's tripwires in this run and close the ways to them (see the module's docstring). `k` is
    kernel.py; `fd` the audit pipe; `after_stage` the harness's list of checks run after each stage; `filtered`:
    whether this level has seccomp (the Linux levels)."""
    key = os.urandom(16)
    record, alive = (f"grader.{os.urandom(8).hex()}" for _ in "ra")  # event names only this run's guards know
    os.write(fd, b"\ngradelib.key " + key.hex().encode() + b"\n")
    sys.addaudithook(_reporter(fd, key, record, alive))
    protected = _tripwires(record, alive, after_stage)
    for number in signal.valid_signals():
        if callable(signal.getsignal(number)):  # Python's SIGINT handler: none may run inside a tripwire
            signal.signal(number, signal.SIG_DFL)
    if filtered and os.uname().machine in k.RUN_GUARD_SYSCALLS:
        k.apply_seccomp(k.run_guard_program(os.uname().machine, fd))
    _close_ctypes()
    sys.addaudithook(_refuser(fd, protected))


def _reporter(fd: int, key: bytes, record: str, alive: str):
    """The audit hook every course record leaves through: a tripwire's (`record`, its line), and a heartbeat
    (`alive`: its number and a token signed with `key`). Events are named afresh for each run; it calls nothing of
    the submission and never raises."""
    write, sha256, head, count, base = os.write, hashlib.sha256, b"\ngradelib.alive ", [0], BaseException

    def hook(event, args):
        if event == record:
            try:
                write(fd, args[0])
            except base:
                pass
        elif event == alive:
            try:
                n = count[0]
                count[0] = n + 1
                token = sha256(key + n.to_bytes(8, "little")).hexdigest()[:32]
                write(fd, head + f"{n} {token}\n".encode())
            except base:
                pass

    return hook


def alive_token(key: bytes, n: int) -> str:
    """The token of heartbeat `n` of a run whose key is `key` (the grader's side of `_reporter`)."""
    return hashlib.sha256(key + n.to_bytes(8, "little")).hexdigest()[:32]


def _tripwires(record: str, alive: str, after_stage: list) -> set[int]:
    """Set every tripwire of CHOKE_POINTS and NAMED, the saved-tensors hook, anomaly mode, the audited engine and
    the stage check; the ids of the sealed functions made for them (the refuser guards their code)."""
    import torch
    import torch.autograd.forward_ad  # noqa: F401 (loaded so its names are bound now)
    import torch.func  # noqa: F401
    import torch.fx.traceback as fx
    from torch.autograd.variable import Variable

    def made(source: str, label: str, **objects):
        return _sealed(source, audit=sys.audit, record=record, data=_record(label), sent=[], **objects)

    pack = made(PACK, GRAPH_LABEL)
    torch._C._autograd._push_saved_tensors_default_hooks(pack, pack)  # over the harness's, never popped
    torch.set_anomaly_enabled(True, False)  # a switch of the whole process: every graph calls format_stack
    fx.format_stack = made(WRAPPER.format(name="format_stack"), GRAPH_LABEL, original=fx.format_stack)
    getattr_ = made(ENGINE_GETATTR, "the autograd engine", getattr=getattr, engine=Variable._execution_engine)
    Variable._execution_engine = type("AuditedEngine", (), {"__slots__": (), "__getattr__": getattr_})()
    check = made(CHECK, TAKEN_OFF, alive=alive, hooks_on_top=torch._C._autograd._top_saved_tensors_default_hooks,
                 is_on=torch.is_anomaly_enabled, modules=sys.modules, fx=fx, format_stack=fx.format_stack, pack=pack,
                 BaseException=BaseException)
    after_stage.append(check)
    made_for: dict[int, object] = {}
    owners = {owner: sys.modules.get(owner) or _dotted(torch, owner) for owner, _attr in {**CHOKE_POINTS, **NAMED}}
    for (owner, attr), label in {**CHOKE_POINTS, **NAMED}.items():
        found = getattr(owners[owner], attr, None)
        if found is None:
            continue
        wrapper = made(WRAPPER.format(name=attr), label, original=found)
        for original in (found, *_harness_original(found)):
            made_for.setdefault(id(original), wrapper)
        if owner == "torch.Tensor":  # a class: its attribute, not a module's binding
            setattr(torch.Tensor, attr, wrapper)
    _rebind(made_for, [m for m in owners.values() if type(m) is type(sys)])
    return {id(f) for f in (pack, fx.format_stack, getattr_, check, *made_for.values())}


def _dotted(torch, owner: str):
    """torch.Tensor and the like: an attribute path from torch."""
    found = torch
    for part in owner.split(".")[1:]:
        found = getattr(found, part, None)
    return found


def _harness_original(obj) -> tuple:
    """The function under a tripwire of the kit's harness (attention_child.py's _tripwire wraps it in a closure)."""
    if getattr(obj, "__qualname__", "") != "_tripwire.<locals>.wrapped":
        return ()
    return tuple(c.cell_contents for c in obj.__closure__ or () if callable(c.cell_contents))


def _rebind(made_for: dict[int, object], more: list) -> None:
    """Bind each replacement where a loaded module of torch (or _thread, threading) binds the object it replaces
    (`made_for`: id -> replacement): `from torch._C import _enter_dual_level as impl` leaves no way around the
    tripwire. The modules are those of sys.modules, `more`, and torch._C's submodules, which are in no registry; a
    module imported later reads the replacement."""
    modules = {id(m): m for name, m in list(sys.modules.items())
               if name.partition(".")[0] in ("torch", "functorch", "_thread", "threading")}
    modules.update((id(m), m) for m in more)
    torch_c = sys.modules.get("torch._C")
    modules.update((id(m), m) for m in vars(torch_c).values() if type(m) is type(sys)) if torch_c else None
    for module in modules.values():
        space = getattr(module, "__dict__", None)
        if type(space) is dict:
            found = [name for name, value in space.items() if id(value) in made_for]
            for name in found:
                space[name] = made_for[id(space[name])]


def _open_guard(type_, int_, bytes_, str_):
    """`_refuser`'s test of an open; what it compares with in its closure, as the hook's state is."""

    def opens_guarded(path) -> bool:
        """Whether an open of `path` could reach this process's memory or reopen one of its descriptors (a
        relative name may be under any folder: os.open's dir_fd does not reach the audit event)."""
        kind = type_(path)
        if kind is int_:
            return False  # a descriptor the process holds already (io.open(fd))
        if kind is bytes_:
            path = path.decode("utf-8", "surrogateescape")
        elif kind is not str_:
            return True  # an os.PathLike may name one file to the event and another to the open
        parts = []
        for part in path.split("/"):
            if part == "..":
                parts = parts[:-1]
            elif part not in ("", "."):
                parts.append(part)
        last = path.rstrip("/").rpartition("/")[2]
        named = parts[-1] if parts else ""
        return last == "mem" or named == "mem" or (named.isdigit() and (
            not path.startswith("/") or parts[-2:-1] in (["fd"], ["fdinfo"])))

    return opens_guarded


def _refuser(fd: int, protected: set[int]):
    """The audit hook that refuses, once armed, the ways Python code could reach the tripwires or this process's
    memory (see the module's docstring), each said first on `fd` as a `gradelib.refused <event>` record: every
    ctypes event, the events of REFUSED, some opens, imports and attribute reads. Its state is immutable and in its
    closure: its frame, seen in a traceback, changes nothing."""
    write, protected, refused, id_, type_, str_, bytes_ = os.write, frozenset(protected), REFUSED, id, type, str, bytes
    test_modules, int_ = TEST_MODULES, int
    attribute_events = frozenset({"object.__getattr__", "object.__setattr__", "object.__delattr__"})
    base, refusal, silent_refusal, import_refusal = BaseException, PermissionError, RuntimeError, ImportError
    opens_guarded = _open_guard(type_, int_, bytes_, str_)

    def refuse(event: str, what: str):
        try:
            write(fd, b"\ngradelib.refused " + event.encode("ascii", "replace")[:100] + b"\n")
        except base:
            pass
        kind = silent_refusal if event == "sys.addaudithook" else import_refusal if event == "import" else refusal
        return kind(f"{what}: not allowed while the grader runs attention.py")

    def hook(event, args):
        if event in refused or event.startswith("ctypes."):  # ctypes: a foreign call, a library, an address
            raise refuse(event, event)
        if event == "open" and args and opens_guarded(args[0]):
            raise refuse(event, f"opening {str_(args[0])[:200]!r}" if type_(args[0]) in (str_, bytes_) else "open")
        if event in attribute_events and args and id_(args[0]) in protected:
            raise refuse(event, f"{event} of the grader's tripwire")
        if event == "import" and args and type_(args[0]) is str_ and args[0].startswith(test_modules):
            raise refuse(event, f"import {args[0]}")

    return hook


def _close_ctypes() -> str:
    """Make ctypes unable to read or write memory without an audit event ('' when done, else why not): none of its
    data types but function pointers can create an instance (each type's tp_new is cleared, and the __new__ of its
    bases removed: a structure, a pointer, an array or even a numeric type subclassed with `_type_ = "z"` reads and
    writes any address); no function pointer can be called (each type's tp_call is cleared and its __call__
    removed: a call raises no audit event, and ctypes.memmove or a library function looked up before arming would
    run); _ctypes.Py_DECREF takes a reference instead of dropping one (a premature free is a way to corrupt memory).
    What is left (a library, a symbol, an absolute address) raises audit events the refuser refuses."""
    import _ctypes

    word = ctypes.sizeof(ctypes.c_void_p)

    def slot(obj, index: int):
        return ctypes.c_ssize_t.from_address(id(obj) + index * word)

    # PyTypeObject (CPython 3.8 to 3.12): 4 tp_basicsize, 21 tp_flags, 32 tp_base, 36 tp_dictoffset, 39 tp_new.
    for t in (object, int, ctypes.c_int, _ctypes.Union, type):
        if (slot(t, 4).value, slot(t, 21).value & 0xFFFFFFFF, slot(t, 32).value, slot(t, 36).value) != (
                t.__basicsize__, t.__flags__ & 0xFFFFFFFF, id(t.__base__) if t.__base__ else 0, t.__dictoffset__):
            return "this interpreter's type layout is not the one expected"
    decref, incref = (ctypes.c_void_p.from_address(id(f) + 2 * word).value for f in (_ctypes.Py_DECREF,
                                                                                      _ctypes.Py_INCREF))
    if [ctypes.string_at(ctypes.c_void_p.from_address(m).value) for m in (decref, incref)] == [b"Py_DECREF",
                                                                                              b"Py_INCREF"]:
        ctypes.c_void_p.from_address(decref + word).value = ctypes.c_void_p.from_address(incref + word).value
    todo, found, pointers = [_ctypes._SimpleCData.__base__], {}, {}
    while todo:
        t = todo.pop()
        if id(t) not in found and id(t) not in pointers:
            (pointers if issubclass(t, _ctypes.CFuncPtr) else found)[id(t)] = t
            todo.extend(type.__subclasses__(t))
    modified = ctypes.pythonapi.PyType_Modified
    arguments = [ctypes.py_object(t) for t in (*found.values(), *pointers.values())]
    for t in found.values():
        slot(t, 39).value = 0
        gc.get_referents(t.__dict__)[0].pop("__new__", None)
    for t in pointers.values():
        gc.get_referents(t.__dict__)[0].pop("__call__", None)
    for argument in arguments:
        modified(argument)
    for t in pointers.values():  # last: `modified` is one of them
        slot(t, 16).value = 0
    return ""
