"""The classifier scorers of the quality filter (``synthesis.curation.quality``): MTR-Suite's two models, loaded lazily.

* ``FineWebEduScorer`` (``fineweb-edu:MODEL``): ``edu_quality`` = ``logits[:, 0]``, kept when > the threshold (1.9).
* ``NvidiaQualityScorer`` (``nvidia-quality:MODEL``): ``naive_quality`` = the argmax class's label, kept when in
  ``keep`` (``("High",)``).

Inputs are truncated to ``max_length`` (512) tokens; a scorer pickles without its weights (datatrove ships steps
to worker processes) and reloads them on first use.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from datatrove.utils.batching import batched

from convrag.core.errors import ConvragError

SUPPORTED_LAYOUTS = (
    "a transformers sequence-classification checkpoint (config.json with model_type), or the "
    "nvidia/quality-classifier-deberta layout (config.json with base_model and id2label; weights model.* and fc.*)"
)


def _load_error(model: str, err: BaseException | str) -> ConvragError:
    reason = err if isinstance(err, str) else f"{type(err).__name__}: {str(err).strip()}"
    reason = " ".join(reason.split())
    if len(reason) > 200:
        reason = reason[:197] + "..."
    return ConvragError(f"quality model {model} could not be loaded (no network? give a local path): {reason}")


def _local_dir(model: str) -> Path | None:
    """The local folder ``model`` names, ``None`` for a Hub name; raises when it looks like a missing path."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.exists() or model.startswith(("/", ".", "~")) or model.count("/") > 1 or "\\" in model:
        raise _load_error(model, f"no such directory {path}")
    return None


def _model_file(model: str, local: Path | None, filename: str) -> Path:
    if local is not None:
        return local / filename
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo_id=model, filename=filename))


def _torch_dtype(dtype: Any) -> Any:
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype):
        raise ConvragError(f"quality dtype {dtype!r} is not a torch dtype (float32, bfloat16, float16)")
    return value


class _Loaded:
    """A loaded classifier: tokenizer, a ``logits(encoding)`` function and the ``id2label`` map."""

    def __init__(self, tokenizer: Any, modules: tuple[Any, ...], custom: bool, id2label: dict[int, str]) -> None:
        self.tokenizer, self.modules, self.custom, self.id2label = tokenizer, modules, custom, id2label

    def logits(self, enc: dict[str, Any]) -> Any:
        if self.custom:  # linear head on the encoder's first-token state (dropout is off in eval mode)
            encoder, head = self.modules
            states = encoder(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
            return head(states[:, 0, :])
        return self.modules[0](**enc).logits


def _load_classifier(model: str, device: str, dtype: Any) -> _Loaded:
    """Load ``model`` in either supported layout (see ``SUPPORTED_LAYOUTS``), in eval mode on ``device``."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    local = _local_dir(model)
    source = str(local) if local is not None else model
    config = json.loads(_model_file(model, local, "config.json").read_text(encoding="utf-8"))
    if "base_model" in config and "id2label" in config:
        weights = _read_weights(model, local)
        if "fc.weight" not in weights or not any(k.startswith("model.") for k in weights):
            raise ConvragError(f"quality model {model}: unrecognised layout (no model.*/fc.* weights); "
                               f"supported: {SUPPORTED_LAYOUTS}")
        encoder = AutoModel.from_config(AutoConfig.from_pretrained(config["base_model"]))
        missing, _ = encoder.load_state_dict(
            {k[len("model."):]: v for k, v in weights.items() if k.startswith("model.")}, strict=False)
        if missing:
            raise ConvragError(f"quality model {model}: encoder weights missing for {', '.join(missing[:3])}")
        head = torch.nn.Linear(weights["fc.weight"].shape[1], weights["fc.weight"].shape[0])
        head.load_state_dict({"weight": weights["fc.weight"], "bias": weights["fc.bias"]})
        modules: tuple[Any, ...] = (encoder, head)
        id2label = {int(k): str(v) for k, v in config["id2label"].items()}
        custom = True
    elif "model_type" in config:
        classifier = AutoModelForSequenceClassification.from_pretrained(source, dtype=dtype)
        modules, custom = (classifier,), False
        id2label = {int(k): str(v) for k, v in classifier.config.id2label.items()}
    else:
        raise ConvragError(f"quality model {model}: unrecognised layout; supported: {SUPPORTED_LAYOUTS}")
    for module in modules:
        module.to(device=device, dtype=dtype).eval()
    return _Loaded(AutoTokenizer.from_pretrained(source), modules, custom, id2label)


def _read_weights(model: str, local: Path | None) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(_model_file(model, local, "model.safetensors")))


class _ClassifierScorer:
    """Batched, truncated, lazily loaded sequence classifier shared by the two model scorers."""

    name = ""

    def __init__(self, model: str, batch_size: int, max_length: int, device: str | None, dtype: Any) -> None:
        if batch_size < 1 or max_length < 1:
            raise ConvragError(f"{self.name}: batch_size and max_length must be >= 1")
        self.model, self.batch_size, self.max_length = model, batch_size, max_length
        self.device, self.dtype = device, dtype
        self._loaded: _Loaded | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_loaded": None}  # ship the spec, not the weights; reload lazily

    def load(self) -> _Loaded:
        """Load the model (once); every load failure is a one-line ``ConvragError``."""
        if self._loaded is None:
            import torch

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            try:
                loaded = _load_classifier(self.model, device, _torch_dtype(self.dtype))
            except ConvragError:
                raise
            except Exception as err:  # hub, file, config, tokenizer and weight errors all become one line
                raise _load_error(self.model, err) from err
            self._check(loaded)
            self._loaded = loaded
        return self._loaded

    def _check(self, loaded: _Loaded) -> None:
        """Validate the loaded model against the scorer's options."""

    def logits(self, texts: Sequence[str]) -> list[list[float]]:
        """Raw float logits per text, computed in batches of ``batch_size`` with inputs cut to ``max_length``."""
        import torch

        loaded = self.load()
        device = next(loaded.modules[0].parameters()).device
        rows: list[list[float]] = []
        with torch.inference_mode():
            for batch in batched(texts, self.batch_size):
                enc = loaded.tokenizer(list(batch), truncation=True, max_length=self.max_length, padding=True,
                                       return_tensors="pt")
                enc = {k: v.to(device) for k, v in enc.items()}
                rows.extend(loaded.logits(enc).float().cpu().tolist())
        return rows


class FineWebEduScorer(_ClassifierScorer):
    """Educational-value regression score ``edu_quality`` = ``logits[:, 0]``; keep when > ``threshold``.

    ``dtype`` defaults to float32 (the MTR-Suite authors ran bf16 on GPU; pass ``"bfloat16"`` to match).
    """

    name = "fineweb-edu"
    column = "edu_quality"

    def __init__(self, model: str, threshold: float = 1.9, batch_size: int = 16, max_length: int = 512,
                 device: str | None = None, dtype: Any = None) -> None:
        super().__init__(model, batch_size, max_length, device, dtype)
        self.threshold = float(threshold)

    def score(self, texts: list[str]) -> list[dict[str, Any]]:
        """``{"edu_quality": float}`` per text."""
        return [{self.column: float(row[0])} for row in self.logits(texts)]

    def verdict(self, scores: dict[str, Any]) -> str | None:
        """Keep when the score is strictly above the threshold; else ``"edu_quality<=THRESHOLD"``."""
        return None if scores[self.column] > self.threshold else f"edu_quality<={self.threshold:g}"


class NvidiaQualityScorer(_ClassifierScorer):
    """3-class quality label ``naive_quality`` = ``id2label[argmax(logits)]``; keep labels in ``keep``.

    The MTR-Suite authors store the class index (0 = High, 1 = Medium, 2 = Low); we store the label string so
    the column reads the same whatever the model's class order. Accepts the standard sequence-classification
    layout and the ``nvidia/quality-classifier-deberta`` layout (see ``SUPPORTED_LAYOUTS``); the latter rebuilds
    its encoder from ``base_model``'s config, so that config must be local or cached offline.
    """

    name = "nvidia-quality"
    column = "naive_quality"

    def __init__(self, model: str, keep: str | Iterable[str] = ("High",), batch_size: int = 16,
                 max_length: int = 512, device: str | None = None, dtype: Any = None) -> None:
        super().__init__(model, batch_size, max_length, device, dtype)
        self.keep = (keep,) if isinstance(keep, str) else tuple(keep)
        if not self.keep:
            raise ConvragError("nvidia-quality option keep must name at least one label (e.g. High)")

    def _check(self, loaded: _Loaded) -> None:
        unknown = [label for label in self.keep if label not in loaded.id2label.values()]
        if unknown:
            raise ConvragError(f"nvidia-quality keep label(s) {', '.join(unknown)} not among the labels of "
                               f"{self.model}: {', '.join(loaded.id2label[i] for i in sorted(loaded.id2label))}")

    def score(self, texts: list[str]) -> list[dict[str, Any]]:
        """``{"naive_quality": label}`` per text (first class wins a tie)."""
        id2label = self.load().id2label
        return [{self.column: id2label[max(range(len(row)), key=row.__getitem__)]} for row in self.logits(texts)]

    def verdict(self, scores: dict[str, Any]) -> str | None:
        """Keep labels in ``keep``; else ``"naive_quality=<label>"``."""
        label = scores[self.column]
        return None if label in self.keep else f"naive_quality={label}"
