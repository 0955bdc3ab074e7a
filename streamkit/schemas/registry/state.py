"""The registry's view of its log: records, their JSON layout, and the rules that turn
them into subjects, versions, ids and settings.

Every instance applies the same rules to the same log in the same order, so every
instance holds the same view; no instance leads. Keys and values are JSON, keys with
sorted keys and no spaces (compaction compares them as bytes). The layout follows
Confluent's ``_schemas`` topic (``keytype`` SCHEMA, CONFIG ...) with two additions
that let instances agree without a leader:

``SCHEMA`` claim ``{"claim": NONCE, "keytype": "SCHEMA", "magic": 1, "subject": S, "version": V}``
    value ``{"subject", "version", "id", "schemaType", "schema", "references", "deleted": false}``:
    an instance claims version V of S, and id I for the schema. Each claim has its own
    key (the nonce), written once and never rewritten, so compaction never moves a
    claim behind a later one. A claim is **accepted** when, at its place in the log,
    (a) S has no version V yet, (b) id I is unused or used by this same schema, and
    (c) this schema has no other id; otherwise it is **rejected** and changes nothing.
    So the earliest claim of an id (and of a version) in log order wins.
    A tombstone for the claim's key removes it: a permanent (hard) delete of an
    accepted claim, or the clean-up of a rejected one.
``DELETE_VERSION`` ``{"claim": NONCE, "keytype": "DELETE_VERSION", "magic": 0}``
    value ``{"subject", "version"}``: the claimed version is soft-deleted.
``CONFIG`` ``{"keytype": "CONFIG", "magic": 0, "subject": S or null}``
    value ``{"compatibilityLevel": LEVEL}``, a tombstone removes the setting (null: global).
``ID`` ``{"id": I, "keytype": "ID", "magic": 0}`` value ``{"id": I}``: id I was used, so
    ids are never given out twice even after its schema was deleted permanently.
``MODE`` ``{"keytype": "MODE", "magic": 0, "subject": S or null}`` value ``{"mode": MODE}``
    (``READWRITE`` or ``READONLY``), a tombstone removes the setting (null: global).

Why rejected claims are tombstoned before any accepted claim is: a rejected claim
lost to an earlier one. Were the winner removed first and the log compacted, the
loser would be first in line on the next replay and win. So every write of an
instance starts with tombstones for the rejected claims it knows of (whoever wrote
them), and a hard delete is a write: no accepted claim is removed while a claim
that lost to it is still in the log.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple

from ..model import CompatibilityLevel, RegisteredSchema, Schema, SchemaReference

__all__ = ["Version", "RegistryState", "claim_key", "claim_value", "delete_version_key", "config_key",
           "id_key", "mode_key", "encode", "MODES"]

MODES = ("READWRITE", "READONLY")
"""The modes this registry runs in (Confluent's IMPORT, which registers with given ids, is not one)."""


def encode(data: object) -> bytes:
    """JSON bytes, keys sorted, no spaces (equal keys are equal bytes)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def claim_key(nonce: str, subject: str, version: int) -> bytes:
    return encode({"claim": nonce, "keytype": "SCHEMA", "magic": 1, "subject": subject, "version": version})


def claim_value(subject: str, version: int, schema_id: int, schema: Schema) -> bytes:
    return encode({"subject": subject, "version": version, "id": schema_id,
                   "schemaType": schema.schema_type.value, "schema": schema.schema_str,
                   "references": [{"name": r.name, "subject": r.subject, "version": r.version}
                                  for r in schema.references],
                   "deleted": False})


def delete_version_key(nonce: str) -> bytes:
    return encode({"claim": nonce, "keytype": "DELETE_VERSION", "magic": 0})


def config_key(subject: Optional[str]) -> bytes:
    return encode({"keytype": "CONFIG", "magic": 0, "subject": subject})


def mode_key(subject: Optional[str]) -> bytes:
    return encode({"keytype": "MODE", "magic": 0, "subject": subject})


def id_key(schema_id: int) -> bytes:
    return encode({"id": schema_id, "keytype": "ID", "magic": 0})


@dataclass(frozen=True)
class Version:
    """One accepted claim: version ``version`` of ``subject``."""

    subject: str
    version: int
    schema_id: int
    schema: Schema
    claim: str
    deleted: bool = False

    def registered(self) -> RegisteredSchema:
        return RegisteredSchema(self.subject, self.version, self.schema_id, self.schema)


class RegistryState:
    """The registry as its log says, up to :attr:`position`. Not thread-safe: the
    service applies records and reads it under its lock."""

    def __init__(self) -> None:
        self.position = 0
        self.subjects: Dict[str, Dict[int, Version]] = {}
        """Per subject, its versions (live and soft-deleted) by number."""
        self.claims: Dict[str, Version] = {}
        """Accepted claims by nonce."""
        self.rejected: Dict[str, bytes] = {}
        """Rejected claims still in the log: nonce -> key."""
        self.schemas: Dict[int, Schema] = {}
        self.ids: Dict[Schema, int] = {}
        self._users: Dict[int, int] = {}
        """How many accepted claims use each id."""
        self.max_id = 0
        self.configs: Dict[Optional[str], CompatibilityLevel] = {}
        self.modes: Dict[Optional[str], str] = {}
        """Per subject (None: global), its mode when set (one of :data:`MODES`)."""

    # -- applying the log -------------------------------------------------------------

    def apply(self, offset: int, key: bytes, value: Optional[bytes]) -> None:
        """Apply the record at ``offset``; records this version does not know are skipped."""
        self.position = offset + 1
        try:
            k = json.loads(key)
            v = None if value is None else json.loads(value)
        except ValueError:
            return
        if not isinstance(k, dict):
            return
        keytype = k.get("keytype")
        if keytype == "SCHEMA" and "claim" in k:
            if v is None:
                self._remove_claim(k["claim"])
            else:
                self._claim(k["claim"], key, v)
        elif keytype == "DELETE_VERSION" and v is not None:
            claimed = self.claims.get(k.get("claim"))
            if claimed is not None and not claimed.deleted:
                self._put(replace(claimed, deleted=True))
        elif keytype == "CONFIG":
            subject = k.get("subject")
            if v is None:
                self.configs.pop(subject, None)
            else:
                try:
                    self.configs[subject] = CompatibilityLevel(v.get("compatibilityLevel"))
                except ValueError:
                    pass
        elif keytype == "MODE":
            subject = k.get("subject")
            if v is None:
                self.modes.pop(subject, None)
            elif isinstance(v, dict) and v.get("mode") in MODES:
                self.modes[subject] = v["mode"]
        elif keytype == "ID" and isinstance(k.get("id"), int):
            self.max_id = max(self.max_id, k["id"])

    def _claim(self, nonce: str, key: bytes, v: dict) -> None:
        if nonce in self.claims or nonce in self.rejected:
            return
        subject, version, schema_id = v["subject"], int(v["version"]), int(v["id"])
        schema = Schema(v["schema"], v.get("schemaType") or "AVRO",
                        tuple(SchemaReference(r["name"], r["subject"], int(r["version"]))
                              for r in v.get("references") or ()))
        taken = version in self.subjects.get(subject, {})
        id_used_otherwise = schema_id in self.schemas and self.schemas[schema_id] != schema
        other_id = schema in self.ids and self.ids[schema] != schema_id
        if taken or id_used_otherwise or other_id:
            self.rejected[nonce] = key
            return
        self._put(Version(subject, version, schema_id, schema, nonce))
        self.schemas[schema_id] = schema
        self.ids[schema] = schema_id
        self._users[schema_id] = self._users.get(schema_id, 0) + 1
        self.max_id = max(self.max_id, schema_id)

    def _put(self, version: Version) -> None:
        self.claims[version.claim] = version
        self.subjects.setdefault(version.subject, {})[version.version] = version

    def _remove_claim(self, nonce: str) -> None:
        if self.rejected.pop(nonce, None) is not None:
            return
        claimed = self.claims.pop(nonce, None)
        if claimed is None:
            return
        versions = self.subjects.get(claimed.subject, {})
        versions.pop(claimed.version, None)
        if not versions:
            self.subjects.pop(claimed.subject, None)
        users = self._users.get(claimed.schema_id, 0) - 1
        if users > 0:
            self._users[claimed.schema_id] = users
        else:
            self._users.pop(claimed.schema_id, None)
            schema = self.schemas.pop(claimed.schema_id, None)
            if schema is not None:
                self.ids.pop(schema, None)

    # -- reading the view -------------------------------------------------------------

    def versions(self, subject: str, *, deleted: bool = False) -> List[Version]:
        """``subject``'s versions, oldest first; soft-deleted ones too when ``deleted``."""
        found = self.subjects.get(subject, {})
        return [found[n] for n in sorted(found) if deleted or not found[n].deleted]

    def subject_names(self, *, deleted: bool = False) -> List[str]:
        return sorted(s for s in self.subjects if self.versions(s, deleted=deleted))

    def uses_of(self, schema_id: int) -> List[Tuple[str, int, bool]]:
        """(subject, version, deleted) of every version with this id."""
        return sorted((v.subject, v.version, v.deleted) for v in self.claims.values() if v.schema_id == schema_id)

    def next_version(self, subject: str) -> int:
        return max(self.subjects.get(subject, {0: None}), default=0) + 1
