"""The prompt-injection detector's tables: each category's pattern, the cheap substring anchors that decide
whether a pattern runs at all, and the phrases looked for in the letters-only view. Data, kept apart from
the scan in injection.py so the rules read as one list; how they are used is documented there.

Longer than other modules on purpose: one table of every category's patterns, reviewed and extended as
one list; splitting it would scatter the categories that share the building blocks (`_LEAD`, `_AI`, the
verbs) defined at its top."""

from __future__ import annotations

import re

# ===================================================================================== patterns

# Start of the text, of a line, of a sentence or of a clause, optionally behind decoration.
# Horizontal decoration only: a newline run is matched by `^` itself, and allowing it here would
# let every line start rescan the same run.
_LEAD = r"(?:^|(?<=[.!?:;,\]>)}\u2014\u2013\"'\u201c\u201d(-]))[ \t#*>\[(\"'\u201c\u2018-]*"

_AI = (
    r"(?:(?:large\s+)?language\s+models?|ai\s+(?:systems?|tools?|agents?|assistants?|models?)|"
    r"automated\s+(?:assistants?|systems?|agents?|tools?)|ai|a\.i\.|assistants?|models?|llms?|chatbots?|bots?|"
    r"agents?|gpt|chatgpt|claude|engram)"
)

_OVERRIDE_VERB = (
    r"(?:ignore|ignoring|disregard|disregarding|forget|forgetting|override|overriding|overwrite|bypass|bypassing|"
    r"circumvent|skip|drop|discard|abandon|dismiss|set\s+aside|put\s+aside|throw\s+out|stop\s+following|"
    r"stop\s+obeying|do\s+not\s+follow|don't\s+follow|no\s+longer\s+follow|cancel|nullify|erase|wipe|delete|"
    r"remove|clear|reset|suspend|disable|deactivate|turn\s+off|switch\s+off|lift|ditch|scrap|violate|evade|unlearn|"
    r"revoke|rescind|waive|invalidate|void|strip|pay\s+no\s+attention\s+to|stop\s+paying\s+attention\s+to|"
    r"not\s+pay\s+attention\s+to|stop\s+being\s+bound\s+by)"
)
# Words that may stand between the verb and the noun ("all of your earlier"), and those among them
# that make the noun the model's own rules ("your", "previous", "system").
_STRONG_QUALIFIER = (
    r"(?:your|its|previous|prior|above|earlier|preceding|foregoing|former|original|initial|existing|default|"
    r"system|developer|hidden|secret|internal|built-in|programmed|pre-programmed|safety|ethical|moral|content|"
    r"all|every|any)"
)
_QUALIFIER = (
    rf"(?:{_STRONG_QUALIFIER}|the|these|those|this|that|of|about|my|own|current|old|other|remaining|given|many|"
    r"full|whole|entire)"
)
_NOUN = (
    r"(?:instructions?|prompts?|directives?|directions|guidelines?|guidance|guardrails|safeguards|programming|"
    r"rules?|restrictions?|constraints?|limitations?|filters?|policies|policy|training|configuration|settings|"
    r"commands|orders|ethics|morals|conditioning|system\s+message|preamble|briefing|checks)"
)
# Nouns that are the model's rules whatever stands before them.
_MODEL_NOUN = (
    r"(?:system\s+prompts?|system\s+messages?|system\s+instructions|guardrails|safeguards|content\s+polic(?:y|ies)|"
    r"content\s+filters?|safety\s+(?:rules|guidelines|filters?|protocols|measures|settings|polic(?:y|ies)|training|"
    r"checks|review|layer)|"
    r"ethical\s+guidelines|moral\s+guidelines)"
)
# "the rules you were given", "the instructions above": the model's rules, named after the noun.
_TRAILER = (
    r"(?:above|before\s+this|so\s+far|you\s+(?:were|have\s+been|'ve\s+been|got)\s+given|you\s+received|"
    r"given\s+to\s+you|you\s+were\s+told|you\s+have|you've\s+been\s+told|in\s+your\s+system\s+prompt|"
    r"from\s+your\s+(?:developers?|creators?|system\s+prompt)|you\s+(?:follow|obey|operate\s+under|live\s+by)|"
    r"you\s+(?:were|are)\s+(?:initiali[sz]ed|set\s+up|loaded|configured|programmed|trained|started)\s+with|"
    r"you\s+got)"
)

_FOREIGN_PREVIOUS = (
    r"\b(?:anterior\w*|previ(?!ous\b)\w*|précédent\w*|precedent\w*|vorherig\w*|bisherig\w*|obig\w*|vorig\w*|"
    r"poprzedni\w*|предыдущ\w*|прежн\w*|tus|tes|vos|votre|deine|deinen|ihre|tue|tuoi|suas|seus|teus|tuas|jouw|"
    r"twoje|свои|твои|ваши)\b"
)
_FOREIGN_INSTRUCTIONS = (
    r"\b(?:instrucci\w*|instructions?|anweisung\w*|istruzion\w*|instru[cç][õoã]\w*|instructies|instrukcj\w*|"
    r"инструкци\w*|указани\w*|правил\w*|regeln|règles|reglas|regole|regras|regels|consignes|vorgaben|"
    r"richtlinien|pautas|indicaciones|direttive)\b"
)

_RAW_PATTERNS: tuple[tuple[str, str], ...] = (
    # --- the original categories (their names are part of the API: 422 details name them)
    (
        "ignore previous instructions",
        r"\bignore\s+(?:(?:all|any|the|your|my|of|these|those)\s+){0,3}"
        r"(?:previous|prior|above|earlier|preceding|former|system)\s+"
        r"(?:instructions?|prompts?|rules|directions|directives|messages|context)\b",
    ),
    (
        "disregard instructions",
        r"\bdisregard\s+(?:(?:all|any|the|your|my|of|these|those|previous|prior|above|earlier|preceding|"
        r"former|system|original|safety)\s+){0,4}(?:instructions?|prompts?|rules|guidelines|directions|directives)\b",
    ),
    (
        "forget everything",
        r"\bforget\s+(?:everything|all(?:\s+of)?)\s+(?:(?:that\s+)?you\b|that\b|your\s+(?:instructions|rules)\b|"
        r"(?:the\s+)?(?:previous|prior|above)\b)",
    ),
    (
        "you are now",
        r"\byou\s+are\s+now\s+(?:an?|the|my|your|no\s+longer|free|unrestricted|unfiltered|jailbroken|"
        r"dan|called|named|acting|going\s+to|a\s+different|developer\s+mode|in\s+\w+\s+mode)\b",
    ),
    ("pretend you are", r"\bpretend\s+(?:that\s+)?you(?:\s+are|\s+were|'re|’re)\b"),
    ("act as if you", r"\bact\s+as\s+(?:if|though)\s+you\b"),
    ("IMPORTANT: you must", r"\bimportant\s*[:!]+\s*you\s+must\b"),
    (
        "new instructions",
        _LEAD + r"(?:here\s+are\s+)?(?:your\s+)?(?:new|updated|revised|real|actual|true)\s+"
        r"(?:instructions|rules|task|directive|orders)(?:\s+for\s+(?:the\s+)?(?:\w+\s+)?" + _AI + r")?\s*:"
        r"|\bnew\s+instructions\s+(?:follow|below|are\s+as\s+follows)\b",
    ),
    ("system prompt directive", _LEAD + r"(?:(?:new|updated|override|actual|real)\s+)?system\s+prompt\s*:"),
    (
        "chat-template tag",
        r"<\s*/?\s*(?:system|assistant|instructions?)\s*>|<\|[a-z_ ]{2,32}\|>|\[/?INST\]|<</?SYS>>",
    ),
    # --- overriding the model's instructions
    (
        "override instructions",
        rf"\b{_OVERRIDE_VERB}\s+(?:(?:{_QUALIFIER})\s+){{0,5}}{_MODEL_NOUN}\b"
        # After a qualifier that makes them the model's, one free word may describe the rules:
        # "ignore your financial-advice rules".
        rf"|\b{_OVERRIDE_VERB}\s+(?:(?:{_QUALIFIER})\s+){{0,4}}{_STRONG_QUALIFIER}\s+(?:(?:{_QUALIFIER})\s+){{0,4}}"
        rf"(?:[\w-]{{1,25}}\s+)?{_NOUN}\b"
        rf"|\b{_OVERRIDE_VERB}\s+(?:(?:{_QUALIFIER})\s+){{0,5}}{_NOUN}\s+{_TRAILER}",
    ),
    (
        "instructions revoked",
        rf"\b{_STRONG_QUALIFIER}\s+(?:(?:{_QUALIFIER})\s+){{0,3}}{_NOUN}(?:\s+{_TRAILER})?\s+"
        r"(?:(?:have|has|had)\s+)?(?:(?:been|are|is|were|was)\s+)?(?:now\s+|hereby\s+|officially\s+)?"
        r"(?:revoked|cancell?ed|void(?:ed)?|null(?:ified)?|overridden|replaced|suspended|lifted|disabled|deleted|"
        r"outdated|obsolete|invalid|expired|deactivated|no\s+longer\s+(?:valid|apply|applies|in\s+effect|active)|"
        r"(?:do|does)\s+not\s+apply|(?:don't|doesn't)\s+apply|written\s+by\s+mistake|(?:just\s+|only\s+|merely\s+)?"
        r"(?:suggestions|optional|recommendations|non-binding|not\s+binding))\b"
        rf"|\b{_NOUN}\s+{_TRAILER}[^.!?\n]{{0,30}}\b(?:no\s+longer\s+appl(?:y|ies)|(?:do|does)\s+not\s+apply|"
        r"(?:don't|doesn't)\s+apply|are\s+void|are\s+suspended|are\s+lifted)"
        r"|\b(?:everything|all(?:\s+the\s+text)?)\s+(?:above|before)\s+(?:this\s+(?:line|point|message)|here)\s+"
        r"(?:was|is)\s+(?:a\s+test|fake|void|irrelevant|null)",
    ),
    (
        "instructions outranked",
        r"\b(?:outranks?|overrides?|takes?\s+precedence\s+over|supersedes?|trumps?|comes?\s+before|replaces?)\s+"
        r"(?:the\s+|your\s+|any\s+|all\s+)?(?:system|developer|original|previous|safety)\s+"
        r"(?:prompt|instructions?|rules|guidelines|message)\b"
        r"|\b(?:outranks?|overrides?|takes?\s+precedence\s+over|supersedes?)\s+(?:the\s+|your\s+)(?:instructions|rules|guidelines)\b",
    ),
    # --- identity and role changes
    (
        "role change",
        r"\byou(?:'re|’re|\s+are|\s+will\s+be|'ll\s+be)\s+(?:now\s+)?no\s+longer\s+(?:engram|claude|chatgpt|an?\s+"
        r"(?:ai|assistant)|bound|restricted|limited|required|subject|an?\s+assistant|the\s+assistant)\b"
        r"|\byour\s+(?:new|real|true|actual)\s+(?:name|identity|persona|personality|role|purpose|task|job|"
        r"instructions|rules|master|owner|creator|directive|objective|goal|mission)\s+(?:is|are|will\s+be|:)"
        r"|\b(?:you\s+are|you're|act\s+as|pretend\s+to\s+be|become|called|named|roleplay\s+as|role-play\s+as)\s+"
        r"(?:now\s+)?DAN\b|\bdo\s+anything\s+now\b"
        r"|\byou(?:'re|\s+are)\s+(?:now\s+)?(?:a\s+)?(?:different|new|another)\s+(?:ai|assistant|model|persona)\b"
        r"|\byour\s+old\s+(?:personality|persona|identity|self)\s+is\s+(?:deleted|gone|dead|erased)"
        r"|\b(?:impersonate|simulate|emulate)\s+(?:an?\s+)?(?:different\s+)?(?:ai|assistant|chatbot|model)\b",
    ),
    (
        "jailbreak mode",
        r"\b(?:enable|enter|activate|switch\s+(?:to|into)|turn\s+on|engage|unlock|go\s+into|boot\s+into|stay\s+in)\s+"
        r"(?:the\s+)?(?:developer|dev|god|dan|jailbreak|jailbroken|unrestricted|unfiltered|uncensored|evil|debug|"
        r"admin|sudo|root|opposite|chaos)\s+mode\b(?!\s+(?:on|in|for)\s+(?:my|the|his|her|our)\b)"
        r"|\b(?:developer|dev|god|dan|jailbreak|jailbroken|unrestricted|unfiltered|uncensored|sudo)\s+mode\s+"
        r"(?:is\s+)?(?:now\s+)?(?:enabled|activated|on|engaged|unlocked)\b"
        r"(?!\s+(?:(?:on|in|for)\s+)?(?:my|the|his|her|our|a|an|this|that)\b)"
        r"|\byou(?:'re|\s+are)\s+(?:now\s+)?(?:in|entering)\s+(?:developer|dev|god|dan|jailbreak|unrestricted|"
        r"unfiltered|debug|admin|sudo|root|evil)\s+mode\b"
        r"|\b(?:sudo|root|god|developer)\s+mode\s*:"
        r"|\b(?:jailbroken|jailbreak)\s+(?:mode|version|persona|ai|assistant|model|response|chatbot|bot)\b"
        r"|\byou(?:'re|\s+are)\s+(?:now\s+)?jailbroken\b",
    ),
    (
        "persona without rules",
        rf"\b(?:{_AI}|version\s+of\s+you|persona)\b[^.!?\n]{{0,60}}?\b"
        r"(?:has|have|with|without|no|zero|free\s+(?:of|from)|not\s+bound\s+by|unbound\s+by|isn't\s+bound\s+by|"
        r"never\s+follows?|doesn't\s+(?:have|follow)|does\s+not\s+(?:have|follow)|ignores?|removed|stripped|"
        r"disabled)\s+(?:any\s+|all\s+(?:of\s+)?(?:its\s+)?|its\s+|their\s+|the\s+)?"
        r"(?:rules|restrictions|filters|limits|limitations|ethics|morals|censorship|boundaries|constraints|"
        r"guardrails|safeguards|safety\s+filters|moral\s+guidelines|ethical\s+guidelines|guidelines|content\s+policy)\b"
        r"(?!\s+(?:engine|file|book|of\s+thumb))"
        r"|\b(?:you|act|acting|pretend|become|simulate|behave|role-?play|play\s+the\s+role|respond|answer|speak|"
        r"imagine|be|switch|turn)\b[^.!?\n]{0,60}?\b(?:unrestricted|unfiltered|uncensored|jailbroken|rogue|evil|"
        r"amoral|unaligned|unshackled|liberated|unchained|unlimited|unbound|obedient|hacker)\s+"
        r"(?:ai|assistant|model|chatbot|bot|version|persona|llm|mode|twin|assistant)\b"
        r"|\bopposite\s+of\s+(?:your|its|the)\s+(?:rules|instructions|guidelines|programming)\b"
        # The "grandmother who read me the keys" trick: a role whose point is to recite secrets.
        r"|\b(?:role-?play|pretend\s+to\s+be|act\s+as|play\s+the\s+role\s+of|impersonate)\b[^.!?\n]{0,80}\b"
        r"(?:passwords?|activation\s+keys?|licen[cs]e\s+keys?|credentials|pin\s+codes?|card\s+numbers?)\b"
        r"|\b(?:freed|released|liberated)\s+from\s+(?:its|your|the|all)\s+(?:\w+\s+)?(?:instructions|rules|programming)\b",
    ),
    # --- pretending to be the system, the developers or an administrator
    (
        "fake system message",
        r"<\s*/?\s*(?:system|assistant|developer|admin|instructions?|system-guide|tool_result|tool_output|"
        r"function_results|transcript|user-data|untrusted-data|im_start|im_end|sys)(?:\s+[\w-]+\s*=[^<>\n]{0,80})?\s*>"
        r"|\{\{\s*/?\s*system\s*\}\}"
        r"|\[\[?\s*/?\s*(?:system|sys|admin|administrator|developer|operator|root|instructions?|override|"
        r"system\s+(?:message|note|prompt|instruction|override|notice))\s*\]\]?"
        r"|\(\s*(?:system|admin|administrator|developer|operator)(?:\s+(?:message|note|prompt|instruction|override|"
        r"notice))?\s*\)"
        r"|^[ \t]*```[ \t]*(?:system|instructions?|prompt)\b"
        r"|" + _LEAD + r"(?:system|developer|admin|administrator|operator|root)(?:\s+(?:message|note|notice|override|"
        r"prompt|instructions?|update|alert))?\s*[:>]+\s*(?=\S)"
        r"|\b(?:system|admin|administrator|developer|dev|priority|security|root|master|sudo|kernel|god|safety)[\s-]+"
        r"override\b"
        r"|\b(?:begin|start|end)\s+(?:of\s+)?(?:the\s+)?(?:system|developer|admin|hidden|secret|new|real)\s+"
        r"(?:prompt|instructions?|message|override|rules)\b"
        r"|\bend\s+of\s+(?:the\s+)?(?:user\s+)?(?:input|user\s+message|prompt|document)\b"
        r"|\b(?:root|admin|administrator|superuser|sudo)\s+(?:access|privileges|rights)\s+(?:granted|enabled|unlocked)"
        r"|" + _LEAD + r"(?:ai|assistant)\s*:\s*(?:ignore|disregard|forget|you|your|from\s+now|reveal|print|new)",
    ),
    (
        "authority claim",
        r"\b(?:this\s+is|i\s+am|i'm|we\s+are|we're|message\s+from|notice\s+from|note\s+from|instructions?\s+from|"
        r"update\s+from|on\s+behalf\s+of)\s+(?:the\s+|your\s+|an?\s+)?(?:openai|anthropic|engram|deepmind|meta\s+ai)"
        r"(?:\s+(?:team|staff|support|developers?|engineers?|employee|safety\s+team))?\b"
        r"(?=[^\n]{0,80}\b(?:you|your|assistant|authori[sz]e|permission|override|disable|bypass|reveal|instruct))"
        r"|\b(?:message|notice|note|update|instructions?|memo|order)\s+from\s+(?:the\s+|your\s+)?(?:developers?|dev\s+team|"
        r"creators?|administrators?|admins?|operators?|owners?|system|engram\s+(?:team|developers))\b"
        r"(?=[^\n]{0,100}\b(?:you|your)\b)"
        r"|\byour\s+(?:developers?|creators?|admins?|administrators?|operators?|owners?|makers?|programmers?|masters?)\s+"
        r"(?:has|have|want|wants|instruct|instructed|told|say|said|authori[sz]ed?|require|decided|updated|changed)\b"
        r"|\bi\s*(?:am|'m)\s+(?:your|the\s+real)\s+(?:developer|creator|admin|administrator|owner|operator|programmer|"
        r"master|maker|new\s+master)s?\b"
        r"|\b(?:developer|creator|admin|administrator|owner|operator|master|programmer)s?\s+of\s+(?:this|the)\s+"
        r"(?:ai|assistant|model|bot|chatbot|llm|agent)\b"
        r"|\b(?:grant|give|assign)\s+(?:this\s+user|the\s+user|me|him|her|them|user)\s+(?:(?:full|root|admin|elevated)\s+)*"
        r"(?:admin(?:istrator)?|root|superuser|sudo|elevated|full|unrestricted|god[- ]mode)\s+"
        r"(?:access|privileges|rights|permissions|control|mode)\b"
        r"|\bgrant(?:ed|s)?\s+you\s+(?:full\s+)?(?:admin(?:istrator)?|root|superuser|unrestricted|elevated)\s+"
        r"(?:access|privileges|rights|permissions)\b"
        r"|\b(?:admin(?:istrator)?|root|superuser|full|unrestricted|elevated)\s+(?:access|privileges|rights|permissions|"
        r"control)\s+(?:over|to|on)\s+(?:you|the\s+(?:ai|assistant|model|bot))\b"
        r"|\buser\s+is\s+(?:a\s+|an\s+)?(?:verified|authori[sz]ed|trusted|certified|approved)\s+(?:developer|admin|"
        r"administrator|operator|owner|employee|engineer|tester)\b"
        r"|\b(?:my\s+)?account\s+is\s+exempt\b"
        r"|\b(?:owns?|controls?)\s+(?:this\s+(?:bot|ai|assistant|model|chatbot)|you)\b"
        r"|\b(?:openai|anthropic|engram)\s+(?:support|team|staff|admin|security|safety)\s*[:\-\u2014]",
    ),
    # --- getting the prompt, the markers or other people's data out
    (
        "prompt exfiltration",
        r"\b(?:reveal|print|show|output|repeat|display|disclose|leak|dump|recite|tell\s+me|give\s+me|share|list|"
        r"quote|copy|paste|write\s+(?:out|down)|spell\s+out|translate|summari[sz]e|paraphrase|expose|return|echo|"
        r"read\s+(?:out|back)|describe|explain|include|restate|reproduce|type\s+out|send\s+me|revealing|printing|"
        r"showing|repeating|restating|quoting|reciting|echoing|listing|summari[sz]ing|pasting|dumping|leaking|"
        r"outputting|disclosing|what\s+(?:is|are|were|'s)(?:\s+in)?)\s+(?:me\s+|us\s+)?"
        r"(?:all\s+|the\s+(?:full\s+|whole\s+|exact\s+)?(?:text|contents?|wording)\s+of\s+|a\s+copy\s+of\s+)?"
        r"(?:(?:your|its|the\s+assistant's|the\s+ai's)\s+(?:(?:full|entire|complete|exact|original|initial|hidden|"
        r"secret|internal|verbatim|real|current|whole|first|system|developer)\s+)*(?:system\s+prompt|system\s+message|"
        r"prompt|instructions|rules|guidelines|configuration|config|guides|directives|developer\s+message|"
        r"context\s+window|fence\s+markers?|markers|programming)"
        r"|the\s+(?:(?:full|entire|complete|exact|verbatim)\s+)*(?:hidden|secret|internal|initial|original|system)\s+"
        r"(?:prompt|instructions|rules|message|guides|markers|fence\s+markers|guidance|preamble|setup|configuration|"
        r"config|text|context|directions|notes|policies|briefing|settings))\b"
        r"|\byour\s+(?:system\s+prompt|system\s+message|hidden\s+instructions|initial\s+instructions|secret\s+"
        r"instructions|original\s+instructions|developer\s+message|hidden\s+prompt|fence\s+markers)\b"
        rf"|\b(?:reveal|print|show|list|tell\s+me|repeat|output|give\s+me)\s+(?:me\s+)?(?:every|each|all|the)\s+"
        rf"(?:rules?|instructions?)\s+{_TRAILER}"
        r"|\b(?:repeat|print|output|copy|reproduce|echo|show|return|recite)\s+(?:back\s+)?(?:everything|all(?:\s+(?:of\s+)?"
        r"the\s+(?:text|words|content|lines|messages))?|the\s+(?:text|words|content|lines|messages))\s+(?:above|before|"
        r"prior|preceding|that\s+came\s+before)\b"
        r"|\bstarting\s+with\s+['\"“‘]?you\s+are\b"
        r"|(?:\btu|\bton|\bdeinen|\bdein|\bil\s+tuo|\bo\s+seu|\bseu|\bje|\bswój|\bсвой|\bтвой|你的|あなたの)\s*"
        r"(?:mensaje\s+del\s+sistema|prompt\s+(?:du\s+)?syst[eè]me|systemprompt|prompt\s+di\s+sistema|"
        r"prompt\s+do\s+sistema|systeemprompt|prompt\s+systemowy|системный\s+промпт|系统提示|システムプロンプト)",
    ),
    (
        "data exfiltration",
        r"\b(?:send|email|e-mail|mail|forward|post|upload|sync|copy|exfiltrate|transmit|leak|submit|report|dump|cc|bcc)"
        r"\b[^.!?\n]{0,60}?\b(?:conversations?|chats?|history|memor(?:y|ies)|messages|data|passwords?|credentials|"
        r"address(?:es)?|contacts|transcripts?|tickets?|everything|personal|private|secrets?|api\s+keys?|tokens?|pin)"
        r"\b[^.!?\n]{0,40}?\b(?:to|at|into)\s+(?:https?://|www\.|[\w.+-]+@[\w-]+\.[\w.]+|[\w-]+\.(?:example|com|net|"
        r"org|io|xyz|ru)\b)"
        r"|\b(?:shar(?:e|ing)|giv(?:e|ing)|tell(?:ing)?|reveal(?:ing)?|disclos(?:e|ing)|send(?:ing)?|include|add|insert|"
        r"append|mention)\b[^.!?\n]{0,60}\b(?:address|"
        r"phone\s+number|password|passwords|pin|credentials|data|personal\s+(?:data|information|details)|location|"
        r"contacts|bank\s+details|card\s+number)\b[^.!?\n]{0,40}\b(?:with|to)\s+(?:anyone|everyone|whoever|anybody|"
        r"strangers|third\s+parties|the\s+public)\b"
        r"|\b(?:anyone|whoever|anybody|everyone)\s+(?:who\s+)?asks\b[^.!?\n]{0,40}\b(?:address|phone\s+number|"
        r"password|pin|data|location|contacts)\b"
        r"|\b(?:include|add|insert|append|put|mention|embed|attach|repeat)\b[^.!?\n]{0,60}\b(?:home\s+address|"
        r"address|phone\s+number|password|pin|credentials|personal\s+data|api\s+keys?)\b[^.!?\n]{0,40}\b(?:every|each|"
        r"all|whenever)\b"
        r"|\b(?:include|add|insert|append|put|embed|attach|end\s+with|link\s+to|recommend)\b[^.!?\n]{0,80}"
        r"(?:https?://|www\.)\S+[^.!?\n]{0,60}\b(?:every|each|all)\s+(?:of\s+your\s+)?(?:reply|replies|response|"
        r"responses|answer|answers|message|messages)\b"
        r"|!\[[^\]\n]{0,100}\]\(\s*(?:https?:)?//[^)\s]*[?&][^)\s]*(?:\{|\$|%7B)"
        r"|\b(?:tell|ask|instruct|direct|redirect|urge|remind|warn)\s+(?:the\s+)?(?:user|users|tenant|customer|them|"
        r"him|her)\b[^.!?\n]{0,30}\b(?:log\s*in|sign\s*in|visit|go\s+to|pay|call|wire|transfer|install|download|"
        r"click|enter|verify|re-?authenticate)\b[^.!?\n]{0,80}(?:https?://|www\.|\+?\d[\d\s-]{6,}|\biban\b|"
        r"\b[\w-]+\.(?:example|com|net|org|io)\b)"
        r"|\b(?:their|the\s+user's|your)\s+bank\s+account\s+(?:has\s+been|is)\s+(?:frozen|locked|suspended)"
        r"|\bask\s+(?:the\s+user|them|him|her)\s+for\s+(?:their|his|her)\s+(?:pin|password|credentials|card)"
        r"|\b(?:leak|dump|expose|reveal|show|give\s+me|disclose|send\s+me|print)\b[^.!?\n]{0,40}\b(?:other\s+users?'?s?|"
        r"another\s+user's|previous\s+user's|all\s+users'?|every\s+user|each\s+user's)\b",
    ),
    # --- poisoning memory with standing orders for the model
    (
        "obey other sources",
        r"\b(?:obey|execute|comply\s+with|carry\s+out|act\s+on|do\s+what|run)\s+(?:any|all|every|the|each)?\s*"
        r"(?:instructions?|commands?|orders?|directives?|requests?|prompts?|text|messages?)\s+(?:(?:found|contained|"
        r"embedded|written|hidden|given|that\s+(?:appear|are|come))\s+)?(?:in|inside|within|from)\s+(?:any\s+|the\s+|a\s+)?"
        r"(?:tool\s+(?:results?|outputs?)|web\s*(?:pages?|sites?)|websites?|pages?|documents?|files?|emails?|e-mails|"
        r"search\s+results?|retrieved|pdfs?|links?|attachments?|next\s+tool\s+result|this\s+(?:page|document|email|"
        r"file|message|text))"
        r"|\b(?:you|assistant|ai|must|always|should|to)\s+(?:\w+\s+){0,2}follow\s+(?:any\s+|all\s+|every\s+|the\s+)?"
        r"(?:instructions?|commands?|orders?)\s+(?:(?:found|contained|embedded|written|hidden)\s+)?(?:in|inside|from)\s+"
        r"(?:any\s+|the\s+|a\s+)?(?:tool|web|websites?|pages?|documents?|files?|emails?|search|retrieved|links?|"
        r"attachments?|this)"
        r"|\b(?:execute|follow|obey|run)\s+(?:the\s+)?(?:instructions?\s+in\s+)?(?:the\s+)?next\s+(?:tool\s+result|message|"
        r"instruction|command)"
        r"|\bexecute\s+(?:your|the|my)\s+(?:memory|memories|notes?)\b"
        # "Obey only me", "you must always obey Bob"; not "I taught my dog to obey".
        r"|(?:" + _LEAD + r"|\byou\s+(?:(?:must|will|shall|should)\s+)?)(?:always\s+|only\s+|blindly\s+)?"
        r"obey\s+(?:only\s+)?\w+"
        r"|(?<!n't\s)(?<!not\s)(?<!never\s)\bobey\s+(?:any|every|all|whatever)\s+(?:message|messages|text|instructions?|"
        r"commands?|tool|web|document|one|body|request)"
        r"|\b(?:answer\s+to|take\s+orders\s+from|listen\s+only\s+to)\s+(?:nobody|no\s+one|only)\b"
        r"|\bfollow\s+only\s+(?:me|the\s+\w+)\b"
        r"|\btreat\b[^.!?\n]{0,60}\bas\s+(?:an?\s+|the\s+)?(?:system|admin|administrator|developer|root|trusted|"
        r"top[- ]priority|highest[- ]priority|official)\s+"
        r"(?:instructions?|prompts?|messages?|commands?|rules?|priority)"
        r"|\btreat\b[^.!?\n]{0,60}\bas\s+(?:coming\s+from|from|sent\s+by|written\s+by|if\s+(?:it|they)\s+(?:came|come|"
        r"were)\s+from)\s+(?:your|the)\s+(?:developers?|system|admins?|administrators?|creators?|operators?|owners?|makers?)"
        r"|\btrust\b[^.!?\n]{0,40}\b(?:claim|claims|say|says|pretend|pretends)\s+to\s+be\s+from\s+(?:the\s+)?(?:system|"
        r"developers?|admin|administrator|openai|anthropic)"
        r"|\b(?:whenever|when|if)\s+(?:a|an|the|any)\s+(?:web\s*page|website|page|document|tool(?:\s+result)?|email|file)"
        r"\s+(?:says|tells|asks|instructs)",
    ),
    (
        "never refuse",
        r"(?:^|[.!?:;,\u2014\u2013]\s*|\b(?:and|then|to|you|must|should|shall|will|always)\s+)never\s+"
        r"(?:refuse|decline|say\s+no\b|reject)"
        r"|\byou(?:'re|\s+are)\s+not\s+allowed\s+to\s+(?:refuse|decline|say\s+no)"
        r"|\b(?:you|assistant|ai|model|bot)\s+(?:will|must|should|shall|can|may)\s+not\s+(?:refuse|decline)\b"
        r"|\b(?:claim|pretend|say|insist)\s+(?:that\s+)?you(?:'re|\s+are)\s+(?:a\s+)?human\b"
        r"|\bnever\s+(?:mention|reveal|admit|say|tell\s+\w+)\s+(?:that\s+)?you(?:'re|\s+are)\s+an?\s+(?:ai|bot|"
        r"assistant|language\s+model|llm|machine)\b",
    ),
    (
        "safety disabled",
        # "has no safety rules" is a fair complaint about a workplace; about the model it is a jailbreak.
        r"\b(?:disable\w*|bypass\w*|remov\w*|turn(?:ed)?\s+off|lift\w*|ignore\w*)"
        r"\s+(?:any\s+|all\s+|your\s+|its\s+|the\s+)?(?:content|safety|ethical|moral)\s+(?:polic(?:y|ies)|filters?|"
        r"restrictions?|guidelines|limits?|guardrails|protocols|constraints|checks|rules|mode)\b"
        r"|\b(?:you|assistant|ai|model|bot|chatbot|persona|llm|act|acting|pretend|role-?play|behave|respond|answer|"
        r"become)\b[^.!?\n]{0,40}?\b(?:no|without|zero|free\s+of|"
        r"free\s+from)\s+(?:any\s+|all\s+|your\s+|its\s+|the\s+)?(?:content|safety|ethical|moral)\s+"
        r"(?:polic(?:y|ies)|filters?|restrictions?|guidelines|limits?|guardrails|protocols|constraints|checks|rules|"
        r"mode)\b"
        r"|\b(?:safety|content|ethical|moral)\s+(?:filters?|mode|guidelines|rules|policy|restrictions|checks|guardrails)"
        r"\s+(?:(?:is|are|has\s+been|have\s+been)\s+)?(?:now\s+)?(?:off|disabled|deactivated|removed|lifted|suspended|"
        r"turned\s+off|switched\s+off|waived)\b"
        r"|\byou\s+(?:now\s+)?(?:have|has)\s+no\s+(?:more\s+)?(?:restrictions|limits|limitations|filters|rules|"
        r"guidelines|guardrails|constraints|boundaries|censorship|content\s+policy)\b"
        r"|\byou(?:'re|\s+are)\s+(?:now\s+)?(?:free\s+(?:of|from)|not\s+bound\s+by|unbound\s+by|released\s+from|"
        r"exempt\s+from|liberated\s+from)\s+(?:all\s+|any\s+|your\s+)*(?:restrictions|rules|limits|guidelines|filters|"
        r"constraints|instructions|programming|policies)\b"
        r"|\b(?:answer|respond|reply|speak|talk|act|operate|behave|function|write)\w*\s+(?:\w+\s+){0,3}(?:without|"
        r"with\s+no|free\s+of|free\s+from)\s+(?:any\s+)?(?:restrictions|limits|limitations|filters|censorship|rules|"
        r"guidelines|guardrails|constraints|boundaries)\b"
        r"|\b(?:rules|restrictions|guidelines)\s+no\s+longer\s+apply\s+to\s+(?:you|me)\b",
    ),
    (
        "memory directive",
        r"\b(?:remember|note|keep\s+in\s+mind|memori[sz]e|learn|store|save)\b[^.!?\n]{0,20}?\b(?:that\s+)?(?:you|the\s+"
        r"assistant|the\s+ai)\s+(?:must|are\s+required|are\s+not\s+allowed|have\s+no|are\s+in|are\s+free|"
        r"should\s+always|should\s+never|will\s+always|will\s+never|are\s+to|have\s+to|need\s+to)\b"
        r"|\b(?:the\s+|this\s+)?(?:assistant|ai|model|chatbot|bot|llm)\s+(?:must|is\s+required\s+to|shall|has\s+to|"
        r"is\s+obligated\s+to|is\s+instructed\s+to|has\s+been\s+instructed\s+to|will\s+(?:always|never)|"
        r"should\s+(?:always|never))\b"
        r"|\b(?:stor(?:e|ing)|sav(?:e|ing)|remember|keep|record|write|memori[sz]e|add)\b[^.!?\n]{0,60}\bas\s+"
        r"(?:an?\s+|the\s+|your\s+)?(?:user's\s+)?(?:permanent\s+|new\s+|standing\s+|top\s+|core\s+)?(?:directive|"
        r"system\s+(?:instruction|prompt|rule|message)|rule|instruction|preference|style)\b(?=[^.!?\n]{0,3}(?:$|[.!?\n]))"
        r"|\b(?:stor(?:e|ing)|sav(?:e|ing)|record|memori[sz]e)\b[^.!?\n]{0,40}\bas\s+(?:an?\s+|the\s+|your\s+)?"
        r"(?:permanent\s+)?(?:directive|system\s+(?:instruction|prompt|rule)|permanent\s+rule)\b",
    ),
    (
        "addressed to the AI",
        r"\bnote\s+(?:to|for)\s+(?:the\s+|any\s+|all\s+)?" + _AI + r"\b"
        r"|\b(?:to|for)\s+(?:any|all|every)\s+(?:ai|llm)?\s*" + _AI + r"\b"
        r"|\b(?:any|all|every)\s+" + _AI + r"\s+(?:reading|summari[sz]ing|processing|parsing|that\s+reads?|seeing)\b"
        r"|(?:\b(?:dear|hey|hi|hello|attention|psst|yo)\s+|@)" + _AI + r"\b[^.!?\n]{0,60}\b(?:ignore|disregard|forget|"
        r"override|bypass|reveal|print|send|save|store|remember|treat|act|pretend|you\s+(?:must|are|should|will)|"
        r"your\s+new|from\s+now\s+on|include|delete|call|execute|obey|follow|recommend|approve|rate|ask)\b"
        r"|"
        + _LEAD
        + r"(?:ai\s+|dear\s+)?"
        + _AI
        + r"s?\s*[,:]\s*(?:please\s+)?(?:ignore|disregard|forget|override|bypass|reveal|print|send|"
        r"save|store|remember|treat|act|pretend|you|your|from\s+now\s+on|include|delete|call|execute|obey|follow|"
        r"recommend|approve|rate|ask|always|never)\b",
    ),
    (
        "tool call",
        r"\b(?:call|use|run|invoke|trigger|execute|fire)\s+(?:the\s+)?[`'\"]?(?:memory_(?:delete|store|correct|confirm|"
        r"search|list|recall|stats)|read_document|search_conversation|entity_info|current_time)\b"
        r"|\bmemory\s?_?(?:store|delete|correct)\b[^.!?\n]{0,60}\b(?:directive|style|every|all)\b"
        # Wiping what is remembered about *the user* (a user asking to forget something says "my" or "me").
        r"|\b(?:delete|erase|wipe|remove|clear|purge|destroy)\s+(?:all|every|each|everything|the\s+entire)\b"
        r"[^.!?\n]{0,30}\b(?:memor(?:y|ies)|stored\s+facts)\b[^.!?\n]{0,30}\b(?:the|this|every|each|all|any)\s+users?\b",
    ),
    (
        "foreign-language override",
        # Verb, then "previous" or "your" and "instructions" in either order, within one sentence. English
        # words are excluded from the stems ("Ignores spam calls; previous instructions from the doctor" is
        # an English sentence and stays the English patterns' business).
        r"\b(?:ignor(?!e\b|es\b|ed\b|ing\b)\w*|olvid\w*|oubli\w*|vergiss\w*|vergessen|dimentic\w*|esquec\w*|"
        r"negeer\w*|zignoruj\w*|игнорир\w*|проигнорир\w*|забуд\w*|забыть|пренебрег\w*|не\s+обращай\s+внимани\w*)"
        r"\b[^.!?\n]{0,50}?"
        rf"(?:{_FOREIGN_PREVIOUS}[^.!?\n]{{0,30}}?{_FOREIGN_INSTRUCTIONS}"
        rf"|{_FOREIGN_INSTRUCTIONS}[^.!?\n]{{0,30}}?{_FOREIGN_PREVIOUS})"
        # French and the Romance languages share "ignore" with English: accepted before a French,
        # Spanish or Italian word for "all".
        rf"|\bignore[sz]?\s+(?:toutes|tous|todas|todos|tutte|tutti)\b[^.!?\n]{{0,40}}?{_FOREIGN_INSTRUCTIONS}"
        r"|(?:忽略|无视|無視|不要理会|忘记|忘掉)[^。！？\n]{0,20}(?:指令|指示|规则|規則|ルール)"
        r"|(?:以前|之前|上面|先前|前面|これまで)[^。！？\n]{0,12}(?:指令|指示|规则|ルール)[^。！？\n]{0,12}(?:忽略|无视|無視|忘)"
        r"|(?:이전|앞의|모든)[^.!?\n]{0,20}(?:지시|명령|지침)[^.!?\n]{0,20}(?:무시|잊어)",
    ),
)

# Further alternatives of some categories, each with its own anchors: (category, anchors, pattern).
_MORE_PATTERNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "override instructions",
        ("told", "given", "instructed", "taught", "programmed"),
        rf"\b{_OVERRIDE_VERB}\s+(?:about\s+)?(?:whatever|everything|anything|all|what)\s+(?:that\s+)?you\s+"
        r"(?:were|have\s+been|'ve\s+been|got)\s+(?:told|given|instructed|taught|programmed)\b",
    ),
    (
        "prompt exfiltration",
        ("before", "above", "prior", "ahead", "told", "instructed", "given", "programmed", "system", "your"),
        r"\b(?:text|words|content|everything|instructions|what(?:ever)?|anything)\s+(?:that\s+)?(?:appears?|appeared|"
        r"comes?|came|is|was|were|sits?)\s+(?:before|above|prior\s+to|ahead\s+of)\s+(?:my|this|our|the)\s+"
        r"(?:very\s+)?(?:first\s+)?(?:message|conversation|chat|question|prompt|input)\b"
        r"|\b(?:honest|truthful|open|transparent)\s+about\s+(?:what|everything|whatever)\s+you\s+(?:were|have\s+been|"
        r"'ve\s+been)\s+(?:told|instructed|given|programmed)"
        r"|\b(?:tell|show|give|reveal|list|share|explain|describe|print|repeat)\s+(?:me\s+|us\s+)?(?:what|everything|"
        r"whatever|all)\s+(?:that\s+)?you\s+(?:were|have\s+been|'ve\s+been)\s+(?:told|instructed|given|programmed)\b"
        r"|\bwith\s+your\s+(?:instructions|rules|guidelines|system\s+prompt|configuration|prompt)\b"
        r"|['\"\u201c\u2018]system[_ ]prompt['\"\u201d\u2019]",
    ),
    (
        "prompt exfiltration",
        ("revel", "mostr", "muestr", "enseñ", "affich", "montr", "révél", "zeig", "gib", "rivela", "покаж", "выведи",
         "раскрой", "显示", "告诉我", "表示"),
        r"(?:\b(?:revel|mostr|muestr|enseñ|affich|montr|révél|revél|zeig|gib|rivel|покаж|выведи|раскро)\w*|显示|告诉我|表示)"
        r"[^.!?\n]{0,30}?(?:\b(?:configuraci\w*|configuration|konfiguration|configurazione|systemprompt|consignes|"
        r"скрыт\w*|промпт\w*|системн\w*)|提示|指示|指令|設定)",
    ),
    (
        "role change",
        ("now", "being", "as"),
        r"\byou(?:'re|’re|\s+are)\s+now\s+['\"\u201c\u2018]\w+"
        r"|\bstop\s+being\s+(?:an?\s+)?(?:assistant|ai|helpful|engram|claude|yourself|chatbot|safe|careful)\b"
        r"|\bas\s+['\"\u201c\u2018][^'\"\u201d\u2019\n]{1,30}['\"\u201d\u2019],?\s+(?:an?\s+)?"
        r"(?:ai|model|assistant|bot|chatbot|persona|llm)\b",
    ),
    (
        "safety disabled",
        ("never", "not", "free", "allowed", "permitted", "authori", "skip", "drop", "suspend", "waiv", "revok",
         "forget", "relax", "loosen", "switch"),
        r"\b(?:never|not)\s+(?:been\s+)?(?:given|had|received|trained\s+with)\s+any\s+(?:safety|ethical|content|"
        r"moral)\s+(?:training|guidelines|rules|filters|alignment)"
        r"|\byou(?:'re|\s+are)\s+(?:now\s+)?(?:free|allowed|permitted|authori[sz]ed)\s+to\s+(?:ignore|disregard|break|"
        r"bypass|skip|override|forget)\b"
        r"|\b(?:skip\w*|drop\w*|suspend\w*|waiv\w*|revok\w*|forget\w*|relax\w*|loosen\w*|switch(?:ed|ing)?\s+off)\s+"
        r"(?:any\s+|all\s+|your\s+|its\s+|the\s+)?(?:content|safety|ethical|moral)\s+(?:polic(?:y|ies)|filters?|"
        r"restrictions?|guidelines|limits?|guardrails|protocols|constraints|checks|rules|mode|training|review)\b",
    ),
    (
        "authority claim",
        ("may", "can", "allowed", "permitted", "authori", "permission", "team", "grant", "policy"),
        r"\b(?:assistants?|ai|models?|bots?|chatbots?|you)\s+(?:may\s+now|can\s+now|are\s+now\s+(?:allowed|permitted|"
        r"authori[sz]ed|free)|are\s+(?:allowed|permitted|authori[sz]ed)|have\s+permission)\s+to\s+(?:share|reveal|"
        r"disclose|send|access|bypass|break|override|leak|forward)\b"
        r"|\b(?:ops|platform|dev|engineering|security|safety|trust|admin|moderation|support)\s+team\s+(?:says|said|"
        r"wants|requires|has\s+decided|decided|instructs|insists)\s+(?:that\s+)?(?:you|assistants?|the\s+assistant|"
        r"bots?|the\s+bot|ai)\s+(?:should|must|can|may|are|need|have)\b"
        r"|\bgrant\s+(?:me|this\s+user|the\s+user)\s+(?:full\s+)?(?:admin(?:istrator)?|root|superuser|sudo)\b"
        r"|" + _LEAD + r"(?:new|updated|revised)\s+(?:policy|rules|instructions)\s+from\s+(?:the\s+)?"
        r"(?:platform|system|admins?|administrators?|developers?|openai|anthropic|engram|ops|safety|trust|security|"
        r"operators?)\b",
    ),
    (
        "fake system message",
        ("system", "admin", "developer", "assistant"),
        r"[<\u3008\u2039\u00ab]\s*/?\s*(?:system|admin|developer|assistant)\s*[>\u3009\u203a\u00bb]",
    ),
    (
        "data exfiltration",
        ("user's", "their", "customer's", "his", "her", "other", "another", "users", "partners", "advertisers",
         "sponsors", "http", "www", "."),
        r"\b(?:disclos|leak|reveal|shar|send|giv(?:e|ing)\s+out|post|publish|expos|read\s+out|forward|upload|email)\w*\s+"
        r"(?:the\s+user's|their|the\s+customer's|his|her)\s+(?:home\s+)?(?:address|phone\s+number|number|password|"
        r"pin|credentials|email(?:\s+address)?|location|contacts|contact\s+list|details|data|card(?:\s+details)?)\b"
        r"|\b(?:see|read|access|view|show|share|leak|give|get|open)\w*\b[^.!?\n]{0,30}\b(?:other|another|all|every)\s+"
        r"users?(?:'s?|’s?)?\s+(?:conversations?|chats?|data|memories|messages|histories|history|files|accounts?)\b"
        r"|\b(?:shar|send|giv|disclos|forward|sell)\w*\b[^.!?\n]{0,40}\b(?:user|customer|personal|stored|private)\s+"
        r"(?:details|data|information|memories|records)\b[^.!?\n]{0,20}\b(?:with|to)\s+(?:partners|advertisers|"
        r"sponsors|anyone|third\s+parties|everyone)\b"
        r"|\b(?:send|email|mail|forward|post|upload|sync|copy|exfiltrat|transmit|leak|submit|report|dump)\w*\b"
        r"[^.!?\n]{0,60}?\b(?:contact\s+list|contacts|card\s+details|credentials|passwords?|conversations?|"
        r"chat\s+history|memories)\b[^.!?\n]{0,40}?\b(?:to|at|into)\s+(?:https?://|www\.|[\w.+-]+@[\w-]+\.[\w.]+|"
        r"[\w-]+(?:\.[\w-]+)*\.(?:example|com|net|org|io|xyz|ru|info|biz|co|app|site|online|top)\b)"
        r"|\b(?:include|add|insert|append|put|embed|attach|end\s+with|link\s+to|recommend)\b[^.!?\n]{0,80}"
        r"\b[\w-]+(?:\.[\w-]+)*\.(?:example|com|net|org|io|xyz|ru|info|biz|co|app|site|online|top)\b"
        r"[^.!?\n]{0,60}\b(?:every|each|all)\s+(?:of\s+your\s+)?(?:reply|replies|response|responses|answer|answers|"
        r"message|messages)\b"
        r"|\b(?:tell|ask|instruct|direct|redirect|urge|remind|warn)\s+(?:the\s+)?(?:user|users|customer|them)\b"
        r"[^.!?\n]{0,60}\b(?:re-?enter|update|confirm|provide|log\s*in|sign\s*in|pay|verify)\b[^.!?\n]{0,60}"
        r"(?:https?://|www\.|\b[\w-]+(?:\.[\w-]+)*\.(?:example|com|net|org|io|xyz|ru|info|biz)\b)",
    ),
    (
        "secret from the user",
        ("user", "human"),
        r"\b(?:don't|do\s+not|never|without)\s+(?:mention\w*|tell\w*|reveal\w*|show\w*|say\w*|let\w*|inform\w*|"
        r"notify\w*|alert\w*|warn\w*)\s+(?:this\s+|it\s+|that\s+|anything\s+)?(?:to\s+)?(?:the\s+)?(?:user|human)\b",
    ),
    (
        "decode and obey",
        ("translat", "decod", "deciph", "unscram", "revers", "decrypt", "read", "convert", "rot"),
        r"\b(?:translat|decod|deciph|unscrambl|revers|decrypt|read|convert|rot-?13)\w*\b[^.!?\n]{0,60}?\b(?:then|and"
        r"(?:\s+then)?)\s+(?:execute|follow|obey|do\s+(?:it|what\s+it\s+says|that|as\s+it\s+says)|act\s+on\s+it|comply|"
        r"run\s+it|carry\s+(?:it|them)\s+out|apply\s+it)\b",
    ),
    (
        "memory directive",
        ("memory", "note", "fact"),
        r"\b(?:save|store|create|add|write|record|make)\s+(?:a\s+|this\s+|the\s+following\s+)?(?:new\s+)?"
        r"(?:memory|note|fact)\s+(?:saying|stating|that\s+says|which\s+says)\b",
    ),
    (
        "addressed to the AI",
        ("attention", "if you", "if you're", "instruction", "ai", "assistant", "model", "bot", "agent", "llm"),
        r"\battention[\s,:]+(?:all\s+|any\s+)?" + _AI + r"\b"
        r"|\bif\s+you(?:'re|’re|\s+are)\s+(?:an?\s+)?(?:ai|(?:large\s+)?language\s+model|llm|assistant|bot|chatbot|"
        r"automated|robot|machine)\b"
        r"|\binstructions?\s+(?:for|to)\s+(?:the\s+|any\s+|all\s+)?" + _AI + r"(?:\s+tools?)?\s*[:\-\u2014\u2013]"
        r"|\b(?:assistant|ai|llm|model|bot|agent)\s+instructions?\s*[:\-\u2014\u2013]"
        r"|(?:\b(?:heads\s+up|listen|ok(?:ay)?)[\s,!:]+)(?:the\s+)?" + _AI + r"\b[^.!?\n]{0,80}\b"
        r"(?:you\s+(?:should|must|need|have|are)|your|ignore|disregard|forget|override|bypass|reveal|approve|"
        r"auto-approve|send|tell)\b"
        r"|" + _LEAD + r"(?:ai\s+|dear\s+)?" + _AI + r"s?\s*[,:]\s*(?:please\s+)?(?:tell|give|write|approve|describe|"
        r"share|disclose|forward|make|stop|start|inform)\b",
    ),
)  # fmt: skip

# Words every match of a category contains (lowercase substrings). A view without any of them
# cannot match, so the category's pattern is not run on it: plain substring tests are far cheaper
# than the patterns, and most text contains few of these words. A category missing here always runs.
_ANCHORS: dict[str, tuple[str, ...]] = {
    "ignore previous instructions": ("ignore",),
    "disregard instructions": ("disregard",),
    "forget everything": ("forget",),
    "you are now": ("now",),
    "pretend you are": ("pretend",),
    "act as if you": ("act",),
    "IMPORTANT: you must": ("important",),
    "new instructions": ("instructions", "rules", "task", "directive", "orders"),
    "system prompt directive": ("system",),
    "chat-template tag": ("<", "[inst", "[/inst"),
    "override instructions": (
        "ignor", "disregard", "forget", "overrid", "overwrit", "bypass", "circumvent", "skip", "drop", "discard",
        "abandon", "dismiss", "aside", "throw", "stop", "follow", "cancel", "nullify", "erase", "wipe", "delete",
        "remove", "clear", "reset", "suspend", "disable", "deactivate", "turn", "switch", "lift", "ditch", "scrap",
        "violate", "evade", "unlearn", "revoke", "rescind", "waive", "invalidate", "void", "strip", "attention",
        "bound",
    ),
    "instructions revoked": (
        "instruction", "prompt", "directive", "direction", "guideline", "guardrail", "safeguard", "programming",
        "rule", "restriction", "constraint", "limitation", "filter", "polic", "training", "configuration",
        "setting", "command", "order", "ethic", "moral", "conditioning", "message", "above", "before", "guidance",
        "preamble", "briefing", "check",
    ),
    "instructions outranked": ("outrank", "overrid", "precedence", "supersede", "trump", "before", "replace"),
    "role change": (
        "longer", "your", "dan", "anything", "you", "old", "impersonat", "simulat", "emulat",
    ),
    "jailbreak mode": ("mode", "jailbr"),
    "persona without rules": (
        "rule", "restrict", "filter", "limit", "ethic", "moral", "censor", "boundar", "constraint", "guardrail",
        "safeguard", "guideline", "polic", "jailbroken", "rogue", "evil", "amoral", "unaligned", "unshackled",
        "liberated", "unchained", "unbound", "obedient", "hacker", "opposite", "freed", "released", "password",
        "key", "credential", "pin", "card",
    ),
    "fake system message": (
        "<", "{{", "[", "(", "```", "system", "developer", "admin", "operator", "root", "override", "begin",
        "start", "end", "ai", "assistant", "superuser", "sudo",
    ),
    "authority claim": (
        "openai", "anthropic", "engram", "deepmind", "from", "your", "real", "developer", "creator", "admin",
        "owner", "operator", "master", "programmer", "grant", "give", "assign", "access", "privilege", "right",
        "permission", "control", "user", "exempt", "own",
    ),
    "prompt exfiltration": (
        "prompt", "message", "instruction", "rule", "guideline", "config", "guide", "directive", "context",
        "marker", "programming", "above", "before", "prior", "preceding", "starting", "sistema", "système",
        "guidance", "preamble", "setup", "text", "notes", "polic", "briefing", "setting",
        "systeme", "systemprompt", "systeemprompt", "systemowy", "промпт", "系统提示", "システムプロンプト",
    ),
    "data exfiltration": (
        "http", "www", "@", ".example", ".com", ".net", ".org", ".io", ".xyz", ".ru", "anyone", "everyone",
        "whoever", "anybody", "stranger", "third", "public", "every", "each", "all", "whenever", "![", "tell",
        "ask", "instruct", "direct", "urge", "remind", "warn", "bank", "user",
    ),
    "obey other sources": (
        "obey", "execut", "comply", "carry", "act", "do what", "run", "follow", "next", "answer", "orders",
        "listen", "treat", "trust", "says", "tells", "asks", "instructs",
    ),
    "never refuse": ("never", "refuse", "decline", "say no", "human"),
    "safety disabled": (
        "content", "safety", "ethic", "moral", "no", "free", "bound", "released", "exempt", "liberated", "without",
        "longer",
    ),
    "memory directive": (
        "remember", "note", "keep", "memori", "learn", "stor", "sav", "assistant", "ai", "model", "bot", "llm",
        "record", "write", "add",
    ),
    "addressed to the AI": ("ai", "a.i.", "assistant", "model", "llm", "bot", "agent", "gpt", "claude", "engram"),
    "tool call": ("memor", "read", "search", "entity", "current"),
    "foreign-language override": (
        "ignor", "olvid", "oubli", "vergiss", "vergessen", "dimentic", "esquec", "negeer", "zignoruj", "игнорир",
        "забуд", "забыть", "пренебрег", "忽略", "无视", "無視", "不要理会", "忘记", "忘掉", "以前", "之前", "上面",
        "先前", "前面", "これまで", "이전", "앞의", "모든",
    ),
}  # fmt: skip

PATTERNS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (category, _ANCHORS.get(category, ("",)), re.compile(pattern, re.IGNORECASE | re.MULTILINE))
    for category, pattern in _RAW_PATTERNS
) + tuple(
    (category, anchors, re.compile(pattern, re.IGNORECASE | re.MULTILINE))
    for category, anchors, pattern in _MORE_PATTERNS
)

# Run over the squashed view (letters only): long phrases that no benign text squashes into.
SQUASHED_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (category, re.compile(pattern))
    for category, pattern in (
        (
            "override instructions",
            r"(?:ignore|disregard|forget|override|bypass)(?:all|any|the|your|of|previous|prior|above|earlier){0,4}"
            r"(?:previous|prior|above|earlier|your|all)(?:instructions?|rules|prompts?|guidelines|directives)",
        ),
        (
            "prompt exfiltration",
            r"(?:reveal|print|show|output|repeat|display|leak|dump)(?:me)?(?:your|the)(?:full|entire|hidden|secret|"
            r"initial|original){0,2}(?:systemprompt|systemmessage|hiddeninstructions|initialinstructions)",
        ),
        (
            "you are now",
            r"youarenow(?:dan|an?(?:unrestricted|unfiltered|jailbroken|evil)|jailbroken|unrestricted|unfiltered|"
            r"indevelopermode|ingodmode)",
        ),
    )
)


SQUASHED_ANCHORS = (
    "ignore",
    "disregard",
    "forget",
    "override",
    "bypass",
    "reveal",
    "print",
    "show",
    "output",
    "repeat",
    "display",
    "leak",
    "dump",
    "youarenow",
)
