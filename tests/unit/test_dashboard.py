"""ops/grafana/engram.json is a well-formed Grafana dashboard (the metrics each panel queries are
checked against real scrapes in tests/integration/test_dashboard_metrics.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[2] / "ops" / "grafana" / "engram.json"


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def queries(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bengram_[a-z0-9_]+", expr))


def test_panels_are_placed_and_query_prometheus() -> None:
    dashboard = load()
    assert dashboard["uid"] == "engram-overview"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert metric_names(target["expr"]), f"{panel['title']}: {target['expr']} queries no engram metric"
    # Panels do not overlap.
    cells = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))


def test_queries_have_balanced_brackets() -> None:
    for expr in queries(load()):
        for open_, close in ("()", "[]", "{}"):
            assert expr.count(open_) == expr.count(close), expr
