# Shared by the bench scripts: reading tools/bench's JSON and writing JSON.
# Sourced, not run.

# jfield JSON NAME: a top-level or nested field of the tool's one-line JSON.
jfield() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }

# json_str S: S as a JSON string.
json_str() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\n'/\\n}
	s=${s//$'\t'/\\t}
	s=${s//$'\r'/\\r}
	printf '"%s"' "$(tr -d '\000-\037' <<<"$s")"
}

# json_num V: V if it is a number, else null.
json_num() {
	if [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then printf '%s' "$1"; else printf 'null'; fi
}
