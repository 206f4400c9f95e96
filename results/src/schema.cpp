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

// Version 6, sweeps over several models and runs stopped as hopeless (docs/design.md §6):
// - block_targets: the target of each model block of a sweep (one row per model; a single-model
//   sweep may have one too), fixed once the block's baseline has reached it (store.h,
//   set_block_target). sweeps.target_val_loss stays the target of a single-model sweep that has no
//   row here, and a fixed `val_loss` target of any sweep.
// - runs.model: the run's model label (contract::model_label: "llama-20m", "d512-L6-h8/4-f1408"),
//   what a run's block target is found by. Backfilled from config_json for presets; NULL for a
//   custom shape registered before version 6 until its recipe is run again.
// - runs.status may be 'projected_not_reached': stopped early because its validation curve's
//   projection says it cannot reach the target within its budget; a final result.
// SQLite cannot alter a CHECK constraint, so runs is rebuilt (create, copy, drop, rename: the
// procedure of sqlite.org/lang_altertable.html, with foreign keys off around the migrations: see
// migrate below) and the views that read it are dropped first and made again after.
constexpr const char* kSchemaV6 = R"sql(
DROP VIEW run_summary;
DROP VIEW run_extra_tokens;
DROP VIEW run_tokens_to_target;
DROP VIEW arm_summary;
DROP VIEW divergence_events;

CREATE TABLE runs_v6 (
  run_id          TEXT PRIMARY KEY,
  sweep_id        INTEGER NOT NULL REFERENCES sweeps(sweep_id),
  arm             TEXT NOT NULL,
  arm_index       INTEGER NOT NULL,
  plan_index      INTEGER,
  config_json     TEXT NOT NULL,
  run_dir         TEXT NOT NULL,
  status          TEXT NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'running', 'converged', 'budget_exhausted',
                                    'diverged', 'failed', 'interrupted',
                                    'projected_not_reached')),
  attempts        INTEGER NOT NULL DEFAULT 0,
  max_tokens      REAL,
  step            INTEGER,
  tokens          INTEGER,
  train_loss      REAL,
  final_val_loss  REAL,
  best_val_loss   REAL,
  tokens_to_target REAL,
  trainer_status  TEXT,
  wall_s          REAL,
  tokens_per_s    REAL,
  peak_rss_bytes  INTEGER,
  peak_gpu_bytes  INTEGER,
  params          INTEGER,
  host            TEXT,
  device          TEXT,
  error           TEXT,
  created_at      REAL NOT NULL,
  started_at      REAL,
  finished_at     REAL,
  ingest_offset   INTEGER NOT NULL DEFAULT 0,
  last_seq        INTEGER NOT NULL DEFAULT 0,
  ingest_position TEXT,
  interventions   TEXT,
  model           TEXT                         -- contract::model_label of the run's model
);
INSERT INTO runs_v6 (run_id, sweep_id, arm, arm_index, plan_index, config_json, run_dir, status,
                     attempts, max_tokens, step, tokens, train_loss, final_val_loss,
                     best_val_loss, tokens_to_target, trainer_status, wall_s, tokens_per_s,
                     peak_rss_bytes, peak_gpu_bytes, params, host, device, error, created_at,
                     started_at, finished_at, ingest_offset, last_seq, ingest_position,
                     interventions, model)
SELECT run_id, sweep_id, arm, arm_index, plan_index, config_json, run_dir, status,
       attempts, max_tokens, step, tokens, train_loss, final_val_loss,
       best_val_loss, tokens_to_target, trainer_status, wall_s, tokens_per_s,
       peak_rss_bytes, peak_gpu_bytes, params, host, device, error, created_at,
       started_at, finished_at, ingest_offset, last_seq, ingest_position, interventions,
       CASE WHEN json_valid(config_json) AND json_type(config_json, '$.model') = 'text'
            THEN json_extract(config_json, '$.model') END
  FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v6 RENAME TO runs;
CREATE INDEX runs_by_sweep ON runs(sweep_id, plan_index);

CREATE TABLE block_targets (
  sweep_id INTEGER NOT NULL REFERENCES sweeps(sweep_id),
  model    TEXT NOT NULL,               -- contract::model_label, as runs.model
  val_loss REAL NOT NULL,
  basis    TEXT NOT NULL DEFAULT '',    -- how it was found ("median of arm fp8 at 10 % of …")
  fixed_at REAL,                        -- when it was stored (Unix seconds, as every *_at)
  PRIMARY KEY (sweep_id, model)
);
-- Runs of the current plans with their sweep name, model and axes.
CREATE VIEW run_summary AS
SELECT s.name AS sweep, r.run_id, r.arm, r.model, r.plan_index,
       (SELECT json_group_object(axis, json(value))
          FROM (SELECT axis, value FROM run_axes a WHERE a.run_id = r.run_id ORDER BY position))
         AS axes,
       r.status, r.attempts, r.step, r.tokens, r.max_tokens, r.final_val_loss, r.best_val_loss,
       r.tokens_to_target, r.wall_s, r.tokens_per_s, r.host, r.device, r.error
  FROM runs r JOIN sweeps s USING (sweep_id)
 WHERE r.plan_index IS NOT NULL;

-- Each planned run's target: its model block's (block_targets), else the sweep's stored one
-- where that is the run's: the sweep has one model, or its target is a fixed val_loss. NULL
-- where no target is known yet: a view never guesses one.
CREATE VIEW run_targets AS
WITH models AS (
  SELECT sweep_id, COUNT(DISTINCT COALESCE(model, '')) AS n
    FROM runs WHERE plan_index IS NOT NULL GROUP BY sweep_id
)
SELECT s.name AS sweep, r.sweep_id, r.run_id, r.arm, r.model, r.status,
       COALESCE(b.val_loss,
                CASE WHEN m.n <= 1 OR json_type(s.target_json, '$.val_loss') IN ('integer', 'real')
                     THEN s.target_val_loss END) AS target,
       CASE WHEN b.val_loss IS NOT NULL THEN 'block'
            WHEN s.target_val_loss IS NOT NULL
                 AND (m.n <= 1 OR json_type(s.target_json, '$.val_loss') IN ('integer', 'real'))
            THEN 'sweep' END AS target_source
  FROM runs r JOIN sweeps s USING (sweep_id) JOIN models m USING (sweep_id)
  LEFT JOIN block_targets b ON b.sweep_id = r.sweep_id AND b.model = r.model
 WHERE r.plan_index IS NOT NULL;

-- Tokens to each run's target, by the analysis' rule (analysis/curves.h, tokens_to_target):
-- evaluations in (tokens, seq) order; the first at or below the target, linearly interpolated
-- with the one before it (its own tokens when it is the first); a missing or infinite loss ends
-- the curve. reached is NULL where the target is not known.
CREATE VIEW run_tokens_to_target AS
WITH ordered AS (
  SELECT e.run_id, e.tokens, e.val_loss,
         LAG(e.tokens) OVER w AS prev_tokens, LAG(e.val_loss) OVER w AS prev_loss,
         ROW_NUMBER() OVER w AS pos,
         SUM(e.val_loss IS NULL OR abs(e.val_loss) > 1.7976931348623157e308)
           OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS ended
    FROM evals e WINDOW w AS (PARTITION BY e.run_id ORDER BY e.tokens, e.seq)
), crossings AS (
  SELECT o.run_id,
         CASE WHEN o.prev_loss IS NULL THEN o.tokens
              ELSE o.prev_tokens + (o.prev_loss - t.target) / (o.prev_loss - o.val_loss)
                                   * (o.tokens - o.prev_tokens) END AS tokens_to_target,
         ROW_NUMBER() OVER (PARTITION BY o.run_id ORDER BY o.pos) AS n
    FROM ordered o JOIN run_targets t USING (run_id)
   WHERE t.target IS NOT NULL AND o.ended = 0 AND o.val_loss <= t.target
)
SELECT t.sweep, t.run_id, t.arm, t.model, t.status, t.target, c.tokens_to_target,
       CASE WHEN t.target IS NULL THEN NULL ELSE c.tokens_to_target IS NOT NULL END AS reached
  FROM run_targets t LEFT JOIN crossings c ON c.run_id = t.run_id AND c.n = 1;

-- The extra-token cost per run, as `mxablate table` computes it before taking medians: each run
-- against the baseline arm's run of the same model with the same seed-axis values (and the same
-- other grid settings); the baseline arm is the target's from_arm, else the recipe's first arm.
-- A run that never reached its target is censored at its budget (a final result: it will not
-- train further) or at what it has trained (still going), and its figure is a lower bound. NULL
-- where the baseline run never reached the target, and where no target is known.
CREATE VIEW run_extra_tokens AS
WITH keyed AS (
  SELECT t.sweep, r.sweep_id, r.run_id, r.arm, r.model, r.status, r.tokens, r.max_tokens,
         t.target, t.tokens_to_target,
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
SELECT k.sweep, k.run_id, k.arm, k.model, k.seeds, k.settings, b.arm AS baseline_arm,
       base.run_id AS baseline_run_id, k.target, k.tokens_to_target,
       base.tokens_to_target AS baseline_tokens_to_target,
       -- A run with no result yet (pending, running short of the target, interrupted, failed)
       -- has no cost: NULL, as the table leaves it out (analysis/src/sweep_analysis.cpp).
       CASE WHEN k.target IS NULL OR base.tokens_to_target IS NULL THEN NULL
            WHEN k.tokens_to_target IS NULL
                 AND k.status NOT IN ('converged', 'budget_exhausted', 'diverged',
                                      'projected_not_reached') THEN NULL
            ELSE 100.0 * (COALESCE(k.tokens_to_target,
                                   MAX(COALESCE(k.tokens, 0), COALESCE(k.max_tokens, 0)))
                          / base.tokens_to_target - 1.0) END AS extra_tokens_pct,
       CASE WHEN k.target IS NULL THEN NULL
            WHEN k.tokens_to_target IS NULL
                 AND k.status NOT IN ('converged', 'budget_exhausted', 'diverged',
                                      'projected_not_reached') THEN NULL
            ELSE k.tokens_to_target IS NULL END AS lower_bound
  FROM keyed k JOIN baseline b ON b.sweep_id = k.sweep_id
  LEFT JOIN keyed base ON base.sweep_id = k.sweep_id AND base.arm = b.arm
                      AND base.model IS k.model AND base.seeds IS k.seeds
                      AND base.settings IS k.settings;

-- Per (model, arm) of each sweep: how its runs ended, their losses, and the paired extra-token
-- cost as `mxablate table` gives it (docs/design.md §6, "Intervals and the paired test"): n runs
-- with a figure, their median, and their range (lowest, highest: a range of n seeds, never called
-- a confidence interval). lower_bounds: how many of the n figures are censored (a run that did not
-- reach the target); median_at_least: the median is then only a lower bound, as the analysis
-- rules (analysis/seed_stats.h, censored_median): raising every censored figure to +infinity
-- would change the median's order statistics. range_high_pct is a lower bound whenever
-- lower_bounds > 0.
CREATE VIEW arm_summary AS
WITH costs AS (
  SELECT x.run_id, x.extra_tokens_pct AS pct, x.lower_bound,
         ROW_NUMBER() OVER (PARTITION BY r.sweep_id, r.model, r.arm ORDER BY x.extra_tokens_pct)
           AS k,
         ROW_NUMBER() OVER (PARTITION BY r.sweep_id, r.model, r.arm, x.lower_bound
                            ORDER BY x.extra_tokens_pct) AS k_exact,
         COUNT(*) OVER (PARTITION BY r.sweep_id, r.model, r.arm) AS n
    FROM run_extra_tokens x JOIN runs r USING (run_id)
   WHERE x.extra_tokens_pct IS NOT NULL
), medians AS (
  -- The median's order statistics are the ((n+1)/2)-th and (n/2+1)-th (one for odd n): each is
  -- exact when the exact figures alone put the same value there.
  SELECT r.sweep_id, r.model, r.arm,
         MAX(CASE WHEN c.k = (c.n + 1) / 2 THEN c.pct END) AS low_all,
         MAX(CASE WHEN c.lower_bound = 0 AND c.k_exact = (c.n + 1) / 2 THEN c.pct END)
           AS low_exact,
         MAX(CASE WHEN c.k = c.n / 2 + 1 THEN c.pct END) AS high_all,
         MAX(CASE WHEN c.lower_bound = 0 AND c.k_exact = c.n / 2 + 1 THEN c.pct END) AS high_exact
    FROM costs c JOIN runs r USING (run_id)
   GROUP BY r.sweep_id, r.model, r.arm
)
SELECT s.name AS sweep, r.model, r.arm, MIN(r.arm_index) AS arm_index,
       group_concat(DISTINCT r.interventions) AS interventions, COUNT(*) AS runs,
       SUM(r.status = 'converged') AS converged,
       SUM(r.status = 'budget_exhausted') AS budget_exhausted,
       SUM(r.status = 'projected_not_reached') AS projected_not_reached,
       SUM(r.status = 'diverged') AS diverged,
       SUM(r.status = 'failed') AS failed,
       SUM(r.status IN ('pending', 'running', 'interrupted')) AS unfinished,
       -- Final losses of runs with a result: a run cut short has a last loss, not a final one.
       AVG(CASE WHEN r.status IN ('converged', 'budget_exhausted', 'diverged',
                                  'projected_not_reached') OR c.lower_bound = 0
                THEN r.final_val_loss END) AS mean_final_val_loss,
       MIN(CASE WHEN r.status IN ('converged', 'budget_exhausted', 'diverged',
                                  'projected_not_reached') OR c.lower_bound = 0
                THEN r.final_val_loss END) AS min_final_val_loss,
       MAX(CASE WHEN r.status IN ('converged', 'budget_exhausted', 'diverged',
                                  'projected_not_reached') OR c.lower_bound = 0
                THEN r.final_val_loss END) AS max_final_val_loss,
       AVG(CASE WHEN r.status IN ('converged', 'budget_exhausted', 'diverged',
                                  'projected_not_reached') OR c.lower_bound = 0
                THEN r.best_val_loss END) AS mean_best_val_loss,
       SUM(r.attempts) AS attempts,
       COUNT(c.run_id) AS n,
       AVG(CASE WHEN c.k IN ((c.n + 1) / 2, c.n / 2 + 1) THEN c.pct END)
         AS median_extra_tokens_pct,
       MIN(c.pct) AS range_low_pct,
       MAX(c.pct) AS range_high_pct,
       COALESCE(SUM(c.lower_bound), 0) AS lower_bounds,
       CASE WHEN COUNT(c.run_id) = 0 THEN NULL
            ELSE MAX(m.low_exact IS NOT m.low_all OR m.high_exact IS NOT m.high_all) END
         AS median_at_least
  FROM runs r JOIN sweeps s USING (sweep_id)
  LEFT JOIN costs c ON c.run_id = r.run_id
  LEFT JOIN medians m ON m.sweep_id = r.sweep_id AND m.model IS r.model AND m.arm = r.arm
 WHERE r.plan_index IS NOT NULL
 GROUP BY s.sweep_id, r.model, r.arm
 ORDER BY s.sweep_id,  -- models by parameter count as the table orders its blocks, then plan order
          (SELECT MIN(params) FROM runs m WHERE m.sweep_id = s.sweep_id AND m.model IS r.model)
            NULLS LAST,
          (SELECT MIN(plan_index) FROM runs m WHERE m.sweep_id = s.sweep_id AND m.model IS r.model),
          MIN(r.arm_index);

CREATE VIEW divergence_events AS
SELECT s.name AS sweep, r.arm, r.model, e.run_id, e.seq, e.step, e.tokens,
       json_extract(e.detail, '$.reason') AS reason,
       json_extract(e.detail, '$.severity') AS severity,
       json_extract(e.detail, '$.value') AS value
  FROM events e JOIN runs r USING (run_id) JOIN sweeps s USING (sweep_id)
 WHERE e.kind = 'divergence';
)sql";

constexpr std::array<Migration, 6> kMigrations{{
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
    {6, "block_targets (each model block's target), runs.model, status "
        "'projected_not_reached'; views give each run its model's target, arm_summary per "
        "(model, arm)",
     kSchemaV6},
}};

}  // namespace

std::span<const Migration> migrations() { return kMigrations; }
int latest_schema_version() { return kMigrations.back().version; }

int schema_version(Database& db) {
  Statement st(db, "PRAGMA user_version");
  st.step();
  return static_cast<int>(st.get_int(0));
}

namespace {

// Foreign keys off for the migrations and back on after (or after a failure). A migration that
// rebuilds a table (version 6: runs) drops the old one, and with foreign keys on DROP TABLE deletes
// its rows first, which ON DELETE CASCADE would carry into run_axes and attempts. The pragma is a
// no-op inside a transaction, so it is set around it. The rebuild copies every key as it was, so
// no reference can dangle afterwards.
class ForeignKeysOff {
 public:
  explicit ForeignKeysOff(Database& db) : db_(db) {
    Statement st(db_, "PRAGMA foreign_keys");
    on_ = st.step() && st.get_int(0) != 0;
    st.reset();
    if (on_) db_.exec("PRAGMA foreign_keys = OFF", "switching foreign keys off to migrate");
  }
  ~ForeignKeysOff() {
    if (!on_) return;
    try {
      db_.exec("PRAGMA foreign_keys = ON", "switching foreign keys on after migrating");
    } catch (...) {  // a destructor never throws; the connection is closed by the caller anyway
    }
  }
  ForeignKeysOff(const ForeignKeysOff&) = delete;
  ForeignKeysOff& operator=(const ForeignKeysOff&) = delete;

 private:
  Database& db_;
  bool on_ = false;
};

}  // namespace

int migrate(Database& db, std::span<const Migration> list) {
  const int newest = list.empty() ? 0 : list.back().version;
  const ForeignKeysOff foreign_keys_off(db);
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
  return s == status::kConverged || s == status::kBudgetExhausted || s == status::kDiverged ||
         s == status::kProjectedNotReached;
}

}  // namespace mxablate::results
