"""VeriGen: agents write desktop tasks with executable judges and prove each one on a live
desktop before it enters the `tasks` pool (docs/verigen.md).

    candidate.py   the candidate format and the validation record
    validator.py   the rule validator (pure checks, then setup/untouched/solved on desktops)
    llm.py         an OpenAI-compatible chat client with retries and cost accounting
    agents.py      proposer, judger, checker, fixer: prompts and strict parsers
    knowledge/     per-app knowledge documents
    probe.py       the shared interaction probe (desktops for many workers)
    loop.py        the synthesis loop, one `synthesis` event per stage
    service.py     the worker group on `synthesis-requests`, and runs
    summary.py     a run's figures from its events
    augment.py     trajectory-guided synthesis, pure: the plan of decompose and compose seeds
    deviation.py   ...where failed rollouts leave the reference, and the sub-goals
    compose.py     ...clusters of solved tasks, and their conjunctive composition
    audit.py       the overlap audit against a benchmark pool, pure
    embedding.py   instruction embeddings (all-MiniLM-L6-v2, shipped on PyPI, loaded offline)
    sources.py     what augment and audit read (log, archive, task folders) and the audit's filter
    replay.py      an OpenAI-protocol server replaying recorded replies (tests, bench)
"""
