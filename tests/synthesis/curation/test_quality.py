"""Quality filtering: datatrove heuristics, tiny offline classifiers with known outputs, the datatrove step."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from pathlib import Path

import pytest
import torch
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers import JsonlWriter
from safetensors.torch import save_file
from tokenizers import Tokenizer, pre_tokenizers, processors, trainers
from tokenizers import models as tok_models
from transformers import BertConfig, BertForSequenceClassification, BertModel, PreTrainedTokenizerFast

from convrag.core.errors import ConvragError
from convrag.synthesis.curation.quality import (
    CombinedScorer,
    FineWebEduScorer,
    HeuristicScorer,
    NvidiaQualityScorer,
    QualityFilter,
    QualityScorer,
    scorer_from_spec,
)

DANUBE = (
    "The Danube is the second-longest river in Europe, after the Volga. It rises in the Black Forest of "
    "southwestern Germany and flows for about 2,850 kilometres to the Black Sea, passing through or along the "
    "borders of ten countries, more than any other river in the world. For centuries the river marked the "
    "northern frontier of the Roman Empire, and a chain of forts and towns grew up along its southern bank. "
    "Today it is an important waterway for trade: ocean-going ships can sail upstream as far as the Romanian "
    "port of Braila, and river barges reach Kelheim in Bavaria, where a canal links the Danube to the Main and "
    "the Rhine. Four national capitals, Vienna, Bratislava, Budapest and Belgrade, stand on its banks."
)
BASALT = (
    "Basalt is a fine-grained volcanic rock that forms when lava rich in iron and magnesium cools quickly at or "
    "near the surface of a planet. It is the most common rock in the oceanic crust of the Earth, and it also "
    "covers large parts of the Moon, where the dark plains seen from the ground are ancient basalt flows. "
    "Because the lava has a low viscosity, it can spread over great distances before it solidifies, building "
    "broad shield volcanoes such as those of Hawaii and Iceland. As thick flows cool and contract they often "
    "crack into tall hexagonal columns, a pattern that can be seen at the Giant's Causeway in Northern Ireland."
)
MENU = "\n".join([
    "Home", "About the company and its history", "Products and services for customers", "News and press releases",
    "Contact us by phone or email", "Careers at our offices in the city", "Log in to your account",
    "Register for a new account today", "Shopping cart and checkout", "Frequently asked questions and answers",
    "Privacy policy and terms of use", "Follow us on social media", "Subscribe to the newsletter for offers",
    "Copyright 2024 all rights reserved",
])
SHORT = "Click here to subscribe."
SYMBOLS = "#### **** #### !!!! ---- ==== #### **** #### " * 20
WORDS = ["the", "river", "flows", "through", "a", "wide", "valley", "towards", "the", "sea", "and", "the",
         "old", "town", "stands", "on", "its", "bank"]
MAX_POS = 512  # tiny models have 512 positions, the default max_length: a longer input must be cut


def _tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(tok_models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS), DANUBE, BASALT],
                            trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]")


def _bert_config(vocab: int, **extra) -> BertConfig:
    return BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=MAX_POS, **extra)


def _classifier(path: Path, bias: list[float] | None, id2label: dict[int, str] | None = None) -> str:
    """Tiny BERT classifier saved at ``path``; zero head weight + ``bias`` fixes every output, None = random."""
    tok = _tokenizer()
    n = len(bias) if bias is not None else 1
    extra = {"id2label": id2label, "label2id": {v: k for k, v in id2label.items()}} if id2label else {}
    torch.manual_seed(0)
    model = BertForSequenceClassification(_bert_config(tok.vocab_size, num_labels=len(id2label or {0: 0}), **extra))
    if bias is not None:
        assert model.classifier.out_features == n
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.copy_(torch.tensor(bias))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


LABELS = {0: "High", 1: "Medium", 2: "Low"}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("quality_models")
    out = {
        "edu_2.5": _classifier(root / "edu25", [2.5]),
        "edu_2.0": _classifier(root / "edu20", [2.0]),
        "edu_1.0": _classifier(root / "edu10", [1.0]),
        "edu_random": _classifier(root / "edurand", None),
        "nv_high": _classifier(root / "nvhigh", [1.0, 0.0, 0.0], LABELS),
        "nv_medium": _classifier(root / "nvmed", [0.0, 1.0, 0.0], LABELS),
    }
    out["nv_custom"] = _custom_layout(root)
    return out


def _custom_layout(root: Path) -> str:
    """The nvidia/quality-classifier-deberta layout in miniature: base_model config + model.*/fc.* weights."""
    tok = _tokenizer()
    base_dir, model_dir = root / "base", root / "nvcustom"
    cfg = _bert_config(tok.vocab_size)
    cfg.save_pretrained(base_dir)
    torch.manual_seed(1)
    encoder = BertModel(cfg)  # what AutoModel builds from the base config
    weights = {f"model.{k}": v.contiguous() for k, v in encoder.state_dict().items()}
    weights["fc.weight"] = torch.zeros(3, 32)
    weights["fc.bias"] = torch.tensor([0.0, 0.0, 3.0])  # argmax 2 = Low
    model_dir.mkdir()
    save_file(weights, str(model_dir / "model.safetensors"))
    (model_dir / "config.json").write_text(json.dumps({
        "base_model": str(base_dir), "fc_dropout": 0.2,
        "id2label": {str(k): v for k, v in LABELS.items()}, "label2id": {v: k for k, v in LABELS.items()},
    }))
    tok.save_pretrained(model_dir)
    return str(model_dir)


def _sentences(n: int) -> list[str]:
    return [" ".join(WORDS[i % 7:] + WORDS[: 1 + i]) for i in range(n)]


# --- heuristic -------------------------------------------------------------------------------------------------


def test_heuristic_keeps_prose_and_names_datatrove_rules() -> None:
    scorer = HeuristicScorer()
    rows = scorer.score([DANUBE, BASALT, MENU, SHORT, SYMBOLS, " \n "])
    assert [r["heuristic_quality"] for r in rows] == [
        "pass", "pass", "line_punct_ratio", "gopher_short_doc", "gopher_short_doc", "empty"]
    assert [scorer.verdict(r) for r in rows] == [
        None, None, "heuristic:line_punct_ratio", "heuristic:gopher_short_doc", "heuristic:gopher_short_doc",
        "heuristic:empty"]
    assert isinstance(scorer, QualityScorer)


def test_heuristic_filters_can_be_disabled_or_tuned() -> None:
    assert HeuristicScorer(gopher=False).score([SHORT])[0]["heuristic_quality"] == "short_line_ratio"
    assert HeuristicScorer(gopher={"min_doc_words": 3}).score([SHORT])[0]["heuristic_quality"] == (
        "gopher_enough_stop_words")
    relaxed = HeuristicScorer(gopher={"min_doc_words": 3, "min_stop_words": None}, fineweb=False)
    assert relaxed.score([SHORT]) == [{"heuristic_quality": "pass"}]
    with pytest.raises(ConvragError, match="heuristic option gopher"):
        HeuristicScorer(gopher={"min_words": 3})


# --- classifiers -----------------------------------------------------------------------------------------------


def test_fineweb_edu_scores_and_strict_threshold(models: dict[str, str]) -> None:
    high = FineWebEduScorer(models["edu_2.5"])
    rows = high.score([DANUBE, "", SHORT])
    assert rows == [{"edu_quality": 2.5}] * 3
    assert high.verdict(rows[0]) is None
    low = FineWebEduScorer(models["edu_1.0"])
    assert low.score([DANUBE]) == [{"edu_quality": 1.0}]
    assert low.verdict({"edu_quality": 1.0}) == "edu_quality<=1.9"
    assert low.verdict({"edu_quality": 1.9}) == "edu_quality<=1.9"  # strictly greater keeps
    assert low.verdict({"edu_quality": 1.9000001}) is None
    edge = FineWebEduScorer(models["edu_2.0"], threshold=2.0)  # score exactly at the threshold is dropped
    assert edge.verdict(edge.score([BASALT])[0]) == "edu_quality<=2"
    assert FineWebEduScorer(models["edu_2.0"], threshold=1.99).verdict({"edu_quality": 2.0}) is None


def test_truncation_and_batching_do_not_change_scores(models: dict[str, str]) -> None:
    long_text = " ".join(WORDS * 100)  # 1,900 word tokens, far past the 64 positions
    prefix = " ".join((WORDS * 100)[: MAX_POS - 2])  # what survives truncation with [CLS] and [SEP]
    scorer = FineWebEduScorer(models["edu_random"], max_length=MAX_POS)
    got_long, got_prefix = (r["edu_quality"] for r in scorer.score([long_text, prefix]))
    assert got_long == pytest.approx(got_prefix, abs=1e-5)
    texts = _sentences(9) + [long_text]
    one = [r["edu_quality"] for r in FineWebEduScorer(models["edu_random"], batch_size=1, max_length=MAX_POS)
           .score(texts)]
    seven = [r["edu_quality"] for r in FineWebEduScorer(models["edu_random"], batch_size=7, max_length=MAX_POS)
             .score(texts)]
    assert one == pytest.approx(seven, abs=1e-5)
    assert len(set(round(v, 6) for v in one)) > 1  # the random head does tell texts apart


def test_nvidia_quality_labels_and_keep(models: dict[str, str]) -> None:
    high, medium = NvidiaQualityScorer(models["nv_high"]), NvidiaQualityScorer(models["nv_medium"])
    assert high.score([DANUBE, SHORT]) == [{"naive_quality": "High"}] * 2
    assert high.verdict({"naive_quality": "High"}) is None
    rows = medium.score([DANUBE])
    assert rows == [{"naive_quality": "Medium"}]
    assert medium.verdict(rows[0]) == "naive_quality=Medium"
    assert NvidiaQualityScorer(models["nv_medium"], keep=("High", "Medium")).verdict(rows[0]) is None
    top = NvidiaQualityScorer(models["nv_high"], keep="Top")
    for _ in range(2):  # the check holds on every call, not only on the first load
        with pytest.raises(ConvragError, match="keep label.*Top.*High, Medium, Low"):
            top.score([DANUBE])


def test_nvidia_custom_layout(models: dict[str, str]) -> None:
    scorer = NvidiaQualityScorer(models["nv_custom"], max_length=MAX_POS)
    rows = scorer.score([DANUBE, " ".join(WORDS * 50)])
    assert rows == [{"naive_quality": "Low"}] * 2
    assert scorer.verdict(rows[0]) == "naive_quality=Low"
    loaded = scorer.load()
    assert loaded.custom and loaded.id2label == LABELS


def test_custom_layout_head_reads_the_first_token(models: dict[str, str], tmp_path: Path) -> None:
    """A head that copies hidden unit 0 of the first token: logits must equal the encoder's [CLS] state."""
    src = Path(models["nv_custom"])
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((src / name).read_bytes())
    from safetensors.torch import load_file

    weights = load_file(str(src / "model.safetensors"))
    weights["fc.weight"] = torch.zeros(3, 32)
    weights["fc.weight"][1, 0] = 1.0
    weights["fc.bias"] = torch.zeros(3)
    save_file(weights, str(tmp_path / "model.safetensors"))
    scorer = NvidiaQualityScorer(str(tmp_path), max_length=MAX_POS)
    [[_, got, _]] = scorer.logits([DANUBE])
    loaded = scorer.load()
    enc = loaded.tokenizer([DANUBE], truncation=True, max_length=MAX_POS, return_tensors="pt")
    with torch.inference_mode():
        cls_state = loaded.modules[0](input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
    assert got == pytest.approx(float(cls_state.last_hidden_state[0, 0, 0]), abs=1e-6)
    del weights["fc.weight"], weights["fc.bias"]  # base_model config but no head: not a layout we know
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(ConvragError, match="unrecognised layout \\(no model.\\*/fc.\\* weights\\)"):
        NvidiaQualityScorer(str(tmp_path)).score([DANUBE])


def test_scorers_pickle_without_weights(models: dict[str, str]) -> None:
    scorer = FineWebEduScorer(models["edu_random"], max_length=MAX_POS)
    before = scorer.score(_sentences(3))
    blob = pickle.dumps(scorer)
    assert len(blob) < 2000
    assert pickle.loads(blob).score(_sentences(3)) == before


def test_missing_models_are_one_line_errors(tmp_path: Path) -> None:
    for model in (str(tmp_path / "nope"), "convrag-test/no-such-quality-model"):
        with pytest.raises(ConvragError) as info:
            FineWebEduScorer(model).score([DANUBE])
        message = str(info.value)
        assert message.startswith(f"quality model {model} could not be loaded (no network? give a local path): ")
        assert "\n" not in message
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text('{"hidden": 3}')
    with pytest.raises(ConvragError, match="unrecognised layout; supported: a transformers"):
        NvidiaQualityScorer(str(tmp_path / "odd")).score([DANUBE])


# --- specs and combination -------------------------------------------------------------------------------------


def test_scorer_from_spec_forms(models: dict[str, str]) -> None:
    assert isinstance(scorer_from_spec(), HeuristicScorer)
    assert isinstance(scorer_from_spec(""), HeuristicScorer)
    assert len(scorer_from_spec("heuristic", {"fineweb": False}).filters) == 1
    edu = scorer_from_spec(f"fineweb-edu:{models['edu_2.5']}", {"threshold": 2.6, "batch_size": 4})
    assert isinstance(edu, FineWebEduScorer) and (edu.threshold, edu.batch_size) == (2.6, 4)
    nv = scorer_from_spec(f"nvidia-quality:{models['nv_high']}", {"keep": "Medium"})
    assert isinstance(nv, NvidiaQualityScorer) and nv.keep == ("Medium",)
    both = scorer_from_spec(f"heuristic, fineweb-edu:{models['edu_2.5']},nvidia-quality:{models['nv_high']}",
                            {"threshold": 2.0, "keep": ["High"]})
    assert isinstance(both, CombinedScorer) and both.name == "heuristic,fineweb-edu,nvidia-quality"


@pytest.mark.parametrize(("spec", "options", "pattern"), [
    ("perplexity", None, "unknown quality scorer 'perplexity'; use heuristic, fineweb-edu:PATH_OR_NAME"),
    ("fineweb-edu", None, "unknown quality scorer 'fineweb-edu'"),
    ("heuristic:x", None, "unknown quality scorer"),
    ("heuristic,heuristic", None, "names a scorer twice"),
    ("heuristic", {"threshold": 2.0}, "option\\(s\\) threshold not used"),
    ("fineweb-edu:m", {"dtype": "float31"}, None),
])
def test_scorer_from_spec_errors(spec: str, options: dict | None, pattern: str | None) -> None:
    if pattern is None:  # a bad dtype surfaces when the model is first used
        with pytest.raises(ConvragError, match="dtype 'float31' is not a torch dtype"):
            scorer_from_spec(spec, options).score(["x"])
        return
    with pytest.raises(ConvragError, match=pattern):
        scorer_from_spec(spec, options)


def test_combined_scorer_is_the_authors_final_filter(models: dict[str, str]) -> None:
    def combo(edu: str, nv: str) -> QualityScorer:
        return scorer_from_spec(f"fineweb-edu:{models[edu]},nvidia-quality:{models[nv]}")

    keep = combo("edu_2.5", "nv_high")
    rows = keep.score([DANUBE])
    assert rows == [{"edu_quality": 2.5, "naive_quality": "High"}]
    assert keep.verdict(rows[0]) is None
    medium = combo("edu_2.5", "nv_medium")
    assert medium.verdict(medium.score([DANUBE])[0]) == "naive_quality=Medium"
    both_bad = combo("edu_1.0", "nv_medium")
    assert both_bad.verdict(both_bad.score([DANUBE])[0]) == "edu_quality<=1.9"  # first scorer's reason wins


# --- datatrove step --------------------------------------------------------------------------------------------


def _write_inputs(folder: Path, texts: list[str]) -> None:
    folder.mkdir()
    for part in range(2):  # one file per task
        with (folder / f"part{part}.jsonl").open("w", encoding="utf-8") as fh:
            for i in range(part, len(texts), 2):
                fh.write(json.dumps({"id": f"d{i}", "text": texts[i]}) + "\n")


def _read_jsonl(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.open(encoding="utf-8")]


def _stat(stats: dict, key: str) -> int:
    value = stats.get(key, 0)
    return value["total"] if isinstance(value, dict) else value


def _run_pipeline(tmp_path: Path, texts: list[str], scorer: QualityScorer, workers: int) -> tuple[dict, list, list]:
    _write_inputs(tmp_path / "in", texts)
    LocalPipelineExecutor(
        pipeline=[
            JsonlReader(str(tmp_path / "in")),
            QualityFilter(scorer, batch_size=3,
                          exclusion_writer=JsonlWriter(str(tmp_path / "dropped"), compression=None)),
            JsonlWriter(str(tmp_path / "out"), compression=None),
        ],
        tasks=2, workers=workers, logging_dir=str(tmp_path / "logs"),
    ).run()
    stats = json.loads((tmp_path / "logs" / "stats.json").read_text(encoding="utf-8"))
    step = next(s for s in stats if s["name"] == "🔻 - FILTER: quality filter")["stats"]
    return step, _read_jsonl(tmp_path / "out"), _read_jsonl(tmp_path / "dropped")


def test_quality_filter_under_local_executor_with_two_workers(tmp_path: Path) -> None:
    texts = [DANUBE, MENU, BASALT, SHORT, SYMBOLS, DANUBE.replace("Danube", "Rhine"), MENU + "\nSitemap", SHORT]
    scorer = HeuristicScorer()
    reasons = Counter(r for r in map(scorer.verdict, scorer.score(texts)) if r is not None)
    assert reasons == {"heuristic:line_punct_ratio": 2, "heuristic:gopher_short_doc": 3}
    step, kept, dropped = _run_pipeline(tmp_path, texts, scorer, workers=2)
    assert {k[len("dropped:"):]: _stat(step, k) for k in step if k.startswith("dropped:")} == reasons
    assert (_stat(step, "total"), _stat(step, "kept"), _stat(step, "dropped")) == (8, 3, 5)
    assert sorted(doc["id"] for doc in kept) == ["d0", "d2", "d5"]
    assert all(doc["metadata"]["heuristic_quality"] == "pass" for doc in kept)
    assert Counter(doc["metadata"]["filter_reason"] for doc in dropped) == reasons
    assert all(doc["metadata"]["filter_reason"] == f"heuristic:{doc['metadata']['heuristic_quality']}"
               for doc in dropped)


def test_quality_filter_with_classifiers_in_one_worker(tmp_path: Path, models: dict[str, str]) -> None:
    texts = _sentences(7)
    probe = sorted(r["edu_quality"] for r in FineWebEduScorer(models["edu_random"], max_length=MAX_POS).score(texts))
    scorer = scorer_from_spec(f"fineweb-edu:{models['edu_random']},nvidia-quality:{models['nv_high']}",
                              {"max_length": MAX_POS, "threshold": probe[3]})
    expected = scorer.score(texts)  # loads the models: the executor must still copy the step cheaply
    reasons = Counter(r for r in map(scorer.verdict, expected) if r is not None)
    assert reasons == {f"edu_quality<={probe[3]:g}": 4}
    step, kept, dropped = _run_pipeline(tmp_path, texts, scorer, workers=1)
    by_id = {doc["id"]: doc["metadata"] for doc in kept + dropped}
    for i, cols in enumerate(expected):
        assert by_id[f"d{i}"]["edu_quality"] == pytest.approx(cols["edu_quality"], abs=1e-5)
        assert by_id[f"d{i}"]["naive_quality"] == "High"
    assert {k[len("dropped:"):]: _stat(step, k) for k in step if k.startswith("dropped:")} == reasons
    assert (len(kept), len(dropped)) == (3, 4)
