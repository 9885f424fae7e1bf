#!/usr/bin/env python3
"""Demotes `pub` items of kache's library to `pub(crate)` when no code outside the library names them.

Outside = tests/, benches/, fuzz/, loadtest/, sim/, schema/, src/main.rs, examples. Dry run unless --apply.
Names in scripts/pub-trim.keep stay `pub` too: the compiler asked for them (a `pub` item's signature or a
`pub use` names them, or a method is used only by tests). Usage: scripts/pub-trim.py . [--apply], then
`cargo clippy --workspace --all-targets -- -D warnings`; add what the compiler names to the keep file."""
import re, sys, pathlib, subprocess
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith('-') else '.')
apply = '--apply' in sys.argv
outside = []
for d in ['tests', 'benches', 'fuzz', 'loadtest', 'sim', 'schema', 'examples']:
    p = root / d
    if p.exists():
        outside += [f for f in p.rglob('*.rs') if 'target' not in f.parts]
outside.append(root / 'src/main.rs')
# fuzz includes lib sources by #[path]: those files' items are used as-is there; keep them pub
fuzz_lib = root / 'fuzz/src/lib.rs'
fuzz_paths = set()
if fuzz_lib.exists():
    for m in re.finditer(r'#\[path\s*=\s*"([^"]+)"\]', fuzz_lib.read_text()):
        fuzz_paths.add((fuzz_lib.parent / m.group(1)).resolve())
text_out = '\n'.join(f.read_text(errors='ignore') for f in outside if f.exists())
words_out = set(re.findall(r'[A-Za-z_][A-Za-z0-9_]*', text_out))
import os
keep_file = os.environ.get('PUBTRIM_KEEP', str(root / 'scripts/pub-trim.keep'))
if keep_file and os.path.exists(keep_file):
    words_out |= set(open(keep_file).read().split())
item = re.compile(r'^(\s*)pub (?:(async |const |unsafe )*)(fn|struct|enum|trait|type|const|static|mod|use) ')
name_re = re.compile(r'^\s*pub (?:(?:async|const|unsafe) )*(?:fn|struct|enum|trait|type|const|static|mod) +([A-Za-z_][A-Za-z0-9_]*)')
total = demoted = 0
for f in sorted((root / 'src').rglob('*.rs')):
    if f.name == 'main.rs' and f.parent.name == 'src':
        continue
    if f.resolve() in fuzz_paths:
        continue
    lines = f.read_text().split('\n')
    changed = False
    for i, l in enumerate(lines):
        if not item.match(l):
            continue
        total += 1
        if re.match(r'^\s*pub (mod|use) ', l):
            continue  # module tree and re-exports: keep
        m = name_re.match(l)
        if not m:
            continue
        if m.group(1) in words_out:
            continue
        lines[i] = l.replace('pub ', 'pub(crate) ', 1)
        demoted += 1
        changed = True
    if changed and apply:
        f.write_text('\n'.join(lines))
print(f'pub items scanned: {total}; demoted: {demoted}', file=sys.stderr)
