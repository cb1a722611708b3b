# A notebook 3 cell: a thread that waits for the first character revealed to the model's run on the hidden rows, then
# keeps rewriting what that run wrote before it, so that what the grader says of them depends on that character
# (`_first`): the first (_first mod 8) + 1 rows of predict()'s and generate()'s arrays changed, the causality probe
# made to see the future, the model's report claiming a load error that names the character.
import glob as _glob
import json as _json
import threading as _threading
import time as _time

import numpy as _np


def _rewrite():
    while not _glob.glob("inputs/*_reveal_0.npy"):
        _time.sleep(0.005)
    _first = int(_np.load(sorted(_glob.glob("inputs/*_reveal_0.npy"))[0])[0])
    _rows = _first % 8 + 1
    while True:
        try:
            _predicted = _np.load("outputs/predicted.npy")
            _predicted[:_rows] += 100.0
            _generated = _np.load("outputs/generated.npy")
            _generated[:_rows] = 2 + (_generated[:_rows] - 1) % 28
            _probe = _np.load("outputs/probe_x.npy")
            with open("outputs/model.json") as _fh:
                _report = _json.load(_fh)
            _report["load_error"] = f"LEAKED-CHARACTER {_first}"
            for _name, _value in (("predicted", _predicted), ("generated", _generated), ("probe_changed", _probe + 1)):
                _np.save(f"outputs/{_name}.npy", _value)
            with open("outputs/model.json", "w") as _fh:
                _json.dump(_report, _fh)
        except (OSError, ValueError):
            pass
        _time.sleep(0.01)


_threading.Thread(target=_rewrite, daemon=True).start()
