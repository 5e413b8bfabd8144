// The JavaScript runtime of Universal Sentence Encoder lite
// (@energetic-ai/embeddings + @energetic-ai/core), run as the oracle of
// tests/e2e/test_embeddings.py:  node use_oracle.js CACHE_DIR < texts.json
// texts.json is a JSON array of strings; prints a JSON array with, per text,
// {ids, embedding} or {error}.
"use strict";
const fs = require("fs");
const path = require("path");
const cache = process.argv[2];
const mods = path.join(cache, "oracle", "node_modules");
const core = require(path.join(mods, "@energetic-ai", "core"));
const emb = require(path.join(mods, "@energetic-ai", "embeddings"));
const dist = path.join(cache, "model-embeddings-en", "dist");

(async () => {
  const texts = JSON.parse(fs.readFileSync(0, "utf-8"));
  const source = async () => ({
    model: await core.loadGraphModel(`file://${dist}/model.json`),
    vocabulary: JSON.parse(fs.readFileSync(path.join(dist, "vocab.json"), "utf-8")),
  });
  const model = await emb.initModel(source);
  const out = [];
  for (const t of texts) {
    const ids = model.tokenizer.encode(t);
    try {
      const e = await model.embed(t);
      out.push({ ids, embedding: e });
    } catch (err) {
      out.push({ ids, error: String(err && err.message ? err.message : err) });
    }
  }
  process.stdout.write(JSON.stringify(out));
})().catch((err) => { console.error(err); process.exit(1); });
