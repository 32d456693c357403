"""MTR-Pipeline stage 1, corpus curation, as three datatrove pipelines (paper 4.1; reference section 1).

1. ``chunk`` (``tasks`` tasks): read -> boilerplate tail cut -> recursive chunking -> MinHash signature ->
   ``chunks/<file>.parquet``.
2. ``dedup`` (one task): greedy keep-first MinHash-LSH walk over all chunks -> ``dedup/near_duplicates.parquet``.
3. ``filter`` (``tasks`` tasks): chunks minus near-duplicates -> quality scoring and filtering ->
   ``corpus/<file>.parquet`` with ``_id``, ``title``, ``text``, ``source_id``, ``chunk``, ``source_file``,
   ``source_line`` and the quality columns.

The three run on datatrove's local executor by default (``workers`` processes); ``executor="slurm"`` or
``"ray"`` hands them to datatrove's Slurm / Ray executors with ``executor_options`` (partition, time, cpus per
task, ...), chained with ``depends``. A Slurm run returns at once; run the same command again when the jobs
have finished to collect the report. Finished tasks are never rerun (datatrove's completion markers), and
outputs are named after the corpus file they come from, so they do not depend on the number of tasks.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from datatrove.executor.local import LocalPipelineExecutor
from datatrove.pipeline.base import PipelineStep
from datatrove.utils.stats import PipelineStats

from convrag.errors import ConvragError
from convrag.synthesis import quiet
from convrag.synthesis.boilerplate import TAIL_HEADINGS, BoilerplateRemover
from convrag.synthesis.chunking import Chunker, ChunkingStep
from convrag.synthesis.corpus_source import CorpusReader, corpus_files, count_documents
from convrag.synthesis.engine import Estimate, Stage, StageContext, StageReport
from convrag.synthesis.fingerprint import ReadsCorpus
from convrag.synthesis.minhash_dedup import MODES, DropListed, GreedyMinhashDedup, MinhashSignature
from convrag.synthesis.quality import QualityFilter, profile_options, scorer_from_spec
from convrag.synthesis.shards import ShardReader, ShardWriter, count_rows

EXECUTORS = ("local", "slurm", "ray")


class QuietLocalExecutor(LocalPipelineExecutor):
    """datatrove's local executor with its console logging sent to the task log files only."""

    def _run_for_rank(self, rank: int, local_rank: int = 0, node_rank: int = -1) -> PipelineStats:
        quiet.silence_datatrove()
        return super()._run_for_rank(rank, local_rank, node_rank)


class Curate(ReadsCorpus, Stage):
    """Curation of a corpus source into ``curate/corpus/*.parquet`` (see the module docstring)."""

    name = "curate"
    unit = "documents"

    def __init__(self, source: str, *, corpus_config: str | None = None, headings: list[str] | None = None,
                 chunk_size: int = 2048, chunk_overlap: int = 0, min_length: int | None = None,
                 separators: str = "authors", dangling_tokens: int = 5, minhash_perm: int = 128,
                 minhash_threshold: float = 0.5, minhash_ngram: int = 5, minhash_seed: int = 1,
                 minhash_mode: str = "verified", quality: str = "heuristic",
                 quality_options: dict[str, Any] | None = None, tasks: int = 1, workers: int = 1,
                 executor: str = "local", executor_options: dict[str, Any] | None = None,
                 profile: str = "authors") -> None:
        if executor not in EXECUTORS:
            raise ConvragError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
        if tasks < 1 or workers < 1:
            raise ConvragError(f"tasks and workers must be at least 1 (got tasks={tasks}, workers={workers})")
        if minhash_mode not in MODES:
            raise ConvragError(f"minhash_mode must be one of {', '.join(MODES)}, got {minhash_mode!r}")
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
        # the profile's heuristic rule set, written out (synthesis.quality.profile_options), so params.json says it
        self.quality, self.quality_options = quality, profile_options(quality, quality_options, profile)
        self.profile = profile
        scorer_from_spec(quality, self.quality_options)  # a bad spec fails before anything runs
        self.tasks, self.workers = tasks, workers
        self.executor, self.executor_options = executor, dict(executor_options or {})

    def params(self) -> dict[str, Any]:
        """Everything that shapes the output (tasks, workers and the executor do not)."""
        return {"source": self.source, "corpus_config": self.corpus_config, "headings": self.headings,
                **self.chunking, "minhash": self.minhash, "quality": self.quality,
                "quality_options": self.quality_options}

    def estimate(self, ctx: StageContext) -> Estimate:
        files = corpus_files(self.source, self.corpus_config)
        return Estimate(records=count_documents(files), note=f"no LLM calls; {len(files.files)} file(s), "
                                                               f"quality={self.quality}")

    def _executor(self, steps: list[PipelineStep], tasks: int, logs: Path, depends: Any) -> Any:
        workers = min(self.workers, tasks)
        if self.executor == "local":
            return QuietLocalExecutor(steps, tasks=tasks, workers=workers, logging_dir=str(logs), depends=depends)
        if self.executor == "slurm":
            from datatrove.executor.slurm import SlurmPipelineExecutor

            return SlurmPipelineExecutor(steps, tasks=tasks, logging_dir=str(logs), depends=depends,
                                         **self.executor_options)
        from datatrove.executor.ray import RayPipelineExecutor

        return RayPipelineExecutor(steps, tasks=tasks, logging_dir=str(logs), depends=depends,
                                   **self.executor_options)

    def pipelines(self, ctx: StageContext) -> list[tuple[str, list[PipelineStep], int]]:
        """The three datatrove pipelines as (name, steps, tasks), for running them with any executor."""
        files = corpus_files(self.source, self.corpus_config)
        n, folder = len(files.files), ctx.folder
        return [
            ("chunk", [CorpusReader(files, ctx.progress), BoilerplateRemover(self.headings),
                       ChunkingStep(self.chunker),
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
        else:
            for name, executor, _ in executors:
                if ctx.progress:
                    print(f"curate: {name} ({executor.world_size} task(s), {min(self.workers, executor.world_size)} "
                          f"worker(s))", flush=True)
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
        out = count_rows(ctx.folder / "corpus")
        return StageReport(self.name, records_in=counts["documents"], records_out=out, dropped=dropped,
                           figures=figures)
