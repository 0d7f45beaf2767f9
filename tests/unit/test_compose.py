"""docker-compose.yml describes the same stack as `engram up`: checked statically, no Docker needed.

These tests catch drift: a queue added to shared/queueing/queues.py that no container consumes, a setting
renamed in shared/infra/config.py but still spelled the old way in the compose file, a port published
on every interface.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from ops.process_commands import beat_argv, flower_argv, gateway_argv, pool_argv
from shared.infra.config import Settings
from shared.queueing.queues import BACKGROUND_QUEUES, INTERACTIVE_QUEUES, POOLS, QUEUES

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    # safe_load resolves the YAML anchors and `<<` merge keys the file uses, as compose does.
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def argv(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def env(service: dict[str, Any]) -> dict[str, str | None]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        pairs = (item.split("=", 1) if "=" in item else (item, None) for item in raw)
        return {key: value for key, value in pairs}
    return {key: None if value is None else str(value) for key, value in raw.items()}


def engram_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Services that run the engram image (built from ops/Dockerfile)."""
    return {
        name: svc
        for name, svc in services.items()
        if isinstance(svc.get("build"), dict) and svc["build"].get("dockerfile") == "ops/Dockerfile"
    }


def engram_worker_pool(service: dict[str, Any]) -> str | None:
    """The pool of an `engram worker POOL` command (ops/process_commands.py builds its Celery command line)."""
    args = argv(service)
    return args[2] if args[:2] == ["engram", "worker"] and len(args) == 3 else None


def is_celery_worker(service: dict[str, Any]) -> bool:
    args = argv(service)
    return ("celery" in args and "worker" in args) or engram_worker_pool(service) is not None


def worker_queues(service: dict[str, Any]) -> set[str]:
    pool = engram_worker_pool(service)
    if pool is not None:
        if pool not in POOLS:
            return set()
        command = pool_argv(Settings(_env_file=None), pool)
        return set(command[command.index("-Q") + 1].split(","))
    args = argv(service)
    for i, arg in enumerate(args):
        if arg in ("-Q", "--queues") and i + 1 < len(args):
            return set(args[i + 1].split(","))
        if arg.startswith("--queues="):
            return set(arg.split("=", 1)[1].split(","))
    return set()  # no -Q: Celery would consume only its default queue


def workers(services: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    return {name: worker_queues(svc) for name, svc in services.items() if is_celery_worker(svc)}


def test_core_services_present(services: dict[str, dict[str, Any]]) -> None:
    assert {"postgres", "redis", "migrate", "gateway", "proxy", "beat", "flower"} <= services.keys()
    assert "pgvector" in services["postgres"]["image"], "the schema needs the vector extension"
    assert services["redis"]["image"].startswith("redis:")


def test_every_engram_process_uses_the_project_image(services: dict[str, dict[str, Any]]) -> None:
    expected = {"migrate", "gateway", "beat", "flower", *workers(services)}
    assert expected <= engram_services(services).keys()
    assert (ROOT / "ops" / "Dockerfile").is_file()


def test_every_queue_is_consumed(services: dict[str, dict[str, Any]]) -> None:
    consumed = set().union(*workers(services).values())
    assert set(QUEUES) <= consumed, f"no worker consumes {sorted(set(QUEUES) - consumed)}"
    assert consumed <= set(QUEUES), f"workers consume unknown queues {sorted(consumed - set(QUEUES))}"


def test_each_queue_group_has_its_own_worker(services: dict[str, dict[str, Any]]) -> None:
    groups = workers(services).values()
    # Turns are interactive: a worker that also takes background work could leave them waiting
    # behind a long extraction or compaction task.
    assert any(set(INTERACTIVE_QUEUES) <= queues for queues in groups)
    assert not any(queues & set(INTERACTIVE_QUEUES) and queues & set(BACKGROUND_QUEUES) for queues in groups)
    # One pool per queue group of shared/queueing/queues.py, named after it.
    assert workers(services) == {f"worker-{pool}": set(queues) for pool, queues in POOLS.items()}
    for name in workers(services):
        pool = engram_worker_pool(services[name])
        args = pool_argv(Settings(_env_file=None), pool) if pool else argv(services[name])
        assert "--without-mingle" in args and "--without-gossip" in args, name


def test_two_beats_share_the_redbeat_lock(services: dict[str, dict[str, Any]]) -> None:
    # Two plain beats would schedule every periodic task twice; RedBeat's Redis lock lets one run.
    beats = [name for name, svc in services.items() if "celery" in argv(svc) and "beat" in argv(svc)]
    assert beats == ["beat"]
    args = argv(services["beat"])
    assert args[args.index("-S") + 1] == "workers.beat:Scheduler"
    assert services["beat"]["deploy"]["replicas"] == 2


def test_the_commands_are_the_ones_engram_builds(services: dict[str, dict[str, Any]]) -> None:
    """ops/process_commands.py builds every process's command line (`engram up` and the tests run it); the YAML
    cannot call it, so it spells the same commands, with the console scripts where the builder runs `python -m`."""
    assert argv(services["gateway"]) == gateway_argv("0.0.0.0", 8000)[2:]
    assert argv(services["beat"]) == beat_argv("INFO")[2:]
    assert argv(services["flower"]) == flower_argv("0.0.0.0", 5555, db="/var/lib/flower/flower.db")[2:]
    for pool in POOLS:
        assert argv(services[f"worker-{pool}"]) == ["engram", "worker", pool]  # executes pool_argv


def test_engram_services_reach_postgres_and_redis(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in engram_services(services).items():
        variables = env(svc)
        database_url = variables.get("ENGRAM_DATABASE_URL") or ""
        redis_url = variables.get("ENGRAM_REDIS_URL") or ""
        assert re.match(r"postgresql://[^@]+@postgres:5432/\w+$", database_url), (name, database_url)
        assert re.match(r"redis://redis:6379/\d+$", redis_url), (name, redis_url)


def test_engram_variables_are_real_settings(services: dict[str, dict[str, Any]]) -> None:
    # pydantic-settings silently ignores unknown ENGRAM_* variables, so a typo would go unnoticed.
    known = {f"ENGRAM_{field.upper()}" for field in Settings.model_fields}
    for name, svc in engram_services(services).items():
        unknown = {key for key in env(svc) if key.startswith("ENGRAM_")} - known
        assert not unknown, f"{name}: not settings: {sorted(unknown)}"


def test_dev_key_and_llm_settings_come_from_the_host(services: dict[str, dict[str, Any]]) -> None:
    variables = env(services["gateway"])
    # Required (`:?`): compose refuses to start without it instead of shipping a well-known key.
    assert re.fullmatch(r"\$\{ENGRAM_DEV_API_KEY:\?[^}$]+\}", variables["ENGRAM_DEV_API_KEY"] or "")
    for key in ("ENGRAM_LLM_PROVIDER", "ENGRAM_ANTHROPIC_API_KEY", "ENGRAM_OPENAI_API_KEY", "ENGRAM_OPENAI_BASE_URL"):
        # No value = passed through when set on the host, absent otherwise; an empty-string default
        # would turn "unset" into "" (an invalid provider name, an empty key).
        assert key in variables and variables[key] is None, key


def test_migrate_runs_once_before_the_stack(services: dict[str, dict[str, Any]]) -> None:
    migrate = services["migrate"]
    assert argv(migrate) == ["engram", "migrate"]
    assert str(migrate.get("restart", "no")) == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name, svc in engram_services(services).items():
        if name in ("migrate", "flower"):
            continue  # flower only reads the broker
        depends = svc.get("depends_on") or {}
        assert depends.get("migrate", {}).get("condition") == "service_completed_successfully", name
        assert depends.get("redis", {}).get("condition") == "service_healthy", name


def test_gateway_command_and_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    gateway = services["gateway"]
    args = argv(gateway)
    assert args[:3] == ["uvicorn", "ops.gateway:create_app", "--factory"]
    assert args[args.index("--host") + 1] == "0.0.0.0"
    assert "/readyz" in " ".join(gateway["healthcheck"]["test"])
    # Two replicas, reached only through the proxy.
    assert gateway["deploy"]["replicas"] == 2
    assert not gateway.get("ports")


def test_the_proxy_balances_the_gateways_on_readiness(services: dict[str, dict[str, Any]]) -> None:
    proxy = services["proxy"]
    assert proxy["image"].startswith("haproxy:")
    mount = next(v for v in proxy["volumes"] if v.endswith(":/usr/local/etc/haproxy/haproxy.cfg:ro"))
    config = (ROOT / mount.split(":")[0]).read_text()
    assert re.search(r"^\s*server-template \w+ \d+ gateway:8000 check .*resolvers docker", config, re.M)
    assert re.search(r"^\s*option httpchk GET /readyz", config, re.M)
    # Long polls and event streams (300 s) must outlive the proxy's server timeout.
    timeout = int(re.search(r"^\s*timeout server (\d+)s", config, re.M).group(1))  # type: ignore[union-attr]
    assert timeout > Settings(_env_file=None).sse_max_seconds  # type: ignore[call-arg]


def test_backing_services_have_healthchecks_and_volumes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "ping" in services["redis"]["healthcheck"]["test"]
    redis_args = argv(services["redis"])
    assert redis_args[redis_args.index("--appendonly") + 1] == "yes"
    # A full Redis must refuse writes, never evict queued tasks or locks.
    assert redis_args[redis_args.index("--maxmemory-policy") + 1] == "noeviction"
    for name, mount in (("postgres", "/var/lib/postgresql/data"), ("redis", "/data")):
        volume = next(v.split(":")[0] for v in services[name]["volumes"] if v.split(":")[1] == mount)
        assert volume in compose["volumes"], name


def test_published_ports_are_loopback_only(services: dict[str, dict[str, Any]]) -> None:
    published = {}
    for name, svc in services.items():
        for port in svc.get("ports") or []:
            if isinstance(port, dict):
                host_ip = port.get("host_ip")
                published[f"{name}:{port.get('published')}"] = host_ip
            else:
                parts = str(port).split(":")
                published[f"{name}:{parts[-2] if len(parts) > 1 else parts[0]}"] = parts[0] if len(parts) == 3 else None
    assert published.keys() == {"proxy:8000", "flower:5555", "prometheus:9090", "grafana:3000"}
    assert all(host_ip == "127.0.0.1" for host_ip in published.values()), published


def test_no_credential_has_a_default_value() -> None:
    text = COMPOSE_FILE.read_text()
    defaulted = re.findall(r"\$\{(\w*(?:KEY|PASSWORD|SECRET|TOKEN|AUTH)\w*):?-", text)
    assert defaulted == [], f"credentials with a default value: {defaulted}"
    assert "egm_" not in "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def test_every_interpolation_is_well_formed() -> None:
    # Compose rejects a `$` that does not start `${NAME...}`, `$NAME` or `$$`, e.g. a `$(` in a message.
    for number, line in enumerate(COMPOSE_FILE.read_text().splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        rest = re.sub(r"\$\$|\$\{[A-Za-z_]\w*(?:(?::?[-?])[^}$]*)?\}|\$[A-Za-z_]\w*", "", line)
        assert "$" not in rest, f"line {number}: {line.strip()}"


def test_flower_always_asks_for_a_login(services: dict[str, dict[str, Any]], compose: dict[str, Any]) -> None:
    flower = services["flower"]
    args = argv(flower)
    # Task history survives a restart: the state file is on a named volume.
    assert "--persistent=True" in args
    db_dir = next(a for a in args if a.startswith("--db=")).split("=", 1)[1].rsplit("/", 1)[0]
    volume = next(v.split(":")[0] for v in flower["volumes"] if v.split(":")[1] == db_dir)
    assert volume in compose["volumes"]
    variables = env(flower)
    assert "FLOWER_UNAUTHENTICATED_API" not in variables
    assert re.fullmatch(
        r"\$\{ENGRAM_FLOWER_USER:-engram\}:\$\{ENGRAM_FLOWER_PASSWORD:\?[^}$]+\}", variables["FLOWER_BASIC_AUTH"] or ""
    )


def test_monitoring_profile_scrapes_every_process_and_loads_the_dashboard(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"], name
    # Prometheus: the gateway and every worker pool, with the metrics key (a compose secret from the env).
    config = yaml.safe_load((ROOT / "ops" / "compose" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert compose["secrets"]["metrics_api_key"] == {"environment": "ENGRAM_METRICS_API_KEY"}
    assert "metrics_api_key" in services["prometheus"]["secrets"]
    for job in jobs.values():
        assert job["authorization"]["credentials_file"] == "/run/secrets/metrics_api_key"
    gateway_names = jobs["engram-gateway"]["dns_sd_configs"][0]["names"]
    worker_sd = jobs["engram-workers"]["dns_sd_configs"][0]
    assert gateway_names == ["gateway"]
    assert set(worker_sd["names"]) == set(workers(services))
    port = env(services["worker-turns"])["ENGRAM_WORKER_METRICS_PORT"]
    assert worker_sd["port"] == int(port or 0)
    # Grafana: provisioned with a Prometheus datasource and the dashboard folder holding ops/grafana/engram.json.
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services["grafana"]["volumes"]}
    assert (ROOT / mounts["/var/lib/grafana/dashboards"] / "engram.json").is_file()
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    provider = yaml.safe_load((provisioning / "dashboards" / "engram.yml").read_text())["providers"][0]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    datasource = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"


def test_compose_config_is_accepted_by_docker_compose_where_installed() -> None:
    """`docker compose config` when the plugin exists (it does not on every machine; the tests above parse
    the YAML either way)."""
    import os
    import shutil
    import subprocess

    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        return
    environment = {
        **os.environ,
        "ENGRAM_DEV_API_KEY": "egm_x",
        "ENGRAM_FLOWER_PASSWORD": "x",
        "ENGRAM_METRICS_API_KEY": "egm_y",
        "GRAFANA_ADMIN_PASSWORD": "x",
    }
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE_FILE), "--profile", "monitoring", "config", "--quiet"],
        capture_output=True,
        text=True,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
