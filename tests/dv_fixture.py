"""The RECOR paper's appendix C example as a D&V input item (texts written for these tests; the query is the
paper's source query). Stage tests script replies against it: six aspects, the disposable-soma aspect without a
verified fact, the turn-4 document scores 7.15 / 5.40 / 3.65."""

from __future__ import annotations

from typing import Any

QUERY = "Why does evolution not make our life longer? Wouldn't evolution favour a long life?"
REASONING = ("The question asks why natural selection does not push lifespans up. Useful documents explain the "
             "evolutionary theories of ageing: mutation accumulation, antagonistic pleiotropy and the trade-offs "
             "of life history.")
ANSWER = (
    "Natural selection mostly acts on traits that matter before and during the reproductive years; a mutation "
    "whose effects only show after reproduction is under weak selection, because its carriers have already "
    "passed on their genes. Over many generations, harmful alleles that act late in life therefore pile up in a "
    "population: this is mutation accumulation. Huntington's disease is the textbook case: symptoms usually "
    "begin between the ages of 30 and 50, and carriers have often had children before they fall ill. Some "
    "alleles even help early in life and harm later, which George Williams called antagonistic pleiotropy in "
    "1957; selection keeps them because the early benefit outweighs the late cost. The disposable soma theory "
    "adds that an organism splits limited resources between reproduction and bodily repair, so that investing "
    "heavily in repair buys a longer life. Finally, where the environment kills many individuals early, few "
    "would live long enough to profit from slow ageing, so selection favours reproducing early."
)
DOCUMENTS: list[dict[str, str]] = [
    {"doc_id": "Aging_theory_12.txt", "text": (
        "Evolutionary theories of ageing start from the observation that the force of natural selection weakens "
        "with age. Genes that act before reproduction are filtered strongly, while genes whose effects appear "
        "only late in life are barely seen by selection. Williams (1957) proposed antagonistic pleiotropy: an "
        "allele with a benefit early in life and a cost late in life can spread, because the early benefit "
        "counts for more.")},
    {"doc_id": "Evolution_38.txt", "text": (
        "Medawar argued that mutations with late-acting harmful effects accumulate over generations, since "
        "selection against them is weak once their carriers have reproduced. Populations exposed to high "
        "extrinsic mortality, from predators or disease, evolve earlier reproduction, because few individuals "
        "survive long enough to benefit from a longer life.")},
    {"doc_id": "Genetics_91.txt", "text": (
        "Huntington's disease is caused by an expanded CAG repeat in the HTT gene. Symptoms usually appear "
        "between the ages of 30 and 50, and many carriers have already had children by then, so the allele is "
        "passed on before it causes illness. Genetic testing can detect the expansion before symptoms start.")},
]
NEGATIVES: list[dict[str, str]] = [
    {"doc_id": "Telomere_04.txt", "text": (
        "Telomeres are repeated DNA sequences at the ends of chromosomes that shorten with each cell division "
        "in most somatic cells; the enzyme telomerase can extend them.")},
]


def appendix_c_item(item_id: str = "aging-0") -> dict[str, Any]:
    """The input item as the ``load`` stage writes it."""
    return {"id": item_id, "query": QUERY, "answer": ANSWER, "reasoning": REASONING, "domain": "biology",
            "documents": [dict(d) for d in DOCUMENTS], "negatives": [dict(d) for d in NEGATIVES],
            "origin": "appendix-c.jsonl:1"}
