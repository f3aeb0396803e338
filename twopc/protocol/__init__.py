"""The protocol's pure core: handles, log records, the fold of the log, verdicts and plans
(docs/design.md section 7). No I/O.
"""
