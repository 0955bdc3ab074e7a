"""A Confluent-compatible Schema Registry kept in a log: the registry's logic.

State lives in a compacted topic (``_schemas`` by default) of the broker the registry
is pointed at, or in a list in memory (:meth:`SchemaRegistry.in_memory`). Every
instance reads the whole log and builds its view from it (see :mod:`.state` for the
records and the rules), so the registry survives restarts and several instances,
in one process or many, agree.

Agreeing on ids without a leader
--------------------------------
To register, an instance that caught up with the log appends a *claim* record for
the subject's next version and an id (the schema's id if the registry knows the
schema, else the largest id seen + 1), then reads the log to its end. The claim is
accepted when, at its place in the log, nobody claimed that version of the subject
and that id for another schema first (and the schema got no other id first): **the
earliest record in log order wins**. A loser tombstones its claim (every write also
tombstones the lost claims its instance knows of) and tries again from the view it
now has (with the next free id and version), up to 100 times. Every
write returns only after this instance read its own record back, so what a call
returns is in every instance's view once they read that far; every call first reads
the log to its current end, so each answers from a view at least that fresh.

All public methods are thread-safe (one lock per instance) and synchronous.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Callable, Iterable, List, Optional, Sequence, Tuple, Union

from .. import compatibility
from ..model import (CompatibilityLevel, IncompatibleSchema, InvalidSchema, RegisteredSchema, RegistryError,
                     Schema, SchemaNotFound, SchemaReference, SchemaType, SubjectNotFound, VersionNotFound)
from .canonical import canonical, serialized
from .log import MemoryLog, RegistryLog
from .state import (MODES, RegistryState, Version, claim_key, claim_value, config_key, delete_version_key,
                    encode, id_key, mode_key)

__all__ = ["SchemaRegistry", "DEFAULT_COMPATIBILITY", "VersionSpec"]

log = logging.getLogger(__name__)

DEFAULT_COMPATIBILITY = CompatibilityLevel.BACKWARD
MAX_CLAIM_ATTEMPTS = 100
VersionSpec = Union[int, str]
"""A version number, or ``"latest"`` (also ``-1``): the newest live version."""


def _error(cls: type, message: str, error_code: Optional[int] = None, status: Optional[int] = None) -> RegistryError:
    return cls(message, status=status, error_code=error_code)


class SchemaRegistry:
    """Subjects, versions, ids and compatibility settings, kept in ``log``.

    ``default_compatibility`` applies while no global level was set (Confluent's
    default is BACKWARD); ``catch_up_timeout`` bounds how long a call waits to read
    the log to its end.
    """

    def __init__(self, log_: RegistryLog, *, default_compatibility: CompatibilityLevel = DEFAULT_COMPATIBILITY,
                 catch_up_timeout: float = 30.0) -> None:
        self._log = log_
        self._state = RegistryState()
        self._lock = threading.RLock()
        self._default = CompatibilityLevel(default_compatibility)
        self._timeout = catch_up_timeout
        with self._lock:
            self._catch_up()

    @classmethod
    def in_memory(cls, **options) -> "SchemaRegistry":
        """A registry of this process only, on a log in memory."""
        return cls(MemoryLog(), **options)

    def __repr__(self) -> str:
        return f"SchemaRegistry({self._log!r})"

    def close(self) -> None:
        """Release the log (the registry is unusable afterwards)."""
        with self._lock:
            self._log.close()

    def __enter__(self) -> "SchemaRegistry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the log ------------------------------------------------------------------------

    def _catch_up(self) -> None:
        """Apply every record up to the log's current end (the caller holds the lock)."""
        end = self._log.end_offset()
        deadline = time.monotonic() + self._timeout
        while self._log.position < end:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RegistryError(f"the registry log was not read to its end ({end}) within {self._timeout} s",
                                    status=500, error_code=50002)
            for offset, key, value in self._log.read(min(0.5, left)):
                self._state.apply(offset, key, value)

    def _fresh(self) -> RegistryState:
        """The view after reading the log to its end; the view as it is when the log cannot
        be read (a broker down: reads still answer, a WARNING says they may be stale)."""
        try:
            self._catch_up()
        except Exception as exc:  # noqa: BLE001 - the last view beats no answer
            log.warning("answering from the registry view at offset %d: reading the log failed: %s",
                        self._state.position, exc)
        return self._state

    def _append(self, records: Sequence[Tuple[bytes, Optional[bytes]]]) -> None:
        """Append ``records`` and read the log up to them. Every write first removes the
        rejected claims still in the log (whoever wrote them: their writer may have died
        before it could), which is always safe and must precede a hard delete."""
        cleanup = [(key, None) for key in self._state.rejected.values()]
        self._log.append(cleanup + list(records))
        self._catch_up()

    # -- registering ----------------------------------------------------------------------

    def register(self, subject: str, schema: Schema, *, normalize: bool = False) -> int:
        """Register ``schema`` under ``subject`` (a no-op if a live version of it is that
        schema) and return its id: the id it already has under any subject, else a new one.
        Raises ``InvalidSchema`` (42201) or ``IncompatibleSchema`` (409)."""
        return self.register_version(subject, schema, normalize=normalize).schema_id

    def register_version(self, subject: str, schema: Schema, *, normalize: bool = False) -> RegisteredSchema:
        """As :meth:`register`, returning the whole registered version."""
        _check_subject(subject)
        given = schema
        with self._lock:
            for _attempt in range(MAX_CLAIM_ATTEMPTS):
                state = self._fresh()
                _check_writable(state, subject)
                resolve = self._resolver(state)
                schema = canonical(given, normalize=normalize, resolve=resolve)
                versions = state.versions(subject)
                for existing in reversed(versions):
                    if existing.schema == schema:
                        return existing.registered()
                compatibility.validate(schema, resolve)
                level = self._level(state, subject)
                problems = compatibility.incompatibilities(level, schema, [v.schema for v in versions], resolve)
                if problems:
                    raise IncompatibleSchema(
                        f"Schema being registered is incompatible with an earlier schema for subject "
                        f"\"{subject}\" ({level.value}): " + "; ".join(problems))
                schema_id = state.ids.get(schema, state.max_id + 1)
                version = state.next_version(subject)
                nonce = uuid.uuid4().hex
                key = claim_key(nonce, subject, version)
                self._append([(key, claim_value(subject, version, schema_id, schema))])
                accepted = state.claims.get(nonce)
                if accepted is not None:
                    log.info("registered %s version %d with id %d", subject, version, schema_id)
                    return accepted.registered()
                log.info("claim of %s version %d / id %d lost to an earlier one: retrying", subject, version,
                         schema_id)
                self._append([(key, None)])
        raise RegistryError(f"could not register a version of {subject!r}: {MAX_CLAIM_ATTEMPTS} claims in a "
                            f"row lost to other registry instances", status=500, error_code=50001)

    def _resolver(self, state: RegistryState) -> Callable[[SchemaReference], Schema]:
        def resolve(reference: SchemaReference) -> Schema:
            found = state.subjects.get(reference.subject, {}).get(reference.version)
            if found is None:
                raise InvalidSchema(f"Invalid schema: reference {reference.name!r} names version "
                                    f"{reference.version} of subject {reference.subject!r}, which does not exist")
            return found.schema
        return resolve

    # -- reading --------------------------------------------------------------------------

    def lookup(self, subject: str, schema: Schema, *, normalize: bool = False,
               deleted: bool = False) -> RegisteredSchema:
        """The version of ``subject`` that is ``schema`` (the newest if several are);
        soft-deleted versions count when ``deleted``. ``SubjectNotFound`` (40401),
        ``SchemaNotFound`` (40403)."""
        with self._lock:
            state = self._fresh()
            versions = self._versions_of(state, subject, deleted=deleted)
            schema = canonical(schema, normalize=normalize, resolve=self._resolver(state))
            for found in reversed(versions):
                if found.schema == schema:
                    return found.registered()
        raise SchemaNotFound("Schema not found")

    def schema_by_id(self, schema_id: int, *, subject: Optional[str] = None) -> Schema:
        """The schema with this id, whatever subject uses it (``SchemaNotFound``, 40403)."""
        with self._lock:
            found = self._fresh().schemas.get(schema_id)
        if found is None:
            raise SchemaNotFound(f"Schema {schema_id} not found")
        return found

    def formatted(self, schema: Schema, fmt: Optional[str]) -> Schema:
        """``schema`` in Confluent's output ``format``: ``serialized`` gives a Protobuf
        schema as base64 of its compiled ``FileDescriptorProto``; other formats (and
        other types) are answered with the stored text."""
        if fmt != "serialized" or schema.schema_type is not SchemaType.PROTOBUF:
            return schema
        with self._lock:
            return serialized(schema, self._resolver(self._fresh()))

    def latest_version(self, subject: str) -> RegisteredSchema:
        """The newest live version of ``subject`` (``SubjectNotFound``, 40401)."""
        return self.version(subject, "latest")

    def version(self, subject: str, version: VersionSpec, *, deleted: bool = False) -> RegisteredSchema:
        """Version ``version`` (a number or ``"latest"``) of ``subject``; a soft-deleted one
        only when ``deleted``. ``SubjectNotFound`` (40401), ``VersionNotFound`` (40402),
        ``RegistryError`` 42202 for a version that is not a positive number or latest."""
        number = _version_number(version)
        with self._lock:
            versions = self._versions_of(self._fresh(), subject, deleted=deleted and number is not None)
            if number is None:
                live = [v for v in versions if not v.deleted]
                if not live:
                    raise SubjectNotFound(f"Subject '{subject}' not found.")
                return live[-1].registered()
            for found in versions:
                if found.version == number:
                    return found.registered()
        raise VersionNotFound(f"Version {number} not found.")

    def subjects(self, *, deleted: bool = False, prefix: str = "") -> List[str]:
        """The subjects with a live version (or any version, when ``deleted``), sorted."""
        with self._lock:
            return [s for s in self._fresh().subject_names(deleted=deleted) if s.startswith(prefix)]

    def versions(self, subject: str, *, deleted: bool = False) -> List[int]:
        """``subject``'s version numbers, ascending (``SubjectNotFound`` if it has none)."""
        with self._lock:
            return [v.version for v in self._versions_of(self._fresh(), subject, deleted=deleted)]

    def versions_of_id(self, schema_id: int, *, deleted: bool = False) -> List[Tuple[str, int]]:
        """(subject, version) of every version with id ``schema_id`` (``SchemaNotFound``
        when the id is unknown)."""
        with self._lock:
            state = self._fresh()
            if schema_id not in state.schemas:
                raise SchemaNotFound(f"Schema {schema_id} not found")
            return [(s, v) for s, v, gone in state.uses_of(schema_id) if deleted or not gone]

    def referenced_by(self, subject: str, version: VersionSpec) -> List[int]:
        """The ids of the live schemas that reference this version."""
        target = self.version(subject, version, deleted=True)
        with self._lock:
            return sorted({v.schema_id for v in self._state.claims.values() if not v.deleted and any(
                r.subject == target.subject and r.version == target.version for r in v.schema.references)})

    def _versions_of(self, state: RegistryState, subject: str, *, deleted: bool) -> List[Version]:
        versions = state.versions(subject, deleted=deleted)
        if not versions:
            raise SubjectNotFound(f"Subject '{subject}' not found.")
        return versions

    # -- deleting -------------------------------------------------------------------------

    def delete_subject(self, subject: str, *, permanent: bool = False) -> List[int]:
        """Soft-delete every live version of ``subject`` (and its compatibility setting),
        or, ``permanent``, remove every version of an already soft-deleted subject.
        Returns the version numbers deleted. Errors as Confluent's: 40401 no such
        subject, 40404 already soft-deleted (delete permanently), 40405 not soft-deleted
        before a permanent delete, 42206 a version is referenced by another schema."""
        with self._lock:
            state = self._fresh()
            _check_writable(state, subject)
            every = state.versions(subject, deleted=True)
            live = [v for v in every if not v.deleted]
            if not every:
                raise SubjectNotFound(f"Subject '{subject}' not found.")
            if permanent:
                if live:
                    raise _error(RegistryError, f"Subject '{subject}' was not deleted first before being "
                                                f"permanently deleted", 40405, 404)
                self._check_unreferenced(state, every)
                self._hard_delete(state, every)
                return [v.version for v in every]
            if not live:
                raise _error(RegistryError, f"Subject '{subject}' was soft deleted.Set permanent=true to delete "
                                            f"permanently", 40404, 404)
            self._check_unreferenced(state, live)
            records: List[Tuple[bytes, Optional[bytes]]] = [
                (delete_version_key(v.claim), encode({"subject": v.subject, "version": v.version})) for v in live]
            if subject in state.configs:
                records.append((config_key(subject), None))
            self._append(records)
            log.info("soft-deleted subject %s (versions %s)", subject, [v.version for v in live])
            return [v.version for v in live]

    def delete_version(self, subject: str, version: VersionSpec, *, permanent: bool = False) -> int:
        """Soft-delete a live version (``"latest"``: the newest live one), or, ``permanent``,
        remove a soft-deleted one; returns its number. 40401, 40402, 40406 (already
        soft-deleted), 40407 (not soft-deleted before a permanent delete), 42206."""
        number = _version_number(version)
        with self._lock:
            state = self._fresh()
            _check_writable(state, subject)
            every = self._versions_of(state, subject, deleted=True)
            if number is None:
                live = [v for v in every if not v.deleted]
                if not live:
                    raise SubjectNotFound(f"Subject '{subject}' not found.")
                number = live[-1].version
            target = next((v for v in every if v.version == number), None)
            if target is None:
                raise VersionNotFound(f"Version {number} not found.")
            self._check_unreferenced(state, [target])
            if permanent:
                if not target.deleted:
                    raise _error(RegistryError, f"Subject '{subject}' Version {number} was not deleted first "
                                                f"before being permanently deleted", 40407, 404)
                self._hard_delete(state, [target])
            else:
                if target.deleted:
                    raise _error(RegistryError, f"Subject '{subject}' Version {number} was soft deleted.Set "
                                                f"permanent=true to delete permanently", 40406, 404)
                self._append([(delete_version_key(target.claim),
                               encode({"subject": subject, "version": number}))])
            log.info("%s-deleted %s version %d", "hard" if permanent else "soft", subject, number)
            return number

    def _check_unreferenced(self, state: RegistryState, targets: Iterable[Version]) -> None:
        wanted = {(v.subject, v.version) for v in targets}
        for other in state.claims.values():
            if other.deleted or (other.subject, other.version) in wanted:
                continue
            for reference in other.schema.references:
                if (reference.subject, reference.version) in wanted:
                    raise _error(RegistryError, f"One or more references exist to the schema "
                                                f"{{subject={reference.subject}, version={reference.version}}}",
                                 42206, 422)

    def _hard_delete(self, state: RegistryState, targets: Sequence[Version]) -> None:
        """Tombstone ``targets``' claims (after every rejected claim still in the log, see
        :meth:`_append` and :mod:`.state` on why), and keep their ids used."""
        records: List[Tuple[bytes, Optional[bytes]]] = []
        for target in targets:
            records.append((delete_version_key(target.claim), None))
            records.append((claim_key(target.claim, target.subject, target.version), None))
            records.append((id_key(target.schema_id), encode({"id": target.schema_id})))
        self._append(records)

    # -- compatibility settings -------------------------------------------------------------

    def _level(self, state: RegistryState, subject: Optional[str]) -> CompatibilityLevel:
        if subject is not None and subject in state.configs:
            return state.configs[subject]
        return state.configs.get(None, self._default)

    def compatibility(self, subject: Optional[str] = None) -> CompatibilityLevel:
        """The level that applies to ``subject`` (its own, else the global one), or the
        global level."""
        with self._lock:
            return self._level(self._fresh(), subject)

    def subject_compatibility(self, subject: str) -> Optional[CompatibilityLevel]:
        """``subject``'s own level, None when it follows the global one."""
        with self._lock:
            return self._fresh().configs.get(subject)

    def set_compatibility(self, level: Union[str, CompatibilityLevel],
                          subject: Optional[str] = None) -> CompatibilityLevel:
        """Set ``subject``'s level (the global one when None). 42203 for an unknown level."""
        level = _level_of(level)
        if subject is not None:
            _check_subject(subject)
        with self._lock:
            _check_writable(self._fresh(), subject)
            self._append([(config_key(subject), encode({"compatibilityLevel": level.value}))])
        log.info("compatibility of %s set to %s", subject or "the registry", level.value)
        return level

    def delete_compatibility(self, subject: Optional[str] = None) -> CompatibilityLevel:
        """Remove ``subject``'s own level (or the global one, back to the default) and return
        the level that applied before. 40401 for a subject without versions nor a level."""
        with self._lock:
            state = self._fresh()
            _check_writable(state, subject)
            if subject is not None and subject not in state.configs and not state.versions(subject, deleted=True):
                raise SubjectNotFound(f"Subject '{subject}' not found.")
            before = self._level(state, subject)
            if subject in state.configs:
                self._append([(config_key(subject), None)])
            return before

    # -- modes ------------------------------------------------------------------------------

    def mode(self, subject: Optional[str] = None) -> str:
        """The mode that applies to ``subject`` (its own, else the global one), or the
        global mode: ``READWRITE`` (the default) or ``READONLY``."""
        with self._lock:
            return _mode_of(self._fresh(), subject)

    def subject_mode(self, subject: str) -> Optional[str]:
        """``subject``'s own mode, None when it follows the global one."""
        with self._lock:
            return self._fresh().modes.get(subject)

    def set_mode(self, mode: str, subject: Optional[str] = None) -> str:
        """Set ``subject``'s mode (the global one when None). In ``READONLY``, registering,
        deleting and changing compatibility levels are refused (42205); modes can always
        be changed. 42204 for any other mode (Confluent's IMPORT included)."""
        wanted = str(mode).upper()
        if wanted not in MODES:
            raise _error(RegistryError, f"Invalid mode {mode!r}: this registry runs READWRITE or READONLY "
                                        f"(IMPORT, registering with given ids, is not supported)", 42204, 422)
        if subject is not None:
            _check_subject(subject)
        with self._lock:
            self._fresh()
            self._append([(mode_key(subject), encode({"mode": wanted}))])
        log.info("mode of %s set to %s", subject or "the registry", wanted)
        return wanted

    def delete_mode(self, subject: str) -> str:
        """Remove ``subject``'s own mode (it follows the global one again); returns the mode
        that applied before."""
        with self._lock:
            state = self._fresh()
            before = _mode_of(state, subject)
            if subject in state.modes:
                self._append([(mode_key(subject), None)])
            return before

    def test_compatibility(self, subject: str, schema: Schema, version: Optional[VersionSpec] = None, *,
                           normalize: bool = False) -> List[str]:
        """Why ``schema`` could not become the next version of ``subject`` under its level
        (empty: it could). ``version`` None: checked as :meth:`register` would check it
        (against every live version when the level is transitive, else the newest; true for
        a subject without versions). ``"latest"`` or a number: against that one version only,
        in the level's direction, as Confluent does (a transitive level reaches no other
        version); 40401 without versions, 40402 if the number is absent."""
        number = None if version is None else _version_number(version)
        with self._lock:
            state = self._fresh()
            resolve = self._resolver(state)
            schema = canonical(schema, normalize=normalize, resolve=resolve)
            compatibility.validate(schema, resolve)
            level = self._level(state, subject)
            if version is None:
                earlier = state.versions(subject)
            else:
                earlier = self._versions_of(state, subject, deleted=False)
                if number is None:
                    earlier = earlier[-1:]  # "latest"
                else:
                    earlier = [v for v in earlier if v.version == number]
                    if not earlier:
                        raise VersionNotFound(f"Version {number} not found.")
            return compatibility.incompatibilities(level, schema, [v.schema for v in earlier], resolve)


def _mode_of(state: RegistryState, subject: Optional[str]) -> str:
    if subject is not None and subject in state.modes:
        return state.modes[subject]
    return state.modes.get(None, "READWRITE")


def _check_writable(state: RegistryState, subject: Optional[str]) -> None:
    """42205 (Confluent's "operation not permitted") when ``subject``'s mode is READONLY."""
    if _mode_of(state, subject) == "READONLY":
        what = f"Subject {subject}" if subject is not None else "The registry"
        raise _error(RegistryError, f"{what} is in read-only mode", 42205, 422)


def _check_subject(subject: str) -> None:
    if not isinstance(subject, str) or not subject or any(ord(c) < 32 for c in subject):
        raise _error(RegistryError, f"Invalid subject {subject!r}", 42208, 422)


def _version_number(version: VersionSpec) -> Optional[int]:
    """The version number, None for latest; 42202 for anything else."""
    if version == "latest" or version == -1 or version == "-1":
        return None
    try:
        number = int(version)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or (isinstance(version, str) and not version.isdigit()):
        raise _error(RegistryError, f"The specified version '{version}' is not a valid version id. Allowed "
                                    f"values are between [1, 2^31-1] and the string \"latest\"", 42202, 422)
    return number


def _level_of(level: Union[str, CompatibilityLevel]) -> CompatibilityLevel:
    try:
        return CompatibilityLevel(str(getattr(level, "value", level)).upper())
    except ValueError:
        raise _error(RegistryError, "Invalid compatibility level. Valid values are none, backward, forward, full, "
                                    "backward_transitive, forward_transitive, and full_transitive", 42203,
                     422) from None
