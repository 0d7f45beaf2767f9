"""Memory tools the agent calls: store, recall, search, list, delete, correct, confirm, stats,
entity info and search over this conversation. Each call runs in its own transaction and sees only
the calling user's rows; writes go through the memory-write service (shared/memory/writes.py), which has new
text embedded after the commit (via `ToolContext.memory_written`)."""

from __future__ import annotations

import json
from typing import Any

from shared.infra import db
from shared.memory import writes
from shared.memory.entities import entity_info
from shared.memory.keys import MemoryRejected
from shared.memory.memory_input import KINDS, MemoryInput
from shared.memory.reads import list_memories, recall, touch_accessed
from shared.memory.rows import MemoryRow
from shared.memory.search import TERM_WEIGHTS, SearchFilters
from shared.memory.service import search_memories
from shared.memory.stats import memory_stats
from shared.memory.store import Scope, WriteResult, confirm_memory
from shared.memory.writes import MemoryGone
from shared.tools.registry import Tool, ToolContext, ToolError

ACTOR = "agent"


def _scope(ctx: ToolContext) -> Scope:
    return Scope(ctx.tenant_id, ctx.user_id)


def _brief(memory: MemoryRow) -> dict[str, Any]:
    return {
        "id": memory["id"],
        "namespace": memory["namespace"],
        "key": memory["key"],
        "value": memory["value"],
        "kind": memory["kind"],
    }


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _written(result: WriteResult) -> str:
    return _dump({"action": result.action, "memory": _brief(result.memory), "replaced_id": result.previous_id})


def memory_store(ctx: ToolContext, args: dict[str, Any]) -> str:
    item = MemoryInput(
        key=args["key"],
        value=args["value"],
        namespace=args.get("namespace"),
        kind=args.get("kind", "fact"),
        tags=args.get("tags", []),
        source_session_id=ctx.session_id,
    )
    try:
        result = writes.store(_scope(ctx), item, ACTOR, enqueue=ctx.memory_written)
    except MemoryRejected as exc:
        raise ToolError(f"not stored: {exc}") from exc
    return _written(result)


def memory_recall(ctx: ToolContext, args: dict[str, Any]) -> str:
    try:
        with db.connection() as conn:
            rows = recall(conn, _scope(ctx), args["key"], args.get("namespace"))
            touch_accessed(conn, _scope(ctx), [row["id"] for row in rows])
    except MemoryRejected as exc:
        raise ToolError(str(exc)) from exc
    if not rows:
        return f"no memory with key {args['key']!r}"
    return _dump([_brief(row) for row in rows])


def memory_search(ctx: ToolContext, args: dict[str, Any]) -> str:
    filters = SearchFilters(namespace_prefix=args.get("namespace"), kinds=args.get("kinds"))
    with db.connection() as conn:
        results = search_memories(
            conn, _scope(ctx), args["query"], limit=args.get("limit", 8), filters=filters, touch=True
        )
    if not results:
        return "nothing found"
    return _dump(
        [
            {
                **{k: v for k, v in r.as_dict().items() if k in ("id", "source", "namespace", "key", "value", "kind")},
                "score": round(r.score, 3),
            }
            for r in results
        ]
    )


def memory_list(ctx: ToolContext, args: dict[str, Any]) -> str:
    with db.connection() as conn:
        rows = list_memories(
            conn,
            _scope(ctx),
            namespace_prefix=args.get("namespace"),
            kinds=args.get("kinds"),
            limit=args.get("limit", 20),
        )
    return _dump([_brief(row) for row in rows]) if rows else "no memories"


def memory_delete(ctx: ToolContext, args: dict[str, Any]) -> str:
    try:
        row = writes.delete(_scope(ctx), args["id"], ACTOR)
    except MemoryGone as exc:
        raise ToolError(f"no active memory {args['id']}") from exc
    return f"deleted memory {row['id']} ({row['namespace']}/{row['key']})"


def memory_correct(ctx: ToolContext, args: dict[str, Any]) -> str:
    try:
        result = writes.correct(_scope(ctx), args["id"], args["value"], ACTOR, enqueue=ctx.memory_written)
    except MemoryRejected as exc:
        raise ToolError(f"not corrected: {exc}") from exc
    except MemoryGone as exc:
        raise ToolError(f"no active memory {args['id']}") from exc
    return _written(result)


def memory_confirm(ctx: ToolContext, args: dict[str, Any]) -> str:
    with db.connection() as conn:
        row = confirm_memory(conn, _scope(ctx), args["id"], ACTOR)
    if row is None:
        raise ToolError(f"no active memory {args['id']}")
    return f"confirmed memory {row['id']}: it will not decay"


def memory_stats_tool(ctx: ToolContext, _args: dict[str, Any]) -> str:
    with db.connection() as conn:
        return _dump(memory_stats(conn, _scope(ctx)))


def entity_info_tool(ctx: ToolContext, args: dict[str, Any]) -> str:
    with db.connection() as conn:
        info = entity_info(conn, ctx.tenant_id, ctx.user_id, args["name"])
    if info is None:
        return f"no entity named {args['name']!r}"
    return _dump(
        {
            "name": info["canonical_name"],
            "type": info["entity_type"],
            "aliases": info["aliases"],
            "mentions": info["mention_count"],
            "memories": [_brief(m) for m in info["memories"]],
        }
    )


def search_conversation(ctx: ToolContext, args: dict[str, Any]) -> str:
    """Full text over this session's messages (including compacted ones), best matches first: the messages'
    own words, through their transcript units (a unit's context words count less, as in search)."""
    with db.connection() as conn:
        rows = conn.execute(
            """WITH q AS (
                   SELECT to_tsquery('simple', string_agg(quote_literal(lexeme), ' | ')) AS tsq
                   FROM unnest(tsvector_to_array(to_tsvector('english', %s))) AS lexeme)
               SELECT sm.id, sm.role, sm.content, sm.created_at, ts_rank(%s::float4[], c.search_tsv, q.tsq) AS score
               FROM memory_chunks c JOIN session_messages sm ON sm.id = c.message_id, q
               WHERE c.tenant_id = %s AND c.user_id = %s AND c.session_id = %s AND c.message_id IS NOT NULL
                 AND q.tsq IS NOT NULL AND c.search_tsv @@ q.tsq
               ORDER BY score DESC, sm.id DESC LIMIT %s""",
            (args["query"], list(TERM_WEIGHTS), ctx.tenant_id, ctx.user_id, ctx.session_id, args.get("limit", 5)),
        ).fetchall()
    if not rows:
        return "no matching messages in this conversation"
    return _dump([{"role": r["role"], "content": r["content"][:1000], "at": r["created_at"]} for r in rows])


def read_document(ctx: ToolContext, args: dict[str, Any]) -> str:
    """A stored document of this user (e.g. a large tool result moved out of the conversation)."""
    offset = args.get("offset", 0)
    with db.connection() as conn:
        row = conn.execute(
            "SELECT id, title, content FROM documents WHERE tenant_id = %s AND user_id = %s AND id = %s",
            (ctx.tenant_id, ctx.user_id, args["id"]),
        ).fetchone()
    if row is None:
        raise ToolError(f"no document {args['id']}")
    piece = row["content"][offset : offset + DOCUMENT_PAGE_CHARS]
    more = offset + len(piece) < len(row["content"])
    tail = (
        f"\n[… {len(row['content']) - offset - len(piece)} more characters: offset={offset + len(piece)}]"
        if more
        else ""
    )
    return f"# {row['title']} (document {row['id']})\n{piece}{tail}"


DOCUMENT_PAGE_CHARS = 20_000
_ID = {"type": "integer", "minimum": 1}
_LIMIT = {"type": "integer", "minimum": 1, "maximum": 50}
_NAMESPACE = {"type": "string", "maxLength": 128, "description": "e.g. tacit/preferences, entity/default"}

MEMORY_TOOLS = (
    Tool(
        "memory_store",
        "Remember a fact about the user or their world (key + value). A new value for an "
        "existing key replaces it and keeps history.",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["key", "value"],
            "properties": {
                "key": {"type": "string", "maxLength": 200},
                "value": {"type": "string", "maxLength": 4000},
                "namespace": _NAMESPACE,
                "kind": {"type": "string", "enum": list(KINDS)},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
            },
        },
        memory_store,
    ),
    Tool(
        "memory_recall",
        "Get the memory stored under a key.",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["key"],
            "properties": {"key": {"type": "string", "maxLength": 200}, "namespace": _NAMESPACE},
        },
        memory_recall,
    ),
    Tool(
        "memory_search",
        "Search everything remembered about the user (facts, episodes, past conversations).",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["query"],
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 1000},
                "limit": _LIMIT,
                "namespace": _NAMESPACE,
                "kinds": {"type": "array", "items": {"enum": list(KINDS)}},
            },
        },
        memory_search,
    ),
    Tool(
        "memory_list",
        "List recent memories, optionally under a namespace.",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "namespace": _NAMESPACE,
                "limit": _LIMIT,
                "kinds": {"type": "array", "items": {"enum": list(KINDS)}},
            },
        },
        memory_list,
    ),
    Tool(
        "memory_delete",
        "Forget a memory by id (it stays in history).",
        {"type": "object", "additionalProperties": False, "required": ["id"], "properties": {"id": _ID}},
        memory_delete,
    ),
    Tool(
        "memory_correct",
        "Replace a memory's value with a corrected one (the old value is kept in history).",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["id", "value"],
            "properties": {"id": _ID, "value": {"type": "string", "maxLength": 4000}},
        },
        memory_correct,
    ),
    Tool(
        "memory_confirm",
        "Mark a memory as confirmed by the user: full confidence, never decays.",
        {"type": "object", "additionalProperties": False, "required": ["id"], "properties": {"id": _ID}},
        memory_confirm,
    ),
    Tool(
        "memory_stats",
        "Counts of what is remembered, by namespace and kind.",
        {"type": "object", "additionalProperties": False, "properties": {}},
        memory_stats_tool,
    ),
    Tool(
        "entity_info",
        "What is known about a person, place or thing, by name.",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 200}},
        },
        entity_info_tool,
    ),
    Tool(
        "read_document",
        "Read a stored document by id (large tool results moved out of the conversation).",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["id"],
            "properties": {"id": _ID, "offset": {"type": "integer", "minimum": 0}},
        },
        read_document,
    ),
    Tool(
        "search_conversation",
        "Search the messages of this conversation, including older compacted ones.",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["query"],
            "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 1000}, "limit": _LIMIT},
        },
        search_conversation,
    ),
)
