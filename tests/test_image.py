"""The image (deploy/Dockerfile) installs every program kbctl can run, runs as a numeric non-root user and writes
only to the volumes it declares; built and run by a container runtime where one and the base image are at hand."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.dockerfile import steps

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
BIN_FOLDERS = ("/usr/local/bin", "/usr/bin", "/bin")
# The Debian package that installs a program, where its name is not the program's.
PACKAGE_OF = {"ssh": "openssh-client", "kubectl": "kubernetes-client"}
# A program the image may leave out because another it installs does the same job: kbctl/sources/kustomize.py runs
# the first of kustomize and kubectl (`kubectl kustomize`) that is installed.
STANDS_IN_FOR = {"kubectl": "kustomize"}
# What starts a program: a module that uses one of these declares the programs it runs in EXTERNAL_PROGRAMS.
STARTERS = {("subprocess", name) for name in ("Popen", "run", "call", "check_call", "check_output", "getoutput")} | {
    ("os", name) for name in ("system", "popen", "execv", "execvp", "execve", "spawnv", "spawnvp", "posix_spawn")
}
STARTERS |= {("asyncio", "create_subprocess_exec"), ("asyncio", "create_subprocess_shell")}


def installed_packages(text: str) -> set[str]:
    """The packages the Dockerfile's `apt-get install` commands name."""
    packages: set[str] = set()
    for instruction, arguments in steps(text):
        if instruction != "RUN":
            continue
        for command in re.split(r"&&|;|\|\|", arguments):
            words = command.split()
            if words[:2] == ["apt-get", "install"]:
                packages |= {word for word in words[2:] if not word.startswith("-")}
    return packages


def copied_programs(text: str) -> set[str]:
    """The programs a COPY puts in a folder of PATH (`COPY --from=... /app/x /usr/local/bin/x`)."""
    programs = set()
    for instruction, arguments in steps(text):
        if instruction == "COPY":
            target = arguments.split()[-1]
            if target.rsplit("/", 1)[0] in BIN_FOLDERS:
                programs.add(target.rsplit("/", 1)[1])
    return programs


def missing_programs(programs: set[str], dockerfile: str) -> set[str]:
    """The programs that neither an installed package nor a copied file provides."""
    packages, copied = installed_packages(dockerfile), copied_programs(dockerfile)
    return {
        program for program in programs if PACKAGE_OF.get(program, program) not in packages and program not in copied
    }


def declared_programs() -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """{module: its EXTERNAL_PROGRAMS} over kbctl/, and the modules that start a program without declaring any."""
    declared: dict[str, tuple[str, ...]] = {}
    undeclared = []
    for path in sorted((ROOT / "kbctl").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        module = str(path.relative_to(ROOT))
        programs = None
        for node in tree.body:
            target: ast.expr
            if isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            else:
                continue
            if isinstance(target, ast.Name) and target.id == "EXTERNAL_PROGRAMS":
                programs = tuple(ast.literal_eval(value))
        starts = any(
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in STARTERS
            for node in ast.walk(tree)
        ) or any(
            isinstance(node, ast.ImportFrom) and any((node.module, alias.name) in STARTERS for alias in node.names)
            for node in ast.walk(tree)
        )
        if programs is not None:
            declared[module] = programs
        elif starts:
            undeclared.append(module)
    return declared, undeclared


def test_every_module_that_starts_a_program_declares_which() -> None:
    """A module of kbctl that starts a process says which programs it runs, so that the image can install them."""
    declared, undeclared = declared_programs()
    assert not undeclared, f"these modules start programs without an EXTERNAL_PROGRAMS tuple: {undeclared}"
    assert declared["kbctl/sources/git.py"] == ("git", "ssh")


def test_the_image_installs_every_program_kbctl_runs() -> None:
    """Each program of every EXTERNAL_PROGRAMS is installed by the Dockerfile (an apt package, or a copied binary)."""
    declared, _ = declared_programs()
    programs = {program for found in declared.values() for program in found}
    missing = missing_programs(programs, DOCKERFILE.read_text())
    missing = {program for program in missing if STANDS_IN_FOR.get(program) not in programs - missing}
    assert not missing, f"deploy/Dockerfile does not install {sorted(missing)} (kbctl runs them)"


def test_a_dockerfile_without_git_is_caught() -> None:
    """The check reads the Dockerfile, not a fixed answer: one that installs no git (as the image before did) fails."""
    text = DOCKERFILE.read_text().replace(" git openssh-client", " openssh-client")
    assert missing_programs({"git", "ssh"}, text) == {"git"}
    assert missing_programs({"kustomize"}, text + "\nCOPY --from=k /app/kustomize /usr/local/bin/kustomize\n") == set()


def test_the_image_runs_as_a_numeric_user_and_writes_only_to_its_volumes() -> None:
    """USER is numeric and not root (a Pod's runAsNonRoot can check it), and KBCTL_HOME and /tmp are volumes."""
    found = steps(DOCKERFILE.read_text())
    [user] = [arguments for instruction, arguments in found if instruction == "USER"][-1:]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and uid != "0" and gid.isdigit()
    env = " ".join(arguments for instruction, arguments in found if instruction == "ENV")
    [home] = re.findall(r"KBCTL_HOME=(\S+)", env)
    volumes = [json.loads(arguments) for instruction, arguments in found if instruction == "VOLUME"]
    assert sorted(path for volume in volumes for path in volume) == sorted([home, "/tmp"])
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # nothing written next to the installed modules
    commands = [json.loads(arguments) for instruction, arguments in found if instruction in ("ENTRYPOINT", "CMD")]
    assert commands[0][-1] == "kbctl" and commands[1][0] == "controller"


# ---------------------------------------------------------------- built and run, where a runtime can


def runtime() -> str | None:
    return next((name for name in ("podman", "docker") if shutil.which(name)), None)


@pytest.fixture(scope="module")
def image() -> Iterator[tuple[str, str]]:
    """(runtime, tag) of the image built from deploy/Dockerfile; skipped without a runtime or its base image."""
    program = runtime()
    if program is None:
        pytest.skip("no container runtime (podman or docker) installed")
    for base in [
        arguments.split()[0] for instruction, arguments in steps(DOCKERFILE.read_text()) if instruction == "FROM"
    ]:
        present = subprocess.run([program, "image", "inspect", base], capture_output=True).returncode == 0
        if not present and subprocess.run([program, "pull", base], capture_output=True).returncode != 0:
            pytest.skip(f"the base image {base} is neither present nor reachable (no container registry)")
    tag = f"localhost/kbctl-test:{uuid.uuid4().hex[:8]}"
    build = [program, "build", "--network", "host", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)]
    if program == "podman":
        build[2:2] = ["--isolation", "chroot"]  # builds where the runtime cannot create cgroups (in a container)
    result = subprocess.run(build, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    try:
        yield program, tag
    finally:
        subprocess.run([program, "rmi", "-f", tag], capture_output=True)


def run(image: tuple[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`kbctl ARGS` in the image as Kubernetes runs it: read-only root, no capabilities, tmpfs volumes."""
    program, tag = image
    command = [program, "run", "--rm", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    command += ["--tmpfs", "/tmp:mode=1777", "--tmpfs", "/var/lib/kbctl:uid=10001,gid=10001,mode=0700"]
    if program == "podman":
        command += ["--cgroups", "disabled"]
    return subprocess.run([*command, tag, *args], capture_output=True, text=True, timeout=600)


@pytest.mark.container
def test_the_image_runs_kbctl_help(image: tuple[str, str]) -> None:
    """`kbctl --help` runs in the image."""
    result = run(image, "--help")
    assert result.returncode == 0, result.stderr
    assert "controller" in result.stdout and "serve" in result.stdout


@pytest.mark.container
def test_the_image_runs_a_controller_pass_on_a_read_only_root(image: tuple[str, str]) -> None:
    """`kbctl controller --once` starts the embedded PostgreSQL in KBCTL_HOME and migrates it, writing nothing else;
    git is on the PATH of the user kbctl runs as."""
    result = run(image, "controller", "--once")
    assert result.returncode == 0, result.stdout + result.stderr
    program, tag = image
    git = subprocess.run(
        [program, "run", "--rm", "--read-only", "--cgroups", "disabled", "--entrypoint", "git", tag, "--version"]
        if program == "podman"
        else [program, "run", "--rm", "--read-only", "--entrypoint", "git", tag, "--version"],
        capture_output=True,
        text=True,
    )
    assert git.returncode == 0 and git.stdout.startswith("git version"), git.stderr
