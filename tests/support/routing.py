"""Would a statement route to one shard? The check behind tests/integration/test_sharding.py.

A statement touching a distributed table (shared/infra/sharding.py) is routable when every reference to such a
table is pinned by an equality on its distribution column: to a parameter or constant, to a column of a
table that is not distributed (a CTE, a reference table, an unnested array), or to the distribution column
of another reference that is pinned (a co-located join). Only the ANDed conditions of WHERE and JOIN ... ON
count: an equality inside OR or NOT does not filter. `col = ANY(array)` and `col IN (...)` count too (Citus
prunes them to the shards of the listed values). An INSERT must name the distribution column, unless the
column is a serial `id` (Citus evaluates its `nextval()` on the coordinator, then routes the row). Only data
statements are judged: DDL and LOCK run on every shard through the coordinator by design.

The check reads every reference of a statement at once, nested queries included, and matches unqualified
columns to every reference: it can pass a statement whose pinning equality belongs to another level. It
does not see statements inside SQL functions and triggers (the server logs only what clients send).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from pglast import ast, parse_sql
from pglast.enums import A_Expr_Kind, BoolExprType
from pglast.parser import ParseError
from pglast.visitors import Visitor

from shared.infra.sharding import BY_NAME

_DATA_STATEMENTS = (ast.SelectStmt, ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt)
_EQUALITY_KINDS = (A_Expr_Kind.AEXPR_OP, A_Expr_Kind.AEXPR_OP_ANY, A_Expr_Kind.AEXPR_IN)
# Statements this module sends itself carry this comment and are not checked.
IGNORE_MARK = "/* routing:ignore */"


@dataclass(frozen=True)
class Verdict:
    sql: str
    unpinned: tuple[str, ...]  # the distributed tables the statement reads or changes without pinning

    @property
    def routable(self) -> bool:
        return not self.unpinned


def normalized(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip()


def _column(node: Any) -> tuple[str | None, str] | None:
    if not isinstance(node, ast.ColumnRef):
        return None
    names = [getattr(field, "sval", None) for field in node.fields]
    if not names or names[-1] is None:
        return None
    return (names[-2] if len(names) > 1 else None), names[-1]


def _conjuncts(node: Any) -> Iterator[Any]:
    if isinstance(node, ast.BoolExpr):
        if node.boolop == BoolExprType.AND_EXPR:
            for arg in node.args:
                yield from _conjuncts(arg)
        return  # OR / NOT: nothing below filters every row
    if node is not None:
        yield node


def _equalities(node: Any) -> Iterator[tuple[Any, Any]]:
    for conjunct in _conjuncts(node):
        if not isinstance(conjunct, ast.A_Expr) or conjunct.kind not in _EQUALITY_KINDS:
            continue
        if [getattr(name, "sval", None) for name in conjunct.name] != ["="]:
            continue
        left, right = conjunct.lexpr, conjunct.rexpr
        if isinstance(left, ast.RowExpr) and isinstance(right, ast.RowExpr):
            yield from zip(left.args, right.args, strict=False)
        else:
            yield left, right


class _Collector(Visitor):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.references: list[tuple[str, str]] = []  # (table, the name the statement calls it by)
        self.ctes: set[str] = set()
        self.quals: list[Any] = []
        self.inserts: list[ast.InsertStmt] = []

    def visit_CommonTableExpr(self, parent: Any, node: ast.CommonTableExpr) -> None:
        self.ctes.add(node.ctename)

    def visit_RangeVar(self, parent: Any, node: ast.RangeVar) -> None:
        alias = node.alias.aliasname if node.alias else node.relname
        self.references.append((node.relname, alias))

    def visit_SelectStmt(self, parent: Any, node: ast.SelectStmt) -> None:
        self.quals.append(node.whereClause)

    def visit_UpdateStmt(self, parent: Any, node: ast.UpdateStmt) -> None:
        self.quals.append(node.whereClause)

    def visit_DeleteStmt(self, parent: Any, node: ast.DeleteStmt) -> None:
        self.quals.append(node.whereClause)

    def visit_JoinExpr(self, parent: Any, node: ast.JoinExpr) -> None:
        self.quals.append(node.quals)

    def visit_InsertStmt(self, parent: Any, node: ast.InsertStmt) -> None:
        self.inserts.append(node)


def judge(sql: str) -> Verdict | None:
    """The verdict on one statement, or None when it touches no distributed table (or is not SQL we parse)."""
    try:
        parsed = parse_sql(sql)
    except ParseError:
        return None
    unpinned: list[str] = []
    touched = False
    for raw in parsed:
        if not isinstance(raw.stmt, _DATA_STATEMENTS):
            continue
        collector = _Collector()
        collector(raw.stmt)
        refs = [
            (table, alias)
            for table, alias in collector.references
            if table in BY_NAME and BY_NAME[table].placement == "distributed" and table not in collector.ctes
        ]
        touched = touched or bool(refs)
        inserted = {insert.relation.relname for insert in collector.inserts}
        for insert in collector.inserts:
            placement = BY_NAME.get(insert.relation.relname)
            if placement is None or placement.placement != "distributed":
                continue
            named = {target.name for target in insert.cols or ()}
            if placement.column not in named and placement.column != "id":
                unpinned.append(f"{insert.relation.relname} (insert without {placement.column})")
        # The INSERT's own target is checked above; its other references (INSERT ... SELECT) below.
        targets = [(t, a) for t, a in refs if not (t in inserted and a == t and _is_insert_target(collector, t))]
        unpinned.extend(_unpinned(targets, collector.quals))
    if not touched:
        return None
    return Verdict(normalized(sql), tuple(sorted(set(unpinned))))


def _is_insert_target(collector: _Collector, table: str) -> bool:
    return any(insert.relation.relname == table and insert.relation.alias is None for insert in collector.inserts)


def _unpinned(refs: list[tuple[str, str]], quals: list[Any]) -> list[str]:
    aliases = {alias for _, alias in refs}
    dist_columns = {alias: BY_NAME[table].column for table, alias in refs}

    def matches(column: tuple[str | None, str] | None) -> set[str]:
        """The references whose distribution column this is."""
        if column is None:
            return set()
        qualifier, name = column
        if qualifier is None:
            return {alias for alias in aliases if dist_columns[alias] == name}
        return {qualifier} if qualifier in aliases and dist_columns[qualifier] == name else set()

    def is_distributed_column(node: Any) -> bool:
        column = _column(node)
        return column is not None and (column[0] in aliases or (column[0] is None and bool(matches(column))))

    pinned: set[str] = set()
    links: list[tuple[set[str], set[str]]] = []
    for qual in quals:
        for left, right in _equalities(qual):
            for side, other in ((left, right), (right, left)):
                hits = matches(_column(side))
                if not hits:
                    continue
                if isinstance(other, ast.ColumnRef) and is_distributed_column(other):
                    links.append((hits, matches(_column(other))))
                else:
                    pinned |= hits
    changed = True
    while changed:
        changed = False
        for ours, theirs in links:
            if theirs & pinned and not ours <= pinned:
                pinned |= ours
                changed = True
    return [table for table, alias in refs if alias not in pinned]


class StatementLog:
    """Every statement the server receives while open, from every client (gateway, workers, jobs).

    Turns on `log_statement = all` with a marker prefix for the duration (ALTER SYSTEM + reload; needs a
    superuser, as the embedded test server's is) and reads the server log from where it stood."""

    PREFIX = "@@routing@@ "

    def __init__(self, database_url: str, log_file: Path) -> None:
        self.database_url = database_url
        self.log_file = log_file
        self.offset = 0

    def _configure(self, settings: dict[str, str | None]) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            for name, value in settings.items():
                if value is None:
                    conn.execute(f"ALTER SYSTEM RESET {name}")
                else:
                    conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")

    def _wait_logged(self, marker: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with psycopg.connect(self.database_url, autocommit=True) as conn:
                conn.execute(f"SELECT {IGNORE_MARK} '{marker}'")
            if marker in self.log_file.read_text(errors="replace")[self.offset :]:
                return
            time.sleep(0.1)
        raise AssertionError(f"the server did not start logging statements within {timeout} s")

    def __enter__(self) -> StatementLog:
        self.offset = len(self.log_file.read_text(errors="replace"))
        self._configure({"log_statement": "all", "log_line_prefix": self.PREFIX})
        self._wait_logged("routing-capture-started")
        return self

    def __exit__(self, *exc: object) -> None:
        self._configure({"log_statement": None, "log_line_prefix": None})

    def statements(self) -> list[str]:
        """The distinct statements logged so far, in first-seen order."""
        text = self.log_file.read_text(errors="replace")[self.offset :]
        found: dict[str, None] = {}
        for entry in text.split(self.PREFIX)[1:]:
            match = re.match(r"LOG:\s+(?:statement|execute [^:]+):\s(.*)", entry, re.DOTALL)
            if match is None:
                continue
            sql = match.group(1)
            # Continuation lines of a multi-line message start with a tab; anything after the
            # statement (a DETAIL line with parameters) starts with another prefix, already split off.
            sql = sql.replace("\n\t", "\n").strip()
            if IGNORE_MARK not in sql:
                found.setdefault(sql, None)
        return list(found)
