#!/usr/bin/env python3
"""Builds data/pii/eval.jsonl from the hand-written sources data/pii/eval_pos.txt
(texts with personal data, each entity marked [[TYPE|exact text]]) and
data/pii/eval_neg.txt (texts without any).  One text a line; a literal \\n is a
newline.  Each output line: {"text": ..., "entities": [{"type", "text",
"start", "end"}]} with start/end BYTE offsets of the UTF-8 text.

    python3 tools/pii/eval_markup.py            # rewrites data/pii/eval.jsonl
    python3 tools/pii/eval_markup.py heldout    # heldout_{pos,neg}.txt -> heldout.jsonl
"""
import json
import pathlib
import re
import sys

D = pathlib.Path(__file__).resolve().parents[2] / "data" / "pii"
TYPES = {"PERSON", "EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IP_ADDRESS", "IBAN_CODE", "US_SSN",
         "DATE_TIME", "STREET_ADDRESS", "DOMAIN_NAME", "ORGANIZATION", "URL"}
MARK = re.compile(r"\[\[([A-Z_]+)\|([^\]]+)\]\]")


def convert(line, positive, where):
    line = line.replace("\\n", "\n")
    text = b""
    ents = []
    pos = 0
    for m in MARK.finditer(line):
        if m.group(1) not in TYPES:
            sys.exit(f"{where}: unknown type {m.group(1)}")
        text += line[pos:m.start()].encode()
        val = m.group(2).encode()
        ents.append({"type": m.group(1), "text": m.group(2), "start": len(text), "end": len(text) + len(val)})
        text += val
        pos = m.end()
    text += line[pos:].encode()
    if re.search(r"\[\[[A-Z_]+\|", text.decode()):
        sys.exit(f"{where}: stray markup")
    if positive != bool(ents):
        sys.exit(f"{where}: {'no entity marked' if positive else 'marked entity in a negative'}")
    return {"text": text.decode(), "entities": ents}


def main():
    out = []
    stem = sys.argv[1] if len(sys.argv) > 1 else "eval"
    for name, positive in ((stem + "_pos.txt", True), (stem + "_neg.txt", False)):
        for n, line in enumerate((D / name).read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                out.append(convert(line, positive, f"{name}:{n}"))
    with open(D / (stem + ".jsonl"), "w", encoding="utf-8") as f:
        for o in out:
            f.write(json.dumps(o, ensure_ascii=False) + "\n")
    print(f"{len(out)} texts, {sum(len(o['entities']) for o in out)} entities", file=sys.stderr)


if __name__ == "__main__":
    main()
