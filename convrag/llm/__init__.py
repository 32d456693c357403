"""convrag.llm: the one LLM layer for every agent, judge and rewrite.

    from convrag.llm import get_llm, load_prompt
    llm = get_llm()                       # $CONVRAG_LLM or the embedded SmolLM2 (offline)
    msgs = load_prompt("relevance_judge").render(query=q, passage=p)
    grade = llm.structured(msgs, Grade).value
    print(llm.report.summary())

See :mod:`convrag.llm.spec` for backend spec strings.
"""

from convrag.llm.batch import BatchResult, run_batch
from convrag.llm.cache import DiskCache, cache_key, default_cache_dir
from convrag.llm.client import LLM, RetryPolicy
from convrag.llm.ensemble import EnsembleResult, JudgeEnsemble, JudgeResult, Permutation, combine, permute
from convrag.llm.identity import ModelIdentity, describe, describe_all
from convrag.llm.prompts import PromptError, PromptTemplate, list_prompts, load_prompt
from convrag.llm.report import RunReport
from convrag.llm.spec import BackendSpec, get_llm, is_placeholder, parse_spec
from convrag.llm.structured import Parsed, ParseError, extract_json, json_schema_for, parse_structured
from convrag.llm.types import (
    BackendError,
    Completion,
    EndpointUnreachable,
    LLMError,
    LLMFailure,
    Message,
    RunStopped,
    SamplingParams,
    UnparsableReply,
    Usage,
)

__all__ = [
    "LLM", "BackendError", "BackendSpec", "BatchResult", "Completion", "DiskCache", "EndpointUnreachable",
    "EnsembleResult", "JudgeEnsemble", "JudgeResult", "LLMError", "LLMFailure", "Message", "ParseError", "Parsed",
    "Permutation", "PromptError", "PromptTemplate", "RetryPolicy", "RunReport", "RunStopped", "SamplingParams",
    "UnparsableReply",
    "Usage", "ModelIdentity", "cache_key", "combine", "default_cache_dir", "describe", "describe_all",
    "extract_json", "get_llm", "is_placeholder",
    "json_schema_for", "list_prompts", "load_prompt", "parse_spec", "parse_structured", "permute", "run_batch",
]
