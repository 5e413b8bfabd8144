// The package's own scoring (llm_guardrail@2.1.2, model/tfidf.js and
// model/logistic_regression.js) for tests/e2e/test_guard_oracle.py:
//   node guard_oracle.mjs PACKAGE_DIR < hex-lines
// prints one JSON object per text: {"jailbreak":p,"prompt_injection":p}.
import fs from 'fs';
import path from 'path';
import { pathToFileURL } from 'url';

const dir = process.argv[2];
const { TfidfVectorizer } = await import(pathToFileURL(path.join(dir, 'model', 'tfidf.js')));
const { LogisticRegression } = await import(pathToFileURL(path.join(dir, 'model', 'logistic_regression.js')));
const models = {};
for (const name of ['jailbreak', 'prompt_injection']) {
  const data = JSON.parse(fs.readFileSync(path.join(dir, 'model', `${name}_model.json`), 'utf8'));
  models[name] = { v: new TfidfVectorizer(data), m: new LogisticRegression(data) };
}
const lines = fs.readFileSync(0, 'utf8').split('\n');
if (lines.length && lines[lines.length - 1] === '') lines.pop();
const out = [];
for (const hex of lines) {
  const text = Buffer.from(hex, 'hex').toString('utf8');
  const r = {};
  for (const [name, { v, m }] of Object.entries(models)) r[name] = m.predictProba(v.transform(text)).positiveProb;
  out.push(JSON.stringify(r));
}
process.stdout.write(out.join('\n') + '\n');
