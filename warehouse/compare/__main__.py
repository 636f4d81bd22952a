"""``python -m warehouse.compare JOB OUTCOME``: one backend's worker (see :mod:`.worker`)."""

import sys

from warehouse.compare.worker import main

sys.exit(main(sys.argv[1:]))
