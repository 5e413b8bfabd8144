#!/usr/bin/env python3
"""domain_data.py — builds data/domains/debian.jsonl, training questions for the
domain classifier generated from labelled Debian dictionaries:

  dict-gcide   (GNU Collaborative International Dictionary of English, GPL-3+):
               entries whose definition carries a subject label such as
               (Law), (Chem.), (Zool.), (Com.), (Computers)
  wordnet-base (WordNet 3.0, WordNet licence): noun and verb synsets with a
               topic-domain pointer (;c) to law, chemistry, medicine ...;
               people (instances of physicist, philosopher, president ...)
  dict-foldoc  (Free On-line Dictionary of Computing, GFDL): computing terms

Each entry becomes one question built from its term and its definition by a
template chosen from a hash of the term (so the same packages always give the
same file), e.g. "What is meant by tort? I read that it is ...".  At most
--per-class questions per class are kept, the ones whose term hashes lowest.

  tools/models/domain_data.py [--root DIR] [--per-class N] OUT.jsonl

--root is where the packages are unpacked (default: /, i.e. installed with
apt-get install dict-gcide wordnet-base dict-foldoc); tools/models/domain.sh
downloads and unpacks them without installing anything.  Needs Python 3 only.
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import sys

CLASSES = ["biology", "business", "chemistry", "computer science", "economics", "engineering", "health",
           "history", "law", "math", "other", "philosophy", "physics", "psychology"]

# GCIDE subject label (the text inside the parentheses, without a final '.')
GCIDE = {
    "Law": "law", "Eccl. Law": "law", "Law Dict": "law", "Crim. Law": "law", "Civil Law": "law",
    "Rom. Law": "law", "Old Law": "law", "Scots Law": "law", "Eng. Law": "law", "Feud. Law": "history",
    "Chem": "chemistry", "Med. Chem": "chemistry", "Physics & Chem": "chemistry", "Chemistry": "chemistry",
    "Org. Chem": "chemistry", "Min": "chemistry", "Mineral": "chemistry",
    "Zool": "biology", "Bot": "biology", "Biol": "biology", "Biology": "biology", "Botany": "biology",
    "Genetics": "biology", "Physiol": "biology", "Biochem": "biology", "Bot. & Zool": "biology",
    "Anat. & Zool": "biology", "Physiol. Chem": "biology", "Microbiology": "biology", "Zoology": "biology",
    "Med": "health", "Anat": "health", "Surg": "health", "Pharm": "health", "Pathol": "health",
    "Physiol. & Med": "health", "Pharmacy": "health", "Medicine": "health", "Therapeutics": "health",
    "Dentistry": "health", "Obstetrics": "health", "Med. & Zool": "health",
    "Math": "math", "Geom": "math", "Alg": "math", "Arith": "math", "Trig": "math", "Statistics": "math",
    "Math. & Physics": "math", "Calculus": "math", "Mathematics": "math",
    "Physics": "physics", "Optics": "physics", "Electricity": "physics", "Astron": "physics",
    "Acoustics": "physics", "Magnetism": "physics", "Astronomy": "physics", "Physics & Math": "physics",
    "Mach": "engineering", "Engin": "engineering", "Steam Engine": "engineering", "Mining": "engineering",
    "Metal": "engineering", "Elec": "engineering", "Mech": "engineering", "Arch. & Engin": "engineering",
    "Civil Engin": "engineering", "Electronics": "engineering", "Metallurgy": "engineering",
    "Metal Working": "engineering", "Milling": "engineering", "Railroad": "engineering",
    "Computers": "computer science", "Computer": "computer science",
    "Pol. Econ": "economics", "Economics": "economics", "Econ": "economics",
    "Com": "business", "Finance": "business", "Commerce": "business", "Bookkeeping": "business",
    "Stock Exchange": "business", "Banking": "business", "Business": "business",
    "Philos": "philosophy", "Metaph": "philosophy", "Logic": "philosophy", "Theol": "philosophy",
    "Ethics": "philosophy", "Philosophy": "philosophy", "Eccl": "philosophy",
    "Psychol": "psychology", "Psychology": "psychology", "Psychiatry": "psychology",
    "Hist": "history", "Antiq": "history", "Eccl. Hist": "history", "Mil. Antiq": "history",
    "Gr. Antiq": "history", "Rom. Antiq": "history", "Arch[ae]ol": "history", "Feudal Law": "history",
    "Cookery": "other", "Sport": "other", "Sports": "other", "Mus": "other", "Music": "other",
    "Games": "other", "Her": "other", "Fine Arts": "other", "Geog": "other", "Baseball": "other",
    "Football": "other", "Cricket": "other", "Golf": "other", "Card Playing": "other", "Chess": "other",
}

# WordNet topic domain (first word of the domain synset) -> class
WN_DOMAIN = {
    "law": "law", "criminal_law": "law", "jurisprudence": "law", "civil_law": "law",
    "computer_science": "computer science", "computer": "computer science", "computing": "computer science",
    "physics": "physics", "particle_physics": "physics", "astronomy": "physics", "cosmology": "physics",
    "nuclear_physics": "physics", "optics": "physics", "thermodynamics": "physics", "mechanics": "physics",
    "mathematics": "math", "statistics": "math", "geometry": "math", "algebra": "math", "arithmetic": "math",
    "biology": "biology", "genetics": "biology", "botany": "biology", "zoology": "biology", "ecology": "biology",
    "biochemistry": "biology", "organism": "biology", "microbiology": "biology", "embryology": "biology",
    "cytology": "biology", "animal": "biology", "plant": "biology",
    "chemistry": "chemistry", "organic_chemistry": "chemistry", "chemical_science": "chemistry",
    "medicine": "health", "anatomy": "health", "pathology": "health", "surgery": "health",
    "obstetrics": "health", "dentistry": "health", "pharmacology": "health", "physiology": "health",
    "pregnancy": "health", "medical_science": "health", "immunology": "health", "nutrition": "health",
    "psychology": "psychology", "psychoanalysis": "psychology", "psychiatry": "psychology",
    "philosophy": "philosophy", "logic": "philosophy", "theology": "philosophy", "religion": "philosophy",
    "ethics": "philosophy", "Christianity": "philosophy", "Islam": "philosophy", "Buddhism": "philosophy",
    "Hinduism": "philosophy", "Judaism": "philosophy",
    "economics": "economics", "finance": "business", "commercial_enterprise": "business",
    "corporation": "business", "accounting": "business", "stock_exchange": "business", "tax": "business",
    "marketing": "business", "commerce": "business", "business": "business",
    "architecture": "engineering", "electronics": "engineering", "telecommunication": "engineering",
    "engineering": "engineering", "airplane": "engineering", "aircraft": "engineering", "car": "engineering",
    "electrical_engineering": "engineering",
    "antiquity": "history", "Middle_Ages": "history", "archeology": "history", "history": "history",
    "sport": "other", "baseball": "other", "golf": "other", "football": "other", "American_football": "other",
    "music": "other", "chess": "other", "art": "other", "tennis": "other", "cooking": "other",
    "soccer": "other", "basketball": "other", "ice_hockey": "other", "game": "other", "card_game": "other",
    "photography": "other", "cricket": "other", "boxing": "other", "ballet": "other", "fashion": "other",
}

# a person's gloss noun -> class ("Who was ...?")
WN_PERSON = [
    (r"\b(physicist|astronomer)\b", "physics"), (r"\bchemist\b", "chemistry"),
    (r"\b(mathematician|logician)\b", "math"), (r"\b(biologist|naturalist|botanist|zoologist|geneticist)\b",
                                                "biology"),
    (r"\b(philosopher|theologian)\b", "philosophy"), (r"\b(psychologist|psychiatrist|psychoanalyst)\b",
                                                      "psychology"),
    (r"\beconomist\b", "economics"), (r"\b(physician|surgeon|bacteriologist)\b", "health"),
    (r"\b(jurist|lawyer|judge)\b", "law"), (r"\b(industrialist|financier|businessman)\b", "business"),
    (r"\b(engineer|inventor)\b", "engineering"), (r"\bcomputer scientist\b", "computer science"),
    (r"\b(President of the United States|emperor|king of|queen of|general who|statesman|pharaoh)\b",
     "history"),
    (r"\b(composer|painter|athlete|baseball player|tennis player|actor|actress|singer)\b", "other"),
]
WN_EVENT_HIST = re.compile(r"\b(battle|war|revolution|treaty|siege|invasion|dynasty|empire|rebellion)\b")


def key(s):
    return hashlib.sha256(s.encode()).hexdigest()


def clean(s):
    s = re.sub(r"\s+", " ", s).strip()
    return s.rstrip(" ;:,")


def question(term, gloss, cls, person=False):
    """One user-style question from a term and its definition; the template
    is chosen from the term's hash."""
    term = term.replace("_", " ")
    gloss = clean(gloss).rstrip(".")
    g = gloss[0].lower() + gloss[1:] if gloss else gloss
    h = int(key(term + "|" + cls)[:8], 16)
    if person:
        t = [f"Who was {term}?", f"What is {term} known for? I read that {term} was a {g}.",
             f"Tell me about {term}, the {g}.", f"Which person was a {g}?"]
    else:
        t = [f"What is {term}?", f"What is meant by {term}? I read that it is {g}.",
             f"Which term describes {g}?", f"Explain {term}: {g}.", f"Can you explain {term}?",
             f"Is {term} the same as {g}?", f"How would you define {term} ({g})?",
             f"In simple words, what does {term} mean?"]
    return t[h % len(t)]


def gcide(root):
    path = os.path.join(root, "usr/share/dictd/gcide.dict.dz")
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = []
    # an entry starts at a line "Headword \Pron\, pos. (Label)" or a sense
    # line "   2. (Label) definition"
    head = None
    for block in re.split(r"\n(?=\S)", text):
        m = re.match(r"([A-Za-z][A-Za-z \-']{1,40}?) \\", block)
        if m:
            head = m.group(1).strip()
        if not head:
            continue
        for lab, body in re.findall(r"\((?P<l>[A-Z][A-Za-z.& \[\]]{1,30}?)\.?\)\s+((?:[^\n]|\n   (?!\d+\. |\[))+)",
                                    block):
            cls = GCIDE.get(lab.rstrip("."))
            if not cls:
                continue
            body = re.sub(r"\[[^\]]*\]", "", body)        # [Webster 1913] and the like
            body = re.sub(r"[{}]", "", body)
            body = re.sub(r"--.*$", "", body)             # quotations after a dash
            body = clean(body.split("; as,")[0].split(" See ")[0])
            if len(body) < 25 or not re.search(r"[a-z]{3}", body):
                continue
            out.append((cls, head, body[:300]))
    return out


def wordnet(root):
    base = os.path.join(root, "usr/share/wordnet")
    syn = {}
    for pos in ("noun", "verb"):
        with open(os.path.join(base, "data." + pos), encoding="latin-1") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                head, _, gloss = line.partition(" | ")
                fl = head.split()
                w = int(fl[3], 16)
                words = [fl[4 + 2 * i] for i in range(w)]
                i = 5 + 2 * w
                ptrs = [(fl[i + 4 * k], fl[i + 4 * k + 1], fl[i + 4 * k + 2]) for k in range(int(fl[i - 1]))]
                syn[(pos[0], fl[0])] = (words, ptrs, gloss.strip())
    out = []
    for (pos, off), (words, ptrs, gloss) in sorted(syn.items()):
        g = gloss.split('"')[0].split(";")[0]
        if len(g) < 20:
            continue
        term = words[0].replace("_", " ")
        for sym, o, p in ptrs:
            if sym == ";c" and (p, o) in syn:
                cls = WN_DOMAIN.get(syn[(p, o)][0][0])
                if cls:
                    out.append((cls, term, g))
                    break
            if sym == "@i" and (p, o) in syn:
                hyper = " ".join(syn[(p, o)][0]).replace("_", " ")
                if pos == "n" and re.search(r"\d{3,4}", g):
                    for rx, cls in WN_PERSON:
                        if re.search(rx, g):
                            out.append((cls, term, g, True))
                            break
                    else:
                        if WN_EVENT_HIST.search(hyper) or WN_EVENT_HIST.search(g):
                            out.append(("history", term, g))
                break
    return out


def foldoc(root):
    path = os.path.join(root, "usr/share/dictd/foldoc.dict.dz")
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    out = []
    for block in re.split(r"\n(?=\S)", text):
        lines = block.split("\n")
        term = lines[0].strip()
        body = " ".join(l.strip() for l in lines[1:] if l.strip())
        body = re.sub(r"\{([^}]*)\}", r"\1", body)
        body = re.sub(r"\([0-9]{4}-[0-9]{2}-[0-9]{2}\)", "", body)
        body = re.sub(r"<[^>]*>", "", body)
        first = clean(re.split(r"(?<=[a-z)])\. ", body)[0])
        if not term or not re.match(r"[A-Za-z]", term) or len(first) < 25 or first.startswith("See"):
            continue
        out.append(("computer science", term, first[:300]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/")
    ap.add_argument("--per-class", type=int, default=600)
    ap.add_argument("out")
    a = ap.parse_args()
    items = {}
    for src, entries in (("gcide", gcide(a.root)), ("wordnet", wordnet(a.root)), ("foldoc", foldoc(a.root))):
        n = 0
        for e in entries:
            cls, term, gloss = e[0], e[1], e[2]
            person = len(e) > 3
            if term.lower() in (c for c in CLASSES):
                continue
            q = question(term, gloss, cls, person)
            k = key(cls + "|" + term.lower())
            if k not in items:
                items[k] = (cls, q, src)
                n += 1
        print(f"{src}: {n} questions", file=sys.stderr)
    by_class = {c: [] for c in CLASSES}
    for k in sorted(items):
        cls, q, src = items[k]
        by_class[cls].append(q)
    with open(a.out, "w", encoding="utf-8") as f:
        for c in CLASSES:
            qs = by_class[c][: a.per_class]
            print(f"{c}: {len(by_class[c])} available, {len(qs)} kept", file=sys.stderr)
            for q in qs:
                f.write(json.dumps({"label": c, "text": q}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
