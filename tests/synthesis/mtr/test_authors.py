"""MTR-Suite as its authors built it (rangehow/mtr-suite): the discriminability test over the whole cluster, judges
that differ only in their spec options, the embedding model's key in cluster/params.json, the corpus repository
named by the authors' README, and the agents' views and quality rules chosen by ``profile`` (authors / convrag)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from convrag.audit.runner import make_judges, run_audit
from convrag.core.errors import ConvragError
from convrag.judging.items import AuditDoc, AuditItem, AuditSet
from convrag.judging.mtr_eval import MAX_CANDIDATES, Completeness, NegativeSampler, judge_item
from convrag.llm import LLM, RetryPolicy
from convrag.llm.backends.fake import FakeBackend
from convrag.metrics.audit.aggregate import aggregate_scores, judge_names
from convrag.synthesis.curation.curate import Curate
from convrag.synthesis.curation.quality import CHUNK_EXEMPT, HeuristicScorer, profile_options
from convrag.synthesis.engine.pipeline import Estimate, Pipeline, Stage, StageContext, StageReport
from convrag.synthesis.mtr.agents import Doc, Exchange, Questioner, Responder
from convrag.synthesis.mtr.cluster import Cluster
from convrag.synthesis.mtr.converse import PROFILE_DEFAULTS, Converse
from convrag.synthesis.mtr.pipeline import mtr_pipeline
from tests.conftest import DATA
from tests.llm.test_faults import FakeServer

ROOT = Path(__file__).resolve().parents[3]

# ------------------------------------------------------------------ a hand-made cluster of 11 documents
OCTOPUS = [
    ("Octopus", "Octopuses are soft-bodied cephalopods with eight arms and no internal shell. About 300 species "
                "live in every ocean, from tide pools to the abyssal plain."),
    ("Octopus arm", "About two thirds of an octopus's neurons sit in its arms, which can taste and react to touch "
                    "without waiting for the brain."),
    ("Chromatophore", "Pigment sacs in the skin of cephalopods that muscles stretch open or squeeze shut, changing "
                      "the animal's colour in a fraction of a second."),
    ("Octopus life cycle", "Most octopus species live one to two years. Females stop eating while guarding their "
                           "eggs and die soon after the young hatch."),
    ("Giant Pacific octopus", "The largest octopus species; adults commonly weigh around 15 kilograms and have an "
                              "arm span of up to 4 metres."),
    ("Ink sac", "Cephalopods squirt a cloud of dark ink made of melanin and mucus to confuse predators while "
                "they jet away."),
    ("Mimic octopus", "An Indo-Pacific octopus that imitates lionfish, flatfish and sea snakes by changing its "
                      "posture, colour and way of swimming."),
    ("Cephalopod intelligence", "Octopuses solve mazes, unscrew jar lids and carry coconut shells to hide in, "
                                "feats usually seen only in vertebrates."),
    ("Siphon (mollusc)", "A muscular tube through which octopuses push water out of the mantle cavity, moving "
                         "by jet propulsion."),
    ("Blue-ringed octopus", "Small octopuses of the Pacific and Indian Oceans whose saliva holds tetrodotoxin, "
                            "enough to kill an adult human."),
    ("Octopus as food", "Octopus is eaten in many coastal cuisines, from Galician pulpo a feira to Japanese "
                        "takoyaki dumplings."),
]
GOLD = "d3"  # Octopus life cycle


def cluster_set(size: int = 11) -> AuditSet:
    """One MTR-Bench-like turn whose cluster holds ``size`` documents (the hand-made 11, then numbered extras)."""
    docs = {f"d{i}": AuditDoc(f"d{i}", *OCTOPUS[i]) if i < len(OCTOPUS) else
            AuditDoc(f"d{i}", f"Reef survey {i}", f"Divers counted {i * 3} fish species on transect {i} of the "
                     "reef, most of them damselfish and wrasses.") for i in range(size)}
    item = AuditItem("c1:t2", "", "c1", 2, "how long do they usually live?",
                     (("user", "How smart are octopuses compared with other invertebrates?"),
                      ("assistant", "They have around 500 million neurons and solve mazes and puzzles.")),
                     (docs[GOLD],), pool=tuple(docs))
    return AuditSet(Path("cluster"), "mtr-bench", [item], {"": docs}, data=None, profile=None)  # type: ignore[arg-type]


def prompt_of(request: Any) -> str:
    return "\n".join(m["content"] for m in request.messages if m["role"] == "user")


def test_discriminability_shows_the_whole_cluster_of_11() -> None:
    audit_set = cluster_set(11)
    item = audit_set.items[0]
    (req,) = Completeness(NegativeSampler(audit_set), k=7).requests(item, audit_set)
    assert sorted(req.extra["candidates"]) == sorted(item.pool) and len(req.extra["candidates"]) == 11
    assert "pool_left_out" not in req.extra and req.extra["negatives_source"] == "pool"
    text = prompt_of(req)
    assert all(doc.text in text for doc in audit_set.documents[""].values())
    assert "[11]\n" in text and "[12]" not in text and "(1 to 11)" in text
    (pos,) = req.extra["gold_positions"]
    reply = ("The question follows up on octopuses and asks about their lifespan. Several documents describe "
             f"octopus anatomy or behaviour, but only [{pos}] gives how many years they live.\n\n"
             f"**Document ID:** [{pos}]")
    judge = LLM(FakeBackend(script=[reply]), cache=False, retry=RetryPolicy(max_retries=0))
    (verdict,) = judge_item(judge, Completeness(NegativeSampler(audit_set)), item, audit_set)
    assert verdict.score == 1.0 and verdict.extra["picked"] == GOLD
    last = ("Candidates [1] to [10] describe octopus biology in general; the last one seems closest.\n\n"
            "**Document ID:** [11]")
    judge = LLM(FakeBackend(script=[last]), cache=False, retry=RetryPolicy(max_retries=0))
    (verdict,) = judge_item(judge, Completeness(NegativeSampler(audit_set)), item, audit_set)
    assert verdict.extra["picked"] == req.extra["candidates"][10]  # a two-digit number is read
    # our earlier reading, kept as an option: the gold and the first 7 documents, the other 3 counted as left out
    (old,) = Completeness(NegativeSampler(audit_set, whole_pool=False), k=7).requests(item, audit_set)
    assert len(old.extra["candidates"]) == 8 and old.extra["pool_left_out"] == 3


def test_discriminability_cap_counts_what_it_leaves_out() -> None:
    audit_set = cluster_set(20)
    (req,) = Completeness(NegativeSampler(audit_set)).requests(audit_set.items[0], audit_set)
    assert len(req.extra["candidates"]) == MAX_CANDIDATES == 16 and GOLD in req.extra["candidates"]
    assert req.extra["pool_left_out"] == 20 - 16
    reply = '{"rationale": "Only one candidate talks about how long octopuses live.", "document": 16}'
    schema_judge = LLM(FakeBackend(script=[f"Sure! Here is my answer:\n```json\n{reply}\n```"], supports_schema=True),
                       cache=False, retry=RetryPolicy(max_retries=0))
    (verdict,) = judge_item(schema_judge, Completeness(NegativeSampler(audit_set)), audit_set.items[0], audit_set)
    assert verdict.extra["picked"] == req.extra["candidates"][15]


# ------------------------------------------------------------------ judges that differ only after ";"
def test_judge_names_keep_option_variants_apart_and_hide_keys() -> None:
    assert judge_names(["openai:m@http://h/v1", "hf:x"]) == ["openai:m@http://h/v1", "hf:x"]
    assert judge_names(["openai:m@u;max_retries=1", "openai:m@u;timeout=9"]) == [
        "openai:m@u;max_retries=1", "openai:m@u;timeout=9"]
    named = judge_names(["openai:m@u;api_key=sk-AAA", "openai:m@u;api_key=sk-BBB"])
    assert named == ["openai:m@u;api_key=***#1", "openai:m@u;api_key=***#2"] and "sk-" not in "".join(named)


def test_two_judges_differing_only_in_options_stay_two_in_the_aggregation(tmp_path: Path) -> None:
    server = FakeServer()
    server.responder = lambda body: ("Here is my assessment.\n```json\n{\"rationale\": \"The document says most "
                                     "octopuses live one to two years, which answers the question.\", "
                                     "\"rating\": 5}\n```")
    try:
        specs = [f"openai:test-model@{server.url};max_retries=1", f"openai:test-model@{server.url};timeout=9"]
        judges = make_judges(specs, cache=tmp_path / "cache")
        run = run_audit(cluster_set(11), judges, ["query_evidence"], progress=False)
    finally:
        server.close()
    assert sorted({v.judge for v in run.verdicts}) == sorted(judge_names(specs)) and len(run.verdicts) == 2
    agg = aggregate_scores([v.judge for v in run.verdicts], [v.dimension for v in run.verdicts],
                           [v.score for v in run.verdicts])
    assert len(agg["per_judge"]) == 2 and agg["overall"]["query_evidence"] == {
        "mean": 5.0, "judges": 2, "judges_without_scores": [], "n": 2, "failed": 0}


def test_the_audit_metric_takes_the_same_two_judges() -> None:
    from convrag.metrics.audit.judging import judges_of

    specs = ["openai:m@http://127.0.0.1:9/v1;max_retries=1", "openai:m@http://127.0.0.1:9/v1;timeout=9"]
    assert [j.spec for j in judges_of(specs)] == specs  # was: "two judges share a name"


# ------------------------------------------------------------------ cluster/params.json
class _Toy(Stage):
    name = "cluster"

    def __init__(self, params: dict[str, Any], runs: list[int]) -> None:
        self._params, self.runs = params, runs

    def params(self) -> dict[str, Any]:
        return self._params

    def estimate(self, ctx: StageContext) -> Estimate:
        return Estimate()

    def run(self, ctx: StageContext) -> StageReport:
        self.runs.append(1)
        return StageReport(self.name, records_in=1, records_out=1)


class _Renamed(_Toy):
    def legacy_params(self) -> dict[str, Any]:
        return {"model" if k == "embedding_model" else k: v for k, v in self._params.items()}


def test_cluster_params_name_the_embedding_model_and_old_files_still_read(tmp_path: Path) -> None:
    params = Cluster().params()
    assert "model" not in params and params["embedding_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert Cluster(model="/models/gte-base").params()["embedding_model"] == "/models/gte-base"
    # what versions before the rename wrote: key "model", the shipped model under its folder's name
    assert Cluster().legacy_params() == {**{k: v for k, v in params.items() if k != "embedding_model"},
                                         "model": "model"}
    assert Cluster(model="/models/gte-base").legacy_params()["model"] == "/models/gte-base"
    runs: list[int] = []
    Pipeline("mtr", [_Toy({"model": "gte-base", "k": 100}, runs)]).run(tmp_path, progress=False)  # an older run
    assert json.loads((tmp_path / "cluster" / "params.json").read_text())["params"]["model"] == "gte-base"
    # today's key reads the old file: same parameters, same fingerprint, so the stage is kept, not redone
    (report,) = Pipeline("mtr", [_Renamed({"embedding_model": "gte-base", "k": 100}, runs)]).run(
        tmp_path, progress=False)
    assert report.resumed and runs == [1]
    with pytest.raises(ConvragError, match=r"other parameters \(model: 'gte-base' -> 'bge-small'\)"):
        Pipeline("mtr", [_Renamed({"embedding_model": "bge-small", "k": 100}, runs)]).run(tmp_path, progress=False)


# ------------------------------------------------------------------ the corpus repository
def test_builder_and_card_name_the_corpus_repository_from_the_authors_readme() -> None:
    from convrag.builders.mtr_bench_source import CORPUS_REPO, RELEASES

    assert CORPUS_REPO == "OkayestProgrammer/MTR-DOCUMENT"
    assert all(r["corpus"][0] == CORPUS_REPO for r in RELEASES.values())
    for path in ("builders/mtr_bench.py", "builders/mtr_bench_source.py", "dataset_cards/mtr-bench.md"):
        text = (ROOT / path).read_text(encoding="utf-8")
        assert "assumption" not in text and "authors' README" in text, path


# ------------------------------------------------------------------ what the agents see
LONG_DOC = Doc("d1", "Giant Pacific octopus", " ".join(
    f"Survey {i}: {OCTOPUS[4][1]} Divers in the survey area logged its dens under boulders." for i in range(12)))
ANSWER = ("Most octopuses live only one to two years. The giant Pacific octopus is at the long end and can reach "
          "four or five, while small tropical species may live barely six months. For nearly every species the "
          "end comes right after breeding: a female stops eating while she guards and cleans her eggs for weeks "
          "or months, and she dies soon after the young hatch, so a long life is rare in this group.")


def test_converse_profiles_choose_the_views_and_a_given_option_wins() -> None:
    authors, convrag = Converse(), Converse(profile="convrag")
    assert authors.profile == "authors"
    assert authors.questioner_options == {"doc_chars": None, "history_answer_chars": None}
    assert authors.responder_options == {"answer_words": None, "max_tokens": 512, "history_answer_chars": None}
    assert convrag.questioner_options == {"doc_chars": 800, "history_answer_chars": 240}
    assert convrag.responder_options == {"answer_words": 150, "max_tokens": 512, "history_answer_chars": 600}
    assert Converse(profile="convrag", questioner_doc_chars=1200).questioner_options["doc_chars"] == 1200
    assert Converse(answer_words=90).responder_options["answer_words"] == 90
    # params.json holds the resolved views, not the profile: a run made before profiles existed resumes under convrag
    old = {"questioner_doc_chars": 800, "questioner_history_answer_chars": 240, "responder_answer_words": 150,
           "responder_max_tokens": 512, "responder_history_answer_chars": 600}
    assert old.items() <= convrag.params().items() and "profile" not in convrag.params()
    assert authors.params()["questioner_doc_chars"] is None and authors.params()["responder_answer_words"] is None
    with pytest.raises(ConvragError, match="profile must be one of authors, convrag, got 'paper'"):
        Converse(profile="paper")


def test_profile_option_reaches_curation_and_conversations_through_option_checks(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "a", "title": "Octopus", "text": OCTOPUS[0][1]}) + "\n", encoding="utf-8")
    pipeline = mtr_pipeline(str(corpus), options={"profile": "convrag"})
    by_name = {s.name: s for s in pipeline.stages}
    assert by_name["curate"].profile == by_name["converse"].profile == "convrag"  # type: ignore[attr-defined]
    with pytest.raises(ConvragError, match="--option profile=3: profile takes"):
        mtr_pipeline(str(corpus), options={"profile": 3})
    with pytest.raises(ConvragError, match="profile must be one of"):
        mtr_pipeline(str(corpus), options={"profile": "paper"})


def test_questioner_and_responder_see_whole_texts_under_the_authors_profile() -> None:
    history = [Exchange("How smart are octopuses?", ANSWER)]
    drawn = [LONG_DOC, Doc("d2", *OCTOPUS[5])]
    whole = prompt_text(Questioner(None).messages(drawn, history, "0:c1:2"))
    assert LONG_DOC.text in whole and ANSWER in whole
    cut = PROFILE_DEFAULTS["convrag"]
    short = prompt_text(Questioner(None, doc_chars=cut["questioner_doc_chars"], history_answer_chars=cut[
        "questioner_history_chars"]).messages(drawn, history, "0:c1:2"))
    assert LONG_DOC.text not in short and ANSWER not in short and ANSWER[:200] in short
    no_target = prompt_text(Responder(None).messages(history, "how long do they live?", LONG_DOC))
    assert "words" not in no_target.split("How to answer:")[1].split("\n- ")[1] and ANSWER in no_target
    target = prompt_text(Responder(None, answer_words=150, history_answer_chars=600).messages(
        history, "how long do they live?", LONG_DOC))
    assert "answer of about 150 words" in " ".join(target.split())


def prompt_text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def test_authors_view_fits_the_papers_budget_at_its_sizes() -> None:
    """Questioner prompt tokens per turn (the embedded model's tokenizer) over an 8-turn conversation at the paper's
    sizes: real MTRAG passages from all four domains joined into chunks of ~1,690 characters (the mean curated
    chunk of MTRAG's cited passages), real MTRAG answers of 80-95 tokens (the paper: 87.5). The paper's cost
    estimate assumes about 3,000 input tokens per turn: the authors' whole texts land there, the earlier cuts far
    below it."""
    from llama_cpp import Llama

    from convrag.llm.backends.llamacpp import default_gguf_path

    vocab = Llama(str(default_gguf_path()), vocab_only=True, verbose=False)

    def tokens(messages: list[dict[str, str]]) -> int:
        return sum(len(vocab.tokenize(m["content"].encode("utf-8"), add_bos=False)) for m in messages)

    conversations = json.loads((DATA / "mtrag" / "mtrag-human" / "conversations" / "conversations.json").read_text())
    messages = [m for c in conversations for m in c["messages"]]
    questions = [m["text"] for m in messages if m["speaker"] == "user"]
    answers = [m["text"] for m in messages if m["speaker"] == "agent" and 80 <= tokens([{"content": m["text"]}]) <= 95]
    passages = [x["text"] for m in messages for x in m.get("contexts") or [] if len(x["text"]) > 900]
    step = len(passages) // 40
    docs = [Doc(f"d{i}", "A title of a few words", f"{passages[i * step]} {passages[i * step + 1]}"[:1690])
            for i in range(40)]
    cut = PROFILE_DEFAULTS["convrag"]
    whole, short = Questioner(None), Questioner(None, doc_chars=cut["questioner_doc_chars"],
                                                history_answer_chars=cut["questioner_history_chars"])
    budget: dict[str, list[int]] = {"authors": [], "convrag": []}
    for t in range(8):
        history = [Exchange(questions[i], answers[i]) for i in range(t)]
        drawn = docs[5 * t:5 * t + 5]
        budget["authors"].append(tokens(whole.messages(drawn, history, f"0:c1:{t + 1}")))
        budget["convrag"].append(tokens(short.messages(drawn, history, f"0:c1:{t + 1}")))
    print(f"\nQuestioner prompt tokens per turn: {budget}")
    assert 2500 <= statistics.mean(budget["authors"]) <= 3500 and max(budget["authors"]) < 4000
    assert statistics.mean(budget["convrag"]) < 2000


# ------------------------------------------------------------------ the heuristic quality filter
CUT_PROSE = ("Sourdough bread rises because a starter holds wild yeasts and lactic acid bacteria that live on flour "
             "and in the kitchen. When the starter is mixed into dough, the yeasts ferment the sugars released from "
             "the starch and give off carbon dioxide, which the gluten network traps as small bubbles. The bacteria "
             "make lactic and acetic acids at the same time, which is where the sour taste comes from and why a "
             "long, cool fermentation gives a tangier loaf than a short warm one. Bakers keep a starter alive by "
             "feeding it fresh flour and water every day or two, and many of them discard part of it before each "
             "feeding so that")  # a chunk the splitter cut mid-sentence
FIGURES = ("In 2019 the county had 1,234,567 residents (up 2.3% from 2010; 48.9% male, 51.1% female), with 412,000 "
           "households, 3.1 persons per household, and a median age of 37.4 years. Of the 1,234,567, some 61.2% "
           "(755,555) were born in-state, 18.4% (227,160) in another state, and 20.4% (251,852) abroad; the median "
           "household income was $71,420 ($54,310 in 2010), and 9.8% (120,987) lived below the poverty line, down "
           "from 12.1% (143,000) in 2010 and 14.6% (170,000) in 2000, according to the census bureau's estimates "
           "for the years 2000, 2010 and 2019.")
MENU = ("Small Claims E-Filing\n\nLocations\nFAQ\nADA\nContact\n\nToggle navigation\n\nHome\nOnline Services\n"
        "For Jurors\nFor Parties\nFor Attorneys\nFor the Media\nFor Vendors\nSelf-Help Centre\nForms and Filing\n"
        "Pay a Fine\nCourt Calendars\nJury Duty\nCareers\nNews\nTraffic\nFamily Law\nProbate\nCivil\nCriminal\n"
        "Appeals\nInterpreters\nAccessibility\nPrivacy Policy\nTerms of Use\nSite Map\nContact Us")


def test_authors_profile_keeps_chunks_the_page_layout_rules_misread() -> None:
    assert profile_options("heuristic", None) == CHUNK_EXEMPT
    assert profile_options("heuristic", None, "convrag") == {}
    assert profile_options("heuristic", {"gopher": True}) == {"gopher": True, "fineweb": CHUNK_EXEMPT["fineweb"]}
    assert profile_options("heuristic", {"fineweb": {"short_line_thr": 0.5}})["fineweb"] == {
        "line_punct_thr": 0.0, "short_line_thr": 0.5}
    assert profile_options("fineweb-edu:/models/edu", {"threshold": 2.5}) == {"threshold": 2.5}
    authors = HeuristicScorer(**profile_options("heuristic", None))
    convrag = HeuristicScorer(**profile_options("heuristic", None, "convrag"))
    assert [r["heuristic_quality"] for r in convrag.score([CUT_PROSE, FIGURES, MENU])] == [
        "line_punct_ratio", "gopher_below_alpha_threshold", "line_punct_ratio"]
    assert [r["heuristic_quality"] for r in authors.score([CUT_PROSE, FIGURES, MENU])] == [
        "pass", "pass", "short_line_ratio"]
    # the resolved rule set is what curate/params.json records, so the two profiles never share a folder
    assert Curate("corpus.jsonl").params()["quality_options"] == CHUNK_EXEMPT
    assert Curate("corpus.jsonl", profile="convrag").params()["quality_options"] == {}
    assert Curate("corpus.jsonl", quality_options={"gopher": True, "fineweb": True}).params()["quality_options"] == {
        "gopher": True, "fineweb": True}
