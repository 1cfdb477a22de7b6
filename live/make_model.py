"""Makes the live suite's models offline, each with a byte-level BPE tokenizer trained on a few
sentences, vocabulary 320 (<s>=0, </s>=1, <pad>=2), context 1,024:

- a random 2-layer GPT-2 (no rotary embedding, so it runs on SGLang's plain-torch CPU path);
- with --moe, a random 2-layer Mixture-of-Experts model (Mixtral: 4 experts, top-2), whose
  routed experts SGLang returns with --enable-return-routed-experts.

Usage: make_model.py OUT_DIR [--moe]"""

import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GPT2Config, GPT2LMHeadModel, MixtralConfig, MixtralForCausalLM

VOCAB = 320
SPECIALS = ["<s>", "</s>", "<pad>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! SGLang serves tiny models.",
    "one two three four five six seven eight nine ten",
] * 50


def write_tokenizer(out: str) -> None:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    tok.save(os.path.join(out, "tokenizer.json"))
    names = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
    # A chat template, which NVIDIA Dynamo's frontend needs to list a model at all.
    template = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1024,
        "chat_template": template,
        **names,
    }
    for name, value in (("tokenizer_config.json", config), ("special_tokens_map.json", names)):
        with open(os.path.join(out, name), "w") as f:
            json.dump(value, f, indent=1)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}, f)


def write_model(out: str, *, moe: bool) -> None:
    specials = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}
    model: GPT2LMHeadModel | MixtralForCausalLM
    torch.manual_seed(0)
    if moe:
        moe_config = MixtralConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=1024,
            num_local_experts=4,
            num_experts_per_tok=2,
            tie_word_embeddings=False,
            torch_dtype="float32",
            **specials,
        )
        model = MixtralForCausalLM(moe_config)
    else:
        config = GPT2Config(
            vocab_size=VOCAB, n_positions=1024, n_embd=64, n_layer=2, n_head=4,
            tie_word_embeddings=True, **specials,
        )  # fmt: skip
        model = GPT2LMHeadModel(config)
    with torch.no_grad():  # less flat logits (and, for experts, a sharper router) than by default
        for param in model.parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.2)
    model.save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    target = sys.argv[1]
    os.makedirs(target, exist_ok=True)
    write_tokenizer(target)
    write_model(target, moe=sys.argv[2:] == ["--moe"])
    print("written", target, sorted(os.listdir(target)))
