#!/usr/bin/env python3
"""Enforces the module rules of DESIGN.md §3 and docs/internals/modules.md
(the module map) by reading #include lines and the tree:
- each module is included only through its public header src/<m>/<m>.h
  (other headers are private to their module), except proto/, whose codecs
  each have their own public header (PUBLIC_HEADERS);
- each module includes only the modules of its ALLOWED list, and the module
  graph has no cycles;
- the transport-free modules (TRANSPORT_FREE) include no libuv, socket,
  poll, nghttp2, gRPC, Envoy, protobuf-c, Redis or PostgreSQL header;
- nothing includes gateway/ or extproc/ except cmd/ (the composition root);
  the files named in INCLUDE_ALLOWANCES are the known exceptions, and an
  allowance no longer used is an error, so it goes when its fix lands;
- no two files in different modules share a name (SAME_NAME lists the
  ones that are one concept at two layers);
- docs/internals/modules.md has a line for every file under src/ and none
  for a file that is gone, and each module's "May include:" line there is
  its ALLOWED list."""
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
    "gateway": {"base", "json", "http", "config", "routing", "upstream", "obs", "admin", "store", "proto"},
    "extproc": {"base", "json", "http", "config", "routing", "upstream", "obs", "proto"},
    "cmd": None,  # the composition root may include everything
}
TRANSPORT_FREE = {"json", "http", "proto", "config", "models", "graph", "routing", "signals", "decision", "plugins"}
# modules with more than one public header: proto's codecs, one header each
PUBLIC_HEADERS = {"proto": {"sse.h", "anthropic.h", "responses.h", "completions.h"}}
FORBIDDEN_SYSTEM = re.compile(r"^(uv\.h|uv/|nghttp2|grpc|envoy|protobuf-c|sys/socket\.h|sys/epoll\.h|poll\.h|netdb\.h|"
                              r"netinet/|hiredis|libpq)")
# Includes of gateway/ or extproc/ from outside cmd/ that are known and owed a
# fix (none now: the ext_proc listener gets extproc's stream as a port,
# vsr_gateway_opts_t.extproc, that cmd/ fills).
INCLUDE_ALLOWANCES = set()
# file names that may repeat across modules: one concept at two layers
SAME_NAME = {}
MAP = ROOT / "docs" / "internals" / "modules.md"

inc_re = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
errors = []
deps = {}
used = set()
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
        rel = f"{mod}/{f.name}"
        if target in ("gateway", "extproc") and mod != "cmd":
            if (rel, target) in INCLUDE_ALLOWANCES:
                used.add((rel, target))
                continue
            errors.append(f"{f.relative_to(ROOT)}: only cmd/ may include {target}/")
        allowed = ALLOWED[mod]
        if allowed is not None and target not in allowed:
            errors.append(f"{f.relative_to(ROOT)}: {mod}/ may not depend on {target}/")

for rel, target in sorted(INCLUDE_ALLOWANCES - used):
    errors.append(f"src/{rel}: no longer includes {target}/: remove its INCLUDE_ALLOWANCES entry")

# repeated file names
names = {}
for f in sorted(SRC.glob("*/*")):
    if f.suffix in (".c", ".cc"):
        names.setdefault(f.name, []).append(f"{f.parent.name}/{f.name}")
for name, where in sorted(names.items()):
    if len(where) > 1 and name not in SAME_NAME:
        errors.append(f"{', '.join(where)}: one file name in several modules: give each a name that says what it is")

# the module map
documented = {}
section = None
for n, line in enumerate(MAP.read_text().splitlines(), 1):
    m = re.match(r"^## `([a-z_]+)/`$", line)
    if m:
        section = m.group(1)
        documented.setdefault(section, {"files": set(), "include": None})
        continue
    m = re.match(r"^- `([a-z_]+)/([^`/]+)` — \S", line)
    if m:
        if m.group(1) != section:
            errors.append(f"{MAP.relative_to(ROOT)}:{n}: {m.group(1)}/{m.group(2)} listed under {section}/")
        if not (SRC / m.group(1) / m.group(2)).is_file():
            errors.append(f"{MAP.relative_to(ROOT)}:{n}: src/{m.group(1)}/{m.group(2)} does not exist")
        documented.setdefault(m.group(1), {"files": set(), "include": None})["files"].add(m.group(2))
        continue
    m = re.match(r"^May include: (.*)$", line)
    if m and section:
        text = m.group(1).strip()
        documented[section]["include"] = (None if text == "everything" else
                                          set() if text.startswith("nothing") else
                                          {x.strip() for x in text.split(",")})
for mod in sorted(ALLOWED):
    doc = documented.get(mod)
    if doc is None:
        errors.append(f"{MAP.relative_to(ROOT)}: no section for {mod}/")
        continue
    if doc["include"] != ALLOWED[mod]:
        errors.append(f"{MAP.relative_to(ROOT)}: {mod}/'s \"May include\" is not the list this check enforces: "
                      f"{'everything' if ALLOWED[mod] is None else ', '.join(sorted(ALLOWED[mod])) or 'nothing'}")
    for f in sorted((SRC / mod).glob("*")):
        if f.suffix in (".c", ".h", ".cc") and f.name not in doc["files"]:
            errors.append(f"src/{mod}/{f.name}: no line in {MAP.relative_to(ROOT)} (one line per file, under {mod}/)")

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
