"""The harness's one entry point: `python3 tools/realkvm/realkvm COMMAND ...`.

Python runs a directory holding a __main__.py; this puts the directory
above the package on the import path (instead of the package's own) and
hands over to realkvm.cli. `python3 -m realkvm` from tools/realkvm works too.
"""

import os
import sys

if __package__ in (None, ""):
    here = os.path.dirname(os.path.realpath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != here]
    sys.path.insert(0, os.path.dirname(here))
sys.dont_write_bytecode = True

from realkvm.cli import main  # noqa: E402

sys.exit(main())
