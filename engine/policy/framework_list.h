/* framework_list.h — every training framework, once, in the order a
 * recipe's `framework` key lists them. An X-macro list: a file that
 * includes it defines VP_FRAMEWORK(ID, name) first, for the enum constant
 * VP_FRAMEWORK_<ID> and the entry vp_framework_<name> that
 * framework_<name>.c defines beside its plan. Adding a framework is its
 * file plus one line here; the Makefile picks the file up by its wildcard. */
VP_FRAMEWORK(TORCH, torch)
VP_FRAMEWORK(DEEPSPEED, deepspeed)
VP_FRAMEWORK(FSDP, fsdp)
VP_FRAMEWORK(MEGATRON, megatron)
VP_FRAMEWORK(FSDP2, fsdp2)
