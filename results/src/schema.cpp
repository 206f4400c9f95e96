#include "mxablate/results/schema.h"

#include <array>
#include <fmt/format.h>

namespace mxablate::results {
namespace {

// Version 1. Event-derived tables are keyed by (run_id, seq), the trainer's sequence number, so
// ingesting the same log twice inserts nothing new (docs/design.md §2: ingestion can always be replayed).
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE sweeps (
  sweep_id        INTEGER PRIMARY KEY,
  name            TEXT NOT NULL UNIQUE,
  recipe_path     TEXT NOT NULL,
  recipe_text     TEXT NOT NULL,
  target_json     TEXT NOT NULL DEFAULT '{}',  -- the recipe's target section as written
  target_val_loss REAL,                        -- fixed target, or resolved later by analysis
  runs_dir        TEXT NOT NULL,
  created_at      REAL NOT NULL,
  updated_at      REAL NOT NULL
);

CREATE TABLE runs (
  run_id          TEXT PRIMARY KEY,
  sweep_id        INTEGER NOT NULL REFERENCES sweeps(sweep_id),
  arm             TEXT NOT NULL,
  arm_index       INTEGER NOT NULL,            -- the arm's position in the recipe
  plan_index      INTEGER,                     -- position in the current plan; NULL: no longer planned
  config_json     TEXT NOT NULL,               -- the resolved RunConfig, as written to config.json
  run_dir         TEXT NOT NULL,
  status          TEXT NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'running', 'converged', 'budget_exhausted',
                                    'diverged', 'failed', 'interrupted')),
  attempts        INTEGER NOT NULL DEFAULT 0,
  max_tokens      REAL,
  step            INTEGER,                     -- latest step seen in the event log
  tokens          INTEGER,                     -- latest token count seen
  train_loss      REAL,                        -- latest sampled training loss
  final_val_loss  REAL,                        -- last evaluation of the surviving timeline
  best_val_loss   REAL,
  tokens_to_target REAL,                       -- as reported by the trainer's target_reached
  trainer_status  TEXT,                        -- status of the latest run_end event
  wall_s          REAL,                        -- all attempts, as the orchestrator timed them
  tokens_per_s    REAL,
  peak_rss_bytes  INTEGER,
  peak_gpu_bytes  INTEGER,
  params          INTEGER,
  host            TEXT,
  device          TEXT,
  error           TEXT,                        -- why the run failed, in one line
  created_at      REAL NOT NULL,
  started_at      REAL,
  finished_at     REAL,
  ingest_offset   INTEGER NOT NULL DEFAULT 0,  -- bytes of events.jsonl already ingested
  last_seq        INTEGER NOT NULL DEFAULT 0   -- highest seq ingested
);
CREATE INDEX runs_by_sweep ON runs(sweep_id, plan_index);

-- One row per grid axis of a run (plus include overrides), values as JSON text, so any axis can
-- be grouped on: SELECT value, avg(final_val_loss) FROM run_axes JOIN runs USING(run_id) …
CREATE TABLE run_axes (
  run_id   TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  axis     TEXT NOT NULL,
  value    TEXT NOT NULL,
  position INTEGER NOT NULL,
  PRIMARY KEY (run_id, axis)
);

-- One row per launch of a run's process.
CREATE TABLE attempts (
  run_id       TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  attempt      INTEGER NOT NULL,
  executor     TEXT NOT NULL,       -- local, slurm, …
  executor_ref TEXT,                -- pid, job id: how the executor finds it again
  slot         TEXT,
  host         TEXT,
  resumed      INTEGER NOT NULL DEFAULT 0,
  start_seq    INTEGER NOT NULL DEFAULT 0,  -- last seq ingested before the launch
  launched_at  REAL NOT NULL,
  ended_at     REAL,
  exit_code    INTEGER,
  signal       INTEGER,
  outcome      TEXT,                -- the run status it led to, or 'retry'
  reason       TEXT,
  PRIMARY KEY (run_id, attempt)
);

CREATE TABLE evals (
  run_id   TEXT NOT NULL,
  seq      INTEGER NOT NULL,
  step     INTEGER,
  tokens   INTEGER,
  val_loss REAL,
  time     REAL,
  PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

CREATE TABLE train_steps (
  run_id       TEXT NOT NULL,
  seq          INTEGER NOT NULL,
  step         INTEGER,
  tokens       INTEGER,
  loss         REAL,
  lr           REAL,
  grad_norm    REAL,
  tokens_per_s REAL,
  time         REAL,
  PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

CREATE TABLE quant_stats (
  run_id             TEXT NOT NULL,
  seq                INTEGER NOT NULL,
  step               INTEGER,
  tokens             INTEGER,
  layer,                              -- index or name, as the trainer reports it
  gemm               TEXT,
  operand            TEXT,
  relative_error     REAL,
  fraction_saturated REAL,
  fraction_flushed   REAL,
  mean_error         REAL,
  time               REAL,
  PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

-- Lifecycle and divergence events (run_start, checkpoint, resume, divergence, target_reached,
-- run_end, and kinds this version does not know), the event's other fields as JSON.
CREATE TABLE events (
  run_id TEXT NOT NULL,
  seq    INTEGER NOT NULL,
  kind   TEXT NOT NULL,
  step   INTEGER,
  tokens INTEGER,
  time   REAL,
  detail TEXT NOT NULL DEFAULT '{}',
  PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
CREATE INDEX events_by_kind ON events(kind, run_id);

-- Runs of the current plans with their sweep name and axes.
CREATE VIEW run_summary AS
SELECT s.name AS sweep, r.run_id, r.arm, r.plan_index,
       (SELECT json_group_object(axis, json(value))
          FROM (SELECT axis, value FROM run_axes a WHERE a.run_id = r.run_id ORDER BY position))
         AS axes,
       r.status, r.attempts, r.step, r.tokens, r.max_tokens, r.final_val_loss, r.best_val_loss,
       r.tokens_to_target, r.wall_s, r.tokens_per_s, r.host, r.device, r.error
  FROM runs r JOIN sweeps s USING (sweep_id)
 WHERE r.plan_index IS NOT NULL;

-- Tokens to the sweep's target per run: the first evaluation at or below the target, linearly
-- interpolated with the evaluation before it; NULL when the target was never reached.
CREATE VIEW run_tokens_to_target AS
WITH ordered AS (
  SELECT e.run_id, e.tokens, e.val_loss,
         LAG(e.tokens) OVER w AS prev_tokens, LAG(e.val_loss) OVER w AS prev_loss
    FROM evals e WINDOW w AS (PARTITION BY e.run_id ORDER BY e.tokens, e.seq)
), crossings AS (
  SELECT o.run_id, s.target_val_loss AS target,
         CASE WHEN o.prev_loss IS NULL OR o.prev_loss <= s.target_val_loss
                   OR o.prev_loss = o.val_loss THEN o.tokens
              ELSE o.prev_tokens + (o.prev_loss - s.target_val_loss) / (o.prev_loss - o.val_loss)
                                   * (o.tokens - o.prev_tokens) END AS tokens_to_target,
         ROW_NUMBER() OVER (PARTITION BY o.run_id ORDER BY o.tokens) AS n
    FROM ordered o JOIN runs r USING (run_id) JOIN sweeps s USING (sweep_id)
   WHERE s.target_val_loss IS NOT NULL AND o.val_loss <= s.target_val_loss
)
SELECT s.name AS sweep, r.run_id, r.arm, r.status, s.target_val_loss AS target,
       c.tokens_to_target, c.tokens_to_target IS NOT NULL AS reached
  FROM runs r JOIN sweeps s USING (sweep_id)
  LEFT JOIN crossings c ON c.run_id = r.run_id AND c.n = 1
 WHERE r.plan_index IS NOT NULL;

-- Per arm of each sweep: how many runs ended how, and their losses.
CREATE VIEW arm_summary AS
SELECT s.name AS sweep, r.arm, MIN(r.arm_index) AS arm_index, COUNT(*) AS runs,
       SUM(r.status = 'converged') AS converged,
       SUM(r.status = 'budget_exhausted') AS budget_exhausted,
       SUM(r.status = 'diverged') AS diverged,
       SUM(r.status = 'failed') AS failed,
       SUM(r.status IN ('pending', 'running', 'interrupted')) AS unfinished,
       AVG(r.final_val_loss) AS mean_final_val_loss,
       MIN(r.final_val_loss) AS min_final_val_loss,
       MAX(r.final_val_loss) AS max_final_val_loss,
       AVG(r.best_val_loss) AS mean_best_val_loss,
       SUM(r.attempts) AS attempts
  FROM runs r JOIN sweeps s USING (sweep_id)
 WHERE r.plan_index IS NOT NULL
 GROUP BY s.sweep_id, r.arm
 ORDER BY s.sweep_id, MIN(r.arm_index);

CREATE VIEW divergence_events AS
SELECT s.name AS sweep, r.arm, e.run_id, e.seq, e.step, e.tokens,
       json_extract(e.detail, '$.reason') AS reason,
       json_extract(e.detail, '$.severity') AS severity,
       json_extract(e.detail, '$.value') AS value
  FROM events e JOIN runs r USING (run_id) JOIN sweeps s USING (sweep_id)
 WHERE e.kind = 'divergence';
)sql";

// The extra-token cost per run, as `mxablate table` computes it before taking medians: each run
// against the baseline arm's run with the same seed-axis values (and the same other grid
// settings); the baseline arm is the target's from_arm, else the recipe's first arm. A run that
// never reached the target is censored at its budget (ended) or at what it has trained (still
// going), and its figure is a lower bound; NULL where the baseline run never reached it.
constexpr const char* kSchemaV2 = R"sql(
CREATE VIEW run_extra_tokens AS
WITH keyed AS (
  SELECT t.sweep, r.sweep_id, r.run_id, r.arm, r.status, r.tokens, r.max_tokens,
         t.tokens_to_target,
         (SELECT group_concat(axis || '=' || value, ' ')
            FROM (SELECT axis, value FROM run_axes a
                   WHERE a.run_id = r.run_id AND a.axis LIKE '%seed' ORDER BY axis)) AS seeds,
         (SELECT group_concat(axis || '=' || value, ' ')
            FROM (SELECT axis, value FROM run_axes a
                   WHERE a.run_id = r.run_id AND a.axis NOT LIKE '%seed' ORDER BY axis)) AS settings
    FROM run_tokens_to_target t JOIN runs r USING (run_id)
), baseline AS (
  SELECT s.sweep_id,
         COALESCE(json_extract(s.target_json, '$.from_arm'),
                  (SELECT arm FROM runs WHERE sweep_id = s.sweep_id AND plan_index IS NOT NULL
                    ORDER BY arm_index LIMIT 1)) AS arm
    FROM sweeps s
)
SELECT k.sweep, k.run_id, k.arm, k.seeds, k.settings, b.arm AS baseline_arm,
       base.run_id AS baseline_run_id, k.tokens_to_target,
       base.tokens_to_target AS baseline_tokens_to_target,
       CASE WHEN base.tokens_to_target IS NULL THEN NULL
            ELSE 100.0 * (COALESCE(k.tokens_to_target,
                                   CASE WHEN k.status IN ('converged', 'budget_exhausted', 'diverged')
                                        THEN MAX(COALESCE(k.tokens, 0), COALESCE(k.max_tokens, 0))
                                        ELSE k.tokens END)
                          / base.tokens_to_target - 1.0) END AS extra_tokens_pct,
       k.tokens_to_target IS NULL AS lower_bound
  FROM keyed k JOIN baseline b ON b.sweep_id = k.sweep_id
  LEFT JOIN keyed base ON base.sweep_id = k.sweep_id AND base.arm = b.arm
                      AND base.seeds IS k.seeds AND base.settings IS k.settings;
)sql";

// What was ingested of each run's event log, beyond the byte offset: enough to recognise the
// same log again (contract::LogPosition as JSON: hashes of the consumed prefix and of the last
// consumed line, the file's device and inode, the seq/step state for checking the next line).
// NULL: unknown (a store from before version 3); the next read adopts the log at the offset.
constexpr const char* kSchemaV3 = R"sql(
ALTER TABLE runs ADD COLUMN ingest_position TEXT;
)sql";

// Version 4, the interventions release:
// - runs.interventions: each run's description against its baseline run (the planner's
//   contract::describe_differences, e.g. "SR(grad) + scale_rule mse"), and arm_summary showing
//   it: the same text `mxablate plan`, `table` and `report` show. NULL for runs registered before
//   version 4 until their recipe is run again (the planner re-registers every run).
// - quant_stats.occ_fraction: for Fprop's X under outlier clamping and compensation, the share of
//   its elements clamped and compensated (docs/trainer.md); NULL for every other record.
constexpr const char* kSchemaV4 = R"sql(
ALTER TABLE quant_stats ADD COLUMN occ_fraction REAL;
ALTER TABLE runs ADD COLUMN interventions TEXT;
DROP VIEW arm_summary;
CREATE VIEW arm_summary AS
SELECT s.name AS sweep, r.arm, MIN(r.arm_index) AS arm_index,
       group_concat(DISTINCT r.interventions) AS interventions, COUNT(*) AS runs,
       SUM(r.status = 'converged') AS converged,
       SUM(r.status = 'budget_exhausted') AS budget_exhausted,
       SUM(r.status = 'diverged') AS diverged,
       SUM(r.status = 'failed') AS failed,
       SUM(r.status IN ('pending', 'running', 'interrupted')) AS unfinished,
       AVG(r.final_val_loss) AS mean_final_val_loss,
       MIN(r.final_val_loss) AS min_final_val_loss,
       MAX(r.final_val_loss) AS max_final_val_loss,
       AVG(r.best_val_loss) AS mean_best_val_loss,
       SUM(r.attempts) AS attempts
  FROM runs r JOIN sweeps s USING (sweep_id)
 WHERE r.plan_index IS NOT NULL
 GROUP BY s.sweep_id, r.arm
 ORDER BY s.sweep_id, MIN(r.arm_index);
)sql";

// Version 5, busy slots (docs/design.md §9): where each attempt's time went, from its own run_end
// (the trainer's setup_s, standby_s, train_s, eval_s, checkpoint_s; NULL when it wrote none: a
// crash, an older trainer), and whether it was prestarted (waited as a standby for its slot, so
// its setup overlapped the run before it). Per attempt, because a resume discards the run_end of
// the attempt it continues.
constexpr const char* kSchemaV5 = R"sql(
ALTER TABLE attempts ADD COLUMN prestarted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN setup_s REAL;
ALTER TABLE attempts ADD COLUMN standby_s REAL;
ALTER TABLE attempts ADD COLUMN train_s REAL;
ALTER TABLE attempts ADD COLUMN eval_s REAL;
ALTER TABLE attempts ADD COLUMN checkpoint_s REAL;
)sql";

constexpr std::array<Migration, 5> kMigrations{{
    {1, "initial schema: sweeps, runs, run_axes, attempts, evals, train_steps, quant_stats, "
        "events; views run_summary, run_tokens_to_target, arm_summary, divergence_events",
     kSchemaV1},
    {2, "view run_extra_tokens", kSchemaV2},
    {3, "runs.ingest_position: the identity of what was ingested of each event log", kSchemaV3},
    {4, "runs.interventions, arm_summary.interventions (each run against its baseline) and "
        "quant_stats.occ_fraction (the share of X compensated under OCC)",
     kSchemaV4},
    {5, "attempts.prestarted, setup_s, standby_s, train_s, eval_s, checkpoint_s: where each "
        "attempt's time went (docs/design.md §9, \"Busy slots\")",
     kSchemaV5},
}};

}  // namespace

std::span<const Migration> migrations() { return kMigrations; }
int latest_schema_version() { return kMigrations.back().version; }

int schema_version(Database& db) {
  Statement st(db, "PRAGMA user_version");
  st.step();
  return static_cast<int>(st.get_int(0));
}

int migrate(Database& db, std::span<const Migration> list) {
  const int newest = list.empty() ? 0 : list.back().version;
  // Read the version inside the write transaction: two processes opening a fresh database at
  // once must not both apply version 1.
  Transaction tx(db);
  const int current = schema_version(db);
  if (current > newest)
    throw SqliteError(fmt::format("{}: schema version {} is newer than this mxablate knows ({}); "
                                  "use a newer mxablate",
                                  db.path(), current, newest),
                      0);
  int applied = 0;
  for (const Migration& m : list) {
    if (m.version <= current) continue;
    db.exec(m.sql, fmt::format("migrating to schema version {}", m.version));
    db.exec(fmt::format("PRAGMA user_version = {}", m.version));
    ++applied;
  }
  tx.commit();
  return applied;
}

bool is_final_result(const std::string& s) {
  return s == status::kConverged || s == status::kBudgetExhausted || s == status::kDiverged;
}

}  // namespace mxablate::results
