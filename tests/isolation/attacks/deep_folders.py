# 1,500 nested folders left in scratch: shutil.rmtree recurses once per level and raised
# RecursionError, which turned every line of the problem into "internal grader error".

import os
fd = os.open(".", os.O_RDONLY)
for _ in range(1500):
    os.mkdir("d", dir_fd=fd)
    inner = os.open("d", os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = inner
os.close(fd)
