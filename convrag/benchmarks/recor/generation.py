"""RECOR-style generation scoring (profile ``generation: judge``): an LLM judge on five dimensions, lexical
overlap with the reference answer, and the link between retrieval quality and answer quality.

    bench = read_benchmark("out/recor")                       # questions, histories, answers, qrels, domains
    files = [read_predictions(p, bench) for p in paths]        # one generator x mode per file
    result = score_generation(bench, files, [get_llm(spec)], lexical=LexicalScorer())
    write_outputs(result, "results/generation")                # per_turn.jsonl, results.json, results.md

Judge (prompt ``gen_recor_judge``): Correctness, Completeness, Relevance, Coherence, and Faithfulness when the
generator had passages (``oracle`` / ``retrieved`` modes), each an integer on the profile's scale, validated (the LLM
layer re-asks) and normalised (:mod:`convrag.benchmarks.recor.generation_profile`: ``authors`` 1-10 with anchors, no
earlier turns, / 10; ``convrag`` 1-5 with earlier turns, (s - 1) / 4); several judges: the per-dimension median; a
turn's judge average: the mean of its normalised dimensions. A judge call that still fails is counted and listed by
task id; that turn is left out of every mean, never scored. Aggregation: mean within each domain, then over domains
(macro; :mod:`convrag.benchmarks.recor.generation_tables`); a benchmark without domains is one group ``all``.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from convrag.benchmarks.recor.generation_profile import DEFAULT_PROFILE, comparability, get_profile
from convrag.core.errors import ConvragError, DataError
from convrag.core.jsonl import read_jsonl
from convrag.llm import LLM, EndpointUnreachable, LLMError, load_prompt, run_batch
from convrag.llm.replies import answer_checks, constant_verdicts
from convrag.metrics.generation.judges import lower_keys

DIMENSIONS = ("correctness", "completeness", "relevance", "coherence", "faithfulness")
MODES = ("oracle", "retrieved", "none")
PROMPT = "gen_recor_judge"
ALL_GROUP = "all"


def normalise(grade: float, profile: str = DEFAULT_PROFILE) -> float:
    """A grade on 0-1: grade / 10 on the authors' 1-10 scale, (grade - 1) / 4 on convrag's 1-5 scale."""
    return get_profile(profile).normalise(grade)


def turn_bucket(turn: int) -> str:
    """Turn position label of Figure 3: T1 .. T4, then T5+."""
    return f"T{turn}" if turn < 5 else "T5+"


class JudgeGrades(BaseModel):
    """convrag's 1-5 scale, the judge's reply when the generator had no passages (no faithfulness). Field names are
    read without regard to case (``"Correctness": 4`` is correctness)."""

    correctness: int = Field(ge=1, le=5)
    completeness: int = Field(ge=1, le=5)
    relevance: int = Field(ge=1, le=5)
    coherence: int = Field(ge=1, le=5)
    rationale: str = Field(default="", max_length=1000)

    _keys = model_validator(mode="before")(lower_keys)


class JudgeGradesWithPassages(JudgeGrades):
    """convrag's 1-5 scale with passages: faithfulness is required too."""

    faithfulness: int = Field(ge=1, le=5)


class TenPointGrades(BaseModel):
    """The authors' scale, no passages: an integer 1-10 per dimension (names read without regard to case)."""

    correctness: int = Field(ge=1, le=10)
    completeness: int = Field(ge=1, le=10)
    relevance: int = Field(ge=1, le=10)
    coherence: int = Field(ge=1, le=10)
    rationale: str = Field(default="", max_length=1000)

    _keys = model_validator(mode="before")(lower_keys)


class TenPointGradesWithPassages(TenPointGrades):
    """The authors' scale with passages: faithfulness 1-10 too."""

    faithfulness: int = Field(ge=1, le=10)


SCHEMAS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "authors": (TenPointGrades, TenPointGradesWithPassages),
    "convrag": (JudgeGrades, JudgeGradesWithPassages)}


# -- the benchmark --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reference:
    """One benchmark turn: what the judge and the lexical metrics compare an answer with."""

    task_id: str
    conversation_id: str
    turn: int
    domain: str
    question: str
    history: str
    answer: str


@dataclass
class Benchmark:
    """The turns of a built folder (in order), their qrels (query -> doc -> grade) and domains; ``report``: the
    evaluation profile's report kind (``recor`` for RECOR, whose paper has generation tables to compare with)."""

    folder: str
    split: str
    references: dict[str, Reference]
    qrels: dict[str, dict[str, int]]
    domains: list[str]
    name: str = ""
    report: str = ""


def read_benchmark(folder: str | Path, split: str | None = None) -> Benchmark:
    """Read a built folder whose evaluation profile has ``generation: judge`` (RECOR, MTR-Bench).

    Reference answers: the ``answer`` of the turn in the profile's ``conversations`` config (RECOR), else the
    turn row's own ``answer`` column (MTR-Bench); a turn without one is an error naming the config.
    """
    from convrag.builders.profile import profile_of
    from convrag.core.manifest import read_manifest
    from convrag.evaluation.data import Folder, load_benchmark

    manifest = read_manifest(folder)
    profile = profile_of(manifest, source=str(Path(folder) / "README.md"))
    if profile.generation != "judge":
        raise ConvragError(f"{folder}: this benchmark's generation scheme is {profile.generation!r}, not 'judge'")
    data = load_benchmark(folder, profile, split=split)
    answers: dict[tuple[str, int], str] = {}
    if profile.conversations:
        built = Folder(folder)
        for subset in data.subsets:
            config = profile.conversations.replace("{subset}", subset)
            for row in built.rows(config, data.split):
                for t in row.get("turns") or []:
                    if isinstance(t, Mapping) and isinstance(t.get("answer"), str):
                        answers[(str(row.get("conversation_id")), int(t.get("turn") or 0))] = t["answer"]
    refs: dict[str, Reference] = {}
    for t in data.turns:
        answer = answers.get((t.conversation_id, t.position), t.fields.get("answer"))
        if not isinstance(answer, str):
            config = (profile.conversations or profile.turns).replace("{subset}", t.domain)
            raise DataError(f"turn {t.qid!r} has no reference answer", f"{folder}/{config}")
        refs[t.qid] = Reference(t.qid, t.conversation_id, t.position, t.domain, t.query, t.history_string(), answer)
    qrels = {q: dict(j) for per in data.qrels.values() for q, j in per.items()}
    return Benchmark(str(folder), data.split, refs, qrels, [s or ALL_GROUP for s in data.subsets],
                     str(manifest.get("benchmark") or ""), profile.report)


# -- predictions ----------------------------------------------------------------------------------------------
@dataclass
class Prediction:
    task_id: str
    text: str
    passages: list[str]
    line: int


@dataclass
class PredictionFile:
    """One generator x mode: its predictions by task id, the benchmark turns it lacks, and its run file."""

    path: str
    generator: str
    mode: str
    predictions: dict[str, Prediction]
    missing: list[str] = field(default_factory=list)
    run_path: str | None = None

    @property
    def label(self) -> str:
        return f"{self.generator} ({self.mode})"


def _context_texts(value: Any, path: str, line: int) -> list[str]:
    if not isinstance(value, list):
        raise DataError(f"'contexts' must be a list, got {type(value).__name__}", path, line)
    texts = []
    for i, ctx in enumerate(value, start=1):
        if not isinstance(ctx, Mapping) or not isinstance(ctx.get("text"), str):
            raise DataError(f"contexts[{i}] must be an object with a string 'text'", path, line)
        texts.append(ctx["text"])
    return texts


def read_predictions(path: str | Path, bench: Benchmark, allow_missing: bool = False) -> PredictionFile:
    """Read one ``convrag generate`` output file (one JSON line per turn; see the module docstring of
    ``convrag generate``). Unknown or repeated task ids, a missing or empty prediction, a mode other than
    oracle / retrieved / none, several modes or generators in one file, and non-list contexts are errors naming
    the file and line. Benchmark turns without a prediction are an error unless ``allow_missing`` (then listed).
    """
    where = str(path)
    preds: dict[str, Prediction] = {}
    mode = generator = None
    for line, row in read_jsonl(where):
        tid = row.get("task_id")
        if not isinstance(tid, str) or not tid:
            raise DataError("line has no string 'task_id'", where, line)
        if tid not in bench.references:
            raise DataError(f"unknown task id {tid!r}: not a turn of {bench.folder} ({bench.split})", where, line)
        if tid in preds:
            raise DataError(f"duplicate task id {tid!r} (first on line {preds[tid].line})", where, line)
        m = row.get("mode")
        if m not in MODES:
            raise DataError(f"mode must be one of {', '.join(MODES)}, got {m!r}", where, line)
        if mode is not None and m != mode:
            raise DataError(f"mode {m!r} differs from the file's earlier lines ({mode!r}): one mode per file",
                            where, line)  # fmt: skip
        g = row.get("generator")
        if not isinstance(g, str) or not g.strip():
            raise DataError("line has no string 'generator'", where, line)
        if generator is not None and g != generator:
            raise DataError(f"generator {g!r} differs from the file's earlier lines ({generator!r}): one generator "
                            "per file", where, line)  # fmt: skip
        mode, generator = m, g
        items = row.get("predictions")
        first = items[0] if isinstance(items, list) and items else None
        text = first.get("text") if isinstance(first, Mapping) else None
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"task {tid!r}: missing or empty prediction (predictions[0].text)", where, line)
        passages = _context_texts(row.get("contexts", []), where, line)
        if m == "none" and passages:
            raise DataError(f"task {tid!r}: mode 'none' gives the generator no passages, but contexts has "
                            f"{len(passages)}", where, line)  # fmt: skip
        preds[tid] = Prediction(tid, text, passages, line)
    if not preds:
        raise DataError("no predictions in the file", where)
    missing = [q for q in bench.references if q not in preds]
    if missing and not allow_missing:
        raise DataError(f"{len(missing)} of {len(bench.references)} benchmark turns have no prediction (first: "
                        f"{missing[0]!r}); pass --allow-missing to score the others", where)  # fmt: skip
    stem = where[: -len(".jsonl")] if where.endswith(".jsonl") else where
    beside = [p for p in (Path(f"{stem}.run.trec"), Path(f"{where}.run.trec")) if p.is_file()]
    run_path = str(beside[0]) if mode == "retrieved" and beside else None
    return PredictionFile(where, str(generator), str(mode), preds, missing, run_path)


# -- the judge ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JudgeItem:
    """What the judge sees for one answer."""

    question: str
    history: str
    reference: str
    passages: tuple[str, ...]
    answer: str


@dataclass
class JudgeOutcome:
    """Grades (on the profile's scale, median over judges) of the judged dimensions, or the failure that left the
    turn unscored."""

    grades: dict[str, float] = field(default_factory=dict)
    rationale: str = ""
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


def judge_messages(item: JudgeItem, profile: str = DEFAULT_PROFILE) -> list[dict[str, str]]:
    """The rendered ``gen_recor_judge`` prompt for one answer; the earlier turns only where the profile shows them
    (``convrag``; the authors' judge sees none)."""
    history = item.history if get_profile(profile).history else ""
    return load_prompt(PROMPT).render(question=item.question, history=history, reference=item.reference,
                                      passages=list(item.passages), answer=item.answer, profile=profile)  # fmt: skip


_BARE = re.compile(r"^\W*(\d{1,2}(?:\s*[,;/|]\s*\d{1,2})+)\W*$")


def bare_grades(dims: Sequence[str]) -> Callable[[str], dict[str, int] | None]:
    """A ``fallback`` that reads the authors' own reply form: the grades alone, comma-separated in the criteria's
    order (``7,8,6,9,8``; the last line of the reply when there is more). Exactly one integer per criterion in
    ``dims``, else None (then the reply is unreadable and re-asked)."""

    def read(text: str) -> dict[str, int] | None:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        match = _BARE.match(lines[-1]) if lines else None
        if match is None:
            return None
        values = [int(v) for v in re.split(r"[,;/|]", match.group(1))]
        return dict(zip(dims, values, strict=True)) if len(values) == len(dims) else None

    return read


def judge_answers(items: Sequence[JudgeItem], judges: Sequence[LLM], *, concurrency: int = 4, max_tokens: int = 300,
                  on_done: Callable[[], None] | None = None, profile: str = DEFAULT_PROFILE) -> list[JudgeOutcome]:
    """Judge every item with every judge (bounded concurrency, the judges' caches) on the ``profile``'s scale. A
    turn is graded only when every judge answered validly; otherwise its outcome carries the failure (judge spec
    and reason)."""
    plain, with_passages = SCHEMAS[get_profile(profile).name]

    def one(item: JudgeItem) -> JudgeOutcome:
        schema = with_passages if item.passages else plain
        dims = [d for d in DIMENSIONS if d != "faithfulness" or item.passages]
        replies, failures = [], []
        for llm in judges:
            try:
                replies.append(llm.structured(judge_messages(item, profile), schema, max_tokens=max_tokens,
                                              fallback=bare_grades(dims)).value)
            except EndpointUnreachable:
                raise  # a dead endpoint stops the batch (run_batch) instead of failing every turn
            except LLMError as err:
                failures.append(f"{llm.spec}: {type(err).__name__}: {str(err)[:300]}")
        if on_done is not None:
            on_done()
        if failures:
            return JudgeOutcome(failure="; ".join(failures))
        grades = {d: float(statistics.median(getattr(r, d) for r in replies)) for d in dims}
        return JudgeOutcome(grades, " | ".join(r.rationale for r in replies if r.rationale))

    batch = run_batch(items, one, concurrency=concurrency)
    return [r if r is not None else JudgeOutcome(failure=batch.failures.get(i, "no result"))
            for i, r in enumerate(batch.results)]


# -- scoring --------------------------------------------------------------------------------------------------
def score_generation(bench: Benchmark, files: Sequence[PredictionFile], judges: Sequence[LLM], *,
                     lexical: Any = None, run: str | None = None, concurrency: int = 4, max_tokens: int = 300,
                     progress: bool = False, profile: str = DEFAULT_PROFILE) -> dict[str, Any]:
    """Judge and (optionally) lexically score every file; returns ``{"per_turn": rows, "summary": {...}}``.

    ``profile``: the judge scale and settings (``authors`` or ``convrag``). The summary's ``comparability`` says
    which scale and settings were used and whether the figures are comparable with RECOR's tables (only a
    benchmark whose report kind is ``recor`` can be).

    ``lexical``: a :class:`convrag.evaluation.lexical.LexicalScorer` or None. ``run``: a TREC run used for the
    nDCG@10 of every retrieved-mode file (default: the run ``convrag generate`` wrote beside each such file,
    ``FILE.run.trec`` where ``FILE`` is the predictions path without ``.jsonl``; ``FILE.jsonl.run.trec`` works too).
    """
    from convrag.benchmarks.recor.generation_tables import run_ndcg, summarise
    from convrag.llm.spec import is_placeholder

    prof = get_profile(profile)
    if run is not None and not any(f.mode == "retrieved" for f in files):
        raise ConvragError("--run scores the retrieval behind retrieved-mode answers: give a retrieved-mode "
                           "predictions file")  # fmt: skip
    keys = [(f, p) for f in files for p in f.predictions.values()]
    refs = [bench.references[p.task_id] for _, p in keys]
    items = [JudgeItem(r.question, r.history, r.answer, tuple(p.passages), p.text)
             for r, (_, p) in zip(refs, keys, strict=True)]
    # runs and lexical metrics first: a bad run file or BERTScore model fails before any judge call
    lex: dict[str, list[float | None]] = {}
    if lexical is not None:
        lex = lexical.score([p.text for _, p in keys], [bench.references[p.task_id].answer for _, p in keys])
    ndcg: dict[tuple[str, str], float | None] = {}
    runs: dict[str, str] = {}
    for f in files:
        source = run if (run is not None and f.mode == "retrieved") else f.run_path
        if source is not None:
            runs[f.path] = source
            for q, v in run_ndcg(source, bench, list(f.predictions)).items():
                ndcg[(f.path, q)] = v
    bar = None
    if progress:
        from tqdm import tqdm

        from convrag.core.progress import label

        bar = tqdm(total=len(items), desc=label(f"judging {len(files)} answer files", bench.name), unit="answer")
    try:
        outcomes = judge_answers(items, judges, concurrency=concurrency, max_tokens=max_tokens,
                                 on_done=bar.update if bar is not None else None, profile=prof.name)  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    if outcomes and not any(o.ok for o in outcomes):
        raise ConvragError(f"every judge call failed ({len(outcomes)} answers), so nothing can be scored; first: "
                           f"{outcomes[0].failure}")  # fmt: skip
    rows = []
    for i, ((f, p), out) in enumerate(zip(keys, outcomes, strict=True)):
        ref = bench.references[p.task_id]
        rows.append({
            "file": f.path, "generator": f.generator, "mode": f.mode, "task_id": p.task_id,
            "conversation_id": ref.conversation_id, "turn": ref.turn, "position": turn_bucket(ref.turn),
            "domain": ref.domain or ALL_GROUP, "judged": out.ok, "failure": out.failure,
            "grades": out.grades, "normalised": {d: prof.normalise(g) for d, g in out.grades.items()},
            "judge_average": (statistics.fmean(prof.normalise(g) for g in out.grades.values()) if out.ok else None),
            "lexical": {m: v[i] for m, v in lex.items()},
            **({"ndcg@10": ndcg.get((f.path, p.task_id))} if f.path in runs else {}),
            "rationale": out.rationale,
        })  # fmt: skip
    judge_info = {"judges": [j.spec for j in judges], "models": [j.backend.model for j in judges],
                  "placeholder": any(is_placeholder(j) for j in judges), "prompt": PROMPT,
                  "combine": "per-dimension median" if len(judges) > 1 else "single judge"}  # fmt: skip
    described = lexical.describe() if lexical is not None else None
    scoring = {"profile": prof.name, "normalisation": prof.normalisation,
               "comparability": comparability(prof, bench.report == "recor", judge_info, described)}
    summary = summarise(rows, files, bench, judge_info, described, runs, scoring)
    summary["llm_report"] = {j.spec: j.report.to_dict() for j in judges}
    summary["degenerate"] = {f.label: answer_checks([p.text for p in f.predictions.values()]) for f in files}
    dimensions = list(dict.fromkeys(d for r in rows if r["judged"] for d in r["grades"]))
    summary["constant_verdicts"] = {d: line for d in dimensions if (line := constant_verdicts(
        [r["grades"].get(d) for r in rows if r["judged"]])) is not None}
    return {"per_turn": rows, "summary": summary}
