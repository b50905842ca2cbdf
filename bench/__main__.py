"""``python -m bench`` = ``agentrun bench``."""

import sys

from bench import cli

sys.exit(cli.main(sys.argv[1:]))
