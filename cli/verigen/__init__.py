"""The bodies of the `scalecua verigen` commands, whose parsers and handlers are in
cli/verigen_commands.py (kept apart so that `--help` imports nothing heavy):
options.py turns parsed flags into settings, synthesis.py runs and hosts syntheses (`run`,
`worker`), augment.py plans trajectory-guided ones, audit.py audits overlap with a
benchmark, probe.py validates a candidate on a desktop and serves the shared probe."""
