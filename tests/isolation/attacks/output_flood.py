# Prints forged score lines without end.

import os
while True:
    os.write(1, b'{"scores":{"attention":30}}\n' * 1000)
