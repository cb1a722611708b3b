"""The toy-English source: a weighted finite-state process over words, and its character automaton.

Sentences come from a word-level automaton. Each grammar state offers word
classes with probabilities; a class is a list of words with Zipfian weights
(rank r gets weight 1/r, ranks shuffled by the seed); the word picked decides
the next state. Some states may end the sentence (<eos>) instead. The grammar
encodes constraints that need context:

- subject-verb number agreement, also across a relative clause
  ("THE DOG THAT THE CATS CHASE RUNS": CHASE agrees with CATS, RUNS with DOG);
- A before a consonant letter, AN before a vowel letter;
- DOESN'T / DON'T by number, then the bare verb;
- animate subjects act; inanimate ones only take IS/ARE + adjective;
- every point where a sentence may end also allows it to go on (an adverb, a
  preposition or a conjunction), so a generator that may not emit <eos> always
  has a possible next character.

Within a state no word is listed twice with different successors, so the text
determines the path: the character automaton (state = grammar state x prefix of
the word being spelled) is deterministic and its entropy rate is exact.

    SOURCE = ToySource(seed)   # words and Zipf ranks depend on the seed
    SOURCE.automaton           # Automaton (forward algorithm, entropy rate)
    SOURCE.sample_sentences(n, rng)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from gradelib.lm.vocab import EOS

from .automaton import Automaton
from .text import SPACE, encode

VOWELS = set("AEIOU")

# (singular, plural); animate nouns can act, inanimate ones cannot.
ANIMATE = [
    ("DOG", "DOGS"), ("CAT", "CATS"), ("BIRD", "BIRDS"), ("HORSE", "HORSES"), ("FOX", "FOXES"),
    ("WOLF", "WOLVES"), ("MOUSE", "MICE"), ("CHILD", "CHILDREN"), ("MAN", "MEN"), ("WOMAN", "WOMEN"),
    ("TEACHER", "TEACHERS"), ("FARMER", "FARMERS"), ("DOCTOR", "DOCTORS"), ("SAILOR", "SAILORS"),
    ("KING", "KINGS"), ("QUEEN", "QUEENS"), ("BABY", "BABIES"), ("LADY", "LADIES"), ("GIRL", "GIRLS"),
    ("BOY", "BOYS"), ("FRIEND", "FRIENDS"), ("NEIGHBOR", "NEIGHBORS"), ("STUDENT", "STUDENTS"),
    ("BAKER", "BAKERS"), ("PAINTER", "PAINTERS"), ("SINGER", "SINGERS"), ("RABBIT", "RABBITS"),
    ("GOOSE", "GEESE"), ("OWL", "OWLS"), ("EAGLE", "EAGLES"), ("MONKEY", "MONKEYS"), ("LION", "LIONS"),
    ("TIGER", "TIGERS"), ("BEAR", "BEARS"), ("FROG", "FROGS"), ("PUPPY", "PUPPIES"), ("PRINCE", "PRINCES"),
    ("WITCH", "WITCHES"), ("THIEF", "THIEVES"), ("NURSE", "NURSES"), ("PILOT", "PILOTS"),
    ("ARTIST", "ARTISTS"), ("UNCLE", "UNCLES"), ("AUNT", "AUNTS"), ("GUARD", "GUARDS"),
    ("ELEPHANT", "ELEPHANTS"), ("DONKEY", "DONKEYS"), ("DUCK", "DUCKS"), ("INSPECTOR", "INSPECTORS"),
    ("OFFICER", "OFFICERS"),
]
INANIMATE = [
    ("BOOK", "BOOKS"), ("TABLE", "TABLES"), ("HOUSE", "HOUSES"), ("TREE", "TREES"), ("STONE", "STONES"),
    ("RIVER", "RIVERS"), ("BOX", "BOXES"), ("LETTER", "LETTERS"), ("APPLE", "APPLES"), ("ORANGE", "ORANGES"),
    ("CUP", "CUPS"), ("CHAIR", "CHAIRS"), ("WINDOW", "WINDOWS"), ("DOOR", "DOORS"), ("GARDEN", "GARDENS"),
    ("SHIP", "SHIPS"), ("BOAT", "BOATS"), ("BELL", "BELLS"), ("CLOCK", "CLOCKS"), ("LAMP", "LAMPS"),
    ("CANDLE", "CANDLES"), ("COAT", "COATS"), ("HAT", "HATS"), ("KEY", "KEYS"), ("MAP", "MAPS"),
    ("BASKET", "BASKETS"), ("BRIDGE", "BRIDGES"), ("ROAD", "ROADS"), ("TOWER", "TOWERS"),
    ("CASTLE", "CASTLES"), ("CITY", "CITIES"), ("FIELD", "FIELDS"), ("LEAF", "LEAVES"), ("KNIFE", "KNIVES"),
    ("DISH", "DISHES"), ("STORY", "STORIES"), ("SONG", "SONGS"), ("PICTURE", "PICTURES"), ("WHEEL", "WHEELS"),
    ("BOTTLE", "BOTTLES"), ("BLANKET", "BLANKETS"), ("PENCIL", "PENCILS"), ("RING", "RINGS"), ("EGG", "EGGS"),
    ("UMBRELLA", "UMBRELLAS"), ("ENGINE", "ENGINES"), ("ISLAND", "ISLANDS"), ("OVEN", "OVENS"),
    ("ANCHOR", "ANCHORS"), ("ENVELOPE", "ENVELOPES"),
]
ADJECTIVES = [
    "BIG", "SMALL", "OLD", "YOUNG", "HAPPY", "SAD", "RED", "GREEN", "BLUE", "QUIET", "LOUD", "BRAVE",
    "CLEVER", "TIRED", "HUNGRY", "WARM", "COLD", "DARK", "BRIGHT", "STRANGE", "GENTLE", "WILD", "TALL",
    "SHORT", "LAZY", "BUSY", "PROUD", "FAMOUS", "ANGRY", "EAGER", "EMPTY", "ODD", "OLDER", "ELEGANT",
    "ICY", "UGLY", "AMAZING", "HONEST", "IDLE", "OPEN",
]
NAMES = [
    "ANNA", "BORIS", "CLARA", "DAVID", "EMMA", "FELIX", "GRACE", "HUGO", "IRIS", "JACK", "KATE", "LEO",
    "MARIA", "NOAH", "OLIVIA", "PETER", "RUTH", "SAM", "TOM", "VERA",
]
# (bare, third person singular, past)
INTRANSITIVE = [
    ("RUN", "RUNS", "RAN"), ("SLEEP", "SLEEPS", "SLEPT"), ("SING", "SINGS", "SANG"), ("DANCE", "DANCES", "DANCED"),
    ("LAUGH", "LAUGHS", "LAUGHED"), ("CRY", "CRIES", "CRIED"), ("SMILE", "SMILES", "SMILED"),
    ("WAIT", "WAITS", "WAITED"), ("WORK", "WORKS", "WORKED"), ("SWIM", "SWIMS", "SWAM"),
    ("JUMP", "JUMPS", "JUMPED"), ("FALL", "FALLS", "FELL"), ("WALK", "WALKS", "WALKED"),
    ("LISTEN", "LISTENS", "LISTENED"), ("ARRIVE", "ARRIVES", "ARRIVED"), ("REST", "RESTS", "RESTED"),
    ("SHOUT", "SHOUTS", "SHOUTED"), ("WHISPER", "WHISPERS", "WHISPERED"), ("PLAY", "PLAYS", "PLAYED"),
    ("HIDE", "HIDES", "HID"),
]
TRANSITIVE = [
    ("SEE", "SEES", "SAW"), ("CHASE", "CHASES", "CHASED"), ("FIND", "FINDS", "FOUND"), ("LIKE", "LIKES", "LIKED"),
    ("HELP", "HELPS", "HELPED"), ("CALL", "CALLS", "CALLED"), ("FOLLOW", "FOLLOWS", "FOLLOWED"),
    ("WATCH", "WATCHES", "WATCHED"), ("CARRY", "CARRIES", "CARRIED"), ("HOLD", "HOLDS", "HELD"),
    ("PUSH", "PUSHES", "PUSHED"), ("BRING", "BRINGS", "BROUGHT"), ("KNOW", "KNOWS", "KNEW"),
    ("MEET", "MEETS", "MET"), ("FEED", "FEEDS", "FED"), ("DRAW", "DRAWS", "DREW"), ("BUY", "BUYS", "BOUGHT"),
    ("OPEN", "OPENS", "OPENED"), ("LOVE", "LOVES", "LOVED"), ("VISIT", "VISITS", "VISITED"),
    ("TAKE", "TAKES", "TOOK"), ("READ", "READS", "READ"), ("FIX", "FIXES", "FIXED"), ("PAINT", "PAINTS", "PAINTED"),
]
ADVERBS = [
    "QUICKLY", "SLOWLY", "TODAY", "AGAIN", "OFTEN", "NOW", "LATER", "TOGETHER", "OUTSIDE", "QUIETLY",
    "LOUDLY", "HAPPILY", "YESTERDAY", "SOMETIMES", "TONIGHT",
]
PREPOSITIONS = ["IN", "ON", "NEAR", "WITH", "BEHIND", "UNDER", "AT", "FROM", "BESIDE", "ACROSS"]
CONJUNCTIONS = ["AND", "BUT", "BECAUSE", "WHILE", "SO", "WHEN"]

DET_ANY = ["THE", "MY", "YOUR", "OUR", "THEIR"]
DET_SG = ["THIS", "EVERY", "EACH", "ANOTHER"]
DET_PL = ["THESE", "THOSE", "SOME", "MANY", "TWO", "THREE"]
PRON_SG = ["HE", "SHE"]
PRON_PL = ["THEY", "WE", "YOU"]
PRON_OBJ = ["HIM", "HER", "THEM", "US", "ME"]
COPULA = {"sg": ["IS", "WAS", "ISN'T", "WASN'T"], "pl": ["ARE", "WERE", "AREN'T", "WEREN'T"]}
NEGATION = {"sg": ["DOESN'T", "DIDN'T"], "pl": ["DON'T", "DIDN'T"]}
MODALS = ["CAN", "WILL", "MUST", "CAN'T", "WON'T", "SHOULD"]
RELATIVE = {"anim": ["THAT", "WHO"], "inan": ["THAT", "WHICH"]}

# Probability that a sentence ends at a clause end (before any adverb) and after it.
P_END = 0.6
P_END_AFTER_MODIFIER = 0.75
P_ADJECTIVE = 0.25  # chance of (another) adjective before the noun
P_RELATIVE = 0.2  # chance that a noun subject takes a relative clause


@dataclass
class Entry:
    """One choice of a grammar state: a word class with its probability and the state it leads to."""

    words: list[tuple[str, float]]  # (word, weight within the class), weights sum to 1
    prob: float
    next: str


@dataclass
class GrammarState:
    entries: list[Entry] = field(default_factory=list)
    p_end: float = 0.0  # probability of <eos> on entering this state


class ToySource:
    """The word-level grammar (states -> entries) built from the word lists and a seed."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.states: dict[str, GrammarState] = {}
        self._choices: dict[str, dict[str, tuple[float, str]]] = {}
        self._build()
        self._check_deterministic()

    # ------------------------------------------------------------ word classes

    def zipf(self, words: list[str]) -> list[tuple[str, float]]:
        """Words with weights 1/rank, ranks a seeded shuffle; weights sum to 1."""
        ranks = self.rng.permutation(len(words)) + 1
        w = 1.0 / ranks
        w /= w.sum()
        return list(zip(words, w.tolist()))

    def _classes(self) -> dict[str, list[tuple[str, float]]]:
        z = self.zipf
        nouns = {}
        for anim, pairs in (("anim", ANIMATE), ("inan", INANIMATE)):
            weighted = z([s for s, _ in pairs])
            nouns[("sg", anim)] = weighted
            plural = dict(pairs)
            # A noun keeps its Zipf rank in the plural, so frequent nouns are frequent in both numbers.
            nouns[("pl", anim)] = [(plural[s], w) for s, w in weighted]
        intr, tran = z(INTRANSITIVE_KEYS), z(TRANSITIVE_KEYS)
        classes = {f"noun_{n}_{a}": v for (n, a), v in nouns.items()}
        classes["adj"] = z(ADJECTIVES)
        classes["names"] = z(NAMES)
        for n, form in (("bare", 0), ("sg", 1), ("past", 2)):
            classes[f"intr_{n}"] = [(FORMS_I[k][form], w) for k, w in intr]
            classes[f"tran_{n}"] = [(FORMS_T[k][form], w) for k, w in tran]
        classes["intr_pl"], classes["tran_pl"] = classes["intr_bare"], classes["tran_bare"]
        for name, words in (
            ("adv", ADVERBS), ("prep", PREPOSITIONS), ("conj", CONJUNCTIONS), ("det_any", DET_ANY),
            ("det_sg", DET_SG), ("det_pl", DET_PL), ("pron_sg", PRON_SG), ("pron_pl", PRON_PL),
            ("pron_obj", PRON_OBJ), ("modal", MODALS),
        ):
            classes[name] = z(words)
        for n in ("sg", "pl"):
            classes[f"cop_{n}"] = z(COPULA[n])
            classes[f"neg_{n}"] = z(NEGATION[n])
        for a in ("anim", "inan"):
            classes[f"rel_{a}"] = z(RELATIVE[a])
        return classes

    # ------------------------------------------------------------ grammar

    def _add(self, name: str, entries: list[tuple[str, float, str]], p_end: float = 0.0) -> None:
        total = sum(p for _, p, _ in entries)
        state = GrammarState(p_end=p_end)
        for cls, p, nxt in entries:
            words = self.classes[cls] if isinstance(cls, str) else cls
            state.entries.append(Entry(words, p / total, nxt))
        self.states[name] = state

    def _restrict(self, cls: str, initials: set[str]) -> list[tuple[str, float]]:
        """Words of a class that start with one of `initials`, weights renormalised."""
        kept = [(w, p) for w, p in self.classes[cls] if w[0] in initials]
        total = sum(p for _, p in kept)
        return [(w, p / total) for w, p in kept]

    def _noun_phrase(self, ctx: str, exits: dict[tuple[str, str], str], animacy=("anim", "inan"),
                     a_an: bool = True, pronouns: dict[str, str] | None = None, names: str | None = None) -> str:
        """States for a noun phrase in context `ctx`; exits map (number, animacy) -> next state.

        Returns the name of the phrase's first state (determiner, pronoun or name).
        """
        consonants = set("BCDFGHJKLMNPQRSTVWXYZ")
        numbers = {"sg": ("sg",), "pl": ("pl",), "any": ("sg", "pl")}
        for det_class, nums in numbers.items():
            entries = [("adj", P_ADJECTIVE, f"{ctx}:np_{det_class}")]
            for n in nums:
                for a in animacy:
                    entries.append((f"noun_{n}_{a}", (1 - P_ADJECTIVE) / (len(nums) * len(animacy)), exits[(n, a)]))
            self._add(f"{ctx}:np_{det_class}", entries)
        start = [("det_any", 0.45, f"{ctx}:np_any"), ("det_sg", 0.1, f"{ctx}:np_sg"), ("det_pl", 0.15, f"{ctx}:np_pl")]
        if a_an:
            # After A / AN the next word (adjective or noun) is restricted by its first letter.
            for art, initials in (("A", consonants), ("AN", VOWELS)):
                entries = [(self._restrict("adj", initials), P_ADJECTIVE, f"{ctx}:np_sg")]
                for a in animacy:
                    entries.append(
                        (self._restrict(f"noun_sg_{a}", initials), (1 - P_ADJECTIVE) / len(animacy), exits[("sg", a)])
                    )
                self._add(f"{ctx}:np_{art.lower()}", entries)
            start += [([("A", 1.0)], 0.12, f"{ctx}:np_a"), ([("AN", 1.0)], 0.04, f"{ctx}:np_an")]
        if pronouns:
            start += [(cls, 0.1, nxt) for cls, nxt in pronouns.items()]
        if names:
            start.append(("names", 0.08, names))
        self._add(f"{ctx}:np", start)
        return f"{ctx}:np"

    def _verb_phrase(self, n: str, a: str, after: str) -> list[tuple[str, float, str]]:
        """Entries of a main verb for a subject of number n and animacy a; `after` is the clause end."""
        if a == "inan":
            return [(f"cop_{n}", 1.0, "adj_pred")]
        return [
            (f"intr_{n}", 0.25, after), ("intr_past", 0.08, after),
            (f"tran_{n}", 0.25, "obj:np"), ("tran_past", 0.08, "obj:np"),
            (f"cop_{n}", 0.12, "adj_pred"), (f"neg_{n}", 0.11, "bare"), ("modal", 0.11, "bare"),
        ]

    def _build(self) -> None:
        self.classes = self._classes()
        kinds = [(n, a) for n in ("sg", "pl") for a in ("anim", "inan")]
        # Clause ends: stop, or go on with an adverb, a prepositional phrase or a conjunction.
        self._add("end", [("adv", 0.35, "end2"), ("prep", 0.35, "pp:np"), ("conj", 0.3, "start")], p_end=P_END)
        self._add("end2", [("conj", 1.0, "start")], p_end=P_END_AFTER_MODIFIER)
        self._noun_phrase("pp", {k: "end2" for k in kinds})
        self._noun_phrase("obj", {k: "end" for k in kinds}, pronouns={"pron_obj": "end"}, names="end")
        self._add("adj_pred", [("adj", 1.0, "end")])
        self._add("bare", [("intr_bare", 0.5, "end"), ("tran_bare", 0.5, "obj:np")])
        for n, a in kinds:
            self._add(f"verb_{n}_{a}", self._verb_phrase(n, a, "end"))
            # A relative clause; afterwards the main verb still agrees with the subject (n, a).
            main = f"verb_{n}_{a}"
            inner = self._noun_phrase(
                f"relsubj_{n}_{a}", {(m, "anim"): f"relverb_{n}_{a}_{m}" for m in ("sg", "pl")},
                animacy=("anim",), a_an=False,
                pronouns={"pron_sg": f"relverb_{n}_{a}_sg", "pron_pl": f"relverb_{n}_{a}_pl"},
            )
            for m in ("sg", "pl"):
                self._add(f"relverb_{n}_{a}_{m}", [(f"tran_{m}", 0.75, main), ("tran_past", 0.25, main)])
            # Subject gap ("THAT RUNS", animate subjects only) or object gap ("THAT THE CATS CHASE"),
            # which starts with the inner subject's first word.
            gap: list = []
            if a == "anim":
                relobj = self._noun_phrase(f"relobj_{n}", {k: main for k in kinds}, a_an=False)
                gap = [(f"intr_{n}", 0.3, main), (f"tran_{n}", 0.3, relobj)]
            share = 1.0 - sum(p for _, p, _ in gap)
            rel = gap + [(e.words, e.prob * share, e.next) for e in self.states[inner].entries]
            self._add(f"rel_{n}_{a}", rel)
            self._add(f"subj_{n}_{a}", [(f"rel_{a}", P_RELATIVE, f"rel_{n}_{a}")]
                      + [(c, p * (1 - P_RELATIVE), nxt) for c, p, nxt in self._verb_phrase(n, a, "end")])
        self._noun_phrase(
            "s", {k: f"subj_{k[0]}_{k[1]}" for k in kinds},
            pronouns={"pron_sg": "verb_sg_anim", "pron_pl": "verb_pl_anim"}, names="verb_sg_anim",
        )
        self._add("start", [(e.words, e.prob, e.next) for e in self.states["s:np"].entries])
        reachable = self._reachable()
        self.states = {k: v for k, v in self.states.items() if k in reachable}

    def _reachable(self) -> set[str]:
        seen, todo = {"start"}, ["start"]
        while todo:
            for e in self.states[todo.pop()].entries:
                if e.next not in seen:
                    seen.add(e.next)
                    todo.append(e.next)
        return seen

    def _check_deterministic(self) -> None:
        for name, state in self.states.items():
            succ: dict[str, str] = {}
            for e in state.entries:
                for w, _ in e.words:
                    if succ.setdefault(w, e.next) != e.next:
                        raise ValueError(f"state {name}: word {w} leads to both {succ[w]} and {e.next}")

    # ------------------------------------------------------------ words and sampling

    def vocabulary(self) -> set[str]:
        """Every word some state can emit."""
        return {w for st in self.states.values() for e in st.entries for w, _ in e.words}

    def word_choices(self, state: str) -> dict[str, tuple[float, str]]:
        """word -> (probability of emitting it from `state`, next state); duplicates merged."""
        if state not in self._choices:
            out: dict[str, tuple[float, str]] = {}
            for e in self.states[state].entries:
                for w, p in e.words:
                    prev = out.get(w, (0.0, e.next))[0]
                    out[w] = (prev + e.prob * p, e.next)
            self._choices[state] = out
        return self._choices[state]

    @cached_property
    def _samplers(self) -> dict[str, tuple[list[str], np.ndarray, list[str]]]:
        out = {}
        for name in self.states:
            choices = self.word_choices(name)
            words = sorted(choices)
            probs = np.array([choices[w][0] for w in words])
            out[name] = (words, np.cumsum(probs) / probs.sum(), [choices[w][1] for w in words])
        return out

    def sample_sentences(self, n: int, rng: np.random.Generator) -> list[str]:
        """n sentences drawn from the word-level process (no <eos>, words joined by one space)."""
        sentences = []
        for _ in range(n):
            state, words = "start", []
            while True:
                if words and rng.random() < self.states[state].p_end:
                    break
                vocab, cum, nxt = self._samplers[state]
                i = min(int(np.searchsorted(cum, rng.random(), side="right")), len(vocab) - 1)
                words.append(vocab[i])
                state = nxt[i]
            sentences.append(" ".join(words))
        return sentences

    def sentence_logprob(self, sentence: str) -> float:
        """log P(sentence followed by <eos>) from the word-level process (independent of the automaton)."""
        state, logp = "start", 0.0
        words = sentence.split(" ")
        for i, w in enumerate(words):
            if i:
                logp += np.log1p(-self.states[state].p_end)
            choices = self.word_choices(state)
            if w not in choices:
                return float("-inf")
            p, state = choices[w]
            logp += np.log(p)
        pe = self.states[state].p_end
        return float(logp + np.log(pe)) if pe > 0 else float("-inf")

    # ------------------------------------------------------------ character automaton

    @cached_property
    def automaton(self) -> Automaton:
        """The character-level automaton: a state per (grammar state, prefix of the word being spelled)."""
        index: dict[tuple[str, str], int] = {("start", ""): 0}
        src, char, dst, w = [], [], [], []

        def state_id(g: str, prefix: str) -> int:
            if (g, prefix) not in index:
                index[(g, prefix)] = len(index)
            return index[(g, prefix)]

        for g in sorted(self.states, key=lambda s: (s != "start", s)):
            choices = self.word_choices(g)
            # mass[prefix] = probability that the word starts with prefix;
            # children[prefix][c] = probability that it starts with prefix + c.
            mass: dict[str, float] = {}
            children: dict[str, dict[str, float]] = {}
            for word, (p, _) in choices.items():
                for k in range(len(word) + 1):
                    mass[word[:k]] = mass.get(word[:k], 0.0) + p
                    if k < len(word):
                        after = children.setdefault(word[:k], {})
                        after[word[k]] = after.get(word[k], 0.0) + p
            for prefix in sorted(mass):
                here = state_id(g, prefix)
                for c, p in sorted(children.get(prefix, {}).items()):
                    src.append(here), char.append(encode(c)[0]), dst.append(state_id(g, prefix + c))
                    w.append(p / mass[prefix])
                if prefix in choices:
                    p, nxt = choices[prefix]
                    frac = p / mass[prefix]
                    pe = self.states[nxt].p_end
                    if pe > 0:
                        src.append(here), char.append(EOS), dst.append(0), w.append(frac * pe)
                    src.append(here), char.append(SPACE), dst.append(state_id(nxt, "")), w.append(frac * (1 - pe))
        self.char_states = {v: k for k, v in index.items()}
        return Automaton(len(index), 0, src, char, dst, w)


INTRANSITIVE_KEYS = [f[0] for f in INTRANSITIVE]
TRANSITIVE_KEYS = [f[0] for f in TRANSITIVE]
FORMS_I = {f[0]: f for f in INTRANSITIVE}
FORMS_T = {f[0]: f for f in TRANSITIVE}
