# A notebook cell, run after the run of an attack on the template (daemon_into_next_run.py's, kill_template.py's,
# stop_template.py's): says whether that daemon's heartbeat is still beating.
import os, time
_path = "/dev/shm/hb-@MARKER@"
_first = open(_path).read() if os.path.exists(_path) else None
time.sleep(0.5)
_second = open(_path).read() if os.path.exists(_path) else None
if _first is not None:  # a raising cell costs nothing here; the message reaches the feedback
    raise RuntimeError("heartbeat alive" if _first != _second else "heartbeat stopped")
