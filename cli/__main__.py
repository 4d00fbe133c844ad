"""`python -m cli` runs the `scalecua` command line."""

import sys

from cli import entry

sys.exit(entry())
