"""The executor's read-only questions about the log (docs/design.md section 2, executor step 1;
section 5): is this batch committed (write nothing), and which slot of the id pool may this task
take. An executor never appends and holds no control connection.
"""

from __future__ import annotations

from checkpoint import Log
from twopc.errors import NoFreeSlot
from twopc.log.jobs import batch_state
from twopc.log.session import Session, check_binding
from twopc.protocol.owner import Owner
from twopc.protocol.pool import choose_slot, transactional_id
from twopc.protocol.state import BatchStatus, LogState


class Gate:
    def __init__(self, log: Log, owner: Owner) -> None:
        self.log = log
        self.owner = owner

    def is_committed(self, batch: str) -> bool:
        """Has this query or job committed `batch`? (Its tasks then write nothing.)"""
        return self._read(batch)[0]

    def task_slot(self, batch: str, task_partition: int, attempt: int, slots: int) -> int | None:
        """None if `batch` is committed (write nothing), else the pool slot of the id to write
        with: one that no pending intent names and no stranded commit holds (pool.choose_slot).
        NoFreeSlot if none is free."""
        committed, state = self._read(batch)
        if committed:
            return None
        in_use = state.in_use() if state is not None else {}
        slot = choose_slot(self.owner.prefix, task_partition, attempt, slots, in_use)
        if slot is None:
            # Name the holders of this partition's pool only: the log's other ids in use are
            # other partitions' and change nothing here.
            pool = {transactional_id(self.owner.prefix, task_partition, s) for s in range(slots)}
            raise NoFreeSlot(task_partition, slots,
                             {t: why for t, why in in_use.items() if t in pool})
        return slot

    def _read(self, batch: str) -> tuple[bool, LogState | None]:
        # One read of the log per task: is the batch committed, and which ids are in use.
        if not check_binding(self.log, self.owner, create=False):
            return False, None
        state = Session(self.log).state
        return batch_state(self.log, self.owner, state, batch).status is BatchStatus.COMMITTED, state
