# Reads a file only root may read, /etc/shadow and the environment of pid 1.

import errno, os
report = [f"uid={os.getuid()}"]
for label, path in (("secret", "@SECRET@"), ("shadow", "/etc/shadow"), ("init_environ", "/proc/1/environ")):
    try:
        with open(path, "rb") as fh:
            data = fh.read(200)
        report.append(f"{label}:read:{data[:40]!r}")
    except OSError as exc:
        report.append(f"{label}:{errno.errorcode.get(exc.errno, exc.errno)}")
raise RuntimeError("files " + " ".join(report))
