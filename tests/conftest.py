import os
import sys

# Let `pytest` run from a plain checkout too (the package is also installed editable).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import warnings  # noqa: E402

from amaranth.hdl import UnusedElaboratable  # noqa: E402

# Tests that check constructor errors leave half-built components behind on purpose.
warnings.filterwarnings("ignore", category=UnusedElaboratable)
