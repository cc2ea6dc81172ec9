"""python3 -m jobq.web: the dashboard (see jobq.web)."""

import sys

from .cli import main

sys.exit(main())
