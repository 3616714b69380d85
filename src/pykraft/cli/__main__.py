"""`python -m pykraft.cli`: the `pykraft` command without the console script."""

import sys

from pykraft.cli.main import main

sys.exit(main())
