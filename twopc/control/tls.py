"""The CA certificates a TLS context trusts, read as librdkafka reads them: one helper for the
brokers' connections (connection.py) and the OAuth token endpoint (oauth.py).

Design: docs/design.md section 7.
"""

from __future__ import annotations

import os
import ssl


def ca_context(location: str | None, pem: str | None) -> ssl.SSLContext:
    """A client context trusting `location` (a PEM file or a directory of them; `probe` or None:
    the system's CAs) and `pem` (certificates inline). Raises OSError, ssl.SSLError or ValueError
    for what cannot be loaded; the caller names the setting."""
    ca = location if location != "probe" else None
    return ssl.create_default_context(
        cafile=ca if ca and not os.path.isdir(ca) else None,
        capath=ca if ca and os.path.isdir(ca) else None, cadata=pem)
