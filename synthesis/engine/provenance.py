"""What a synthesized benchmark was made from: ``synthesis.json``, written by a pipeline's last stage beside the
files a builder reads (``OUT/assemble/``, ``OUT/release/``), and read back by ``convrag build`` for the card; the MTR
release's Parquet files carry the same record in their schema metadata (:data:`METADATA_KEY`), so that copies of
them build as what they are. (RECOR's release is JSONL, which has no place for it: copied without its
``synthesis.json``, it builds as RECOR-shaped data of unknown origin, under the RECOR card.)
Nothing in it depends on the time of the run, so a rerun that changes nothing writes the same bytes. Record::

    pipeline: str            "mtr" (MTR-Pipeline) or "recor-dv" (RECOR Decomposition-and-Verification)
    benchmark: str           the builder that reads the files ("mtr-bench", "recor")
    corpus: str              the source the pipeline read, as a published card may show it (``local:<name>`` or an
                             ``hf://`` URL; see ``convrag.core.provenance.public_path``)
    seed: int
    models: {role: identity} the LLM of each role, from the ``models`` of its stage's params.json
                             (``convrag.llm.identity.ModelIdentity.to_dict`` without the endpoint, which stays in the
                             local params.json; a D&V stage's one LLM is the role named after the stage). A stage
                             whose params.json predates ``models`` gives
                             ``{"spec": <as given>, "model": null, "placeholder": null, "label": "not recorded ..."}``.
    placeholder: bool        some role ran on the embedded SmolLM2-135M placeholder
    models_unknown: bool     some role's model was not recorded and may have been the placeholder
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convrag.core.errors import DataError

if TYPE_CHECKING:
    from convrag.synthesis.engine.pipeline import Estimate

FILE = "synthesis.json"
#: the Parquet schema metadata key that holds the same record inside a release's files
METADATA_KEY = b"convrag.synthesis"
#: pipeline -> (its name in cards, the benchmark whose schema it writes, what the paper calls the method)
PIPELINES = {
    "mtr": ("MTR-Pipeline", "MTR-Bench", "MTR-Suite (ACL 2026), section 4"),
    "recor-dv": ("RECOR Decomposition-and-Verification", "RECOR", "RECOR, section 3.2"),
}


def _read_json(path: Path) -> Any:
    """A JSON file's value; an unreadable one is one error naming it."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataError(f"unreadable ({' '.join(str(err).split())})", str(path)) from None


def _not_recorded(stage: str, params: dict[str, Any], role: str) -> dict[str, Any]:
    """A role of a stage that ran before models were recorded: the spec as given (``default`` is the placeholder;
    ``$CONVRAG_LLM or default`` cannot be resolved any more, so it may have been)."""
    from convrag.llm.spec import is_placeholder

    typed = (params.get("params") or {}).get(role if role in (params.get("params") or {}) else "llm")
    unknown = typed is None or "$CONVRAG_LLM" in str(typed)
    placeholder = None if unknown else is_placeholder(str(typed))
    maybe = "; it may have been the embedded placeholder" if unknown else ""
    return {"spec": typed, "model": None, "endpoint": None, "placeholder": placeholder,
            "label": f"not recorded (stage {stage} ran before models were recorded; spec as given: {typed}{maybe})"}


def stage_models(out: Path, stages: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Role -> model identity of every stage of ``stages`` with a params.json under ``out`` (see the module
    docstring); a D&V stage's role ``llm`` is named after the stage."""
    found: dict[str, dict[str, Any]] = {}
    for stage in stages:
        path = out / stage / "params.json"
        if not path.is_file():
            continue
        params = _read_json(path)
        if not isinstance(params, dict):
            continue
        models = params.get("models")
        if not isinstance(models, dict):
            roles = [r for r in ("questioner", "responder", "polisher", "llm") if r in (params.get("params") or {})]
            models = {r: _not_recorded(stage, params, r) for r in roles}
        for role, ident in models.items():
            found[stage if role == "llm" else role] = ident
    return found


#: pipeline -> (the benchmark it writes, its last stage, the stages whose models wrote the data)
RUNS = {"mtr": ("mtr-bench", "assemble", ("converse", "polish")),
        "recor-dv": ("recor", "release", ("align", "aspects", "facts", "turns"))}


def _public_spec(spec: Any) -> Any:
    """A spec without the server's address (cut before ``@``) and a local model's folders (its name only)."""
    if not isinstance(spec, str):
        return spec
    kind, sep, target = spec.split("@")[0].partition(":")
    if sep and kind.strip().lower() in ("hf", "transformers", "llamacpp", "gguf"):
        target = os.path.basename(target.rstrip("/")) or target
    return f"{kind}{sep}{target}"


def _public(ident: dict[str, Any]) -> dict[str, Any]:
    """A model identity as a published card may show it: no server address and no local folder (the run's business,
    not the dataset's; both stay in the local params.json)."""
    if not isinstance(ident, dict):
        return ident
    spec, label = ident.get("spec"), ident.get("label")
    public = _public_spec(spec)
    if label == spec:
        label = f"{public} (an OpenAI-compatible server)" if ident.get("endpoint") else public
    elif isinstance(label, str) and isinstance(spec, str):
        label = label.replace(spec, str(public))
    return {**ident, "spec": public, "endpoint": None, "label": label}


def make_record(*, pipeline: str, out: Path, stages: Sequence[str], corpus: str | None, seed: Any) -> dict[str, Any]:
    """The record (see the module docstring) of the run folder ``out``."""
    from convrag.core.provenance import public_path

    models = {role: _public(ident) for role, ident in stage_models(out, stages).items()}
    return {"pipeline": pipeline, "benchmark": RUNS[pipeline][0],
            "corpus": public_path(corpus) if corpus else None, "seed": seed, "models": models,
            "placeholder": any(m.get("placeholder") is True for m in models.values()),
            "models_unknown": any(m.get("placeholder") is None for m in models.values())}


def run_record(folder: Path) -> dict[str, Any] | None:
    """The record of a last-stage folder written before ``synthesis.json`` existed, rebuilt from its run folder
    (``pipeline.json`` and the stages' params.json); None when ``folder`` is no such stage folder."""
    try:
        run = json.loads((folder.parent / "pipeline.json").read_text(encoding="utf-8"))
        params = json.loads((folder / "params.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    pipeline = run.get("pipeline") if isinstance(run, dict) else None
    if pipeline not in RUNS or folder.name != RUNS[pipeline][1] or not isinstance(params, dict):
        return None
    stages = [s for s in RUNS[pipeline][2] if s != "polish" or (folder.parent / s / "report.json").is_file()]
    corpus = (params.get("params") or {}).get("source")
    return make_record(pipeline=pipeline, out=folder.parent, stages=stages, corpus=corpus, seed=params.get("seed"))


def parquet_metadata(record: dict[str, Any]) -> dict[bytes, bytes]:
    """Schema metadata that carries ``record`` inside a Parquet file (:data:`METADATA_KEY`)."""
    return {METADATA_KEY: json.dumps(record, ensure_ascii=False).encode()}


def parquet_record(folder: Path) -> dict[str, Any] | None:
    """The record in the schema metadata of the first Parquet file of ``folder`` (sorted by name) that holds one;
    None when none does."""
    import pyarrow.parquet as pq

    for path in sorted(folder.glob("*.parquet")):
        try:
            raw = (pq.read_schema(path).metadata or {}).get(METADATA_KEY)
        except (OSError, ValueError):
            continue
        if raw is not None:
            try:
                record = json.loads(raw)
            except ValueError:
                raise DataError(f"unreadable {METADATA_KEY.decode()} schema metadata", str(path)) from None
            if isinstance(record, dict) and record.get("pipeline") in PIPELINES:
                return record
    return None


def write_record(folder: Path, *, pipeline: str, out: Path, stages: Sequence[str], corpus: str | None,
                 seed: int) -> dict[str, Any]:
    """Write ``folder/synthesis.json`` (through a temporary file and a rename) and return the record."""
    record = make_record(pipeline=pipeline, out=out, stages=stages, corpus=corpus, seed=seed)
    tmp = folder / (FILE + ".tmp")
    tmp.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, folder / FILE)
    return record


def read_record(source: Any) -> dict[str, Any] | None:
    """The ``synthesis.json`` of a build's ``source`` option (a folder, or a mapping whose local paths' folders are
    searched), else the record rebuilt from the run folder of a last stage that predates it (:func:`run_record`),
    else the record in its Parquet files' schema metadata (:func:`parquet_record`: files copied away from their
    run folder); None when there is none (a published benchmark)."""
    values = source.values() if isinstance(source, dict) else [source] if source is not None else []
    for value in values:
        if not isinstance(value, (str, os.PathLike)) or "://" in str(value):
            continue
        path = Path(value).expanduser()
        folders = [path] if path.is_dir() else [path.parent]
        for folder in folders:
            if (folder / FILE).is_file():
                record = _read_json(folder / FILE)
                if isinstance(record, dict) and record.get("pipeline") in PIPELINES:
                    return record
        for folder in folders:
            record = run_record(folder) or parquet_record(folder)
            if record is not None:
                return record
    return None


def model_lines(record: dict[str, Any]) -> list[str]:
    """One ``role: label`` line per role (roles with the same model joined: ``questioner, responder: X``)."""
    by_label: dict[str, list[str]] = {}
    for role, ident in (record.get("models") or {}).items():
        label = (ident.get("label") or ident.get("spec")) if isinstance(ident, dict) else str(ident)
        by_label.setdefault(str(label), []).append(role)
    return [f"{', '.join(roles)}: {label}" for label, roles in by_label.items()]


def pretty_name(record: dict[str, Any]) -> str:
    """The card's ``pretty_name``: what was synthesized, from what, and a placeholder mark."""
    method, schema, _ = PIPELINES[record["pipeline"]]
    corpus = str(record.get("corpus") or "a user corpus").removeprefix("local:")
    mark = " (placeholder LLM: not a benchmark)" if record.get("placeholder") else \
        " (models not recorded: possibly the placeholder LLM)" if record.get("models_unknown") else ""
    return f"Synthetic {schema}-style conversations over {corpus} ({method}){mark}"


def source_datasets(record: dict[str, Any]) -> list[str]:
    """The card's ``source_datasets``: the corpus when it is a Hub dataset, else none (a local corpus has no id)."""
    corpus = str(record.get("corpus") or "")
    if not corpus.startswith("hf://datasets/"):
        return []
    repo = corpus.removeprefix("hf://datasets/").split("@")[0]
    return ["/".join(repo.split("/")[:2])]


def changed_models(old: Any, new: dict[str, dict[str, Any]]) -> str:
    """The roles whose model differs between a params.json's ``models`` and the stage's now, as ``role: A -> B``;
    empty when none does. Models are compared by name and placeholder flag (the same model at another endpoint is
    the same model); a params.json without ``models`` (written before they were recorded) matches any."""
    if not isinstance(old, dict):
        return ""

    def key(ident: Any) -> tuple[Any, Any]:
        return (ident.get("model"), ident.get("placeholder")) if isinstance(ident, dict) else (ident, None)

    parts = [f"{role}: {key(old.get(role))[0]} -> {key(new.get(role))[0]}"
             for role in sorted(set(old) | set(new)) if key(old.get(role)) != key(new.get(role))]
    return "; ".join(parts)


def estimate_models(e: Estimate) -> list[tuple[str, bool]]:
    """(name, placeholder) of each model a stage's estimate calls (its parts', else its own), in order: the name
    as ``convrag.llm.identity.describe`` resolves it (``default`` is the embedded SmolLM2-135M file)."""
    from convrag.llm.identity import PLACEHOLDER_FILE
    from convrag.llm.spec import PLACEHOLDER_MODEL

    named = [p.model for p in e.parts if p.llm_calls] if e.parts else [e.model] if e.llm_calls else []
    out: dict[str, bool] = {}
    for model in named:
        name = PLACEHOLDER_FILE if model in (None, "", "default") else str(model)
        out.setdefault(name, PLACEHOLDER_MODEL.lower() in name.lower())
    return list(out.items())
