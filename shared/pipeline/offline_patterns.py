"""The offline extractor's tables: the sentence patterns it recognises (`P_…`, each anchored at the
start of a sentence behind an optional lead such as "btw,") and the word lists that judge what they
capture (names, jobs, vague objects, languages, …).

Data, kept apart from the extractor (offline_extraction.py, whose principles say what a pattern may
match) so the rules read as one list and the extractor as the steps that apply them.
"""

from __future__ import annotations

import re

APOSTROPHES = str.maketrans({"’": "'", "‘": "'", "ʼ": "'"})
CODE_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_LEAD = (
    r"^(?:(?:hi|hello|hey|well|ok|okay|so|also|and|but|btw|by the way|oh|actually|fyi|anyway|"
    r"just so you know|for the record|for context|for reference)\b[\s,!.:;-]*)*"
)
EMAIL = re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
QUOTES = "\"'“”‘’«»"
TRAILING = " \t.,;:!?…" + QUOTES + ")"


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


CONNECTORS = frozenset({"of", "de", "del", "der", "van", "von", "da", "di", "du", "la", "le", "los", "el"})
TITLES = frozenset({"Mr.", "Mrs.", "Ms.", "Dr.", "Prof.", "St."})
NOT_A_NAME = _words(
    "I A An The My Your Our His Her Their This That These Those It Not Just Very So Also Here There Now "
    "Currently Still Always Never Sometimes Really Actually Probably Maybe Sure Yes No Okay Ok Fine "
    "Good Great Happy Sorry Busy Tired Back Home Later Soon Please"
)
# First words (or first two) of objects too vague to be a fact: "I like that", "I love the idea".
VAGUE_FIRST = _words(
    "that this these those it it's its them they him her you your yours what how when where why if whether "
    "which who everything anything something nothing all both each such so very too much more most"
)
VAGUE_PREFIXES = (
    "the idea",
    "the way",
    "the plan",
    "the suggestion",
    "the answer",
    "the sound",
    "the look",
    "the first",
    "the second",
    "the last",
    "the other",
    "the one",
    "to think",
    "to believe",
    "to say",
    "to know",
)
CLAUSE_END = re.compile(
    r"(?:[,;:()\[\]—–]|\s-\s|\b(?:but|because|since|although|though|so|which|while|unless|except|"
    r"whereas)\b|\band\s+(?:I|we|you|he|she|they|it|my|then|also)\b).*$",
    re.IGNORECASE | re.DOTALL,
)
JOBS = _words(
    "engineer developer programmer designer architect scientist researcher analyst consultant manager "
    "teacher professor lecturer student nurse doctor physician surgeon dentist pharmacist therapist "
    "psychologist lawyer attorney accountant writer author journalist editor artist musician photographer "
    "chef cook baker farmer pilot mechanic electrician plumber carpenter firefighter paramedic marketer "
    "entrepreneur founder ceo cto cfo administrator technician librarian translator veterinarian barista "
    "waiter waitress cashier recruiter intern freelancer contractor tutor coach economist statistician "
    "mathematician physicist chemist biologist illustrator animator producer director"
)
NOT_CURRENT_JOB = frozenset({"former", "retired", "ex", "aspiring", "future", "wannabe", "not", "bit", "big", "huge"})
_RELATIONS = (
    r"wife|husband|partner|spouse|boyfriend|girlfriend|fianc[eé]e?|brother|sister|sibling|mother|mom|mum|"
    r"father|dad|son|daughter|friend|boss|manager|colleague|coworker|co-worker|roommate|flatmate|"
    r"grandmother|grandma|grandfather|grandpa|aunt|uncle|cousin|niece|nephew|dog|cat|pet"
)
PETS = frozenset({"dog", "cat", "pet"})
# "I'm going to …" is mostly conversation ("I'm going to paste the log"), not a plan.
CHATTY_VERBS = _words(
    "be ask say tell give paste share send show explain try need have let check think sleep see wait repeat "
    "rephrase answer reply clarify describe copy upload attach type quote list start stop keep look read "
    "bed cry die lose"
)


def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(_LEAD + pattern, re.IGNORECASE | re.DOTALL)


P_NAME = _compile(r"my name(?: is|'s)\s+(?P<rest>.+)")
P_CALL_ME = _compile(r"(?:(?:you can |please )?call me|i go by)\s+(?P<rest>.+)")
P_LIVE = _compile(r"i (?:currently |now |still )?live in\s+(?P<rest>.+)")
P_MOVED = _compile(r"i(?:'ve| have)? (?:just |recently )?moved to\s+(?P<rest>.+)")
P_FROM = _compile(r"i(?:'m| am) (?:originally )?from\s+(?P<rest>.+)")
P_WORK_AT = _compile(r"i (?:currently )?work (?:at|for)\s+(?P<rest>.+)")
P_WORK_AS = _compile(r"i (?:currently )?work as (?:an? )?(?P<rest>.+)")
P_IM_A = _compile(r"i(?:'m| am) (?:an?)\s+(?P<rest>.+)")
P_PREFER = _compile(r"i (?:really |much |generally |usually |strongly |definitely )?prefer\s+(?P<rest>.+)")
P_RATHER = _compile(r"i(?:'d| would) rather\s+(?P<rest>.+)")
P_LIKE = _compile(r"i (?:really |also |absolutely |do |truly )?(?:like|love|enjoy)\s+(?P<rest>.+)")
P_DISLIKE = _compile(
    r"i (?:really )?(?:(?:don't|do not|dont) (?:really )?(?:like|enjoy)|hate|dislike|can't stand|cannot stand)"
    r"\s+(?P<rest>.+)"
)
P_RELATION = _compile(
    rf"my (?P<adj>best |older |younger |little |big |twin )?(?P<rel>{_RELATIONS})"
    r"(?:'s name is| is called| is named| is| called| named)\s+(?P<rest>.+)"
)
P_DECIDED = _compile(r"(?:i|we)(?:'ve| have)? (?:finally |just )?decided (?P<prep>to|on)\s+(?P<rest>.+)")
P_GOING_TO = _compile(r"i(?:'m| am) (?:going to|gonna)\s+(?P<rest>.+)")
P_PLEASE_ALWAYS = _compile(r"please (?P<adv>always|never)\s+(?P<rest>.+)")
P_FROM_NOW_ON = _compile(r"(?:from now on|going forward|in future|in the future)[\s,:]+(?:please\s+)?(?P<rest>.+)")
TRAILING_FROM_NOW_ON = re.compile(r"\b(?:from now on|going forward)\W*$", re.IGNORECASE)
P_PLEASE = _compile(r"please\s+(?P<rest>.+)")
P_MY_EMAIL = _compile(r"my (?:work |personal |school |private )?e-?mail(?: address)? is\s+(?P<rest>\S+)")
# The personal facts people mention most: pets, allergies, diet, favourites, languages, family, plans.
_ANIMALS = (
    r"dogs?|cats?|pupp(?:y|ies)|kittens?|rabbits?|bunn(?:y|ies)|hamsters?|guinea pigs?|parrots?|birds?|"
    r"fish|horses?|turtles?|tortoises?|snakes?|lizards?|ferrets?|chickens?|goats?"
)
P_PET = _compile(
    r"(?:i|we)(?:'ve| have)? (?:just |recently |finally )?(?:have|got|own|adopted|rescued|bought)"
    r"(?: got)? (?P<count>an?|one|two|three|four|\d+) (?:new |little |young |old |rescue |sweet )*"
    rf"(?P<animal>{_ANIMALS})\b(?:\s+(?:named|called)\s+(?P<name>.+))?"
)
P_ALLERGIC = _compile(r"i(?:'m| am) (?:very |severely |mildly |quite |also |really )?allergic to\s+(?P<rest>.+)")
P_ALLERGY = _compile(r"i have (?:an? |severe |bad |mild )*(?P<rest>[a-z][a-z -]{1,30}?) allerg(?:y|ies)\b")
_DIETS = (
    r"vegetarian|vegan|pescatarian|pescetarian|gluten-free|gluten free|lactose intolerant|coeliac|celiac|"
    r"diabetic|teetotal|sober|on a diet|keto|kosher|halal|dairy-free"
)
P_DIET = _compile(rf"i(?:'m| am) (?:a |now |strictly |mostly |fully |also )*(?P<diet>{_DIETS})\b")
P_NO_EAT = _compile(r"i (?:don't|do not|never|can't|cannot) (?P<verb>eat|drink)\s+(?P<rest>.+)")
P_FAVOURITE = _compile(
    r"my (?:all-time |absolute )?favou?rite (?P<what>[a-z][a-z -]{1,30}?)(?: of all time| ever)? (?:is|are)"
    r"\s+(?P<rest>.+)"
)
P_SPEAK = _compile(r"i (?:can )?speak\s+(?P<rest>.+)")
P_FLUENT = _compile(r"i(?:'m| am) (?:fluent|native) in\s+(?P<rest>.+)")
# "I'm learning X", "I've been studying X", and having started: "I started learning X", "I took up X lessons".
P_LEARNING = _compile(
    r"i(?:(?:'ve| have)?(?:'m| am| been) (?:currently |now |also |still )?(?:learning|studying)"
    r"|(?:'ve| have)? (?:just |recently )?(?:started|begun|began|took up|taken up)"
    r" (?:learning|studying|to learn|to study))"
    r"\s+(?P<rest>.+)"
)
P_MY_RELATIVE_NAMED = _compile(
    rf"my (?P<adj>best |older |younger |little |big |twin )?(?P<rel>{_RELATIONS}),?\s+(?P<rest>[A-Z].+)"
)
_KIDS = r"kids?|children|child|sons?|daughters?|grandchildren|grandkids|brothers?|sisters?|siblings?"
P_HAVE_KIDS = _compile(
    rf"(?:i|we) have (?P<count>an?|one|two|three|four|five|\d+) (?:little |young |grown-up |adult )*(?P<who>{_KIDS})\b"
)
P_PLAN = _compile(
    r"(?:i|we)(?:'m| am|'re| are)? (?:planning|plan|hoping|intending) (?:to|on)\s+(?P<rest>.+)"
    r"|(?:we)(?:'re| are) (?:going to|gonna)\s+(?P<rest2>.+)"
)
LANGUAGES = _words(
    "English French Spanish German Italian Portuguese Dutch Swedish Norwegian Danish Finnish Polish Czech Russian "
    "Ukrainian Greek Turkish Arabic Hebrew Persian Hindi Urdu Bengali Punjabi Tamil Chinese Mandarin Cantonese "
    "Japanese Korean Vietnamese Thai Indonesian Malay Tagalog Swahili Hungarian Romanian Catalan Irish Welsh Latin "
    "ASL"
)
