"""Who owns a checkpoint log: one streaming query, or the batch jobs of one transactional id prefix
(docs/design.md section 5). Stored as the log's binding (log_records.binding_body), never purged.
"""

from __future__ import annotations

from dataclasses import dataclass

from twopc.protocol.enums import TextEnum


class OwnerKind(TextEnum):
    """A streaming query, whose batches are micro-batch ids, or the batch jobs of one prefix, whose
    batches are the users' job ids. The values are stored in the binding: they never change."""

    QUERY = "query"
    JOB = "job"


@dataclass(frozen=True)
class Owner:
    """The query or job family that owns a log, and the transactional id prefix of its pool."""

    kind: OwnerKind
    owner_id: str
    prefix: str

    def __post_init__(self) -> None:
        if not isinstance(self.kind, OwnerKind):
            kinds = [k.value for k in OwnerKind]
            if self.kind not in kinds:
                raise ValueError(f"the owner's kind must be one of {kinds}, got {self.kind!r}")
            object.__setattr__(self, "kind", OwnerKind(self.kind))
        if not self.owner_id or not self.prefix:
            raise ValueError("an owner needs a non-empty id and transactional id prefix")

    @classmethod
    def query(cls, query_id: str, prefix: str) -> Owner:
        return cls(OwnerKind.QUERY, query_id, prefix)

    @classmethod
    def jobs(cls, prefix: str) -> Owner:
        """Batch jobs of one prefix share a log; each job id is a batch of it."""
        return cls(OwnerKind.JOB, prefix, prefix)

    def renamed_to(self, given: Owner) -> bool:
        """Whether `given` is this owner under another transactional id prefix: the same query,
        or (batch jobs, whose family is the prefix) jobs of the same kind. The log's pool, its
        intents and what its runs left open are under this owner's prefix, which a run under
        another one would neither settle nor sweep (docs/design.md section 5)."""
        same = self.kind is OwnerKind.JOB or self.owner_id == given.owner_id
        return self.kind is given.kind and same and self.prefix != given.prefix

    def describe(self) -> str:
        return f"{self.kind.value} {self.owner_id!r} (prefix {self.prefix!r})"

    def __str__(self) -> str:
        return f"{self.kind.value} {self.owner_id}"
