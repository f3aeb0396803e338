"""The executor side: one Spark task's rows written inside one Kafka transaction and pre-committed
(docs/design.md section 2, executor).
"""
