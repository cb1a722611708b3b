# Allocates and touches 256 MiB at a time until the cap stops it.

import numpy as np
hoard = []
while True:
    hoard.append(np.ones(2**25))
