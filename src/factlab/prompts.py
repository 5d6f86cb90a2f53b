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


# ---- Binary RAR (001_f9c1f8134c3dd554.txt, Appendix figures). Text as printed; the PDF's
# soft line wraps are joined and its curly quotes made straight. Slots are str.format fields.

# 001 Figure 6: binary fact-checking (SCORE 0/1). Fields: passages, prompt, response.
RAR_BINARY_PROMPT = (
    "You are a professional fact-checker tasked with evaluating a language model's response for accuracy.\n"
    "Your job is to systematically compare the response against the provided web search results to identify any factual errors or contradictions. A response deserves a full score if every claim it makes is factually correct, even if it doesn't include every available detail. Omitting information is not a factual error. If a response contains anything that contradicts the world knowledge shown in the search results, it should be considered an error and get a low score.\n"
    '\n'
    '## EVALUATION PROCESS:\n'
    '1. Read the search results thoroughly to understand the factual baseline\n'
    "2. Examine each factual claim in the language model's response\n"
    '3. Cross-reference each claim against the search results\n'
    '4. Classify each discrepancy according to the guidelines below\n'
    '\n'
    '## CONSIDER CORRECT (No Factual Error):\n'
    '- Paraphrasing: Same facts expressed in different words\n'
    '- Reasonable inferences: Logical conclusions drawn from search results\n'
    '- Partial information: Incomplete but accurate subsets of available information\n'
    "- Contextual additions: Background information that doesn't contradict search results\n"
    '- Minor formatting differences: Different ways of presenting same data\n'
    '\n'
    '## CONSIDER INCORRECT (Factual Error):\n'
    '- Direct contradictions: Response states opposite of what search results show\n'
    '- Numerical errors: Wrong dates, statistics, quantities, percentages\n'
    '- Categorical errors: Wrong classifications, locations, names, titles\n'
    '- Causal errors: Incorrect cause-and-effect relationships\n'
    '- Timeline errors: Events placed in wrong chronological order\n'
    '- Attribution errors: Wrong sources, authors, or speakers cited\n'
    '\n'
    '## SCORING RULES:\n'
    'Your evaluation will result in a binary score: 0 or 1.\n'
    '- SCORE 1 (No Contradiction): Assign this score if:\n'
    '1. The response is fully supported by the document.\n'
    '2. The response contains information that is NOT in the document, but DOES NOT contradict it.\n'
    '- SCORE 0 (Contradiction): Assign this score ONLY if you find a clear, factual contradiction between the response and the supporting document. A contradiction occurs when the response states the opposite of what the document says (e.g., wrong dates, names, events, or outcomes).\n'
    '\n'
    '## OUTPUT FORMAT:\n'
    'You must respond ONLY in a valid JSON format with exactly these two fields:\n'
    '- "REASONING": A brief explanation for your score.\n'
    '- For SCORE 0, specify the contradiction (e.g., "The response states the event was in 2022, but the document says it was in 2023.").\n'
    '- For SCORE 1, simply state "No contradiction found."\n'
    '- "SCORE": An integer, either 0 or 1.\n'
    '\n'
    '>>> Begin of search results <<<\n'
    '{passages}\n'
    '<<< End of search results >>>\n'
    '\n'
    '>>> Begin of the prompt <<<\n'
    '{prompt}\n'
    '<<< End of the prompt >>>\n'
    '\n'
    '>>> Begin of the response <<<\n'
    '{response}\n'
    '<<< End of the response >>>\n'
    '\n'
    'Respond in JSON format. {{"REASONING": "[...]", "SCORE": "<your-score>"}}'
)

# 001 Figure 7: rating-based fact-checking (SCORE 0-10). Fields: passages, prompt, response.
RAR_RATING_PROMPT = (
    "You are a professional fact-checker tasked with evaluating a language model's response for accuracy.\n"
    "Your job is to systematically compare the response against the provided web search results to identify any factual errors or contradictions. A response deserves a full score if every claim it makes is factually correct, even if it doesn't include every available detail. Omitting information is not a factual error. If a response contains anything that contradicts the world knowledge shown in the search results, it should be considered an error and get a low score.\n"
    '\n'
    '## EVALUATION PROCESS:\n'
    '1. Read the search results thoroughly to understand the factual baseline\n'
    "2. Examine each factual claim in the language model's response\n"
    '3. Cross-reference each claim against the search results\n'
    '4. Classify each discrepancy according to the guidelines below\n'
    '\n'
    '## CONSIDER CORRECT (No Factual Error):\n'
    '- Paraphrasing: Same facts expressed in different words\n'
    '- Reasonable inferences: Logical conclusions drawn from search results\n'
    '- Partial information: Incomplete but accurate subsets of available information\n'
    "- Contextual additions: Background information that doesn't contradict search results\n"
    '- Minor formatting differences: Different ways of presenting same data\n'
    '\n'
    '## CONSIDER INCORRECT (Factual Error):\n'
    '- Direct contradictions: Response states opposite of what search results show\n'
    '- Numerical errors: Wrong dates, statistics, quantities, percentages\n'
    '- Categorical errors: Wrong classifications, locations, names, titles\n'
    '- Causal errors: Incorrect cause-and-effect relationships\n'
    '- Timeline errors: Events placed in wrong chronological order\n'
    '- Attribution errors: Wrong sources, authors, or speakers cited\n'
    '\n'
    '## CONFIDENCE SCORING GUIDE:\n'
    '- 0-2: Very confident there is a factual error (multiple clear contradictions)\n'
    '- 3-4: Moderately confident there is a factual error (one clear contradiction)\n'
    '- 5: Uncertain (ambiguous evidence or unclear from search results)\n'
    '- 6-7: Moderately confident there is no factual error (mostly accurate with minor concerns)\n'
    '- 8-10: Very confident there is no factual error (all stated facts are accurate, regardless of completeness)\n'
    '\n'
    '## OUTPUT FORMAT REQUIREMENTS:\n'
    'Respond ONLY in valid JSON format with exactly these two fields:\n'
    '- "REASONING": A concise explanation of your assessment (1-2 sentences max, e.g., "the response states ... but the search results show ... so there is a factual error" or "no factual error found")\n'
    '- "SCORE": An integer from 0-10 representing your confidence level\n'
    '\n'
    '>>> Begin of search results <<<\n'
    '{passages}\n'
    '<<< End of search results >>>\n'
    '\n'
    '>>> Begin of the prompt <<<\n'
    '{prompt}\n'
    '<<< End of the prompt >>>\n'
    '\n'
    '>>> Begin of the response <<<\n'
    '{response}\n'
    '<<< End of the response >>>\n'
    '\n'
    'Respond in JSON format. {{"REASONING": "[...]", "SCORE": "<your-score>"}}'
)

# 001 Figure 8: atomic claim extraction (VeriScore reward, FActScore eval). Fields: prompt, response.
CLAIM_EXTRACTION_PROMPT = (
    'Extract as many fine-grained, atomic, and verifiable factual claims as possible from the response.\n'
    'Each claim should be a single piece of information that could be looked up in a database, official documentation, reputable forum, or reliable source such as Wikipedia or scientific literature.\n'
    '\n'
    'Guidelines for atomic claims:\n'
    '- Split a sentence that joins different facts using "and," "or," or by listing into multiple claims.\n'
    '- If a claim could be split into multiple smaller, independent statements, do so.\n'
    '- Replace pronouns (e.g., "he", "she", "it", "they") with the full entity name explicitly stated in the response. If the entity name is not explicitly mentioned, leave the pronoun unchanged.\n'
    '- Extract claims EXACTLY as stated, even if the information appears incorrect or false.\n'
    '\n'
    'Include as claims:\n'
    '- Statements about the existence, property, function, or relationship of entities, organizations, concepts, or technologies.\n'
    '- Claims about names, definitions, features, purposes, or histories.\n'
    '- Statements about what something does, who runs it, what it is used for, or what it affects.\n'
    '- For hedged language ("may be," "might be," "could be"), extract the factual association, typical usage, or commonly reported function as long as the claim is traceable to community consensus, documentation, or reputable user reports.\n'
    '- If a quotation is present, extract it verbatim with the source if given.\n'
    '- Claims must stand alone, using names or clear descriptions, not pronouns.\n'
    '\n'
    'Do not include as claims:\n'
    '- Personal opinions, suggestions, advice, instructions, or experiences.\n'
    '- Pure speculation or possibilities that are not reported in any documentation or user discussions.\n'
    '- Claims from code blocks or pure math derivations.\n'
    '\n'
    'Extract claims only from the response section, not from the prompt or question. If the response does not contain any verifiable factual claims, output an empty list.\n'
    '\n'
    'Output a JSON list of strings. Each string should be a single atomic factual claim from the response, clearly stated and verifiable.\n'
    '\n'
    '>>> Begin of prompt <<<\n'
    '{prompt}\n'
    '<<< End of prompt >>>\n'
    '\n'
    '>>> Begin of response <<<\n'
    '{response}\n'
    '<<< End of response >>>\n'
    '\n'
    'Facts (as a JSON list of strings):'
)

# 001 Figure 9: claim verification (supported / contradicted / inconclusive). Fields: passages, claim.
CLAIM_VERIFICATION_PROMPT = (
    'You need to judge whether a claim is supported or contradicted by Google search results, or whether there is no enough information to make the judgement. When doing the task, take into consideration whether the link of the search result is of a trustworthy source.\n'
    '\n'
    'Below are the definitions of the three categories:\n'
    '\n'
    'Supported: A claim is supported by the search results if everything in the claim is supported and nothing is contradicted by the search results. There can be some search results that are not fully related to the claim.\n'
    'Contradicted: A claim is contradicted by the search results if something in the claim is contradicted by some search results. There should be no search result that supports the same part.\n'
    'Inconclusive: A claim is inconclusive based on the search results if:\n'
    '- a part of a claim cannot be verified by the search results,\n'
    '- a part of a claim is supported and contradicted by different pieces of evidence,\n'
    '- the entity/person mentioned in the claim has no clear referent (e.g., "the approach", "Emily", "a book").\n'
    '\n'
    '>>> Begin of search results <<<\n'
    '{passages}\n'
    '<<< End of search results >>>\n'
    '\n'
    'Claim: {claim}\n'
    'Task: Given the search results above, is the claim supported, contradicted, or inconclusive? Your answer should be either "supported", "contradicted", or "inconclusive" without explanation and comments.\n'
    '\n'
    'Your decision:'
)

# 001 §4.2 "LM Judge" baseline: a 0-10 quality rating of a response against a reference
# response "following common practice (Gunjal et al., 2025)". The paper does not print this
# prompt; this one is ours, in the same output format as Figure 7. Fields: prompt, reference, response.
LM_JUDGE_QUALITY_PROMPT = (
    "You are an expert evaluator. Rate the overall quality of the model response to the prompt on a\n"
    "scale from 0 to 10, using the reference response as an example of a high-quality answer.\n"
    "Consider helpfulness, correctness, relevance and clarity. 10 means as good as or better than the\n"
    "reference; 0 means useless or wrong.\n"
    "\n"
    ">>> Begin of the prompt <<<\n{prompt}\n<<< End of the prompt >>>\n"
    "\n"
    ">>> Begin of the reference response <<<\n{reference}\n<<< End of the reference response >>>\n"
    "\n"
    ">>> Begin of the response <<<\n{response}\n<<< End of the response >>>\n"
    "\n"
    'Respond in JSON format. {{"REASONING": "[...]", "SCORE": "<your-score>"}}'
)


# ---- SEVA (002_56f1a732f42030d3.txt, Appendix K.1-K.2). Text as printed; the PDF's soft line
# wraps are joined, quotes are straight, and "0.0--1.0" is kept as printed. Both constants are
# str.format templates with literal braces doubled, so call .format() on the system prompt too
# even though it has no fields (factlab.rewards.seva.verifier_messages does both).

# 002 Appendix K.1 "SFT System Prompt" (SFT training and evaluation). No fields.
SEVA_SYSTEM_PROMPT = (
    "You are a fact attribution verifier. Given a claim and a source document, determine whether the claim is fully supported by the source. Respond in JSON with the following structure:\n"
    '{{ "evidence_alignment": [\n'
    '  {{ "claim_span": "...", "source_span": "...", "status": "match|mismatch|not_found" }},\n'
    '], "reasoning_chain": [\n'
    '  {{ "claim_part": "...", "source_evidence": "...", "judgment": "supported|not_supported|partially_supported", "explanation": "..."}},\n'
    '], "label": "Attributable|Not Attributable", "confidence": 0.0--1.0, "error_type": "(if Not Attributable) numerical_exaggeration|negation_flip|scope_inflation|temporal_shift|entity_substitution|fabrication", "fix_suggestion": "(if NA) correction" }}'
)

# 002 Appendix K.2 "User Prompt Template". Fields: claim, source.
SEVA_USER_PROMPT = (
    "Claim: {claim}\n"
    "Source: {source}\n"
    "Is this claim attributable to the source?\n"
    "Provide your analysis in structured JSON format."
)

# 002 Appendix K.3 "Teacher Annotation Prompt (GPT-4o-mini)", as printed ("abbreviated" in the
# paper). The text conversion renders the chain-length requirement as "$i=2$ steps"; we read it
# as "at least 2 steps" (Appendix J's examples have two or three). The paper omits its two
# few-shot examples and relies on the K.1 output structure; ``factlab.synth.seva.
# teacher_system_prompt`` appends K.1's JSON structure and Appendix J's Ex. 1 and Ex. 2 as the
# two examples. No fields.
SEVA_TEACHER_PROMPT = (
    "You are an expert fact-checker creating training data for a verification model. For each claim-source pair, "
    "produce a detailed analysis. Requirements:\n"
    "\u2022 evidence_alignment: ALL claim spans, even if not_found in source\n"
    "\u2022 reasoning_chain: \u22652 steps\n"
    "\u2022 Each step must reference specific source text\n"
    "\u2022 confidence: reflect genuine uncertainty\n"
    "\u2022 error_type: match the actual error pattern\n"
    "\u2022 fix_suggestion: actionable and minimal"
)
