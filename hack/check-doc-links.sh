#!/usr/bin/env bash
# Every relative Markdown link in README.md and docs/ must name a file or
# directory that exists (anchors and external URLs are not checked).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
while IFS= read -r md; do
	dir=$(dirname "$md")
	# ](target) links; strip an #anchor; skip URLs and pure anchors.
	while IFS= read -r target; do
		target=${target%%#*}
		case "$target" in ''|http://*|https://*|mailto:*) continue ;; esac
		if [ ! -e "$dir/$target" ]; then
			echo "$md: broken link: $target" >&2
			status=1
		fi
	done < <(grep -o '\](\([^)]*\))' "$md" | sed 's/^](\(.*\))$/\1/')
done < <(find README.md docs test -name '*.md' -not -path '*/testdata/*' 2>/dev/null)
exit $status
