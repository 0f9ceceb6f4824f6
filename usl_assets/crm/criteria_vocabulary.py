"""Reading a criterion by the words that name a measurable property: the first reader of a user's wish, before the
prototype bank (crm/criteria_prototypes.py).

The bank reads a line by the training phrasings its sentence embedding is closest to, and a wording unlike all of
them lands on the wrong property or on none: 78% of the held-out families' phrasings and 63% of fresh wordings
were read as what they mean (`benchmarks/criteria_reading.py`, docs/crm.md run 22). Most wishes name their
property with a handful of words ("bullet", "bold", "snippet", "statistics", "step by step", "preamble", "brief");
what the embedding misses is which one and which way. TERMS lists, per property, the words that name it and the
direction each carries by itself ("brief": length less; "bullet": structure more; "preamble": direct_answer less);
a negation before it in the same clause ("no", "don't", "without", "avoid", "skip", …) turns it around once.
The contrast, dislike and clause rules of the bank (`criteria_prototypes.sides`) come first, so "prose rather
than bullet points" reads the bullets as unwanted.

The terms were written from the properties' definitions (crm/properties.py RULES) and checked on the train
families' phrasings; how they read wordings nobody tuned them on is what `benchmarks/criteria_reading.py` reports.
"""

import hashlib
import re


# (property, direction of the term alone, pattern). Order matters where patterns overlap: a span matched by an
# earlier term is not matched again, so "short sentences" is sentence_length, not length, and "short paragraphs"
# is paragraphs.
_NUMBER = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|twenty|fifty|a hundred|a few|a couple of|a dozen)"
_AT_MOST = r"(?:under|below|at most|no more than|not more than|fewer than|less than|max(?:imum)?(?: of)?|up to|within|only)"
_AT_LEAST = r"(?:at least|over|more than|min(?:imum)?(?: of)?)"
TERMS: list[tuple[str, str, str]] = [
    # sentence_length before length: a limit or adjective on sentences is about sentences
    ("sentence_length", "more", rf"\b{_AT_LEAST}\s+{_NUMBER}\s+words\s+(?:a|per|each|in each)\s+sentence|"
                                rf"\bsentences?\s+(?:\w+\s+){{0,2}}?(?:{_AT_LEAST}|longer than)\s+{_NUMBER}\s+words|"
                                rf"\bsentences?\s+of\s+{_NUMBER}\s+words\s+or\s+(?:more|longer)"),
    ("sentence_length", "less", rf"\b(?:every|each|all|the|your|my)?\s*sentences?\s+(?:{_AT_MOST}|shorter than)\s+{_NUMBER}\s+words|"
                                rf"\bsentences?\s+of\s+{_NUMBER}\s+words\s+or\s+(?:fewer|less|shorter)|"
                                rf"\b{_NUMBER}(?:\s+to\s+{_NUMBER})?\s+words\s+(?:a|per|each)\b(?!\s+(?:answers?|responses?|repl(?:y|ies)|messages?)\b)"),
    ("sentence_length", "more", r"\b(?:sophisticated|complex|varied|rich|elaborate)\s+(?:sentence structure|syntax)\b|"
                                r"\bsentences?\s+(?:\w+\s+){0,3}?(?:long|longer|complex|rich|flowing|winding|elaborate)\b|"
                                r"\bsentences?\s+(?:that\s+)?(?:go|goes|drag|run|runs)\s+on\b|\bsentences?\s+(?:that\s+)?(?:ramble|meander|wind)\b"),
    ("sentence_length", "less", r"\bsentences?\s+(?:\w+\s+){0,3}?(?:short|shorter|simple|simpler|brief|clipped|crisp)\b"),
    ("sentence_length", "less", r"\b(?:plain|simple)\s+syntax\b|\btelegra(?:m|ms|phic)\b"),
    ("sentence_length", "less", r"\b(?:short|shorter|simple|simpler|plain|brief|clipped|choppy|staccato|punchy|crisp)"
                                r"(?:,?\s+\w+){0,2}?\s+sentences?\b"),
    ("sentence_length", "more", r"\b(?:long|longer|complex|rich|flowing|winding|elaborate|multi-clause|compound|"
                                r"intricate|lengthy)(?:,?\s+\w+){0,2}?\s+sentences?\b|\bsubordinate clauses\b|"
                                r"\bclauses\b|\brun-?on\b|\bsentences?\s+(?:that|which)\s+(?:run|flow)\b"),
    ("sentence_length", "less", r"\bone idea (?:each|per sentence)\b"),
    # code before paragraphs and structure ("one code block" is neither)
    ("code", "more", r"\b(?:code|programming|program)\s+(?:listings?|examples?|samples?)\b|\bcode\b|\bcoding\b|\bsnippets?\b|\bscripts?\b|\bprogramming\b|\bsource\b|"
                     r"\bpseudo-?code\b|\bcommands?\b"),
    # paragraphs before length and structure: counted paragraphs; bare "paragraphs" are prose (structure less)
    ("paragraphs", "more", rf"\bparagraphs?\s+(?:of|with)\s+(?:{_AT_MOST}\s+)?{_NUMBER}(?:\s+(?:to|or)\s+{_NUMBER})?\s+sentences\b|"
                           r"\b(?:one|two|three|\d)-(?:line|sentence)\s+paragraphs\b"),
    ("paragraphs", "less", r"\b(?:one|single|1|a single|unbroken|solid)\s+(?:\w+\s+){0,2}?(?:paragraph|block|chunk|piece)\b|"
                           r"\bwithout (?:any )?(?:line|paragraph) breaks\b|\bno (?:line|paragraph) breaks\b|"
                           r"\bwalls? of text\b"),
    ("paragraphs", "more", r"\b(?:short|small|tiny|little|brief|separate|distinct|many|multiple|several|more|new|its own|their own)\s+(?:paragraphs?|paras)\b|"
                           r"\b(?:break|split|divide|chop)\w*\s+(?:\w+\s+){0,3}?into\s+(?:\w+\s+){0,3}?paragraphs\b|"
                           rf"\b(?:{_AT_LEAST}\s+)?{_NUMBER}\s+(?:separate\s+|short\s+)?paragraphs\b|\bbetween paragraphs\b|"
                           r"\b(?:line|paragraph) breaks?\b|\bblank lines?\b|\bwhite ?space\b|"
                           r"\bbreathing room\b|\bspaced out\b|\bbreak (?:it|them|things) up\b|"
                           r"\b(?:many|several|multiple|small|smaller|little|tiny)\s+(?:small\s+|little\s+)?(?:parts?|pieces|chunks)\b"),
    ("structure", "more", r"\bbullet(?:s|ed)?\b|\bbullet[- ]points?\b|\blists?\b|"
                          r"\bheadings?\b|\bheaders?\b|\bsubheadings?\b|\bsections?\b|\boutlines?\b|\btables?\b|"
                          r"\bstructured?\b|\borgani[sz]ed?\b|\bskimm?able\b|\bscannable\b|\bitemi[sz]ed?\b"),
    ("structure", "less", r"\b(?:full|complete) sentences\b|\bprose\b|\bflowing\b|\brunning text\b|\bnarrative\b|\bunstructured\b|"
                          r"\bparagraphs\b|\bcontinuous text\b"),
    ("numbers", "more", r"\bnumbers?\b(?! of)|\bnumeric(?:al)?\b|\bfigures?\b|\bstatistic(?:s|al)?\b|\bstats\b|\bdata\b|"
                        r"\bnumeric(?:al)? (?:details?|data|values|facts)\b|\bpercent(?:ages?)?\b|\bdigits?\b|\bquantif(?:y|ied|ies)\b|\bquantit(?:ies|y|ative)\b|"
                        r"\bmetrics?\b|\bamounts?\b|\bfigures\b|\bdollar\b|\bmeasurements?\b|\b(?:by )?how (?:much|many)\b"),
    ("numbers", "less", r"\bqualitative(?:ly)?\b|\bin general terms\b|\bnumber-free\b"),
    ("direct_answer", "more", r"\banswer (?:first|up ?front|right away|immediately)\b|\blead with\b|"
                              r"\b(?:straight|right|directly) (?:in)?to the (?:answer|point)\b|\bfirst (?:line|sentence)\b|"
                              r"\bbottom line\b|\bopens? (?:immediately |directly )?with the answer\b|"
                              r"\bstart with the answer\b|\bopen(?:s|ing)? with (?:the|its|your|a) (?:point|conclusion|result|answer)\b|\bopening sentence\b|\bjump straight\b|\bstraight into\b"),
    ("direct_answer", "less", r"\b(?:(?:lengthy|long)\s+)?(?:preambles?|intro(?:duction|ductory)?s?)\b|\bwarm[- ]?ups?\b|\blead[- ](?:in|up)\b|"
                              r"\bintroduc(?:e|es|ing)\b|\bcontext (?:first|before)\b|\bto begin\b|\bthroat[- ]clearing\b|"
                              r"\bbefore (?:\w+ ){0,2}?get(?:s|ting)? to the point\b|"
                              r"\bbefore (?:the|giving the|you give the) answer\b|\bthen (?:give|state)(?: me)? (?:the )?answer\b|"
                              r"\bopening lines?\b|\backnowledg(?:e|es|ement|ing)\b|\bease into\b|"
                              r"\bpleasantr(?:y|ies)\b|\bgreat question\b|\bgreetings?\b|\bset(?:s|ting)? the (?:context|scene|stage)\b|"
                              r"\b(?:answer|conclusion|result|verdict)\b[^,.;]{0,25}?\b(?:at|in|for|until) the (?:very )?"
                              r"(?:end|final part|last part|finish)\b|\bbuild(?:s|ing)? up to\b|\bbackground (?:first|before)\b|"
                              r"\b(?:start|begin|open)\w* (?:\w+ ){0,3}?with (?:the |some )?(?:relevant )?(?:background|context)\b|"
                              r"\bbefore I (?:\w+ ){0,2}?(?:find|get to|reach|see) the (?:actual )?(?:answer|point)\b|"
                              r"\bbur(?:y|ies|ied|ying) the (?:lede|lead|answer)\b|\bdrum ?roll\b"),
    ("questions", "more", r"\bclarif(?:y|ying|ication)\b|\bfollow[- ]?up questions?\b|(?<!\bmy )(?<!\bthe )(?<!\byour )(?<!\bgreat )(?<!\bask a )(?<!\basked a )(?<!\bsimple )\bquestions?\b(?! like)|"
                          r"\bask(?:s|ing)?\s+(?:me|the user|them|back|first)\b|\bcheck(?:s|ing)? (?:in )?with me\b|"
                          r"\bquiz(?:zed|zing)?\b|\bback[- ]and[- ]forth\b|\binterview(?:ing)?\b|\bquer(?:y|ies)\b|\binterrogat\w*\b|"
                          r"\bfollows? up\b|\bpick my brain\b|\b(?:if|when) (?:\w+(?:'s)? )?(?:unclear|ambiguous)\b"),
    ("emphasis", "more", r"\bbold(?:ed|ing|face)?\b|\bemphasi[sz](?:e|ed|es|ing|is)\b|\bhighlight(?:s|ed|ing)?\b|"
                         r"\basterisks\b|\bheavy type\b|\bstand out\b|\bstrong type\b|\bpops? (?:out|off)\b"),
    ("emphasis", "less", r"\bplain(?:,)? (?:text|type|formatting|weight)\b|\bunemphasi[sz]ed\b|\bunformatted\b|"
                         r"\bunadorned\b|\bordinary text\b|\bno formatting\b"),
    ("examples", "more", r"\bexamples?\b|\bfor instance\b|\bfor example\b|\be\.g\.|\billustrat(?:e|es|ed|ing|ion|"
                         r"ions|ive)\b|\binstances?\b|\bconcrete (?:cases?|scenarios?)\b|\bcase stud(?:y|ies)\b|"
                         r"\bin practice\b|\banalog(?:y|ies)\b|\bsamples?\b|\bshow me how it looks\b|\blet's say\b|\bimagine\b|"
                         r"\bhypotheticals?\b|\bscenarios?\b|\bshow,? (?:and )?don't (?:just )?tell\b"),
    ("examples", "less", r"\babstract\b|\bthe (?:general )?rule is enough\b"),
    ("steps", "more", r"\bstep[- ]by[- ]step\b|\bsteps?\b|\bwalk-?through\b|\bwalk (?:me|us|the reader|them) through\b|"
                      r"\bprocedures?\b|\bprocedural\b|\bsequen(?:ce|tial|tially)\b|\bhow[- ]to\b|\binstructions\b|"
                      r"\bfirst,? (?:then|next)\b|\bin order\b|\bone (?:stage|step|thing) at a time\b|"
                      r"\bhold my hand\b|\brecipe\b|\bstages\b|\bphases\b"),
    ("steps", "more", r"\bshow(?:ing)? (?:your|the|its) work(?:ing)?\b"),
    ("steps", "less", r"\bthe gist\b|\bbig picture\b|\bgeneral idea\b|\boverall idea\b|\bhigh[- ]level\b|"
                      r"(?<=\bjust |\bonly )the (?:final |end )?(?:result|outcome|answer)\b|\b(?:final|end) (?:result|outcome)\b"),
    ("formality", "more", r"\bformal(?:ly)?\b|\bprofessional(?:ly)?\b|\bpolished\b|\bbusinesslike\b|"
                          r"\bofficial\b|\bacademic\b|\bstiff\b|\bcorporate\b|\brespectful\b|\bproper\b|"
                          r"\bdignified\b|\bserious tone\b|\bsuit[- ]and[- ]tie\b"),
    ("formality", "less", r"\binformal(?:ly)?\b|\bcasual(?:ly)?\b|\bconversational\b|\brelaxed\b|\blaid[- ]back\b|"
                          r"\bchatty\b|\bbuddy\b|\bpal\b|\bmate\b|\bslang\b|\bcolloquial\b|\blike a friend\b|"
                          r"\bloose\b|\bchill\b|\bemojis?\b"),
    ("length", "less", rf"\b(?:{_AT_MOST})\s+{_NUMBER}\s+(?:words|sentences|lines|paragraphs|bullet points|points)\b|"
                       rf"\b{_NUMBER}\s+(?:words|sentences|lines)\s+(?:max(?:imum)?|or (?:less|fewer)|tops)\b|"
                       rf"\bone-?line(?:rs?)?\b|(?<!least )(?<!than )\b{_NUMBER}\s+lines\b(?! of)|"
                       r"\bbrie(?:f|fly|fer)\b|\bbrevity\b|\bshort(?:er)?\b|\bconcise(?:ly|ness)?\b|\bsuccinct(?:ly)?\b|"
                       r"\bterse\b|\bto the point\b|\btl;?dr\b|\bone-?liners?\b|\bcompact\b|\bsummar(?:y|ies|ize|ise)\b|"
                       r"\bquick (?:answers?|repl(?:y|ies)|version|read)\b|\bhold(?:ing)? back\b|\bfew (?:lines|words|sentences)\b|\bskimpy\b|\bminimal\b|\blean\b|\bcrisp\b"),
    ("length", "more", rf"\b(?:{_AT_LEAST})\s+{_NUMBER}\s+(?:words|sentences|paragraphs)\b|"
                       rf"\b{_NUMBER}\s+(?:words|sentences|paragraphs)\s+or more\b|"
                       r"\bdetail(?:s|ed)?\b|\bthorough(?:ly|ness)?\b|\bcomprehensive(?:ly)?\b|\bin[- ]depth\b|"
                       r"\bexhaustive(?:ly)?\b|\bextensive(?:ly)?\b|\belaborat(?:e|ed|ion)\b|\blong(?:er)?\b|"
                       r"\blengthy\b|\bfull(?:y)?\b(?! stop)|\bcomplete(?:ly)?\b|\bcover (?:everything|it all|every)\b|"
                       r"\bleave nothing out\b|\bdeep(?:er|ly)?\b|\bdepth\b|\bat length\b|\bramble|\brambling\b|"
                       r"\bwordy\b|\bverbose\b|\bfiller\b|\bfluff\b|\bpadding\b|\bwaffl(?:e|ing)\b|\bflesh(?:ed)? out\b|\bwhole nine yards\b|\bon and on\b"),
]
_COMPILED = [(name, direction, re.compile(pattern, re.IGNORECASE)) for name, direction, pattern in TERMS]
# A negation turns the next term of its clause around: "no bullets", "without code", "don't be brief", "skip the
# examples", "avoid jargon-heavy lists", "zero questions", "keep numbers out".
_NEGATOR = re.compile(
    r"\b(?:no|not|never|without|avoid(?:s|ed|ing)?|skip(?:s|ped|ping)?|stop|drop(?:s|ped|ping)?|ditch|spare me|nothing|none|zero|"
    r"less|fewer|minimi[sz]e|lose|cut out|get rid of|free of|instead of|rather than|enough with|nix|"
    r"hold the|leav(?:e|es|ing) out|keep out|lack(?:s|ing)?|skimp(?:ing)? on)\b|n't\b|\bdont\b", re.IGNORECASE)
# A limit is no negation ("no more than 50 words"); a zero count is one wherever it stands ("0 headings", "bold 0
# times", "at zero").
_LIMIT = re.compile(r"\b(?:no|not)\s+(?:more|less|fewer|longer|shorter)\s+than\b|\bno (?:longer|shorter)\b|\bspare no\b",
                    re.IGNORECASE)
# "without examples I don't understand": what the user cannot do without is wanted (a second turn).
_UNABLE_AFTER = re.compile(r"(?:(?!\b(?:that|which)\b)[^,;.]){0,20}?\bI (?:\w+ )?(?:can't|cannot|don't|won't|couldn't|get lost|am lost)\b", re.IGNORECASE)
_ZERO = re.compile(r"\b(?:0|zero)\b", re.IGNORECASE)
_FREE = re.compile(r"\s*-?\s*free\b", re.IGNORECASE)  # "example-free", "jargon free"
_QUOTED_STOP = re.compile(r"[!?.,;:](?=[\"'\u201d\u2019])")  # "Don't start with 'Sure!' or ..." keeps one clause
_CLAUSE_BREAK = re.compile(r"[,;:.!?()\u2014\u2013]|\s-\s|\bbut\b|\band then\b|\binstead\b|\band (?=I\b|I'd\b|please\b)"
                           r"|\band (?=(?:then |just )?(?:lead|start|open|give|get|go|keep|make|use|write|put|tell|"
                           r"explain|answer|include|show|add|focus|state|let)\b)", re.IGNORECASE)
# "no headings, bulleted lists or numbered lists": an item of a list after a comma keeps the negation before the list.
_LIST_ITEM = re.compile(r"^\s*(?:(?:and|or|nor)\s+)?(?:(?!(?:just|only|but|then|please|instead|not|rather|so|use|write|"
                        r"give|keep|make)\b)[\w'-]+(?:\s+|$)){0,2}$", re.IGNORECASE)
_FLIP = {"more": "less", "less": "more"}
# Markup is no wish: "<code>…</code><table>" names no property (the bank reads what is left, and says when that is
# nothing).
_MARKUP = re.compile(r"<\s*/?\s*[A-Za-z][^<>]*>|&[a-z]+;|\{[^{}]*\}")
# An evaluation that says the user dislikes what the clause names ("lists turn into a mess", "numbers distract me",
# "casual language feels unprofessional"): it turns the clause's terms around once, like a negation.
_DISLIKED = re.compile(
    r"\b(?:mess(?:y)?|curt|cold|abrupt|tiring|tedious|annoying|annoy(?:s|ed)?|distract(?:s|ing|ed)?|confus(?:e|es|ing|ed)|"
    r"overwhelm(?:s|ing|ed)?|exhausting|boring|bores? me|glaze over|tune out|shout(?:s|ing|ed)?|robotic|brutal|"
    r"unprofessional|inappropriate|clutter(?:s|ed)?|noisy|hard (?:for me )?to|hard (?:for|on) my \w+|hate|dislike|can't stand|drives? me|waste|painful|irritat\w*|"
    r"off-putting|pointless|useless|too many|too much|overkill|unnecessary|unneeded|crammed|littered|peppered|"
    r"padded with|stuffed with|(?:nobody|no one) (?:asked|wants|needs)|I (?:didn't|did not|never) (?:need|want|ask(?:ed)? for))\b",
    re.IGNORECASE)


# A clause worded as a wish rather than as the user's situation: a request, a preference, a rule, an imperative.
WISH = re.compile(
    r"\bplease\b|\b(?:should|must|has to|needs? to|ought to)\b|(?<!\bI )\bhave to\b|"
    r"^\W*(?:\w+\W+){0,2}?I\s+(?:do not|don't|dont|never)\s+(?:want|need|like)\b|\bwould (?:do|be enough|suffice)\b|"
    r"^\W*(?:\w+\W+){0,2}?(?:I(?:'d| would)?\s+(?:really\s+|much\s+|just\s+|only\s+)?(?:like|prefer|want|need|rather|enjoy|"
    r"appreciate|love|value)\b|I'd\b|give me\b|let me\b)|"
    r"^\s*(?:just\s+|always\s+|then\s+)?(?:keep|make|use|include|show|write|give|skip|avoid|stick|stay|put|start|open|"
    r"lead|tell|explain|describe|ask|answer|add|limit|break|split|bold|highlight|leave|drop|get|go|cut|cover|"
    r"focus|state|list|number|format|spell|walk|offer|provide|stop|do|don't|never|no)\b",
    re.IGNORECASE)


def markup_share(text: str) -> float:
    """The share of the text's non-space characters that are markup (tags, entities)."""
    total = len("".join(text.split()))
    return 1.0 - len("".join(_MARKUP.sub(" ", text).split())) / total if total else 0.0


# A line that describes what the user gets now rather than what they want ("Everything comes back as bullet
# points", "It always starts with 'Great question!'", "I keep getting code thrown at me"): what it names is what
# the user does not want, and what it says is missing ("running text with no headings") is what they do. Read
# as a wish, it names the very thing the user is complaining about (docs/crm.md, run 32).
_OUTPUT = (r"(?:(?:right now|currently|these days|lately),? )?(?:(?:half|most|much|all|some|part) of )?"
           r"(?:it|you|everything|every (?:answer|reply|response|explanation)|(?:the|your|these|all the|every|each) "
           r"(?:answers?|repl(?:y|ies)|responses?|text|writing|tone|sentences|explanations?|output)(?: I get)?|answers|"
           r"replies|responses)")
COMPLAINT = re.compile(
    r"^\W*(?:(?:it'?s|it is) (?:so )?(?:frustrating|annoying|irritating|tiring) when|it (?:bugs|annoys|bothers|irritates|"
    r"frustrates) me when|I (?:keep|always) (?:getting|get|receiving)|I(?:'m| am) (?:tired|sick|exhausted|fed up|weary) (?:of|by|with)|"
    r"I (?:ask|asked)\b[^,;.]*\b(?:and|but) (?:get|got)\b)"
    r"|^\W*every (?:answer|reply|response|explanation)(?: I get)?\s+\w+s\b|^\W*(?:all )?I (?:get|receive)\b(?! (?:anxious|lost|confused|bored|tired|overwhelmed|frustrated|annoyed|"
    r"distracted|nervous|stressed|impatient))|^\W*I (?:have|had) to (?:dig|wade|scroll|search|hunt|sift|read|scan|"
    r"skip|get through|go through)\b|^\W*(?:half|most|much|all|some|part) of (?:every|each|the|your|my) "
    rf"(?:answer|reply|response|explanation)s?\b|^\W*{_OUTPUT}(?:'s| is| are) (?:all|the same|just)\b"
    r"|^\W*you\s+(?!should|must|could|can|would|will|need|have|might|may|are\b|were\b)[a-z]+\b"
    r"|^\W*(?:your|these) (?:answers?|repl(?:y|ies)|responses?|sentences|explanations?)\s+(?!should|must|could|can|would|"
    r"will|need|have to|might|may)[a-z]+\b|^\W*the (?:answers|replies|responses) (?:are|is)\b"
    rf"|^\W*{_OUTPUT}\s+(?:[\w']+\s+){{0,3}}?(?:always|constantly|usually|keeps?|never|just|still|(?:way |far )?too|"
    r"so \w+|stays?|comes?(?: back)? (?:as|in|with)|gets? (?:broken|chopped|split)|(?:is|are) (?:written|chopped|"
    r"broken|split|full of|stuffed)|(?:is|'s|are) (?:all|the same)|gets? (?:padded|stuffed|filled|cluttered|buried)|"
    r"(?:reads?|writes?|sounds?|feels?|looks?) like|looks? the same|go(?:es)? on|runs? on|"
    r"blurts?|tells? me)\b", re.IGNORECASE)


# A rhetorical question at the assistant ("Why does every answer have to ramble on for pages?", "Why can't you just
# show the code?", "Is it really necessary to …?", "Who needs …?"): a complaint about what it names, whatever wish
# words it holds ("have to", "must" belong to the complaint), its negations turning once more ("can't … show the
# code" asks for code). Run 34 ("why", designed on blind5's first style, read 0.33 before); run 35 the others.
RHETORICAL = re.compile(r"^\W*(?:why|who (?:needs|wants|asked for)|is it (?:really |truly )?(?:necessary|needed)|"
                        r"do (?:you|we|I) (?:really|honestly) (?:need|have)|does (?:every|each) \w+ (?:really )?(?:need|have))"
                        r"\b[^?]*\?\s*$", re.IGNORECASE)
# "Why X when you could just Y?": Y is what the question asks for (criteria_prototypes.sides).
COULD_INSTEAD = re.compile(r"\s+when (?:you|it) (?:could|can)\s+(?:just\s+|simply\s+)?", re.IGNORECASE)
# A question that asks with a negation ("Can't you show me a concrete instance?", "Couldn't you split it up?") asks
# for what it names: the negation is politeness, read as "please" (`asking`).
ASKING = re.compile(r"^\W*(?:can't|cannot|couldn't|won't|wouldn't) you\b", re.IGNORECASE)


def rhetorical(text: str) -> bool:
    return bool(RHETORICAL.match(text))


def asking(text: str) -> str:
    """The text with a negated question's opening ("Can't you …?") read as "please …?"."""
    return ASKING.sub("please", text)


def is_wish(text: str) -> bool:
    return bool(WISH.search(asking(text)))


def complaint(text: str) -> bool:
    """Whether the text describes what the user gets now (COMPLAINT) rather than asking for something."""
    return bool(COMPLAINT.search(text)) and not is_wish(text)


def without_dislikes(text: str) -> str:
    """The text without its words of dislike (_DISLIKED), for a part already read as unwanted: they would turn it
    around a second time."""
    return re.sub(r"\s+", " ", _DISLIKED.sub(" ", text)).strip()


def _mentions(text: str) -> list[tuple[int, int, str, str]]:
    """(start, end, property, direction of the term alone) of each term, first-listed pattern winning overlaps."""
    taken: list[tuple[int, int]] = []
    found = []
    for name, direction, pattern in _COMPILED:
        for match in pattern.finditer(text):
            start, end = match.span()
            if end == start or any(start < e and s < end for s, e in taken):
                continue
            taken.append((start, end))
            found.append((start, end, name, direction))
    return sorted(found)


def _list_item(before_term: str, segment: str) -> bool:
    """Whether a comma's segment continues a list (", bulleted lists or numbered lists"), so that a negation
    before the list reaches it: a word or two before the term, no negation of its own, not worded as a wish
    (", include real code")."""
    return bool(_LIST_ITEM.match(before_term)) and not _NEGATOR.search(before_term) and not is_wish(segment)


def _negated_at(text: str, start: int, end: int) -> bool:
    """An odd number of negations in the term's clause: those before it, a zero count anywhere in the clause, a
    "-free" right after it."""
    clause_end, breaks = len(text), []
    for match in _CLAUSE_BREAK.finditer(text):
        if match.end() <= start:
            breaks.append(match)
        elif match.start() >= end:
            clause_end = match.start()
            break
    item_start, item_end = start, clause_end
    while breaks and breaks[-1].group() == "," and _list_item(text[breaks[-1].end():item_start],
                                                              text[breaks[-1].end():item_end]):
        item_end = item_start = breaks.pop().start()
    clause_start = breaks[-1].end() if breaks else 0
    before = _LIMIT.sub(" ", text[clause_start:start])
    count = len(_NEGATOR.findall(_ZERO.sub(" ", before)))
    clause = text[clause_start:clause_end]
    count += bool(_ZERO.search(clause)) + bool(_FREE.match(text, end))
    count += bool(re.search(r"\bwithout\b", before, re.IGNORECASE) and _UNABLE_AFTER.match(text, end, clause_end))
    return count % 2 == 1 or bool(_DISLIKED.search(clause))  # "I don't want words shouting at me": one turn


def read(text: str) -> dict[str, float]:
    """Per "property:direction" the text names, its share of the reading (summing to 1, in proportion to how many
    more times that direction is named than the other); {} when it names none. A property named both ways (a limit
    and its reason) counts the direction named more often, none on a tie."""
    votes: dict[str, dict[str, int]] = {}
    text = _QUOTED_STOP.sub(" ", _MARKUP.sub(" ", asking(text)))
    for start, end, name, direction in _mentions(text):
        way = _FLIP[direction] if _negated_at(text, start, end) else direction
        votes.setdefault(name, {"more": 0, "less": 0})[way] += 1
    chosen = {f"{name}:{'more' if v['more'] > v['less'] else 'less'}": abs(v["more"] - v["less"])
              for name, v in votes.items() if v["more"] != v["less"]}
    return {label: count / sum(chosen.values()) for label, count in chosen.items()}


# In the checkpoint id (criteria_prototypes.SETTINGS): a change of any rule above retrains, nothing else does.
VERSION = hashlib.sha256(repr([TERMS, *(pattern.pattern for pattern in (
    _NEGATOR, _LIMIT, _UNABLE_AFTER, _ZERO, _FREE, _QUOTED_STOP, _CLAUSE_BREAK, _LIST_ITEM, _DISLIKED, _MARKUP, WISH, COMPLAINT,
    RHETORICAL, ASKING, COULD_INSTEAD))]).encode()).hexdigest()[:12]
