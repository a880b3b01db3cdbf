/* weight_pass.h — what a micro-batch's input half of a split backward
 * leaves for its weight half (torch.distributed.pipelining's
 * stage_backward_input). */
#ifndef VP_WEIGHT_PASS_H
#define VP_WEIGHT_PASS_H

#include "step.h"

/* The gradients stage_backward_input's pre-hooks keep for
 * stage_backward_weight, over the forward's nodes [first, end) with
 * `input` the stage's input (or the embeddings' output): the gradient of
 * every output of a node that takes both something computed from the input
 * and something that is not (a weight, or a weight's cast or gather): the
 * param groups' "intermediates" (torch/distributed/pipelining/_backward.py,
 * get_param_groups: the nodes where a parameter's path first meets the
 * inputs' closure). Folded layers count once per layer; on the CUDA
 * allocator's 512-byte blocks unless the step runs on the CPU. `*head`:
 * the share of nodes [head_first, end) (the head and the loss). False when
 * out of memory. */
bool vp_weight_pass_bytes(const vp_step *step, uint32_t first, uint32_t head_first, uint32_t end, vp_t input,
                          uint64_t *bytes, uint64_t *head);

#endif
