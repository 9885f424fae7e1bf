#!/usr/bin/env python3
"""Summarises a `cargo test --no-fail-fast` log: one line per suite (passed, failed, ignored, skipped), the
failed tests by name, and every test that skipped for a missing tool with its reason.

    test-summary.py CARGO_TEST_LOG SKIP_LOG

Each failed test is followed by the first lines of its panic (from the `---- NAME stdout ----` section), so
that the summary alone says why it failed.

SKIP_LOG holds `<test name>\t<reason>` lines (tests/common/tools.rs writes them). The last line is
`summary: N passed, N failed, N skipped` (a skipped test also counts as passed in cargo's own figures: it
returned without checking). Exits 1 when a suite failed or a suite's result is missing (a crash or a build
error), 0 otherwise.
"""

import re
import sys
from collections import defaultdict

# How many lines of a failed test's panic the summary repeats.
PANIC_LINES = 12


def main() -> int:
    log_path, skip_path = sys.argv[1], sys.argv[2]
    suites = []  # (name, passed, failed, ignored)
    failed_tests = []
    panics = {}  # test name -> the first lines of its panic message
    current = None
    section = None  # the test whose `---- NAME stdout ----` section is being read
    result = re.compile(r"test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored")
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for line in log:
            line = line.rstrip("\n")
            m = re.match(r"---- (\S+) stdout ----", line)
            if m:
                section = m.group(1)
                continue
            if section and (line.startswith("failures:") or line.startswith("test result:")):
                section = None
            if section:
                lines = panics.setdefault(section, [])
                if "panicked at" in line or (lines and len(lines) < PANIC_LINES and line.strip()):
                    lines.append(line)
            m = re.match(r"\s*Running (\S+)(?: \((.*)\))?", line)
            if m:
                current = m.group(1)
                continue
            m = re.match(r"\s*Doc-tests (\S+)", line)
            if m:
                current = f"doc-tests {m.group(1)}"
                continue
            m = re.match(r"test (\S+) \.\.\. FAILED", line)
            if m:
                failed_tests.append(f"{current}: {m.group(1)}")
                continue
            m = result.search(line)
            if m and current:
                suites.append((current, int(m.group(2)), int(m.group(3)), int(m.group(4))))
                current = None
    compile_error = False
    with open(log_path, encoding="utf-8", errors="replace") as log:
        text = log.read()
        if re.search(r"^error(\[E\d+\])?: ", text, re.M) or "could not compile" in text:
            compile_error = True

    skips = defaultdict(list)
    try:
        with open(skip_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, why = line.rstrip("\n").partition("\t")
                skips[name].append(why)
    except FileNotFoundError:
        pass

    print()
    print("=" * 100)
    print(f"{'suite':<60} {'passed':>8} {'failed':>8} {'ignored':>8}")
    for name, passed, failed, ignored in suites:
        short = re.sub(r"-[0-9a-f]{16}$", "", name.split("/")[-1]) if "/" in name else name
        mark = "  FAILED" if failed else ""
        print(f"{short:<60} {passed:>8} {failed:>8} {ignored:>8}{mark}")
    total_passed = sum(s[1] for s in suites)
    total_failed = sum(s[2] for s in suites)
    total_ignored = sum(s[3] for s in suites)
    if failed_tests:
        print("\nfailed:")
        for t in failed_tests:
            print(f"  {t}")
            for line in panics.get(t.rsplit(": ", 1)[-1], []):
                print(f"      {line[:300]}")
    if skips:
        print(f"\nskipped (a tool is missing; KACHE_REQUIRE_TOOLS=1 makes these failures): {len(skips)}")
        for name in sorted(skips):
            for why in sorted(set(skips[name])):
                print(f"  {name}: {why}")
    if compile_error:
        print("\nbuild errors: see the log above (a suite that did not build has no line here)")
    print(f"\n{len(suites)} suites; {total_ignored} tests ignored by design (run with --ignored)")
    print(f"summary: {total_passed - len(skips)} passed, {total_failed} failed, {len(skips)} skipped")
    return 1 if total_failed or compile_error or not suites else 0


if __name__ == "__main__":
    sys.exit(main())
