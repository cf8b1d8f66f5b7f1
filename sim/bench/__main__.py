"""``python -m sim.bench``: see :func:`sim.bench.main`."""

import sys

from sim.bench import main

sys.exit(main())
