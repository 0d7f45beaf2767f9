"""Every error code the gateway can answer with is documented: in api/errors.py's ERROR_CODES (which the
OpenAPI schema's ErrorOut describes) and in the README's "Error codes" table.

The codes are read from the source, not listed here: every `code="…"` a route, handler or domain refusal
passes, every `{"code": "…"}` body, every `code` parameter's default, the code of each status raised
without one (api.errors.code_for), and the per-status defaults (STATUS_CODES: what the framework's own
404 and 405 get)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from api.errors import ERROR_CODES, STATUS_CODES, ErrorOut, code_for

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "api").rglob("*.py"), *(ROOT / "shared").rglob("*.py")])
# Calls whose first argument is the status of the error they make.
ERROR_CALLS = {"ApiError", "HTTPException", "error_response", "openai_error"}
HTTP_CONSTANT = re.compile(r"HTTP_(\d{3})_")


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _status(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Attribute) and (match := HTTP_CONSTANT.match(node.attr)):
        return int(match.group(1))
    return None


def codes_in_source() -> dict[str, list[str]]:
    """code → where it is made (file:line)."""
    found: dict[str, list[str]] = {}

    def add(code: str | None, path: Path, node: ast.AST) -> None:
        if code is not None:
            found.setdefault(code, []).append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")

    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.keyword) and node.arg == "code":
                add(_text(node.value), path, node.value)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if _text(key) == "code":
                        add(_text(value), path, value)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                params = [*node.args.posonlyargs, *node.args.args]
                defaults = [None] * (len(params) - len(node.args.defaults)) + list(node.args.defaults)
                for param, default in [
                    *zip(params, defaults, strict=True),
                    *zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True),
                ]:
                    if param.arg == "code":
                        add(_text(default), path, param)
            elif isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if name not in ERROR_CALLS or not node.args:
                    continue
                explicit = len(node.args) >= 3 or any(k.arg == "code" for k in node.keywords)
                if name == "error_response" and len(node.args) >= 3:
                    add(_text(node.args[2]), path, node)
                status = _status(node.args[0])
                if status is not None and not explicit:
                    add(code_for(status), path, node)
    for status, code in STATUS_CODES.items():
        add(code, ROOT / "api" / "errors.py", ast.Constant(status))
    return found


def documented_in_readme() -> dict[str, str]:
    """code → status column of the "Error codes" table (README.md, or wherever under docs/ it moved)."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        if not path.is_file():
            continue
        text = path.read_text()
        if "**Error codes.**" not in text:
            continue
        table = text.split("**Error codes.**", 1)[1].split("\n\n", 2)[1]
        rows = [line for line in table.splitlines() if line.startswith("| `")]
        return {row.split("|")[1].strip().strip("`"): row.split("|")[2].strip() for row in rows}
    raise AssertionError("no '**Error codes.**' table in README.md or docs/")


def test_the_scan_finds_codes_made_every_way() -> None:
    found = codes_in_source()
    # A keyword code, a code in a handler's body, a parameter default, a status raised without a code.
    assert {"missing_user", "validation_error", "invalid_messages", "not_found", "conflict"} <= set(found)


def test_every_code_the_api_can_return_is_in_error_codes() -> None:
    found = codes_in_source()
    missing = {code: found[code] for code in sorted(set(found) - set(ERROR_CODES))}
    assert not missing, f"add these to api/errors.py ERROR_CODES and the README's error table: {missing}"
    assert not set(ERROR_CODES) - set(found), "ERROR_CODES lists codes nothing returns any more"


def test_every_code_is_in_the_readme_table_with_its_status() -> None:
    table = documented_in_readme()
    assert set(table) == set(ERROR_CODES), (
        f"undocumented: {sorted(set(ERROR_CODES) - set(table))}; stale: {sorted(set(table) - set(ERROR_CODES))}"
    )
    for code, status in ERROR_CODES.items():
        assert table[code].startswith(str(status)), (code, table[code])


def test_the_openapi_schema_names_every_code() -> None:
    description = ErrorOut.model_json_schema()["properties"]["code"]["description"]
    assert all(f"{code} ({status})" in description for code, status in ERROR_CODES.items())
