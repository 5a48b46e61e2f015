"""Each version's similarity threshold, calibrated at publish from the background questions
(kbctl.embedding.background): computed as a query would find it, stored with the version, used when the spec sets
none, shown by describe."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kbctl.cli import app
from kbctl.client import KnowledgeBaseStore
from kbctl.defaults import (
    ANSWER_FLOOR_MARGIN,
    BACKGROUND_CEILING,
    BACKGROUND_MARGIN,
    BACKGROUND_QUANTILE,
    BGE_SMALL_THRESHOLD,
    DEFAULT_THRESHOLD,
    KEYWORD_FLOOR,
    KEYWORD_MARGIN,
    KEYWORD_QUANTILE,
)
from kbctl.embedding.background import (
    answer_floor,
    background_keyword,
    background_questions,
    background_similarity,
    keyword_share,
    keyword_threshold,
    version_threshold,
)
from kbctl.engine.status import KnowledgeBaseDetail
from kbctl.manifest import parse_manifests
from tests.support.manifests import knowledge_base, text_source

MODEL = "local/all-MiniLM-L6-v2"

# A household almanac: short answers on many of the everyday topics the background questions ask about, so they
# find close matches in it and its line rises well above the model's.
ALMANAC = [
    "Boiling eggs: a soft yolk takes six minutes in boiling water, a hard one ten; cool them in cold water.",
    "Storing herbs: keep fresh basil at room temperature with its stems in a glass of water, like flowers.",
    "Cooked rice can be frozen for a month; cool it quickly and reheat it until it is steaming hot.",
    "Roast chicken is done when the thickest part of the thigh reaches 75 degrees Celsius inside.",
    "Rugby union: each team has fifteen players on the pitch, eight forwards and seven backs.",
    "The first football World Cup was held in Uruguay in 1930, and Uruguay won it.",
    "Tennis: a tiebreak is won by the first player to reach seven points with a lead of two.",
    "A marathon is 42.195 kilometres long.",
    "Canberra is the capital of Australia; Sydney is its largest city.",
    "The Amazon is the longest river in South America.",
    "Passports: renew yours online or at the post office, with a new photo, before it expires.",
    "Linked lists in Python: reverse one by walking it and pointing each node's next at the previous node.",
    "Git: undo the last commit with git reset HEAD~1, which keeps its changes in the working tree.",
    "CSS: centre a div with display flex, justify-content center and align-items center on its parent.",
    "Cars: to change a flat tyre, loosen the wheel nuts, jack the car up, swap the wheel, tighten the nuts.",
    "Oil changes: a diesel car needs new engine oil about every 10,000 miles or once a year.",
    "Puppies: teach a puppy to sit by holding a treat above its nose and rewarding it when it sits.",
    "Rabbits eat mostly hay, with fresh leafy greens and a few pellets each day.",
    "Gardening: plant tomato seedlings outside after the last frost, when nights stay above 10 degrees.",
    "Cacti need water only every two or three weeks in summer and hardly any in winter.",
    "Michelangelo painted the ceiling of the Sistine Chapel between 1508 and 1512.",
    "The Berlin Wall fell in November 1989.",
    "Beethoven wrote nine symphonies.",
    "Stains: blot red wine on a carpet, then dab it with cold water and a little washing-up liquid.",
    "Plumbing: a leaking tap usually needs a new washer; turn off the water before taking it apart.",
    "Radiators: bleed one with a radiator key until water, not air, comes out of the valve.",
    "Money: compound interest pays interest on the interest already earned, so savings grow faster.",
    "Index funds buy every share of a market index, so they cost little and follow the market.",
    "Health: treat a sprained ankle with rest, ice, compression and raising it above the heart.",
    "An adult's resting heart rate is normally between 60 and 100 beats a minute.",
    "The sky is blue because air scatters blue sunlight more than red light.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen in a plant's leaves.",
    "Language: say thank you in Japanese with arigatou gozaimasu.",
    "Chess: the bishop moves diagonally, the rook in straight lines and the knight in an L shape.",
    "Alexander Graham Bell is credited with inventing the telephone in 1876.",
    "Wi-Fi: reset a home router by holding its reset button for ten seconds.",
    # more on two of the topics, for answers of several chunks
    "Poached eggs cook in three minutes in simmering water with a dash of vinegar.",
    "Scrambled eggs stay soft when they are taken off the heat while still a little wet.",
    "Half marathon: the race is 21.1 kilometres, half the distance of a full marathon.",
    "Running a first marathon takes most people four to five hours of steady running.",
]

POLICY = (
    "Refunds. On signing, the client pays a deposit of 25% of the fixed fee. A cancellation 30 days or more before "
    "the start date refunds the whole deposit; 14 to 29 days refunds half. Approved refunds are paid within 15 "
    "business days. Invoices are payable within 30 days and records are kept for seven years."
)


def _apply(store: KnowledgeBaseStore, *manifests: str) -> None:
    report = store.apply(parse_manifests("\n---\n".join(manifests), "kb.yaml"))
    assert not report.failed, report


def _almanac(**spec: object) -> str:
    sources = [text_source(f"fact-{n}", fact) for n, fact in enumerate(ALMANAC)]  # a chunk each
    return knowledge_base("almanac", *sources, embedding={"model": MODEL}, **spec)


def _policy() -> str:
    return knowledge_base("policy", text_source("policy", POLICY), embedding={"model": MODEL})


def _best(store: KnowledgeBaseStore, kb: str, question: str) -> float:
    """The best cosine similarity of any chunk of `kb` to `question`, through a query that cuts nothing."""
    hits = store.query(kb, question, mode="vector", top_k=1, threshold=-1.0).hits
    return hits[0].score


def test_the_background_similarity_is_the_quantile_of_the_best_similarities() -> None:
    values = [i / 100 for i in range(99)]
    assert background_similarity(values) == pytest.approx(
        float(np.quantile(values, BACKGROUND_QUANTILE, method="higher"))
    )
    assert background_similarity(list(reversed(values))) == background_similarity(values)
    assert background_similarity([0.4]) == pytest.approx(0.4)
    assert background_similarity([]) is None


def test_the_threshold_is_never_below_the_models() -> None:
    assert version_threshold(MODEL, None) == pytest.approx(DEFAULT_THRESHOLD)
    assert version_threshold(MODEL, 0.1) == pytest.approx(DEFAULT_THRESHOLD)
    assert version_threshold(MODEL, 0.5) == pytest.approx(0.5 + BACKGROUND_MARGIN)
    assert version_threshold("local/bge-small-en-v1.5", 0.5) == pytest.approx(BGE_SMALL_THRESHOLD)
    assert version_threshold("local/bge-small-en-v1.5", 0.7) == pytest.approx(0.7 + BACKGROUND_MARGIN)
    assert version_threshold(MODEL, 0.9) == pytest.approx(DEFAULT_THRESHOLD + BACKGROUND_CEILING)


def test_the_keyword_line_is_the_quantile_of_the_background_shares_plus_a_margin_over_a_floor() -> None:
    assert keyword_share(3.0, 2.0) == pytest.approx(1.5)
    assert keyword_share(None, 2.0) == keyword_share(1.0, 0.0) == 0.0
    values = [i / 50 for i in range(99)]
    expected = float(np.quantile(values, KEYWORD_QUANTILE, method="higher"))
    assert background_keyword(values) == pytest.approx(expected) and background_keyword([]) is None
    assert keyword_threshold(None) is None
    assert keyword_threshold(expected) == pytest.approx(expected + KEYWORD_MARGIN)
    assert keyword_threshold(0.1) == pytest.approx(KEYWORD_FLOOR)


def test_publish_calibrates_the_keyword_line_as_a_query_finds_each_background_questions_share(
    store: KnowledgeBaseStore,
) -> None:
    _apply(store, _almanac())
    detail = store.describe("almanac")
    shares = [store.query("almanac", q).keyword_share or 0.0 for q in background_questions()]
    assert detail.background_keyword == pytest.approx(background_keyword(shares), abs=1e-3)
    assert detail.keyword_threshold == pytest.approx(keyword_threshold(detail.background_keyword), abs=1e-3)
    # Vector mode has no keyword list, so no second signal; a set threshold is the only line.
    assert store.query("almanac", "tiebreak", mode="vector").keyword_threshold is None
    assert store.query("almanac", "tiebreak", threshold=0.5).keyword_threshold is None


def test_a_question_whose_rare_words_one_chunk_holds_passes_by_keyword_share(store: KnowledgeBaseStore) -> None:
    """Single words of the policy score low similarities (a word alone embeds far from a sentence), but one chunk
    holds all of each: the keyword share passes the gate where the similarity fails, and the chunks are returned;
    a word no chunk holds has no keyword share and is refused."""
    _apply(store, _policy())
    line = store.describe("policy").relevance_threshold
    assert line is not None
    passed = []
    for word in ["deposit", "cancellation", "invoices", "records", "signing", "business", "payable"]:
        result = store.query("policy", word)
        assert result.keyword_threshold is not None and result.keyword_share is not None
        if result.best_score is None or result.best_score >= line - 0.11:  # the similarity may pass (its exceptions)
            continue
        if result.keyword_share < result.keyword_threshold:
            assert result.relevant_by is None and result.hits == []
            continue
        assert result.relevant_by == "keyword" and result.hits
        assert store.query("policy", word, mode="vector").hits == []  # the similarity alone refuses it
        passed.append(word)
    assert passed
    foreign = store.query("policy", "Czechoslovakia")
    assert foreign.hits == [] and foreign.keyword_share == 0.0 and foreign.relevant_by is None


def test_background_questions_are_packaged() -> None:
    questions = background_questions()
    assert len(questions) == 99 and len(set(questions)) == 99
    assert all(q.endswith("?") for q in questions)


def test_publish_calibrates_each_version_as_a_query_finds_its_background(store: KnowledgeBaseStore) -> None:
    _apply(store, _almanac(), _policy())
    lines = {}
    for kb in ("almanac", "policy"):
        detail = store.describe(kb)
        assert detail.background_similarity is not None
        bests = [_best(store, kb, q) for q in background_questions()]
        expected = float(np.quantile(bests, BACKGROUND_QUANTILE, method="higher"))
        assert detail.background_similarity == pytest.approx(expected, abs=1e-3)
        lines[kb] = detail.relevance_threshold
        calibrated = max(DEFAULT_THRESHOLD, expected + BACKGROUND_MARGIN)
        assert lines[kb] == pytest.approx(min(DEFAULT_THRESHOLD + BACKGROUND_CEILING, calibrated), abs=1e-3)
        # A query that sets no threshold: the version's decides whether anything is relevant, and the chunks of an
        # answer are those at the answer floor, 0.2 below the model's threshold.
        result = store.query(kb, "how long do I boil an egg?")
        assert result.relevance_threshold == pytest.approx(lines[kb])
        assert result.similarity_threshold == pytest.approx(DEFAULT_THRESHOLD - ANSWER_FLOOR_MARGIN)
    # The almanac answers a third of the background questions, so they are no background for it: its line rises to
    # the ceiling. The policy's stays the model's.
    assert lines["almanac"] == pytest.approx(DEFAULT_THRESHOLD + BACKGROUND_CEILING)
    assert lines["policy"] == pytest.approx(DEFAULT_THRESHOLD)


def test_a_question_below_the_calibrated_line_is_refused_where_the_models_threshold_answers(
    store: KnowledgeBaseStore,
) -> None:
    _apply(store, _almanac())
    line = store.describe("almanac").relevance_threshold
    assert line is not None
    asked = [
        "Who painted the Mona Lisa?",
        "How long should I poach an egg?",
        "How do I change a car battery?",
        "What is a healthy blood pressure?",
        "Which houseplants like shade?",
        "How do I iron a shirt?",
    ]
    # Between the model's threshold and the line, and far enough below the line that no exception lets a chunk
    # through (agreement of the two lists passes a chunk down to 0.1 below it; none of these has an identifier).
    between = [q for q in asked if DEFAULT_THRESHOLD + 0.01 < _best(store, "almanac", q) < line - 0.11]
    assert between, [(q, round(_best(store, "almanac", q), 3)) for q in asked]
    refusals = 0
    for question in between:
        asked_ = store.query("almanac", question)
        assert asked_.keyword_share is not None and asked_.keyword_threshold is not None
        if asked_.keyword_share >= asked_.keyword_threshold:  # its words, held by one chunk: the second signal
            assert asked_.relevant_by == "keyword" and asked_.hits
            continue
        refusals += 1
        assert asked_.hits == [] and asked_.relevant_by is None
        assert asked_.message.endswith(
            f"below version 1's relevance line {line:.2f}, and the question's keyword share"
            f" {asked_.keyword_share:.2f} is below its keyword line {asked_.keyword_threshold:.2f}"
        )
        assert store.query("almanac", question, threshold=DEFAULT_THRESHOLD).hits
    assert refusals


def test_an_answered_question_keeps_its_chunks_down_to_the_answer_floor(store: KnowledgeBaseStore) -> None:
    """The calibrated lines decide whether the knowledge base has anything on the question; once it has, the answer
    is the best topK chunks within the budget down to the answer floor, well below the model's threshold (a set
    threshold still cuts at itself)."""
    _apply(store, _almanac())
    line = store.describe("almanac").relevance_threshold
    floor = answer_floor(MODEL)
    assert line is not None and line > DEFAULT_THRESHOLD + 0.1 and floor == pytest.approx(0.15)
    for question in ["How long do I boil an egg?", "How long is a half marathon?"]:
        uncut = store.query("almanac", question, threshold=-1.0, top_k=10).hits
        assert uncut[0].similarity >= line
        hits = store.query("almanac", question, top_k=10).hits
        above = [(h.source, h.position) for h in uncut if h.similarity >= floor]
        assert [(h.source, h.position) for h in hits] == above
        assert any(h.similarity < DEFAULT_THRESHOLD for h in hits)
        assert len(hits) < len(uncut)  # the almanac's unrelated facts score below the floor
        cut = store.query("almanac", question, top_k=10, threshold=DEFAULT_THRESHOLD).hits
        assert len(cut) < len(hits)


def test_the_specs_threshold_wins_and_a_version_published_before_calibration_keeps_the_models(
    store: KnowledgeBaseStore, cli: CliRunner
) -> None:
    _apply(store, _almanac(retrieval={"similarityThreshold": 0.2}), _policy())
    set_by_spec = store.query("almanac", "how long do I boil an egg?")
    assert set_by_spec.similarity_threshold == pytest.approx(0.2) == set_by_spec.relevance_threshold
    detail = store.describe("almanac")
    assert detail.relevance_threshold == pytest.approx(0.2) and detail.background_similarity is not None
    # A version published before versions were calibrated (migrations 22 and 28 left them NULL).
    store.db.connection.execute(
        "UPDATE kb_versions SET background_similarity = NULL, background_keyword = NULL FROM kb_knowledge_bases k"
        " WHERE k.id = kb_versions.kb_id AND k.name = 'policy'"
    )
    before = store.query("policy", "when are refunds paid?")
    assert before.relevance_threshold == pytest.approx(DEFAULT_THRESHOLD) and before.keyword_threshold is None
    assert before.similarity_threshold == pytest.approx(answer_floor(MODEL)) and before.relevant_by == "similarity"
    assert store.describe("policy").background_similarity is None
    shown = cli.invoke(app, ["describe", "kb", "almanac"])
    assert shown.exit_code == 0, shown.output
    assert "Threshold:   0.2 (spec.retrieval.similarityThreshold)" in shown.output
    shown = cli.invoke(app, ["describe", "kb", "policy"])
    assert (
        "Threshold:   0.35 (the model's; version 1 was published before calibration; an answer's chunks are those down"
        " to 0.2 below the model's)"
    ) in shown.output
    resource = cli.invoke(app, ["get", "kb", "policy", "-o", "json"])
    assert '"relevanceThreshold": 0.35' in resource.output and '"backgroundSimilarity": null' in resource.output


def test_describe_says_where_the_threshold_comes_from(store: KnowledgeBaseStore, cli: CliRunner) -> None:
    # Eight facts answer eight background questions, under a tenth: the 90th percentile is of the others, and the
    # line rises a little above the model's.
    eight = knowledge_base(
        "eight", *[text_source(f"fact-{n}", f) for n, f in enumerate(ALMANAC[::3][:8])], embedding={"model": MODEL}
    )
    _apply(store, _almanac(), _policy(), eight)
    almanac, policy, calibrated = store.describe("almanac"), store.describe("policy"), store.describe("eight")
    assert calibrated.background_similarity is not None and calibrated.relevance_threshold is not None
    assert DEFAULT_THRESHOLD < calibrated.relevance_threshold < DEFAULT_THRESHOLD + BACKGROUND_CEILING
    shown = cli.invoke(app, ["describe", "kb", "eight"]).output

    def keyword(d: KnowledgeBaseDetail) -> str:
        assert d.keyword_threshold is not None and d.background_keyword is not None
        assert d.keyword_threshold == pytest.approx(max(KEYWORD_FLOOR, d.background_keyword + KEYWORD_MARGIN))
        return (
            f"; or a keyword share of {d.keyword_threshold:g} (their keyword share {d.background_keyword:.2f}, plus"
            f" 0.2, at least 0.6); an answer's chunks are those down to 0.2 below the model's)"
        )

    assert (
        f"Threshold:   {calibrated.relevance_threshold:g} (calibrated: version 1's background questions score "
        f"{calibrated.background_similarity:.2f}, plus 0.05{keyword(calibrated)}"
    ) in shown
    assert almanac.background_similarity is not None and policy.background_similarity is not None
    shown = cli.invoke(app, ["describe", "kb", "almanac"]).output
    assert (
        f"Threshold:   0.6 (the ceiling, the model's plus 0.25: version 1's background questions score "
        f"{almanac.background_similarity:.2f}, plus 0.05 is higher{keyword(almanac)}"
    ) in shown
    shown = cli.invoke(app, ["describe", "kb", "policy"]).output
    assert (
        f"Threshold:   0.35 (the model's: version 1's background questions score {policy.background_similarity:.2f},"
        f" plus 0.05 is lower{keyword(policy)}"
    ) in shown


def test_background_vectors_are_embedded_once_per_model_and_kept(store: KnowledgeBaseStore) -> None:
    _apply(store, _policy())
    conn = store.db.connection

    def kept() -> dict[bytes, str]:
        rows = conn.execute(
            "SELECT question_sha256, embedding::text FROM kb_background_vectors WHERE model = %s", (MODEL,)
        ).fetchall()
        return {bytes(k): v for k, v in rows}

    before = kept()
    assert len(before) == 99
    lost = sorted(before)[:3]
    conn.execute("DELETE FROM kb_background_vectors WHERE question_sha256 = ANY(%s)", (lost,))
    _apply(store, _almanac())  # a new version embeds the three missing questions, and only those
    after = kept()
    assert len(after) == 99
    assert {k: v for k, v in after.items() if k not in lost} == {k: v for k, v in before.items() if k not in lost}
    for key in lost:  # the same vectors again, to float precision
        a = np.array([float(x) for x in before[key].strip("[]").split(",")])
        b = np.array([float(x) for x in after[key].strip("[]").split(",")])
        assert math.isclose(float(a @ b), 1.0, abs_tol=1e-4)


def test_an_apply_that_publishes_nothing_calibrates_a_version_published_before_calibration(
    store: KnowledgeBaseStore, cli: CliRunner, tmp_path: Path
) -> None:
    """Versions published before migrations 22 and 28 have no lines (their gate is the model's threshold alone). The
    next apply or refresh that finds one unchanged calibrates it in place, once, as a publish would have; diff says
    it would."""
    manifest = tmp_path / "kb.yaml"
    manifest.write_text(_policy())
    applied = cli.invoke(app, ["apply", "-f", str(manifest), "--wait"])
    assert applied.exit_code == 0, applied.output
    published = store.describe("policy")
    assert published.background_similarity is not None and published.background_keyword is not None
    store.db.connection.execute(
        "UPDATE kb_versions SET background_similarity = NULL, background_bests = NULL, background_keyword = NULL"
        " FROM kb_knowledge_bases k WHERE k.id = kb_versions.kb_id AND k.name = 'policy'"
    )
    assert store.query("policy", "when are refunds paid?").keyword_threshold is None  # the old gate
    diff = cli.invoke(app, ["diff", "-f", str(manifest)])
    assert "  version 1 would be calibrated (published before its relevance gate was)" in diff.output, diff.output
    again = cli.invoke(app, ["apply", "-f", str(manifest), "--wait"])
    assert again.exit_code == 0, again.output
    detail = store.describe("policy")
    assert detail.version == 1  # nothing published: the same version, calibrated
    assert detail.background_similarity == pytest.approx(published.background_similarity, abs=1e-4)
    assert detail.background_keyword == pytest.approx(published.background_keyword, abs=1e-4)
    assert detail.relevance_threshold is not None and detail.keyword_threshold is not None
    assert "KnowledgeBase/policy unchanged (version 1)" in again.output
    assert (
        "KnowledgeBase/policy: version 1 calibrated (published before its relevance gate was): similarity line "
        f"{detail.relevance_threshold:g}, keyword line {detail.keyword_threshold:g}"
    ) in again.output
    assert store.query("policy", "when are refunds paid?").keyword_threshold == pytest.approx(detail.keyword_threshold)
    third = cli.invoke(app, ["apply", "-f", str(manifest), "--wait"])
    assert third.exit_code == 0 and "calibrated" not in third.output, third.output
    assert "would be calibrated" not in cli.invoke(app, ["diff", "-f", str(manifest)]).output
    events = [e for e in store.db.list_events(["policy"]) if e.reason == "Calibrated"]
    assert len(events) == 1 and events[0].count == 1 and events[0].type == "Normal"
    assert "similarity line" in events[0].message
