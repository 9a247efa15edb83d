"""deploy/: the Dockerfile, the compose file and the Kubernetes manifests agree with the code.

Docker cannot run here, so the files are parsed: the port is the settings' default, every
XUN_* variable is one `proxy.settings` reads (and its value validates), probes hit routes the
app serves, and the image's entrypoint is the package's console script. The Dockerfile's
HEALTHCHECK command itself is run against a live proxy.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy import cli
from proxy.server.app import create_app
from proxy.setting_values import OPTIONS
from proxy.settings import CONFIG_ENV, Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
PORT = Settings.model_fields["port"].default
ENV_NAMES = {option.env for option in OPTIONS if option.env} | {CONFIG_ENV}
PROBE_PATHS = {"/healthz", "/readyz"}


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, args = line.strip().partition(" ")
            out.append((instruction.upper(), args.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = dockerfile()
    last_from = max(i for i, (instruction, _) in enumerate(steps) if instruction == "FROM")
    return steps[last_from:]


def docker_env(steps: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction, args in steps:
        if instruction == "ENV":
            for pair in shlex.split(args):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def check_env(env: dict[str, str]) -> None:
    """Every XUN_* name is one the settings read, and together the values validate."""
    xun = {name: value for name, value in env.items() if name.startswith("XUN_")}
    assert set(xun) <= ENV_NAMES, set(xun) - ENV_NAMES
    settings = load_settings({}, env={"XDG_STATE_HOME": "/state", **xun})
    if "XUN_PORT" in xun:
        assert settings.port == PORT


def console_scripts() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    scripts: dict[str, str] = project["scripts"]
    return scripts


# -- Dockerfile ------------------------------------------------------------------------------


def test_dockerfile_base_user_port_and_env() -> None:
    stage = final_stage()
    froms = [args for instruction, args in dockerfile() if instruction == "FROM"]
    assert all(args.split()[0] == "python:3.11-slim" for args in froms)
    users = [args for instruction, args in stage if instruction == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert [args for instruction, args in stage if instruction == "EXPOSE"] == [str(PORT)]
    env = docker_env(stage)
    assert env["XUN_HOST"] == "0.0.0.0" and env["XUN_PORT"] == str(PORT)
    check_env(env)


def test_dockerfile_entrypoint_is_the_console_script() -> None:
    stage = final_stage()
    [entrypoint] = [json.loads(args) for instruction, args in stage if instruction == "ENTRYPOINT"]
    [command] = [json.loads(args) for instruction, args in stage if instruction == "CMD"]
    assert entrypoint == ["xun-proxy"]
    assert console_scripts()["xun-proxy"] == "proxy.cli:main"
    assert command[0] in cli.COMMANDS


def test_dockerfile_installs_what_the_image_needs() -> None:
    steps = dockerfile()
    copied = [args.split()[0] for instruction, args in steps if instruction == "COPY"]
    assert {"pyproject.toml", "proxy"} <= set(copied)
    runs = " ".join(args for instruction, args in steps if instruction == "RUN")
    assert "[redis]" in runs  # the compose file and the replicas example use Redis
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert "!proxy/" in ignore and "!pyproject.toml" in ignore


def healthcheck_command() -> list[str]:
    [args] = [args for instruction, args in final_stage() if instruction == "HEALTHCHECK"]
    command: list[str] = json.loads(args[args.index("CMD") + 3 :].strip())
    return command


def test_dockerfile_healthcheck_probes_healthz(make_proxy: Any) -> None:
    command = healthcheck_command()
    assert "/healthz" in command[-1] and command[0] == "python"
    proxy = make_proxy()
    run = [sys.executable, *command[1:]]
    alive = subprocess.run(run, env={"XUN_PORT": str(proxy.port)}, timeout=30, check=False)
    assert alive.returncode == 0
    proxy.stop()
    dead = subprocess.run(
        run, env={"XUN_PORT": str(proxy.port)}, timeout=30, check=False, capture_output=True
    )
    assert dead.returncode != 0


# -- docker-compose --------------------------------------------------------------------------


def compose_value(value: Any) -> str:
    """`${VAR:-default}` becomes the default, `${VAR:?message}` a stand-in value."""
    text = str(value)
    text = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text)
    return re.sub(r"\$\{[A-Z_]+:\?[^}]*\}", "stand-in-value", text)


def test_compose_file() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"proxy", "redis"}
    proxy = services["proxy"]
    assert (DEPLOY / proxy["build"]["context"] / proxy["build"]["dockerfile"]).is_file()
    env = {name: compose_value(value) for name, value in proxy["environment"].items()}
    assert env["XUN_STORE"] == "redis://redis:6379/0"
    assert env["XUN_PORT"] == str(PORT)
    assert "${XUN_ADMIN_KEY:?" in proxy["environment"]["XUN_ADMIN_KEY"]  # required, no default
    check_env(env)
    assert [port.rsplit(":", 1)[-1] for port in proxy["ports"]] == [str(PORT)]
    assert proxy["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "redis-cli" in services["redis"]["healthcheck"]["test"]


# -- Kubernetes ------------------------------------------------------------------------------


def manifests(name: str) -> list[dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text()) if doc]
    for doc in docs:
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"]
    return docs


def pod_containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def literal_env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", "from-a-secret") for item in container.get("env", [])}


def port_number(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in container["ports"] if p["name"] == port)


def check_proxy_container(container: dict[str, Any]) -> None:
    assert container["image"].startswith("xun-proxy")
    assert [p["containerPort"] for p in container["ports"]] == [PORT]
    env = literal_env(container)
    assert env["XUN_PORT"] == str(PORT) and env["XUN_HOST"] == "0.0.0.0"
    check_env(env)
    secret = next(item for item in container["env"] if item["name"] == "XUN_ADMIN_KEY")
    assert "secretKeyRef" in secret["valueFrom"]  # 0.0.0.0 bind: admin needs a key
    probes = [container[name] for name in container if name.endswith("Probe")]
    assert {"livenessProbe", "readinessProbe"} <= set(container)
    for probe in probes:
        assert probe["httpGet"]["path"] in PROBE_PATHS
        assert port_number(container, probe["httpGet"]["port"]) == PORT
    assert container["securityContext"]["runAsUser"] != 0
    assert container["args"][0] in cli.COMMANDS


def test_sidecar_example() -> None:
    [deployment] = manifests("sidecar.yaml")
    containers = {c["name"]: c for c in pod_containers(deployment)}
    check_proxy_container(containers["xun-proxy"])
    assert containers["xun-proxy"]["restartPolicy"] == "Always"  # a native sidecar
    agent = literal_env(containers["agent"])
    assert agent["OPENAI_BASE_URL"] == f"http://localhost:{PORT}/v1"
    assert literal_env(containers["xun-proxy"])["XUN_STORE"].startswith("sqlite:////")


def test_replicas_example() -> None:
    docs = manifests("replicas.yaml")
    by_kind: dict[tuple[str, str], dict[str, Any]] = {
        (doc["kind"], doc["metadata"]["name"]): doc for doc in docs
    }
    deployment = by_kind[("Deployment", "xun-proxy")]
    assert deployment["spec"]["replicas"] >= 2
    [container] = pod_containers(deployment)
    check_proxy_container(container)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()

    store = literal_env(container)["XUN_STORE"]
    match = re.fullmatch(r"redis://([a-z0-9-]+):(\d+)/0", store)
    assert match, store
    redis_service = by_kind[("Service", match.group(1))]
    assert [p["port"] for p in redis_service["spec"]["ports"]] == [int(match.group(2))]
    redis_pods = [
        doc
        for doc in docs
        if doc["kind"] == "Deployment"
        and redis_service["spec"]["selector"].items()
        <= doc["spec"]["template"]["metadata"]["labels"].items()
    ]
    assert len(redis_pods) == 1

    service = by_kind[("Service", "xun-proxy")]
    assert service["spec"]["selector"].items() <= labels.items()
    [port] = service["spec"]["ports"]
    assert port["port"] == PORT and port_number(container, port["targetPort"]) == PORT
    drain = float(literal_env(container)["XUN_DRAIN_TIMEOUT"])
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain


@pytest.mark.parametrize("path", sorted(PROBE_PATHS | {"/metrics"}))
def test_probed_routes_exist(path: str) -> None:
    app = create_app(Settings(store_url="memory://"))
    assert path in {getattr(route, "path", None) for route in app.routes}
