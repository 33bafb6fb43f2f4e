"""What a search question asks for, read by rules: the signals are then weighed for that kind.

Plain baselines on conversations show why one fixed blend serves no kind best: a question about a
date or a duration is found better by its words (the date or event named, a rare word) than by
meaning, and a question that needs several facts or an inference about someone ("what does she
like", "would he enjoy") better by meaning than by words. The kinds:

- ``temporal``: when, how long, what year/month/date, since when, how many days/weeks/years;
- ``several``: the answer is a list or needs several memories (what activities, which cities,
  both, all, how many times, plural objects);
- ``trait``: a preference, a trait or an inference about a person (likes, favourite, enjoy,
  would/might/likely, what kind of person), and a request for a recommendation or a suggestion
  ("what would you recommend for me", "can you suggest some hotels"): what suits the asker follows
  from their preferences, which the request does not name;
- ``fact``: anything else (one fact, a code, a name).

Rules, not a model: they are read in a microsecond, explained here and tested
(tests/store/test_intent.py); English, German and Italian question words. Which weights each kind
gets is ``SearchParams.by_intent`` (measured on LoCoMo dev and the generated benchmark only).
"""

from __future__ import annotations

import re
from typing import Literal

Intent = Literal["fact", "temporal", "several", "trait"]
INTENTS: tuple[Intent, ...] = ("fact", "temporal", "several", "trait")


def _words(*alternatives: str) -> re.Pattern[str]:
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)


_TEMPORAL = _words(
    r"when",
    r"what (?:year|month|day|date|time|week|weekend|season)",
    r"which (?:year|month|day|date|week|weekend|season)",
    r"how long",
    r"how many (?:years|months|weeks|days|hours|minutes|times a \w+)",
    r"since when",
    r"how (?:old|recently|often)",
    r"wann",
    r"wie lange",
    r"seit wann",
    r"in welchem (?:jahr|monat)",
    r"quando",
    r"da quanto tempo",
    r"in che (?:anno|mese)",
)
_TRAIT = _words(
    r"(?:would|might|could) (?:\w+ ){0,3}(?:like|enjoy|want|prefer|be|pursue|consider|go|choose|have|still)",
    r"likely",
    r"favou?rite",
    r"prefers?",
    r"enjoys?",
    r"likes?",
    r"loves?",
    r"hobb(?:y|ies)",
    r"interests?(?:ed)?",
    r"passion(?:ate)?",
    r"personality",
    r"traits?",
    r"what kind of (?:person|people)",
    r"values?",
    r"feel(?:s|ings?)? about",
    r"attitude",
    r"mag",
    r"gerne",
    r"lieblings\w*",
    r"preferit[oaie]",
    r"piace",
    # A request for a recommendation, addressed to the one asked ("you'd recommend", "can you
    # suggest") or for the asker ("suggestions for me"); "what did Melanie suggest" stays a fact.
    r"you(?:'d| would| could| can| might)? (?:\w+ ){0,2}(?:recommend|suggest)",
    r"(?:recommend|suggest)\w* (?:\w+ ){0,4}for me",
    r"(?:some|any) (?:recommendations|suggestions|ideas)",
    r"empfiehlst",
    r"empfehlen sie",
    r"(?:mi )?consigl(?:i|ieresti|iami)",
)
_SEVERAL = _words(
    r"what (?:are|were)",
    r"which \w+s",
    r"what \w+s (?:has|have|did|does|do|is|are|was|were)",
    r"what (?:activities|things|events|items|books|places|cities|countries|pets|instruments|hobbies|kinds|types)",
    r"both",
    r"all (?:the|of)",
    r"list",
    r"how many(?! (?:years|months|weeks|days|hours|minutes))",
    r"in common",
    r"each",
    r"various",
    r"welche",
    r"alle",
    r"quali",
    r"tutti",
)


def classify(query: str) -> Intent:
    """The kind of ``query`` (see the module's docstring); a date question wins over the others
    ("when did they both ..." is about a date), a trait over a list ("what are her hobbies")."""
    if _TEMPORAL.search(query):
        return "temporal"
    if _TRAIT.search(query):
        return "trait"
    if _SEVERAL.search(query):
        return "several"
    return "fact"
