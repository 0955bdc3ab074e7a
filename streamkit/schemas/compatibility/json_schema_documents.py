"""JSON Schema documents as the compatibility check reads them: a schema's JSON checked
against its metaschema, the documents it references (by name and by ``$id``), and
``$ref`` resolution between them (local JSON pointers; ``$anchor`` names are not
resolved). See :mod:`.json_schema` for the rules these feed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple
from urllib.parse import unquote, urljoin

from ..model import InvalidSchema, Schema, SchemaReference

Resolver = Callable[[SchemaReference], Schema]
"""Finds the schema a reference names."""


def parse_schema(schema: Schema) -> Any:
    """The schema's JSON (an object or a boolean), checked against its metaschema;
    ``InvalidSchema`` otherwise."""
    import jsonschema
    from jsonschema import validators

    try:
        raw = json.loads(schema.schema_str)
    except (TypeError, ValueError) as exc:
        raise InvalidSchema(f"not JSON: {exc}") from exc
    if not isinstance(raw, (dict, bool)):
        raise InvalidSchema(f"a JSON schema is an object or a boolean, not {type(raw).__name__}")
    try:
        validators.validator_for(raw, default=validators.Draft7Validator).check_schema(raw)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise InvalidSchema(f"invalid JSON schema{f' at #/{where}' if where else ''}: {exc.message}") from exc
    return raw


@dataclass(eq=False)
class SchemaDocument:
    """A schema document: its JSON, its base URI (``$id``) for relative refs, and the
    documents its refs may name (``siblings``: by reference name and by ``$id``)."""

    raw: Any
    base: str = ""
    siblings: Dict[str, "SchemaDocument"] = field(default_factory=dict)

    @property
    def ref_has_siblings(self) -> bool:
        """Whether keywords beside ``$ref`` apply (2019-09 on); up to draft 7 (the
        default) they are ignored."""
        dialect = self.raw.get("$schema", "") if isinstance(self.raw, dict) else ""
        return isinstance(dialect, str) and ("2019-09" in dialect or "2020-12" in dialect)


def schema_documents(schema: Schema, resolve: Resolver) -> Dict[str, SchemaDocument]:
    """The schema (under ``""``) and everything it references, transitively, under
    their reference names and their ``$id`` s."""
    found: Dict[str, SchemaDocument] = {}

    def add(name: str, target: Schema) -> None:
        raw = parse_schema(target)
        document = SchemaDocument(raw, raw.get("$id", "") if isinstance(raw, dict) else "", found)
        found[name] = document
        if document.base:
            found.setdefault(document.base, document)

    add("", schema)
    pending = list(schema.references)
    seen: Set[str] = set()
    while pending:
        ref = pending.pop()
        if ref.name in seen:
            continue
        seen.add(ref.name)
        target = resolve(ref)
        add(ref.name, target)
        pending.extend(target.references)
    return found


def refs_in(raw: Any) -> List[str]:
    found: List[str] = []
    stack = [raw]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                found.append(node["$ref"])
            stack.extend(v for k, v in node.items() if k not in ("enum", "const", "default", "examples"))
        elif isinstance(node, list):
            stack.extend(node)
    return found


def resolve_ref(ref: str, document: SchemaDocument) -> Optional[Tuple[Any, SchemaDocument]]:
    """The schema ``ref`` points at from ``document`` and the document holding it
    (None if it points nowhere known)."""
    url, _, fragment = ref.partition("#")
    target: Optional[SchemaDocument] = document
    if url:
        target = document.siblings.get(url)
        if target is None and document.base:
            target = document.siblings.get(urljoin(document.base, url))
        if target is None:
            return None
    node = target.raw
    if fragment in ("", "/"):
        return (node, target) if fragment == "" else None
    if not fragment.startswith("/"):
        return None  # $anchor names: not resolved
    for token in fragment[1:].split("/"):
        token = unquote(token).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node, target
