"""Test support for twopc, never shipped with it: fault injection (the `faulty://` filesystem), a
local S3 server, a Spark standalone cluster, a transactional producer in a process of its own, the
TLS and SASL broker, and the group-offset reader of the source-offset tests.

Installed beside twopc by `scripts/setup.sh` (`pip install -e testing`), as its own distribution, so
that the `faulty://` entry point and these helpers reach no production install.
"""
