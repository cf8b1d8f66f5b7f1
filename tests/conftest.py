import os
import sys

# Let `pytest` run from a plain checkout too (the package is also installed editable).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
