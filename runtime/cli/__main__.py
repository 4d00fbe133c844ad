"""`python -m runtime.cli` runs the `scalecua` command line."""

import sys

from runtime.cli import entry

sys.exit(entry())
