"""How a dense retriever's sentence-transformers model runs its transformer on the CPU (``backend=``).

* ``torch`` (default): sentence-transformers as loaded.
* ``onnx``: the model's transformer exported to ONNX (float32, eager attention traced by ``torch.onnx``), its
  attention, layer norms and GELU fused by ONNX Runtime's transformer optimizer, and run by ONNX Runtime's CPU
  provider. Tokenisation, prompts, truncation, pooling and normalisation stay sentence-transformers' own: only the
  transformer module's forward pass changes, so every dense option applies unchanged. Each batch
  sentence-transformers hands over is run as runs of ``ROWS_PER_RUN`` rows of similar length, each cut to its
  longest row (no padding columns beyond it), on ``torch.get_num_threads()`` threads sharing one single-threaded
  session without spin-waiting. Padding is masked, so the token embeddings of real tokens are those of the whole
  padded batch up to float rounding; the work saved is the padding (about 30% of torch's CPU time on StratRAG).

An export is made once per model and kept in ``$CONVRAG_ONNX_CACHE``, else ``$CONVRAG_CACHE_DIR/onnx``, else
``~/.cache/convrag/onnx`` (never inside the installed package): the folder ``<root>/<model digest>-v<version>/``
holds ``model.onnx`` and ``meta.json`` (model record, export recipe, library versions, the file's SHA-256). It is
written under a temporary name and renamed when complete, and only after its outputs on probe texts agree with the
torch model's (largest absolute difference of token embeddings at most ``EXPORT_TOLERANCE``); a model whose export
does not agree is refused. Any export may be deleted: it is made again. ``onnx`` needs the ``convrag[onnx]`` extra
(``onnx`` for the export, ``onnxruntime`` to run it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from convrag.core.errors import ConvragError

BACKENDS = ("torch", "onnx")
ONNX_CACHE_ENV = "CONVRAG_ONNX_CACHE"
#: Recipe version of an export (part of its folder's name: a new recipe makes a new export).
EXPORT_VERSION = 1
EXPORT_TOLERANCE = 1e-3
#: Rows per ONNX Runtime run: a batch is cut into runs of this many rows of similar length, each without padding.
ROWS_PER_RUN = 4
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_PROBES = ["A short probe.", "A longer probe sentence about the Eiffel Tower, built in Paris for the 1889 fair. " * 3]


def check_backend(backend: object, flag: str = "backend") -> str:
    """``backend`` as a name of :data:`BACKENDS`; a one-line :class:`ConvragError` naming them otherwise."""
    name = str(backend).strip().lower()
    if name not in BACKENDS:
        raise ConvragError(f"{flag}: unknown dense backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return name


def export_root() -> Path:
    """Where ONNX exports are kept (see the module docstring)."""
    env = os.environ.get(ONNX_CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("CONVRAG_CACHE_DIR")
    return Path(base) / "onnx" if base else Path.home() / ".cache" / "convrag" / "onnx"


def _versions() -> dict[str, str | None]:
    def version(package: str) -> str | None:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return None

    return {p: version(p) for p in ("onnxruntime", "onnx", "torch", "transformers", "sentence-transformers")}


def _requirements() -> None:
    for module in ("onnx", "onnxruntime"):
        try:
            __import__(module)
        except ImportError:
            raise ConvragError(f"dense backend 'onnx' needs {module}: pip install 'convrag[onnx]'") from None


def _session(path: Path) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_mem_pattern = False  # every batch has its own shape: a memory plan per shape only grows memory
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = 1  # parallel over runs (one per thread), not inside a run
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _export(model: str, target: Path) -> None:
    """Export, fuse, check and write ``model``'s transformer to ``target/model.onnx`` (atomic rename)."""
    import numpy as np
    import torch
    from onnxruntime.transformers import optimizer
    from sentence_transformers import SentenceTransformer

    from convrag.retrievers.model_record import model_record

    st = SentenceTransformer(model, device="cpu", model_kwargs={"attn_implementation": "eager"})
    hf = st[0].auto_model.eval()
    probe = st.tokenizer(_PROBES, padding=True, truncation=True, return_tensors="pt")
    names = [n for n in _INPUTS if n in probe]

    class Traced(torch.nn.Module):  # positional inputs in a fixed order, the token embeddings out
        def __init__(self) -> None:
            super().__init__()
            self.hf = hf

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.hf(**dict(zip(names, inputs, strict=True)), return_dict=True).last_hidden_state

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        with torch.no_grad(), warnings.catch_warnings():  # the reference first: the export leaves the model changed
            warnings.simplefilter("ignore")  # the tracer's warnings are about shapes the dynamic axes cover
            expected = hf(**probe, return_dict=True).last_hidden_state.numpy()
            axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
            torch.onnx.export(Traced(), tuple(probe[n] for n in names), str(tmp / "raw.onnx"), input_names=names,
                              output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                              dynamic_axes=axes)  # fmt: skip
        config = hf.config
        fused = optimizer.optimize_model(str(tmp / "raw.onnx"), model_type="bert", opt_level=0,
                                         num_heads=config.num_attention_heads,
                                         hidden_size=config.hidden_size)  # fmt: skip
        fused.save_model_to_file(str(tmp / "model.onnx"))
        (tmp / "raw.onnx").unlink()
        got = _session(tmp / "model.onnx").run(None, {n: probe[n].numpy() for n in names})[0]
        mask = probe["attention_mask"].numpy().astype(bool)
        diff = float(np.abs(got - expected)[mask].max())
        if diff > EXPORT_TOLERANCE:
            name = model_record(model)["name"]
            raise ConvragError(f"the ONNX export of {name} does not reproduce its torch outputs (largest "
                               f"difference {diff:.2g} > {EXPORT_TOLERANCE}); use backend=torch")  # fmt: skip
        sha256 = hashlib.sha256((tmp / "model.onnx").read_bytes()).hexdigest()
        meta = {"model_record": model_record(model), "inputs": names, "recipe": EXPORT_VERSION, "opset": 17,
                "fusion": fused.get_fused_operator_statistics(), "probe_max_difference": diff, "sha256": sha256,
                "versions": _versions()}  # fmt: skip
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@lru_cache(maxsize=8)
def onnx_export(model: str) -> Path:
    """The folder of ``model``'s ONNX export (made on first use; see the module docstring)."""
    from convrag.retrievers.embed import model_identity

    _requirements()
    identity = model_identity(model)
    digest = identity.get("files") or hashlib.sha256(identity["name"].encode()).hexdigest()
    target = export_root() / f"{digest[:16]}-v{EXPORT_VERSION}"
    if not (target / "meta.json").is_file():
        _export(model, target)
    return target


def backend_record(model: str, backend: str) -> dict[str, Any]:
    """What results and cache entries record of a backend: its name and runtime, and for ``onnx`` the export's
    file name, SHA-256 and recipe version."""
    if backend == "torch":
        return {"name": "torch", "runtime": f"torch {_versions()['torch']}"}
    meta = json.loads((onnx_export(model) / "meta.json").read_text())
    return {"name": backend, "runtime": f"onnxruntime {meta['versions']['onnxruntime']}", "file": "model.onnx",
            "digest": f"sha256:{meta['sha256']}", "recipe": meta["recipe"],
            "execution": f"unpadded runs of {ROWS_PER_RUN} rows"}  # fmt: skip


def _onnx_module(folder: Path, config: Any) -> Any:
    import numpy as np
    import torch

    class OnnxTransformer(torch.nn.Module):
        """Stands in for a Hugging Face model inside sentence-transformers' Transformer module: the same inputs
        (those the export takes), its ``last_hidden_state`` computed by ONNX Runtime in unpadded runs of
        :data:`ROWS_PER_RUN` rows (see the module docstring); positions past its run's longest row are zeros. A
        batch not padded on the right (a left-padding tokenizer) is run whole, as exported."""

        def __init__(self) -> None:
            super().__init__()
            self.config = config
            self.session = _session(folder / "model.onnx")
            self.inputs = [i.name for i in self.session.get_inputs()]
            self.pool = ThreadPoolExecutor(max(1, torch.get_num_threads()), thread_name_prefix="convrag-onnx")

        def forward(self, **features: Any) -> dict[str, torch.Tensor]:
            feeds = {n: features[n].cpu().numpy() for n in self.inputs}
            mask = features["attention_mask"].cpu().numpy()
            lengths = mask.sum(axis=1)
            if not np.array_equal(mask != 0, np.arange(mask.shape[1]) < lengths[:, None]):  # not padded on the right
                return {"last_hidden_state": torch.from_numpy(self.session.run(None, feeds)[0])}
            order = np.argsort(-lengths, kind="stable")  # similar lengths together: little padding per run
            runs = [order[i : i + ROWS_PER_RUN] for i in range(0, len(order), ROWS_PER_RUN)]

            def run(rows: np.ndarray) -> np.ndarray:
                width = max(1, int(lengths[rows].max()))
                return self.session.run(None, {n: v[rows, :width] for n, v in feeds.items()})[0]

            out = np.zeros((*mask.shape, self.config.hidden_size), dtype=np.float32)
            for rows, hidden in zip(runs, self.pool.map(run, runs), strict=True):
                out[rows, : hidden.shape[1]] = hidden
            return {"last_hidden_state": torch.from_numpy(out)}

    return OnnxTransformer()


@lru_cache(maxsize=4)
def load_onnx_model(model: str, device: str | None = None) -> Any:
    """A ``SentenceTransformer`` of ``model`` on the CPU whose transformer runs the ONNX export (loaded once per
    process); its tokenizer, prompts and later modules are the model's own. ``device``: only the CPU (``None`` or
    ``cpu``; :func:`check_backend` refuses others before this runs)."""
    from convrag.retrievers.encoders import load_model

    folder = onnx_export(model)
    st = load_model.__wrapped__(model, "cpu")
    st[0].model = _onnx_module(folder, st[0].auto_model.config)
    return st
