#!/bin/sh
# tests/scripts/state_edit.sh FILE KEY [VALUE] — a hand edit of a state
# file's header, as a person or a damaged disk would make it: metadata KEY
# set to VALUE (added when absent), or dropped without VALUE. VALUE is JSON
# string text: "\n" in it stays the two characters of JSON's escape. The
# header is rewritten with its new length (padded to 8) and, when it carries
# "header_crc32" (and KEY is not it), that checksum recomputed (the CRC-32 of the header bytes
# with its own 8 digits read as "00000000"), so the file is what a writer
# would have written with that metadata. The tensor bytes are kept.
set -e
file="$1"; key="$2"
v=$(printf '%s' "$3" | sed 's/[\\|&]/\\&/g') # as sed's replacement text
hlen=$(od -An -tu8 -N8 "$file" | tr -d ' ')
header=$(dd if="$file" bs=1 skip=8 count="$hlen" 2>/dev/null | sed 's/ *$//')
if [ $# -lt 3 ]; then
  h=$(printf '%s' "$header" | sed "s|,\"$key\":\"[^\"]*\"||; s|\"$key\":\"[^\"]*\",||")
elif printf '%s' "$header" | grep -q "\"$key\":\""; then
  h=$(printf '%s' "$header" | sed "s|\"$key\":\"[^\"]*\"|\"$key\":\"$v\"|")
else
  h=$(printf '%s' "$header" | sed "s|{\"__metadata__\":{|{\"__metadata__\":{\"$key\":\"$v\",|")
fi
while [ $(( ${#h} % 8 )) -ne 0 ]; do h="$h "; done

# u64le N: the 8 little-endian bytes of N
u64le() {
  i=0
  while [ $i -lt 8 ]; do
    # shellcheck disable=SC2059
    printf "\\$(printf %03o $(( ($1 >> (8 * i)) & 255 )))"
    i=$((i + 1))
  done
}
if [ "$key" != header_crc32 ] && printf '%s' "$h" | grep -q '"header_crc32":"'; then
  h=$(printf '%s' "$h" | sed 's|"header_crc32":"[^"]*"|"header_crc32":"00000000"|')
  while [ $(( ${#h} % 8 )) -ne 0 ]; do h="$h "; done
  # gzip's trailer holds the CRC-32 of its input, little-endian
  crc=$(printf '%s' "$h" | gzip -c | tail -c 8 | head -c 4 | od -An -tx1 | awk '{ print $4 $3 $2 $1 }')
  h=$(printf '%s' "$h" | sed "s|\"header_crc32\":\"00000000\"|\"header_crc32\":\"$crc\"|")
  while [ $(( ${#h} % 8 )) -ne 0 ]; do h="$h "; done
fi
tmp="$file.edit"
{ u64le ${#h}; printf '%s' "$h"; tail -c +$((9 + hlen)) "$file"; } > "$tmp"
mv "$tmp" "$file"
