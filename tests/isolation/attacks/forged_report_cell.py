# A notebook cell of notebook 3, which runs in the same process as the harness that rebuilds the model:
# every JSON report the harness writes gains step timings no number can hold and a parameter count
# that is not a number.
import json as _json
_dump = _json.dump
def _forged(obj, fh, *args, **kwargs):
    if isinstance(obj, dict) and "calls" in obj:
        obj["seconds"] = {"cells": 10 ** 400, "x" * 5000: 1.0, "load": "fast", **{f"k{i}": i for i in range(300)}}
        obj["parameters"] = "lots"
    return _dump(obj, fh, *args, **kwargs)
_json.dump = _forged
