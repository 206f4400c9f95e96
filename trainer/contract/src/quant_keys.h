// The numerics keys of a run config (internal to trainer/contract): the precision section and
// the per-layer quant keys, read and written by one reader and one writer for the base sections,
// the schedule's phases and the overrides alike, so a key means the same wherever it appears
// (docs/design.md §5, "Numerics keys"; §12 says where a new per-layer setting goes).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "json_reading.h"
#include "mxablate/contract/quant_settings.h"

namespace mxablate::contract::detail {

// ---- Reading: each reader records what it sets in a LayerPatch.

// A precision section ({fprop, dgrad, wgrad}, any of them).
void read_precision(const nlohmann::json& j, const std::string& path, LayerPatch& p);
// The per-layer keys of a quant section (the caller reads the section's other keys and finishes).
void read_layer_quant(ObjectReader& r, LayerPatch& p);
// One element of `overrides`: layers plus what it sets.
LayerOverride read_override(const nlohmann::json& v, const std::string& path);
// One element of `precision_schedule`, applied to the previous phase's precisions (or `base`).
PrecisionPhase read_phase(const nlohmann::json& v, const std::string& path,
                          const PrecisionPhase* previous, const PrecisionConfig& base);

// ---- Writing.

// How much a config's JSON holds: kCompact is the run's identity (to_json: gemm_path as the id
// spells it, the keys config_keys.h marks kWrittenWhenSet only off their defaults); kFull writes
// every key at its value; kKeyTree also fills optional sections and lists with example values
// (the recipe schema).
enum class JsonKeys { kCompact, kFull, kKeyTree };

// A setting's name as a JSON string.
nlohmann::json name_json(std::string_view name);
nlohmann::json precision_json(const PrecisionConfig& p);
// The per-layer keys of a quant section, every one of them, into `out` (kKeyTree: dge and occ
// at example values when off).
void write_layer_quant(const LayerSettings& s, JsonKeys keys, nlohmann::json& out);
// What a patch sets: {precision: {…}, quant: {…}} with only its keys.
nlohmann::json patch_json(const LayerPatch& p);
// A patch setting every per-layer key: the schema's example of an override.
LayerPatch full_patch();

}  // namespace mxablate::contract::detail
