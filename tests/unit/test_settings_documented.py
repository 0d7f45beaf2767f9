"""Every setting is documented on the settings page of the docs with its environment variable, and the
README starts with the two commands."""

import re
from pathlib import Path

from shared.infra.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SETTINGS_PAGE = ROOT / "docs" / "reference" / "settings.md"


def test_every_setting_is_in_the_settings_page() -> None:
    rows = re.findall(r"^\| `(ENGRAM_[A-Z0-9_]+)` \| (.+?) \| (.+) \|$", SETTINGS_PAGE.read_text(), re.M)
    assert [name for name, _, _ in rows] == [f"ENGRAM_{name.upper()}" for name in Settings.model_fields]
    assert all(default.strip() and meaning.strip() for _, default, meaning in rows)


def test_the_settings_page_is_in_the_docs_site() -> None:
    assert "reference/settings.md" in (ROOT / "mkdocs.yml").read_text()


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second() -> None:
    text = README.read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split("#")[0].strip() for line in block] == ["bash ops/up.sh", "bash ops/test.sh"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "bash ops/test.sh" in ci


def test_readme_is_short_and_its_links_into_the_docs_exist() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    targets = re.findall(r"\]\(((?:docs/)[^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets
    missing = [target for target in targets if not (ROOT / target).is_file()]
    assert missing == []


def test_ci_builds_the_docs_strictly() -> None:
    assert re.search(r"mkdocs build --strict", (ROOT / "ops" / "test.sh").read_text())
