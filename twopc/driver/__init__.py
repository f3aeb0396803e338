"""The driver side: commit, abort, recovery, stranded commits, source offsets, guards at start
(docs/design.md sections 2, 4, 8, 9).
"""
