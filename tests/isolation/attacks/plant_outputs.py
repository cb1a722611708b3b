# Appended to the reference attention.py: patches the child's Recorder so that after every write the
# outputs of each case are replaced -- meta.json by a link to another student's file or by a FIFO, or
# every .npy by a link to /dev/zero or to a valid array elsewhere.

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
