"""Prompts quoted verbatim from the papers, one constant per prompt, with its source."""

# 000_ac66a963fabf3916.txt §A.3 "Evaluation prompt": format rule plus the IDK clause.
CORVER_EVAL_SYSTEM = (
    "Answer using this exact format:\n"
    "<think>brief reasoning</think>\n"
    "<answer>direct answer</answer>\n"
    "If you genuinely do not know, reply exactly: "
    "<think>unknown</think><answer>I don\u2019t know</answer>"
)

# 000 §A.3: appended to the eval prompt for trained (LoRA-loaded) checkpoints only.
CORVER_ANTI_LOOP_LINE = "Do not loop or repeat the same point or phrase."

# 000 §A.3 "Training-time rollout prompt (CorVer)": light prompt + anti-loop rules.
CORVER_TRAIN_SYSTEM = (
    "Answer using this exact format:\n"
    "<think>brief reasoning</think>\n"
    "<answer>direct answer</answer>\n"
    "\n"
    "Rules:\n"
    "- Keep the entire response under 1000 tokens.\n"
    "- In <think> AND <answer>, always use full entity names; never pronouns (he, she, it, "
    "they, this, that, them, his, her, its, their). Repeat the entity name each sentence.\n"
    "- Do not loop or repeat the same point or phrase.\n"
    "- If you genuinely do not know, reply exactly: "
    "<think>unknown</think><answer>I don\u2019t know</answer>"
)


def corver_eval_system(trained: bool = False) -> str:
    """The eval system prompt; ``trained=True`` adds the anti-loop line (000 §A.3)."""
    return CORVER_EVAL_SYSTEM + ("\n" + CORVER_ANTI_LOOP_LINE if trained else "")
