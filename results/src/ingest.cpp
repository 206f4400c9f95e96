#include "mxablate/results/ingest.h"

#include <algorithm>
#include <cmath>

#include "mxablate/contract/event_log.h"

namespace mxablate::results {
namespace {

using nlohmann::json;
namespace kind = contract::event_kind;

// Reads a numeric field; absent, null (the writer's NaN/Inf) or non-numeric → NULL.
std::optional<double> number(const json& ev, const char* key) {
  const auto it = ev.find(key);
  if (it == ev.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::optional<int64_t> integer(const json& ev, const char* key) {
  const std::optional<double> d = number(ev, key);
  if (!d || !std::isfinite(*d)) return std::nullopt;
  return static_cast<int64_t>(std::llround(*d));
}

std::optional<std::string> text(const json& ev, const char* key) {
  const auto it = ev.find(key);
  if (it == ev.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// The event without the columns stored separately.
std::string detail_of(const json& ev) {
  json d = ev;
  for (const char* k : {"seq", "kind", "time", "step", "tokens"}) d.erase(k);
  return d.dump(-1, ' ', false, json::error_handler_t::replace);
}

struct Statements {
  explicit Statements(Database& db)
      : eval(db,
             "INSERT OR IGNORE INTO evals (run_id, seq, step, tokens, val_loss, time) "
             "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
        train(db,
              "INSERT OR IGNORE INTO train_steps (run_id, seq, step, tokens, loss, lr, grad_norm, "
              "tokens_per_s, time) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
        quant(db,
              "INSERT OR IGNORE INTO quant_stats (run_id, seq, step, tokens, layer, gemm, operand, "
              "relative_error, fraction_saturated, fraction_flushed, mean_error, time, "
              "occ_fraction) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"),
        other(db,
              "INSERT OR IGNORE INTO events (run_id, seq, kind, step, tokens, time, detail) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)") {}
  Statement eval, train, quant, other;
};

void bind_layer(Statement& st, int index, const json& ev) {
  const auto it = ev.find("layer");
  if (it == ev.end() || it->is_null()) {
    st.bind(index, nullptr);
  } else if (it->is_number_integer()) {
    st.bind(index, it->get<int64_t>());
  } else if (it->is_string()) {
    st.bind(index, it->get<std::string>());
  } else {
    st.bind(index, it->dump());
  }
}

// Inserts one event; returns whether a row was added.
bool insert(Database& db, Statements& s, const std::string& run_id, const json& ev) {
  const int64_t seq = ev["seq"].get<int64_t>();
  const std::string k = ev["kind"].get<std::string>();
  Statement* st = nullptr;
  if (k == kind::kEval) {
    st = &s.eval;
    st->bind(1, run_id).bind(2, seq).bind(3, integer(ev, "step")).bind(4, integer(ev, "tokens"));
    st->bind(5, number(ev, "val_loss")).bind(6, number(ev, "time"));
  } else if (k == kind::kTrain) {
    st = &s.train;
    st->bind(1, run_id).bind(2, seq).bind(3, integer(ev, "step")).bind(4, integer(ev, "tokens"));
    st->bind(5, number(ev, "loss")).bind(6, number(ev, "lr")).bind(7, number(ev, "grad_norm"));
    st->bind(8, number(ev, "tokens_per_s")).bind(9, number(ev, "time"));
  } else if (k == kind::kQuantStats) {
    st = &s.quant;
    st->bind(1, run_id).bind(2, seq).bind(3, integer(ev, "step")).bind(4, integer(ev, "tokens"));
    bind_layer(*st, 5, ev);
    st->bind(6, text(ev, "gemm")).bind(7, text(ev, "operand"));
    st->bind(8, number(ev, "relative_error")).bind(9, number(ev, "fraction_saturated"));
    st->bind(10, number(ev, "fraction_flushed")).bind(11, number(ev, "mean_error"));
    st->bind(12, number(ev, "time")).bind(13, number(ev, "occ_fraction"));
  } else {
    st = &s.other;
    st->bind(1, run_id).bind(2, seq).bind(3, k).bind(4, integer(ev, "step"));
    st->bind(5, integer(ev, "tokens")).bind(6, number(ev, "time")).bind(7, detail_of(ev));
  }
  st->run();
  return db.changes() > 0;
}

int64_t discard_lost_timeline(Database& db, const std::string& run_id, int64_t after_seq,
                              int64_t before_seq) {
  int64_t removed = 0;
  for (const char* table : {"evals", "train_steps", "quant_stats", "events"}) {
    Statement del(db, std::string("DELETE FROM ") + table +
                          " WHERE run_id = ?1 AND seq > ?2 AND seq < ?3");
    del.bind(1, run_id).bind(2, after_seq).bind(3, before_seq).run();
    removed += db.changes();
  }
  return removed;
}

IngestSummary ingest(Database& db, const std::string& run_id, const std::vector<json>& events,
                     int64_t new_offset, const std::optional<std::string>& position,
                     bool forget_first) {
  IngestSummary summary;
  Transaction tx(db);
  if (forget_first) forget_run_events(db, run_id);
  Statements statements(db);
  int64_t max_seq = 0;
  std::optional<int64_t> latest_step, latest_tokens;
  std::optional<double> latest_loss;
  std::optional<json> run_start;
  for (const json& ev : events) {
    const int64_t seq = ev["seq"].get<int64_t>();
    const std::string& k = ev["kind"].get_ref<const std::string&>();
    max_seq = std::max(max_seq, seq);
    if (insert(db, statements, run_id, ev)) {
      ++summary.inserted;
    } else {
      ++summary.duplicates;
    }
    if (k == kind::kResume) {
      if (const auto keep = integer(ev, "discard_after_seq"))
        summary.discarded += discard_lost_timeline(db, run_id, *keep, seq);
    }
    if (const auto s = integer(ev, "step")) latest_step = s;
    if (const auto t = integer(ev, "tokens")) latest_tokens = t;
    if (k == kind::kTrain) {
      latest_loss = number(ev, "loss");
      summary.last_train = ev;
    } else if (k == kind::kEval) {
      summary.last_eval = ev;
    } else if (k == kind::kRunEnd) {
      summary.last_run_end = ev;
    } else if (k == kind::kRunStart) {
      run_start = ev;
    } else if (k == kind::kDivergence) {
      summary.divergences.push_back(ev);
    }
  }

  // Aggregates are recomputed from the stored rows (not accumulated), so a discarded timeline
  // can never leave a stale best loss or target crossing behind. Tokens to target are those of
  // the first evaluation at or below the target the trainer reports reaching: a live target
  // learned after the run passed it (docs/design.md §5, "Live targets") is reported at the
  // evaluation that learned it, but the run reached it earlier.
  Statement upd(db,
                "UPDATE runs SET ingest_offset = ?2, last_seq = MAX(last_seq, ?3), "
                "ingest_position = ?8, "
                "step = COALESCE(?4, step), tokens = COALESCE(?5, tokens), "
                "train_loss = CASE WHEN ?6 THEN ?7 ELSE train_loss END, "
                "final_val_loss = (SELECT val_loss FROM evals WHERE run_id = ?1 "
                "                  ORDER BY seq DESC LIMIT 1), "
                "best_val_loss = (SELECT MIN(val_loss) FROM evals WHERE run_id = ?1), "
                "tokens_to_target = (SELECT COALESCE((SELECT MIN(v.tokens) FROM evals v "
                "                      WHERE v.run_id = ?1 AND "
                "                      v.val_loss <= json_extract(r.detail, '$.target')), r.tokens) "
                "                    FROM events r WHERE r.run_id = ?1 AND "
                "                    r.kind = 'target_reached' ORDER BY r.seq LIMIT 1) "
                "WHERE run_id = ?1");
  upd.bind(1, run_id).bind(2, new_offset).bind(3, max_seq).bind(4, latest_step);
  upd.bind(5, latest_tokens).bind(6, summary.last_train ? 1 : 0).bind(7, latest_loss);
  upd.bind(8, position);
  upd.run();
  if (summary.last_run_end) {
    const json& e = *summary.last_run_end;
    Statement end(db,
                  "UPDATE runs SET trainer_status = ?2, "
                  "tokens_per_s = COALESCE(?4, tokens_per_s), "
                  "peak_rss_bytes = COALESCE(?5, peak_rss_bytes), "
                  "peak_gpu_bytes = COALESCE(?6, peak_gpu_bytes) WHERE run_id = ?1");
    end.bind(1, run_id).bind(2, text(e, "status"));
    end.bind(4, number(e, "tokens_per_s")).bind(5, integer(e, "peak_rss_bytes"));
    end.bind(6, integer(e, "peak_gpu_bytes"));
    end.run();
  }
  if (run_start) {
    Statement start(db,
                    "UPDATE runs SET params = COALESCE(?2, params), "
                    "device = COALESCE(?3, device) WHERE run_id = ?1");
    start.bind(1, run_id).bind(2, integer(*run_start, "params"));
    start.bind(3, text(*run_start, "device"));
    start.run();
  }
  tx.commit();
  return summary;
}

}  // namespace

void forget_run_events(Database& db, const std::string& run_id) {
  for (const char* table : {"evals", "train_steps", "quant_stats", "events"}) {
    Statement del(db, std::string("DELETE FROM ") + table + " WHERE run_id = ?1");
    del.bind(1, run_id).run();
  }
  Statement upd(db,
                "UPDATE runs SET ingest_offset = 0, last_seq = 0, ingest_position = NULL, "
                "step = NULL, tokens = NULL, train_loss = NULL, final_val_loss = NULL, "
                "best_val_loss = NULL, tokens_to_target = NULL, trainer_status = NULL "
                "WHERE run_id = ?1");
  upd.bind(1, run_id).run();
}

IngestSummary ingest_events(Database& db, const std::string& run_id,
                            const std::vector<json>& events, const contract::LogPosition& reached,
                            bool forget_first) {
  return ingest(db, run_id, events, reached.offset, reached.to_json().dump(), forget_first);
}

IngestSummary ingest_events(Database& db, const std::string& run_id,
                            const std::vector<json>& events, int64_t new_offset) {
  return ingest(db, run_id, events, new_offset, std::nullopt, false);
}

}  // namespace mxablate::results
