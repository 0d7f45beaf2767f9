"""Expand, then contract: what in a migration would break the release before it, read with Postgres's own
parser (pglast, libpg_query).

During a rolling upgrade the previous release's workers and gateways run against the migrated schema
(docs/operations/runbooks/upgrade.md). A migration may add (tables, nullable or defaulted columns,
indexes, functions); what removes or reshapes something the previous release reads or writes is a
contract step, allowed only in a migration marked `-- engram: contract` on a line of its own, shipped a
release after the code stopped using the old shape.
"""

from __future__ import annotations

from typing import Any

from pglast import ast, parse_sql
from pglast.enums import AlterTableType, ConstrType, ObjectType

CONTRACT_MARKER = "-- engram: contract"
# Migrations before this number predate the rule (0005 rebuilt a generated column, 0015 dropped two columns
# in the release that stopped using them); they are not checked.
RULE_FROM = 18

_DROPPED_KINDS = {
    ObjectType.OBJECT_TABLE: "table",
    ObjectType.OBJECT_VIEW: "view",
    ObjectType.OBJECT_MATVIEW: "materialized view",
    ObjectType.OBJECT_SEQUENCE: "sequence",
    ObjectType.OBJECT_TYPE: "type",
    ObjectType.OBJECT_FUNCTION: "function",
    ObjectType.OBJECT_INDEX: "index",
}


def is_contract(sql: str) -> bool:
    return any(line.strip() == CONTRACT_MARKER for line in sql.splitlines())


def contract_steps(sql: str) -> list[str]:
    """What each statement of `sql` removes or reshapes that an older release may use, in words."""
    statements = [raw.stmt for raw in parse_sql(sql)]
    created = {name for stmt in statements if (name := _created_name(stmt)) is not None}
    found: list[str] = []
    for stmt in statements:
        if isinstance(stmt, ast.RenameStmt):
            found.append(f"renames {_relname(stmt.relation)}{'.' + stmt.subname if stmt.subname else ''}")
        elif isinstance(stmt, ast.DropStmt) and stmt.removeType in _DROPPED_KINDS:
            for name in _dropped_names(stmt):
                # Dropped and created again in the same file (a rebuilt index, a temporary table): no shape lost.
                if name not in created:
                    found.append(f"drops {_DROPPED_KINDS[stmt.removeType]} {name}")
        elif isinstance(stmt, ast.AlterTableStmt):
            table = _relname(stmt.relation)
            for cmd in stmt.cmds or ():
                found.extend(_altered(table, cmd))
    return found


def _altered(table: str, cmd: Any) -> list[str]:
    if not isinstance(cmd, ast.AlterTableCmd):
        return []
    if cmd.subtype == AlterTableType.AT_DropColumn:
        return [f"drops column {table}.{cmd.name}"]
    if cmd.subtype == AlterTableType.AT_AlterColumnType:
        return [f"changes the type of {table}.{cmd.name}"]
    if cmd.subtype == AlterTableType.AT_SetNotNull:
        return [f"makes {table}.{cmd.name} NOT NULL (older writers may leave it out)"]
    if cmd.subtype == AlterTableType.AT_AddColumn and isinstance(cmd.def_, ast.ColumnDef):
        kinds = {c.contype for c in cmd.def_.constraints or () if isinstance(c, ast.Constraint)}
        filled = {ConstrType.CONSTR_DEFAULT, ConstrType.CONSTR_GENERATED, ConstrType.CONSTR_IDENTITY}
        if ConstrType.CONSTR_NOTNULL in kinds and not kinds & filled:
            return [f"adds {table}.{cmd.def_.colname} NOT NULL without a default (older writers do not fill it)"]
    return []


def _relname(relation: Any) -> str:
    return str(relation.relname) if relation is not None else "?"


def _created_name(stmt: Any) -> str | None:
    if isinstance(stmt, ast.CreateStmt):
        return _relname(stmt.relation)
    if isinstance(stmt, ast.CreateTableAsStmt):
        return _relname(stmt.into.rel)
    if isinstance(stmt, ast.IndexStmt):
        return str(stmt.idxname) if stmt.idxname else None
    if isinstance(stmt, ast.ViewStmt):
        return _relname(stmt.view)
    if isinstance(stmt, ast.CreateFunctionStmt):
        return str(stmt.funcname[-1].sval)
    return None


def _dropped_names(stmt: ast.DropStmt) -> list[str]:
    names = []
    for obj in stmt.objects or ():
        if isinstance(obj, ast.ObjectWithArgs):
            parts = obj.objname
        elif isinstance(obj, ast.TypeName):
            parts = obj.names
        else:
            parts = obj
        names.append(str(parts[-1].sval))
    return names
