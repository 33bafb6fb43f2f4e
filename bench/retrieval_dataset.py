"""A deterministic retrieval benchmark: memories in several team spaces and questions with known answers.

`build_dataset(seed, scale)` returns about 1,500 memories and 300 queries per unit of scale, spread
over five team spaces (a payments team, a platform/SRE team, a German logistics team, an Italian
design studio and an ML research team); scale N adds N-1 more rounds of the five teams with new
people and values. The same seed always gives the same dataset, byte for byte: every random choice
comes from `random.Random` seeded with a string (hashed with SHA-512, not with the per-process
`hash()`), and nothing iterates over a set.

What the queries test (`BenchQuery.kind`):

- ``paraphrase``: an English question about an English memory that avoids the memory's words
  ("Who should I ask about matching our books at month end?" for "For ledger reconciliation, talk to
  Priya Raman."). Plain word overlap mostly fails on these; see the tests for the measured rate.
- ``multilingual``: German and Italian questions and memories, including cross-language pairs
  (a German question whose answer is stored in English, an English question about an Italian note).
- ``code``: incident ids (``INC-20431``), error codes (``E_CONN_RESET``), part numbers and ticket ids,
  mostly as a literal ``keyword``; near-miss codes (``INC-20413``) are stored as distractors.
- ``partial_word``: a ``keyword`` that is a fragment of a longer word (``reconcil``, ``Lieferanten``).
- ``category_filter``: a question plus a ``category``; a memory on the same topic in another category
  (a meeting note that discusses the decision) is stored next to the answer.
- ``correction``: a fact that was later corrected. The newer memory `supersedes` the stale one; the
  stale one stays in the dataset so that a harness can load it as an old version, or as a live
  memory to see whether recency ranks the correction first. ``stale`` names it.
- ``exact``: a verbatim fragment of a memory, the baseline every search should get right.

For keyword queries ``expected`` is every current memory of the space whose content contains the
keyword (case-insensitive), computed after generation, so it is complete by construction. A memory
is current unless another memory supersedes it.

Distractors: every person has several memories (role, preferences, areas they own), every kind of
fact appears with other subjects than the one asked about, and about a third of each space is everyday
chatter (who is out sick, which room is booked, team lunches).
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

_T = TypeVar("_T")

QUERY_KINDS = ("paraphrase", "multilingual", "code", "partial_word", "category_filter", "correction", "exact")
LANGUAGES = ("en", "de", "it")


@dataclass(frozen=True)
class BenchMemory:
    """One memory to load into a space. Older memories have a larger `created_offset_days`."""

    key: str
    space: str
    content: str
    category: str | None
    created_offset_days: int
    supersedes: str | None
    language: str


@dataclass(frozen=True)
class BenchQuery:
    """One search with its answers: at least one of `text`, `keyword`; `category` narrows it."""

    key: str
    text: str | None
    keyword: str | None
    category: str | None
    space: str
    expected: tuple[str, ...]
    stale: tuple[str, ...]
    kind: str
    language: str


@dataclass(frozen=True)
class Dataset:
    memories: list[BenchMemory]
    queries: list[BenchQuery]

    @cached_property
    def by_key(self) -> dict[str, BenchMemory]:
        """Memories by key."""
        return {m.key: m for m in self.memories}

    @cached_property
    def spaces(self) -> list[str]:
        """Space keys in the order they were built."""
        return list(dict.fromkeys(m.space for m in self.memories))


# ---------------------------------------------------------------------------------------------
# Teams and people
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Team:
    space: str
    weights: tuple[tuple[str, float], ...]
    roles: dict[str, tuple[str, ...]]
    services: tuple[str, ...]
    ticket_prefix: str
    # (memory language, question language) for the multilingual queries.
    language_pairs: tuple[tuple[str, str], ...]


_TEAMS: tuple[_Team, ...] = (
    _Team(
        "payments",
        (("en", 0.8), ("de", 0.15), ("it", 0.05)),
        {
            "en": (
                "backend engineer",
                "payments analyst",
                "engineering manager",
                "product manager",
                "QA engineer",
            ),
            "de": ("die Backend-Entwicklung", "das Produktmanagement", "die Buchhaltung", "die Teamleitung"),
            "it": ("analista dei pagamenti", "responsabile del backend", "product manager"),
        },
        ("checkout", "ledger", "billing-api", "payout-worker", "fraud-scorer"),
        "PAY",
        (
            ("en", "de"),
            ("de", "en"),
            ("de", "de"),
            ("en", "it"),
            ("it", "en"),
            ("de", "en"),
            ("en", "de"),
            ("it", "it"),
            ("de", "de"),
            ("en", "it"),
        ),
    ),
    _Team(
        "platform",
        (("en", 0.9), ("de", 0.05), ("it", 0.05)),
        {
            "en": (
                "site reliability engineer",
                "platform engineer",
                "security engineer",
                "database administrator",
            ),
            "de": ("die Systemadministration", "den Plattformbetrieb"),
            "it": ("responsabile della piattaforma", "sistemista"),
        },
        ("ingest", "search", "gateway", "scheduler", "object-store"),
        "OPS",
        (
            ("en", "de"),
            ("en", "it"),
            ("de", "en"),
            ("it", "en"),
            ("de", "de"),
            ("it", "it"),
            ("en", "de"),
            ("en", "it"),
            ("de", "en"),
            ("it", "en"),
        ),
    ),
    _Team(
        "logistik",
        (("de", 0.65), ("en", 0.3), ("it", 0.05)),
        {
            "en": ("warehouse manager", "logistics planner", "operations analyst"),
            "de": (
                "die Lagerleitung",
                "die Schichtleitung",
                "die Disposition",
                "die Lagerlogistik",
                "den Einkauf",
            ),
            "it": ("responsabile del magazzino", "responsabile spedizioni"),
        },
        ("label-printer", "scanner-gateway", "route-planner", "inventory-sync", "dock-scheduler"),
        "LOG",
        (
            ("de", "de"),
            ("de", "de"),
            ("de", "de"),
            ("de", "de"),
            ("de", "en"),
            ("de", "en"),
            ("en", "de"),
            ("en", "de"),
            ("de", "it"),
            ("it", "de"),
        ),
    ),
    _Team(
        "design",
        (("it", 0.65), ("en", 0.3), ("de", 0.05)),
        {
            "en": ("art director", "UX researcher", "brand designer"),
            "it": (
                "art director",
                "designer di prodotto",
                "copywriter",
                "responsabile della grafica",
                "responsabile delle illustrazioni",
            ),
            "de": ("das Produktdesign", "die Illustration"),
        },
        ("render-farm", "asset-library", "proof-server", "font-sync", "review-portal"),
        "DES",
        (
            ("it", "it"),
            ("it", "it"),
            ("it", "it"),
            ("it", "it"),
            ("it", "en"),
            ("it", "en"),
            ("en", "it"),
            ("en", "it"),
            ("it", "de"),
            ("de", "it"),
        ),
    ),
    _Team(
        "research",
        (("en", 0.7), ("de", 0.15), ("it", 0.15)),
        {
            "en": ("research scientist", "ML engineer", "data engineer", "research intern"),
            "de": ("die Datenanalyse", "die Modellbewertung"),
            "it": ("analista dei dati", "responsabile della ricerca"),
        },
        ("trainer", "eval-runner", "feature-store", "label-queue", "notebook-hub"),
        "RES",
        (
            ("en", "de"),
            ("de", "en"),
            ("en", "it"),
            ("it", "en"),
            ("de", "de"),
            ("it", "it"),
            ("de", "en"),
            ("it", "en"),
            ("en", "de"),
            ("en", "it"),
        ),
    ),
)

_PEOPLE = (
    ("Priya", "Raman"),
    ("Lukas", "Brandt"),
    ("Giulia", "Conti"),
    ("Tomás", "Ortega"),
    ("Ana", "Pereira"),
    ("Jonas", "Keller"),
    ("Maria", "Schulz"),
    ("Wei", "Zhang"),
    ("Fatima", "Haddad"),
    ("Oliver", "Hughes"),
    ("Chiara", "Romano"),
    ("Mehmet", "Yılmaz"),
    ("Sofia", "Lindqvist"),
    ("Kenji", "Watanabe"),
    ("Amara", "Okafor"),
    ("Felix", "Wagner"),
    ("Elena", "Ricci"),
    ("Daniel", "Novak"),
    ("Hannah", "Becker"),
    ("Marco", "Bianchi"),
    ("Aisha", "Rahman"),
    ("Lena", "Hoffmann"),
    ("Pablo", "Jiménez"),
    ("Ingrid", "Nilsen"),
    ("Rafael", "Costa"),
    ("Yuki", "Tanaka"),
    ("Noah", "Fischer"),
    ("Francesca", "Gallo"),
    ("Samuel", "Mensah"),
    ("Clara", "Weber"),
    ("Luca", "Marino"),
    ("Nora", "Lehmann"),
    ("Arjun", "Mehta"),
    ("Sara", "Esposito"),
    ("Tobias", "Krüger"),
    ("Leila", "Karimi"),
    ("Matteo", "Greco"),
    ("Julia", "Schmitt"),
    ("Omar", "Farouk"),
    ("Alessia", "Rinaldi"),
)

_DAYS = {
    "en": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"),
    "de": ("Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag"),
    "it": ("lunedì", "martedì", "mercoledì", "giovedì", "venerdì"),
}
_MONTHS = {
    "en": ("January", "March", "April", "June", "September", "October", "November"),
    "de": ("Januar", "März", "April", "Juni", "September", "Oktober", "November"),
    "it": ("gennaio", "marzo", "aprile", "giugno", "settembre", "ottobre", "novembre"),
}
_CITIES = {
    "en": ("Lisbon", "Munich", "Vienna", "Milan", "Copenhagen", "Warsaw", "Rotterdam"),
    "de": ("Lissabon", "München", "Wien", "Mailand", "Kopenhagen", "Warschau", "Rotterdam"),
    "it": ("Lisbona", "Monaco di Baviera", "Vienna", "Milano", "Copenaghen", "Varsavia", "Rotterdam"),
}
_ROOMS = ("Atlas", "Orion", "Tevere", "Spree", "Vega", "Elba", "Lyra", "Isar")
_LEARN = {
    "en": (
        "property-based testing",
        "writing good postmortems",
        "SQL window functions",
        "accessible colour palettes",
    ),
    "de": ("gute Postmortems", "SQL-Fensterfunktionen", "barrierefreie Farbpaletten", "Zeitmanagement"),
    "it": (
        "test basati sulle proprietà",
        "funzioni finestra in SQL",
        "palette di colori accessibili",
        "gestione del tempo",
    ),
}

# ---------------------------------------------------------------------------------------------
# Facts with paraphrased questions (English)
# ---------------------------------------------------------------------------------------------

# Who owns what: (topic as the memory states it, the same topic as a person would ask about it).
_OWNER_TOPICS = (
    ("ledger reconciliation", "matching our books at month end"),
    ("the flaky integration tests", "CI checks that fail at random"),
    ("GDPR deletion requests", "customers who want their data erased"),
    ("the Terraform state", "our infrastructure-as-code bookkeeping"),
    ("vendor contracts", "agreements with suppliers"),
    ("the iOS release process", "getting the iPhone app into the App Store"),
    ("intern hiring", "bringing students on board for the summer"),
    ("database backups", "restoring yesterday's copy of our data"),
    ("the design system", "our shared library of UI components"),
    ("single sign-on", "logging in with the company account"),
    ("the analytics dashboards", "the charts executives look at"),
    ("travel expense claims", "getting reimbursed for trips"),
    ("accessibility audits", "making the app usable with a screen reader"),
    ("the load balancer configuration", "how traffic gets spread across servers"),
    ("customer refunds", "giving money back to buyers"),
    ("the data warehouse", "where reporting tables are kept"),
    ("localisation", "translating the product into other languages"),
    ("security reviews", "checking new features for vulnerabilities"),
    ("the office Wi-Fi", "internet access at the office"),
    ("onboarding of new hires", "the first week for people who just joined"),
    ("push notifications", "alerts that pop up on phones"),
    ("cloud cost reports", "how much we spend on AWS each month"),
    ("the release notes", "the changelog customers read"),
    ("the public status page", "telling users about an outage"),
    ("GPU quota", "access to graphics cards for training"),
    ("the brand guidelines", "which logo and colours to use"),
    ("penetration tests", "outside hackers we hire to attack us"),
    ("the barcode scanners", "handheld readers in the warehouse"),
    ("payroll questions", "salaries arriving on time"),
    ("feature flags", "switching functionality on and off without deploying"),
)
_OWNER_MEMORY = (
    "For {stmt}, talk to {person}.",
    "{person} is the go-to person for {stmt}.",
    "{first} owns {stmt}; ping them before changing anything there.",
    "Anything about {stmt} goes to {person} ({role}).",
)
_OWNER_QUESTION = (
    "Who should I ask about {q}?",
    "Who is in charge of {q}?",
    "Which colleague knows most about {q}?",
    "Who handles {q} here?",
)

# Personal preferences: (memory, question); {first} and {person} name the person.
_PERSONA_TOPICS = (
    (
        "{person} prefers written async updates to status meetings.",
        "How does {first} like to be kept in the loop?",
    ),
    ("{first} drinks only decaf after 2 pm.", "What should I bring {first} from the café in the afternoon?"),
    (
        "{person} is vegetarian, so book restaurants with meat-free dishes.",
        "Any dietary needs when taking {first} out to dinner?",
    ),
    (
        "{first} is online from 10:00 to 18:00 and rarely answers before that.",
        "During which hours can I reach {first}?",
    ),
    ("{person} wants pull requests under 400 lines.", "How big should a change be when {first} reviews it?"),
    (
        "{first} reads Slack only twice a day; call them for anything urgent.",
        "What is the quickest way to get hold of {first}?",
    ),
    ("{person} is allergic to cats.", "Can I bring my kitten along when I visit {first}?"),
    (
        "{first} is learning Japanese and has lessons on Thursday evenings.",
        "Which language is {first} studying?",
    ),
    ("{person} insists on tabs, not spaces, in the Go code.", "How does {first} want source files indented?"),
    ("{first} takes every Friday off in August.", "When is {first} away during the summer?"),
    (
        "{person} likes critical feedback in private, never in front of the team.",
        "How should I tell {first} that something went wrong?",
    ),
    (
        "{first} runs the book club, which meets on the first Monday of the month.",
        "When does {first}'s reading group get together?",
    ),
    (
        "{person} cycles in and leaves at 17:00 sharp to pick up their kids.",
        "Until what time can I schedule calls with {first}?",
    ),
    (
        "{first} would rather pair on a problem than review it afterwards.",
        "Does {first} prefer working through a task together or commenting on it later?",
    ),
)

# Settings and numbers: (memory with {v}, question, value choices).
_CONFIG_TOPICS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "The search API times out after {v} ms.",
        "How long does a lookup wait before it gives up?",
        ("800", "1200", "1500"),
    ),
    (
        "Invoices are archived for {v} years.",
        "How long do we keep billing documents?",
        ("seven", "ten", "six"),
    ),
    (
        "The staging environment is wiped every {v} night.",
        "When does the test system get reset?",
        ("Sunday", "Saturday", "Wednesday"),
    ),
    (
        "Uploads larger than {v} MB are rejected.",
        "What is the biggest file someone can send us?",
        ("25", "50", "100"),
    ),
    (
        "The free plan allows {v} seats.",
        "How many users can a non-paying customer add?",
        ("three", "five", "two"),
    ),
    (
        "Support answers within {v} hours on weekdays.",
        "How quickly do customers hear back from the help desk?",
        ("four", "eight", "24"),
    ),
    (
        "The Munich office opens at {v} in the morning.",
        "When can I get into the Bavarian office at the start of the day?",
        ("7:30", "8:00", "6:45"),
    ),
    (
        "Cached results are kept for {v} minutes.",
        "How out of date can a cached answer be?",
        ("five", "15", "ten"),
    ),
    (
        "Refunds over {v} EUR need a manager's approval.",
        "Which payouts back to buyers require sign-off from a lead?",
        ("500", "1,000", "250"),
    ),
    (
        "Our contracts promise {v}% uptime.",
        "What availability have we committed to with clients?",
        ("99.9", "99.95", "99.5"),
    ),
    (
        "The nightly batch starts at {v} UTC.",
        "When do the overnight jobs kick off?",
        ("01:00", "02:30", "23:45"),
    ),
    ("Laptops are replaced every {v} years.", "How often do we get new computers?", ("three", "four", "two")),
    (
        "The parking garage closes at {v}.",
        "Until when can I leave my car under the building?",
        ("22:00", "20:00", "23:30"),
    ),
    (
        "Each team gets a learning budget of {v} EUR per person per year.",
        "How much money can I spend on courses and books?",
        ("1,500", "1,000", "2,000"),
    ),
    (
        "Pull requests need {v} approvals before merging.",
        "How many reviewers have to say yes before code goes in?",
        ("two", "one", "three"),
    ),
)

# Where things are: (memory, question).
_LOCATION_TOPICS = (
    (
        "The failover runbook is in Confluence under OPS/Failover.",
        "Where are the steps for switching to the standby database written down?",
    ),
    ("Brand assets live in the shared Drive folder 'Brand 2024'.", "Where can I download our logos?"),
    ("The first-aid kit is in the kitchen cupboard next to the fridge.", "Where are the bandages kept?"),
    (
        "Spare HDMI adapters are in the drawer under the reception desk.",
        "I need a video cable for my laptop; where do we keep them?",
    ),
    ("Expense claims are submitted through Pleo.", "Which app do I use to get back money I spent for work?"),
    (
        "Architecture decision records are kept in the docs/adr folder of the main repo.",
        "Where do we write down why we chose a technology?",
    ),
    ("Holiday requests go through Personio.", "Where do I ask for vacation days?"),
    (
        "The shared team calendar is called 'Team Rota' in Google Calendar.",
        "Where can I see who is on leave this week?",
    ),
    ("Lost and found is a box behind the front desk.", "Somebody left an umbrella; where should I put it?"),
    (
        "The on-call handbook is pinned in the #oncall channel.",
        "Where do I read what to do when I am paged at night?",
    ),
    (
        "Meeting room displays are configured from the facilities portal.",
        "How do I change what the screen outside a conference room shows?",
    ),
    (
        "Printed contracts are filed in the locked cabinet in room 2.14.",
        "Where do the signed paper agreements go?",
    ),
)

# Decisions and policies, each with a note on the same topic in another category:
# (category, memory, other category, other memory, question).
_CATEGORY_TOPICS = (
    (
        "decision",
        "Decision: the order service stays on PostgreSQL, because we need transactions across tables.",
        "meeting-note",
        "Architecture sync: {a} argued for moving the order service to MongoDB; {b} worried about transactions.",
        "Which database did we settle on for the order service?",
    ),
    (
        "decision",
        "Decision: the web frontend moves from Angular to React by the end of Q3.",
        "meeting-note",
        "Frontend guild: {a} demoed a React prototype of the settings page; Angular upgrade pains came up again.",
        "What framework will the web app use after the migration?",
    ),
    (
        "decision",
        "Decision: no production deploys on Fridays after 15:00.",
        "meeting-note",
        "Retro: {a} shipped a hotfix late on Friday and {b} spent the evening rolling it back.",
        "Are late Friday deploys allowed?",
    ),
    (
        "decision",
        "Decision: all new backend services are written in Go.",
        "meeting-note",
        "Tech radar session: {a} likes Rust for new backend services, {b} prefers Kotlin.",
        "Which language do we use for a new backend service?",
    ),
    (
        "decision",
        "Decision: application logs are kept for 30 days in Loki and then archived to S3.",
        "meeting-note",
        "Cost review: {a} noticed that log storage in Loki doubled since spring.",
        "How long do we keep logs in Loki?",
    ),
    (
        "decision",
        "Decision: design reviews happen asynchronously in Figma comments.",
        "meeting-note",
        "Design critique: {a} and {b} spent an hour in a call reviewing the checkout screens in Figma.",
        "How are design reviews done?",
    ),
    (
        "decision",
        "Decision: the autumn offsite will be in Lisbon, 14-16 October.",
        "meeting-note",
        "Offsite planning call: {a} collected votes for Lisbon, Kraków and Valencia.",
        "Where is the offsite this autumn?",
    ),
    (
        "decision",
        "Decision: we use trunk-based development with branches that live less than two days.",
        "meeting-note",
        "Dev workflow chat: {a} complained that long-lived branches make trunk merges painful.",
        "What branching model do we follow?",
    ),
    (
        "decision",
        "Decision: customer data is hosted only in the EU, in the Frankfurt region.",
        "meeting-note",
        "Sales sync: {a} asked whether a US customer could have their data hosted in Virginia.",
        "Where is customer data hosted?",
    ),
    (
        "decision",
        "Decision: the v1 API will be switched off on 31 March.",
        "meeting-note",
        "Partner call: {a} explained to two partners why the v1 API is being retired.",
        "When does the v1 API go away?",
    ),
    (
        "policy",
        "Policy: every laptop must use full-disk encryption.",
        "meeting-note",
        "All-hands Q&A: someone asked {a} whether disk encryption slows down laptop builds.",
        "Is disk encryption required on laptops?",
    ),
    (
        "policy",
        "Policy: visitors to the server room are escorted at all times.",
        "incident",
        "Facilities report: the server room door was found propped open after a delivery on {day}.",
        "Can visitors walk around the server room alone?",
    ),
    (
        "policy",
        "Policy: customer exports are deleted from laptops after 14 days.",
        "meeting-note",
        "Support sync: {a} still has a customer export from last quarter on their laptop.",
        "How long may customer exports stay on a laptop?",
    ),
    (
        "policy",
        "Policy: production database access is granted for one day at a time.",
        "meeting-note",
        "Ops standup: {a} asked {b} to extend their production database access again.",
        "For how long is production database access granted?",
    ),
    (
        "policy",
        "Policy: open-source licences are checked before adding a dependency.",
        "meeting-note",
        "Code review: {a} added a new charting dependency and nobody looked at its licence.",
        "What must happen before we add a new dependency?",
    ),
    (
        "policy",
        "Policy: interview feedback is written before the debrief meeting.",
        "meeting-note",
        "Hiring debrief: {a} and {b} disagreed about the candidate for the data role.",
        "When should interview feedback be written?",
    ),
)

# Facts that change: (category, stale memory, correction, question); {a} and {b} are people.
_CORRECTIONS = {
    "en": (
        (
            "fact",
            "The daily standup is at 9:30 in the Atlas room.",
            "The daily standup moved to 10:15 and is now video-only.",
            "When and where is the morning sync?",
        ),
        (
            "fact",
            "Pages are sent through Opsgenie.",
            "We switched paging from Opsgenie to PagerDuty in May.",
            "Which tool wakes up whoever is on call?",
        ),
        (
            "contact",
            "{a} leads the team.",
            "{b} took over as team lead from {a} in March.",
            "Who runs the team now?",
        ),
        (
            "fact",
            "The office is at Torstraße 12, third floor.",
            "The office moved to Chausseestraße 48, fifth floor.",
            "What is our street address?",
        ),
        (
            "fact",
            "We release every two weeks.",
            "We now release weekly, every Wednesday.",
            "How often does a new version ship?",
        ),
        (
            "fact",
            "The default cloud region is eu-west-1 (Ireland).",
            "The default cloud region changed to eu-central-1 (Frankfurt).",
            "Which data centre do new resources go to unless stated otherwise?",
        ),
        (
            "fact",
            "The Q3 travel budget is 12,000 EUR.",
            "The Q3 travel budget was cut to 8,000 EUR.",
            "How much can we spend on trips this quarter?",
        ),
        (
            "fact",
            "Sprints are two weeks long.",
            "Since the reorg, sprints are three weeks long.",
            "How long is an iteration?",
        ),
        (
            "fact",
            "Backend services run on Python 3.10.",
            "All backend services were upgraded to Python 3.12.",
            "Which interpreter version do the backends use?",
        ),
        (
            "fact",
            "Retrospectives are on Thursday afternoons.",
            "Retrospectives moved to Monday mornings.",
            "When do we look back on the last sprint?",
        ),
        (
            "policy",
            "Production deploys need approval from {a}.",
            "Production deploys now need approval from {b} instead of {a}.",
            "Whose sign-off do I need to ship to prod?",
        ),
        (
            "fact",
            "Team lunch is on Fridays at Pho Hanoi.",
            "Team lunch moved to Thursdays at the Lebanese place on Rosenthaler Straße.",
            "When and where do we eat together?",
        ),
        (
            "fact",
            "The public API allows 100 requests per minute per client.",
            "The public API limit was raised to 300 requests per minute per client.",
            "How many calls can one integration make every sixty seconds?",
        ),
        (
            "contact",
            "Hardware orders go through {a}.",
            "{b} handles hardware orders now; {a} moved to the data team.",
            "Who do I contact to get a new monitor?",
        ),
    ),
    "de": (
        (
            "fact",
            "Die Frühschicht beginnt um 6:00 Uhr.",
            "Die Frühschicht beginnt ab sofort um 5:30 Uhr.",
            "Wann fängt morgens die erste Schicht an?",
        ),
        (
            "contact",
            "Ansprechperson für Gefahrgut ist {a}.",
            "Für Gefahrgut ist jetzt {b} zuständig, nicht mehr {a}.",
            "Wen frage ich bei gefährlichen Stoffen im Versand?",
        ),
        (
            "fact",
            "Der Spediteur für Süddeutschland ist Rhenus.",
            "Seit Juli fährt Dachser statt Rhenus die Touren nach Süddeutschland.",
            "Welche Firma transportiert unsere Ware in den Süden?",
        ),
    ),
    "it": (
        (
            "fact",
            "La revisione con il cliente è il martedì alle 11.",
            "La revisione con il cliente è stata spostata al giovedì alle 15.",
            "Quando incontriamo il committente per rivedere il lavoro?",
        ),
        (
            "contact",
            "Per le stampe di grande formato chiedere a {a}.",
            "Delle stampe di grande formato ora si occupa {b}, non più {a}.",
            "A chi mi rivolgo per i poster giganti?",
        ),
        (
            "fact",
            "Il font istituzionale è Helvetica Neue.",
            "Dal rebranding il font istituzionale è Inter.",
            "Quale carattere tipografico usiamo nei documenti ufficiali?",
        ),
    ),
}

# ---------------------------------------------------------------------------------------------
# Facts in three languages, for the multilingual queries
# ---------------------------------------------------------------------------------------------

# (category, {language: memory}, {language: question})
_MULTILINGUAL_TOPICS: tuple[tuple[str, dict[str, str], dict[str, str]], ...] = (
    (
        "fact",
        {
            "en": "The Leipzig warehouse ships orders until 16:00; later ones go out the next morning.",
            "de": "Das Lager in Leipzig verschickt Bestellungen bis 16 Uhr; spätere gehen am nächsten Morgen raus.",
            "it": "Il magazzino di Lipsia spedisce gli ordini fino alle 16; quelli successivi partono la mattina dopo.",
        },
        {
            "en": "What is the cut-off for same-day dispatch from Leipzig?",
            "de": "Bis wann muss eine Bestellung da sein, damit Leipzig sie noch heute versendet?",
            "it": "Entro che ora deve arrivare un ordine per partire in giornata da Lipsia?",
        },
    ),
    (
        "policy",
        {
            "en": "Returns are accepted within 30 days if the original packaging is intact.",
            "de": "Rücksendungen werden innerhalb von 30 Tagen angenommen, wenn die Originalverpackung unbeschädigt ist.",
            "it": "I resi sono accettati entro 30 giorni se l'imballaggio originale è integro.",
        },
        {
            "en": "How long does a customer have to send something back?",
            "de": "Wie lange haben Kunden Zeit, Ware zurückzuschicken?",
            "it": "Quanto tempo ha un cliente per restituire un prodotto?",
        },
    ),
    (
        "policy",
        {
            "en": "Only staff with a valid forklift licence may drive in hall 3.",
            "de": "In Halle 3 dürfen nur Mitarbeitende mit gültigem Staplerschein fahren.",
            "it": "Nel capannone 3 possono guidare solo i dipendenti con il patentino per il carrello elevatore.",
        },
        {
            "en": "Who is allowed to operate the lifting trucks in the third hall?",
            "de": "Wer darf in der dritten Halle Gabelstapler bedienen?",
            "it": "Chi può usare i muletti nel terzo capannone?",
        },
    ),
    (
        "fact",
        {
            "en": "Our fonts are licensed for web and print, but not for apps.",
            "de": "Unsere Schriftarten sind für Web und Druck lizenziert, aber nicht für Apps.",
            "it": "I nostri font hanno la licenza per web e stampa, ma non per le app.",
        },
        {
            "en": "Can we embed the typefaces in the mobile application?",
            "de": "Dürfen wir die Schriften in die Handy-Anwendung einbauen?",
            "it": "Possiamo usare i caratteri tipografici dentro l'applicazione per smartphone?",
        },
    ),
    (
        "fact",
        {
            "en": "New joiners get a MacBook Pro and a 27-inch monitor.",
            "de": "Neue Kolleginnen und Kollegen bekommen ein MacBook Pro und einen 27-Zoll-Monitor.",
            "it": "I nuovi assunti ricevono un MacBook Pro e un monitor da 27 pollici.",
        },
        {
            "en": "What equipment does someone starting here receive?",
            "de": "Welche Ausstattung erhält man am ersten Arbeitstag?",
            "it": "Che attrezzatura riceve chi inizia a lavorare da noi?",
        },
    ),
    (
        "fact",
        {
            "en": "The fire drill takes place twice a year, in March and September.",
            "de": "Die Brandschutzübung findet zweimal im Jahr statt, im März und im September.",
            "it": "L'esercitazione antincendio si tiene due volte l'anno, a marzo e a settembre.",
        },
        {
            "en": "How often do we practise evacuating the building?",
            "de": "Wie oft üben wir, das Gebäude zu räumen?",
            "it": "Quante volte all'anno facciamo la prova di evacuazione?",
        },
    ),
    (
        "policy",
        {
            "en": "Photos of clients may only be published with written consent.",
            "de": "Fotos von Kunden dürfen nur mit schriftlicher Einwilligung veröffentlicht werden.",
            "it": "Le foto dei clienti si possono pubblicare solo con il consenso scritto.",
        },
        {
            "en": "Do we need permission before putting pictures of customers online?",
            "de": "Brauchen wir eine Erlaubnis, bevor wir Bilder von Kunden ins Netz stellen?",
            "it": "Serve un'autorizzazione per mettere online le immagini dei clienti?",
        },
    ),
    (
        "fact",
        {
            "en": "The training cluster is shut down every Sunday from 02:00 to 06:00 for maintenance.",
            "de": "Der Trainingscluster wird jeden Sonntag von 2 bis 6 Uhr für Wartungsarbeiten abgeschaltet.",
            "it": "Il cluster di addestramento viene spento ogni domenica dalle 2 alle 6 per manutenzione.",
        },
        {
            "en": "When are the GPUs unavailable each week?",
            "de": "Wann sind die Grafikkarten jede Woche nicht nutzbar?",
            "it": "Quando non si possono usare le GPU durante la settimana?",
        },
    ),
    (
        "policy",
        {
            "en": "Reimbursement for home-office furniture is capped at 500 euros a year.",
            "de": "Die Erstattung für Homeoffice-Möbel ist auf 500 Euro pro Jahr begrenzt.",
            "it": "Il rimborso per i mobili dell'ufficio in casa è limitato a 500 euro all'anno.",
        },
        {
            "en": "How much can I claim for a desk and chair at home?",
            "de": "Wie viel Geld bekomme ich für Schreibtisch und Stuhl zu Hause zurück?",
            "it": "Quanto posso farmi rimborsare per scrivania e sedia a casa?",
        },
    ),
    (
        "policy",
        {
            "en": "Visitors must sign in at reception and wear a badge.",
            "de": "Besucher müssen sich am Empfang anmelden und einen Ausweis tragen.",
            "it": "I visitatori devono registrarsi alla reception e indossare un badge.",
        },
        {
            "en": "What do guests have to do when they arrive at the office?",
            "de": "Was müssen Gäste tun, wenn sie ins Büro kommen?",
            "it": "Cosa devono fare gli ospiti quando arrivano in ufficio?",
        },
    ),
    (
        "howto",
        {
            "en": "Pallets heavier than 800 kg go on the ground-floor racks only.",
            "de": "Paletten über 800 kg kommen nur in die Regale im Erdgeschoss.",
            "it": "I pallet più pesanti di 800 kg vanno solo negli scaffali al piano terra.",
        },
        {
            "en": "Where should very heavy loads be stored?",
            "de": "Wo lagern wir besonders schwere Ladungen?",
            "it": "Dove si mettono i carichi molto pesanti?",
        },
    ),
    (
        "howto",
        {
            "en": "Mockups are shown to the client as PDF, never as live Figma links.",
            "de": "Entwürfe zeigen wir dem Kunden als PDF, nie als Live-Link zu Figma.",
            "it": "I mockup si presentano al cliente in PDF, mai come link a Figma.",
        },
        {
            "en": "In what format do customers see our design drafts?",
            "de": "In welchem Format bekommen Auftraggeber unsere Gestaltungsvorschläge?",
            "it": "In che formato mostriamo le bozze grafiche ai committenti?",
        },
    ),
    (
        "policy",
        {
            "en": "Experiments must be logged in the tracking server before results are shared.",
            "de": "Experimente müssen im Tracking-Server erfasst sein, bevor Ergebnisse geteilt werden.",
            "it": "Gli esperimenti vanno registrati nel server di tracciamento prima di condividere i risultati.",
        },
        {
            "en": "What has to happen before I show numbers from a training run to others?",
            "de": "Was muss passieren, bevor ich Zahlen aus einem Trainingslauf weitergebe?",
            "it": "Cosa devo fare prima di mostrare ad altri i numeri di un addestramento?",
        },
    ),
    (
        "fact",
        {
            "en": "The canteen serves lunch from 11:30 to 14:00.",
            "de": "Die Kantine gibt von 11:30 bis 14 Uhr Mittagessen aus.",
            "it": "La mensa serve il pranzo dalle 11:30 alle 14.",
        },
        {
            "en": "When can I get a midday meal downstairs?",
            "de": "Wann bekomme ich mittags etwas Warmes zu essen?",
            "it": "A che ora si può mangiare qualcosa a mezzogiorno?",
        },
    ),
    (
        "fact",
        {
            "en": "Customer invoices are sent on the first working day of the month.",
            "de": "Kundenrechnungen werden am ersten Werktag des Monats verschickt.",
            "it": "Le fatture ai clienti partono il primo giorno lavorativo del mese.",
        },
        {
            "en": "When do clients get billed?",
            "de": "Wann stellen wir Kunden etwas in Rechnung?",
            "it": "Quando mandiamo il conto ai clienti?",
        },
    ),
    (
        "policy",
        {
            "en": "Overtime has to be approved by the shift lead in advance.",
            "de": "Überstunden muss die Schichtleitung vorher genehmigen.",
            "it": "Gli straordinari vanno approvati in anticipo dal capoturno.",
        },
        {
            "en": "Who must agree before I work extra hours?",
            "de": "Wer muss zustimmen, bevor ich länger arbeite?",
            "it": "Chi deve dare l'ok prima che io faccia ore in più?",
        },
    ),
    (
        "fact",
        {
            "en": "Printed samples come from the print shop on Via Tortona within two days.",
            "de": "Gedruckte Muster kommen innerhalb von zwei Tagen aus der Druckerei in der Via Tortona.",
            "it": "Le prove di stampa arrivano dalla tipografia di via Tortona entro due giorni.",
        },
        {
            "en": "How fast can we get physical proofs of a layout?",
            "de": "Wie schnell bekommen wir Probedrucke eines Layouts?",
            "it": "In quanto tempo riceviamo su carta le bozze di un impaginato?",
        },
    ),
    (
        "fact",
        {
            "en": "Dogs are welcome in the office on Fridays.",
            "de": "Hunde sind freitags im Büro willkommen.",
            "it": "I cani sono benvenuti in ufficio il venerdì.",
        },
        {
            "en": "Which day can I bring my pet to work?",
            "de": "An welchem Tag darf ich mein Haustier mitbringen?",
            "it": "In che giorno posso portare il mio animale al lavoro?",
        },
    ),
    (
        "policy",
        {
            "en": "The dataset of customer emails must not leave the EU servers.",
            "de": "Der Datensatz mit Kunden-E-Mails darf die EU-Server nicht verlassen.",
            "it": "Il dataset con le email dei clienti non deve lasciare i server nell'UE.",
        },
        {
            "en": "Can I copy the customer mail corpus to a machine in the US?",
            "de": "Darf ich die Kundenpost auf einen Rechner in Amerika kopieren?",
            "it": "Posso copiare la raccolta di messaggi dei clienti su un computer negli Stati Uniti?",
        },
    ),
    (
        "howto",
        {
            "en": "Damaged goods are photographed and reported in the claims tool on the same day.",
            "de": "Beschädigte Ware wird fotografiert und noch am selben Tag im Schadensportal gemeldet.",
            "it": "La merce danneggiata va fotografata e segnalata nel portale reclami il giorno stesso.",
        },
        {
            "en": "What do I do when a delivery arrives broken?",
            "de": "Was mache ich, wenn eine Lieferung kaputt ankommt?",
            "it": "Cosa faccio se una consegna arriva rotta?",
        },
    ),
)

# ---------------------------------------------------------------------------------------------
# Codes and partial words
# ---------------------------------------------------------------------------------------------

_ERROR_CODES = (
    "E_CONN_RESET",
    "E_LOCK_TIMEOUT",
    "ERR_QUOTA_EXCEEDED",
    "E_TLS_HANDSHAKE",
    "ERR_DISK_FULL",
    "E_SCHEMA_MISMATCH",
    "ERR_RATE_LIMITED",
    "E_OOM_KILLED",
    "ERR_DNS_TIMEOUT",
    "E_STALE_CACHE",
    "ERR_PRINTER_OFFLINE",
    "E_BARCODE_UNREADABLE",
    "ERR_CUDA_OOM",
    "E_NAN_LOSS",
)
_INCIDENT = {
    "en": (
        "{inc}: {service} returned {err} for {n} minutes after {cause}. Fixed by {fix}.",
        "Postmortem {inc}: {err} in {service} ({n} min), triggered by {cause}; {fix} resolved it.",
    ),
    "de": (
        "{inc}: {service} lieferte {n} Minuten lang {err}, ausgelöst durch {cause}. Behoben durch {fix}.",
    ),
    "it": ("{inc}: {service} ha restituito {err} per {n} minuti a causa di {cause}. Risolto con {fix}.",),
}
_CAUSES = {
    "en": (
        "a Redis failover",
        "a certificate rotation",
        "a schema migration",
        "a traffic spike",
        "a DNS change",
    ),
    "de": ("einen Redis-Failover", "einen Zertifikatswechsel", "eine Schemamigration", "eine Lastspitze"),
    "it": (
        "un failover di Redis",
        "una rotazione dei certificati",
        "una migrazione dello schema",
        "un picco di traffico",
    ),
}
_FIXES = {
    "en": ("raising the pool size", "rolling back the release", "restarting the workers", "adding an index"),
    "de": (
        "eine größere Pool-Größe",
        "ein Rollback",
        "einen Neustart der Worker",
        "einen zusätzlichen Index",
    ),
    "it": ("un pool più grande", "un rollback", "il riavvio dei worker", "un indice aggiuntivo"),
}
_PART = {
    "en": "Replacement {thing} for {where} is part {part}; order it from {vendor}.",
    "de": "Ersatz-{thing} für {where}: Teilenummer {part}, Bestellung über {vendor}.",
    "it": "{thing} di ricambio per {where}: codice {part}, da ordinare a {vendor}.",
}
_PART_THINGS = {
    "en": (
        ("fan", "FAN"),
        ("power supply", "PSU"),
        ("battery", "BAT"),
        ("label roll", "LBL"),
        ("toner", "TNR"),
    ),
    "de": (
        ("Lüfter", "FAN"),
        ("Netzteil", "PSU"),
        ("Akku", "BAT"),
        ("Etikettenrolle", "LBL"),
        ("Toner", "TNR"),
    ),
    "it": (
        ("Ventola", "FAN"),
        ("Alimentatore", "PSU"),
        ("Batteria", "BAT"),
        ("Rotolo di etichette", "LBL"),
        ("Toner", "TNR"),
    ),
}
_PART_WHERE = {
    "en": (
        "rack R12",
        "the label printer in hall 2",
        "scanner gun 7",
        "the plotter",
        "the NAS in the basement",
    ),
    "de": ("Regal R12", "den Etikettendrucker in Halle 2", "Scanner 7", "den Plotter", "das NAS im Keller"),
    "it": (
        "il rack R12",
        "la stampante di etichette nel capannone 2",
        "lo scanner 7",
        "il plotter",
        "il NAS in cantina",
    ),
}
_VENDORS = ("Bechtle", "Conrad", "RS Components", "Reichelt", "Würth")
_TICKET = {
    "en": "{ticket} tracks the {what}; {a} is on it.",
    "de": "{ticket} beschreibt {what}; {a} kümmert sich darum.",
    "it": "{ticket} riguarda {what}; se ne occupa {a}.",
}
_TICKET_WHAT = {
    "en": (
        "rounding bug in refunds",
        "slow export of monthly reports",
        "broken dark mode in settings",
        "duplicate emails",
    ),
    "de": ("den Rundungsfehler bei Gutschriften", "den langsamen Monatsexport", "die doppelten E-Mails"),
    "it": ("l'errore di arrotondamento nei rimborsi", "l'export mensile lento", "le email duplicate"),
}

# (language, word, fragment used as the keyword, memory containing the word)
_PARTIAL_WORDS = (
    ("en", "reconcil", "The nightly reconciliation job compares payouts with the ledger."),
    ("en", "idempot", "Every payment request carries an idempotency header, so retries are safe."),
    ("en", "ubernet", "The ingest workers moved from plain VMs to Kubernetes in April."),
    ("en", "observab", "The observability budget covers Grafana Cloud and Sentry."),
    ("en", "hyperparam", "The hyperparameter sweep for the ranking model finished overnight."),
    ("en", "dedup", "Deduplication of supplier records runs after every import."),
    ("en", "quarant", "Suspicious uploads are moved to a quarantine bucket for review."),
    ("de", "Lieferanten", "Das Lieferantenportal ist seit Montag wieder erreichbar."),
    ("de", "ahlungseing", "Die Zahlungseingänge werden jeden Morgen um acht Uhr abgeglichen."),
    ("de", "Schichtplan", "Die Schichtplanung für Dezember hängt im Pausenraum aus."),
    ("de", "ommissionier", "Die Kommissionierung in Halle 2 läuft ab jetzt in zwei Schichten."),
    ("it", "fatturaz", "Il modulo di fatturazione elettronica è stato aggiornato ieri."),
    ("it", "prototipaz", "La fase di prototipazione del nuovo packaging dura tre settimane."),
    ("it", "sottotitol", "I sottotitoli dei video del lancio sono pronti in tre lingue."),
)

# ---------------------------------------------------------------------------------------------
# Everyday chatter (distractors)
# ---------------------------------------------------------------------------------------------

_CHATTER = {
    "en": (
        "{a} is out sick today; {b} covers their code reviews.",
        "The printer on the second floor is jammed again; use the one by the kitchen.",
        "Book the {room} room early for quarterly planning, it fills up fast.",
        "{a} and {b} pair on the dashboard clean-up every {day} afternoon.",
        "{a} will present the {month} numbers at the all-hands.",
        "Reminder: the team photo is on {day} in the courtyard.",
        "{a} recommends the ramen place two streets from the office.",
        "{a} has a dentist appointment on {day} and will join the stand-up late.",
        "The coffee machine will be descaled on {day} morning.",
        "{a} found that the onboarding checklist still mentions the old VPN client.",
        "We celebrated {a}'s five years with the company with cake on {day}.",
        "{a} suggested moving the demo to {day} so that {b} can attend.",
        "The heating in the {room} room is broken; facilities know about it.",
        "{a} is collecting ideas for the next hackathon in a shared doc.",
        "{a} will be at a conference in {city} from {day} to {day2}.",
        "{a} asked everyone to update their profile pictures in the directory.",
        "Quarterly planning: {a} drafts the roadmap, {b} reviews it by {day}.",
        "{a} reported that the lift makes a strange noise between the third and fourth floor.",
        "{a} brought a plant for the {room} room; please water it on {day}s.",
        "The town hall recording from {month} is in the shared video folder.",
        "{a} mentioned that the bike racks in the yard are full most mornings.",
        "{b} thanked {a} for helping with the {month} customer workshop.",
        "Retro takeaway: fewer meetings on {day}s and more focus time.",
        "{a} is running a lunch-and-learn about {learn} on {day}.",
        "{a} moved desks to sit closer to {b}.",
        "{a}'s laptop is being repaired; they are on a loaner until {day}.",
        "The {month} newsletter will feature {a}'s side project.",
        "{a} and {b} are organising the summer party in {city}.",
        "{a} noted that the meeting-notes template lacks a section for action items.",
        "Reminder from {a}: send holiday requests for {month} by the end of the week.",
        "{a} shared a good article about {learn} in the team channel.",
        "{a} will be working from {city} next week.",
    ),
    "de": (
        "{a} ist heute krank; {b} übernimmt die Code-Reviews.",
        "Der Drucker im zweiten Stock klemmt schon wieder.",
        "Bitte den Raum {room} frühzeitig für die Quartalsplanung buchen.",
        "{a} stellt am {day} die Zahlen für {month} vor.",
        "Die Kaffeemaschine wird am {day} entkalkt.",
        "{a} empfiehlt das Ramen-Lokal zwei Straßen weiter.",
        "Wir haben am {day} das fünfjährige Jubiläum von {a} mit Kuchen gefeiert.",
        "Die Heizung im Raum {room} ist kaputt; die Haustechnik weiß Bescheid.",
        "{a} sammelt Ideen für den nächsten Hackathon in einem gemeinsamen Dokument.",
        "{a} ist von {day} bis {day2} auf einer Konferenz in {city}.",
        "{a} und {b} organisieren das Sommerfest in {city}.",
        "Erinnerung von {a}: Urlaubsanträge für {month} bis Ende der Woche einreichen.",
        "{a} hat bemerkt, dass in der Protokollvorlage ein Abschnitt für Aufgaben fehlt.",
        "{a} hält am {day} in der Mittagspause einen Vortrag über {learn}.",
        "{a} arbeitet nächste Woche aus {city}.",
        "{b} hat sich bei {a} für die Hilfe beim Kundenworkshop im {month} bedankt.",
        "Im Raum {room} steht jetzt eine Pflanze von {a}; bitte am {day} gießen.",
    ),
    "it": (
        "{a} oggi è in malattia; {b} si occupa delle code review.",
        "La stampante del secondo piano si è di nuovo inceppata.",
        "Prenotate presto la sala {room} per la pianificazione trimestrale.",
        "{a} presenterà {day} i numeri di {month}.",
        "La macchina del caffè verrà decalcificata {day} mattina.",
        "{a} consiglia il ristorante di ramen a due strade dall'ufficio.",
        "Abbiamo festeggiato con una torta i cinque anni di {a} in azienda.",
        "Il riscaldamento nella sala {room} è guasto; la manutenzione è stata avvisata.",
        "{a} raccoglie idee per il prossimo hackathon in un documento condiviso.",
        "{a} sarà a una conferenza a {city} da {day} a {day2}.",
        "{a} e {b} stanno organizzando la festa d'estate a {city}.",
        "Promemoria di {a}: inviare le richieste di ferie per {month} entro fine settimana.",
        "{a} ha notato che il modello per i verbali non ha una sezione per le azioni da fare.",
        "{a} terrà {day} un incontro all'ora di pranzo sul tema: {learn}.",
        "{a} la prossima settimana lavora da {city}.",
        "{b} ha ringraziato {a} per l'aiuto con il workshop clienti di {month}.",
        "Nella sala {room} c'è una pianta portata da {a}; annaffiatela {day}.",
    ),
}
_CHATTER_CATEGORIES = (None, None, "social")
_ROLE = {
    "en": "{person} is a {role} based in {city}.",
    "de": "{person} ist in {city} für {role} zuständig.",
    "it": "{person} lavora come {role} a {city}.",
}

# Queries per space, by kind (at scale 1 there are five spaces: 300 queries).
_PER_SPACE = {
    "paraphrase": 16,
    "multilingual": 10,
    "code": 8,
    "partial_word": 6,
    "category_filter": 8,
    "correction": 8,
    "exact": 4,
}
_MEMORIES_PER_SPACE = 300
_DAY_RANGE = 720


# ---------------------------------------------------------------------------------------------
# Building one space
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Person:
    first: str
    last: str
    role: str

    @property
    def full(self) -> str:
        return f"{self.first} {self.last}"


@dataclass
class _Draft:
    content: str
    category: str | None
    language: str
    offset: int
    supersedes: int | None = None


@dataclass
class _DraftQuery:
    kind: str
    language: str
    text: str | None = None
    keyword: str | None = None
    category: str | None = None
    expected: list[int] = field(default_factory=list)
    stale: list[int] = field(default_factory=list)


class _SpaceBuilder:
    """Writes the memories and queries of one space; ids are list positions until `finish`."""

    def __init__(self, team: _Team, space: str, seed: int) -> None:
        self.team = team
        self.space = space
        self.rng = random.Random(f"{seed}:{space}")
        self.drafts: list[_Draft] = []
        self.queries: list[_DraftQuery] = []
        self.contents: set[str] = set()
        pool = self.rng.sample(_PEOPLE, 10)
        self.people = [_Person(first, last, self.rng.choice(team.roles["en"])) for first, last in pool]

    # -- helpers ---------------------------------------------------------------------------

    def language(self) -> str:
        langs = [lang for lang, _ in self.team.weights]
        return self.rng.choices(langs, weights=[w for _, w in self.team.weights])[0]

    def add(self, content: str, category: str | None, language: str, offset: int | None = None) -> int:
        if content in self.contents:
            raise ValueError(f"duplicate memory in {self.space}: {content}")
        self.contents.add(content)
        self.drafts.append(
            _Draft(content, category, language, self.rng.randrange(_DAY_RANGE) if offset is None else offset)
        )
        return len(self.drafts) - 1

    def ask(
        self,
        kind: str,
        language: str,
        expected: Sequence[int] = (),
        *,
        text: str | None = None,
        keyword: str | None = None,
        category: str | None = None,
    ) -> _DraftQuery:
        query = _DraftQuery(kind, language, text, keyword, category, list(expected))
        self.queries.append(query)
        return query

    def two_people(self) -> tuple[_Person, _Person]:
        a, b = self.rng.sample(self.people, 2)
        return a, b

    def fill(self, template: str, language: str) -> str:
        a, b = self.two_people()
        day, day2 = sorted(self.rng.sample(range(5), 2))
        return template.format(
            a=a.first,
            b=b.first,
            room=self.rng.choice(_ROOMS),
            day=_DAYS[language][day],
            day2=_DAYS[language][day2],
            month=self.rng.choice(_MONTHS[language]),
            city=self.rng.choice(_CITIES[language]),
            learn=self.rng.choice(_LEARN[language]),
        )

    def shuffled(self, items: Sequence[_T]) -> list[_T]:
        out = list(items)
        self.rng.shuffle(out)
        return out

    # -- content families ------------------------------------------------------------------

    def people_and_preferences(self, questions: int) -> int:
        for person in self.people:
            lang = self.language()
            role = person.role if lang == "en" else self.rng.choice(self.team.roles[lang])
            city = self.rng.choice(_CITIES[lang])
            self.add(_ROLE[lang].format(person=person.full, role=role, city=city), "contact", lang)
        asked = 0
        for i, (memory, question) in enumerate(self.shuffled(_PERSONA_TOPICS)[:12]):
            person = self.people[i % len(self.people)]
            key = self.add(memory.format(person=person.full, first=person.first), "preference", "en")
            if asked < questions:
                self.ask("paraphrase", "en", [key], text=question.format(first=person.first))
                asked += 1
        return asked

    def owners(self, questions: int) -> None:
        for i, (stmt, q) in enumerate(self.shuffled(_OWNER_TOPICS)):
            person = self.rng.choice(self.people)
            memory = self.rng.choice(_OWNER_MEMORY)
            content = memory.format(stmt=stmt, person=person.full, first=person.first, role=person.role)
            key = self.add(content, "contact", "en")
            if i < questions:
                self.ask("paraphrase", "en", [key], text=self.rng.choice(_OWNER_QUESTION).format(q=q))

    def settings(self, questions: int) -> None:
        for i, (memory, question, values) in enumerate(self.shuffled(_CONFIG_TOPICS)):
            key = self.add(memory.format(v=self.rng.choice(values)), "fact", "en")
            if i < questions:
                self.ask("paraphrase", "en", [key], text=question)

    def locations(self, questions: int) -> None:
        for i, (memory, question) in enumerate(self.shuffled(_LOCATION_TOPICS)):
            key = self.add(memory, "howto", "en")
            if i < questions:
                self.ask("paraphrase", "en", [key], text=question)

    def categorised(self, questions: int) -> None:
        for i, (category, memory, other_category, other, question) in enumerate(
            self.shuffled(_CATEGORY_TOPICS)
        ):
            key = self.add(memory, category, "en")
            self.add(self.fill(other, "en"), other_category, "en")
            if i < questions:
                self.ask("category_filter", "en", [key], text=question, category=category)

    def corrections(self, questions: int) -> None:
        # German and Italian corrections are about warehouses and studios: only where that is the main language.
        frames = [
            (lang, frame)
            for lang in LANGUAGES
            if lang == "en" or self.weight(lang) >= 0.5
            for frame in _CORRECTIONS[lang]
        ]
        for i, (lang, (category, old, new, question)) in enumerate(self.shuffled(frames)):
            a, b = self.two_people()
            names = {"a": a.full, "b": b.full}
            new_offset = self.rng.randrange(1, 120)
            stale = self.add(old.format(**names), category, lang, new_offset + self.rng.randrange(30, 400))
            fresh = self.add(new.format(**names), category, lang, new_offset)
            self.drafts[fresh].supersedes = stale
            if i < questions:
                self.ask("correction", lang, [fresh], text=question).stale.append(stale)

    def weight(self, language: str) -> float:
        return dict(self.team.weights).get(language, 0.0)

    def multilingual(self, questions: int) -> None:
        topics = self.shuffled(_MULTILINGUAL_TOPICS)
        pairs = list(self.team.language_pairs[:questions])
        for i, (category, memories, asks) in enumerate(topics):
            if i < len(pairs):
                memory_lang, question_lang = pairs[i]
                key = self.add(memories[memory_lang], category, memory_lang)
                self.ask("multilingual", question_lang, [key], text=asks[question_lang])
            elif self.rng.random() < 0.5:
                lang = self.language()
                self.add(memories[lang], category, lang)

    def codes(self, questions: int) -> None:
        """Incidents (with near-miss ids), part numbers and tickets; queries quote one code each."""
        rng = self.rng
        errors = self.shuffled(_ERROR_CODES)
        incidents: list[tuple[int, str, str]] = []
        for i in range(12):
            number = rng.randrange(10000, 99999)
            # A near-miss id with two digits swapped, so that a literal match must be exact.
            digits = list(str(number))
            digits[2], digits[3] = digits[3], digits[2]
            for code, err in (
                (f"INC-{number}", errors[i % len(errors)]),
                (f"INC-{''.join(digits)}", errors[(i + 5) % len(errors)]),
            ):
                if self.mentions(code):
                    continue
                lang = self.language()
                content = rng.choice(_INCIDENT[lang]).format(
                    inc=code,
                    service=rng.choice(self.team.services),
                    err=err,
                    n=rng.randrange(3, 95),
                    cause=rng.choice(_CAUSES[lang]),
                    fix=rng.choice(_FIXES[lang]),
                )
                incidents.append((self.add(content, "incident", lang), code, err))
        parts: list[tuple[int, str]] = []
        while len(parts) < 8:
            lang = self.language()
            thing, prefix = rng.choice(_PART_THINGS[lang])
            part = f"{prefix}-{rng.randrange(1000, 9999)}-{rng.choice('ABCDEFGHKX')}"
            if not self.mentions(part):
                content = _PART[lang].format(
                    thing=thing, where=rng.choice(_PART_WHERE[lang]), part=part, vendor=rng.choice(_VENDORS)
                )
                parts.append((self.add(content, "inventory", lang), part))
        tickets: list[tuple[int, str]] = []
        while len(tickets) < 6:
            lang = self.language()
            ticket = f"{self.team.ticket_prefix}-{rng.randrange(100, 9999)}"
            if not self.mentions(ticket):
                what = rng.choice(_TICKET_WHAT[lang])
                content = _TICKET[lang].format(ticket=ticket, what=what, a=rng.choice(self.people).first)
                tickets.append((self.add(content, "task", lang), ticket))
        # Literal keyword queries on each kind of code (an error code may occur in two incidents),
        # then questions that quote a code in a sentence.
        literal = [
            incidents[0][:2],
            (incidents[2][0], incidents[2][2]),
            parts[0],
            tickets[0],
            incidents[4][:2],
        ]
        quoted = [incidents[6][:2], parts[1], tickets[1]]
        for key, code in literal[: questions - len(quoted)]:
            self.ask("code", self.drafts[key].language, keyword=code)
        for key, code in quoted[: questions - len(literal)]:
            self.ask("code", "en", [key], text=f"What do we know about {code}?")

    def mentions(self, text: str) -> bool:
        return any(text in content for content in self.contents)

    def partial_words(self, questions: int) -> None:
        entries = [e for e in self.shuffled(_PARTIAL_WORDS) if self.weight(e[0]) >= 0.05]
        for lang, fragment, content in entries[:questions]:
            self.add(content, "fact", lang)
            self.ask("partial_word", lang, keyword=fragment)

    def chatter(self, count: int) -> None:
        for _ in range(count * 50):
            if count == 0:
                break
            lang = self.language()
            content = self.fill(self.rng.choice(_CHATTER[lang]), lang)
            if content not in self.contents:
                self.add(content, self.rng.choice(_CHATTER_CATEGORIES), lang)
                count -= 1

    def exact(self, questions: int) -> None:
        """Seven consecutive words of a memory that no other memory contains."""
        asked = {k for q in self.queries for k in q.expected}
        candidates = [i for i, d in enumerate(self.drafts) if i not in asked and len(d.content.split()) >= 9]
        for key in self.shuffled(candidates):
            if questions == 0:
                break
            words = self.drafts[key].content.split()
            start = self.rng.randrange(0, len(words) - 6)
            window = " ".join(words[start : start + 7])
            if sum(window in content for content in self.contents) == 1:
                self.ask("exact", self.drafts[key].language, [key], text=window)
                questions -= 1

    # -- assembly --------------------------------------------------------------------------

    def build(self) -> None:
        paraphrases = _PER_SPACE["paraphrase"]
        persona = self.people_and_preferences(4)
        self.owners(6)
        self.settings(3)
        self.locations(paraphrases - persona - 6 - 3)
        self.multilingual(_PER_SPACE["multilingual"])
        self.categorised(_PER_SPACE["category_filter"])
        self.corrections(_PER_SPACE["correction"])
        self.codes(_PER_SPACE["code"])
        self.partial_words(_PER_SPACE["partial_word"])
        self.chatter(_MEMORIES_PER_SPACE - len(self.drafts))
        self.exact(_PER_SPACE["exact"])

    def finish(self) -> tuple[list[BenchMemory], list[BenchQuery]]:
        """Shuffle the memories (so that position says nothing), assign keys, resolve keywords."""
        order = self.shuffled(range(len(self.drafts)))
        keys = {old: f"{self.space}/m{new:04d}" for new, old in enumerate(order)}
        superseded = {d.supersedes for d in self.drafts if d.supersedes is not None}
        memories = [
            BenchMemory(
                key=keys[old],
                space=self.space,
                content=draft.content,
                category=draft.category,
                created_offset_days=draft.offset,
                supersedes=None if draft.supersedes is None else keys[draft.supersedes],
                language=draft.language,
            )
            for old in order
            for draft in (self.drafts[old],)
        ]
        queries = []
        for n, q in enumerate(self.queries):
            expected = q.expected
            if q.keyword is not None:
                needle = q.keyword.casefold()
                expected = [
                    i
                    for i, d in enumerate(self.drafts)
                    if i not in superseded and needle in d.content.casefold()
                ]
            queries.append(
                BenchQuery(
                    key=f"{self.space}/q{n:03d}",
                    text=q.text,
                    keyword=q.keyword,
                    category=q.category,
                    space=self.space,
                    expected=tuple(sorted(keys[i] for i in expected)),
                    stale=tuple(keys[i] for i in q.stale),
                    kind=q.kind,
                    language=q.language,
                )
            )
        return memories, queries


def build_dataset(seed: int = 7, scale: int = 1) -> Dataset:
    """Memories and queries for `scale` rounds of the five team spaces (see the module docstring)."""
    if scale < 1:
        raise ValueError("scale must be at least 1")
    memories: list[BenchMemory] = []
    queries: list[BenchQuery] = []
    for round_ in range(scale):
        for team in _TEAMS:
            space = team.space if round_ == 0 else f"{team.space}-{round_ + 1}"
            builder = _SpaceBuilder(team, space, seed)
            builder.build()
            space_memories, space_queries = builder.finish()
            memories.extend(space_memories)
            queries.extend(space_queries)
    return Dataset(memories, queries)


def main() -> None:
    parser = argparse.ArgumentParser(description="Print a summary of the retrieval benchmark dataset.")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--scale", type=int, default=1)
    args = parser.parse_args()
    data = build_dataset(args.seed, args.scale)
    print(f"{len(data.memories)} memories, {len(data.queries)} queries in {len(data.spaces)} spaces")
    print("queries by kind:", dict(Counter(q.kind for q in data.queries)))
    print("memories by language:", dict(Counter(m.language for m in data.memories)))
    print("memories by category:", dict(Counter(m.category or "-" for m in data.memories)))


if __name__ == "__main__":
    main()
