"""Generation metric for 🤗 evaluate: MTRAG's IDK-conditioned RB_alg, RB_llm and RL_F with their judges."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import datasets
import evaluate

from .aggregate import CONDITIONED, metric_means
from .components import BertScorer, k_precision_batch, rb_alg, recall_batch, rouge_l
from .judges import DEFAULT_PROMPTS
from .parsers import official_clarification, official_idk, official_rating
from .scorer import GenerationTask, make_scorer, score_generation

# The official judge-reply parsers are re-exported for reuse (and so that evaluate.load copies their module).
__all__ = ["Generation", "metric_names", "official_clarification", "official_idk", "official_rating"]

JUDGE_FREE = ("recall", "rouge_l", "k_precision", "rb_alg_raw")
"""Components computed without a judge: (BERTScore recall + 1) / 2 and ROUGE-L against the reference,
K-Precision against the passages, and RB_alg before conditioning (their harmonic mean)."""
_NEEDS_PASSAGES = ("k_precision", "rb_alg_raw")
_FOLDED = {re.sub("[^a-z]", "", name): name for name in (*CONDITIONED, *JUDGE_FREE)}


def _check_task_ids(task_ids: Sequence[Any] | None, n: int) -> None:
    """One id per prediction, none repeated (an integer id is its string form)."""
    if task_ids is None:
        return
    if len(task_ids) != n:
        raise ValueError(f"task_ids has {len(task_ids)} entries for {n} predictions")
    first: dict[str, int] = {}
    for i, task_id in enumerate(task_ids):
        key = str(task_id)
        if key in first:
            raise ValueError(f"task_ids[{i}] repeats task {key!r} (first at task_ids[{first[key]}]): each task is "
                             "scored once, give each its own id")
        first[key] = i


def metric_names(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` in canonical form, read case-insensitively and ignoring ``-`` / ``_`` (``RB-alg``, ``ROUGE-L``,
    ``rougeL`` and ``K_Precision`` are ``rb_alg``, ``rouge_l``, ``rouge_l`` and ``k_precision``).

    >>> metric_names(["RB_ALG", "rl-f", "ROUGE-L"])
    ('rb_alg', 'rl_f', 'rouge_l')
    """
    if isinstance(names, str):
        names = [names]
    out = []
    for name in names:
        canonical = _FOLDED.get(re.sub("[^a-z]", "", name.lower())) if isinstance(name, str) else None
        if canonical is None:
            raise ValueError(f"unknown metric {name!r}; use {', '.join(CONDITIONED)} (judged) or "
                             f"{', '.join(JUDGE_FREE)} (judge-free), in any case")
        if canonical in out:
            raise ValueError(f"metric {name!r} is asked for twice")
        out.append(canonical)
    return tuple(out)

_CITATION = """\
@article{katsis2025mtrag,
  title = {{MTRAG}: A Multi-Turn Conversational Benchmark for Evaluating Retrieval-Augmented Generation Systems},
  author = {Katsis, Yannis and Rosenthal, Sara and Fadnis, Kshitij and Gunasekara, Chulaka and Lee, Young-Suk
            and Popa, Lucian and Shah, Vraj and Zhu, Huaiyu and Contractor, Danish and Danilevsky, Marina},
  journal = {Transactions of the Association for Computational Linguistics},
  year = {2025},
}
@inproceedings{zhang2020bertscore,
  title = {{BERTScore}: Evaluating Text Generation with {BERT}},
  author = {Zhang, Tianyi and Kishore, Varsha and Wu, Felix and Weinberger, Kilian Q. and Artzi, Yoav},
  booktitle = {International Conference on Learning Representations},
  year = {2020},
}
@inproceedings{es2024ragas,
  title = {{RAGAS}: Automated Evaluation of Retrieval Augmented Generation},
  author = {Es, Shahul and James, Jithin and Espinosa Anke, Luis and Schockaert, Steven},
  booktitle = {Proceedings of EACL: System Demonstrations},
  year = {2024},
}
"""

_DESCRIPTION = """\
Scores the answer a RAG system gives to the last turn of a conversation as the MTRAG evaluation does
(MTRAGEval Subtasks B and C). RB_alg is the harmonic mean of (BERTScore recall + 1) / 2 against the reference,
ROUGE-L F (no stemming) against the reference and K-Precision = (max over passages of BERTScore precision + 1) / 2
(0 without passages). RB_llm is an LLM judge's 1-10 rating / 10 against the reference and passages (0.5 when no
rating can be read; median over several judges). RL_F is RAGAS-style faithfulness: supported claims / claims.
Each metric is then conditioned on the task's answerability with the IDK judge (does the answer say it lacks the
information?) and, for UNDERSPECIFIED tasks, the clarification judge (does it ask the user for what is missing?).
The official BERTScore model is microsoft/deberta-xlarge-mnli with baseline rescaling; by default this module
uses the offline all-MiniLM-L6-v2 and records the model in the output.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: the generated answer of each task (string).
    references: the reference answer(s) of each task: a string or a list of strings (the first is used).
    passages: the passages of each task (list of strings; may be empty).
    conversations: each task's conversation, [{"speaker": "user"|"agent", "text": str}, ...], ending with the
        current user question.
    answerabilities: each task's label: ANSWERABLE, PARTIAL, UNANSWERABLE, CONVERSATIONAL, UNDERSPECIFIED or None.
    domains, turns, task_ids: optional, for breakdowns and per-task output; task ids must be unique (a repeated
        one would score one task twice).
    judge: LLM spec ("openai:MODEL@URL", "hf:PATH", ...; "default" = the embedded SmolLM2-135M placeholder, which
        only shows that the plumbing works), an LLM, or a list (ensemble). Required: None takes $CONVRAG_LLM and is
        an error when it is unset.
    bertscore_model: model path or name, or a BertScorer (default: bundled all-MiniLM-L6-v2).
    mode: "official" (judge replies read exactly as the official scripts read them, their defaults counted) or
        "strict" (our stricter reading; tasks with an unreadable reply excluded, counted). A failed judge call
        is never scored in either mode: the task is excluded and counted.
    conditioning: "mtrag-un" (with the UNDERSPECIFIED rule) or "semeval" (without it).
    prompts: replacement judge prompts {role: prompt name or YAML path}; roles: idk, clarification, rb_llm,
        faithfulness_claims, faithfulness_verdicts.
    metrics: names from ["rb_alg", "rb_llm", "rl_f"] (judged, conditioned) and ["recall", "rouge_l",
        "k_precision", "rb_alg_raw"] (judge-free), in any case ("RB_ALG", "ROUGE-L"). Default: the three judged
        ones; with no judge and no conversations, the judge-free ones (k_precision and rb_alg_raw only with
        passages; otherwise they are named under "not_computed" with the reason).
    n_bootstrap, seed: bootstrap resamples and seed of the confidence intervals.
    per_task: if True (default), also return the per-task rows with every component.
Judge, BERTScore model, mode, conditioning and prompts can also be given to evaluate.load(...).
A plain call with predictions and references only computes the judge-free components.
Returns:
    A dict: the mean of each conditioned metric ("rb_alg", "rb_llm", "rl_f"), "harmonic_of_means",
    "mean_of_per_task_harmonic", "summary" (CIs, raw metrics, breakdowns, counts, BERTScore model, judges) and
    "per_task". The judge-free components come as their means over every task ("recall", "rouge_l", ...),
    "not_computed" ({metric: why}), a "summary" (means with CIs, the BERTScore model) and "per_task".
Examples:
    A scripted judge (the "fake" backend) that labels every answer "no" for IDK and rates it 8:

    >>> import evaluate
    >>> from convrag.llm import LLM
    >>> from convrag.llm.backends.fake import FakeBackend
    >>> def reply(messages):
    ...     text = messages[-1]["content"]
    ...     if "Rating: [[N]]" in text:
    ...         return "Mostly right. Rating: [[8]]"
    ...     if '"claims"' in text:
    ...         return '{"claims": ["Paris is the capital of France."]}'
    ...     if '"verdicts"' in text:
    ...         return '{"verdicts": [{"reason": "stated", "supported": "yes"}]}'
    ...     return "no"
    >>> generation = evaluate.load("metrics/generation")
    >>> results = generation.compute(
    ...     predictions=["Paris is the capital of France."],
    ...     references=[["The capital of France is Paris."]],
    ...     passages=[["Paris is the capital and largest city of France."]],
    ...     conversations=[[{"speaker": "user", "text": "What is the capital of France?"}]],
    ...     answerabilities=["ANSWERABLE"],
    ...     judge=LLM(FakeBackend(responder=reply), cache=False),
    ... )
    >>> results["rb_llm"], results["rl_f"], round(results["rb_alg"], 2)
    (0.8, 1.0, 0.85)
    >>> row = results["per_task"][0]
    >>> row["idk"], row["rl_f_supported"], row["rl_f_total"], row["fallbacks"]["idk"]
    (0.0, 1, 1, False)

    An UNANSWERABLE task whose answer is not judged an "I don't know" scores 0 whatever its raw values:

    >>> results = generation.compute(
    ...     predictions=["It is Lyon."], references=["Sorry, I do not know."], passages=[[]],
    ...     conversations=[[{"speaker": "user", "text": "Who won?"}]], answerabilities=[["UNANSWERABLE"]],
    ...     judge=LLM(FakeBackend(responder=reply), cache=False), metrics=["rb_alg"],
    ... )
    >>> results["rb_alg"], results["per_task"][0]["k_precision"]
    (0.0, 0.0)

    Without a judge or conversations, the judge-free components (K-Precision only with passages):

    >>> results = generation.compute(predictions=["Paris is the capital."], references=["The capital is Paris."])
    >>> round(results["rouge_l"], 4), sorted(results["not_computed"])
    (0.5, ['k_precision', 'rb_alg', 'rb_alg_raw', 'rb_llm', 'rl_f'])
"""

_FEATURES = [
    datasets.Features({"predictions": datasets.Value("string"), "references": datasets.List(datasets.Value("string"))}),
    datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
]
_SETTINGS = ("judge", "bertscore_model", "mode", "conditioning", "prompts", "metrics", "max_tokens")


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Generation(evaluate.Metric):
    """IDK-conditioned RB_alg, RB_llm and RL_F (MTRAG generation evaluation)."""

    def __init__(self, judge: Any = None, bertscore_model: str | BertScorer | None = None,
                 mode: str = "official", conditioning: str = "mtrag-un", prompts: Mapping[str, str] | None = None,
                 metrics: Sequence[str] | None = None, max_tokens: Mapping[str, int] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.settings = {"judge": judge, "bertscore_model": bertscore_model, "mode": mode,
                         "conditioning": conditioning, "prompts": prompts,
                         "metrics": None if metrics is None else metric_names(metrics),
                         "max_tokens": max_tokens}

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=_FEATURES,
            reference_urls=["https://github.com/IBM/mt-rag-benchmark", "https://github.com/Tiiiger/bert_score"],
        )

    def _compute(self, predictions: Sequence[str], references: Sequence[Any],
                 passages: Sequence[Sequence[str]] | None = None,
                 conversations: Sequence[Sequence[Mapping[str, str]]] | None = None,
                 answerabilities: Sequence[Any] | None = None, domains: Sequence[str | None] | None = None,
                 turns: Sequence[int | None] | None = None, task_ids: Sequence[str] | None = None,
                 n_bootstrap: int = 1000, seed: int = 0, per_task: bool = True, progress: bool = False,
                 **settings: Any) -> dict[str, Any]:
        unknown = set(settings) - set(_SETTINGS)
        if unknown:
            raise ValueError(f"unknown argument(s) {sorted(unknown)}; settings: {list(_SETTINGS)}, prompt roles: "
                             f"{sorted(DEFAULT_PROMPTS)}")
        _check_task_ids(task_ids, len(predictions))
        options = {**self.settings, **settings}
        if settings.get("metrics") is not None:
            options["metrics"] = metric_names(settings["metrics"])
        asked = options["metrics"]
        if asked is None and options["judge"] is None and conversations is None:
            return self._judge_free(predictions, references, passages, task_ids, None, options, n_bootstrap, seed,
                                    per_task)  # fmt: skip
        asked = asked or CONDITIONED
        judged = tuple(m for m in asked if m in CONDITIONED)
        if not judged:
            return self._judge_free(predictions, references, passages, task_ids, asked, options, n_bootstrap, seed,
                                    per_task)  # fmt: skip
        n = len(predictions)
        columns = {"passages": passages, "conversations": conversations, "answerabilities": answerabilities,
                   "domains": domains, "turns": turns, "task_ids": task_ids}
        for name in ("passages", "conversations"):
            if columns[name] is None:
                raise ValueError(f"{name} is required (one entry per prediction) for {', '.join(judged)}; without "
                                 "a judge and conversations only the judge-free components are computed")
        for name, col in columns.items():
            if col is not None and len(col) != n:
                raise ValueError(f"{name} has {len(col)} entries for {n} predictions")
        tasks = [GenerationTask(
            task_id=str(task_ids[i]) if task_ids is not None else str(i), prediction=predictions[i],
            references=[references[i]] if isinstance(references[i], str) else list(references[i]),
            passages=list(passages[i]), conversation=[dict(m) for m in conversations[i]],
            answerability=answerabilities[i] if answerabilities is not None else None,
            domain=domains[i] if domains is not None else None, turn=turns[i] if turns is not None else None,
            passage_source="input",
        ) for i in range(n)]  # fmt: skip
        free = tuple(m for m in asked if m in JUDGE_FREE)
        if free:  # one BERTScore model for both parts
            options["bertscore_model"] = make_scorer(options["bertscore_model"])
        result = score_generation(tasks, n_bootstrap=n_bootstrap, seed=seed, progress=progress,
                                  **{**options, "metrics": judged})  # fmt: skip
        summary = result.summary
        out: dict[str, Any] = {m: summary["overall"].get(m, {}).get("mean") for m in judged}
        if free:
            components = self._judge_free(predictions, references, passages, task_ids, free, options, n_bootstrap,
                                          seed, per_task=False)  # fmt: skip
            out.update({m: components[m] for m in free})
        out["harmonic_of_means"] = summary["ranking"]["harmonic_of_means"]
        per_task_harmonic = summary["ranking"]["mean_of_per_task_harmonic"]
        out["mean_of_per_task_harmonic"] = per_task_harmonic["mean"] if per_task_harmonic else None
        out["summary"] = summary
        if per_task:
            out["per_task"] = result.per_task
        return out

    def _judge_free(self, predictions: Sequence[str], references: Sequence[Any],
                    passages: Sequence[Sequence[str]] | None, task_ids: Sequence[str] | None,
                    asked: Sequence[str] | None, options: Mapping[str, Any], n_bootstrap: int, seed: int,
                    per_task: bool) -> dict[str, Any]:
        """The judge-free components over every task; ``asked`` None: all of them that the inputs allow, the
        others named in ``not_computed``. Means are plain means over all tasks (no conditioning)."""
        n = len(predictions)
        for name, column in (("passages", passages), ("task_ids", task_ids)):
            if column is not None and len(column) != n:
                raise ValueError(f"{name} has {len(column)} entries for {n} predictions")
        not_computed = {m: "needs a judge (judge=...) and conversations (conditioned on the IDK judge)"
                        for m in CONDITIONED if asked is None}  # fmt: skip
        names = list(asked or JUDGE_FREE)
        if passages is None:
            missing = [m for m in names if m in _NEEDS_PASSAGES]
            if asked is not None and missing:
                raise ValueError(f"{', '.join(missing)}: needs passages (one list per prediction)")
            not_computed.update({m: "needs passages (one list per prediction)" for m in missing})
            names = [m for m in names if m not in _NEEDS_PASSAGES]
        refs = []
        for i, (prediction, reference) in enumerate(zip(predictions, references, strict=True)):
            first = reference if isinstance(reference, str) else next(iter(reference), None)
            if not isinstance(prediction, str) or not isinstance(first, str):
                raise ValueError(f"task {i}: the prediction and the (first) reference must be strings")
            refs.append(first)
        wanted = set(names) | ({"recall", "rouge_l", "k_precision"} if "rb_alg_raw" in names else set())
        scorer = make_scorer(options["bertscore_model"]) if wanted - {"rouge_l"} else None
        values: dict[str, list[float]] = {}
        if "rouge_l" in wanted:
            values["rouge_l"] = [rouge_l(p, r) for p, r in zip(predictions, refs, strict=True)]
        if scorer is not None and "recall" in wanted:
            values["recall"] = recall_batch(list(predictions), refs, scorer)
        if scorer is not None and passages is not None and "k_precision" in wanted:
            values["k_precision"] = k_precision_batch(list(predictions), [list(p) for p in passages], scorer)
        if "rb_alg_raw" in wanted:
            values["rb_alg_raw"] = [rb_alg(*v) for v in zip(values["recall"], values["rouge_l"],
                                                             values["k_precision"], strict=True)]  # fmt: skip
        rows = [{"task_id": str(task_ids[i]) if task_ids is not None else str(i),
                 **{m: values[m][i] for m in names}} for i in range(n)]  # fmt: skip
        overall = metric_means(rows, names, n_bootstrap, seed)
        out: dict[str, Any] = {m: overall[m]["mean"] if m in overall else None for m in names}
        out["not_computed"] = not_computed
        out["summary"] = {"metrics": names, "overall": overall, "counts": {"tasks": n}, "judge": None,
                          "bertscore": None if scorer is None else scorer.describe()}
        if per_task:
            out["per_task"] = rows
        return out
