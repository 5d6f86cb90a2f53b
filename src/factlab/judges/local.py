"""The in-process judge backends: ``TransformersJudge`` (a local HF model, lazily loaded once,
left-padded batches through ``factlab.models.generate``; ``choose`` by next-token score) and
``VLLMJudge`` (vLLM's offline engine, an optional import).
"""

from __future__ import annotations

import logging
from typing import Any

from ..decoding import next_token_logits
from ..models import generate, load_frozen_model, model_fingerprint, resolve_model
from .base import Judge, JudgeUnavailable, render_prompt

log = logging.getLogger(__name__)


class TransformersJudge(Judge):
    """A local HF causal LM as judge; loaded on first use (or pass ``model_obj``/``tokenizer``
    to share an already-loaded model)."""

    backend = "transformers"

    def __init__(self, model: str = "smollm2-135m-instruct", *, dtype: str = "float32", device: str = "auto",
                 batch_size: int = 16, max_prompt_tokens: int | None = None, progress: bool = False,
                 model_obj=None, tokenizer=None, **kw: Any):
        super().__init__(model, **kw)
        self.dtype, self.device, self.batch_size = dtype, device, batch_size
        self.max_prompt_tokens, self.progress = max_prompt_tokens, progress
        self._model, self._tok = model_obj, tokenizer
        self.model_fingerprint = model_fingerprint(model)  # a local folder: what it holds now

    def answer_settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self.dtype, "max_prompt_tokens": self.max_prompt_tokens}
        if self.model_fingerprint:  # a local model is keyed by its content, not its path
            out["model_fingerprint"] = self.model_fingerprint
        return out

    def load(self):
        if self._model is None:
            log.info("loading judge model %s", self.model_name)
            self._model, self._tok = load_frozen_model(self.model_name, dtype=self.dtype, device=self.device)
        return self._model, self._tok

    def render(self, prompt: str, prefix: str = "") -> str:
        _, tok = self.load()
        if self.max_prompt_tokens is not None:
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            if len(ids) > self.max_prompt_tokens:  # keep the end: the question the judge must answer
                self.stats["truncated_prompts"] += 1
                prompt = tok.decode(ids[-self.max_prompt_tokens:])
        return render_prompt(tok, prompt, system=self.system, enable_thinking=self.enable_thinking, prefix=prefix)

    def _generate(self, prompts: list[str], prefix: str = "") -> list[str]:
        model, tok = self.load()
        rendered = [self.render(p, prefix) for p in prompts]
        gens = generate(model, tok, rendered, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                        top_p=self.top_p, batch_size=self.batch_size, seed=self.seed, progress=self.progress,
                        desc="judge")
        self.stats["prompt_tokens"] += sum(len(tok(r, add_special_tokens=False)["input_ids"]) for r in rendered)
        self.stats["completion_tokens"] += sum(len(g[0].token_ids) for g in gens)
        return [g[0].text for g in gens]

    def _choose(self, prompts: list[str], options: tuple[str, ...], prefix: str = "") -> list[str]:
        """Next-token scores after the rendered prompt (and ``prefix``): each option's score is the best logit
        among the first tokens of its spellings (as written, capitalized, lower case, with a
        leading space)."""
        import torch

        model, tok = self.load()
        first_ids = []
        for opt in options:
            spellings = {opt, opt.capitalize(), opt.lower(), opt.upper()}
            ids = {tok(v, add_special_tokens=False)["input_ids"][0] for s in spellings for v in (s, " " + s)
                   if tok(v, add_special_tokens=False)["input_ids"]}
            first_ids.append(sorted(ids))
        rendered = [tok(self.render(p, prefix), add_special_tokens=False)["input_ids"] for p in prompts]
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        out: list[str] = []
        was_training = model.training
        model.eval()
        try:
            order = sorted(range(len(rendered)), key=lambda i: -len(rendered[i]))  # similar lengths batch together
            picked: dict[int, str] = {}
            for i in range(0, len(order), self.batch_size):
                idx = order[i:i + self.batch_size]
                logits = next_token_logits(model, [rendered[j] for j in idx], pad)
                self.stats["prompt_tokens"] += sum(len(rendered[j]) for j in idx)
                scores = torch.stack([logits[:, ids].max(dim=1).values for ids in first_ids], dim=1)
                for j, k in zip(idx, scores.argmax(dim=1).tolist()):
                    picked[j] = options[k]
            out = [picked[j] for j in range(len(rendered))]
        finally:
            model.train(was_training)
        self.stats["completion_tokens"] += len(out)
        return out


class VLLMJudge(Judge):
    """vLLM's offline engine as judge (GPU). Requires ``pip install 'factlab[gpu]'``."""

    backend = "vllm"

    def __init__(self, model: str, *, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.85,
                 max_model_len: int | None = None, dtype: str = "auto", **kw: Any):
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise JudgeUnavailable(
                "the 'vllm' judge backend needs vLLM, which is not installed: "
                "`pip install 'factlab[gpu]'` on a CUDA machine, or use backend 'transformers' "
                "or 'openai' (a `vllm serve` endpoint)") from None
        super().__init__(model, **kw)
        self._engine_kw = dict(tensor_parallel_size=tensor_parallel_size, dtype=dtype,
                               gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len)
        self._llm = None
        self.model_fingerprint = model_fingerprint(model)

    def answer_settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self._engine_kw["dtype"], "max_model_len": self._engine_kw["max_model_len"]}
        if self.model_fingerprint:
            out["model_fingerprint"] = self.model_fingerprint
        return out

    def _generate(self, prompts: list[str], prefix: str = "") -> list[str]:  # pragma: no cover - needs a GPU and vLLM
        from vllm import LLM, SamplingParams


        if self._llm is None:
            self._llm = LLM(model=resolve_model(self.model_name), seed=self.seed,
                            **{k: v for k, v in self._engine_kw.items() if v is not None})
        sp = SamplingParams(max_tokens=self.max_new_tokens, temperature=self.temperature,
                            top_p=self.top_p, seed=self.seed)
        msgs = [self.messages(p, prefix) for p in prompts]
        extra: dict[str, Any] = {} if self.enable_thinking is None else {
            "chat_template_kwargs": {"enable_thinking": self.enable_thinking}}
        if prefix:
            extra.update(add_generation_prompt=False, continue_final_message=True)
        outs = self._llm.chat(msgs, sp, use_tqdm=False, **extra)
        self.stats["prompt_tokens"] += sum(len(o.prompt_token_ids or []) for o in outs)
        self.stats["completion_tokens"] += sum(len(o.outputs[0].token_ids) for o in outs)
        return [o.outputs[0].text for o in outs]
