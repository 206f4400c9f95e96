// What the ranks of a sharded run replicate (docs/design.md §4, "What the ranks replicate"): the
// one rule for which weights a sharded step keeps as a BF16 working copy on every rank beside a
// float32 master sharded over the ranks, as Megatron-LM's distributed optimizer keeps its BF16
// parameters beside sharded float32 main parameters. The step engine, the memory plan and the
// weight cache's size all ask it.
#pragma once

#include <vector>

#include "mxablate/contract/run_config.h"
#include "mxablate/trainer/plan/linear_plan.h"

namespace mxablate::trainer {

// Per linear layer (plans.layers' order, LM head last): whether a run of `config` keeps that
// layer's weight as a BF16 working copy. A weight qualifies where its copy changes no bit: a
// linear (the LM head included) whose GEMMs read W only rounded to BF16 (weight_shares_rounding)
// in every phase of the precision schedule, so bf16(master) is exactly what they read. Every
// other weight keeps a float32 working copy, which is then its own master: a quantizer reads the
// float32 values (a BF16 copy would round W twice, a change to the arm, not to its cost), and the
// embedding and the norms' gains are read in float32. Only sharded runs (parallel.shard set,
// parallel.data ≥ 2) keep masters apart; everything is false otherwise.
std::vector<bool> bf16_working_copies(const contract::RunConfig& config, const RunLayerPlans& plans);

}  // namespace mxablate::trainer
