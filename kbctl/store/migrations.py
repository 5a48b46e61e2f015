"""The store's schema as numbered migrations, each applied once, safe to run again and concurrently."""

from __future__ import annotations

from typing import Any

import psycopg

__all__ = ["MIGRATIONS", "migrate"]

# Append only: a released migration is never edited, a change is a new entry.
MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "knowledge bases, versions, source revisions, chunks, content-addressed embeddings",
        """
        CREATE EXTENSION IF NOT EXISTS vector;

        CREATE TABLE kb_knowledge_bases (
            id            bigserial PRIMARY KEY,
            name          text NOT NULL UNIQUE,
            labels        jsonb NOT NULL DEFAULT '{}',
            manifest      jsonb NOT NULL,
            current_version integer,
            created_at    timestamptz NOT NULL DEFAULT now(),
            updated_at    timestamptz NOT NULL DEFAULT now()
        );

        -- Never embed the same text twice: one vector per (model, sha256 of the exact text embedded).
        CREATE TABLE kb_embeddings (
            id          bigserial PRIMARY KEY,
            model       text NOT NULL,
            text_sha256 bytea NOT NULL,
            embedding   vector NOT NULL,
            created_at  timestamptz NOT NULL DEFAULT now(),
            UNIQUE (model, text_sha256)
        );

        -- The chunks of one source's content under one chunking/model setting; shared by every
        -- version in which that source did not change, so unchanged sources cost one row per version.
        CREATE TABLE kb_source_revisions (
            id             bigserial PRIMARY KEY,
            kb_id          bigint NOT NULL REFERENCES kb_knowledge_bases(id) ON DELETE CASCADE,
            source_name    text NOT NULL,
            revision_key   text NOT NULL,
            content_sha256 text NOT NULL,
            origin         text NOT NULL,
            title          text,
            char_count     integer NOT NULL,
            chunk_count    integer NOT NULL,
            created_at     timestamptz NOT NULL DEFAULT now(),
            UNIQUE (kb_id, source_name, revision_key)
        );

        CREATE TABLE kb_chunks (
            id           bigserial PRIMARY KEY,
            revision_id  bigint NOT NULL REFERENCES kb_source_revisions(id) ON DELETE CASCADE,
            ordinal      integer NOT NULL,
            content      text NOT NULL,
            char_start   integer NOT NULL,
            char_end     integer NOT NULL,
            heading_path text[] NOT NULL,
            token_count  integer NOT NULL,
            embedding_id bigint NOT NULL REFERENCES kb_embeddings(id),
            UNIQUE (revision_id, ordinal)
        );
        CREATE INDEX kb_chunks_embedding_id ON kb_chunks (embedding_id);

        -- Immutable, numbered versions; kb_knowledge_bases.current_version points at the serving one.
        CREATE TABLE kb_versions (
            id             bigserial PRIMARY KEY,
            kb_id          bigint NOT NULL REFERENCES kb_knowledge_bases(id) ON DELETE CASCADE,
            number         integer NOT NULL,
            manifest       jsonb NOT NULL,
            manifest_sha256 text NOT NULL,
            model          text NOT NULL,
            chunk_count    integer NOT NULL,
            embedded_count integer NOT NULL,
            reused_count   integer NOT NULL,
            created_at     timestamptz NOT NULL DEFAULT now(),
            UNIQUE (kb_id, number)
        );

        CREATE TABLE kb_version_sources (
            version_id     bigint NOT NULL REFERENCES kb_versions(id) ON DELETE CASCADE,
            position       integer NOT NULL,
            source_name    text NOT NULL,
            source_sha256  text NOT NULL,
            revision_id    bigint REFERENCES kb_source_revisions(id) ON DELETE CASCADE,
            state          text NOT NULL CHECK (state IN ('ready', 'failed')),
            message        text,
            embedded_count integer NOT NULL DEFAULT 0,
            reused_count   integer NOT NULL DEFAULT 0,
            PRIMARY KEY (version_id, source_name)
        );
        CREATE INDEX kb_version_sources_revision ON kb_version_sources (revision_id);
        """,
    ),
    (
        2,
        "live per-source status: state, reason, HTTP validators, last fetch",
        """
        -- The live state of each source of a knowledge base (versions keep the state at publish time).
        -- HTTP validators are only ever those of the content the current version serves.
        CREATE TABLE kb_source_status (
            kb_id         bigint NOT NULL REFERENCES kb_knowledge_bases(id) ON DELETE CASCADE,
            source_name   text NOT NULL,
            state         text NOT NULL CHECK (state IN ('ready', 'stale', 'failed')),
            message       text,
            origin        text,
            etag          text,
            last_modified text,
            fetched_at    timestamptz,
            checked_at    timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kb_id, source_name)
        );
        """,
    ),
    (
        3,
        "status and controller: generations, conditions, desired manifest, claims; version change causes",
        """
        -- generation counts changes of the desired manifest; observed_generation is the one the
        -- current version was reconciled from (kubectl's metadata.generation / status.observedGeneration).
        ALTER TABLE kb_knowledge_bases
            ADD COLUMN generation          bigint NOT NULL DEFAULT 1,
            ADD COLUMN observed_generation bigint NOT NULL DEFAULT 1,
            ADD COLUMN conditions          jsonb NOT NULL DEFAULT '[]',
            ADD COLUMN desired_manifest    jsonb,
            ADD COLUMN claimed_by          text,
            ADD COLUMN claim_expires       timestamptz;

        ALTER TABLE kb_versions ADD COLUMN change_cause text NOT NULL DEFAULT '';

        -- Running controllers announce themselves here (apply --wait hands work to a live one).
        CREATE TABLE kb_controllers (
            id         text PRIMARY KEY,
            hostname   text NOT NULL,
            pid        integer NOT NULL,
            started_at timestamptz NOT NULL DEFAULT now(),
            last_seen  timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        4,
        "full-text search beside the vectors: a tsvector per chunk (the KB's text search language) and its GIN index",
        """
        ALTER TABLE kb_chunks ADD COLUMN tsv tsvector;
        UPDATE kb_chunks SET tsv = to_tsvector('english', array_to_string(heading_path, ' ') || ' ' || content);
        CREATE INDEX kb_chunks_tsv ON kb_chunks USING gin (tsv);
        """,
    ),
    (
        5,
        "the sha256 of the desired manifest, so an apply compares hashes instead of reading the manifest back",
        """
        ALTER TABLE kb_knowledge_bases ADD COLUMN desired_sha256 text;
        """,
    ),
    (
        6,
        "each version's spec.retrieval in a column of its own: a query reads a few bytes, not the whole manifest",
        """
        -- Extracting a path of a jsonb value reads (de-TOASTs) all of it: 220 ms a query at 100,000 inline chunks.
        ALTER TABLE kb_versions ADD COLUMN retrieval jsonb NOT NULL DEFAULT '{}';
        UPDATE kb_versions SET retrieval = coalesce(manifest -> 'spec' -> 'retrieval', '{}');
        """,
    ),
    (
        7,
        "inline source texts stored once, content-addressed; stored manifests name them by sha256",
        """
        CREATE TABLE kb_texts (
            sha256 text PRIMARY KEY,
            body   text NOT NULL
        );
        """,
    ),
    (
        8,
        "BM25 statistics: chunk lengths; per revision and per version, total length and chunks holding each word",
        """
        -- A chunk's analyzed length: every occurrence of every lexeme of its tsvector.
        ALTER TABLE kb_chunks ADD COLUMN term_count integer NOT NULL DEFAULT 0;
        UPDATE kb_chunks SET term_count =
            (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0) FROM unnest(tsv) u)
            WHERE tsv IS NOT NULL;
        ALTER TABLE kb_source_revisions ADD COLUMN term_count bigint NOT NULL DEFAULT 0;
        UPDATE kb_source_revisions r SET term_count = s.total
            FROM (SELECT revision_id, sum(term_count) AS total FROM kb_chunks GROUP BY revision_id) s
            WHERE r.id = s.revision_id;
        -- Per revision, how many of its chunks hold each lexeme; a version's document frequency is the sum over
        -- its revisions (revisions are shared by the versions that serve them, and so are these rows).
        CREATE TABLE kb_revision_terms (
            lexeme      text NOT NULL,
            revision_id bigint NOT NULL REFERENCES kb_source_revisions(id) ON DELETE CASCADE,
            chunks      integer NOT NULL,
            PRIMARY KEY (lexeme, revision_id)
        );
        CREATE INDEX kb_revision_terms_revision ON kb_revision_terms (revision_id);
        INSERT INTO kb_revision_terms (lexeme, revision_id, chunks)
            SELECT u.lexeme, c.revision_id, count(*) FROM kb_chunks c, unnest(c.tsv) u
            WHERE c.tsv IS NOT NULL GROUP BY u.lexeme, c.revision_id;
        -- Per version, the sums over its revisions: its chunks' total length and each lexeme's document frequency
        -- (what a query reads; a new version's rows are its predecessor's plus the revisions it adds, minus those
        -- it drops).
        ALTER TABLE kb_versions ADD COLUMN term_count bigint NOT NULL DEFAULT 0;
        UPDATE kb_versions v SET term_count = s.total
            FROM (SELECT vs.version_id, sum(r.term_count) AS total FROM kb_version_sources vs
                  JOIN kb_source_revisions r ON r.id = vs.revision_id GROUP BY vs.version_id) s
            WHERE v.id = s.version_id;
        CREATE TABLE kb_version_terms (
            version_id bigint NOT NULL REFERENCES kb_versions(id) ON DELETE CASCADE,
            lexeme     text NOT NULL,
            chunks     integer NOT NULL,
            PRIMARY KEY (version_id, lexeme)
        );
        INSERT INTO kb_version_terms (version_id, lexeme, chunks)
            SELECT vs.version_id, t.lexeme, sum(t.chunks) FROM kb_version_sources vs
            JOIN kb_revision_terms t ON t.revision_id = vs.revision_id GROUP BY vs.version_id, t.lexeme;
        """,
    ),
    (
        9,
        "each version's spec.answer (chat model, instructions) in a column of its own, as spec.retrieval",
        """
        ALTER TABLE kb_versions ADD COLUMN answer jsonb NOT NULL DEFAULT '{}';
        UPDATE kb_versions SET answer = coalesce(manifest -> 'spec' -> 'answer', '{}');
        """,
    ),
    (
        10,
        "the apply set (`apply --applyset NAME`) a knowledge base belongs to: prune deletes only its own members",
        """
        ALTER TABLE kb_knowledge_bases ADD COLUMN applyset text;
        CREATE INDEX kb_knowledge_bases_applyset ON kb_knowledge_bases (applyset) WHERE applyset IS NOT NULL;
        """,
    ),
    (
        11,
        "the refresh schedule of knowledge bases with spec.refresh (kbctl controller runs what is due)",
        """
        CREATE TABLE kb_refresh_schedule (
            kb_id bigint PRIMARY KEY REFERENCES kb_knowledge_bases (id) ON DELETE CASCADE,
            interval_seconds double precision NOT NULL CHECK (interval_seconds > 0),
            next_at timestamptz NOT NULL,
            last_at timestamptz
        );
        CREATE INDEX kb_refresh_schedule_due ON kb_refresh_schedule (next_at);
        """,
    ),
    (
        12,
        "a version's BM25 term rows are deleted with it by kbctl, not by a foreign key checked per inserted row",
        # Publishing a version writes one row per lexeme of its vocabulary (109,000 at 100,000 chunks); checking
        # the key row by row cost ~0.8 s of each publish. prune_history and delete_kb delete the rows instead.
        """
        ALTER TABLE kb_version_terms DROP CONSTRAINT IF EXISTS kb_version_terms_version_id_fkey;
        DELETE FROM kb_version_terms t WHERE NOT EXISTS (SELECT 1 FROM kb_versions v WHERE v.id = t.version_id);
        """,
    ),
    (
        13,
        "the manifest file a knowledge base was last applied from, by hash: the same bytes are not parsed again",
        """
        ALTER TABLE kb_knowledge_bases ADD COLUMN applied_file_sha256 text, ADD COLUMN applied_file_kbs integer,
            ADD COLUMN applied_file_line integer, ADD COLUMN applied_manifest_sha256 text;
        CREATE INDEX kb_knowledge_bases_applied_file ON kb_knowledge_bases (applied_file_sha256)
            WHERE applied_file_sha256 IS NOT NULL;
        """,
    ),
    (
        14,
        "a revision's BM25 term rows are deleted with it by kbctl, not by a foreign key checked per inserted row",
        # A first apply of 100,000 chunks writes ~790,000 of these rows; checking the key row by row cost ~4 s of
        # it (11.4 s with the key, 6.8 s without, sorted). prune_history and delete_kb delete the rows instead.
        """
        ALTER TABLE kb_revision_terms DROP CONSTRAINT IF EXISTS kb_revision_terms_revision_id_fkey;
        DELETE FROM kb_revision_terms t
            WHERE NOT EXISTS (SELECT 1 FROM kb_source_revisions r WHERE r.id = t.revision_id);
        """,
    ),
    (
        15,
        "one word per source state in both tables: a version's source that failed but serves earlier content is stale",
        # kb_version_sources said `failed` with a revision where kb_source_status said `stale`, so a source that
        # served showed as failed. The CHECK is kbctl.store.rows.source_state: stale exactly when it serves.
        """
        ALTER TABLE kb_version_sources DROP CONSTRAINT IF EXISTS kb_version_sources_state_check;
        UPDATE kb_version_sources SET state = 'stale' WHERE state = 'failed' AND revision_id IS NOT NULL;
        ALTER TABLE kb_version_sources ADD CONSTRAINT kb_version_sources_state_check CHECK (
            state IN ('ready', 'stale', 'failed')
            AND (state = 'ready' OR (state = 'stale') = (revision_id IS NOT NULL))
        );
        """,
    ),
    (
        16,
        "events: what happened to each knowledge base or sync (reason, message, count, first and last time seen)",
        # Keyed by the knowledge base's name, not its row, so that a deletion or a prune stays on record. A repeated
        # event (same name, type, reason and message) counts up in its row (kbctl.store.events).
        """
        CREATE TABLE kb_events (
            id bigserial PRIMARY KEY,
            object_kind text NOT NULL DEFAULT 'KnowledgeBase' CHECK (object_kind IN ('KnowledgeBase', 'Sync')),
            object_name text NOT NULL,
            type text NOT NULL CHECK (type IN ('Normal', 'Warning')),
            reason text NOT NULL,
            message text NOT NULL,
            component text NOT NULL,
            count integer NOT NULL DEFAULT 1,
            first_seen timestamptz NOT NULL DEFAULT now(),
            last_seen timestamptz NOT NULL DEFAULT now()
        );
        CREATE UNIQUE INDEX kb_events_once ON kb_events (object_kind, object_name, type, reason, md5(message));
        CREATE INDEX kb_events_by_object ON kb_events (object_name, last_seen DESC);
        CREATE INDEX kb_events_by_time ON kb_events (last_seen DESC);
        """,
    ),
    (
        17,
        "the manifest last applied, kept apart from the desired and the serving one, so drift can be seen",
        # `rollout undo` makes an older manifest the desired one (a new generation); the one applied stays, with the
        # generation it was recorded at: a later generation serving another manifest is drift (kbctl.engine.drift).
        # Existing knowledge bases start tracking at their next apply.
        """
        ALTER TABLE kb_knowledge_bases ADD COLUMN applied_sha256 text, ADD COLUMN applied_manifest jsonb,
            ADD COLUMN applied_generation bigint;
        """,
    ),
    (
        18,
        "syncs: git folders of manifests a controller keeps applied (pull mode), with what each last applied",
        """
        CREATE TABLE kb_syncs (
            name text PRIMARY KEY,
            spec jsonb NOT NULL,
            spec_sha256 text NOT NULL,
            interval_seconds double precision NOT NULL,
            next_at timestamptz NOT NULL DEFAULT now(),
            last_applied_revision text,
            last_applied_at timestamptz,
            last_attempted_revision text,
            last_error text,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        19,
        "the folder a knowledge base's path: sources were last read from, so get -o yaml output applies anywhere",
        # Written by an apply that listed every path source there; read back only when a manifest names this very
        # folder (status.appliedFrom) for the path sources read there (kbctl.engine.located).
        "ALTER TABLE kb_knowledge_bases ADD COLUMN applied_from text;",
    ),
    (
        20,
        "document-level access: who may read each source of a version, and how many chunks are restricted",
        # readers: groups (any one), reader_labels: key=value claims (all); NULL: no rule (kbctl.store.access).
        """
        ALTER TABLE kb_version_sources ADD COLUMN readers text[], ADD COLUMN reader_labels text[];
        ALTER TABLE kb_versions ADD COLUMN restricted_chunks integer NOT NULL DEFAULT 0;
        """,
    ),
    (
        21,
        "document-level access: each restricted version's statistics per access rule, so a query subtracts what its "
        "caller may not read instead of summing what it may",
        # A rule is one (readers, reader_labels) pair of a version's restricted sources; its chunks, analyzed length
        # and per-lexeme document frequencies are written at publish (kbctl.store.access.rule_statistics). No
        # foreign key on the terms (as kb_version_terms: publishing checks none per row); deleted with the version.
        """
        CREATE TABLE kb_version_rules (
            version_id bigint NOT NULL REFERENCES kb_versions(id) ON DELETE CASCADE,
            rule integer NOT NULL,
            readers text[],
            reader_labels text[],
            chunks integer NOT NULL,
            term_count bigint NOT NULL,
            PRIMARY KEY (version_id, rule)
        );
        CREATE TABLE kb_version_rule_terms (
            version_id bigint NOT NULL,
            lexeme text NOT NULL,
            rule integer NOT NULL,
            chunks integer NOT NULL,
            PRIMARY KEY (version_id, lexeme, rule)
        );
        -- The versions published before this migration.
        WITH src AS MATERIALIZED (
            SELECT vs.version_id, vs.revision_id, vs.readers, vs.reader_labels, r.chunk_count, r.term_count,
                (dense_rank() OVER (PARTITION BY vs.version_id ORDER BY vs.readers, vs.reader_labels))::integer AS rule
            FROM kb_version_sources vs
            JOIN kb_versions v ON v.id = vs.version_id AND v.restricted_chunks > 0
            JOIN kb_source_revisions r ON r.id = vs.revision_id
            WHERE vs.readers IS NOT NULL OR vs.reader_labels IS NOT NULL),
        rules AS (
            INSERT INTO kb_version_rules (version_id, rule, readers, reader_labels, chunks, term_count)
            SELECT version_id, rule, readers, reader_labels, sum(chunk_count), sum(term_count) FROM src
            GROUP BY version_id, rule, readers, reader_labels)
        INSERT INTO kb_version_rule_terms (version_id, lexeme, rule, chunks)
            SELECT src.version_id, t.lexeme, src.rule, sum(t.chunks) FROM src
            JOIN kb_revision_terms t ON t.revision_id = src.revision_id GROUP BY src.version_id, t.lexeme, src.rule;
        """,
    ),
    (
        22,
        "calibration at publish: each version's background similarity, and the background questions' vectors per model",
        # kbctl.embedding.background: NULL for versions published before (they keep the model's threshold). The
        # questions are embedded once per model (as queries, so apart from the chunks' content-addressed vectors).
        """
        ALTER TABLE kb_versions ADD COLUMN background_similarity real;
        CREATE TABLE kb_background_vectors (
            model text NOT NULL,
            question_sha256 bytea NOT NULL,
            embedding vector NOT NULL,
            PRIMARY KEY (model, question_sha256)
        );
        """,
    ),
    (
        23,
        "a version's BM25 document frequencies as a difference from a base version's: publishing writes what changed",
        # NULL terms_base: the version's own rows are whole (every version before this migration). term_rows: how many
        # rows it holds, to tell when a difference has outgrown its base (NULL: counted when first needed).
        """
        ALTER TABLE kb_versions ADD COLUMN terms_base bigint, ADD COLUMN term_rows integer;
        """,
    ),
    (
        24,
        "calibration per access rule: the background questions' best similarities behind no rule and behind each rule",
        # kbctl.store.access.readable_background: a caller's line is of what it may read. NULL: not kept (a version
        # published before, or never calibrated); '{}': no chunks there. The restricted versions calibrated before
        # are filled in here, from the vectors they hold compared exactly with the model's background questions (in
        # one order: their keys'); one whose model lost those vectors keeps NULL, and its callers the model's line.
        """
        ALTER TABLE kb_versions ADD COLUMN background_bests real[];
        ALTER TABLE kb_version_rules ADD COLUMN background_bests real[];
        CREATE TEMPORARY TABLE kb_calibrated_parts ON COMMIT DROP AS
        WITH part AS (
            SELECT vs.version_id, vs.revision_id, vs.readers, vs.reader_labels, v.model
            FROM kb_versions v JOIN kb_version_sources vs ON vs.version_id = v.id
            WHERE v.restricted_chunks > 0 AND v.background_similarity IS NOT NULL AND vs.revision_id IS NOT NULL
                AND EXISTS (SELECT 1 FROM kb_background_vectors b WHERE b.model = v.model)),
        revision_best AS MATERIALIZED (
            SELECT p.revision_id, b.question_sha256, max(1 - (e.embedding <=> b.embedding)) AS best
            FROM (SELECT DISTINCT revision_id, model FROM part) p
            JOIN kb_chunks c ON c.revision_id = p.revision_id
            JOIN kb_embeddings e ON e.id = c.embedding_id
            JOIN kb_background_vectors b ON b.model = p.model
            GROUP BY p.revision_id, b.question_sha256)
        SELECT version_id, readers, reader_labels, array_agg(best::real ORDER BY question_sha256) AS bests
        FROM (SELECT p.version_id, p.readers, p.reader_labels, rb.question_sha256, max(rb.best) AS best
              FROM part p JOIN revision_best rb ON rb.revision_id = p.revision_id
              GROUP BY p.version_id, p.readers, p.reader_labels, rb.question_sha256) q
        GROUP BY version_id, readers, reader_labels;
        UPDATE kb_versions v SET background_bests = coalesce(
            (SELECT p.bests FROM kb_calibrated_parts p
             WHERE p.version_id = v.id AND p.readers IS NULL AND p.reader_labels IS NULL), '{}')
        WHERE v.id IN (SELECT version_id FROM kb_calibrated_parts);
        UPDATE kb_version_rules r SET background_bests = coalesce(
            (SELECT p.bests FROM kb_calibrated_parts p
             WHERE p.version_id = r.version_id AND p.readers IS NOT DISTINCT FROM r.readers
                AND p.reader_labels IS NOT DISTINCT FROM r.reader_labels), '{}')
        WHERE r.version_id IN (SELECT version_id FROM kb_calibrated_parts);
        DROP TABLE kb_calibrated_parts;
        """,
    ),
    (
        25,
        "a Sync's inventory: the manifest it last applied to each knowledge base, so a change by hand shows",
        # {name: applied_sha256} after each pass that applied (kbctl.engine.sync): a knowledge base whose applied
        # manifest is another one was applied by hand, and the Sync's revert of it is a DriftReverted event.
        "ALTER TABLE kb_syncs ADD COLUMN inventory jsonb NOT NULL DEFAULT '{}';",
    ),
    (
        26,
        "the retrieval log of kbctl serve: each query, context and ask served, with its trace (off by default)",
        """
        -- One row per retrieval served over HTTP or MCP when serve's retrievalLog is enabled (kbctl.store.retrievals):
        -- the caller's name (never a credential), the question as redacted, and the result with its trace, bounded
        -- in bytes. Keyed by knowledge base name, not id: a run stays readable after its knowledge base is deleted,
        -- until the log's days or rows bound removes it. result_cut: the result was cut to fit the bytes bound.
        CREATE TABLE kb_retrievals (
            id               bigserial PRIMARY KEY,
            at               timestamptz NOT NULL DEFAULT now(),
            channel          text NOT NULL,
            operation        text NOT NULL,
            knowledge_bases  text[] NOT NULL,
            version          integer,
            caller           text NOT NULL,
            question         text NOT NULL,
            nothing_relevant boolean NOT NULL,
            hits             integer NOT NULL,
            best_similarity  double precision,
            latency_ms       double precision NOT NULL,
            status           text NOT NULL,
            result           jsonb,
            result_cut       boolean NOT NULL DEFAULT false
        );
        CREATE INDEX kb_retrievals_at ON kb_retrievals (at DESC, id DESC);
        CREATE INDEX kb_retrievals_knowledge_bases ON kb_retrievals USING gin (knowledge_bases);
        """,
    ),
    (
        27,
        "evaluation results recorded against the version they measured (kbctl eval --record)",
        """
        -- One row per retrieval mode of a `kbctl eval --record` (kbctl.store.evalruns): the version the mode's
        -- queries read, the eval set's name (never a path), the mode and k measured, the caller measured as
        -- (reader_groups / reader_claims; both NULL: a caller without groups or claims) and the metrics.
        CREATE TABLE kb_eval_runs (
            id            bigserial PRIMARY KEY,
            kb_id         bigint NOT NULL REFERENCES kb_knowledge_bases(id) ON DELETE CASCADE,
            version       integer NOT NULL,
            at            timestamptz NOT NULL DEFAULT now(),
            eval_set      text NOT NULL,
            questions     integer NOT NULL,
            mode          text NOT NULL,
            k             integer NOT NULL,
            reader_groups text[],
            reader_claims text[],
            metrics       jsonb NOT NULL
        );
        CREATE INDEX kb_eval_runs_kb ON kb_eval_runs (kb_id, version, at);
        """,
    ),
    (
        28,
        "the background keyword share of a version: the relevance gate's second signal",
        """
        ALTER TABLE kb_versions ADD COLUMN background_keyword real;
        """,
    ),
]

# Serializes migrations of one database across processes (an arbitrary, fixed 64-bit key).
_MIGRATION_LOCK = 0x6B6263746C_01


def migrate(conn: psycopg.Connection[Any]) -> list[int]:
    """Apply the migrations this database lacks, in order; return the numbers applied."""
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS kb_schema_migrations ("
            " version integer PRIMARY KEY, description text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {row[0] for row in conn.execute("SELECT version FROM kb_schema_migrations").fetchall()}
        for number, description, sql in MIGRATIONS:
            if number in done:
                continue
            conn.execute(sql.encode())
            conn.execute(
                "INSERT INTO kb_schema_migrations (version, description) VALUES (%s, %s)",
                (number, description),
            )
            applied.append(number)
    return applied


def schema_problem(conn: psycopg.Connection[Any]) -> str:
    """ "ok" when the database's schema is at this kbctl's last migration, else what it is at (a readiness probe:
    a replica, or a database another kbctl migrated further)."""
    row = conn.execute("SELECT max(version) FROM kb_schema_migrations").fetchone()
    latest = MIGRATIONS[-1][0]
    if row is None or row[0] != latest:
        return f"schema at migration {row[0] if row else None}, this kbctl needs {latest}"
    return "ok"
