// Validate rendered manifests (YAML, multi-document, on stdin: parsed by the
// caller into JSON lines) against the Kubernetes schemas of kubernetes-models.
// Usage: node validate.js MODULE_DIR < docs.jsonl
const path = require("path");
const readline = require("readline");
const root = process.argv[2];
const groups = {
  "v1": "v1", "apps/v1": "apps/v1", "policy/v1": "policy/v1",
  "autoscaling/v2": "autoscaling/v2", "networking.k8s.io/v1": "networking.k8s.io/v1",
  "rbac.authorization.k8s.io/v1": "rbac.authorization.k8s.io/v1",
};
let failed = 0, n = 0;
const rl = readline.createInterface({ input: process.stdin });
rl.on("line", (line) => {
  if (!line.trim()) return;
  const doc = JSON.parse(line);
  const g = groups[doc.apiVersion];
  if (!g) { console.error(`no schema for ${doc.apiVersion}`); failed++; return; }
  const mod = require(path.join(root, "kubernetes-models", g, doc.kind));
  try { new mod[doc.kind](doc).validate(); n++; }
  catch (e) { console.error(`${doc.kind} ${doc.metadata.name}: ${e.message}`); failed++; }
});
rl.on("close", () => { if (n + failed === 0) { console.error("no manifests on stdin"); failed = 1; }
  console.log(`${n} valid, ${failed} invalid`); process.exit(failed ? 1 : 0); });
