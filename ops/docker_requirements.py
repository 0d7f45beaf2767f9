"""The project's runtime dependencies from pyproject.toml, one per line, less the named distributions.

The Docker build installs these, then the project with --no-deps, so an image can leave out packages
it does not need (the embedded servers always; the local embedding model in the remote-embeddings
target) without downloading them first. Standard library only: it runs before anything is installed.

    python ops/docker_requirements.py torch sentence-transformers > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def distribution(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def requirements(skip: set[str], pyproject: Path = PYPROJECT) -> list[str]:
    wanted = {name.lower().replace("_", "-") for name in skip}
    deps: list[str] = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    unknown = wanted - {distribution(dep) for dep in deps}
    if unknown:
        raise SystemExit(f"not dependencies of the project: {', '.join(sorted(unknown))}")
    return [dep for dep in deps if distribution(dep) not in wanted]


if __name__ == "__main__":
    print("\n".join(requirements(set(sys.argv[1:]))))
