"""`twopc demo`: a streaming Spark job through kafka2pc, killed mid-commit, restarted, audited.

`job` is the Spark driver (run as its own process), `run` the script around it, `narrate` what the
twopc log says recovery did. The command line is twopc/cli/demo.py; docs/demo.md describes a run.
"""
