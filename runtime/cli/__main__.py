"""`python -m runtime.cli` runs the `scalecua` command line, as `python -m cli` does."""

import runpy

# The one door from the library up to the composition root: an entry point, run as a
# program and never imported (tests/test_layers.py names it as the only exception).
runpy.run_module("cli", run_name="__main__", alter_sys=True)
