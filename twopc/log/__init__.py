"""The driver's and the executors' view of the checkpoint log: the session (the only writer) and the
executor's read-only gate (docs/design.md sections 5 and 7).
"""
