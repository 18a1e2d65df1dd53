"""Kinds of rewording a paraphrase shows, and a tagger for paraphrases that come without them (the LLM's).

The offline grammar tags its paraphrases by construction (offline.py); `tag_kinds` reads the same kinds off any
paraphrase of a task's instruction, from its words: other names of the objects and places (frames.SYNONYMS /
HYPERNYMS; names with more or fewer words than the instruction's), other verbs, question marks and requests,
needs, hints, adverbs, and how clauses are joined. It is a reading of surface cues: a paraphrase can show a kind
the tagger misses (a synonym outside the lexicon), never one whose cue is absent.
"""

from __future__ import annotations

import re

from clbench_jax.language import frames as F
from clbench_jax.tasks.spec import TaskSpec

KINDS = ("synonym", "hypernym", "question", "need", "hint", "modifier_added", "modifier_dropped", "coordination",
         "subordination", "composition")
SYNONYM_VERBS = ("place", "set", "drop", "stick", "slide", "shove", "nudge", "pull open", "shut", "push shut",
                 "switch on", "fire up", "switch off", "shut off", "put")
HYPERNYM_VERBS = ("move", "get")
ADVERBS = ("carefully", "gently", "right away", "slowly", "quickly", "now", "please")
_VERBS = re.compile(r"\b(" + "|".join(sorted({"pick up", "put", "place", "push", "stack", "move", "set", "open", "close",
                                                "turn on", "turn off", "find", *SYNONYM_VERBS, *HYPERNYM_VERBS},
                                               key=len, reverse=True)) + r")\b")
_QUESTION = re.compile(r"\?\s*$|^(could|can|would|will) you\b")
_NEED = re.compile(r"\b(i need|i'd like|i would like|i want|we need)\b")
_HINT = re.compile(r"\b(should be|belongs?|needs? to be|ought to be|is supposed to be|goes)\b")
_SUBORDINATE = re.compile(r"\b(after|once|before|when|while|until|make sure|see to it|so that)\b")  # a clause
_RELATIVE = re.compile(r"\b(that is|which is|that sits|which sits)\b")  # a relative clause on a noun


def structure(text: str) -> str:
    """"coordinated" when the text joins two action clauses ("pick up X and place it ..."), else "simple"."""
    return "coordinated" if len(_VERBS.findall(text.lower())) > 1 else "simple"


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def _has(text: str, phrase: str) -> bool:
    return re.search(r"\b" + re.escape(phrase) + r"\b", text) is not None


def tag_kinds(task: TaskSpec, instruction: str, text: str) -> tuple[str, ...]:
    """The kinds (KINDS order) a paraphrase `text` of the task's `instruction` shows."""
    low, orig = " ".join(_words(text)), " ".join(_words(instruction))
    kinds = set()
    said = {ents: p for p, ents, _ in F.mention_phrases(task, instruction)}
    for p, ents, part in F.mention_phrases(task, text):
        kind = F.name_kind(task, p, ents) if part is None else None
        if kind in ("synonym", "hypernym"):
            kinds.add(kind)
        elif kind == "lexicon" and ents in said and p != said[ents]:
            a, b = set(p.split()), set(said[ents].split())
            kinds.add("modifier_added" if a > b else "modifier_dropped" if a < b else "synonym")
    for verbs, kind in ((SYNONYM_VERBS, "synonym"), (HYPERNYM_VERBS, "hypernym")):
        if any(_has(low, v) and not _has(orig, v) for v in verbs):
            kinds.add(kind)
    if any(_has(low, a) and not _has(orig, a) for a in ADVERBS):
        kinds.add("modifier_added")
    if _QUESTION.search(text.strip().lower()):
        kinds.add("question")
    if _NEED.search(low):
        kinds.add("need")
    if _HINT.search(low) and not _HINT.search(orig):
        kinds.add("hint")
    if _RELATIVE.search(low) and not _RELATIVE.search(orig):
        kinds.add("subordination")
    if _SUBORDINATE.search(low) and not _SUBORDINATE.search(orig):
        kinds.add("subordination")  # the steps are subordinated, not coordinated
    elif structure(low) != structure(orig):
        kinds.add("coordination")
    if len(kinds) > 1:
        kinds.add("composition")
    return tuple(k for k in KINDS if k in kinds)
