"""``python -m tvm_pool.cli``: the same as the ``tvm-pool`` console script."""

import sys

from . import main

sys.exit(main())
