"""`apply --prune` (apply sets, and legacy -l) and `diff --prune` on the real store, and kubectl's label selectors."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.engine.prune import PruneScope, prune_knowledge_bases
from kbctl.manifest import parse_manifests
from kbctl.manifest.selectors import Requirement, Selector, parse_selector
from tests.test_diff import usage_error

LABELS = {"web-a": "{team: web}", "web-b": "{team: web, tier: gold}", "ops": "{team: ops}", "bare": "{}"}


def manifest(name: str) -> str:
    """A one-source KnowledgeBase with the labels LABELS gives `name` (every KB shares its one text)."""
    return f"""apiVersion: kbctl.dev/v1alpha1
kind: KnowledgeBase
metadata:
  name: {name}
  labels: {LABELS[name]}
spec:
  sources:
    - name: note
      text: Office hours are 9:00 to 17:30 on working days.
"""


@pytest.fixture
def four(store: KnowledgeBaseStore, tmp_path: Path) -> str:
    """Four KBs in the store (web-a, web-b, ops, bare); returns the path of a file holding web-a's manifest only."""
    store.apply(parse_manifests("---\n".join(manifest(n) for n in LABELS), "kb.yaml"))
    path = tmp_path / "web-a.yaml"
    path.write_text(manifest("web-a"))
    return str(path)


def names(store: KnowledgeBaseStore) -> list[str]:
    """The knowledge bases in the store, by name."""
    return [k.name for k in store.list()]


def test_prune_deletes_only_matching_unlisted(store: KnowledgeBaseStore, cli: CliRunner, four: str) -> None:
    """`apply --prune -l team=web` deletes web-b (matches, not listed), never web-a (listed) or the others."""
    result = cli.invoke(app, ["apply", "--wait", "-f", four, "--prune", "-l", "team=web"])
    assert (result.exit_code, result.stdout.splitlines()) == (
        0,
        ["KnowledgeBase/web-a unchanged (version 1)", "KnowledgeBase/web-b pruned", "applied 1 resource"],
    )
    assert names(store) == ["bare", "ops", "web-a"]
    again = cli.invoke(app, ["apply", "--wait", "-f", four, "--prune", "-l", "team=web", "--exit-code"])
    assert (again.exit_code, again.stdout.splitlines()[1:]) == (0, ["applied 1 resource"])


def test_prune_exit_code_and_json(store: KnowledgeBaseStore, cli: CliRunner, four: str) -> None:
    """A prune counts as a change for --exit-code (2), and -o json lists the pruned names."""
    nothing = cli.invoke(
        app, ["apply", "--wait", "-f", four, "--prune", "-l", "tier=silver", "-o", "json", "--exit-code"]
    )
    assert (nothing.exit_code, nothing.stdout.endswith('"pruned": []\n}\n')) == (0, True)
    result = cli.invoke(app, ["apply", "--wait", "-f", four, "--prune", "-l", "team!=web", "-o", "json", "--exit-code"])
    assert result.exit_code == 2
    assert result.stdout.endswith('"pruned": [\n    "bare",\n    "ops"\n  ]\n}\n')
    assert names(store) == ["web-a", "web-b"]


def test_prune_refuses_without_a_selector(store: KnowledgeBaseStore, cli: CliRunner, four: str) -> None:
    """--prune without --applyset or -l (or -l without --prune) is a usage error, exit 2, and nothing is applied or
    deleted."""
    before = store.db.counts()
    bare = cli.invoke(app, ["apply", "--wait", "-f", four, "--prune"])
    assert (bare.exit_code, usage_error(bare.output)) == (
        2,
        "Invalid value for '--prune': --prune needs an apply set (--applyset NAME) or a label selector (-l): kbctl "
        "never prunes everything",
    )
    bad_set = cli.invoke(app, ["apply", "--wait", "-f", four, "--prune", "--applyset", "Repo_A"])
    assert bad_set.exit_code == 2 and "Invalid value for '--applyset'" in bad_set.output
    alone = cli.invoke(app, ["apply", "--wait", "-f", four, "-l", "team=web"])
    assert (alone.exit_code, usage_error(alone.output)) == (
        2,
        "Invalid value for '-l' / '--selector': -l selects what --prune deletes: add --prune",
    )
    empty = cli.invoke(app, ["diff", "-f", four, "--prune", "-l", " "])
    assert (empty.exit_code, usage_error(empty.output)) == (
        2,
        "Invalid value for '-l' / '--selector': the label selector is empty: give at least one requirement, "
        "e.g. team=web",
    )
    assert store.db.counts() == before and names(store) == ["bare", "ops", "web-a", "web-b"]


def test_dry_run_prune_deletes_nothing(store: KnowledgeBaseStore, cli: CliRunner, four: str) -> None:
    """`apply --dry-run --prune` and `diff --prune` name what would be pruned and delete nothing."""
    before = store.db.counts()
    dry = cli.invoke(app, ["apply", "-f", four, "--dry-run", "--prune", "-l", "team=web"])
    assert (dry.exit_code, dry.stdout.splitlines()) == (
        0,
        ["KnowledgeBase/web-a unchanged (dry run)", "KnowledgeBase/web-b pruned (dry run)"],
    )
    diff = cli.invoke(app, ["diff", "-f", four, "--prune", "-l", "tier"])
    assert (diff.exit_code, diff.stdout.splitlines()) == (
        1,
        ["KnowledgeBase/web-a unchanged", "KnowledgeBase/web-b pruned"],
    )
    assert store.db.counts() == before and names(store) == ["bare", "ops", "web-a", "web-b"]


def test_prune_library_matches_kubectl_semantics(store: KnowledgeBaseStore, four: str) -> None:
    """prune_knowledge_bases: `k!=v` also selects KBs without k, `!k` those without it; kept names survive."""
    assert prune_knowledge_bases(store.db, ["ops"], PruneScope(selector=parse_selector("team!=web"))) == ["bare"]
    assert prune_knowledge_bases(store.db, [], PruneScope(selector=parse_selector("!tier,team==web"))) == ["web-a"]
    assert prune_knowledge_bases(store.db, ["web-b"], PruneScope(selector=parse_selector("tier=gold"))) == []
    assert names(store) == ["ops", "web-b"]
    with pytest.raises(TypeError, match="not a single string"):
        prune_knowledge_bases(store.db, "web-b", PruneScope(selector=parse_selector("tier")))
    with pytest.raises(ValueError, match="never prunes everything"):
        PruneScope()


def _repo(tmp_path: Path, repo: str, *kbs: str) -> str:
    """A folder of manifests (one file per knowledge base, every one labelled team=web)."""
    folder = tmp_path / repo
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.yaml"):
        old.unlink()
    for name in kbs:
        (folder / f"{name}.yaml").write_text(manifest("web-a").replace("name: web-a", f"name: {name}"))
    return str(folder)


def test_two_repositories_with_the_same_labels_never_prune_each_other(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """Each repository applies with its own --applyset; both label everything team=web. Removing a manifest
    from one prunes only that repository's knowledge base, even when the prune is narrowed by the shared label,
    and the legacy label-only prune never deletes a member of an apply set."""

    def apply(repo: str, *kbs: str, extra: tuple[str, ...] = ()) -> list[str]:
        result = cli.invoke(app, ["apply", "--wait", "-f", _repo(tmp_path, repo, *kbs), "--prune", *extra])
        assert result.exit_code == 0, result.output
        return result.stdout.splitlines()

    apply("repo-a", "a-one", "a-two", extra=("--applyset", "repo-a"))
    apply("repo-b", "b-one", "b-two", extra=("--applyset", "repo-b"))
    assert names(store) == ["a-one", "a-two", "b-one", "b-two"]
    lines = apply("repo-a", "a-one", extra=("--applyset", "repo-a", "-l", "team=web"))
    assert "KnowledgeBase/a-two pruned" in lines and not [line for line in lines if "b-" in line]
    assert names(store) == ["a-one", "b-one", "b-two"]
    diff = cli.invoke(app, ["diff", "-f", _repo(tmp_path, "repo-b", "b-one"), "--prune", "--applyset", "repo-b"])
    assert diff.stdout.splitlines()[-1] == "KnowledgeBase/b-two pruned"
    legacy = cli.invoke(app, ["apply", "--wait", "-f", _repo(tmp_path, "old", "web-a"), "--prune", "-l", "team=web"])
    assert legacy.exit_code == 0 and "pruned" not in legacy.stdout  # every other one belongs to an apply set
    assert "warning: --prune -l without --applyset" in legacy.stderr
    assert names(store) == ["a-one", "b-one", "b-two", "web-a"]
    moved = cli.invoke(app, ["apply", "--wait", "-f", _repo(tmp_path, "repo-a", "b-one"), "--applyset", "repo-a"])
    assert moved.exit_code == 1
    assert moved.stderr == (
        "Error: KnowledgeBase/b-one belongs to apply set 'repo-b', not 'repo-a': apply it with --applyset repo-b, "
        "or delete it first\n"
    )
    assert names(store) == ["a-one", "b-one", "b-two", "web-a"]


def test_an_apply_set_without_wait_records_its_members(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """apply --applyset without --wait records the members (for a controller to reconcile) and prunes the rest."""
    first = cli.invoke(app, ["apply", "-f", _repo(tmp_path, "repo", "one", "two"), "--applyset", "repo"])
    assert first.exit_code == 0, first.output
    second = cli.invoke(app, ["apply", "-f", _repo(tmp_path, "repo", "one"), "--applyset", "repo", "--prune"])
    assert second.exit_code == 0 and "KnowledgeBase/two pruned" in second.stdout.splitlines()
    assert names(store) == ["one"]
    assert store.db.get_kb("one").applyset == "repo"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("team=web", {"team": "web"}, True),
        ("team==web", {"team": "web"}, True),
        ("team=web", {"team": "ops"}, False),
        ("team!=web", {"team": "ops"}, True),
        ("team!=web", {}, True),
        ("team!=web", {"team": "web"}, False),
        ("team", {"team": ""}, True),
        ("team", {"tier": "gold"}, False),
        ("!team", {"tier": "gold"}, True),
        ("!team", {"team": "web"}, False),
        (" team = web , !tier ", {"team": "web"}, True),
        ("team=web,!tier", {"team": "web", "tier": "gold"}, False),
        ("team=", {"team": ""}, True),
        ("example.com/team=web", {"example.com/team": "web"}, True),
        ("team in (web,ops)", {"team": "ops"}, True),
        ("team in (web,ops)", {"team": "db"}, False),
        ("team in (web,ops)", {}, False),
        ("team notin (web,ops)", {"team": "db"}, True),
        ("team notin (web,ops)", {}, True),
        ("team notin (web,ops)", {"team": "web"}, False),
        ("team in (web, ops),tier=gold", {"team": "web", "tier": "gold"}, True),
    ],
)
def test_selector_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    """Each equality-based requirement matches as kubectl's does; a comma is AND."""
    assert parse_selector(text).matches(labels) is expected


def test_selector_parses_to_requirements() -> None:
    """parse_selector gives one Requirement per comma-separated part, printed back in canonical form."""
    selector = parse_selector("team==web, !tier,env!=prod,owner,zone in (a, b)")
    assert selector == Selector(
        (
            Requirement("team", "=", "web"),
            Requirement("tier", "!exists"),
            Requirement("env", "!=", "prod"),
            Requirement("owner", "exists"),
            Requirement("zone", "in", values=("a", "b")),
        )
    )
    assert str(selector) == "team=web,!tier,env!=prod,owner,zone in (a,b)"


ACCEPTED = "use key=value, key==value, key!=value, key, !key, key in (a,b) or key notin (a,b)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the label selector is empty: give at least one requirement, e.g. team=web"),
        ("team=web,", "'team=web,' has an empty requirement (a stray comma?)"),
        ("team in (web", "'team in (web' is not a requirement: " + ACCEPTED),
        ("team in ()", "'team in ()': in needs at least one value, e.g. team in (a,b)"),
        ("=web", "'=web' is not a requirement: " + ACCEPTED),
        ("!team=web", "'!team=web' is not a requirement: " + ACCEPTED),
        ("team=a b", "'team=a b' is not a requirement: " + ACCEPTED),
        (
            "team=-web",
            "'team=-web': invalid label value: must be empty or 1-63 characters of letters, digits, '-', '_' and "
            "'.', starting and ending with a letter or digit",
        ),
        (
            "Team_/x",
            "'Team_/x': invalid label key: the prefix before '/' must be a DNS subdomain (lowercase letters, "
            "digits, '-' and '.', at most 253 characters)",
        ),
    ],
)
def test_selector_syntax_errors(text: str, message: str) -> None:
    """Bad selectors raise ValueError naming the bad part and the accepted forms."""
    with pytest.raises(ValueError) as caught:
        parse_selector(text)
    assert str(caught.value) == message


def test_empty_selector_cannot_be_built() -> None:
    """A Selector without requirements (which would select everything) cannot exist."""
    with pytest.raises(ValueError, match="at least one requirement"):
        Selector(())
