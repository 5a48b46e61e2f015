"""deploy/'s overlays render (`kubectl kustomize`) into what a restricted namespace admits and what kbctl runs: the
kinds, hardened pods, probes on the paths and ports the commands serve, one image, no secret value in git."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.serve.app import PUBLIC_PATHS
from kbctl.serve.controller import parse_address
from kbctl.userconfig import load_config

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
IMAGE = "registry.example.com/kbctl:"
SECRET_WORDS = ("TOKEN", "PASSWORD", "DATABASE_URL", "KEY", "SECRET")


def render(overlay: str) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize deploy/overlays/OVERLAY` prints."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed (CI installs Debian's kubernetes-client)")
    result = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "overlays" / overlay)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def objects(rendered: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["name"]: item for item in rendered if item["kind"] == kind}


def options(args: list[str]) -> dict[str, Any]:
    """`kbctl ARGS` parsed by the real command (ARGS[0] names it)."""
    group = typer.main.get_command(app)
    command = group.get_command(group.make_context("kbctl", [args[0]]), args[0])  # type: ignore[attr-defined]
    return dict(command.make_context(args[0], args[1:]).params)


def pod_containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    spec = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.fixture(params=["demo", "production"])
def overlay(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(request.param)


def test_each_overlay_has_the_objects_kbctl_runs_with(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    """Both Deployments, serve's Service, an account, a network policy, disruption budgets and the two ConfigMaps."""
    name, rendered = overlay
    kinds = {item["kind"] for item in rendered}
    expected = {"Deployment", "Service", "ServiceAccount", "NetworkPolicy", "PodDisruptionBudget", "ConfigMap"}
    assert expected <= kinds
    assert set(objects(rendered, "Deployment")) == {"kbctl-controller", "kbctl-serve"}
    assert ("PersistentVolumeClaim" in kinds) == (name == "demo")
    namespaces = {item["metadata"].get("namespace") for item in rendered}
    assert namespaces == {"kbctl-demo" if name == "demo" else "kbctl"}
    [account] = objects(rendered, "ServiceAccount").values()
    assert account["automountServiceAccountToken"] is False


def test_every_pod_is_restricted(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    """Non-root as the image's user, read-only root, no capabilities, no privilege escalation, RuntimeDefault
    seccomp, no service account token; /tmp and KBCTL_HOME writable volumes."""
    _, rendered = overlay
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    [user] = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("USER ")]
    for deployment in objects(rendered, "Deployment").values():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}" == user
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        for container in pod_containers(deployment):
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}
            mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
            assert "emptyDir" in volumes[mounts["/tmp"]]
            assert set(volumes[mounts["/var/lib/kbctl"]]) & {"emptyDir", "persistentVolumeClaim"}
            assert "resources" in container and "memory" in container["resources"]["limits"]


def test_one_image_for_every_container(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    """Every container runs the same kbctl image, its name and tag set once (kustomize's `images`)."""
    _, rendered = overlay
    images = {c["image"] for d in objects(rendered, "Deployment").values() for c in pod_containers(d)}
    assert len(images) == 1 and next(iter(images)).startswith(IMAGE)


def test_probes_ask_the_paths_and_ports_the_commands_serve(overlay: tuple[str, list[dict[str, Any]]]) -> None:
    """The controller's probes hit /healthz and /readyz on --metrics-address, serve's on --port; args parse."""
    name, rendered = overlay
    containers = {c["name"]: c for d in objects(rendered, "Deployment").values() for c in pod_containers(d)}
    controller = containers["controller"]
    _, metrics_port = parse_address(options(controller["args"])["metrics_address"])
    serve = containers["serve"]
    serve_port = options(serve["args"])["port"]
    assert {"/healthz", "/readyz"} <= PUBLIC_PATHS
    for container, port in ((controller, metrics_port), (serve, serve_port)):
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        for probe in ("livenessProbe", "readinessProbe"):
            assert ports[container[probe]["httpGet"]["port"]] == port
    [service] = objects(rendered, "Service").values()
    [port] = service["spec"]["ports"]
    serving = [
        d
        for d in objects(rendered, "Deployment").values()
        if d["spec"]["replicas"] > 0 and any(c["name"] == "serve" for c in d["spec"]["template"]["spec"]["containers"])
    ]
    assert len(serving) == 1, f"{name}: one Deployment runs serve's pods"
    labels = serving[0]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert port["targetPort"] in {p["name"] for p in serve["ports"]}


def test_no_secret_value_is_in_the_manifests(overlay: tuple[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    """No Secret object, every secret-looking variable from a secretKeyRef, the configuration names its tokens'
    variables, and those variables come from the Secret."""
    _, rendered = overlay
    assert "Secret" not in {item["kind"] for item in rendered}
    for deployment in objects(rendered, "Deployment").values():
        for container in pod_containers(deployment):
            for variable in container.get("env", []):
                if any(word in variable["name"] for word in SECRET_WORDS):
                    assert "value" not in variable, variable["name"]
                    assert "secretKeyRef" in variable["valueFrom"], variable["name"]
    [config_map] = [item for item in rendered if item["metadata"]["name"].startswith("kbctl-config")]
    path = Path(config_map["metadata"]["name"])
    serve = next(c for d in objects(rendered, "Deployment").values() for c in pod_containers(d) if c["name"] == "serve")
    from_secrets = {v["name"] for v in serve["env"] if "secretKeyRef" in v.get("valueFrom", {})}
    text = config_map["data"]["config.yaml"]
    assert text
    config_file = tmp_path / "config.yaml"
    config_file.write_text(text)
    config = load_config(config_file)
    assert config.serve.tokens, path
    assert {token.token_env for token in config.serve.tokens.values()} <= from_secrets


def test_the_sync_configured_is_a_valid_sync(overlay: tuple[str, list[dict[str, Any]]], tmp_path: Path) -> None:
    """The ConfigMap's sync.yaml is a Sync kbctl accepts, and the controller pod applies it before it starts."""
    _, rendered = overlay
    [config_map] = [item for item in rendered if item["metadata"]["name"].startswith("kbctl-sync")]
    (tmp_path / "sync.yaml").write_text(config_map["data"]["sync.yaml"])
    result = CliRunner().invoke(app, ["validate", "-f", str(tmp_path / "sync.yaml")])
    assert result.exit_code == 0 and "Sync/knowledge valid" in result.output, result.output
    controller = objects(rendered, "Deployment")["kbctl-controller"]
    [init] = controller["spec"]["template"]["spec"]["initContainers"]
    command = " ".join(init.get("command", []) + init.get("args", []))
    assert "apply -f /etc/kbctl/sync/" in command
    mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
    volumes = {v["name"]: v for v in controller["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/etc/kbctl/sync"]]["configMap"]["name"] == config_map["metadata"]["name"]


def test_production_reads_an_external_database_from_a_secret() -> None:
    """Every kbctl container in production has KBCTL_DATABASE_URL from the Secret kbctl-database."""
    rendered = render("production")
    for deployment in objects(rendered, "Deployment").values():
        assert deployment["spec"]["replicas"] >= 2
        for container in pod_containers(deployment):
            [url] = [v for v in container["env"] if v["name"] == "KBCTL_DATABASE_URL"]
            assert url["valueFrom"]["secretKeyRef"] == {"name": "kbctl-database", "key": "url"}


def test_the_demo_runs_the_embedded_server_in_one_pod_on_a_claim() -> None:
    """The demo: no database URL; controller and serve in one pod of one replica, replaced by Recreate, sharing the
    claim as KBCTL_HOME, /tmp and their process namespace; the init container stops the server it started."""
    rendered = render("demo")
    deployments = objects(rendered, "Deployment")
    assert deployments["kbctl-serve"]["spec"]["replicas"] == 0
    demo = deployments["kbctl-controller"]
    assert demo["spec"]["replicas"] == 1 and demo["spec"]["strategy"] == {"type": "Recreate"}
    pod = demo["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True
    assert {c["name"] for c in pod["containers"]} == {"controller", "serve"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    [claim] = objects(rendered, "PersistentVolumeClaim")
    for container in pod_containers(demo):
        assert "KBCTL_DATABASE_URL" not in {v["name"] for v in container.get("env", [])}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert volumes[mounts["/var/lib/kbctl"]]["persistentVolumeClaim"] == {"claimName": claim}
        assert mounts["/tmp"] == "tmp"
    [init] = pod["initContainers"]
    assert init["command"][-1].endswith("&& kbctl server stop")
