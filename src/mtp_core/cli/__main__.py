"""`python -m mtp_core.cli`: the command line (`mtp_core.cli.main`)."""

import sys

from . import main

sys.exit(main())
