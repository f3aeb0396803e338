"""Operator tools that read the cluster: the pre-flight check and the exactly-once audit
(docs/operations.md).
"""
