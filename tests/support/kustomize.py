"""A small kustomize renderer for the features ops/k8s uses, so the manifests are checked on any machine.

Supported: `resources` (files and directories with a kustomization), `namespace`, `images` (newName,
newTag), `replicas`, `patches` (strategic-merge patch files for objects with a name; lists of named
items such as containers are merged by name), `configMapGenerator` with `behavior: merge` and
`literals` on an existing ConfigMap, and `labels` (metadata only). Anything else raises, so a
kustomization using a feature this does not know fails loudly instead of being checked wrongly.
Where kubectl is installed, tests/unit/test_k8s.py also compares this with `kubectl kustomize`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KNOWN = {
    "apiVersion",
    "kind",
    "resources",
    "namespace",
    "images",
    "replicas",
    "patches",
    "configMapGenerator",
    "labels",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def render(directory: Path) -> list[dict[str, Any]]:
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - KNOWN
    if unknown:
        raise ValueError(f"{directory}: unsupported kustomization fields {sorted(unknown)}")
    objects: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        target = directory / entry
        objects.extend(render(target) if target.is_dir() else load_documents(target))
    for label in spec.get("labels", []):
        if label.get("includeSelectors") or label.get("includeTemplates"):
            raise ValueError("labels: only metadata labels are supported")
        for obj in objects:
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(label["pairs"])
    for generator in spec.get("configMapGenerator", []):
        if generator.get("behavior") != "merge" or set(generator) - {"name", "behavior", "literals"}:
            raise ValueError("configMapGenerator: only `behavior: merge` with literals is supported")
        target_map = _find(objects, "ConfigMap", generator["name"])
        for literal in generator.get("literals", []):
            key, _, value = literal.partition("=")
            target_map.setdefault("data", {})[key] = value
    for patch in spec.get("patches", []):
        if set(patch) != {"path"}:
            raise ValueError("patches: only `path` (a strategic-merge patch file) is supported")
        for change in load_documents(directory / patch["path"]):
            target = _find(objects, change["kind"], change["metadata"]["name"])
            _merge(target, change)
    for replica in spec.get("replicas", []):
        _find(objects, "Deployment", replica["name"])["spec"]["replicas"] = replica["count"]
    for image in spec.get("images", []):
        for container in _containers(objects):
            repo, _, tag = container["image"].partition(":")
            if repo == image["name"]:
                repo = image.get("newName", repo)
                tag = image.get("newTag", tag)
                container["image"] = f"{repo}:{tag}" if tag else repo
    if "namespace" in spec:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = spec["namespace"]
    return objects


def _find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise ValueError(f"no {kind} {name!r} to patch")


def _containers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        found.extend(pod.get("containers", []) + pod.get("initContainers", []))
    return found


def _merge(target: dict[str, Any], change: dict[str, Any]) -> None:
    for key, value in change.items():
        current = target.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            _merge(current, value)
        elif (
            isinstance(value, list)
            and isinstance(current, list)
            and all(isinstance(v, dict) and "name" in v for v in value)
        ):
            by_name = {item.get("name"): item for item in current}
            for item in value:
                if item["name"] in by_name:
                    _merge(by_name[item["name"]], item)
                else:
                    current.append(copy.deepcopy(item))
        else:
            target[key] = copy.deepcopy(value)
