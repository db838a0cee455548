"""`python -m coordinator.cli`: the `linkgrad` command."""

import sys

from coordinator.cli.main import main

sys.exit(main())
