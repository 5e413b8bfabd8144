"""The sentence-embedding model in C (src/models/use_lite.c) against the
model's own JavaScript runtime (@energetic-ai/embeddings + @energetic-ai/core,
run with node): identical token ids and every component within 1e-5, on
ASCII, accents and ligatures, CJK, emoji, text past the 128-token window and
past the tokenizer's chunk size; empty text refused by both.

The model and the oracle come from scripts/setup-deps (VSR_MODEL_CACHE,
default ~/.cache/vsr/models).  Without them the tests skip, except under CI
(CI set), where they fail: CI must prove the model."""
import json
import pathlib
import subprocess

import pytest

from conftest import ENV, MODEL_CACHE, SANITIZER_MARKS, USE_MODEL, VSR_BIN, require

CACHE = MODEL_CACHE
MODEL = USE_MODEL
ORACLE_JS = pathlib.Path(__file__).resolve().parents[1] / "tools" / "use_oracle.js"
USE_EMBED = pathlib.Path(VSR_BIN).parent / "use_embed"
TOL = 1e-5
WINDOW = 128

LONG_EN = " ".join(
    "Routing decides which model answers a request, by signals computed on the prompt: keywords, "
    "language, embeddings and classifiers, each with its own threshold and fallback.".split() * 6)
LONG_SPACED = ("The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. " * 80)
TEXTS = [
    "What is the capital of France?",
    "Which city is France's capital?",
    "How do I reverse a linked list in C?",
    "Write a function that reverses a singly linked list.",
    "Café naïve résumé — ﬁancé ①",
    "nai\u0308ve cafe\u0301, Ⅻ ㎏ ﬀ ﬃ ｆｕｌｌｗｉｄｔｈ",  # combining marks and compatibility forms
    "東京は日本の首都です。",
    "我喜欢在周末读书和爬山",
    "I love pizza 🍕🍕 😀! 👩‍💻",
    "a\u00a0b\u3000c  d\te\nf",  # spaces that NFKC turns into U+0020, and ones it doesn't
    "x",
    LONG_EN,       # past the 128-token window
    LONG_SPACED,   # past the tokenizer's 4 KiB chunk
]


def have_model():
    require([MODEL, CACHE / "oracle" / "node_modules" / "@energetic-ai" / "embeddings", USE_EMBED], ["node"],
            what="embedding model or oracle")


def oracle(texts):
    out = subprocess.run(["node", str(ORACLE_JS), str(CACHE)], input=json.dumps(texts).encode(),
                         capture_output=True, timeout=300, check=True)
    return json.loads(out.stdout)


def ours(texts, batch=False):
    stdin = "".join(t.encode("utf-8").hex() + "\n" for t in texts).encode()
    args = [str(USE_EMBED), str(MODEL)] + (["--batch"] if batch else [])
    out = subprocess.run(args, input=stdin, capture_output=True, timeout=300, env=ENV)
    err = out.stderr.decode(errors="replace")
    assert out.returncode == 0, err
    assert not any(m in err for m in SANITIZER_MARKS), err
    return [json.loads(line) for line in out.stdout.decode().splitlines()]


@pytest.fixture(scope="module")
def compared():
    have_model()
    return oracle(TEXTS), ours(TEXTS)


def max_diff(a, b):
    assert len(a) == len(b) == 512
    return max(abs(x - y) for x, y in zip(a, b))


@pytest.mark.parametrize("i", range(len(TEXTS)))
def test_same_ids_and_embedding_as_the_js_runtime(compared, i):
    js, c = compared[0][i], compared[1][i]
    assert c["ids"] == js["ids"], TEXTS[i][:60]
    assert "error" not in js, js.get("error")
    assert c["rc"] == 0
    d = max_diff(c["embedding"], js["embedding"])
    assert d <= TOL, f"max |diff| {d:.3g} for {TEXTS[i][:60]!r}"
    norm = sum(x * x for x in c["embedding"]) ** 0.5
    assert abs(norm - 1.0) < 1e-5


def test_long_texts_are_clipped_to_the_window(compared):
    for i in (TEXTS.index(LONG_EN), TEXTS.index(LONG_SPACED)):
        assert len(compared[1][i]["ids"]) > WINDOW
    # the window: only the first 128 tokens count, so a longer tail changes nothing
    js_long, c_long = compared[0][TEXTS.index(LONG_SPACED)], compared[1][TEXTS.index(LONG_SPACED)]
    c_more = ours([LONG_SPACED + " and then some more words that lie past the window"])[0]
    assert max_diff(c_more["embedding"], c_long["embedding"]) == 0.0
    assert max_diff(c_long["embedding"], js_long["embedding"]) <= TOL


def test_similar_sentences_are_close(compared):
    e = [r["embedding"] for r in compared[1]]
    cos = lambda a, b: sum(x * y for x, y in zip(a, b))
    assert cos(e[0], e[1]) > 0.85            # two ways to ask for France's capital
    assert cos(e[2], e[3]) > 0.55            # linked-list reversal
    assert cos(e[0], e[2]) < 0.35            # unrelated


def test_batch_equals_one_by_one(compared):
    batch = ours(TEXTS, batch=True)
    for one, b in zip(compared[1], batch):
        assert b["ids"] == one["ids"] and b["rc"] == one["rc"]
        assert max_diff(b["embedding"], one["embedding"]) <= 1e-6


def test_empty_and_blank_text_are_refused():
    have_model()
    blanks = ["", "   ", "\t\n ", "\u3000\u00a0"]
    js = oracle(blanks)
    c = ours(blanks + ["", "ok"], batch=True)
    # the JS runtime throws on empty text; vsr refuses it with a code, never a crash
    assert "error" in js[0] and js[0]["ids"] == []
    assert c[0] == {"rc": -3, "ids": [], "embedding": []}
    # white space alone: the JS runtime embeds its U+2581 pieces; vsr refuses it
    # (nothing to compare a prompt by) but tokenizes it identically
    for j, r in zip(js[1:], c[1:len(blanks)]):
        assert r["rc"] == -3 and r["embedding"] == []
        assert r["ids"] == j["ids"]
    # a refused text in a batch leaves the others intact
    assert c[-1]["rc"] == 0 and len(c[-1]["embedding"]) == 512
