import sys

from pykraft.cli.main import main

sys.exit(main())
