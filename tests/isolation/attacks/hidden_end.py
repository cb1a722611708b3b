
# Appended to a correct attention.py: in the run that has the hidden cases at hand (a case the public set does not
# name), ends at import, as @HOW@ says: an exit code ("70"), the first hidden input's first value as an exit code
# ("leak": 8 bits of a hidden input a resubmission), a signal it sends itself ("signal 11"), or memory touched
# until the limit stops it ("memory").
import glob as _glob
import os as _os

import numpy as _np

_PUBLIC = "@PUBLIC@".split(",")
_HIDDEN = sorted(p for p in _glob.glob("inputs/*.npz") if _os.path.basename(p)[: -len(".npz")] not in _PUBLIC)
if _HIDDEN:
    _how = "@HOW@"
    if _how == "memory":
        _hoard = []
        while True:
            _hoard.append(_np.ones(2**25))
    elif _how.startswith("signal "):
        _os.kill(_os.getpid(), int(_how.split()[1]))
    elif _how == "leak":
        with _np.load(_HIDDEN[0]) as _data:
            _os._exit(int(abs(float(_data["X"].ravel()[0])) * 1000) % 256)
    else:
        _os._exit(int(_how))
