"""A real training step measured with the field kit (tools/measure.py), on
CPU: the harness's LLaMA (tests/torch/models/, HF's modeling written out)
trained with AdamW for three steps, the third measured. Writes the
measurement and the model's config.json into the folder given, for
`vramplan compare` (tests/lua/compare_spec.lua)."""
import json
import os
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools"))
sys.path.insert(0, HERE)

from measure import Measure  # noqa: E402
from models import Autocast, CausalLM  # noqa: E402


class LigerSwiGLUMLP(torch.nn.Module):
    """Stands for liger_kernel's class of that name, whose forward Liger's
    instance patching binds to a model's existing MLP modules."""

    def forward(self, ac, x):
        return self.liger_forward(ac, x)


def main(out_dir, liger=False):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "tie_word_embeddings": False,
           "max_position_embeddings": 128}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    # with `liger`: Liger's RMSNorm as a class swapped in (models/liger.py), its
    # SwiGLU bound to the MLPs as apply_liger_kernel_to_llama(model=...) binds it
    model = CausalLM(dict(cfg, liger_rms_norm=liger, liger_swiglu=liger))
    for module in model.modules():
        if liger and hasattr(module, "liger_forward"):
            module.forward = types.MethodType(LigerSwiGLUMLP.forward, module)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    recipe = {"precision": "fp32", "optimizer": "adamw", "optimizer_impl": "foreach", "micro_batch": 2,
              "seq_len": 32, "device": "cpu", "torch_version": "1.13", "attention": "eager"}
    m = Measure(os.path.join(out_dir, "measured.json"), model="config.json", recipe=recipe, device="cpu")
    ac = Autocast(None)
    for step in range(3):
        with m.step(measuring=step == 2):
            ids = torch.randint(256, (2, 32))
            loss, logits = model(ac, ids, ids.clone())
            loss.backward()
            if step == 2:
                m.after_backward(model)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    m.write(model, optimizer)


if __name__ == "__main__":
    main(sys.argv[1], liger=len(sys.argv) > 2 and sys.argv[2] == "liger")
