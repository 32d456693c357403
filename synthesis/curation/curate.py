"""MTR-Pipeline stage 1, corpus curation, as three datatrove pipelines (paper 4.1; reference section 1).

1. ``chunk`` (``tasks`` tasks): read -> boilerplate tail cut -> recursive chunking -> MinHash signature ->
   ``chunks/<file>.parquet``.
2. ``dedup`` (one task): greedy keep-first MinHash-LSH walk over all chunks -> ``dedup/near_duplicates.parquet``.
3. ``filter`` (``tasks`` tasks): chunks minus near-duplicates -> quality scoring and filtering ->
   ``corpus/<file>.parquet`` with ``_id``, ``title``, ``text``, ``source_id``, ``chunk``, ``source_file``,
   ``source_line`` and the quality columns.

Size rules (``corpus_level``): ``article`` applies the authors' rules, made for Wikipedia articles: a chunk shorter
than ``min_length`` (half the chunk size) is dropped, so a document shorter than that is dropped whole. ``passage``
keeps whole a document that fits in one chunk whatever its length (longer ones are chunked as under ``article``).
``auto`` (default) is ``passage`` when more than half of the documents are shorter than ``min_length`` after the
boilerplate cut, counted before any work (:func:`size_survey`) and printed with the option that changes it; the
level used and the counts are in the report. Execution (in this process, worker processes, Slurm, Ray):
:class:`Curate`; the output never depends on it.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datatrove.executor.local import LocalPipelineExecutor
from datatrove.executor.ray import RayPipelineExecutor
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.stats import PipelineStats

from convrag.core.corpus import CorpusFiles, CorpusReader, corpus_files, iter_file
from convrag.core.errors import ConvragError, DataError, EmptyResult
from convrag.synthesis.curation import quiet
from convrag.synthesis.curation.boilerplate import TAIL_HEADINGS, BoilerplateRemover, cut_tail
from convrag.synthesis.curation.chunking import Chunker, ChunkingStep
from convrag.synthesis.curation.minhash_dedup import MODES, DropListed, GreedyMinhashDedup, MinhashSignature
from convrag.synthesis.curation.quality import QualityFilter, profile_options, scorer_from_spec
from convrag.synthesis.engine.fingerprint import ReadsCorpus
from convrag.synthesis.engine.pipeline import Estimate, Stage, StageContext, StageReport
from convrag.synthesis.engine.shards import ShardReader, ShardWriter, count_rows

EXECUTORS = ("local", "slurm", "ray")
CORPUS_LEVELS = ("auto", "article", "passage")
#: Below this many documents the local executor runs every task in this process (see :class:`Curate`).
IN_PROCESS_BELOW = 5_000
#: Modules the fork server of the worker processes imports once, so that no worker imports them again.
PRELOAD = ("__main__", "convrag.synthesis.curation.curate", "langchain_text_splitters", "spacy", "spacy.lang.en")


class QuietLocalExecutor(LocalPipelineExecutor):
    """datatrove's local executor with its console logging sent to the task log files only, and its worker
    processes forked from a fork server that has imported ``PRELOAD``."""

    def run(self) -> Any:
        if self.workers > 1 and self.start_method == "forkserver":
            import multiprocess

            multiprocess.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
        return super().run()

    def _run_for_rank(self, rank: int, local_rank: int = 0, node_rank: int = -1) -> PipelineStats:
        quiet.silence_datatrove()
        return super()._run_for_rank(rank, local_rank, node_rank)


class QuietRayExecutor(RayPipelineExecutor):
    """datatrove's Ray executor with its console logging sent to the task log files only, in every Ray worker, and
    the error that ends a task kept in ``errors/NNNNN.json`` under the logging folder: datatrove's executor logs a
    failed task at debug level and returns, so :meth:`Curate.run` reads the error there and raises it."""

    def _run_for_rank(self, rank: int, local_rank: int = 0, node_rank: int = -1) -> PipelineStats:
        quiet.silence_datatrove()
        try:
            return super()._run_for_rank(rank, local_rank, node_rank)
        except Exception as err:
            kind = next((c.__name__ for c in (EmptyResult, DataError, ConvragError) if isinstance(err, c)), None)
            with self.logging_dir.open(f"errors/{rank:05d}.json", "w") as f:
                json.dump({"kind": kind, "type": type(err).__name__, "message": str(err)}, f)
            raise


def ray_failure(name: str, executor: RayPipelineExecutor, logs: Path) -> ConvragError:
    """The error to raise for the tasks of pipeline ``name`` that did not finish on Ray: the first failed task's own
    error (a convrag error as the same class, so the command exits as it would locally), else one naming the tasks
    and their log files."""
    pending = executor.get_incomplete_ranks()
    for rank in pending:
        path = logs / "errors" / f"{rank:05d}.json"
        if not path.is_file():
            continue
        error = json.loads(path.read_text(encoding="utf-8"))
        kind = {"EmptyResult": EmptyResult, "DataError": DataError, "ConvragError": ConvragError}.get(error["kind"])
        if kind is not None:
            return kind(error["message"])
        return ConvragError(f"curate {name}: task {rank} failed on Ray: {error['type']}: {error['message']} "
                            f"(log: {logs / 'logs' / f'task_{rank:05d}.log'})")
    return ConvragError(f"curate {name}: {len(pending)} of {executor.world_size} Ray tasks did not finish (logs: "
                        f"{logs / 'logs'}); run the same command again (finished tasks are kept)")


@contextmanager
def ray_session(progress: bool) -> Iterator[None]:
    """Connected to a Ray cluster while the block runs. Connected already (``ray.init()`` called by the caller):
    that cluster. Otherwise ``ray.init()`` here: the cluster at ``$RAY_ADDRESS``, else the one ``ray start`` began
    on this machine, else a new local one with every CPU, shut down again at the end."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init()
    try:
        if progress:
            cpus = int(ray.cluster_resources().get("CPU", 0))
            print(f"curate: Ray cluster at {ray.get_runtime_context().gcs_address} ({cpus} CPUs)", flush=True)
        yield
    finally:
        if started:
            ray.shutdown()


@dataclass(frozen=True)
class SizeSurvey:
    """``documents`` in the corpus and ``short``: those shorter than ``min_length`` characters after the boilerplate
    cut (stripped), which the article size rule drops whole (every chunk of such a document is shorter still)."""

    documents: int
    short: int
    min_length: int

    @property
    def passage_level(self) -> bool:
        """The ``auto`` rule: more than half of the documents are shorter than ``min_length``."""
        return self.short * 2 > self.documents

    def note(self, level: str, given: str) -> str | None:
        """The line printed before any work: what the size rules will do, and the option that changes it."""
        counted = f"{self.short:,} of {self.documents:,} documents are shorter than min_length={self.min_length:,} " \
                  "characters"
        if level == "passage":
            how = "more than half: a passage-level corpus" if given == "auto" else "corpus_level=passage"
            return (f"curate: {counted} ({how}): a document that fits in one chunk is kept whole; "
                    f"--option corpus_level=article applies the authors' size rule, which drops those {self.short:,}")
        if not self.short:
            return None
        return (f"curate: {counted}: the size rule drops them whole (chunk_too_short); --option corpus_level=passage "
                "keeps a document that fits in one chunk whole, --option min_length=N lowers the limit")


def size_survey(files: CorpusFiles, headings: list[str], min_length: int) -> SizeSurvey:
    """Count the documents of ``files`` and those shorter than ``min_length`` after the tail cut (one read)."""
    documents = short = 0
    for path in files.files:
        for _, _, _, text in iter_file(path):
            cut = cut_tail(text, headings)
            documents += 1
            short += len((cut if cut.strip() else text).strip()) < min_length
    return SizeSurvey(documents, short, min_length)


class Curate(ReadsCorpus, Stage):
    """Curation of a corpus source into ``curate/corpus/*.parquet`` (see the module docstring).

    Execution. Below ``in_process_below`` documents (5,000) the local executor runs the tasks one after another in
    this process (datatrove's own one-worker mode: the same step objects, shards, stats files and completion
    markers), whatever ``workers`` says: at that size worker processes, each importing spaCy, datatrove and
    LangChain again, cost more CPU than they save. Above it, ``workers`` processes forked from a fork server that
    imports those modules once (``PRELOAD``). ``executor="slurm"`` hands the three pipelines to datatrove's Slurm
    executor with ``executor_options`` (partition, time, cpus per task, ...), chained with ``depends``; it returns
    at once: run the same command again when the jobs have finished to collect the report. ``executor="ray"`` runs
    them one after another as Ray tasks with datatrove's Ray executor and ``executor_options`` (workers,
    cpus_per_task, mem_per_cpu_gb, ...), on the cluster :func:`ray_session` connects to, and waits for each; a
    failed task's error is raised as it would be here (:func:`ray_failure`). Finished tasks are never rerun
    (datatrove's completion markers), and outputs are named after the corpus file they come from, so they depend
    neither on the executor nor on the number of tasks.
    """

    name = "curate"
    unit = "documents"

    def __init__(self, source: str, *, corpus_config: str | None = None, headings: list[str] | None = None,
                 chunk_size: int = 2048, chunk_overlap: int = 0, min_length: int | None = None,
                 separators: str = "authors", dangling_tokens: int = 5, minhash_perm: int = 128,
                 minhash_threshold: float = 0.5, minhash_ngram: int = 5, minhash_seed: int = 1,
                 minhash_mode: str = "verified", quality: str = "heuristic",
                 quality_options: dict[str, Any] | None = None, tasks: int = 1, workers: int = 1,
                 executor: str = "local", executor_options: dict[str, Any] | None = None,
                 profile: str = "authors", corpus_level: str = "auto",
                 in_process_below: int = IN_PROCESS_BELOW) -> None:
        if executor not in EXECUTORS:
            raise ConvragError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
        if executor == "ray" and importlib.util.find_spec("ray") is None:
            raise ConvragError("executor=ray needs Ray, which is not installed: pip install 'convrag[ray]'")
        if tasks < 1 or workers < 1:
            raise ConvragError(f"tasks and workers must be at least 1 (got tasks={tasks}, workers={workers})")
        if minhash_mode not in MODES:
            raise ConvragError(f"minhash_mode must be one of {', '.join(MODES)}, got {minhash_mode!r}")
        if corpus_level not in CORPUS_LEVELS:
            raise ConvragError(f"corpus_level must be one of {', '.join(CORPUS_LEVELS)}, got {corpus_level!r}")
        if in_process_below < 0:
            raise ConvragError(f"in_process_below must be a whole number >= 0, got {in_process_below}")
        if not 0 < minhash_threshold <= 1:
            raise ConvragError(f"minhash_threshold must be in (0, 1], got {minhash_threshold}")
        for name, value, low in (("minhash_perm", minhash_perm, 1), ("minhash_ngram", minhash_ngram, 1),
                                 ("dangling_tokens", dangling_tokens, 0), ("minhash_seed", minhash_seed, 0)):
            if value < low:
                raise ConvragError(f"{name} must be a whole number >= {low}, got {value}")
        self.source, self.corpus_config = str(source), corpus_config
        self.headings = list(TAIL_HEADINGS if headings is None else headings)
        self.chunker = Chunker(chunk_size, chunk_overlap, min_length, separators, dangling_tokens)
        self.chunking = {"chunk_size": chunk_size, "chunk_overlap": chunk_overlap,
                         "min_length": self.chunker.min_length, "separators": separators,
                         "dangling_tokens": dangling_tokens}
        self.minhash = {"num_perm": minhash_perm, "threshold": minhash_threshold, "ngram": minhash_ngram,
                        "seed": minhash_seed, "mode": minhash_mode}
        # the profile's heuristic rule set, written out (synthesis.curation.quality.profile_options), so params.json
        # says it
        self.quality, self.quality_options = quality, profile_options(quality, quality_options, profile)
        self.profile = profile
        scorer_from_spec(quality, self.quality_options)  # a bad spec fails before anything runs
        self.tasks, self.workers = tasks, workers
        self.executor, self.executor_options = executor, dict(executor_options or {})
        self.corpus_level, self.in_process_below = corpus_level, in_process_below
        self._survey: SizeSurvey | None = None

    def params(self) -> dict[str, Any]:
        """Everything that shapes the output (tasks, workers, the executor and ``in_process_below`` do not)."""
        return {"source": self.source, "corpus_config": self.corpus_config, "headings": self.headings,
                **self.chunking, "corpus_level": self.corpus_level, "minhash": self.minhash,
                "quality": self.quality, "quality_options": self.quality_options}

    def survey(self) -> SizeSurvey:
        """The corpus's :class:`SizeSurvey` (read once per stage object)."""
        if self._survey is None:
            files = corpus_files(self.source, self.corpus_config)
            self._survey = size_survey(files, self.headings, self.chunker.min_length)
        return self._survey

    def level(self) -> str:
        """The corpus level the size rules follow: ``corpus_level``, or for ``auto`` the survey's verdict."""
        if self.corpus_level != "auto":
            return self.corpus_level
        return "passage" if self.survey().passage_level else "article"

    def estimate(self, ctx: StageContext) -> Estimate:
        files, survey, level = corpus_files(self.source, self.corpus_config), self.survey(), self.level()
        fate = "kept whole if they fit in one chunk" if level == "passage" else "dropped whole"
        return Estimate(records=survey.documents, note=f"no LLM calls; {len(files.files)} file(s), quality="
                        f"{self.quality}; corpus_level={level}: {survey.short:,} documents shorter than "
                        f"min_length={survey.min_length:,}, {fate}")

    def workers_for(self, tasks: int) -> int:
        """Worker processes for a pipeline of ``tasks`` tasks: 1 (this process) below ``in_process_below``."""
        return 1 if self.survey().documents < self.in_process_below else min(self.workers, tasks)

    def _executor(self, steps: list[PipelineStep], tasks: int, logs: Path, depends: Any) -> Any:
        workers = self.workers_for(tasks)
        if self.executor == "local":
            return QuietLocalExecutor(steps, tasks=tasks, workers=workers, logging_dir=str(logs), depends=depends)
        if self.executor == "slurm":
            from datatrove.executor.slurm import SlurmPipelineExecutor

            return SlurmPipelineExecutor(steps, tasks=tasks, logging_dir=str(logs), depends=depends,
                                         **self.executor_options)
        # no depends: run() starts each pipeline when the one before has finished (datatrove's Ray executor would
        # wait for a failed dependency forever, two minutes at a time)
        return QuietRayExecutor(steps, tasks=tasks, logging_dir=str(logs), **self.executor_options)

    def pipelines(self, ctx: StageContext) -> list[tuple[str, list[PipelineStep], int]]:
        """The three datatrove pipelines as (name, steps, tasks), for running them with any executor."""
        files = corpus_files(self.source, self.corpus_config)
        n, folder = len(files.files), ctx.folder
        c = self.chunker
        chunker = Chunker(c.chunk_size, self.chunking["chunk_overlap"], c.min_length, self.chunking["separators"],
                          c.dangling_tokens, keep_whole=self.level() == "passage")
        return [
            ("chunk", [CorpusReader(files, ctx.progress), BoilerplateRemover(self.headings),
                       ChunkingStep(chunker),
                       MinhashSignature(self.minhash["num_perm"], self.minhash["seed"], self.minhash["ngram"]),
                       ShardWriter(folder / "chunks", n)], self.tasks),
            ("dedup", [GreedyMinhashDedup(folder / "chunks", n, folder / "dedup", threshold=self.minhash["threshold"],
                                          num_perm=self.minhash["num_perm"], seed=self.minhash["seed"],
                                          ngram=self.minhash["ngram"], mode=self.minhash["mode"],
                                          progress=ctx.progress)], 1),
            ("filter", [ShardReader(folder / "chunks", n), DropListed(folder / "dedup"),
                        QualityFilter(scorer_from_spec(self.quality, self.quality_options)),
                        ShardWriter(folder / "corpus", n, exclude=("minhash", "file_index"))], self.tasks),
        ]

    def run(self, ctx: StageContext) -> StageReport:
        quiet.silence_datatrove()
        note = self.survey().note(self.level(), self.corpus_level)  # before any work, progress or not
        if note is not None:
            print(note, flush=True)
        scorer = scorer_from_spec(self.quality, self.quality_options)
        for part in getattr(scorer, "scorers", [scorer]):  # a model that cannot load fails before any work
            if hasattr(part, "load"):
                part.load()
        executors, depends = [], None
        for name, steps, tasks in self.pipelines(ctx):
            logs = ctx.folder / "_datatrove" / f"{name}-{tasks}tasks"
            depends = self._executor(steps, tasks, logs, depends)
            executors.append((name, depends, logs))
        if self.executor == "slurm":
            executors[-1][1].run()
        elif self.executor == "ray":
            with ray_session(ctx.progress):
                for name, executor, logs in executors:
                    if ctx.progress:
                        print(f"curate: {name} ({executor.world_size} task(s), at most {executor.workers} at once)",
                              flush=True)
                    shutil.rmtree(logs / "errors", ignore_errors=True)  # an earlier run's, of tasks run again now
                    executor.run()
                    if executor.get_incomplete_ranks():
                        raise ray_failure(name, executor, logs)
        else:
            for name, executor, _ in executors:
                if ctx.progress:
                    workers = self.workers_for(executor.world_size)
                    print(f"curate: {name} ({executor.world_size} task(s), {workers} worker(s))", flush=True)
                executor.run()
        pending = [f"{name}: {len(ex.get_incomplete_ranks())} of {ex.world_size} tasks"
                   for name, ex, _ in executors if ex.get_incomplete_ranks()]
        if pending:
            raise ConvragError(f"{ctx.folder}: curation tasks not finished ({'; '.join(pending)}); run the same "
                               "command again when the jobs are done (finished tasks are kept)")
        return self._report(ctx, [logs for _, _, logs in executors])

    def _report(self, ctx: StageContext, log_dirs: list[Path]) -> StageReport:
        counts: Counter[str] = Counter()
        for logs in log_dirs:
            for path in sorted((logs / "stats").glob("*.json")):
                for step in json.loads(path.read_text(encoding="utf-8")):
                    for key, metric in step.get("stats", {}).items():
                        counts[key] += int(metric["total"] if isinstance(metric, dict) else metric)
        dropped = {k.removeprefix("dropped:"): v for k, v in counts.items() if k.startswith("dropped:")}
        figures = {k: counts[k] for k in ("chunks", "boilerplate_cut", "boilerplate_chars_removed", "boilerplate_all")}
        figures["profile"] = self.profile
        survey = self.survey()
        figures.update(corpus_level=self.level(), documents_below_min_length=survey.short,
                       kept_whole=counts["kept_whole"])
        if self.executor == "local":
            workers = self.workers_for(self.tasks)
            figures["execution"] = "in this process" if workers == 1 else f"{workers} worker processes"
        elif self.executor == "ray":
            figures["execution"] = "Ray tasks"
        out = count_rows(ctx.folder / "corpus")
        return StageReport(self.name, records_in=counts["documents"], records_out=out, dropped=dropped,
                           figures=figures)
