import os
import sys

# Test helpers (oracles.py, spec_reference.py) import as top-level modules.
sys.path.insert(0, os.path.dirname(__file__))
