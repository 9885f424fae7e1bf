#!/bin/sh
# Layout figures of the kache crate: lines per top-level module, the largest files, `pub` items
# and test functions. Usage: scripts/layout-stats.sh [repo-root]
cd "${1:-$(dirname "$0")/..}" || exit 1
echo "lines per top-level module (src/):"
for m in $(ls src | sed 's/\.rs$//' | sort -u); do
  n=$(find "src/$m" "src/$m.rs" -name '*.rs' 2>/dev/null | xargs cat 2>/dev/null | wc -l)
  printf '  %-10s %6d\n' "$m" "$n"
done
echo "largest files:"
find src -name '*.rs' | xargs wc -l | grep -v ' total$' | sort -rn | head -10 | sed 's/^/  /'
printf 'pub items: %s, pub(crate) items: %s\n' \
  "$(grep -rhE '^\s*pub (async )?(fn|struct|enum|trait|type|const|static|mod|use) ' src | wc -l)" \
  "$(grep -rhE '^\s*pub\((crate|super)\) ' src | wc -l)"
printf 'test functions: src %s, tests %s\n' \
  "$(grep -rhE '#\[(tokio::)?test' src | wc -l)" "$(grep -rhE '#\[(tokio::)?test' tests | wc -l)"
