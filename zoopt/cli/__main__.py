"""``python -m zoopt.cli ...`` is ``zoopt ...``."""

import sys

from . import main

sys.exit(main())
