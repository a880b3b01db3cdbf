/* shard.c — the data-parallel layout of a recipe: what every layout
 * starts from, then its framework's plan (framework_<name>.c) of how it
 * divides and places the model states. */
#include "shard.h"

#include "framework.h"

#include <string.h>

uint64_t vp_shard_numel(uint64_t numel, unsigned ranks) {
    return ranks <= 1 ? numel : numel / ranks + (numel % ranks != 0);
}

/* FSDP2's FSDPParam._init_sharded_param (torch/distributed/_composable/fsdp/
 * _fsdp_param.py, torch 2.4-2.6): torch.chunk(param, world_size, dim=0),
 * each rank's chunk padded to chunks[0]'s size, ceil(dim0 / world_size)
 * rows; the all-gathered parameter is world_size such chunks. */
uint64_t vp_plan_shard_numel(const vp_shard_plan *plan, uint64_t numel, uint64_t dim0, unsigned ranks) {
    if (!plan->dim0_shards || ranks <= 1 || dim0 == 0 || numel % dim0) return vp_shard_numel(numel, ranks);
    return vp_shard_numel(dim0, ranks) * (numel / dim0);
}

const char *vp_shard_plan_make(const vp_recipe *r, const vp_precision *p, vp_shard_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->shards = (vp_shards){1, 1, 1};
    plan->expert_shards = plan->shards;
    plan->params_dtype = p->params;
    plan->gather_dtype = p->params;
    plan->grads_dtype = p->grads;
    plan->shard_grads_dtype = p->grads;
    plan->master_dtype = p->master;
    plan->states_dtype = p->states;
    if (r->dp == 0) return "dp: at least one data-parallel rank";
    const vp_framework_kind *framework = vp_framework_of(r);
    if (r->cp > 1 && !framework->context_parallel)
        return "cp: context parallelism needs framework = \"megatron\" or \"fsdp2\"";
    if (r->sequence_parallel && r->tp < 2) return "sequence_parallel: needs tp > 1";
    const char *problem = framework->plan(r, p, plan);
    if (!plan->reduce_dtype) plan->reduce_dtype = plan->shard_grads_dtype;
    /* without expert parallelism experts are parameters like any other:
     * ZeRO and FSDP shard them over every data-parallel rank */
    if (!framework->expert_parallel) plan->expert_shards = plan->shards;
    return problem;
}
