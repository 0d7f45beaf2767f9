"""ops/k8s, checked offline: both overlays render, every object validates against the Kubernetes
schemas (kubernetes-validate), the KEDA objects (custom resources, which those schemas do not cover)
are checked field by field, and the processes match docker-compose.yml: same image, same command,
same ENGRAM_ variable names."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from shared.infra.config import Settings
from shared.queueing.queues import BULK_QUEUES, POOLS, QUEUES, broker_keys, bulk_key
from tests.support.kustomize import load_documents, render
from tests.unit.test_compose import COMPOSE_FILE, argv, engram_services, env

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "ops" / "k8s"
OVERLAYS = sorted(p for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").is_file())
KUBERNETES_VERSION = "1.30.0"
# Custom resources of KEDA: not in the Kubernetes schemas; checked by test_keda_objects below.
KEDA_KINDS = {"ScaledObject", "TriggerAuthentication"}
SETTINGS = {f"ENGRAM_{name.upper()}" for name in Settings.model_fields}


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module", params=[p.name for p in OVERLAYS])
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(K8S / "overlays" / request.param)


@pytest.fixture(scope="module")
def compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return services


def test_there_is_a_production_and_a_dev_overlay() -> None:
    assert {p.name for p in OVERLAYS} == {"dev", "production"}


def test_the_renderer_agrees_with_kubectl_kustomize_where_installed() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return  # the renderer alone is used; it refuses kustomize features it does not implement
    for overlay in OVERLAYS:
        out = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, check=True)
        theirs = sorted(
            (d for d in yaml.safe_load_all(out.stdout) if d), key=lambda o: (o["kind"], o["metadata"]["name"])
        )
        ours = sorted(render(overlay), key=lambda o: (o["kind"], o["metadata"]["name"]))
        assert ours == theirs, overlay.name


def test_every_object_validates_against_the_kubernetes_schemas(rendered: list[dict[str, Any]]) -> None:
    checked = 0
    for obj in rendered:
        if obj["kind"] in KEDA_KINDS:
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        checked += 1
    assert checked >= 15
    # The example Secret (not applied) is a valid Secret too.
    for secret in load_documents(K8S / "base" / "secret.example.yaml"):
        kubernetes_validate.validate(secret, KUBERNETES_VERSION, strict=True)


def test_a_deployment_per_process_with_probes_resources_and_budgets(rendered: list[dict[str, Any]]) -> None:
    deployments = by_kind(rendered, "Deployment")
    pools = {f"worker-{pool}" for pool in POOLS}
    assert set(deployments) == {"gateway", "beat", "flower", *pools}
    budgets = by_kind(rendered, "PodDisruptionBudget")
    for name, deployment in deployments.items():
        spec = pod_spec(deployment)
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        (container,) = spec["containers"]
        assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"], name
        assert container["resources"]["limits"]["memory"], name
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
        assert {"configMapRef": {"name": "engram-config"}} in container["envFrom"], name
        assert {"secretRef": {"name": "engram-secrets"}} in container["envFrom"], name
        if name != "flower":  # one replica on a ReadWriteOnce volume: a budget would block node drains
            selector = budgets[name]["spec"]["selector"]["matchLabels"]
            assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items(), name
    gateway = pod_spec(deployments["gateway"])["containers"][0]
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert deployments["gateway"]["spec"]["replicas"] >= 1
    for pool in pools:
        container = pod_spec(deployments[pool])["containers"][0]
        assert container["livenessProbe"]["tcpSocket"]["port"] == "metrics"
        assert pod_spec(deployments[pool])["terminationGracePeriodSeconds"] >= 60  # warm shutdown of a turn


def test_beat_runs_twice_under_the_redbeat_lock(rendered: list[dict[str, Any]]) -> None:
    beat = by_kind(rendered, "Deployment")["beat"]
    assert beat["spec"]["replicas"] == 2
    command = pod_spec(beat)["containers"][0]["command"]
    assert command[command.index("-S") + 1] == "workers.beat:Scheduler"
    assert by_kind(rendered, "PodDisruptionBudget")["beat"]["spec"]["minAvailable"] == 1


def test_flower_logs_in_from_the_secret_and_keeps_its_state(rendered: list[dict[str, Any]]) -> None:
    flower = by_kind(rendered, "Deployment")["flower"]
    container = pod_spec(flower)["containers"][0]
    variables = {e["name"]: e for e in container.get("env", [])}
    password = variables["ENGRAM_FLOWER_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert password == {"name": "engram-secrets", "key": "ENGRAM_FLOWER_PASSWORD"}
    assert variables["FLOWER_BASIC_AUTH"]["value"] == "$(ENGRAM_FLOWER_USER):$(ENGRAM_FLOWER_PASSWORD)"
    assert "FLOWER_UNAUTHENTICATED_API" not in variables
    assert by_kind(rendered, "ConfigMap")["engram-config"]["data"]["ENGRAM_FLOWER_USER"]
    db_path = next(a for a in container["command"] if a.startswith("--db=")).split("=", 1)[1]
    mount = next(m for m in container["volumeMounts"] if db_path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod_spec(flower)["volumes"] if v["name"] == mount["name"])
    assert volume["persistentVolumeClaim"]["claimName"] in by_kind(rendered, "PersistentVolumeClaim")


def test_migrations_run_as_a_job(rendered: list[dict[str, Any]]) -> None:
    (job,) = by_kind(rendered, "Job").values()
    assert pod_spec(job)["containers"][0]["command"] == ["engram", "migrate"]
    assert pod_spec(job)["restartPolicy"] in ("OnFailure", "Never")


def test_keda_objects(rendered: list[dict[str, Any]]) -> None:
    """Structural checks of the KEDA custom resources (keda.sh/v1alpha1): kubernetes-validate has no schema for them."""
    auths = by_kind(rendered, "TriggerAuthentication")
    scaled = by_kind(rendered, "ScaledObject")
    deployments = by_kind(rendered, "Deployment")
    for auth in auths.values():
        assert auth["apiVersion"] == "keda.sh/v1alpha1"
        for ref in auth["spec"]["secretTargetRef"]:
            assert set(ref) == {"parameter", "name", "key"} and ref["name"] == "engram-secrets"
    assert set(scaled) == {f"worker-{pool}" for pool in POOLS}
    for name, obj in scaled.items():
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        spec = obj["spec"]
        assert set(spec) <= {
            "scaleTargetRef",
            "minReplicaCount",
            "maxReplicaCount",
            "pollingInterval",
            "cooldownPeriod",
            "triggers",
            "idleReplicaCount",
            "fallback",
            "advanced",
        }
        target = deployments[spec["scaleTargetRef"]["name"]]
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        # One trigger per queue of the pool, on that queue's Redis list, and one on the bulk-priority list of a
        # queue that gets bulk work (a transcript-embedding backlog waits there, not in the queue's own list).
        pool = name.removeprefix("worker-")
        expected = [*POOLS[pool], *(bulk_key(q) for q in POOLS[pool] if q in BULK_QUEUES)]
        assert [t["metadata"]["listName"] for t in spec["triggers"]] == expected
        env_names = {e["name"] for e in pod_spec(target)["containers"][0].get("env", [])}
        for trigger in spec["triggers"]:
            assert trigger["type"] == "redis"
            assert trigger["authenticationRef"]["name"] in auths
            meta = trigger["metadata"]
            assert meta["listName"] in {key for queue in QUEUES for key in broker_keys(queue)}
            assert isinstance(meta["listLength"], str) and int(meta["listLength"]) > 0  # KEDA wants strings
            assert meta["addressFromEnv"] in env_names  # read from the scale target's container


def test_same_image_commands_and_variables_as_compose(
    rendered: list[dict[str, Any]], compose_services: dict[str, dict[str, Any]]
) -> None:
    processes = {**by_kind(rendered, "Deployment"), "migrate": next(iter(by_kind(rendered, "Job").values()))}
    compose_engram = engram_services(compose_services)
    assert set(processes) == set(compose_engram)
    config = by_kind(rendered, "ConfigMap")["engram-config"]["data"]
    secret_keys = set(load_documents(K8S / "base" / "secret.example.yaml")[0]["stringData"])
    compose_image = compose_engram["gateway"]["image"].split(":")[0]
    # The Secret reaches every pod (envFrom); compose hands each variable only to the services using it.
    compose_anywhere = set().union(*(env(svc) for svc in compose_engram.values()))
    for name, obj in processes.items():
        container = pod_spec(obj)["containers"][0]
        assert container["image"].split(":")[0].rsplit("/", 1)[-1] == compose_image, name
        assert container["command"] == argv(compose_engram[name]), name
        k8s_names = set(config) | secret_keys | {e["name"] for e in container.get("env", [])}
        compose_names = env(compose_engram[name])
        engram_k8s = {n for n in k8s_names if n.startswith("ENGRAM_")}
        assert engram_k8s <= SETTINGS, sorted(engram_k8s - SETTINGS)
        # Every variable Kubernetes sets is one compose knows (no renamed or misspelt setting) …
        assert engram_k8s <= compose_anywhere, (name, sorted(engram_k8s - compose_anywhere))
        # … and every value compose fixes is provided in Kubernetes too (host pass-throughs are optional).
        fixed = {n for n, v in compose_names.items() if n.startswith("ENGRAM_") and v is not None}
        assert fixed <= engram_k8s, (name, sorted(fixed - engram_k8s))
