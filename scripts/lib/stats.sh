# Shared by the bench scripts: figures of repeated rounds. Sourced, not run.

# median "V1 V2 ...": the middle value (mean of the middle two), empty for none.
median() {
	tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g |
		awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

# spread "V1 V2 ...": " (min–max)" of two or more values, rounded.
spread() {
	tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g |
		awk '{ v[NR] = $1 } END { if (NR > 1) printf " (%.0f–%.0f)", v[1], v[NR] }'
}

# ratio A B: A/B to two decimals, or n/a.
ratio() {
	if [ -z "$1" ] || [ -z "$2" ] || [ "$2" = 0 ] || [ "$2" = 0.00 ]; then
		echo "n/a"
	else
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'
	fi
}
