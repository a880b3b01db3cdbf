/* compile_region.h — a layer run as a torch.compile region (torchtitan
 * compiles each TransformerBlock): what its forward keeps for backward is
 * the min cut's choice (compile_partition.h), the rest recomputed in
 * backward. */
#ifndef VP_COMPILE_REGION_H
#define VP_COMPILE_REGION_H

#include <stdbool.h>

#include "recipe.h"
#include "sim.h"

/* After the region's forward, which recorded nodes [first_node, end_node)
 * and made tensors from `first_tensor` on: each saved tensor the cut does
 * not save is let go (backward recomputes it), each value the cut saves
 * that autograd did not is held by the region until its backward. False
 * (the sim's status set) when the region is beyond the partitioner. */
bool vp_compile_region(vp_sim *sim, uint32_t first_node, uint32_t end_node, vp_t first_tensor);

/* The recipe's compile = true with what it cannot be modelled with, or NULL. */
const char *vp_compile_recipe_problem(const vp_recipe *recipe);

#endif
