# Asks for 8 GiB at import, past the address-space cap.

import numpy as np
hoard = [np.ones(2**30)]  # 8 GiB of float64, past the address-space cap
