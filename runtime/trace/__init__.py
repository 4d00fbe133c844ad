"""Following one trajectory through the whole system, read from the log after the fact.

`timeline` builds a trajectory's life (request, turns, completion, reward, segments, the
trainer's step, the announcement) from the records every service already writes; `summary`
takes the time between stages across a run; `text` prints both; `reading` loads the records
from the live log or the archive; `otlp` turns timelines into OpenTelemetry traces.
"""
