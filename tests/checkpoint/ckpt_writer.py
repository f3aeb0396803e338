"""A writer process for the crash and race tests: python ckpt_writer.py '<json arguments>'.

Prints one line per record it appended ("won <seq>"), flushed, so the parent knows what it did.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from checkpoint import RecordExists, open_log


def padded_body(writer: str, i: int) -> dict[str, Any]:
    """A body large enough to be written in more than one piece, with its own checksum."""
    pad = f"{writer}-{i}-" * 400
    return {"writer": writer, "i": i, "pad": pad, "sha": hashlib.sha256(pad.encode()).hexdigest()}


def body_is_whole(body: dict[str, Any]) -> bool:
    return bool(hashlib.sha256(str(body["pad"]).encode()).hexdigest() == body["sha"])


def main(args: dict[str, Any]) -> None:
    log = open_log(args["url"], args.get("options") or {})
    if args["mode"] == "purge":
        log.purge(args["below"])
        print("purged", flush=True)
        return
    for i in range(args["count"]):
        while True:
            last = log.last()
            seq = 0 if last is None else last.seq + 1
            try:
                log.append(seq, padded_body(args["writer"], i))
            except RecordExists:
                if args["mode"] != "race":
                    raise
                continue
            print(f"won {seq}", flush=True)
            break


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
