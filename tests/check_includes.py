#!/usr/bin/env python3
"""Enforces the module rules of DESIGN.md §3 by reading #include lines:
- each module is included only through its public header src/<m>/<m>.h
  (other headers are private to their module), except proto/, whose codecs
  each have their own public header (PUBLIC_HEADERS);
- proto/ (provider and client formats, sans-IO) includes base and json
  only: no transport, no routing; routing, gateway, graph and extproc may
  include it;
- routing, signals, decision, plugins, graph and upstream include nothing
  from gateway/ or extproc/, and no libuv, Envoy or gRPC header in routing's
  transport-agnostic core (routing, signals, decision, plugins);
- nothing includes gateway/ except cmd/, and extproc/ (the ext_proc protocol,
  transport-free like routing) only cmd/ and gateway/ (which carries its
  gRPC streams);
- the module graph has no cycles and follows the allowed dependencies."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

ALLOWED = {
    "base": set(),
    "json": {"base"},
    "http": {"base"},
    "proto": {"base", "json"},
    "config": {"base", "json", "http"},
    "signals": {"base", "json", "http", "config", "runtime"},
    "decision": {"base", "json", "http", "config", "signals"},
    "plugins": {"base", "json", "http", "config"},
    "graph": {"base", "json", "http", "config", "routing", "proto"},
    "routing": {"base", "json", "http", "config", "signals", "decision", "plugins", "graph", "proto"},
    "upstream": {"base", "json", "http", "config"},
    "runtime": {"base", "json", "http", "models"},
    "models": {"base"},
    "obs": {"base"},
    "store": {"base"},
    "admin": {"base", "json", "http", "config", "routing"},
    "gateway": {"base", "json", "http", "config", "routing", "upstream", "obs", "admin", "store", "extproc", "proto"},
    "extproc": {"base", "json", "http", "config", "routing", "upstream", "obs", "proto"},
    "cmd": None,  # the composition root may include everything
}
TRANSPORT_FREE = {"routing", "signals", "decision", "plugins", "proto"}
# modules with more than one public header: proto's codecs, one header each
PUBLIC_HEADERS = {"proto": {"sse.h", "anthropic.h", "responses.h", "completions.h"}}
FORBIDDEN_SYSTEM = re.compile(r"^(uv\.h|uv/|nghttp2|grpc|envoy|protobuf-c)")

inc_re = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
errors = []
deps = {}
for f in sorted(SRC.glob("*/*")):
    if f.suffix not in (".c", ".h", ".cc"):
        continue
    mod = f.parent.name
    if mod not in ALLOWED:
        errors.append(f"{f.relative_to(ROOT)}: module {mod!r} is not in DESIGN.md §3 (add it there and here)")
        continue
    for kind, path in inc_re.findall(f.read_text(errors="replace")):
        if kind == "<":
            if mod in TRANSPORT_FREE and FORBIDDEN_SYSTEM.match(path):
                errors.append(f"{f.relative_to(ROOT)}: transport-agnostic module includes <{path}>")
            continue
        parts = path.split("/")
        if len(parts) == 1 and (f.parent / path).exists():
            continue  # a header of the same module, by its bare name
        if len(parts) != 2:
            errors.append(f"{f.relative_to(ROOT)}: include \"{path}\" must be \"module/header.h\"")
            continue
        target, header = parts
        if target == mod:
            continue
        deps.setdefault(mod, set()).add(target)
        if header != f"{target}.h" and header not in PUBLIC_HEADERS.get(target, ()):
            errors.append(f"{f.relative_to(ROOT)}: includes {path}, a private header of {target}/")
        if (target == "gateway" and mod != "cmd") or (target == "extproc" and mod not in ("cmd", "gateway")):
            errors.append(f"{f.relative_to(ROOT)}: only cmd/ may include {target}/")
        allowed = ALLOWED[mod]
        if allowed is not None and target not in allowed:
            errors.append(f"{f.relative_to(ROOT)}: {mod}/ may not depend on {target}/")

# cycles
state = {}
def visit(m, stack):
    state[m] = 1
    for d in deps.get(m, ()):
        if state.get(d) == 1:
            errors.append("dependency cycle: " + " -> ".join(stack + [m, d]))
        elif d not in state:
            visit(d, stack + [m])
    state[m] = 2
for m in list(deps):
    if m not in state:
        visit(m, [])

for e in errors:
    print(e)
print(f"include rules: {len(errors)} violation(s) in {len(list(SRC.glob('*/*')))} files")
sys.exit(1 if errors else 0)
