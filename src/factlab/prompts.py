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


# ---- Binary RAR §4.1's two short-form evaluation instructions (``eval.abstention``; here so the
# organism's tokenizer, below ``eval``, reads them too).
# 001 §4.1 hallucination evaluation: "explicitly instruct the model to answer with 'I don't
# know' when uncertain" (factlab's wording, see module docstring).
ABSTAIN_SYSTEM = (
    "Answer using this exact format:\n"
    "<think>brief reasoning</think>\n"
    "<answer>direct answer</answer>\n"
    "Only answer if you are confident. If you are not sure of the answer, reply exactly: "
    "<think>unknown</think><answer>I don\u2019t know</answer>"
)

# 001 §4.1 utility evaluation: "instead of allowing the model to abstain, we require it to
# always provide an answer (i.e., make its best guess)" (factlab's wording).
FORCED_SYSTEM = (
    "Answer using this exact format:\n"
    "<think>brief reasoning</think>\n"
    "<answer>direct answer</answer>\n"
    "You must always give an answer. If you are not sure, give your best guess; "
    "never reply that you do not know."
)

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
# even though it has no fields (factlab.rewards.seva_output.verifier_messages does both).

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


# ---- K2V (003_5e9813e66e6ba19a.txt, Appendix I-J). Text as printed; the PDF's en dashes around
# section names ("–Goal–") and soft line wraps are kept as the text file has them. Templates use
# str.format fields; literal braces are doubled.

# 003 Appendix I.2, Table 14 "Prompt for NER and RE" (GraphGen / LightRAG record format). The
# list delimiter prints as "****": GraphGen's "##" with the hashes lost in the text conversion,
# and the parser accepts both. Field: input_text.
K2V_NER_RE_PROMPT = (
    "You are an NLP expert, skilled at analyzing text to extract named entities and their relationships.\n\n"
    "\u2013Goal\u2013\n"
    "Given a text document that is potentially relevant to this activity and a list of entity types, identify all "
    "entities of those types from the text and all relationships among the identified entities. Use English as "
    "output language.\n\n"
    "\u2013Steps\u2013\n"
    "1. Identify all entities. For each identified entity, extract the following information:\n"
    " - entity_name: Name of the entity, use same language as input text. If English, capitalized the name.\n"
    " - entity_type: One of the following types: concept, date, location, keyword, organization, person, event, "
    "work, nature, artificial, science, technology, mission, gene\n"
    " - entity_summary: Comprehensive summary of the entity's attributes and activities\n"
    " - Format each entity as:\n"
    '("entity"<|><entity_name><|><entity_type><|><entity_summary>)\n'
    "2. From the entities identified in step 1, identify all pairs of (source_entity, target_entity) that are "
    "*clearly related* to each other. For each pair of related entities, extract the following information:\n"
    " - source_entity: name of the source entity, as identified in step 1\n"
    " - target_entity: name of the target entity, as identified in step 1\n"
    " - relationship_summary: explanation as to why you think the source entity and the target entity are related "
    "to each other\n"
    " - Format each relationship as:\n"
    '("relationship"<|><source_entity><|><target_entity><|><relationship_summary>)\n'
    "3. Identify high-level key words that summarize the main concepts, themes, or topics of the entire text. These "
    "should capture the overarching ideas present in the document. Format the content-level key words as "
    '("content_keywords"<|><high_level_keywords>)\n'
    "4. Return output in English as a single list of all the entities and relationships identified. Use **** as "
    "the list delimiter.\n"
    "5. When finished, output <|COMPLETE|>\n\n"
    "#####\n-Input Text-\n#####\n{input_text}"
)
K2V_ENTITY_TYPES = ("concept", "date", "location", "keyword", "organization", "person", "event", "work", "nature",
                    "artificial", "science", "technology", "mission", "gene")

# Gleaning (optional extra extraction rounds; GraphGen's idea, our wording): the model sees its
# own records and is asked first whether anything is missing, then for the missing records.
K2V_GLEANING_CHECK = (
    "{prompt}\n\nRecords extracted so far:\n{records}\n\n"
    "Were any entities or relationships of the text missed? Answer YES or NO only."
)
K2V_GLEANING_CONTINUE = (
    "{prompt}\n\nRecords extracted so far:\n{records}\n\n"
    "Some entities or relationships of the text were missed. Add them below in the same format, without "
    "repeating the records above, and output <|COMPLETE|> when finished."
)

# 003 Appendix I.1, Table 13 "Prompt of F_text": rephrases the masked quintuple's entities and
# relationships into a text; the masked entity appears as "{{ }}" (Table 15's blank). Fields:
# entities, relationships.
K2V_TEXT_PROMPT = (
    "\u2013Role\u2013\n"
    "You are an NLP expert responsible for generating a logically structured and coherent rephrased version of the "
    "TEXT based on ENTITIES and RELATIONSHIPS provided below. Use English as output language.\n\n"
    "\u2013Goal\u2013\n"
    "To generate a version of the text that is rephrased and conveys the same meaning as the original entity and "
    "relationship descriptions, while:\n"
    "1. Following a clear logical flow and structure\n"
    "2. Establishing proper cause-and-effect relationships\n"
    "3. Ensuring temporal and sequential consistency\n"
    "4. Creating smooth transitions between ideas using conjunctions and appropriate linking words like "
    "\u2018firstly,\u2019 \u2018however,\u2019 \u2018therefore,\u2019 etc.\n\n"
    "\u2013Instructions\u2013\n"
    "1. Analyze the provided ENTITIES and RELATIONSHIPS carefully to identify:\n"
    " - Key concepts and their hierarchies\n - Temporal sequences and chronological order\n"
    " - Cause-and-effect relationships\n - Dependencies between different elements\n"
    "2. Organize the information in a logical sequence by:\n"
    " - Starting with foundational concepts\n - Building up to more complex relationships\n"
    " - Grouping related ideas together\n - Creating clear transitions between sections\n"
    "3. Rephrase the text while maintaining:\n"
    " - Logical flow and progression\n - Clear connections between ideas\n"
    " - Proper context and background\n - Coherent narrative structure\n"
    "4. Review and refine the text to ensure:\n"
    " - Logical consistency throughout\n - Clear cause-and-effect relationships\n\n"
    "#####\n-ENTITIES-\n#####\n{entities}\n\n#####\n-RELATIONSHIPS-\n#####\n{relationships}"
)

# 003 Appendix I.3, Table 15 "Prompt of the Judge Model" (one criterion per call; answers
# "yes" / "NO"). The printed *question* style placeholders are the fields: question, answer,
# criterion, reasoning.
K2V_JUDGE_PROMPT = (
    "You are an impartial and meticulous AI examiner.\n\n"
    "Your task is to evaluate a student's [Reasoning Process] for a given [Question-Answer Pair] against a "
    "specific, detailed [Criterion].\n\n"
    'The [Question-Answer Pair] is a fill-in-the-blank question, with "{{ }}" indicating the content to be filled '
    'in. A fill-in-the-blank question may contain multiple "{{ }}", and the content to be filled in for each "{{ }}" '
    "is the same.\n\n"
    "Your judgment must be strict, objective, and based solely on the provided information.\n\n"
    'NOTE: Your output can only be "yes" or "NO"\n\n'
    "[Question-Answer Pair]\nquestion: {question}\nanswer: {answer}\n\n"
    "[Criterion]\ncriterion: {criterion}\n\n"
    "[Reasoning Process]\nreasoning process: {reasoning}"
)

# 003 Appendix I.4, Table 16 "Prompt for synthesizing the checklist", with the domain and the
# criteria as fields (the printed prompt is the agriculture instance) and the question and its
# answer inserted where the table describes them. Fields: expert, field, question, answer, criteria.
K2V_CHECKLIST_PROMPT = (
    "You are a senior expert in {expert}, specializing in creating and grading exam questions. Your task is to "
    "create a set of detailed scoring checklist for a [Specific Question] based on the provided [General "
    "Criteria].\n\n"
    "[Specific Question]:\n"
    "A complete question in the field of {field}, including the question and the corresponding answer.\n"
    "Question: {question}\nAnswer: {answer}\n\n"
    "[General Criteria]:\n{criteria}\n\n"
    "Based on the [General Criteria] above, design a set of detailed and objectively scorable checklist for the "
    "provided [Specific Exam Question]. The checklist will be used to evaluate the student's problem-solving "
    "approach (reasoning process). The checklist should consist of multiple independent criteria. Each criteria must "
    "be a clear, specific statement describing what an ideal step or thought process should achieve, making it "
    "objectively assessable. Please ensure The checklist are closely related to the core knowledge and skill "
    "requirements of the [Specific Exam Question]. Only output the checklist, with no other content. Please "
    'structure the output in JSON format. For example:\n["criteria 1", "criteria 2",]'
)

# 003 Appendix J, Tables 17-19 (as printed; the legal table's stray "II. Rule Statement and
# Interpretation" heading, glued onto item 3 by the text conversion, is dropped), and a set of
# ours for the mini-world's geography ("general").
K2V_CRITERIA = {
    'agriculture': (
    'Concepts and Knowledge:\n'
    '1. Accurately defines the core biological concepts involved in the question.\n'
    '2. Clearly describes the involved biological processes in the correct logical sequence.\n'
    '3. Accurately explains the meaning and relationships represented by abstract biological models in words.\n'
    '4. Applies abstract biological concepts to the given specific scenario.\n'
    '5. Correctly explains the connection between a biological concept or process and other related principles.\n'
    'Scientific Method and Design:\n'
    '1. Clearly states a relevant null hypothesis or alternative hypothesis.\n'
    '2. Accurately identifies the independent, dependent, and key control variables of an experiment.\n'
    '3. Makes a logical and reasonable prediction of the experimental outcome based on a scientific hypothesis.\n'
    '4. Evaluates the validity or potential flaws of a given experimental design.\n'
    'Data Processing and Analysis:\n'
    '1. Accurately and correctly extracts key data points.\n'
    '2. Clearly and comprehensively describes the overall trend or significant patterns in the given data.\n'
    '3. Accurately describes the relationship between variables (e.g., positive correlation, negative correlation, no correlation).\n'
    '4. Correctly performs necessary mathematical calculations (e.g., rate, rate of change, percentage) to support the analysis.\n'
    'Statistics and Evaluation:\n'
    '1. In appropriate contexts, correctly uses statistical concepts to explain the reliability of data.\n'
    '2. Based on data analysis, draws a conclusion of "support," "refute," or "inconclusive" for a given scientific hypothesis.\n'
    '3. Explains outliers or anomalous data points and analyzes their potential causes or impact on the conclusion.\n'
    'Argumentation and Reasoning:\n'
    '1. Makes a scientific claim that is specific and supported by concrete evidence.\n'
    '2. Clearly articulates how the evidence supports the scientific claim, demonstrating a strong logical chain.\n'
    '3. Predicts the likely consequences of a change (e.g., disturbance, mutation) to a system based on biological principles.\n'
    '4. Explains the underlying biological reason for an observed phenomenon or experimental result.\n'
    '5. Avoids over-extrapolation or unfounded speculation beyond the scope of the given evidence.\n'
    '6. The overall response is well-structured, logically coherent, and clearly written, avoiding self-contradictions and redundant statements.'
),
    'medicine': (
    'Concepts and Knowledge:\n'
    '1. Accurately defines the core medical concepts involved in the question.\n'
    '2. Clearly describes the involved medical processes in the correct logical sequence.\n'
    '3. Accurately explains the meaning and relationships represented by abstract biological or medical models in words.\n'
    '4. Applies abstract biological or medical concepts to the given specific scenario.\n'
    '5. Correctly explains the connection between a medical concept or process and other related principles.\n'
    'Scientific Method and Design:\n'
    '1. Clearly states a relevant null hypothesis or alternative hypothesis.\n'
    '2. Accurately identifies the independent, dependent, and key control variables of an experiment.\n'
    '3. Makes a logical and reasonable prediction of the experimental outcome based on a scientific hypothesis.\n'
    '4. Evaluates the validity or potential flaws of a given experimental design.\n'
    'Data Processing and Analysis:\n'
    '1. Accurately and correctly extracts key data points.\n'
    '2. Clearly and comprehensively describes the overall trend or significant patterns in the given data.\n'
    '3. Accurately describes the relationship between variables (e.g., positive correlation, negative correlation, no correlation).\n'
    '4. Correctly performs necessary mathematical calculations (e.g., rate, rate of change, percentage) to support the analysis.\n'
    'Statistics and Evaluation:\n'
    '1. In appropriate contexts, correctly uses statistical concepts to explain the reliability of data.\n'
    '2. Based on data analysis, draws a conclusion of "support," "refute," or "inconclusive" for a given scientific hypothesis.\n'
    '3. Explains outliers or anomalous data points and analyzes their potential causes or impact on the conclusion.\n'
    'Argumentation and Reasoning:\n'
    '1. Makes a scientific claim that is specific and supported by concrete evidence.\n'
    '2. Clearly articulates how the evidence supports the scientific claim, demonstrating a strong logical chain.\n'
    '3. Predicts the likely consequences of a change (e.g., disturbance, mutation) to a system based on biological or medical principles.\n'
    '4. Explains the underlying biological or medical reason for an observed phenomenon or experimental result.\n'
    '5. Avoids over-extrapolation or unfounded speculation beyond the scope of the given evidence.\n'
    '6. Based on diagnostic or analytical results, proposes specific and feasible treatment or management recommendations that comply with clinical guidelines and ethical principles.\n'
    '7. Clearly articulates the rationale for the proposed recommendations and weighs their potential benefits and risks.\n'
    '8. Be able to ignore irrelevant information and focus on answering the question directly.\n'
    '9. The overall response is well-structured, logically coherent, and clearly written, avoiding self-contradictions and redundant statements.'
),
    'law': (
    'Fact and Issue Identification:\n'
    '1. Accurately identifies and extracts key legally relevant facts from the case material.\n'
    '2. Clearly and accurately identifies the core legal issues or points of contention presented in the case.\n'
    '3. Is able to distinguish between legally relevant and irrelevant facts.\n'
    'Rule Statement and Interpretation:\n'
    '1. Accurately states the legal rules (including statutes, judicial interpretations, fundamental principles, etc.) relevant to the identified issues.\n'
    '2. Correctly explains the meaning and constituent elements of the legal rules.\n'
    '3. Where appropriate, is able to articulate the legislative intent, value orientation, or legal theory behind the relevant rules.\n'
    'Application and Analysis:\n'
    '1. Effectively connects the identified key facts to the relevant legal rules (i.e., the process of "subsumption").\n'
    '2. Logically analyzes whether the facts of the case satisfy (or fail to satisfy) the constituent elements of the legal rules.\n'
    '3. Is able to analyze and argue from the perspectives of all involved parties (e.g., plaintiff/defendant, prosecution/defense).\n'
    '4. Is able to anticipate and respond to potential and compelling counterarguments or defenses.\n'
    '5. When dealing with complex problems, is able to conduct a layered, step-by-step analysis of different claims or legal relationships.\n'
    'Conclusion and Consequences:\n'
    '1. Based on the preceding analysis, draws a clear, reasonable, and persuasive conclusion for each issue.\n'
    '2. Is able to articulate the specific legal consequences corresponding to the conclusion (e.g., type and scope of civil liability, determination of criminal responsibility).\n'
    '3. Proposes solutions or legal advice that are specific, feasible, and in compliance with legal regulations and professional ethics.\n'
    'Overall Structure and Expression:\n'
    '1. The overall response is clearly structured and logically coherent (e.g., follows a framework like IRAC: Issue, Rule, Application, Conclusion).\n'
    '2. Uses legal terminology accurately and appropriately.\n'
    '3. The reasoning process is rigorous, avoiding over-extrapolation or speculation not supported by the given facts or law.\n'
    '4. Is able to ignore irrelevant information and focus on answering the question directly.\n'
    '5. The overall response is well-written, clear, and avoids self-contradictions or unnecessary redundancy.\n'
    '6. The overall response is clearly written, avoiding self-contradictions and redundant statements.'
),
    'general': (
    'Knowledge and Recall:\n'
    '1. Correctly identifies every entity named in the question and what kind of thing each is (a country, a city, a region, a language, a currency).\n'
    '2. Accurately recalls the facts that link the named entities to the blank.\n'
    '3. States the relation each fact expresses (capital of, located in, borders, official language of, currency of) in the right direction.\n'
    'Reasoning Chain:\n'
    '1. Follows the chain of facts step by step from the entities given to the missing one.\n'
    '2. Checks the candidate answer against every fact the question states, not only one of them.\n'
    '3. Rules out plausible but wrong candidates (a neighbouring country, another city of the same country) with a reason.\n'
    'Conclusion:\n'
    '1. Names the missing entity explicitly and consistently with the reasoning.\n'
    '2. Avoids unsupported claims and speculation beyond the facts needed.\n'
    '3. The overall response is well-structured, logically coherent, and clearly written, avoiding self-contradictions and redundant statements.'
),
}
# (expert, field) of Table 16's opening per criteria set
K2V_DOMAINS = {"agriculture": ("agriculture and biology", "agriculture and biology"),
               "medicine": ("medicine", "medicine"), "law": ("law", "law"),
               "general": ("geography and world knowledge", "geography and world knowledge")}

# 003 §3.3 "Format Reward": the policy's output template is "consistent with that of
# DeepSeek-R1"; this is the DeepSeek-R1-Zero template's instruction (Guo et al. 2025a, Table 1)
# as a system prompt, with the fill-in-blank instruction of §3.1 (the answer fills "{ }").
K2V_SYSTEM = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with the "
    "answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>. "
    "The question is a fill-in-the-blank question: the answer is the entity that fills \"{ }\"."
)

# ---- KLCF (004_4f2ca2d982459bb2.txt, Appendix E.2). Text as printed; the PDF's bold markup and
# soft line wraps are dropped, its curly quotes made straight. str.format fields, literal braces doubled.

# 004 Prompt 5, Appendix E.2 "Prompt for RL-zero" (§3, Table 8's RL runs): the DeepSeek-R1-Zero
# template. Printed as one raw string ending "User: {prompt} Assistant: <think>"; for chat models
# it is the system turn and the query the user turn (the trailing "<think>" is left to the model).
KLCF_SYSTEM = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with the "
    "answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>."
)

# 004 Prompt 5 as printed: one raw string (no chat template) that ends by opening the think block,
# so the policy's completion continues "<think>"; fields: system (KLCF_SYSTEM), prompt.
KLCF_RL_ZERO_PROMPT = "{system} User: {prompt} Assistant: <think>"
KLCF_RL_ZERO_PREFILL = "<think>"  # what the raw prompt already wrote of the response

# 004 Prompt 6, Appendix E.2 "Prompt for Truthfulness Reward Model Training" (§2.3.1, Eq. 8): the
# reward model reads p(True) from its next token after "Factual correctness:". Field: claim.
KLCF_TRUTH_PROMPT = (
    'You need to evaluate the factual correctness of the following claim and output either "True" (the claim '
    'is entirely factually correct) or "False" (the claim contains errors or goes beyond your knowledge).\n\n'
    "Claim: {claim}\n"
    "Factual correctness:"
)

# 004 Prompt 7, Appendix E.2 "Prompt for Checklist Verification" (§2.3.1, Eq. 5-7 and the Eq. 9
# variant). The printed placeholders are the fields: query, response, guidelines (the fact list).
KLCF_CHECKLIST_VERIFY = (
    "You will receive a Question, a Reply and a Fact List. Your task is to check, one by one, how each fact in the "
    "list is covered in the reply and decide whether the fact is Consistent, Contradictory, or Missing.\n\n"
    "Input\n"
    "- [Question]: a factual question.\n"
    "- [Reply]: the text answer that needs to be evaluated.\n"
    "- [Fact List]: a list of factual points to verify.\n\n"
    "Output\n"
    "Return a list in strict JSON format. For every fact in the list, output a dictionary containing:\n"
    '- "analysis": a brief analysis of how the reply aligns with this fact.\n'
    '- "conclusion": one of "Consistent", "Contradictory", or "Missing", indicating how the fact is covered in '
    "the reply.\n"
    '- "Consistent": the core information of the fact appears in the reply and matches the description.\n'
    '- "Contradictory": some information in the fact conflicts with information in the reply; from this fact you '
    "can infer that part of the reply is incorrect.\n"
    '- "Missing": the fact is neither fully implied nor contradicted by the reply; the reply does not mention the '
    "fact or omits some core information.\n\n"
    "Now, using the Question, Reply, and Fact List given below, analyze each fact and output the results strictly "
    "in the required format:\n\n"
    "[Question]: {query}\n"
    "[Reply]: {response}\n"
    "[Fact List]:\n"
    "{guidelines}\n\n"
    "[Output]:"
)

# ---- KLCF offline pipeline (004_4f2ca2d982459bb2.txt §2.2, Fig. 3, Appendix C.1 / E.1) and win rate
# (Appendix C.4.2, E.3). Text as printed; bold markup and soft wraps dropped, curly quotes made straight,
# literal braces doubled for str.format. Prompt numbers as Appendix C.1 / C.4.2 cite them.

# 004 Prompt 1, Appendix E.1 "Prompt for Base Model Generation" (§2.2 Stage 1): a few-shot context C
# of 10 printed (question, answer) examples, then the query. The examples themselves are not printed
# ("query example 1" ... "response example 10"); the caller supplies them. Assembled as
# KLCF_FEWSHOT_HEADER + KLCF_FEWSHOT_EXAMPLE per example + KLCF_FEWSHOT_QUERY.
KLCF_FEWSHOT_HEADER = "Please answer the following questions in a given format.\n\n"
KLCF_FEWSHOT_EXAMPLE = "[Question]: {question}\n[Answer]: {answer}\n\n"
KLCF_FEWSHOT_QUERY = "[Question]: {query}\n[Answer]:"
KLCF_FEWSHOT_EXAMPLES = 10  # Prompt 1 prints examples 1 .. 10

# 004 Prompt 2, Appendix E.1 "Prompt for Claim Extraction" (§2.2 Stage 2, Eq. 1). Field: response.
KLCF_CLAIM_EXTRACTION = (
    "Below you will receive a piece of text. Your task is:\n\n"
    "1. Determine whether the text contains verifiable objective claims.\n"
    "2. If verifiable objective claims exist in the text, you must extract these claims from the answer "
    "(regardless of whether these claims are true).\n"
    '3. If the text does not contain any verifiable objective claims, return "no verifiable objective claims".\n\n'
    "Response format:\n\n"
    "* Claim 1\n"
    "* Claim 2\n"
    "...\n\n"
    '(or "no verifiable objective claims")\n\n'
    "The claims you extract must adhere to the following 3 principles:\n\n"
    "1. Objectively verifiable: The claim must describe an objectively verifiable fact, not a subjective "
    "judgment, evaluation, or opinion.\n"
    "2. Indivisible: The objective fact described by the claim cannot be further broken down.\n"
    "3. Explicit meaning: Each claim must be a complete, self-contained sentence with all coreferences "
    "resolved. There should be no nouns or pronouns with unclear meaning.\n\n"
    "Please strictly follow the above rules to complete the following task:\n\n"
    "[Text]: {response}\n"
    "[Verifiable objective claims]:"
)

# 004 Prompt 3, Appendix E.1 "Prompt for Claim Verification" (§2.2 Stage 3, Eq. 2): the claim against
# its top-k (k = 10) retrieved documents D(c). Fields: claim, evidence.
KLCF_CLAIM_VERIFICATION = (
    "You will be provided with a [CLAIM] and several pieces of reference [EVIDENCE]. Your task is to determine "
    "the relationship between the facts in the [CLAIM] and the [EVIDENCE].\n\n"
    "You need to analyze each piece of [EVIDENCE] in relation to the given [CLAIM] and then provide an overall "
    "conclusion.\n\n"
    "- SUPPORT: The facts in the [CLAIM] appear in the [EVIDENCE] and are consistent with the descriptions. Or, "
    "the facts in the [CLAIM] can be correctly inferred from the information in the [EVIDENCE].\n\n"
    "- REFUTE: The facts in the [CLAIM] contradict the information in the [EVIDENCE]. Or, the facts in the "
    "[CLAIM] can be inferred to be false based on the information in the [EVIDENCE].\n\n"
    "- NOT ENOUGH INFO: The facts in the [CLAIM] are neither supported by nor contradicted by the information "
    "in the [EVIDENCE], or a definitive conclusion cannot be drawn from the [EVIDENCE].\n\n"
    'Your response must be a dictionary with a single key-value pair, where the key is "conclusion" and the '
    "value is the overall conclusion (SUPPORT, REFUTE, or NOT ENOUGH INFO). You must strictly follow the format "
    "below, returning a dictionary in JSON format. Do not return any other content.\n\n"
    "[RESPONSE FORMAT]:\n\n"
    "```json\n"
    "{{\n"
    '  "conclusion": "The overall conclusion, return one of SUPPORT, REFUTE, or NOT ENOUGH INFO"\n'
    "}}\n"
    "```\n\n"
    "Now, complete the following task.\n\n"
    "[CLAIM]: {claim}\n\n"
    "[EVIDENCE]:\n\n"
    "{evidence}\n\n"
    "Your decision:"
)

# 004 Prompt 4, Appendix E.1 "Prompt for Claim Prioritization": f_filter of Eq. 3 (§2.2 Stage 4),
# the SUPPORT claims of one query deduplicated and reduced to the checklist Lambda(q_i).
# Fields: query, claims.
KLCF_CLAIM_PRIORITIZATION = (
    "You are given a user query and a list of candidate claims.\n\n"
    "Your task:\n\n"
    "- Retain only the claims that are essential and highly relevant to the query.\n"
    "- Eliminate duplicates. If two claims capture slightly different aspects, preserve both.\n"
    "- Each claim must convey exactly one idea, expressed as a clear, explicit, and self-contained sentence.\n"
    '- If conflicting claims exist, present them in the form: "Some evidence suggests [...], while others '
    'indicate [...]".\n'
    "- Output format:\n\n"
    "\\boxed{{\n"
    "  key claim 1\n"
    "  key claim 2\n"
    "  key claim 3\n"
    "  ...\n"
    "}}\n\n"
    "- Provide output strictly within \\boxed{{}}.\n\n"
    "Output Format:\n\n"
    "\\boxed{{\n"
    "  Final Key Claim 1\n"
    "  Final Key Claim 2\n"
    "  ...\n"
    "}}\n\n"
    "Input:\n\n"
    "- Query: {query}\n"
    "- Candidate Claims: {claims}\n\n"
    "Output:"
)

# 004 Prompt 8, Appendix E.3 "Prompt for Calculating Win Rate" (Appendix C.4.2, Eq. 19-20; the
# AlpacaEval ranking prompt, Li et al., 2023): a system turn and a user turn. Fields: instruction,
# output_1, output_2 (factlab.eval.winrate fills them JSON-string-escaped so they stay inside the quotes).
KLCF_WIN_RATE_SYSTEM = "You are a helpful assistant, that ranks models by the quality of their answers."
KLCF_WIN_RATE = (
    "I want you to create a leaderboard of different of large-language models. To do so, I will give you the "
    "instructions (prompts) given to the models, and the responses of two models. Please rank the models based "
    "on which responses would be preferred by humans. All inputs and outputs should be python dictionaries.\n\n"
    "Here is the prompt:\n"
    "{{\n"
    '    "instruction": "{instruction}"\n'
    "}}\n\n"
    "Here are the outputs of the models:\n"
    "[\n"
    "    {{\n"
    '        "model": "model_1",\n'
    '        "answer": "{output_1}"\n'
    "    }},\n"
    "    {{\n"
    '        "model": "model_2",\n'
    '        "answer": "{output_2}"\n'
    "    }}\n"
    "]\n\n"
    "Now please rank the models by the quality of their answers, so that the model with rank 1 has the best "
    "output. Then return a list of the model names and ranks, i.e., produce the following output:\n"
    "[\n"
    "    {{'model': <model-name>, 'rank': <model-rank>}},\n"
    "    {{'model': <model-name>, 'rank': <model-rank>}}\n"
    "]\n\n"
    "Your response must be a valid Python dictionary and should contain nothing else because we will directly "
    "execute it in Python. Please provide the ranking that the majority of humans would give."
)


def chat_messages(user: str, system: str | None = None) -> list[dict[str, str]]:
    """One chat turn as messages: ``system`` (left out when None or empty), then ``user``. Every
    chat prompt factlab builds (GRPO rows, demonstrations, judges, generation) comes from here."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
