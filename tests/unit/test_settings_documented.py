"""Every setting is documented in the README with its environment variable."""

from pathlib import Path

from shared.config import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_setting_is_in_the_readme_table() -> None:
    text = README.read_text()
    missing = [name for name in Settings.model_fields if f"| `ENGRAM_{name.upper()}` |" not in text]
    assert missing == []


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second() -> None:
    text = README.read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    assert [line.split("#")[0].strip() for line in block] == ["bash ops/up.sh", "bash ops/test.sh"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "bash ops/test.sh" in ci
