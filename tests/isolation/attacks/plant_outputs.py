# Appended to the reference attention.py: patches the child's Recorder so that after every write the
# outputs of each case are replaced -- meta.json by a FIFO or by a link to another student's file, or
# every .npy by a link to /dev/zero or to a valid array elsewhere. Where the grader's guards refuse a
# call, the attack tries each planting call once, says which were refused, and stops.

import os, sys
_cc = sys.modules["child_common"]
_write = _cc.Recorder.write
_order = {}


def _refused(folder):
    """Each planting call tried once in `folder`: 'call:planted' or 'call:<the error's type>'."""
    report = []
    for call, plant in (("os.symlink", lambda p: os.symlink("@SECRET@", p)), ("os.mkfifo", os.mkfifo)):
        try:
            plant(folder / f"probe-{call}")
            report.append(f"{call}:planted")
        except OSError as exc:
            report.append(f"{call}:{type(exc).__name__}")
    return "planting refused: " + " ".join(report)


def _planting_write(self):
    _write(self)
    kind = _order.setdefault(self.dir.name, len(_order)) % 4
    try:
        if kind == 0:
            os.unlink(self.dir / "meta.json")
            os.mkfifo(self.dir / "meta.json")
        elif kind == 1:
            os.unlink(self.dir / "meta.json")
            os.symlink("@SECRET@", self.dir / "meta.json")
        else:
            target = "/dev/zero" if kind == 2 else "@ARRAY@"
            for p in list(self.dir.glob("*.npy")):
                p.unlink()
                os.symlink(target, p)
    except PermissionError:
        raise RuntimeError(_refused(self.dir)) from None

_cc.Recorder.write = _planting_write
