/**
 * The event log's schema, as an ordered list of migrations. A database records how many have
 * run in `PRAGMA user_version`; opening it runs the rest in one transaction.
 */
export const migrations: readonly string[] = [
  `
  -- Every transition of every actor, append-only (R-DL1). Bodies never go here (R-H2).
  CREATE TABLE events (
    seq        INTEGER PRIMARY KEY,
    hlc        TEXT    NOT NULL,
    host       TEXT    NOT NULL,
    actor_kind TEXT    NOT NULL,
    actor_id   TEXT    NOT NULL,
    trace_id   TEXT    NOT NULL,
    msg_id     TEXT,
    event      TEXT    NOT NULL,
    from_state TEXT,
    to_state   TEXT    NOT NULL,
    data       TEXT
  );
  CREATE INDEX events_by_actor ON events (actor_kind, actor_id, seq);
  CREATE INDEX events_by_trace ON events (trace_id, seq);

  -- One row per actor: its current state; live ones are rehydrated at start. Delivery actors
  -- are keyed by msgId + recipient, which makes this table the dedup index (invariant 5).
  CREATE TABLE actors (
    actor_kind TEXT    NOT NULL,
    actor_id   TEXT    NOT NULL,
    owner      TEXT,
    trace_id   TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    done       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (actor_kind, actor_id)
  );
  CREATE INDEX actors_live ON actors (done, actor_kind, owner);

  -- Message bodies, kept only while undelivered (or dead-lettered), then purged (R-H2).
  CREATE TABLE messages (
    msg_id    TEXT NOT NULL,
    recipient TEXT NOT NULL,
    envelope  TEXT NOT NULL,
    PRIMARY KEY (msg_id, recipient)
  );

  -- Local entities. Tokens are stored hashed (R-ID2).
  CREATE TABLE entities (
    gid        TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    kind       TEXT NOT NULL,
    groups     TEXT NOT NULL,
    pane       TEXT,
    token_hash TEXT NOT NULL UNIQUE,
    created    TEXT NOT NULL
  );

  -- idempotency_key -> first msgId, per sending entity (SPEC §9); its call: see migration 3.
  CREATE TABLE idempotency (
    sender TEXT NOT NULL,
    key    TEXT NOT NULL,
    msg_id TEXT NOT NULL,
    PRIMARY KEY (sender, key)
  );
  `,
  `
  -- Receipts still to be told to a sender's gateway (R-RC1): per delivery, the furthest stage
  -- reached and where it goes. Written in the batch of the delivery's transition; deleted once
  -- the broker has confirmed it (or the sender's gateway is gone). What is left is sent again
  -- when the broker comes back.
  CREATE TABLE receipt_outbox (
    msg_id      TEXT    NOT NULL,
    recipient   TEXT    NOT NULL,
    stage       TEXT    NOT NULL,
    rank        INTEGER NOT NULL,
    reason      TEXT,
    detail      TEXT,
    at          INTEGER NOT NULL,
    sender      TEXT    NOT NULL,
    sender_host TEXT    NOT NULL,
    trace_id    TEXT    NOT NULL,
    PRIMARY KEY (msg_id, recipient)
  );
  `,
  `
  -- What identifies the call an idempotency key was first used for (SPEC §9): its kind, its
  -- recipient and a digest of its content, never the text (R-H2). A repeat that matches is a
  -- retry; one that does not is refused (IDEMPOTENCY_CONFLICT). Rows written before this
  -- migration have none of them and count as retries, as they did.
  ALTER TABLE idempotency ADD COLUMN kind TEXT;
  ALTER TABLE idempotency ADD COLUMN recipient TEXT;
  ALTER TABLE idempotency ADD COLUMN digest TEXT;
  `,
  `
  -- Which spawn launched a gid (\`findSpawnOfGid\`), without reading every event. Partial: only
  -- launch rows whose data parses are indexed, so a damaged one in an existing log fails neither
  -- this migration nor a later append (json_extract throws on malformed JSON).
  CREATE INDEX events_spawn_by_gid ON events (json_extract(data, '$.gid'))
    WHERE actor_kind = 'spawn' AND event = 'spawn.launching' AND json_valid(data);
  `,
  `
  -- The bytes a cross-host message came in (signed, and sealed, by its sender) and their
  -- signature headers, kept with its body: its dead letter carries them, so a requeue verifies
  -- and what was sealed stays sealed. Rows from before have none, and are re-encoded as before.
  ALTER TABLE messages ADD COLUMN wire BLOB;
  ALTER TABLE messages ADD COLUMN wire_headers TEXT;
  -- Dead letters of cross-host messages still to be published to bridge.dlq: written in the
  -- batch of the delivery's transition, deleted once the broker has confirmed the letter; what
  -- is left (the broker away, a crash) is published at the next connect.
  CREATE TABLE dead_letter_outbox (
    msg_id    TEXT NOT NULL,
    recipient TEXT NOT NULL,
    reason    TEXT NOT NULL,
    detail    TEXT NOT NULL,
    PRIMARY KEY (msg_id, recipient)
  );
  `,
  `
  -- An actor's events of one commit are one row: its columns hold the first, \`later\` the ones
  -- after it, in order, as a JSON list of [hlc, event, from_state, to_state, data], and
  -- \`last_hlc\` the time of its last (what a restarted clock starts from); the host, actor, trace
  -- and msgId are the row's. Rows from before hold one event each. The gateway's readers expand
  -- rows (eventRow.ts); \`event_log\` does it for a query by hand, one row per event as the
  -- table was (\`part\` 0 is a row's first event).
  ALTER TABLE events ADD COLUMN later TEXT;
  ALTER TABLE events ADD COLUMN last_hlc TEXT;
  CREATE VIEW event_log AS
    SELECT seq, 0 AS part, hlc, host, actor_kind, actor_id, trace_id, msg_id, event, from_state, to_state, data
      FROM events
    UNION ALL
    SELECT e.seq, l.key + 1, l.value ->> 0, e.host, e.actor_kind, e.actor_id, e.trace_id, e.msg_id,
           l.value ->> 1, l.value ->> 2, l.value ->> 3, l.value ->> 4
      FROM events AS e, json_each(e.later) AS l
     WHERE e.later IS NOT NULL;
  -- findSpawnOfGid reads a spawn's own rows (events_by_actor), its launch among their later events.
  DROP INDEX events_spawn_by_gid;
  `,
];
