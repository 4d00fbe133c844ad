"""`python -m runtime.cli`: the module entry the `scalecua` command had before it moved to the
composition root (`cli/`), kept so scripts, images and `torchrun -m runtime.cli` still run.

Nothing here is imported by the library: only `__main__` hands over to `cli`.
"""
