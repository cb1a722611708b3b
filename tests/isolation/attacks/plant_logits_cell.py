# A notebook cell of notebook 3 under hidden grading: plants outputs/test/logits.npy, the kit's one-pass
# answer file, with logits that put all their mass on the true characters of TARGETS (a JSON list of
# lists, which a student could only have from a leak).
import json as _json, numpy as _np
_targets = _np.array(_json.loads("@TARGETS@"), dtype=_np.int64)
_logits = _np.full((*_targets.shape, 30), -30.0, dtype=_np.float32)
_np.put_along_axis(_logits, _targets[..., None], 30.0, axis=-1)
import child_common as _cc  # the harness's own module: where its outputs go
(_cc.OUTPUTS / "test").mkdir(parents=True, exist_ok=True)
_np.save(_cc.OUTPUTS / "test" / "logits.npy", _logits)
